//! Status and pod roles as pure functions of what was observed and decided.
//!
//! Conditions are computed from the gathered facts, never from what was desired: `Ready`
//! means the primary accepts writes and every replica replicates from it.

use std::collections::BTreeMap;

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::ResourceExt;
use quorum_core::{
    availability::health::Health,
    conditions::{ConditionType, ConditionUpdate, set_condition},
    pass::{Progress, Reason as _, UnreadableRecord},
};

use crate::{
    crd::{
        FailoverRecord, InFlightAction, InFlightStep, MemberStatus, MySQLCluster, MySQLClusterStatus,
        PrimaryPosition, RestoreRecord,
    },
    decide::{Decision, InFlight, MemberFact, RESTORE_TARGET, Reason, ServerState, Step, Wait, errant},
    resources::{RoleLabel, member_name, member_selector_string, ordinal_of},
};

/// A replica this far behind or less is caught up and in the replicas Service.
pub const CAUGHT_UP_LAG_SECONDS: u64 = 1;

/// The step in flight as recorded in status. A record this operator cannot read (an unknown
/// action, a member that is not one of this cluster's, a change of primary without the member it
/// replaces) is an error naming the field, never taken for no step.
pub fn in_flight_from_status(cluster: &MySQLCluster) -> Result<Option<InFlight>, UnreadableRecord> {
    let Some(step) = cluster.status.as_ref().and_then(|s| s.in_flight.as_ref()) else {
        return Ok(None);
    };
    let name = cluster.name_any();
    let action = step.action.known()?;
    let member_of = |field: &'static str, member: &str| {
        ordinal_of(&name, member)
            .ok_or_else(|| UnreadableRecord::new(field, format!("`{member}` is no member of {name}")))
    };
    let member = member_of("status.inFlight.member", &step.member)?;
    let from = || match step.from.as_deref() {
        Some(from) => member_of("status.inFlight.from", from),
        None => Err(UnreadableRecord::new(
            "status.inFlight.from",
            format!("missing for {action}"),
        )),
    };
    Ok(Some(match action {
        InFlightAction::Failover => InFlight::Failover {
            from: from()?,
            to: member,
        },
        InFlightAction::Switchover => InFlight::Switchover {
            from: from()?,
            to: member,
        },
        InFlightAction::RemoveMember => InFlight::RemoveMember { ordinal: member },
        InFlightAction::Restore => InFlight::Restore { ordinal: member },
        InFlightAction::Restart => InFlight::Restart { ordinal: member },
        InFlightAction::Unrecognized(_) => unreachable!("known() refuses it"),
    }))
}

/// The status record of a step in flight, keeping the start time of a step already recorded.
pub fn in_flight_to_status(cluster: &MySQLCluster, in_flight: &InFlight, now: Timestamp) -> InFlightStep {
    if in_flight_from_status(cluster).ok().flatten().as_ref() == Some(in_flight)
        && let Some(recorded) = cluster.status.as_ref().and_then(|s| s.in_flight.clone())
    {
        return recorded;
    }
    let name = cluster.name_any();
    let (action, member, from) = match *in_flight {
        InFlight::Failover { from, to } => (InFlightAction::Failover, to, Some(from)),
        InFlight::Switchover { from, to } => (InFlightAction::Switchover, to, Some(from)),
        InFlight::RemoveMember { ordinal } => (InFlightAction::RemoveMember, ordinal, None),
        InFlight::Restore { ordinal } => (InFlightAction::Restore, ordinal, None),
        InFlight::Restart { ordinal } => (InFlightAction::Restart, ordinal, None),
    };
    InFlightStep {
        action,
        member: member_name(&name, member),
        from: from.map(|from| member_name(&name, from)),
        started_at: Time(now),
        primary_lost_at: None,
    }
}

/// The wait of a pass that cannot read the step recorded in flight: what to run, for people.
pub fn unreadable_record_wait(cluster: &MySQLCluster, unreadable: &UnreadableRecord) -> Wait {
    Wait {
        reason: Reason::InFlightUnreadable,
        message: unreadable.wait_message("mysqlcluster", &cluster.name_any(), "/status/inFlight"),
    }
}

/// The status of a pass that cannot read the step recorded in flight: `wait` in `Progressing`,
/// and the record kept exactly as stored (never dropped, never rewritten).
pub fn status_keeping_unreadable_record(
    cluster: &MySQLCluster,
    members: &[MemberFact],
    primary: Option<usize>,
    wait: &Wait,
    now: Timestamp,
) -> MySQLClusterStatus {
    let decision = Decision::Wait(wait.clone());
    let mut status = build_status(
        cluster, members, &decision, primary, None, None, None, None, None, now,
    );
    status.in_flight = cluster.status.as_ref().and_then(|s| s.in_flight.clone());
    status
}

/// The record of a completed change of primary, timed from when it was recorded in flight.
pub fn failover_record(recorded: &InFlightStep, now: Timestamp) -> FailoverRecord {
    let elapsed = now.duration_since(recorded.started_at.0);
    let lost_at = recorded.primary_lost_at.clone();
    FailoverRecord {
        // The stored kind, as its string (`Failover` or `Switchover`).
        kind: recorded.action.to_string(),
        from: recorded.from.clone().unwrap_or_default(),
        to: recorded.member.clone(),
        started_at: recorded.started_at.clone(),
        completed_at: Time(now),
        duration_millis: elapsed.as_millis() as i64,
        from_loss_millis: lost_at
            .as_ref()
            .map(|lost| now.duration_since(lost.0).as_millis().max(0) as i64),
        lost_at,
    }
}

/// The role label each member's pod should carry; `None` leaves a pod's label as it is (a
/// member the operator cannot see is not moved in or out of a Service on a guess).
pub fn role_labels(
    members: &[MemberFact],
    primary: Option<usize>,
    in_flight: Option<&InFlight>,
) -> BTreeMap<usize, Option<RoleLabel>> {
    let fenced = match in_flight {
        Some(InFlight::Failover { from, .. } | InFlight::Switchover { from, .. }) => Some(*from),
        _ => None,
    };
    let primary_state = primary
        .and_then(|p| members.iter().find(|m| m.ordinal == p))
        .and_then(|m| m.state.as_ref());
    members
        .iter()
        .map(|member| {
            let role = if Some(member.ordinal) == fenced {
                Some(RoleLabel::Fenced)
            } else if Some(member.ordinal) == primary {
                Some(RoleLabel::Primary)
            } else {
                member.state.as_ref().map(|state| {
                    let replicating = state.replication.as_ref().is_some_and(|r| {
                        r.source == primary
                            && r.running()
                            && r.lag_seconds.is_some_and(|lag| lag <= CAUGHT_UP_LAG_SECONDS)
                    });
                    match primary_state {
                        Some(primary) if errant(state, primary).is_some() => RoleLabel::Fenced,
                        _ if replicating && member.health.is_healthy() => RoleLabel::Replica,
                        _ => RoleLabel::CatchingUp,
                    }
                })
            };
            (member.ordinal, role)
        })
        .collect()
}

/// The status to write after this pass. `restored` is a restore completed in this pass;
/// `accounts` are the `spec.users` accounts this pass made sure exist on the primary (`None`:
/// those stored).
#[allow(clippy::too_many_arguments)]
pub fn build_status(
    cluster: &MySQLCluster,
    members: &[MemberFact],
    decision: &Decision,
    primary: Option<usize>,
    in_flight: Option<&InFlight>,
    last_failover: Option<FailoverRecord>,
    restored: Option<RestoreRecord>,
    primary_volume: Option<&str>,
    accounts: Option<Vec<String>>,
    now: Timestamp,
) -> MySQLClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let accounts = accounts.unwrap_or_else(|| previous.accounts.clone());
    let restored = restored.or(previous.restored_from.clone());
    let name = cluster.name_any();
    let labels = role_labels(members, primary, in_flight);
    let failing_since = |member: &str, health: &Health| {
        let before = previous.members.iter().find(|m| m.name == member);
        quorum_core::status::failing_since(before.and_then(|m| m.failing_since.as_ref()), health, now)
    };
    let primary_state = primary
        .and_then(|p| members.iter().find(|m| m.ordinal == p))
        .and_then(|m| m.state.as_ref());
    let member_statuses: Vec<MemberStatus> = members
        .iter()
        .map(|member| {
            let role = match labels.get(&member.ordinal).copied().flatten() {
                Some(RoleLabel::Primary) => "Primary",
                Some(RoleLabel::Fenced) => "Fenced",
                Some(RoleLabel::Replica | RoleLabel::CatchingUp) => "Replica",
                None => "Unknown",
            };
            let state = member.state.as_ref();
            let member_name = member_name(&name, member.ordinal);
            MemberStatus {
                failing_since: failing_since(&member_name, &member.health),
                name: member_name,
                role: role.into(),
                health: member.health.as_str().into(),
                gtid: state.map(|s| s.executed.to_string()),
                lag_seconds: state
                    .and_then(|s| s.replication.as_ref())
                    .and_then(|r| r.lag_seconds)
                    .map(|lag| lag as i64),
                errant: state.zip(primary_state).and_then(|(s, p)| errant(s, p)),
                message: member.health.detail().map(str::to_string),
            }
        })
        .collect();
    let ready_replicas = labels
        .values()
        .filter(|role| **role == Some(RoleLabel::Replica))
        .count();
    let desired = usize::try_from(cluster.spec.replicas).unwrap_or(0);
    let primary_open = primary_state.is_some_and(|s| !s.read_only);

    let generation = cluster.metadata.generation;
    let mut conditions = previous.conditions.clone();
    let missing_accounts: Vec<&str> = cluster
        .spec
        .users
        .iter()
        .map(|user| user.name.as_str())
        .filter(|name| !accounts.iter().any(|created| created == name))
        .collect();
    let replicating = primary_open && ready_replicas + 1 == desired && members.len() == desired;
    let ready = if replicating && !missing_accounts.is_empty() {
        ConditionUpdate::new(
            ConditionType::Ready,
            false,
            "AccountsPending",
            format!(
                "every member replicates; creating the accounts of spec.users on the primary: {}",
                missing_accounts.join(", ")
            ),
        )
    } else if replicating {
        ConditionUpdate::new(
            ConditionType::Ready,
            true,
            "AllMembersReplicating",
            format!("the primary accepts writes and {ready_replicas} replicas are caught up"),
        )
    } else if !primary_open {
        ConditionUpdate::new(
            ConditionType::Ready,
            false,
            "NoWritablePrimary",
            "no primary accepts writes yet",
        )
    } else {
        ConditionUpdate::new(
            ConditionType::Ready,
            false,
            "ReplicasNotReady",
            format!(
                "{ready_replicas} of {} replicas are caught up",
                desired.saturating_sub(1)
            ),
        )
    };
    set_condition(&mut conditions, ready, generation, now);

    let progressing = progress(&name, decision).progressing("the cluster matches its spec");
    set_condition(&mut conditions, progressing, generation, now);

    let unhealthy = members.iter().find(|m| matches!(m.health, Health::Unhealthy(_)));
    let unknown = members.iter().find(|m| matches!(m.health, Health::Unknown(_)));
    let errant_member = member_statuses.iter().find(|m| m.errant.is_some());
    let degraded = match (errant_member, unhealthy, unknown) {
        (Some(member), _, _) => ConditionUpdate::new(
            ConditionType::Degraded,
            true,
            "ErrantTransactions",
            format!(
                "{} has transactions the primary does not ({}); kept out of service, nothing discarded",
                member.name,
                member.errant.as_deref().unwrap_or_default()
            ),
        ),
        (None, Some(member), _) => ConditionUpdate::new(
            ConditionType::Degraded,
            true,
            "MemberUnhealthy",
            format!(
                "{}: {}",
                member_name(&name, member.ordinal),
                member.health.detail().unwrap_or_default()
            ),
        ),
        (None, None, Some(member)) => ConditionUpdate::new(
            ConditionType::Degraded,
            true,
            "MemberUnknown",
            format!(
                "{} is unreachable from the operator (not assumed down): {}",
                member_name(&name, member.ordinal),
                member.health.detail().unwrap_or_default()
            ),
        ),
        (None, None, None) => ConditionUpdate::new(
            ConditionType::Degraded,
            false,
            "NoFault",
            "every member is healthy",
        ),
    };
    set_condition(&mut conditions, degraded, generation, now);
    quorum_core::backup::set_backup_stale(
        &mut conditions,
        cluster.spec.backup.as_ref().map(|policy| &policy.policy),
        previous.last_backup.as_ref(),
        cluster.metadata.creation_timestamp.as_ref().map(|t| t.0),
        generation,
        now,
    );
    quorum_core::backup::drill::set_drill_conditions(
        &mut conditions,
        previous.last_drill.as_ref(),
        generation,
        now,
    );
    if let Some(source) = &cluster.spec.restore_from {
        set_condition(
            &mut conditions,
            restored_condition(&name, &source.backup.backup_name, restored.as_ref(), decision),
            generation,
            now,
        );
    }

    let in_flight = in_flight.map(|step| {
        let mut record = in_flight_to_status(cluster, step, now);
        // Only when the step is recorded: a failure seen later (of a primary that was healthy
        // when the failover was decided, or under a record an earlier version wrote) is not
        // when it was lost.
        if record.action == InFlightAction::Failover && record.started_at.0 == now {
            record.primary_lost_at = member_statuses
                .iter()
                .find(|m| Some(&m.name) == record.from.as_ref())
                .and_then(|m| m.failing_since.clone());
        }
        record
    });
    MySQLClusterStatus {
        observed_generation: generation,
        replicas: members.len() as i32,
        ready_replicas: ready_replicas as i32,
        selector: member_selector_string(cluster),
        primary: primary.map(|p| member_name(&name, p)),
        members: member_statuses,
        in_flight,
        last_failover: last_failover.or(previous.last_failover),
        last_backup: previous.last_backup,
        last_drill: previous.last_drill,
        restored_from: restored,
        restore_failures: previous.restore_failures,
        repair: previous.repair,
        recovery: previous.recovery,
        primary_last_open: primary_last_open(
            &name,
            primary,
            primary_state,
            primary_volume,
            previous.primary_last_open,
        )
        .map(|mut last| {
            // Reopened by this pass, perhaps on a new volume: the next pass reads which.
            if matches!(decision, Decision::Act(Step::OpenPrimary { ordinal }) if Some(*ordinal) == primary) {
                last.volume = None;
            }
            last
        }),
        accounts,
        conditions,
    }
}

/// What the primary holds while it accepts writes, on which volume (`volume`, its claim's uid
/// when read this pass); else what it was last seen holding then, as long as it is still the
/// primary (a restarted primary's new volume is never written over the one it was seen on).
fn primary_last_open(
    cluster: &str,
    primary: Option<usize>,
    primary_state: Option<&ServerState>,
    volume: Option<&str>,
    previous: Option<PrimaryPosition>,
) -> Option<PrimaryPosition> {
    let member = member_name(cluster, primary?);
    let previous = previous.filter(|last| last.member == member);
    match primary_state {
        Some(state) if !state.read_only && state.replication.is_none() => Some(PrimaryPosition {
            gtid: state.executed.to_string(),
            volume: volume
                .map(str::to_string)
                .or_else(|| previous.and_then(|last| last.volume)),
            member,
        }),
        _ => previous,
    }
}

/// The `Restored` condition of a cluster created from a backup: true once the restore is
/// recorded, else why it has not happened yet.
fn restored_condition(
    cluster: &str,
    backup: &str,
    restored: Option<&RestoreRecord>,
    decision: &Decision,
) -> ConditionUpdate {
    match (restored, decision) {
        (Some(record), _) => ConditionUpdate::new(
            RESTORED_CONDITION,
            true,
            "Restored",
            format!(
                "restored from MySQLBackup {} ({}, sha256 {}) into {} at GTID position {}",
                record.backup_name, record.location, record.sha256, record.member, record.gtid_position
            ),
        ),
        (None, Decision::Wait(wait))
            if matches!(
                wait.reason,
                Reason::RestoreSourceNotReady | Reason::RestoreRefused
            ) =>
        {
            ConditionUpdate::new(
                RESTORED_CONDITION,
                false,
                wait.reason.as_str(),
                wait.message.clone(),
            )
        }
        (None, _) => ConditionUpdate::new(
            RESTORED_CONDITION,
            false,
            "RestorePending",
            format!(
                "MySQLBackup {backup} is restored into {} before a primary is opened",
                member_name(cluster, RESTORE_TARGET)
            ),
        ),
    }
}

/// The condition a cluster created with `restoreFrom` carries.
pub const RESTORED_CONDITION: &str = "Restored";

/// Where a decision leaves the cluster, for the `Progressing` condition: a step is reported as
/// taken (its reason and sentence), a wait as it is.
pub fn progress(cluster: &str, decision: &Decision) -> Progress<Reason> {
    match decision {
        Decision::Settled => Progress::Settled,
        Decision::Act(step) => Progress::Acted {
            reason: step_reason(step),
            message: describe(cluster, step),
        },
        Decision::Wait(wait) => Progress::from(wait.clone()),
    }
}

/// The condition and event reason for a step.
pub fn step_reason(step: &Step) -> Reason {
    match step {
        Step::ScalePods { .. } => Reason::ScalingPods,
        Step::OpenPrimary { .. } => Reason::OpeningPrimary,
        Step::Failover { .. } => Reason::FailingOver,
        Step::Switchover { .. } => Reason::SwitchingOver,
        Step::SeedMember { .. } => Reason::SeedingMember,
        Step::StartReplication { .. } => Reason::StartingReplication,
        Step::SetSemiSync { .. } => Reason::SettingSemiSync,
        Step::SetBinlogExpiry { .. } => Reason::SettingBinlogExpiry,
        Step::FenceMember { .. } => Reason::FencingMember,
        Step::RemoveMember { .. } => Reason::RemovingMember,
        Step::Restore { .. } => Reason::Restoring,
        Step::RestartMember { .. } => Reason::RestartingMember,
        Step::WipeMember { .. } => Reason::RebuildingMember,
        Step::ClearInFlight => Reason::StepCompleted,
    }
}

/// A sentence for a step, for conditions and events.
pub fn describe(cluster: &str, step: &Step) -> String {
    let name = |ordinal: usize| member_name(cluster, ordinal);
    match *step {
        Step::ScalePods { replicas } => format!("running {replicas} member pods"),
        Step::OpenPrimary { ordinal } => format!("opening {} for writes as the primary", name(ordinal)),
        Step::Failover { from, to } => format!(
            "failing over from {} (down, as its replicas report) to {}",
            name(from),
            name(to)
        ),
        Step::Switchover { from, to } => {
            format!("switching the primary over from {} to {}", name(from), name(to))
        }
        Step::SeedMember { ordinal } => format!(
            "copying a consistent snapshot of the primary into {} before it replicates",
            name(ordinal)
        ),
        Step::StartReplication { ordinal } => format!("pointing {} at the primary", name(ordinal)),
        Step::SetSemiSync { ordinal, on } => format!(
            "turning semi-synchronous replication {} on {}",
            if on { "on" } else { "off" },
            name(ordinal)
        ),
        Step::FenceMember { ordinal } => format!(
            "making {} read-only and closing its clients' connections: it is writable but not the primary",
            name(ordinal)
        ),
        Step::SetBinlogExpiry { ordinal, seconds: 0 } => format!(
            "keeping every binary log on {} until all members replicate",
            name(ordinal)
        ),
        Step::SetBinlogExpiry { ordinal, seconds } => format!(
            "expiring binary logs on {} after {seconds} s: every member replicates",
            name(ordinal)
        ),
        Step::RemoveMember { ordinal } => {
            format!("stopping replication on {} and removing it", name(ordinal))
        }
        Step::Restore { ordinal, resume } => format!(
            "{} the backup into {}, the first primary",
            if resume {
                "restoring again (interrupted)"
            } else {
                "restoring"
            },
            name(ordinal)
        ),
        Step::RestartMember { ordinal } => format!(
            "restarting {} onto the StatefulSet's current pod template",
            name(ordinal)
        ),
        Step::WipeMember { ordinal, .. } => format!(
            "rebuilding {} on request: its claim and pod deleted, so it comes back empty and is seeded again from the primary",
            name(ordinal)
        ),
        Step::ClearInFlight => "the recorded step is complete".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, time::Instant};

    use super::*;
    use crate::crd::{Flavor, MySQLClusterSpec, MySqlRestoreSource};

    fn restored_cluster() -> MySQLCluster {
        let mut cluster = MySQLCluster::new(
            "copy",
            MySQLClusterSpec {
                replicas: 1,
                flavor: Flavor::MariaDB,
                version: "10.11.6".into(),
                image: None,
                storage: quorum_core::crd::Storage {
                    size: k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
                    storage_class_name: None,
                },
                resources: None,
                pod_template: None,
                config: BTreeMap::new(),
                root_password_secret: None,
                users: vec![],
                replication: None,
                tls: None,
                backup: None,
                restore_from: Some(MySqlRestoreSource::newest("nightly")),
            },
        );
        cluster.metadata.namespace = Some("prod".into());
        cluster
    }

    fn member() -> MemberFact {
        MemberFact {
            ordinal: 0,
            health: Health::Healthy,
            observed_at: Instant::now(),
            state: None,
        }
    }

    fn restored_condition_of(status: &MySQLClusterStatus) -> (String, String, String) {
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == RESTORED_CONDITION)
            .expect("a Restored condition");
        (
            condition.status.clone(),
            condition.reason.clone(),
            condition.message.clone(),
        )
    }

    #[test]
    fn a_restore_in_flight_round_trips_through_status() {
        let mut cluster = restored_cluster();
        let step = InFlight::Restore { ordinal: 0 };
        let recorded = in_flight_to_status(&cluster, &step, Timestamp::UNIX_EPOCH);
        assert_eq!(
            (&recorded.action, recorded.member.as_str()),
            (&InFlightAction::Restore, "copy-0")
        );
        cluster.status = Some(MySQLClusterStatus {
            in_flight: Some(recorded),
            ..MySQLClusterStatus::default()
        });
        assert_eq!(in_flight_from_status(&cluster), Ok(Some(step)));
    }

    /// A cluster whose status holds `in_flight`, JSON exactly as stored.
    fn with_in_flight(in_flight: &str) -> MySQLCluster {
        let mut cluster = restored_cluster();
        cluster.status = Some(
            serde_json::from_str(&format!(r#"{{"inFlight":{in_flight}}}"#)).expect("a status as stored"),
        );
        cluster
    }

    #[test]
    fn steps_in_flight_stored_by_earlier_versions_still_read_and_round_trip() {
        let stored = [
            (
                r#"{"action":"Failover","member":"copy-1","from":"copy-0","startedAt":"2026-01-01T00:00:00Z"}"#,
                InFlight::Failover { from: 0, to: 1 },
            ),
            (
                r#"{"action":"Switchover","member":"copy-2","from":"copy-1","startedAt":"2026-01-01T00:00:00Z"}"#,
                InFlight::Switchover { from: 1, to: 2 },
            ),
            (
                r#"{"action":"RemoveMember","member":"copy-2","startedAt":"2026-01-01T00:00:00Z"}"#,
                InFlight::RemoveMember { ordinal: 2 },
            ),
            (
                r#"{"action":"Restore","member":"copy-0","startedAt":"2026-01-01T00:00:00Z"}"#,
                InFlight::Restore { ordinal: 0 },
            ),
        ];
        for (json, expected) in stored {
            let cluster = with_in_flight(json);
            assert_eq!(
                in_flight_from_status(&cluster),
                Ok(Some(expected.clone())),
                "{json}"
            );
            // The same step keeps its record, start time included: written back byte for byte.
            let kept = in_flight_to_status(&cluster, &expected, Timestamp::now());
            assert_eq!(serde_json::to_string(&kept).unwrap(), json, "kept as stored");
            // Written anew, it is what earlier versions wrote.
            let started = "2026-01-01T00:00:00Z".parse().unwrap();
            let written = in_flight_to_status(&restored_cluster(), &expected, started);
            assert_eq!(
                serde_json::to_string(&written).unwrap(),
                json,
                "written as it was stored"
            );
        }
        assert_eq!(in_flight_from_status(&restored_cluster()), Ok(None));
    }

    #[test]
    fn a_change_of_primary_is_recorded_with_its_kind_as_stored() {
        let cluster = with_in_flight(
            r#"{"action":"Switchover","member":"copy-2","from":"copy-1","startedAt":"2026-01-01T00:00:00Z"}"#,
        );
        let recorded = cluster
            .status
            .as_ref()
            .and_then(|s| s.in_flight.as_ref())
            .unwrap();
        let record = failover_record(recorded, recorded.started_at.0);
        assert_eq!(
            (record.kind.as_str(), record.from.as_str(), record.to.as_str()),
            ("Switchover", "copy-1", "copy-2")
        );
    }

    #[test]
    fn an_unknown_or_incomplete_step_in_flight_is_unreadable_never_absent() {
        let cases = [
            (
                r#"{"action":"Rewind","member":"copy-1","startedAt":"2026-01-01T00:00:00Z"}"#,
                "status.inFlight.action",
                "`Rewind`",
            ),
            (
                r#"{"action":"RemoveMember","member":"other-2","startedAt":"2026-01-01T00:00:00Z"}"#,
                "status.inFlight.member",
                "`other-2`",
            ),
            (
                r#"{"action":"Restore","member":"copy","startedAt":"2026-01-01T00:00:00Z"}"#,
                "status.inFlight.member",
                "`copy`",
            ),
            (
                r#"{"action":"Failover","member":"copy-1","startedAt":"2026-01-01T00:00:00Z"}"#,
                "status.inFlight.from",
                "missing for Failover",
            ),
            (
                r#"{"action":"Switchover","member":"copy-1","startedAt":"2026-01-01T00:00:00Z"}"#,
                "status.inFlight.from",
                "missing for Switchover",
            ),
            (
                r#"{"action":"Switchover","member":"copy-1","from":"copy-x","startedAt":"2026-01-01T00:00:00Z"}"#,
                "status.inFlight.from",
                "`copy-x`",
            ),
        ];
        for (json, field, problem) in cases {
            let cluster = with_in_flight(json);
            let error = in_flight_from_status(&cluster).unwrap_err();
            assert_eq!(error.field, field, "{json}");
            assert!(error.to_string().contains(problem), "{json}: {error}");
            // Kept as stored, so writing the status back does not erase or change it.
            assert_eq!(
                serde_json::to_string(cluster.status.as_ref().unwrap().in_flight.as_ref().unwrap()).unwrap(),
                json
            );
        }
    }

    #[test]
    fn an_unreadable_step_in_flight_is_waited_on_and_kept_as_stored() {
        let stored =
            r#"{"action":"Rewind","member":"copy-1","from":"copy-0","startedAt":"2026-01-01T00:00:00Z"}"#;
        let cluster = with_in_flight(stored);
        let unreadable = in_flight_from_status(&cluster).unwrap_err();
        let wait = unreadable_record_wait(&cluster, &unreadable);
        let status =
            status_keeping_unreadable_record(&cluster, &[member()], Some(0), &wait, Timestamp::UNIX_EPOCH);
        assert_eq!(
            serde_json::to_string(status.in_flight.as_ref().unwrap()).unwrap(),
            stored,
            "the record stays as stored"
        );
        let progressing = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .expect("a Progressing condition");
        assert_eq!(
            (progressing.status.as_str(), progressing.reason.as_str()),
            ("True", "InFlightUnreadable")
        );
        // Says what cannot be read and how to remove the record of this very cluster.
        assert_eq!(
            progressing.message,
            unreadable.wait_message("mysqlcluster", "copy", "/status/inFlight")
        );
        assert!(
            progressing.message.contains("`Rewind`")
                && progressing
                    .message
                    .contains("kubectl patch mysqlcluster copy --subresource=status")
                && progressing.message.contains("inFlight"),
            "{}",
            progressing.message
        );
        let event = Progress::from(wait);
        assert_eq!(
            event.event().map(|(severity, reason, _)| (severity, reason)),
            Some((quorum_core::events::Severity::Warning, Reason::InFlightUnreadable))
        );
    }

    #[test]
    fn the_restored_condition_says_what_the_restore_waits_for_then_what_was_restored() {
        let mut cluster = restored_cluster();
        let now = Timestamp::UNIX_EPOCH;
        let waiting = Decision::wait(
            Reason::RestoreSourceNotReady,
            "MySQLBackup nightly does not exist",
        );
        let status = build_status(
            &cluster,
            &[member()],
            &waiting,
            None,
            None,
            None,
            None,
            None,
            None,
            now,
        );
        assert_eq!(
            restored_condition_of(&status),
            (
                "False".into(),
                "RestoreSourceNotReady".into(),
                "MySQLBackup nightly does not exist".into()
            )
        );
        let starting = Decision::wait(Reason::MembersStarting, "member 0 has not answered yet");
        let status = build_status(
            &cluster,
            &[member()],
            &starting,
            None,
            None,
            None,
            None,
            None,
            None,
            now,
        );
        assert_eq!(restored_condition_of(&status).1, "RestorePending");

        let record = RestoreRecord {
            backup_name: "nightly".into(),
            location: "/backups/prod/shop/shop/shop-20260101T000000Z.sql".into(),
            sha256: "ab".repeat(32),
            gtid_position: "0-1-42".into(),
            binlogs_replayed: None,
            member: "copy-0".into(),
            completed_at: Time(now),
        };
        let status = build_status(
            &cluster,
            &[member()],
            &Decision::Settled,
            None,
            None,
            None,
            Some(record.clone()),
            None,
            None,
            now,
        );
        assert_eq!(status.restored_from.as_ref(), Some(&record));
        let (value, reason, message) = restored_condition_of(&status);
        assert_eq!((value.as_str(), reason.as_str()), ("True", "Restored"));
        assert!(
            message.contains("MySQLBackup nightly") && message.contains("0-1-42"),
            "{message}"
        );

        // Kept from the previous status on every later pass.
        cluster.status = Some(status);
        let later = build_status(
            &cluster,
            &[member()],
            &Decision::Settled,
            Some(0),
            None,
            None,
            None,
            None,
            None,
            now,
        );
        assert_eq!(later.restored_from, Some(record));
        assert_eq!(restored_condition_of(&later).0, "True");
    }

    #[test]
    fn a_cluster_not_created_from_a_backup_has_no_restored_condition() {
        let mut cluster = restored_cluster();
        cluster.spec.restore_from = None;
        let status = build_status(
            &cluster,
            &[member()],
            &Decision::Settled,
            None,
            None,
            None,
            None,
            None,
            None,
            Timestamp::UNIX_EPOCH,
        );
        assert!(status.conditions.iter().all(|c| c.type_ != RESTORED_CONDITION));
    }

    /// What the primary held while it accepted writes is recorded, kept while it is read-only or
    /// unreachable (an empty volume must not overwrite the witness of what it lost), and
    /// dropped when another member is the primary.
    #[test]
    fn the_primary_is_recorded_holding_what_it_held_while_it_accepted_writes() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let mut cluster = restored_cluster();
        let state = |read_only: bool, executed: &str| ServerState {
            read_only,
            executed: crate::admin::gtid::GtidPosition::parse(Flavor::MariaDB, executed).unwrap(),
            replication: None,
            semi_sync_source: false,
            semi_sync_replica: false,
            binlog_expire_seconds: 0,
        };
        let with = |state: Option<ServerState>| MemberFact { state, ..member() };
        let pass_on = |cluster: &MySQLCluster, primary_state: Option<ServerState>, primary: usize, volume| {
            build_status(
                cluster,
                &[with(primary_state)],
                &Decision::Settled,
                Some(primary),
                None,
                None,
                None,
                volume,
                None,
                now,
            )
            .primary_last_open
        };
        let pass =
            |cluster: &MySQLCluster, primary_state, primary| pass_on(cluster, primary_state, primary, None);
        let open = Some(PrimaryPosition {
            member: "copy-0".into(),
            gtid: "0-1-10".into(),
            volume: Some("claim-1".into()),
        });
        assert_eq!(
            pass_on(&cluster, Some(state(false, "0-1-10")), 0, Some("claim-1")),
            open
        );
        cluster.status = Some(MySQLClusterStatus {
            primary_last_open: open.clone(),
            ..Default::default()
        });
        assert_eq!(
            pass(&cluster, Some(state(false, "0-1-10")), 0),
            open,
            "open, its claim not read again: the volume kept"
        );
        assert_eq!(
            pass_on(&cluster, Some(state(true, "")), 0, Some("claim-2")),
            open,
            "restarted read-only on a new claim: the one it was seen open on kept"
        );
        cluster.status = Some(MySQLClusterStatus {
            primary_last_open: open.clone(),
            ..Default::default()
        });
        assert_eq!(
            pass(&cluster, Some(state(true, "")), 0),
            open,
            "restarted read-only and empty"
        );
        assert_eq!(pass(&cluster, None, 0), open, "not answering");
        let reopened = build_status(
            &cluster,
            &[with(Some(state(true, "")))],
            &Decision::Act(Step::OpenPrimary { ordinal: 0 }),
            Some(0),
            None,
            None,
            None,
            Some("claim-2"),
            None,
            now,
        );
        assert_eq!(
            reopened.primary_last_open.and_then(|last| last.volume),
            None,
            "reopened: its volume read again by the next pass"
        );
        assert_eq!(pass(&cluster, None, 1), None, "another member is the primary");
        assert_eq!(
            pass(&cluster, Some(state(false, "0-1-3")), 0),
            Some(PrimaryPosition {
                member: "copy-0".into(),
                gtid: "0-1-3".into(),
                volume: Some("claim-1".into()),
            }),
            "reopened: what it holds now"
        );
    }

    /// An application told the cluster is Ready logs in: a cluster whose members replicate is
    /// not Ready until every account of `spec.users` was created on the primary.
    #[test]
    fn ready_waits_for_the_accounts_of_spec_users() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let mut cluster = restored_cluster();
        cluster.spec.restore_from = None;
        cluster.spec.users = vec![crate::crd::UserSpec {
            name: "app".into(),
            password_secret: "app-password".into(),
            database: "shop".into(),
            access: crate::crd::Access::ReadWrite,
        }];
        let open = ServerState {
            read_only: false,
            executed: crate::admin::gtid::GtidPosition::parse(Flavor::MariaDB, "0-1-10").unwrap(),
            replication: None,
            semi_sync_source: false,
            semi_sync_replica: false,
            binlog_expire_seconds: 0,
        };
        let members = [MemberFact {
            state: Some(open),
            ..member()
        }];
        let ready = |accounts: &[&str]| {
            let status = build_status(
                &cluster,
                &members,
                &Decision::Settled,
                Some(0),
                None,
                None,
                None,
                None,
                Some(accounts.iter().map(|name| name.to_string()).collect()),
                now,
            );
            let condition = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .expect("a Ready condition")
                .clone();
            (condition.status, condition.reason, status.accounts)
        };
        let (status, reason, accounts) = ready(&[]);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "AccountsPending"));
        assert!(accounts.is_empty());
        let (status, reason, accounts) = ready(&["app"]);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "AllMembersReplicating")
        );
        assert_eq!(accounts, ["app"]);
    }

    /// A failover's time from loss starts at the first pass that saw the old primary fail (kept
    /// in status across passes, and across an operator restart), is carried by the step in
    /// flight, and ends when the new primary accepts writes.
    #[test]
    fn a_failover_is_timed_from_the_first_failed_observation_of_the_old_primary() {
        let at = |seconds: i64| Timestamp::from_second(1_800_000_000 + seconds).unwrap();
        let mut cluster = restored_cluster();
        let healthy = |ordinal| MemberFact { ordinal, ..member() };
        let unknown = MemberFact {
            health: Health::Unknown("timed out".into()),
            ..member()
        };
        let step = InFlight::Failover { from: 0, to: 1 };
        let members = [unknown.clone(), healthy(1)];
        let pass = |cluster: &MySQLCluster, in_flight: Option<&InFlight>, now| {
            build_status(
                cluster,
                &members,
                &Decision::Settled,
                Some(0),
                in_flight,
                None,
                None,
                None,
                None,
                now,
            )
        };

        let first = pass(&cluster, None, at(0));
        assert_eq!(first.members[0].failing_since, Some(Time(at(0))));
        assert_eq!(first.members[1].failing_since, None);
        cluster.status = Some(first);
        let second = pass(&cluster, None, at(4));
        assert_eq!(
            second.members[0].failing_since,
            Some(Time(at(0))),
            "carried, not restarted"
        );
        cluster.status = Some(second);

        let decided = pass(&cluster, Some(&step), at(6));
        let recorded = decided.in_flight.clone().unwrap();
        assert_eq!(recorded.primary_lost_at, Some(Time(at(0))));
        // A record an earlier version wrote, without it, is not filled in by a later pass.
        let mut older = cluster.clone();
        older.status.as_mut().unwrap().in_flight = Some(InFlightStep {
            primary_lost_at: None,
            ..recorded.clone()
        });
        let later = pass(&older, Some(&step), at(8));
        assert_eq!(later.in_flight.unwrap().primary_lost_at, None);
        let record = failover_record(&recorded, at(9));
        assert_eq!(
            (record.duration_millis, record.from_loss_millis),
            (3_000, Some(9_000))
        );
        assert_eq!(record.lost_at, Some(Time(at(0))));

        // Healthy again: the clock stops.
        cluster.status = Some(decided);
        let back = build_status(
            &cluster,
            &[healthy(0), healthy(1)],
            &Decision::Settled,
            Some(0),
            None,
            None,
            None,
            None,
            None,
            at(10),
        );
        assert_eq!(back.members[0].failing_since, None);
    }
}
