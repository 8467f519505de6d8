//! Point-in-time recovery, as the engines that archive a log beside each scheduled snapshot
//! (MariaDB's binary log, MongoDB's oplog) plan it: which kept run's snapshot a restore starts
//! from and which runs' logs it replays after it. Pure: the engines say what a position is.
//!
//! Each run of such a backup stores a snapshot, then the log written since the previous run
//! (since its own snapshot for the first run, or when the previous run's end is no longer in
//! the server's log): a run's log continues the previous one's when it begins where that one
//! ended. A restore to a point takes the newest snapshot that holds nothing past it, then every
//! run's log from that run's on, up to the first that reaches the point, unbroken.

use std::ops::Range;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An object a run stored, and its SHA-256 (hex) as written.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoredPiece {
    pub location: String,
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
}

/// What planning reads of a kept run.
pub trait ArchivedRun {
    /// When its snapshot was complete: it holds nothing written later.
    fn snapshot_completed_at(&self) -> &Time;
    /// When its log was read to its end: everything written before then is in this run's log
    /// or an earlier one.
    fn archived_at(&self) -> &Time;
    /// The position its log begins after, and the one it holds everything up to, as the engine
    /// writes positions: equal text is the same position.
    fn log_after(&self) -> &str;
    fn log_through(&self) -> &str;
    /// Its snapshot and its piece of log.
    fn stored(&self) -> [&StoredPiece; 2];
}

/// Every object the kept `runs` stored: a point-in-time restore may read any of them, so
/// retention keeps them.
pub fn stored_locations<R: ArchivedRun>(runs: &[R]) -> impl Iterator<Item = String> + '_ {
    runs.iter()
        .flat_map(|run| run.stored().map(|piece| piece.location.clone()))
}

/// [`recoverable_window`] as the status records it: `recoverableFrom` and `recoverableUntil`.
pub fn window_in_status<R: ArchivedRun>(runs: &[R]) -> (Option<Time>, Option<Time>) {
    let window = recoverable_window(runs);
    (
        window.map(|(from, _)| Time(from)),
        window.map(|(_, until)| Time(until)),
    )
}

/// Which run's snapshot a restore starts from, and which runs' logs it replays after it (the
/// snapshot's own run first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryPlan {
    pub snapshot: usize,
    pub pieces: Range<usize>,
}

/// Why no restore can be planned from the kept runs, and whether a later run may change that.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Unplanned {
    pub kind: UnplannedKind,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnplannedKind {
    /// The point is past what was archived: a later run may reach it, starting from the
    /// snapshot of the run at `snapshot` (or of a later one complete before the point).
    NotArchivedYet { snapshot: usize },
    /// No run, kept now or taken later, can serve it: it is before the oldest kept snapshot,
    /// across a gap in the archive, or unreadable.
    Never,
}

impl Unplanned {
    pub fn never(message: impl Into<String>) -> Self {
        Self {
            kind: UnplannedKind::Never,
            message: message.into(),
        }
    }
}

impl From<Unplanned> for String {
    fn from(unplanned: Unplanned) -> Self {
        unplanned.message
    }
}

/// The oldest kept run a restore planned as `planned` (its plan's snapshot run, as an index)
/// still needs: from the snapshot it starts from now, or will once a later run reaches its
/// point. `None` when no run can ever serve it.
pub fn held_from(planned: Result<usize, Unplanned>) -> Option<usize> {
    match planned {
        Ok(snapshot) => Some(snapshot),
        Err(Unplanned {
            kind: UnplannedKind::NotArchivedYet { snapshot },
            ..
        }) => Some(snapshot),
        Err(_) => None,
    }
}

/// The oldest kept run of the backup `backup` a cluster still needs (see [`held_from`]): it
/// restores from it (`restoring_from`, its `restoreFrom`), its restore is not done yet, and
/// `plan` plans its point to a snapshot run (`None` without a point in time: the newest
/// snapshot, which the backup's status always points at).
pub fn restore_holds_from(
    backup: &str,
    restoring_from: Option<&str>,
    done: bool,
    plan: impl FnOnce() -> Option<Result<usize, Unplanned>>,
) -> Option<usize> {
    if restoring_from != Some(backup) || done {
        return None;
    }
    held_from(plan()?)
}

/// The most runs a restore that has not completed holds beyond `retain`: one that fails for that
/// long (a schedule's interval each) stops holding the oldest, so a status stays bounded.
pub const MAX_HELD_RUNS: usize = 100;

/// Keeps the newest `retain` of `runs`, and every run from `held_from` on (a restore's, at most
/// [`MAX_HELD_RUNS`]), and the window they give, as a status records them (`recoverableFrom`,
/// `recoverableUntil`); whether any run was dropped.
pub fn keep_newest_in_status<R: ArchivedRun>(
    runs: &mut Vec<R>,
    window: (&mut Option<Time>, &mut Option<Time>),
    retain: u32,
    held_from: Option<usize>,
) -> bool {
    let before = runs.len();
    let held = held_from.map_or(0, |from| before.saturating_sub(from).min(MAX_HELD_RUNS));
    let keep = (retain as usize).max(held);
    runs.drain(..before.saturating_sub(keep));
    (*window.0, *window.1) = window_in_status(runs);
    runs.len() != before
}

/// How a point is compared with a run: by the engine's positions or by time.
pub struct PointTest<'a, R> {
    /// The run's snapshot holds nothing past the point.
    pub snapshot_before: &'a dyn Fn(&R) -> Result<bool, String>,
    /// The run's log reaches the point.
    pub log_reaches: &'a dyn Fn(&R) -> Result<bool, String>,
}

/// Plans a restore of `runs` (oldest first) to a point (see the module's documentation).
/// `field` names the point in the resource, `log` the engine's log ("binary log", "oplog").
///
/// # Errors
/// A message naming `field` and the recoverable window when the point is before the oldest
/// kept snapshot, after what was archived, or across a gap in the archive.
pub fn plan<R: ArchivedRun>(
    runs: &[R],
    point: PointTest<'_, R>,
    field: &str,
    log: &str,
) -> Result<RecoveryPlan, Unplanned> {
    let window = match (recoverable_window(runs), runs.last()) {
        (Some((from, until)), _) => format!("the backup can restore to times from {from} to {until}"),
        // Runs kept, but their log reaches no second after the oldest snapshot they continue
        // from: nothing was written since, or the log's source did not move on.
        (None, Some(newest)) => format!(
            "the kept runs' {log} reaches no second after their oldest snapshot yet (the newest run's snapshot completed at {}, its {log} ends at {})",
            newest.snapshot_completed_at().0,
            newest.archived_at().0
        ),
        (None, None) => format!("the backup has no archived {log} yet"),
    };
    let mut snapshot = None;
    for (index, run) in runs.iter().enumerate() {
        if (point.snapshot_before)(run).map_err(Unplanned::never)? {
            snapshot = Some(index);
        }
    }
    let Some(snapshot) = snapshot else {
        return Err(Unplanned::never(format!(
            "{field} is before the oldest kept snapshot: {window}"
        )));
    };
    for index in snapshot..runs.len() {
        let run = &runs[index];
        if index > snapshot && runs[index - 1].log_through() != run.log_after() {
            return Err(Unplanned::never(format!(
                "{field} is past a gap in the archived {log} (one run's ends at {}, the next begins after {}): {window}",
                runs[index - 1].log_through(),
                run.log_after()
            )));
        }
        if (point.log_reaches)(run).map_err(Unplanned::never)? {
            return Ok(RecoveryPlan {
                snapshot,
                pieces: snapshot..index + 1,
            });
        }
    }
    Err(Unplanned {
        kind: UnplannedKind::NotArchivedYet { snapshot },
        message: format!("{field} is after the newest archived point: {window}"),
    })
}

/// [`plan`] to a time, in whole seconds (the logs record whole seconds): the newest snapshot
/// complete by then, the logs up to the first run archived after it.
///
/// # Errors
/// As [`plan`].
pub fn plan_to_time<R: ArchivedRun>(
    runs: &[R],
    time: Timestamp,
    field: &str,
    log: &str,
) -> Result<RecoveryPlan, Unplanned> {
    let second = time.as_second();
    plan(
        runs,
        PointTest {
            snapshot_before: &|run: &R| Ok(run.snapshot_completed_at().0.as_second() <= second),
            log_reaches: &|run: &R| Ok(run.archived_at().0.as_second() > second),
        },
        field,
        log,
    )
}

/// The earliest and latest times (whole seconds) a restore can reach from `runs`: from the
/// oldest snapshot after which the archive is unbroken to the newest run, to the last second
/// the newest run archived completely.
pub fn recoverable_window<R: ArchivedRun>(runs: &[R]) -> Option<(Timestamp, Timestamp)> {
    let newest = runs.last()?;
    let mut oldest = runs.len() - 1;
    while oldest > 0 && runs[oldest - 1].log_through() == runs[oldest].log_after() {
        oldest -= 1;
    }
    let from = Timestamp::from_second(runs[oldest].snapshot_completed_at().0.as_second()).ok()?;
    let until = Timestamp::from_second(newest.archived_at().0.as_second() - 1).ok()?;
    (from <= until).then_some((from, until))
}

/// When the newest of `runs`, the run whose snapshot is `last_snapshot`, does not continue the
/// run before it (the source no longer held where that one ended, or holds another history),
/// what a person needs to know: which points can no longer be restored. `log` names the
/// engine's log.
pub fn archive_break<R: ArchivedRun>(runs: &[R], last_snapshot: Option<&str>, log: &str) -> Option<String> {
    let [.., previous, newest] = runs else {
        return None;
    };
    // Only when the run just recorded (`last_snapshot`) added the newest: a run that archived
    // nothing has said nothing new.
    let [newest_snapshot, _] = newest.stored();
    let added = last_snapshot == Some(newest_snapshot.location.as_str());
    (added && previous.log_through() != newest.log_after()).then(|| {
        format!(
            "the archived {log} restarts at this run's snapshot: the previous run's ended at {}, which this run's source no longer holds (or it is of another history), so no point between {} and {} can be restored",
            previous.log_through(),
            previous.archived_at().0,
            newest.snapshot_completed_at().0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Run {
        completed: Time,
        archived: Time,
        after: String,
        through: String,
        pieces: [StoredPiece; 2],
    }

    impl ArchivedRun for Run {
        fn snapshot_completed_at(&self) -> &Time {
            &self.completed
        }
        fn archived_at(&self) -> &Time {
            &self.archived
        }
        fn log_after(&self) -> &str {
            &self.after
        }
        fn log_through(&self) -> &str {
            &self.through
        }
        fn stored(&self) -> [&StoredPiece; 2] {
            [&self.pieces[0], &self.pieces[1]]
        }
    }

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    /// A run whose snapshot completed at `second`, whose log was read at `second + 1`, and
    /// which holds the log from `after` to `through`.
    fn run(second: i64, after: &str, through: &str) -> Run {
        let piece = |extension: &str| StoredPiece {
            location: format!("{second}.{extension}"),
            sha256: String::new(),
            size_bytes: None,
        };
        Run {
            completed: at(second),
            archived: at(second + 1),
            after: after.into(),
            through: through.into(),
            pieces: [piece("snapshot"), piece("log")],
        }
    }

    #[test]
    fn a_time_is_reached_from_the_newest_snapshot_before_it_through_the_logs_after() {
        let runs = [run(100, "a", "b"), run(200, "b", "c"), run(300, "c", "d")];
        let cases = [
            // (time, snapshot, pieces) or the start of the error
            (100, Ok((0, 0..1))),
            (150, Ok((0, 0..2))),
            (200, Ok((1, 1..2))),
            (299, Ok((1, 1..3))),
            (300, Ok((2, 2..3))),
            (
                99,
                Err("restoreFrom.pointInTime is before the oldest kept snapshot"),
            ),
            (
                301,
                Err("restoreFrom.pointInTime is after the newest archived point"),
            ),
        ];
        for (second, expected) in cases {
            let planned = plan_to_time(
                &runs,
                Timestamp::from_second(second).unwrap(),
                "restoreFrom.pointInTime",
                "oplog",
            )
            .map(|plan| (plan.snapshot, plan.pieces));
            match (planned, expected) {
                (Ok(planned), Ok(expected)) => assert_eq!(planned, expected, "at {second}"),
                (Err(unplanned), Err(start)) => {
                    assert!(unplanned.message.starts_with(start), "at {second}: {unplanned}")
                }
                (planned, expected) => panic!("at {second}: planned {planned:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn a_gap_in_the_log_bounds_the_window_and_refuses_points_across_it() {
        // The third run's log could not continue from the second's: it begins at its snapshot.
        let runs = [run(100, "a", "b"), run(200, "b", "c"), run(300, "x", "y")];
        assert_eq!(
            recoverable_window(&runs),
            Some((
                Timestamp::from_second(300).unwrap(),
                Timestamp::from_second(300).unwrap()
            ))
        );
        let across = plan_to_time(
            &runs,
            Timestamp::from_second(250).unwrap(),
            "restoreFrom.pointInTime",
            "oplog",
        )
        .unwrap_err()
        .message;
        assert!(across.contains("past a gap in the archived oplog"), "{across}");
        assert!(
            across.contains("from 1970-01-01T00:05:00Z to 1970-01-01T00:05:00Z"),
            "{across}"
        );
        assert_eq!(
            plan_to_time(&runs, Timestamp::from_second(300).unwrap(), "f", "oplog").unwrap(),
            RecoveryPlan {
                snapshot: 2,
                pieces: 2..3
            }
        );
    }

    #[test]
    fn a_restore_holds_the_runs_from_its_snapshot_on_and_only_while_a_run_may_serve_it() {
        let runs = [run(100, "a", "b"), run(200, "b", "c"), run(300, "x", "y")];
        let planned = |second| {
            plan_to_time(&runs, Timestamp::from_second(second).unwrap(), "f", "oplog")
                .map(|plan| plan.snapshot)
        };
        let cases = [
            // (time, what the plan says, the oldest run the restore holds)
            (99, Some(UnplannedKind::Never), None),
            (150, None, Some(0)),
            (250, Some(UnplannedKind::Never), None),
            (300, None, Some(2)),
            // Far in the future: only the newest run, whatever comes later.
            (302, Some(UnplannedKind::NotArchivedYet { snapshot: 2 }), Some(2)),
        ];
        for (second, kind, held) in cases {
            let result = planned(second);
            assert_eq!(result.as_ref().err().map(|u| u.kind), kind, "at {second}");
            assert_eq!(held_from(result), held, "at {second}");
        }
        let pending =
            |restoring_from, done| restore_holds_from("nightly", restoring_from, done, || Some(Ok(1)));
        assert_eq!(pending(Some("nightly"), false), Some(1));
        assert_eq!(
            pending(Some("nightly"), true),
            None,
            "a restore done holds nothing"
        );
        assert_eq!(pending(Some("weekly"), false), None, "another backup's restore");
        assert_eq!(
            restore_holds_from("nightly", Some("nightly"), false, || None),
            None,
            "the newest snapshot"
        );

        // Retention keeps `retain` runs, and every run from the oldest one held.
        let kept = |retain, held| {
            let mut kept: Vec<Run> = (1..=5).map(|n| run(n * 100, "a", "a")).collect();
            let (mut from, mut until) = (None, None);
            let dropped = keep_newest_in_status(&mut kept, (&mut from, &mut until), retain, held);
            (kept.len(), dropped)
        };
        assert_eq!(kept(2, None), (2, true));
        assert_eq!(kept(2, Some(1)), (4, true));
        assert_eq!(kept(2, Some(4)), (2, true));
        assert_eq!(kept(5, Some(0)), (5, false));
        let mut many: Vec<Run> = (1..=120).map(|n| run(n * 100, "a", "a")).collect();
        let (mut from, mut until) = (None, None);
        keep_newest_in_status(&mut many, (&mut from, &mut until), 3, Some(0));
        assert_eq!(many.len(), MAX_HELD_RUNS, "a hold is bounded");
        let unreadable = PointTest {
            snapshot_before: &|_: &Run| Err("no position".to_string()),
            log_reaches: &|_: &Run| Ok(true),
        };
        let refused = plan(&runs, unreadable, "f", "oplog").unwrap_err();
        assert_eq!(
            (refused.kind, refused.message.as_str()),
            (UnplannedKind::Never, "no position")
        );
    }

    #[test]
    fn a_run_that_does_not_continue_the_previous_one_says_which_points_are_lost() {
        assert_eq!(archive_break::<Run>(&[], None, "oplog"), None);
        assert_eq!(
            archive_break(&[run(100, "a", "b")], Some("100.snapshot"), "oplog"),
            None
        );
        let unbroken = [run(100, "a", "b"), run(200, "b", "c")];
        assert_eq!(archive_break(&unbroken, Some("200.snapshot"), "oplog"), None);
        let broken = [run(100, "a", "b"), run(200, "b", "c"), run(300, "x", "y")];
        let message = archive_break(&broken, Some("300.snapshot"), "oplog").expect("a break");
        assert!(
            message.contains("the previous run's ended at c")
                && message.contains("between 1970-01-01T00:03:21Z and 1970-01-01T00:05:00Z"),
            "{message}"
        );
        // A later run that archived nothing (its snapshot is not the newest run's) repeats nothing.
        assert_eq!(archive_break(&broken, Some("400.snapshot"), "oplog"), None);
    }

    #[test]
    fn no_run_no_window() {
        assert_eq!(recoverable_window::<Run>(&[]), None);
        let message = plan_to_time::<Run>(&[], Timestamp::from_second(5).unwrap(), "f", "oplog")
            .unwrap_err()
            .message;
        assert!(
            message.contains("the backup has no archived oplog yet"),
            "{message}"
        );
        // Runs whose oplog ends where their snapshots did: no second to restore into.
        let idle = [run(100, "a", "a"), run(100, "a", "a")].map(|mut run| {
            run.archived = at(100);
            run
        });
        assert_eq!(recoverable_window(&idle), None);
        let message = plan_to_time(&idle, Timestamp::from_second(99).unwrap(), "f", "oplog")
            .unwrap_err()
            .message;
        assert!(
            message.contains("the kept runs' oplog reaches no second after their oldest snapshot yet")
                && message.contains("its oplog ends at 1970-01-01T00:01:40Z"),
            "{message}"
        );
    }
}
