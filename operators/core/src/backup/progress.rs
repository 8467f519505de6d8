//! How far a backup run has got, in its resource's `status.progress` while it streams: the
//! bytes its sink has sent and the average rate since it started. A run's outcome never rests
//! on these figures; they are for the people watching a long backup.

use std::{future::Future, time::Duration};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, Client, ResourceExt};
use tokio::time::Instant;

use super::BackupSink;
use crate::{crd::BackupProgress, status::merge_status_of};

/// How often a run in progress reports how far it has got.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// The figures of a run that has sent `bytes` in `elapsed`, taken at `now`.
pub fn progress(bytes: u64, elapsed: Duration, now: Timestamp) -> BackupProgress {
    let seconds = elapsed.as_secs_f64();
    BackupProgress {
        bytes,
        bytes_per_second: if seconds > 0.0 {
            (bytes as f64 / seconds) as u64
        } else {
            0
        },
        updated_at: Time(now),
    }
}

/// Runs `work` while writing, every `every`, how many bytes `sink` has sent into `backup`'s
/// `status.progress` (that field alone), whenever the figure changed. A report that fails is
/// logged and the run goes on. The reports go to `backup` itself: once it is gone, or another
/// backup was created under its name, they stop (the run is not the new backup's).
pub async fn reporting<K, F>(
    client: &Client,
    backup: &K,
    sink: &BackupSink,
    every: Duration,
    work: F,
) -> F::Output
where
    K: crate::cache::Cacheable,
    F: Future,
{
    let namespace = backup.namespace().unwrap_or_default();
    let name = backup.name_any();
    let api: Api<K> = Api::namespaced(client.clone(), &namespace);
    let started = Instant::now();
    let report = async {
        let mut reported = 0;
        // The version last written: the next report names it, and is bound to `backup` by uid
        // when the API server holds another.
        let mut version = backup.resource_version();
        loop {
            tokio::time::sleep(every).await;
            let bytes = sink.bytes_sent();
            if bytes == reported {
                continue;
            }
            let figures = progress(bytes, started.elapsed(), Timestamp::now());
            let patch = serde_json::json!({ "status": { "progress": figures } });
            match merge_status_of(&api, backup, version.take(), &patch).await {
                Ok(Some(written)) => {
                    reported = bytes;
                    version = written.resource_version();
                }
                Ok(None) => {
                    tracing::info!(backup = %name, %namespace, "the backup is gone or was created again: no more progress reports");
                    std::future::pending::<()>().await;
                }
                Err(error) => tracing::warn!(backup = %name, %namespace, %error, "reporting progress"),
            }
        }
    };
    tokio::select! {
        biased;
        output = work => output,
        () = report => unreachable!("the progress reports go on, or wait, until the run ends"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_the_average_since_the_run_started() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let figures = progress(10 * 1024 * 1024, Duration::from_secs(4), now);
        assert_eq!(figures.bytes, 10 * 1024 * 1024);
        assert_eq!(figures.bytes_per_second, 2_621_440);
        assert_eq!(figures.updated_at, Time(now));
        assert_eq!(progress(5, Duration::ZERO, now).bytes_per_second, 0);
    }
}
