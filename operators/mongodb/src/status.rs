//! The replica set's status as a pure function of what a pass observed and where it left the
//! set: members, conditions, and the membership change recorded in flight, read back typed.

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use quorum_core::{
    conditions::ConditionUpdate,
    crd::ObservedFailover,
    pass::{Findings, UnreadableRecord},
    recovery::{RecoveryPhase, RecoveryRecord},
    repair::{PodRepair, RepairRecord, WipedPod},
};

use crate::{
    admin::{MemberState, ReplStatus},
    crd::{ChangeKind, MemberStatus, MembershipChange, MongoDBReplicaSet, MongoDBReplicaSetStatus},
    decide::{Change, Desired, Observed, Reason, SeenMember},
};

/// Where a pass left the set: the `Progressing` condition, the event and the requeue.
pub type Progress = quorum_core::pass::Progress<Reason>;

/// A membership change recorded in status, as read back: a kind this operator knows, with the
/// fields that kind needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedChange {
    pub kind: ChangeKind,
    /// The member it concerns (the release, for `SetFeatureCompatibilityVersion`).
    pub member: String,
    /// The configuration version it was made from; every change but the initiation has one.
    pub from_config_version: Option<i64>,
}

impl RecordedChange {
    /// The status record of this change, started at `started_at`.
    pub fn record(&self, started_at: Time) -> MembershipChange {
        MembershipChange {
            kind: self.kind.clone(),
            member: self.member.clone(),
            from_config_version: self.from_config_version,
            started_at,
        }
    }
}

/// The membership change recorded in status. A record this operator cannot read (an unknown
/// kind, no member) is an error, never taken for no change.
pub fn recorded_change(
    status: Option<&MongoDBReplicaSetStatus>,
) -> Result<Option<RecordedChange>, UnreadableRecord> {
    let Some(change) = status.and_then(|status| status.membership_change.as_ref()) else {
        return Ok(None);
    };
    let kind = change.kind.known()?.clone();
    if change.member.is_empty() {
        return Err(UnreadableRecord::new(
            "status.membershipChange.member",
            format!("empty for {kind}"),
        ));
    }
    Ok(Some(RecordedChange {
        kind,
        member: change.member.clone(),
        from_config_version: change.from_config_version,
    }))
}

/// The wait of a pass that found a recorded change it cannot read: it says what a person can do.
pub(crate) fn wait_on_unreadable_record(name: &str, unreadable: &UnreadableRecord) -> Progress {
    Progress::waiting(
        Reason::InFlightUnreadable,
        unreadable.wait_message("mongodbreplicaset", name, "/status/membershipChange"),
    )
}

/// The kind recorded for a reconfiguration.
pub(crate) fn change_kind(change: Change) -> ChangeKind {
    match change {
        Change::Add => ChangeKind::Add,
        Change::Promote => ChangeKind::Promote,
        Change::Demote => ChangeKind::Demote,
        Change::Remove => ChangeKind::Remove,
        Change::Adjust => ChangeKind::Reconfigure,
    }
}

/// The status of what was observed, before the step.
pub(crate) fn status_from(
    replica_set: &MongoDBReplicaSet,
    desired: &Desired,
    observed: &Observed,
    now: Timestamp,
) -> MongoDBReplicaSetStatus {
    let mut status = replica_set.status.clone().unwrap_or_default();
    if observed.config.is_some() && status.initiated_at.is_none() {
        status.initiated_at = Some(Time(now));
    }
    let (named, lost) = (status.primary.take(), status.lost_primary.take());
    status.primary = observed
        .primary
        .as_ref()
        .and_then(|host| observed.members.iter().find(|member| &member.host == host))
        .map(|member| member.name.clone());
    status.config_version = observed.config.as_ref().map(|config| config.version);
    status.feature_compatibility_version = observed.feature_compatibility.as_ref().map(ToString::to_string);
    let previous_members = std::mem::take(&mut status.members);
    status.members = observed
        .members
        .iter()
        .map(|seen| {
            let mut member = member_status(seen, desired, observed);
            let before = previous_members.iter().find(|m| m.name == member.name);
            member.failing_since = quorum_core::status::failing_since(
                before.and_then(|m| m.failing_since.as_ref()),
                &observed.health(&seen.host),
                now,
            );
            member
        })
        .collect();
    // A primary the operator stepped down hands over as asked: no failover.
    let stepped_down = |from: &str| {
        status
            .membership_change
            .as_ref()
            .is_some_and(|change| change.kind == ChangeKind::StepDown && change.member == from)
    };
    let following = quorum_core::failover::follow(named, lost, status.primary.as_deref());
    status.lost_primary = following.lost;
    match (following.changed_from, &status.primary) {
        (Some(from), Some(to)) if !stepped_down(&from) => {
            let lost_at = lost_at(&status, observed, &from);
            let elected_at = observed
                .status
                .as_ref()
                .and_then(|reported| reported.own())
                .filter(|own| {
                    own.state == MemberState::Primary && Some(&own.host) == observed.primary.as_ref()
                })
                .and_then(|own| own.elected_at)
                .map(Time);
            status.last_failover = Some(ObservedFailover::new(from, to.clone(), lost_at, elected_at, now));
        }
        _ => {}
    }
    status.ready_members = status
        .members
        .iter()
        .filter(|member| {
            member.health == "Healthy" && matches!(member.state.as_str(), "PRIMARY" | "SECONDARY" | "ARBITER")
        })
        .count() as i32;
    status
}

/// When the primary `from` was lost: the operator's first failed observation of it, or, when
/// earlier, the answering member's last heartbeat from it while that member no longer hears it
/// (the operator may have looked only once the set had elected another).
fn lost_at(status: &MongoDBReplicaSetStatus, observed: &Observed, from: &str) -> Option<Time> {
    let failing_since = status
        .members
        .iter()
        .find(|member| member.name == from)
        .and_then(|member| member.failing_since.clone());
    let heard_last = observed
        .members
        .iter()
        .find(|member| member.name == from)
        .and_then(|member| observed.status.as_ref()?.member(&member.host))
        .filter(|reported| !reported.healthy)
        .and_then(|reported| reported.last_heard_from);
    match (failing_since, heard_last) {
        (Some(failing), Some(heard)) => Some(Time(failing.0.min(heard))),
        (failing, heard) => failing.or(heard.map(Time)),
    }
}

/// Where a repair asked for stands, for `status.repair`; `None` once the request is gone.
/// `recorded` is `status.repair` as this pass left it (the wipe it recorded before acting).
pub(crate) fn repair_record(
    observed: &Observed,
    recorded: Option<&RepairRecord>,
    progress: &Progress,
) -> Option<RepairRecord> {
    let request = observed.repair.as_ref()?;
    let wiped_now = recorded
        .filter(|record| record.member == request.member)
        .and_then(WipedPod::recorded);
    let member = observed
        .members
        .iter()
        .find(|member| member.name == request.member);
    let repair = PodRepair {
        member: request.member.clone(),
        ordinal: None,
        taken: request.taken.clone(),
        taken_claim: request.taken_claim.clone(),
        pod_uid: member.and_then(|member| member.pod_uid.clone()),
        claim_uid: observed.repair_claim.clone(),
    };
    let back = member.is_some_and(|member| {
        observed.state(&member.host) == Some(MemberState::Secondary)
            && observed.health(&member.host).is_healthy()
    });
    let waiting = progress.message().unwrap_or("waiting for the next pass");
    Some(repair.record(wiped_now.as_ref(), waiting, back))
}

/// Where a recovery asked for stands, for `status.recovery`; `None` once the request is gone.
/// Done once the forced configuration was taken: as recorded before, or as this pass recorded
/// it (`recorded`) before sending it.
pub(crate) fn recovery_record(
    observed: &Observed,
    recorded: Option<&RecoveryRecord>,
    progress: &Progress,
) -> Option<RecoveryRecord> {
    let request = observed.recovery.as_ref()?;
    if let Some(replaced) = &request.done {
        return Some(request.done(replaced));
    }
    if request.expired {
        return Some(request.expire());
    }
    // Recorded as taken by this pass before the configuration was sent (a refusal removed it).
    if let Some(taken) = recorded.filter(|r| r.member == request.member && r.phase == RecoveryPhase::Done) {
        return Some(taken.clone());
    }
    Some(match progress {
        Progress::Waiting {
            reason: Reason::RecoveryRefused,
            message,
        } => request.waiting(message.clone()),
        Progress::Failed { message, .. } => request.waiting(message.clone()),
        // While the majority is lost and the request is open, every pass decides on the
        // request: anything else means the set is not (or no longer) in that state.
        _ => request.expire(),
    })
}

pub(crate) fn member_status(seen: &SeenMember, desired: &Desired, observed: &Observed) -> MemberStatus {
    let configured = observed
        .config
        .as_ref()
        .and_then(|config| config.member(&seen.host));
    let reported = observed
        .status
        .as_ref()
        .and_then(|status: &ReplStatus| status.member(&seen.host));
    let wanted = desired.members.iter().find(|member| member.host == seen.host);
    let state = match (configured, reported) {
        (None, _) => "NotAMember".to_string(),
        (Some(_), Some(reported)) => reported.state.as_str().to_string(),
        (Some(_), None) => "UNKNOWN".to_string(),
    };
    let health = observed.health(&seen.host);
    MemberStatus {
        name: seen.name.clone(),
        host: Some(seen.host.clone()),
        state,
        health: health.as_str().to_string(),
        votes: configured.map_or(0, |member| member.votes),
        priority: configured.map_or(0.0, |member| member.priority),
        hidden: configured.is_some_and(|member| member.hidden),
        arbiter: configured.map_or(wanted.is_some_and(|member| member.arbiter), |member| {
            member.arbiter_only
        }),
        lag_seconds: configured.and_then(|_| observed.lag_seconds(&seen.host)),
        version: seen.server_version.clone(),
        message: health.detail().map(str::to_string),
        failing_since: None,
    }
}

/// The health of each member that votes: as the configuration says, or, when no member gave
/// the configuration (every member silent, say), as desired. A replica set whose members all
/// stopped answering has lost its quorum, not its voters.
pub(crate) fn voter_healths<'a>(
    members: &'a [MemberStatus],
    desired: &Desired,
    config_known: bool,
) -> Vec<&'a str> {
    members
        .iter()
        .filter(|member| {
            if config_known {
                member.votes > 0
            } else {
                desired
                    .members
                    .iter()
                    .any(|wanted| wanted.name == member.name && wanted.votes > 0)
            }
        })
        .map(|member| member.health.as_str())
        .collect()
}

/// Sets `Ready`, `Progressing` and `Degraded` from a pass's findings.
pub(crate) fn set_conditions(
    status: &mut MongoDBReplicaSetStatus,
    replica_set: &MongoDBReplicaSet,
    ready: ConditionUpdate,
    progress: &Progress,
    degraded: Option<(&'static str, String)>,
    now: Timestamp,
) {
    let generation = replica_set.metadata.generation;
    status.observed_generation = generation;
    let degraded = degraded.or_else(|| {
        quorum_core::backup::drill::drill_failed(status.last_drill.as_ref()).then(|| {
            (
                "BackupUnverified",
                "the last restore drill failed: see BackupUnverified".to_string(),
            )
        })
    });
    let findings = Findings {
        ready,
        progress,
        settled: "the replica set matches its spec",
        degraded,
        healthy: "every member is healthy",
    };
    quorum_core::pass::set_conditions(&mut status.conditions, generation, findings, now);
    quorum_core::backup::set_backup_stale(
        &mut status.conditions,
        replica_set.spec.backup.as_ref().map(|policy| &policy.policy),
        status.last_backup.as_ref(),
        replica_set.metadata.creation_timestamp.as_ref().map(|t| t.0),
        generation,
        now,
    );
    quorum_core::backup::drill::set_backup_unverified(
        &mut status.conditions,
        status.last_drill.as_ref(),
        generation,
        now,
    );
}

#[cfg(test)]
mod tests {
    use quorum_core::events::Severity;

    use super::*;

    #[test]
    fn voters_are_as_configured_or_as_desired_when_no_member_gave_the_configuration() {
        let member = |name: &str, health: &str, votes: i32| MemberStatus {
            name: name.into(),
            host: None,
            state: "UNKNOWN".into(),
            health: health.into(),
            votes,
            priority: 0.0,
            hidden: false,
            arbiter: false,
            lag_seconds: None,
            version: None,
            message: None,
            failing_since: None,
        };
        let wanted = |name: &str, votes: i32| crate::decide::DesiredMember {
            name: name.into(),
            host: format!("{name}.rs"),
            id: 0,
            votes,
            priority: 1.0,
            hidden: false,
            arbiter: false,
        };
        let desired = Desired {
            set_name: "rs".into(),
            members: vec![wanted("rs-0", 1), wanted("rs-1", 1), wanted("rs-2", 0)],
            version: "8.0.4".into(),
        };
        let configured = [
            member("rs-0", "Healthy", 1),
            member("rs-1", "Unknown", 1),
            member("rs-2", "Healthy", 0),
        ];
        assert_eq!(voter_healths(&configured, &desired, true), ["Healthy", "Unknown"]);
        // Every member silent: no configuration read, every vote shown as 0.
        let silent = [
            member("rs-0", "Unknown", 0),
            member("rs-1", "Unknown", 0),
            member("rs-2", "Unknown", 0),
        ];
        assert_eq!(voter_healths(&silent, &desired, false), ["Unknown", "Unknown"]);
    }

    fn status_with(change: serde_json::Value) -> MongoDBReplicaSetStatus {
        serde_json::from_value(serde_json::json!({ "membershipChange": change })).expect("a status as stored")
    }

    #[test]
    fn changes_recorded_by_earlier_versions_still_read_and_round_trip() {
        let at = "2026-01-01T00:00:00Z";
        let stored = [
            serde_json::json!({"kind": "Initiate", "member": "rs-0", "startedAt": at}),
            serde_json::json!({"kind": "Add", "member": "rs-3", "fromConfigVersion": 5, "startedAt": at}),
            serde_json::json!({"kind": "Promote", "member": "rs-3", "fromConfigVersion": 6, "startedAt": at}),
            serde_json::json!({"kind": "Demote", "member": "rs-2", "fromConfigVersion": 7, "startedAt": at}),
            serde_json::json!({"kind": "Remove", "member": "rs-2", "fromConfigVersion": 8, "startedAt": at}),
            serde_json::json!({"kind": "Reconfigure", "member": "rs-4", "fromConfigVersion": 9, "startedAt": at}),
            serde_json::json!({"kind": "StepDown", "member": "rs-0", "fromConfigVersion": 9, "startedAt": at}),
            serde_json::json!({"kind": "Restart", "member": "rs-1", "fromConfigVersion": 9, "startedAt": at}),
            serde_json::json!({"kind": "Resync", "member": "rs-2", "fromConfigVersion": 9, "startedAt": at}),
            serde_json::json!({"kind": "SetFeatureCompatibilityVersion", "member": "8.0", "fromConfigVersion": 9, "startedAt": at}),
            serde_json::json!({"kind": "Restore", "member": "rs-0", "fromConfigVersion": 1, "startedAt": at}),
        ];
        for json in stored {
            let status = status_with(json.clone());
            let recorded = recorded_change(Some(&status))
                .unwrap_or_else(|error| panic!("{json}: {error}"))
                .expect("a change");
            assert_eq!(recorded.kind, json["kind"].as_str().unwrap(), "{json}");
            assert!(!matches!(recorded.kind, ChangeKind::Unrecognized(_)), "{json}");
            let started_at = status.membership_change.as_ref().unwrap().started_at.clone();
            let written = serde_json::to_string(&recorded.record(started_at)).unwrap();
            assert_eq!(
                written,
                serde_json::to_string(&json).unwrap(),
                "written as it was stored"
            );
            // The status as a whole is written back as it was read.
            assert_eq!(
                serde_json::to_value(&status).unwrap(),
                serde_json::json!({ "readyMembers": 0, "membershipChange": json })
            );
        }
        assert_eq!(
            recorded_change(Some(&MongoDBReplicaSetStatus::default())),
            Ok(None)
        );
        assert_eq!(recorded_change(None), Ok(None));
    }

    #[test]
    fn an_unknown_or_incomplete_recorded_change_is_unreadable_never_absent() {
        // The configuration version is a note for people (the member the change concerns and its
        // kind are what the pass acts on): a record without one still reads.
        let without_version = status_with(
            serde_json::json!({"kind": "Restart", "member": "rs-1", "startedAt": "2026-01-01T00:00:00Z"}),
        );
        assert!(recorded_change(Some(&without_version)).unwrap().is_some());
        let at = "2026-01-01T00:00:00Z";
        let cases = [
            (
                serde_json::json!({"kind": "Rewind", "member": "rs-1", "fromConfigVersion": 3, "startedAt": at}),
                "status.membershipChange.kind",
            ),
            (
                serde_json::json!({"kind": "Restart", "member": "", "fromConfigVersion": 3, "startedAt": at}),
                "status.membershipChange.member",
            ),
        ];
        for (json, field) in cases {
            let status = status_with(json.clone());
            let error = recorded_change(Some(&status)).unwrap_err();
            assert_eq!(error.field, field, "{json}");
            // Kept as stored, so writing the status back does not erase or change it.
            assert_eq!(
                serde_json::to_value(status.membership_change.as_ref().unwrap()).unwrap(),
                json
            );
        }
    }

    #[test]
    fn an_unreadable_record_is_a_warning_wait_that_says_how_to_clear_it() {
        let status = status_with(
            serde_json::json!({"kind": "Rewind", "member": "rs-1", "startedAt": "2026-01-01T00:00:00Z"}),
        );
        let unreadable = recorded_change(Some(&status)).unwrap_err();
        let progress = wait_on_unreadable_record("orders", &unreadable);
        let (severity, reason, message) = progress.event().expect("an event");
        assert_eq!(
            (severity, reason),
            (Severity::Warning, Reason::InFlightUnreadable)
        );
        assert!(message.contains("`Rewind`"), "{message}");
        assert!(
            message.contains("kubectl patch mongodbreplicaset orders --subresource=status")
                && message.contains("{\"status\":{\"membershipChange\":null}}"),
            "{message}"
        );
        let condition = progress.progressing("the replica set matches its spec");
        assert_eq!(
            (condition.status, condition.reason.as_str()),
            (true, "InFlightUnreadable")
        );
    }

    #[test]
    fn a_reconfiguration_records_the_kind_it_always_did() {
        for change in [
            Change::Add,
            Change::Promote,
            Change::Demote,
            Change::Remove,
            Change::Adjust,
        ] {
            assert_eq!(change_kind(change).as_str(), change.as_str());
        }
    }
}
