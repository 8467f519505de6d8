//! When backups are due, and when the newest one is too old.

use jiff::{Timestamp, tz::TimeZone};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::{
    conditions::{ConditionUpdate, set_condition},
    crd::{BackupPhase, BackupPolicy, BackupRecord},
};

/// The type of a cluster's condition saying its newest backup is too old.
pub const BACKUP_STALE: &str = "BackupStale";

/// A schedule that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    /// Not a five-field cron expression croner accepts.
    #[error("invalid schedule {schedule:?}: {reason}")]
    Invalid { schedule: String, reason: String },
    /// A valid expression that never fires after the given time (`0 0 30 2 *`).
    #[error("schedule {schedule:?} never fires after {after}")]
    NeverFires { schedule: String, after: Timestamp },
}

/// The first time strictly after `after` that the five-field cron `schedule` (minute hour
/// day-of-month month day-of-week, UTC) fires. Vixie-cron semantics: when both day fields are
/// restricted, either matching suffices. Exactly what the CRDs' schedule rule admits
/// ([`crate::crd::validation::schedule_admitted`]): each field `*`, a value within the field's range
/// (names `JAN`-`DEC`, `SUN`-`SAT` too), a range or a list, each with an optional step; not
/// `L`, `W`, `#`, `?`, seconds, years or `@` nicknames.
///
/// # Errors
/// [`ScheduleError::Invalid`] for anything but five valid fields; [`ScheduleError::NeverFires`]
/// for a schedule with no occurrence (croner gives up after searching years ahead).
pub fn next_due(schedule: &str, after: Timestamp) -> Result<Timestamp, ScheduleError> {
    let invalid = |reason: String| ScheduleError::Invalid {
        schedule: schedule.to_string(),
        reason,
    };
    let fields = schedule.split_whitespace().count();
    if fields != 5 {
        return Err(invalid(format!("{fields} fields, expected 5")));
    }
    if !crate::crd::validation::schedule_admitted(schedule) {
        return Err(invalid(
            "a field is out of its range or uses a syntax the schedule rule does not admit".to_string(),
        ));
    }
    let cron = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(schedule)
        .map_err(|error| invalid(error.to_string()))?;
    let start = after.to_zoned(TimeZone::UTC);
    cron.find_next_occurrence(&start, false)
        .map(|next| next.timestamp())
        .map_err(|_| ScheduleError::NeverFires {
            schedule: schedule.to_string(),
            after,
        })
}

/// The longest time between two consecutive runs of `schedule` among its next `runs` runs
/// after `after`: what a log archived only at each run must outlast on the server (a weekday
/// schedule's weekend, a monthly schedule's longest month).
///
/// # Errors
/// [`ScheduleError`] from [`next_due`].
pub fn longest_interval(
    schedule: &str,
    after: Timestamp,
    runs: usize,
) -> Result<jiff::SignedDuration, ScheduleError> {
    let mut previous = next_due(schedule, after)?;
    let mut longest = jiff::SignedDuration::ZERO;
    for _ in 1..runs {
        let next = next_due(schedule, previous)?;
        longest = longest.max(next.duration_since(previous));
        previous = next;
    }
    Ok(longest)
}

/// When a backup resource should run next, from its spec's optional `schedule` and its status:
///
/// - one-shot (no `schedule`): now ([`Timestamp::UNIX_EPOCH`], which is never in the future)
///   until it reached [`BackupPhase::Succeeded`] or [`BackupPhase::Failed`], then never (`None`);
/// - scheduled: the first schedule time after the last run started (`started_at`), or after
///   the resource was created (`created_at`) before its first run.
///
/// # Errors
/// [`ScheduleError`] from [`next_due`] for a schedule that is invalid or never fires.
pub fn due_at(
    schedule: Option<&str>,
    phase: Option<BackupPhase>,
    started_at: Option<Timestamp>,
    created_at: Option<Timestamp>,
) -> Result<Option<Timestamp>, ScheduleError> {
    match schedule {
        None => Ok(match phase {
            Some(BackupPhase::Succeeded) | Some(BackupPhase::Failed) => None,
            _ => Some(Timestamp::UNIX_EPOCH),
        }),
        Some(schedule) => {
            let after = started_at.or(created_at).unwrap_or(Timestamp::UNIX_EPOCH);
            next_due(schedule, after).map(Some)
        }
    }
}

/// Whether the newest good backup is older than `max_age_minutes` at `now`: a cluster's
/// `BackupStale` condition. No backup at all (`None`) is stale: the cluster is not protected. A
/// reconciler that wants a grace period for a new cluster passes its creation time instead of
/// `None`. A completion time in the future (clock skew) is not stale.
pub fn is_stale(last_completed: Option<Timestamp>, max_age_minutes: u32, now: Timestamp) -> bool {
    let Some(last_completed) = last_completed else {
        return true;
    };
    let max_age = jiff::SignedDuration::from_mins(i64::from(max_age_minutes));
    now.duration_since(last_completed) > max_age
}

/// Sets a cluster's `BackupStale` condition from its backup `policy`'s `maxAgeMinutes` and the
/// newest backup recorded on it (`lastBackup`); a new cluster is given that age from its
/// creation (`created`) before it counts as stale. Without a policy or without
/// `maxAgeMinutes` the cluster has no such condition.
pub fn set_backup_stale(
    conditions: &mut Vec<Condition>,
    policy: Option<&BackupPolicy>,
    last_backup: Option<&BackupRecord>,
    created: Option<Timestamp>,
    generation: Option<i64>,
    now: Timestamp,
) {
    let Some(max_age) = policy.and_then(|policy| policy.max_age_minutes) else {
        conditions.retain(|condition| condition.type_ != BACKUP_STALE);
        return;
    };
    let newest = last_backup.map(|backup| backup.completed_at.0);
    let update = if is_stale(newest.or(created), max_age, now) {
        let message = match newest {
            Some(at) => format!("the newest backup completed at {at}, more than {max_age} minutes ago"),
            None => format!("no backup in the {max_age} minutes since the cluster was created"),
        };
        ConditionUpdate::new(BACKUP_STALE, true, "NoRecentBackup", message)
    } else {
        let message = match newest {
            Some(at) => format!("the newest backup completed at {at}, within {max_age} minutes"),
            None => format!("the cluster is younger than {max_age} minutes"),
        };
        ConditionUpdate::new(BACKUP_STALE, false, "RecentBackup", message)
    };
    set_condition(conditions, update, generation, now);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    #[test]
    fn the_longest_interval_between_runs_spans_a_weekend_or_the_longest_month() {
        let longest = |schedule: &str| {
            longest_interval(schedule, at("2026-11-21T15:30:00Z"), 16).map(|interval| interval.as_hours())
        };
        assert_eq!(longest("*/15 * * * *"), Ok(0));
        assert_eq!(longest("0 */6 * * *"), Ok(6));
        assert_eq!(longest("0 3 * * 1-5"), Ok(72), "Friday to Monday");
        assert_eq!(longest("0 0 1 * *"), Ok(31 * 24), "a month of 31 days");
        assert!(matches!(
            longest("0 0 30 2 *"),
            Err(ScheduleError::NeverFires { .. })
        ));
    }

    #[test]
    fn next_due_is_strictly_after_and_in_utc() {
        assert_eq!(
            next_due("0 */6 * * *", at("2026-11-21T15:30:00Z")),
            Ok(at("2026-11-21T18:00:00Z"))
        );
        assert_eq!(
            next_due("0 */6 * * *", at("2026-11-21T18:00:00Z")),
            Ok(at("2026-11-22T00:00:00Z")),
            "a time that matches is not due again"
        );
        assert_eq!(
            next_due("* * * * *", at("2026-11-21T15:30:00.500Z")),
            Ok(at("2026-11-21T15:31:00Z"))
        );
        assert_eq!(
            next_due("30 2 * * MON", at("2026-11-21T15:30:00Z")),
            Ok(at("2026-11-23T02:30:00Z")),
            "2026-11-21 is a Saturday"
        );
        assert_eq!(
            next_due("0 0 1 1 *", at("2026-12-31T23:59:59Z")),
            Ok(at("2027-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn both_day_fields_restricted_means_either_matches() {
        // The 1st of the month or a Monday, whichever is first.
        assert_eq!(
            next_due("0 0 1 * MON", at("2026-11-24T00:00:00Z")),
            Ok(at("2026-11-30T00:00:00Z"))
        );
    }

    #[test]
    fn only_five_valid_fields_are_a_schedule() {
        for invalid in [
            "",
            "* * * *",
            "0 * * * * *",
            "@daily",
            "61 * * * *",
            "* 24 * * *",
            "every day",
            "a b c d e",
        ] {
            assert!(
                matches!(
                    next_due(invalid, at("2026-11-21T00:00:00Z")),
                    Err(ScheduleError::Invalid { .. })
                ),
                "{invalid:?} should be refused"
            );
        }
    }

    #[test]
    fn a_schedule_that_never_fires_is_an_error() {
        assert!(matches!(
            next_due("0 0 30 2 *", at("2026-11-21T00:00:00Z")),
            Err(ScheduleError::NeverFires { .. })
        ));
    }

    #[test]
    fn a_one_shot_backup_is_due_until_it_finished() {
        for phase in [None, Some(BackupPhase::Pending), Some(BackupPhase::Running)] {
            assert_eq!(
                due_at(None, phase, None, Some(at("2026-11-21T00:00:00Z"))),
                Ok(Some(Timestamp::UNIX_EPOCH)),
                "{phase:?}"
            );
        }
        for phase in [BackupPhase::Succeeded, BackupPhase::Failed] {
            assert_eq!(due_at(None, Some(phase), None, None), Ok(None), "{phase:?}");
        }
    }

    #[test]
    fn a_scheduled_backup_is_due_after_its_last_start_or_its_creation() {
        let created = Some(at("2026-11-21T15:30:00Z"));
        assert_eq!(
            due_at(Some("0 */6 * * *"), None, None, created),
            Ok(Some(at("2026-11-21T18:00:00Z"))),
            "first run: after creation"
        );
        assert_eq!(
            due_at(
                Some("0 */6 * * *"),
                Some(BackupPhase::Pending),
                Some(at("2026-11-21T18:00:00Z")),
                created
            ),
            Ok(Some(at("2026-11-22T00:00:00Z"))),
            "later runs: after the last start"
        );
        assert_eq!(
            due_at(Some("0 */6 * * *"), Some(BackupPhase::Failed), None, None),
            Ok(Some(at("1970-01-01T06:00:00Z"))),
            "a failure does not end a schedule; without any time it is due from the epoch"
        );
        assert!(matches!(
            due_at(Some("never"), None, None, created),
            Err(ScheduleError::Invalid { .. })
        ));
    }

    #[test]
    fn staleness_compares_the_newest_backup_with_the_maximum_age() {
        let now = at("2026-11-21T12:00:00Z");
        assert!(is_stale(None, 60, now), "no backup at all is stale");
        assert!(!is_stale(Some(at("2026-11-21T11:30:00Z")), 60, now));
        assert!(
            !is_stale(Some(at("2026-11-21T11:00:00Z")), 60, now),
            "exactly the maximum age"
        );
        assert!(is_stale(Some(at("2026-11-21T10:59:59Z")), 60, now));
        assert!(!is_stale(Some(at("2026-11-21T13:00:00Z")), 60, now), "clock skew");
    }

    #[test]
    fn backup_stale_follows_the_newest_backup_and_goes_without_a_max_age() {
        let now = at("2026-11-21T12:00:00Z");
        let policy: BackupPolicy = serde_json::from_value(serde_json::json!({
            "schedule": "0 * * * *",
            "destination": {"filesystem": {"path": "/backups"}},
            "maxAgeMinutes": 60,
        }))
        .unwrap();
        let record = |completed: &str| BackupRecord {
            name: "nightly".into(),
            location: "/backups/a".into(),
            completed_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(completed)),
            size_bytes: 1,
            sha256: "a".repeat(64),
        };
        let stale = |conditions: &[Condition]| {
            conditions
                .iter()
                .find(|c| c.type_ == BACKUP_STALE)
                .map(|c| (c.status.clone(), c.reason.clone()))
        };
        let mut conditions = Vec::new();
        let created = Some(at("2026-11-21T11:30:00Z"));
        set_backup_stale(&mut conditions, Some(&policy), None, created, Some(1), now);
        assert_eq!(
            stale(&conditions),
            Some(("False".into(), "RecentBackup".into())),
            "a young cluster"
        );
        let created = Some(at("2026-11-21T10:00:00Z"));
        set_backup_stale(&mut conditions, Some(&policy), None, created, Some(1), now);
        assert_eq!(stale(&conditions), Some(("True".into(), "NoRecentBackup".into())));
        let newest = record("2026-11-21T11:10:00Z");
        set_backup_stale(
            &mut conditions,
            Some(&policy),
            Some(&newest),
            created,
            Some(1),
            now,
        );
        assert_eq!(stale(&conditions), Some(("False".into(), "RecentBackup".into())));
        let old = record("2026-11-21T10:30:00Z");
        set_backup_stale(&mut conditions, Some(&policy), Some(&old), created, Some(1), now);
        assert_eq!(stale(&conditions), Some(("True".into(), "NoRecentBackup".into())));
        let without_max_age = BackupPolicy {
            max_age_minutes: None,
            ..policy
        };
        set_backup_stale(
            &mut conditions,
            Some(&without_max_age),
            Some(&old),
            created,
            Some(1),
            now,
        );
        assert_eq!(stale(&conditions), None);
    }
}
