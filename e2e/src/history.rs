//! A client history for fault, restart and scaling tests: a writer records each write's
//! invocation and completion, and at the end every acknowledged write must still be readable
//! (or superseded by a later acknowledged write of the same key), and no read may return a value
//! that was never written.
//!
//! The writer is engine-neutral: a test hands it a closure that performs one write. Loops are
//! bounded in count and time.

use std::{
    collections::BTreeMap,
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::{sync::watch, task::JoinHandle};

/// One write as the client saw it.
#[derive(Clone, Debug)]
pub struct Operation {
    pub key: String,
    pub value: String,
    pub invoked: Instant,
    /// When the write was acknowledged; `None` when it failed or timed out (its outcome is
    /// unknown: it may or may not have been applied).
    pub acknowledged: Option<Instant>,
}

/// The operations of one writer, in invocation order.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub operations: Vec<Operation>,
}

impl History {
    /// The acknowledged writes.
    pub fn acknowledged(&self) -> impl Iterator<Item = &Operation> {
        self.operations
            .iter()
            .filter(|operation| operation.acknowledged.is_some())
    }

    /// Checks the history against what the database holds now (`read(key)` for every key written):
    /// returns the number of acknowledged writes checked, or every violation found.
    pub fn check(&self, now: &BTreeMap<String, Option<String>>) -> Result<usize, Vec<String>> {
        let mut violations = Vec::new();
        let mut checked = 0;
        let mut by_key: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
        for operation in &self.operations {
            by_key.entry(operation.key.as_str()).or_default().push(operation);
        }
        for (key, operations) in by_key {
            let held = now.get(key).cloned().flatten();
            if let Some(value) = &held
                && !operations.iter().any(|operation| &operation.value == value)
            {
                violations.push(format!("{key} holds {value:?}, which no write wrote"));
            }
            // The last acknowledged write of the key, or anything invoked after it (a later write
            // whose outcome is unknown may have replaced it), must be what the key holds.
            let Some(last) = operations
                .iter()
                .rposition(|operation| operation.acknowledged.is_some())
            else {
                continue;
            };
            checked += 1;
            let allowed: Vec<&str> = operations[last..]
                .iter()
                .map(|operation| operation.value.as_str())
                .collect();
            match &held {
                Some(value) if allowed.contains(&value.as_str()) => {}
                other => violations.push(format!(
                    "{key}: acknowledged write of {:?} lost (holds {other:?})",
                    operations[last].value
                )),
            }
        }
        if violations.is_empty() {
            Ok(checked)
        } else {
            Err(violations)
        }
    }
}

/// A writer running in the background: write `prefix/<n>` = `v<n>` every `interval`, for at most
/// `max_writes` writes or until stopped.
pub struct Writer {
    stop: watch::Sender<bool>,
    task: JoinHandle<History>,
    acknowledged: Arc<AtomicUsize>,
}

impl Writer {
    /// Starts writing with `write(key, value)`, which returns whether the write was acknowledged.
    pub fn start<W, F>(prefix: &str, interval: Duration, max_writes: usize, write: W) -> Self
    where
        W: Fn(String, String) -> F + Send + 'static,
        F: Future<Output = bool> + Send,
    {
        let (stop, mut stopped) = watch::channel(false);
        let prefix = prefix.to_string();
        let acknowledged_count = Arc::new(AtomicUsize::new(0));
        let counted = acknowledged_count.clone();
        let task = tokio::spawn(async move {
            let mut history = History::default();
            for n in 0..max_writes {
                if *stopped.borrow() {
                    break;
                }
                let (key, value) = (format!("{prefix}/{n:06}"), format!("v{n}"));
                let invoked = Instant::now();
                let acknowledged = write(key.clone(), value.clone()).await.then(Instant::now);
                if acknowledged.is_some() {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
                history.operations.push(Operation {
                    key,
                    value,
                    invoked,
                    acknowledged,
                });
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = stopped.changed() => {}
                }
            }
            history
        });
        Self {
            stop,
            task,
            acknowledged: acknowledged_count,
        }
    }

    /// How many writes were acknowledged so far.
    pub fn acknowledged(&self) -> usize {
        self.acknowledged.load(Ordering::Relaxed)
    }

    /// Waits until at least `count` writes were acknowledged: the writer reaches the database
    /// (before a fault, so there is a history to lose, and after it, so it serves again).
    pub async fn acknowledged_at_least(&self, count: usize, timeout: Duration) {
        self.acknowledged_within(count, timeout)
            .await
            .unwrap_or_else(|failure| panic!("{failure}"));
    }

    /// As [`Writer::acknowledged_at_least`], but a timeout is an error, for callers that must
    /// clean up after a failure rather than panic.
    pub async fn acknowledged_within(&self, count: usize, timeout: Duration) -> Result<(), String> {
        crate::wait::within(&format!("{count} writes acknowledged"), timeout, || async {
            let now = self.acknowledged();
            (now >= count).then_some(()).ok_or(format!("{now} so far"))
        })
        .await
    }

    /// Stops the writer and returns its history.
    pub async fn stop(self) -> History {
        let _ = self.stop.send(true);
        self.task.await.expect("the writer task")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operation(key: &str, value: &str, acknowledged: bool) -> Operation {
        let now = Instant::now();
        Operation {
            key: key.into(),
            value: value.into(),
            invoked: now,
            acknowledged: acknowledged.then_some(now),
        }
    }

    fn held(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.map(str::to_string)))
            .collect()
    }

    #[test]
    fn acknowledged_writes_must_be_held_unknown_ones_may_be_either() {
        let history = History {
            operations: vec![
                operation("a", "1", true),
                operation("b", "1", false),
                operation("c", "1", true),
                operation("c", "2", false),
            ],
        };
        assert_eq!(
            history.check(&held(&[("a", Some("1")), ("b", None), ("c", Some("2"))])),
            Ok(2)
        );
        assert_eq!(
            history.check(&held(&[("a", Some("1")), ("b", Some("1")), ("c", Some("1"))])),
            Ok(2)
        );
        let lost = history
            .check(&held(&[("a", None), ("b", None), ("c", Some("1"))]))
            .unwrap_err();
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert!(
            lost[0].contains("a: acknowledged write of \"1\" lost"),
            "{lost:?}"
        );
    }

    #[test]
    fn a_value_never_written_is_a_violation() {
        let history = History {
            operations: vec![operation("a", "1", false)],
        };
        let invented = history.check(&held(&[("a", Some("9"))])).unwrap_err();
        assert!(invented[0].contains("which no write wrote"), "{invented:?}");
    }

    #[tokio::test]
    async fn the_writer_is_bounded_in_count_and_stops_on_request() {
        let writer = Writer::start("k", Duration::from_millis(1), 5, |_, _| async { true });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let history = writer.stop().await;
        assert_eq!(history.operations.len(), 5);
        assert_eq!(history.acknowledged().count(), 5);
        let stopped = Writer::start("k", Duration::from_secs(60), 1_000, |_, _| async { true });
        let history = stopped.stop().await;
        assert!(history.operations.len() <= 1, "{:?}", history.operations);
    }
}
