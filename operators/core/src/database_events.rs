//! Listening to the databases themselves: one task per member of every followed cluster, each
//! holding a connection open to the member's own notification (a Sentinel's `+switch-master`
//! subscription, an etcd watch that the member ends when it loses its leader) and waking the
//! cluster's pass ([`crate::wakeups`]) when something happens or the connection breaks.
//!
//! An engine says how to hold one connection ([`Listen`]); this module keeps one set of tasks
//! per cluster, replaces them when the members or the login change, opens a broken connection
//! again with a growing delay (and wakes the pass once it is back, since something may have
//! happened meanwhile), and drops clusters no pass has followed for a while. A wake is a hint:
//! the pass observes everything afresh, and the scheduled pass stays the safety net for whatever
//! a listener misses.
//!
//! A connection that breaks after it opened is also a time: the moment the member was heard
//! failing ([`DatabaseEvents::broken_since`]). A pass that runs late (a loaded machine, a queue
//! of passes) dates the failure from there rather than from its own sight of it.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt::{Debug, Display},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use crate::{
    runner::RetryPolicy,
    wakeups::{ObjectKey, Wakeups},
};

/// How the listeners behave.
#[derive(Clone, Copy, Debug)]
pub struct ListenSettings {
    /// Bounds a connection, a subscription and a link check.
    pub timeout: Duration,
    /// How often a quiet connection is checked.
    pub keepalive: Duration,
    /// The longest wait before a broken connection is opened again.
    pub max_retry_delay: Duration,
    /// A cluster no pass has followed for this long is taken for deleted: its listeners end at
    /// their next failure (or at the next pass of any cluster).
    pub expiry: Duration,
}

impl Default for ListenSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(5),
            keepalive: Duration::from_secs(30),
            max_retry_delay: Duration::from_secs(30),
            expiry: Duration::from_secs(600),
        }
    }
}

/// What one listener's connection reports to its cluster's pass.
pub struct Notify<'a> {
    cluster: &'a ObjectKey,
    wakeups: &'a Wakeups,
    reopened: bool,
    /// Set once the connection opened: a break after that starts the delays afresh.
    was_opened: &'a std::sync::atomic::AtomicBool,
    broken: &'a Mutex<Option<Broken>>,
}

impl Notify<'_> {
    /// The connection is open. After a broken one, this wakes the pass: what happened while it
    /// was broken went unheard.
    pub fn opened(&self) {
        self.was_opened.store(true, std::sync::atomic::Ordering::Relaxed);
        *self.broken.lock().expect("broken lock") = None;
        if self.reopened {
            self.wakeups.wake(self.cluster.clone());
        }
    }

    /// Something happened that the pass should look at now.
    pub fn wake(&self) {
        self.wakeups.wake(self.cluster.clone());
    }

    pub fn cluster(&self) -> &ObjectKey {
        self.cluster
    }
}

/// How to hold one member's notification connection open.
pub trait Listen: Send + Sync + 'static {
    /// Where one listener connects: a member's address.
    type Target: Clone + Ord + Debug + Display + Send + Sync + 'static;
    /// What a cluster's listeners log in with (credentials, TLS material).
    type Login: Clone + Send + Sync + 'static;

    /// Whether two logins are the same; a changed login replaces the cluster's listeners.
    fn same_login(a: &Self::Login, b: &Self::Login) -> bool;

    /// Connects to `target`, calls [`Notify::opened`] once the connection is open and
    /// [`Notify::wake`] on every event, until the connection breaks; returns why it broke.
    fn listen(
        &self,
        target: &Self::Target,
        login: &Self::Login,
        settings: ListenSettings,
        notify: Notify<'_>,
    ) -> impl Future<Output = String> + Send;
}

/// The listeners of every cluster this operator follows.
pub struct DatabaseEvents<L: Listen> {
    listen: Arc<L>,
    wakeups: Wakeups,
    settings: ListenSettings,
    followed: Mutex<HashMap<ObjectKey, Followed<L>>>,
    /// Ends every listener when the operator's state is dropped.
    stop: CancellationToken,
}

struct Followed<L: Listen> {
    targets: BTreeSet<L::Target>,
    login: L::Login,
    last_followed: Arc<Mutex<Instant>>,
    /// Each target's connection break not yet mended.
    broken: BTreeMap<L::Target, Arc<Mutex<Option<Broken>>>>,
    stop: CancellationToken,
}

/// When a connection that had opened broke: as a time for status, and as an instant to compare
/// with an observation's.
#[derive(Clone, Copy, Debug)]
struct Broken {
    at: Timestamp,
    instant: Instant,
}

impl<L: Listen> Drop for DatabaseEvents<L> {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl<L: Listen> DatabaseEvents<L> {
    pub fn new(listen: L, wakeups: Wakeups, settings: ListenSettings) -> Self {
        Self {
            listen: Arc::new(listen),
            wakeups,
            settings,
            followed: Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
        }
    }

    /// What the listeners wake: the cluster controller's pass.
    pub fn wakeups(&self) -> Wakeups {
        self.wakeups.clone()
    }

    /// Listens to `cluster`'s members at `targets` (called by every pass). Listeners already
    /// open to the same members with the same login are kept; a changed set or login replaces
    /// them. Clusters no pass has followed within the expiry are dropped.
    pub fn follow(&self, cluster: ObjectKey, targets: BTreeSet<L::Target>, login: L::Login) {
        self.follow_at(cluster, targets, login, Instant::now());
    }

    fn follow_at(&self, cluster: ObjectKey, targets: BTreeSet<L::Target>, login: L::Login, now: Instant) {
        let mut followed = self.followed.lock().expect("followed lock");
        let expiry = self.settings.expiry;
        followed.retain(|key, entry| {
            let last = *entry.last_followed.lock().expect("last followed");
            let live = *key == cluster || now.saturating_duration_since(last) < expiry;
            if !live {
                tracing::info!(cluster = %key, "no longer listening to its members: not reconciled for {expiry:?}");
                entry.stop.cancel();
            }
            live
        });
        if let Some(entry) = followed.get(&cluster)
            && entry.targets == targets
            && L::same_login(&entry.login, &login)
        {
            *entry.last_followed.lock().expect("last followed") = now;
            return;
        }
        if let Some(previous) = followed.remove(&cluster) {
            previous.stop.cancel();
        }
        if targets.is_empty() {
            return;
        }
        let stop = self.stop.child_token();
        let last_followed = Arc::new(Mutex::new(now));
        let mut broken = BTreeMap::new();
        for target in &targets {
            let target_broken = Arc::new(Mutex::new(None));
            broken.insert(target.clone(), target_broken.clone());
            tokio::spawn(run(Listener {
                listen: self.listen.clone(),
                cluster: cluster.clone(),
                target: target.clone(),
                login: login.clone(),
                wakeups: self.wakeups.clone(),
                settings: self.settings,
                last_followed: last_followed.clone(),
                broken: target_broken,
                stop: stop.clone(),
            }));
        }
        tracing::debug!(%cluster, ?targets, "listening to the members' own events");
        followed.insert(
            cluster,
            Followed {
                targets,
                login,
                last_followed,
                broken,
                stop,
            },
        );
    }

    /// Ends `cluster`'s listeners (the cluster is gone).
    pub fn forget(&self, cluster: &ObjectKey) {
        if let Some(entry) = self.followed.lock().expect("followed lock").remove(cluster) {
            entry.stop.cancel();
        }
    }

    /// The targets of `cluster` whose connection broke after it had opened, has not opened
    /// again, and was not seen healthy since ([`Self::seen_healthy`]), each with when it broke.
    pub fn broken_since(&self, cluster: &ObjectKey) -> BTreeMap<L::Target, Timestamp> {
        let followed = self.followed.lock().expect("followed lock");
        let Some(entry) = followed.get(cluster) else {
            return BTreeMap::new();
        };
        entry
            .broken
            .iter()
            .filter_map(|(target, broken)| {
                Some((target.clone(), broken.lock().expect("broken lock").as_ref()?.at))
            })
            .collect()
    }

    /// A pass saw `target` healthy in an observation made at `observed_at`: a break heard before
    /// that is over, even while the connection has not opened again yet (its retry delay).
    pub fn seen_healthy(&self, cluster: &ObjectKey, target: &L::Target, observed_at: Instant) {
        let followed = self.followed.lock().expect("followed lock");
        if let Some(broken) = followed.get(cluster).and_then(|entry| entry.broken.get(target)) {
            let mut broken = broken.lock().expect("broken lock");
            if broken.is_some_and(|b| b.instant <= observed_at) {
                *broken = None;
            }
        }
    }

    /// How many clusters are followed.
    pub fn len(&self) -> usize {
        self.followed.lock().expect("followed lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One member's listener task.
struct Listener<L: Listen> {
    listen: Arc<L>,
    cluster: ObjectKey,
    target: L::Target,
    login: L::Login,
    wakeups: Wakeups,
    settings: ListenSettings,
    last_followed: Arc<Mutex<Instant>>,
    broken: Arc<Mutex<Option<Broken>>>,
    stop: CancellationToken,
}

impl<L: Listen> Listener<L> {
    fn expired(&self) -> bool {
        self.last_followed.lock().expect("last followed").elapsed() >= self.settings.expiry
    }
}

async fn run<L: Listen>(listener: Listener<L>) {
    let mut failures: u32 = 0;
    loop {
        let was_opened = std::sync::atomic::AtomicBool::new(false);
        let notify = Notify {
            cluster: &listener.cluster,
            wakeups: &listener.wakeups,
            reopened: failures > 0,
            was_opened: &was_opened,
            broken: &listener.broken,
        };
        let why = tokio::select! {
            () = listener.stop.cancelled() => return,
            why = listener.listen.listen(&listener.target, &listener.login, listener.settings, notify) => why,
        };
        // A connection that opened and then broke waits the shortest delay: the breaks of a
        // long-lived process (every leader loss is one) do not add up to the longest.
        failures = if was_opened.into_inner() {
            *listener.broken.lock().expect("broken lock") = Some(Broken {
                at: Timestamp::now(),
                instant: Instant::now(),
            });
            1
        } else {
            failures.saturating_add(1)
        };
        if listener.expired() {
            return;
        }
        tracing::debug!(
            cluster = %listener.cluster,
            member = %listener.target,
            %why,
            "listener broken; opening it again"
        );
        let delay = RetryPolicy {
            first: Duration::from_millis(500),
            max: listener.settings.max_retry_delay,
        }
        .delay(failures);
        tokio::select! {
            () = listener.stop.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use tokio::sync::mpsc;

    use super::*;

    /// A member that breaks each connection at once, with one event on the first only. Sends
    /// the login of each connection.
    struct OneEventThenBreak {
        connections: mpsc::UnboundedSender<Option<String>>,
        first: std::sync::atomic::AtomicBool,
    }

    impl Listen for OneEventThenBreak {
        type Target = String;
        type Login = Option<String>;

        fn same_login(a: &Self::Login, b: &Self::Login) -> bool {
            a == b
        }

        async fn listen(
            &self,
            _target: &String,
            login: &Option<String>,
            _settings: ListenSettings,
            notify: Notify<'_>,
        ) -> String {
            let _ = self.connections.send(login.clone());
            notify.opened();
            if self.first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                notify.wake();
            }
            "closed by the member".into()
        }
    }

    /// Nothing answers: every attempt fails.
    struct Unreachable;

    impl Listen for Unreachable {
        type Target = String;
        type Login = Option<String>;

        fn same_login(a: &Self::Login, b: &Self::Login) -> bool {
            a == b
        }

        async fn listen(&self, _: &String, _: &Option<String>, _: ListenSettings, _: Notify<'_>) -> String {
            "connection refused".into()
        }
    }

    /// Member `up-then-down` opens its first connection and closes it, then refuses every
    /// other; member `down` refuses all. Sends each attempt's target.
    struct OpensOnceThenRefuses {
        attempts: mpsc::UnboundedSender<String>,
        opened: std::sync::atomic::AtomicBool,
    }

    impl Listen for OpensOnceThenRefuses {
        type Target = String;
        type Login = Option<String>;

        fn same_login(a: &Self::Login, b: &Self::Login) -> bool {
            a == b
        }

        async fn listen(
            &self,
            target: &String,
            _: &Option<String>,
            _: ListenSettings,
            notify: Notify<'_>,
        ) -> String {
            let _ = self.attempts.send(target.clone());
            if target == "up-then-down" && !self.opened.swap(true, std::sync::atomic::Ordering::SeqCst) {
                notify.opened();
                return "closed by the member".into();
            }
            "connection refused".into()
        }
    }

    fn settings() -> ListenSettings {
        ListenSettings {
            timeout: Duration::from_millis(100),
            ..ListenSettings::default()
        }
    }

    #[tokio::test]
    async fn a_cluster_is_followed_once_and_forgotten() {
        let events = DatabaseEvents::new(Unreachable, Wakeups::new(), settings());
        let cluster = ObjectKey::new("team-a", "cache");
        let members: BTreeSet<String> = ["cache-0".to_string()].into();
        events.follow(cluster.clone(), members.clone(), None);
        events.follow(cluster.clone(), members, None);
        assert_eq!(events.len(), 1);
        events.forget(&cluster);
        assert!(events.is_empty());
    }

    #[tokio::test]
    async fn clusters_not_followed_within_the_expiry_are_dropped() {
        let events = DatabaseEvents::new(Unreachable, Wakeups::new(), settings());
        let members: BTreeSet<String> = ["m-0".to_string()].into();
        let start = Instant::now();
        events.follow_at(ObjectKey::new("team-a", "gone"), members.clone(), None, start);
        events.follow_at(ObjectKey::new("team-a", "live"), members.clone(), None, start);
        let later = start + settings().expiry;
        events.follow_at(ObjectKey::new("team-a", "live"), members, None, later);
        assert_eq!(
            events.len(),
            1,
            "the cluster not followed for the expiry is dropped"
        );
    }

    #[tokio::test]
    async fn an_event_wakes_the_pass_and_a_reopened_connection_wakes_it_again() {
        let wakeups = Wakeups::new();
        let mut woken = Box::pin(wakeups.stream::<ConfigMap>(None));
        let (connections, mut connected) = mpsc::unbounded_channel();
        let events = DatabaseEvents::new(
            OneEventThenBreak {
                connections,
                first: true.into(),
            },
            wakeups,
            settings(),
        );
        events.follow(
            ObjectKey::new("team-a", "main"),
            ["main-0".to_string()].into(),
            None,
        );
        // The first connection's event, then one wake per connection opened again (the only
        // other source of wakes).
        for _ in 0..3 {
            let object = tokio::time::timeout(Duration::from_secs(10), woken.next())
                .await
                .expect("woken within the retry delay")
                .expect("wakeups open");
            assert_eq!(object.name, "main");
        }
        // A login change replaces the listener: a new connection is made at once.
        events.follow(
            ObjectKey::new("team-a", "main"),
            ["main-0".to_string()].into(),
            Some("new password".into()),
        );
        let with_new_login = async {
            while let Some(login) = connected.recv().await {
                if login.as_deref() == Some("new password") {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), with_new_login)
            .await
            .expect("the listener with the new login connects");
    }

    #[tokio::test]
    async fn a_connection_that_opened_and_broke_dates_the_failure_until_a_pass_sees_the_member_healthy() {
        let (attempts, mut attempted) = mpsc::unbounded_channel();
        let events = DatabaseEvents::new(
            OpensOnceThenRefuses {
                attempts,
                opened: false.into(),
            },
            Wakeups::new(),
            settings(),
        );
        let cluster = ObjectKey::new("team-a", "main");
        let before = Instant::now();
        let start = Timestamp::now();
        events.follow(
            cluster.clone(),
            ["up-then-down".to_string(), "down".to_string()].into(),
            None,
        );
        // A second attempt at each comes after its first broke (and its break was recorded).
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        while seen.len() < 2 || seen.values().any(|n| *n < 2) {
            let target = tokio::time::timeout(Duration::from_secs(10), attempted.recv())
                .await
                .expect("each member tried again within the retry delay")
                .expect("listener running");
            *seen.entry(target).or_default() += 1;
        }
        let broken = events.broken_since(&cluster);
        assert_eq!(
            broken.keys().collect::<Vec<_>>(),
            ["up-then-down"],
            "only a connection that had opened has a break to date"
        );
        let at = broken["up-then-down"];
        assert!(start <= at && at <= Timestamp::now(), "{at} after {start}");

        events.seen_healthy(&cluster, &"up-then-down".to_string(), before);
        assert_eq!(
            events.broken_since(&cluster).len(),
            1,
            "seen healthy before it broke: the break stands"
        );
        events.seen_healthy(&cluster, &"up-then-down".to_string(), Instant::now());
        assert!(
            events.broken_since(&cluster).is_empty(),
            "seen healthy since: the break is over"
        );
        assert!(events.broken_since(&ObjectKey::new("team-a", "other")).is_empty());
    }
}
