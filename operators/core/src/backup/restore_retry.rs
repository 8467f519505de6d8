//! A restore that fails is tried again, but not at once: loading a backup reads every byte of
//! its snapshot (and of its archived log), so a backup that cannot be loaded (an altered
//! object, a refused entry, credentials that do not work) must not be fetched again on every
//! pass. The failures in a row are kept in the cluster's status with when the next attempt may
//! start, twice as late after each failure, from [`FIRST_WAIT`] up to [`LONGEST_WAIT`].

use std::time::Duration;

use jiff::{RoundMode, Timestamp, TimestampRound, Unit};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The wait after a first failure.
pub const FIRST_WAIT: Duration = Duration::from_secs(10);
/// The longest wait: a fault a person fixed (a Secret, an object put back) is picked up within
/// it.
pub const LONGEST_WAIT: Duration = Duration::from_secs(600);

/// Restore attempts that failed in a row, kept in the cluster's status until one succeeds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailedRestores {
    /// Failed attempts in a row.
    pub attempts: u32,
    /// When the last one failed.
    pub last_failed_at: Time,
    /// No attempt starts before then.
    pub next_attempt_at: Time,
    /// Why the last one failed, and when the next is made: what the cluster's condition says
    /// while it waits.
    pub message: String,
}

impl FailedRestores {
    /// The record after an attempt failed at `now` with `why`, following `previous`. Times are
    /// whole seconds, as the status stores them, rounded up: no attempt starts before the time
    /// the message names.
    pub fn after(previous: Option<&Self>, now: Timestamp, why: &str) -> Self {
        let whole_second = TimestampRound::new().smallest(Unit::Second).mode(RoundMode::Ceil);
        let now = now.round(whole_second).unwrap_or(now);
        let attempts = previous.map_or(0, |previous| previous.attempts).saturating_add(1);
        let next = now + wait_after(attempts);
        Self {
            attempts,
            last_failed_at: Time(now),
            next_attempt_at: Time(next),
            message: format!(
                "{why} (failed {attempts} time{} in a row; the next attempt is not before {next})",
                if attempts == 1 { "" } else { "s" }
            ),
        }
    }

    /// Whether an attempt must not start at `now`.
    pub fn waits_at(&self, now: Timestamp) -> bool {
        now < self.next_attempt_at.0
    }

    /// The record in a cluster's status while the next attempt must wait at `now`.
    pub fn waiting(record: Option<&Self>, now: Timestamp) -> Option<&Self> {
        record.filter(|failed| failed.waits_at(now))
    }

    /// Counts an attempt that failed at `now` with `why` in a cluster's `record`; returns what
    /// the cluster reports, now and while it waits.
    pub fn record_failure(record: &mut Option<Self>, now: Timestamp, why: &str) -> String {
        let failed = Self::after(record.as_ref(), now, why);
        let message = failed.message.clone();
        *record = Some(failed);
        message
    }
}

/// The wait after the `attempts`-th failure in a row.
pub fn wait_after(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    FIRST_WAIT.saturating_mul(1 << doublings).min(LONGEST_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_in_a_row_doubles_the_wait_up_to_ten_minutes() {
        let waits: Vec<u64> = (1..=8).map(|attempts| wait_after(attempts).as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 600, 600]);
        assert_eq!(wait_after(u32::MAX), LONGEST_WAIT);
    }

    #[test]
    fn a_failure_is_counted_and_says_when_the_next_attempt_is() {
        let now: Timestamp = "2026-12-02T06:00:00Z".parse().unwrap();
        let first = FailedRestores::after(None, now, "the piece's SHA-256 differs");
        assert_eq!(first.attempts, 1);
        assert_eq!(first.next_attempt_at.0, now + Duration::from_secs(10));
        assert_eq!(
            first.message,
            "the piece's SHA-256 differs (failed 1 time in a row; the next attempt is not before 2026-12-02T06:00:10Z)"
        );
        assert!(first.waits_at(now + Duration::from_secs(9)));
        assert!(!first.waits_at(now + Duration::from_secs(10)));

        let later = now + Duration::from_millis(12_300);
        let second = FailedRestores::after(Some(&first), later, "again");
        assert_eq!(second.attempts, 2);
        let (failed_at, next): (Timestamp, Timestamp) = (
            "2026-12-02T06:00:13Z".parse().unwrap(),
            "2026-12-02T06:00:33Z".parse().unwrap(),
        );
        assert_eq!(
            (second.last_failed_at.0, second.next_attempt_at.0),
            (failed_at, next),
            "whole seconds, rounded up"
        );
        assert!(
            second.message.ends_with("not before 2026-12-02T06:00:33Z)"),
            "{}",
            second.message
        );
        assert!(
            second.message.contains("failed 2 times in a row"),
            "{}",
            second.message
        );

        // As a cluster's status keeps it: counted in place, waiting until its time.
        let mut record = None;
        let message = FailedRestores::record_failure(&mut record, now, "the piece's SHA-256 differs");
        assert_eq!((record.as_ref(), message), (Some(&first), first.message.clone()));
        assert_eq!(FailedRestores::waiting(record.as_ref(), now), Some(&first));
        assert_eq!(
            FailedRestores::waiting(record.as_ref(), now + Duration::from_secs(10)),
            None
        );
    }
}
