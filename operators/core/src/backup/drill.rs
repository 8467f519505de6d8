//! Restore drills: a backup with `verify` restores each new snapshot into a throw-away
//! one-member cluster of its own kind (`<backup>-drill`, owned by the backup), waits until that
//! cluster is ready, compares what it holds with the content the snapshot recorded at backup
//! time ([`super::digest`]), records the outcome in the backup's `status.drill` and on the
//! cluster (`lastDrill`, from which its pass sets `BackupUnverified`), and deletes the scratch
//! cluster. The choice of the next step is the pure [`next_drill_step`].

use std::time::Duration;

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

use crate::{
    conditions::{ConditionUpdate, set_condition},
    crd::{DrillPhase, DrillRecord},
};

/// The condition a cluster's pass sets from its `lastDrill`.
pub const BACKUP_UNVERIFIED: &str = "BackupUnverified";
/// How long a drill's cluster may take to be restored and ready before the drill fails.
pub const DRILL_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How often a drill in progress is looked at.
pub const DRILL_POLL: Duration = Duration::from_secs(10);

/// Why a cluster already under the drill's name `name` is not the backup's to delete: it is not
/// controlled by the backup (uid `backup_uid`), so it is someone's own cluster that happens to
/// have that name. `None` when it is an earlier drill's.
pub fn not_a_drill(
    existing: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    backup_uid: Option<&str>,
    name: &str,
) -> Option<String> {
    let controller = existing
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true));
    let ours = backup_uid.is_some_and(|uid| controller.is_some_and(|owner| owner.uid == uid));
    (!ours).then(|| {
        format!(
            "a cluster named {name} exists and is not this backup's drill (it has no controller, or another), so it is \
             left as it is and no drill runs: rename that cluster, or turn verify off"
        )
    })
}

/// The name of `backup`'s drill cluster: `<backup>-drill` when that is a name every engine's
/// admission takes for a cluster (a DNS-1035 label within the engine's `max` length); else made
/// one (dots as dashes, `drill-` in front of a name that starts with a digit) and shortened to
/// `max` with a hash of the whole, so that no backup name gets a drill its own API server
/// refuses.
pub fn drill_cluster_name(backup: &str, max: usize) -> String {
    let label = backup.replace('.', "-");
    let name = if label.starts_with(|c: char| c.is_ascii_digit()) {
        format!("drill-{label}")
    } else {
        format!("{label}-drill")
    };
    crate::naming::shorten(&name, max)
}

/// What a drill's cluster is, as observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scratch {
    Absent,
    Restoring,
    Ready,
}

/// The next step of a backup's drills.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrillStep {
    /// Nothing to drill: no `verify`, no snapshot yet, or the newest one drilled already.
    Nothing,
    /// Restore the newest snapshot into a new drill cluster (one left from an earlier drill is
    /// deleted first).
    Start,
    /// The drill cluster is not ready yet: look again later.
    Wait,
    /// The drill cluster is ready: compare what it holds with what the snapshot recorded.
    Compare,
    /// The drill failed without a comparison: why.
    GiveUp(String),
}

/// The next step, given whether the backup asks for drills, its newest snapshot's location,
/// the drill it recorded, and its drill cluster.
pub fn next_drill_step(
    verify: bool,
    newest: Option<&str>,
    drill: Option<&DrillRecord>,
    scratch: Scratch,
    now: Timestamp,
) -> DrillStep {
    let Some(newest) = newest.filter(|_| verify) else {
        return DrillStep::Nothing;
    };
    let Some(drill) = drill.filter(|drill| drill.location == newest) else {
        return DrillStep::Start;
    };
    if drill.phase != DrillPhase::Restoring {
        return DrillStep::Nothing;
    }
    match scratch {
        Scratch::Ready => DrillStep::Compare,
        Scratch::Absent => DrillStep::GiveUp(format!(
            "the drill's cluster {} is gone before it was ready (deleted by someone?)",
            drill.cluster
        )),
        Scratch::Restoring => {
            let waited = now.duration_since(drill.started_at.0).unsigned_abs();
            if waited >= DRILL_TIMEOUT {
                DrillStep::GiveUp(format!(
                    "the drill's cluster {} was not restored and ready within {} minutes: see its status and events",
                    drill.cluster,
                    DRILL_TIMEOUT.as_secs() / 60
                ))
            } else {
                DrillStep::Wait
            }
        }
    }
}

/// A drill started now of `backup`'s snapshot at `location`, into `cluster`.
pub fn started(backup: &str, location: &str, cluster: &str, now: Timestamp) -> DrillRecord {
    DrillRecord {
        backup: backup.to_string(),
        location: location.to_string(),
        phase: DrillPhase::Restoring,
        cluster: cluster.to_string(),
        started_at: Time(now),
        verified_at: None,
        message: format!("restoring {location} into {cluster}"),
    }
}

/// `drill` ended at `now`: verified when `mismatch` is `None`, else failed with it.
pub fn ended(drill: &DrillRecord, mismatch: Option<String>, now: Timestamp) -> DrillRecord {
    let (phase, verified_at, message) = match mismatch {
        None => (
            DrillPhase::Verified,
            Some(Time(now)),
            format!(
                "{} restored into {} holds what the snapshot recorded",
                drill.location, drill.cluster
            ),
        ),
        Some(why) => (DrillPhase::Failed, None, why),
    };
    DrillRecord {
        phase,
        verified_at,
        message,
        ..drill.clone()
    }
}

/// Sets a cluster's `BackupUnverified` from the last drill of its backups (`lastDrill`): true
/// when it failed, false when it verified its snapshot; no condition before the first drill
/// ends.
pub fn set_backup_unverified(
    conditions: &mut Vec<Condition>,
    last_drill: Option<&DrillRecord>,
    generation: Option<i64>,
    now: Timestamp,
) {
    let update = match last_drill.map(|drill| (drill.phase, drill)) {
        Some((DrillPhase::Failed, drill)) => ConditionUpdate::new(
            BACKUP_UNVERIFIED,
            true,
            "DrillFailed",
            format!(
                "the restore drill of {} ({}) failed: {}; the backup may not restore what it holds: check it, then \
                 take a new backup",
                drill.backup, drill.location, drill.message
            ),
        ),
        Some((DrillPhase::Verified, drill)) => {
            ConditionUpdate::new(BACKUP_UNVERIFIED, false, "DrillVerified", drill.message.clone())
        }
        Some((DrillPhase::Restoring, _)) | None => return,
    };
    set_condition(conditions, update, generation, now);
}

/// [`set_backup_unverified`], and a cluster `Degraded` for no other reason is `Degraded` for a
/// failed drill (reason `BackupUnverified`): the conditions a cluster's pass sets from its
/// `lastDrill`, after its own `Degraded`.
pub fn set_drill_conditions(
    conditions: &mut Vec<Condition>,
    last_drill: Option<&DrillRecord>,
    generation: Option<i64>,
    now: Timestamp,
) {
    set_backup_unverified(conditions, last_drill, generation, now);
    if drill_failed(last_drill)
        && !crate::conditions::is_true(conditions, crate::conditions::ConditionType::Degraded)
    {
        set_condition(
            conditions,
            ConditionUpdate::new(
                crate::conditions::ConditionType::Degraded,
                true,
                BACKUP_UNVERIFIED,
                "the last restore drill failed: see BackupUnverified",
            ),
            generation,
            now,
        );
    }
}

/// Whether a drill cluster is ready to be compared: it recorded its restore (`restored`) and
/// says it is `Ready`.
pub fn restored_and_ready(restored: bool, conditions: &[Condition]) -> bool {
    restored && crate::conditions::is_true(conditions, crate::conditions::ConditionType::Ready)
}

/// Whether the last drill failed: the cluster is `Degraded` for it.
pub fn drill_failed(last_drill: Option<&DrillRecord>) -> bool {
    last_drill.is_some_and(|drill| drill.phase == DrillPhase::Failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user's own cluster under the drill's name is never taken for an earlier drill's.
    #[test]
    fn only_a_cluster_the_backup_controls_is_an_earlier_drill() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
        let owned_by = |uid: &str, controller: bool| ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                uid: uid.into(),
                controller: Some(controller),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        };
        assert_eq!(
            not_a_drill(&owned_by("backup-uid", true), Some("backup-uid"), "orders-drill"),
            None
        );
        for someone_elses in [
            ObjectMeta::default(),
            owned_by("other-uid", true),
            owned_by("backup-uid", false),
        ] {
            assert!(not_a_drill(&someone_elses, Some("backup-uid"), "orders-drill").is_some());
        }
    }

    /// What every engine's admission takes as a cluster name: a DNS-1035 label of at most `max`.
    fn admissible(name: &str, max: usize) -> bool {
        name.len() <= max
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    }

    #[test]
    fn a_drill_cluster_name_is_an_admissible_cluster_name_whatever_the_backup_name() {
        let max = crate::naming::max_cluster_name("sentinel");
        for backup in [
            "nightly",
            "2026-nightly",
            "nightly.v2",
            &"n".repeat(63),
            &"a.b".repeat(80),
        ] {
            let name = drill_cluster_name(backup, max);
            assert!(admissible(&name, max), "{backup:?} gives {name:?}");
        }
        assert_eq!(
            drill_cluster_name("nightly", max),
            "nightly-drill",
            "a name that fits is kept"
        );
        assert_ne!(
            drill_cluster_name(&"n".repeat(63), max),
            drill_cluster_name(&"n".repeat(62), max),
            "shortened names stay apart"
        );
    }

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    #[test]
    fn each_new_snapshot_is_drilled_once_and_a_stuck_drill_gives_up() {
        let now = at("2026-11-30T12:00:00Z");
        let drill = |location: &str, phase: DrillPhase, since: &str| DrillRecord {
            phase,
            ..started("nightly", location, "nightly-drill", at(since))
        };
        let restoring = drill("s3://b/one", DrillPhase::Restoring, "2026-11-30T11:55:00Z");
        let stuck = drill("s3://b/one", DrillPhase::Restoring, "2026-11-30T11:40:00Z");
        let verified = drill("s3://b/one", DrillPhase::Verified, "2026-11-30T11:55:00Z");
        let failed = drill("s3://b/one", DrillPhase::Failed, "2026-11-30T11:55:00Z");
        let cases = [
            (
                false,
                Some("s3://b/one"),
                None,
                Scratch::Absent,
                DrillStep::Nothing,
                "no verify",
            ),
            (
                true,
                None,
                None,
                Scratch::Absent,
                DrillStep::Nothing,
                "no snapshot yet",
            ),
            (
                true,
                Some("s3://b/one"),
                None,
                Scratch::Absent,
                DrillStep::Start,
                "first snapshot",
            ),
            (
                true,
                Some("s3://b/two"),
                Some(&verified),
                Scratch::Absent,
                DrillStep::Start,
                "a newer snapshot",
            ),
            (
                true,
                Some("s3://b/two"),
                Some(&restoring),
                Scratch::Restoring,
                DrillStep::Start,
                "a newer one mid-drill",
            ),
            (
                true,
                Some("s3://b/one"),
                Some(&verified),
                Scratch::Absent,
                DrillStep::Nothing,
                "drilled",
            ),
            (
                true,
                Some("s3://b/one"),
                Some(&failed),
                Scratch::Absent,
                DrillStep::Nothing,
                "failed once",
            ),
            (
                true,
                Some("s3://b/one"),
                Some(&restoring),
                Scratch::Restoring,
                DrillStep::Wait,
                "restoring",
            ),
            (
                true,
                Some("s3://b/one"),
                Some(&restoring),
                Scratch::Ready,
                DrillStep::Compare,
                "ready",
            ),
        ];
        for (verify, newest, recorded, scratch, expected, case) in cases {
            assert_eq!(
                next_drill_step(verify, newest, recorded, scratch, now),
                expected,
                "{case}"
            );
        }
        let gave_up = |recorded: &DrillRecord, scratch| {
            matches!(
                next_drill_step(true, Some("s3://b/one"), Some(recorded), scratch, now),
                DrillStep::GiveUp(_)
            )
        };
        assert!(
            gave_up(&stuck, Scratch::Restoring),
            "15 minutes without a ready cluster"
        );
        assert!(gave_up(&restoring, Scratch::Absent), "its cluster deleted");
    }

    #[test]
    fn the_cluster_condition_follows_the_last_drill_that_ended() {
        let now = at("2026-11-30T12:00:00Z");
        let drill = started("nightly", "s3://b/one", "nightly-drill", now);
        let mut conditions = Vec::new();
        set_backup_unverified(&mut conditions, Some(&drill), Some(1), now);
        set_backup_unverified(&mut conditions, None, Some(1), now);
        assert!(conditions.is_empty(), "no drill ended yet");

        let failed = ended(&drill, Some("2 records where the backup recorded 3".into()), now);
        assert_eq!(
            (failed.phase, failed.verified_at.is_none()),
            (DrillPhase::Failed, true)
        );
        set_backup_unverified(&mut conditions, Some(&failed), Some(1), now);
        assert_eq!(conditions[0].status, "True");
        assert!(
            conditions[0]
                .message
                .contains("2 records where the backup recorded 3")
        );
        assert!(drill_failed(Some(&failed)));

        let verified = ended(&drill, None, now);
        assert_eq!(verified.verified_at, Some(Time(now)));
        set_backup_unverified(&mut conditions, Some(&verified), Some(1), now);
        assert_eq!((conditions.len(), conditions[0].status.as_str()), (1, "False"));
        assert!(!drill_failed(Some(&verified)));
    }
}
