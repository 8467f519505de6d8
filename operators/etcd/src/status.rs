//! Status as a pure function of what was observed and decided.
//!
//! Conditions are computed from the gathered facts, never from what was desired: `Ready`
//! means the members answered and are healthy, not that objects were applied.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::ResourceExt;
use quorum_core::{
    availability::health::Health,
    conditions::{ConditionType, ConditionUpdate, set_condition},
    crd::{ObservedFailover, RecoveryRecord, RepairPhase, RepairRecord},
    pass::UnreadableRecord,
    recovery::RecoveryRequest,
};

use crate::{
    crd::{EtcdCluster, EtcdClusterStatus, InFlightAction, InFlightStep, MemberStatus},
    decide::{Decision, InFlight, MemberFact, Reason, RepairRequest, Step},
    observe::ClusterView,
    resolver::member_name,
    resources::member_selector_string,
};

/// How long each member has been Unhealthy, from the times recorded in status.
pub fn unhealthy_durations(status: Option<&EtcdClusterStatus>, now: Timestamp) -> BTreeMap<String, Duration> {
    status
        .map(|s| s.members.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|m| {
            let since = m.unhealthy_since.as_ref()?.0;
            let elapsed = now.duration_since(since);
            Some((m.name.clone(), Duration::try_from(elapsed).unwrap_or_default()))
        })
        .collect()
}

/// The step in flight as recorded in status; a record this operator cannot read (an unknown
/// action, a member id that is not hex) is an error, never taken for no step.
pub fn in_flight_from_status(
    status: Option<&EtcdClusterStatus>,
) -> Result<Option<InFlight>, UnreadableRecord> {
    let Some(step) = status.and_then(|s| s.in_flight.as_ref()) else {
        return Ok(None);
    };
    let ordinal = usize::try_from(step.ordinal).map_err(|_| {
        UnreadableRecord::new("status.inFlight.ordinal", format!("{} is negative", step.ordinal))
    })?;
    let id = || match step.member_id.as_deref() {
        Some(id) => u64::from_str_radix(id, 16).map_err(|_| {
            UnreadableRecord::new(
                "status.inFlight.memberId",
                format!("`{id}` is not a hex member id"),
            )
        }),
        None => Err(UnreadableRecord::new(
            "status.inFlight.memberId",
            format!("missing for {}", step.action),
        )),
    };
    Ok(Some(match step.action.known()? {
        InFlightAction::AddLearner => InFlight::AddLearner { ordinal },
        InFlightAction::Promote => InFlight::Promote { ordinal, id: id()? },
        InFlightAction::Remove => InFlight::Remove { ordinal, id: id()? },
        InFlightAction::Replace => InFlight::Replace { ordinal, id: id()? },
        InFlightAction::Upgrade => InFlight::Upgrade { ordinal },
        InFlightAction::Recover => InFlight::Recover { ordinal },
        InFlightAction::ForceNewCluster => InFlight::ForceNewCluster { ordinal },
        InFlightAction::EndForceNewCluster => InFlight::EndForceNewCluster { ordinal },
        InFlightAction::RestoreInPlace => InFlight::RestoreInPlace,
        InFlightAction::RestoreForming => InFlight::RestoreForming,
        InFlightAction::Unrecognized(_) => unreachable!("known() refuses it"),
    }))
}

/// The status record of a step in flight.
pub fn in_flight_to_status(in_flight: &InFlight, now: Timestamp) -> InFlightStep {
    let (action, ordinal, id) = match *in_flight {
        InFlight::AddLearner { ordinal } => (InFlightAction::AddLearner, ordinal, None),
        InFlight::Promote { ordinal, id } => (InFlightAction::Promote, ordinal, Some(id)),
        InFlight::Remove { ordinal, id } => (InFlightAction::Remove, ordinal, Some(id)),
        InFlight::Replace { ordinal, id } => (InFlightAction::Replace, ordinal, Some(id)),
        InFlight::Upgrade { ordinal } => (InFlightAction::Upgrade, ordinal, None),
        InFlight::Recover { ordinal } => (InFlightAction::Recover, ordinal, None),
        InFlight::ForceNewCluster { ordinal } => (InFlightAction::ForceNewCluster, ordinal, None),
        InFlight::EndForceNewCluster { ordinal } => (InFlightAction::EndForceNewCluster, ordinal, None),
        InFlight::RestoreInPlace => (InFlightAction::RestoreInPlace, 0, None),
        InFlight::RestoreForming => (InFlightAction::RestoreForming, 0, None),
    };
    InFlightStep {
        action,
        ordinal: ordinal as i32,
        member_id: id.map(|id| format!("{id:x}")),
        started_at: Time(now),
    }
}

/// The members the operator still has to rebuild, as it remembers them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pending<'a> {
    /// Replaced members whose old volume is still to be wiped.
    pub wipe: &'a [usize],
    /// Members a recovery gave up, still to be added back.
    pub rejoin: &'a [usize],
}

/// The status after this pass.
pub fn build_status(
    cluster: &EtcdCluster,
    view: &ClusterView,
    members: &[MemberFact],
    decision: &Decision,
    in_flight: Option<&InFlight>,
    pending: Pending<'_>,
    now: Timestamp,
) -> EtcdClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let name = cluster.name_any();
    let previous_since: BTreeMap<&str, &Time> = previous
        .members
        .iter()
        .filter_map(|m| Some((m.name.as_str(), m.unhealthy_since.as_ref()?)))
        .collect();
    let previous_failing: BTreeMap<&str, &Time> = previous
        .members
        .iter()
        .filter_map(|m| Some((m.name.as_str(), m.failing_since.as_ref()?)))
        .collect();
    let member_statuses: Vec<MemberStatus> = members
        .iter()
        .map(|m| {
            let member = member_name(&name, m.ordinal);
            let unhealthy_since = quorum_core::status::held_since(
                previous_since.get(member.as_str()).copied(),
                matches!(m.observation.health, Health::Unhealthy(_)),
                now,
            );
            let failing_since = quorum_core::status::failing_since_heard(
                previous_failing.get(member.as_str()).copied(),
                &m.observation.health,
                view.heard_failing_at.get(&m.ordinal).copied(),
                now,
            );
            MemberStatus {
                peer_url: view
                    .membership
                    .as_deref()
                    .and_then(|list| list.iter().find(|i| i.id == m.id))
                    .and_then(|i| i.peer_urls.first().cloned()),
                name: member,
                id: Some(format!("{:x}", m.id)),
                health: m.observation.health.as_str().to_string(),
                leader: m.leader,
                learner: m.learner,
                unhealthy_since,
                failing_since,
            }
        })
        .collect();
    let voters_started = members.iter().filter(|m| !m.learner && m.started).count();
    let versions: Vec<&str> = members.iter().filter_map(|m| m.version.as_deref()).collect();
    let agreed_version = (!versions.is_empty()
        && versions.len() == members.len()
        && versions.windows(2).all(|w| w[0] == w[1]))
    .then(|| versions[0].to_string())
    .or(previous.version.clone());

    let mut conditions = previous.conditions.clone();
    let generation = cluster.metadata.generation;
    let desired = usize::try_from(cluster.spec.replicas).unwrap_or(0);
    let healthy_voters = members
        .iter()
        .filter(|m| !m.learner && m.observation.health.is_healthy())
        .count();
    let ready = view.membership.is_some() && healthy_voters == desired && members.len() == desired;
    let ready_update = if ready {
        ConditionUpdate::new(
            ConditionType::Ready,
            true,
            "AllMembersHealthy",
            format!("{healthy_voters} of {desired} members healthy"),
        )
    } else if view.membership.is_none() {
        ConditionUpdate::new(
            ConditionType::Ready,
            false,
            "NoMemberReachable",
            "no member answered the operator yet",
        )
    } else {
        ConditionUpdate::new(
            ConditionType::Ready,
            false,
            "MembersNotReady",
            format!("{healthy_voters} of {desired} members healthy"),
        )
    };
    set_condition(&mut conditions, ready_update, generation, now);

    let progressing = match decision {
        Decision::Settled => ConditionUpdate::new(
            ConditionType::Progressing,
            false,
            "Settled",
            "the cluster matches its spec",
        ),
        Decision::Act(step) => ConditionUpdate::new(
            ConditionType::Progressing,
            true,
            step_reason(step),
            describe(step),
        ),
        Decision::Wait(wait) => ConditionUpdate::new(
            ConditionType::Progressing,
            true,
            wait.reason,
            wait.message.clone(),
        ),
    };
    set_condition(&mut conditions, progressing, generation, now);

    let troubled: Vec<&MemberFact> = members
        .iter()
        .filter(|m| !m.observation.health.is_healthy())
        .collect();
    // From what was observed, not from the decision: a recovery refused or under way does
    // not make a lost quorum any less lost.
    let quorum_lost = crate::decide::quorum_lost(&cluster.name_any(), members);
    let degraded = match troubled
        .iter()
        .find(|m| matches!(m.observation.health, Health::Unhealthy(_)))
    {
        _ if let Some(lost) = quorum_lost => ConditionUpdate::new(
            ConditionType::Degraded,
            true,
            Reason::QuorumLost,
            lost.message.clone(),
        ),
        Some(m) => ConditionUpdate::new(
            ConditionType::Degraded,
            true,
            "MemberUnhealthy",
            format!(
                "member {}: {}",
                m.ordinal,
                m.observation.health.detail().unwrap_or_default()
            ),
        ),
        None => match troubled.first() {
            Some(m) => ConditionUpdate::new(
                ConditionType::Degraded,
                true,
                "MemberUnknown",
                format!(
                    "member {} is unreachable from the operator (not assumed down): {}",
                    m.ordinal,
                    m.observation.health.detail().unwrap_or_default()
                ),
            ),
            None => ConditionUpdate::new(
                ConditionType::Degraded,
                false,
                "NoFault",
                "every observed member is healthy",
            ),
        },
    };
    set_condition(&mut conditions, degraded, generation, now);

    quorum_core::backup::set_backup_stale(
        &mut conditions,
        cluster.spec.backup.as_ref(),
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

    let in_flight = in_flight.map(|step| match &previous.in_flight {
        // Keep the original start time of a step that is still the same step.
        Some(recorded) if in_flight_from_status(Some(&previous)).ok().flatten().as_ref() == Some(step) => {
            recorded.clone()
        }
        _ => in_flight_to_status(step, now),
    });
    let leader = members
        .iter()
        .find(|m| m.leader)
        .map(|m| member_name(&name, m.ordinal));
    let following = quorum_core::failover::follow(
        previous.leader.clone(),
        previous.lost_leader.clone(),
        leader.as_deref(),
    );
    // Recorded when the old leader is seen failing: one that handed over while the operator
    // sees it healthy (its own MoveLeader) is no failover.
    let leader_change = following.changed_from.zip(leader.clone()).and_then(|(from, to)| {
        let lost_at = member_statuses
            .iter()
            .find(|m| m.name == from)
            .and_then(|m| m.failing_since.clone())?;
        Some(ObservedFailover::new(from, to, Some(lost_at), None, now))
    });
    let lost_leader = following.lost;
    let last_leader_change = leader_change.or(previous.last_leader_change.clone());
    EtcdClusterStatus {
        observed_generation: generation,
        replicas: voters_started as i32,
        selector: member_selector_string(cluster),
        leader,
        lost_leader,
        last_leader_change,
        version: agreed_version,
        cluster_id: view
            .reports
            .values()
            .next()
            .map(|r| format!("{:x}", r.cluster_id))
            .or(previous.cluster_id),
        // Nothing observed: the members are shown as last seen, but no one is known to have
        // stayed Unhealthy meanwhile, so the time towards a replacement starts again at the
        // next observation (unreachable is not down).
        members: if view.membership.is_some() {
            member_statuses
        } else {
            previous
                .members
                .into_iter()
                .map(|member| MemberStatus {
                    unhealthy_since: None,
                    ..member
                })
                .collect()
        },
        in_flight,
        wipe_pending: pending.wipe.iter().map(|o| *o as i32).collect(),
        rejoin_pending: pending.rejoin.iter().map(|o| *o as i32).collect(),
        last_backup: previous.last_backup,
        last_drill: previous.last_drill,
        repair: previous.repair,
        recovery: previous.recovery,
        restoring_from: previous.restoring_from,
        restored_from: previous.restored_from,
        conditions,
    }
}

/// Where a recovery asked for stands, for `status.recovery`; `None` once the request is gone.
/// `recovered` names the members given up when this pass finished the recovery. A request seen
/// while some member leads is for no loss and expires; one that waits or is refused says why.
pub fn recovery_record(
    request: Option<&RecoveryRequest>,
    recorded: Option<&RecoveryRecord>,
    recovered: Option<&str>,
    in_flight: Option<&InFlight>,
    decision: &Decision,
    members: &[MemberFact],
) -> Option<RecoveryRecord> {
    let request = request?;
    if let Some(given_up) = recovered {
        return Some(request.done(given_up));
    }
    if !request.is_open() {
        return recorded.cloned();
    }
    if let Some(phase) = in_flight.filter(|step| step.is_recovery()) {
        return Some(request.waiting(phase.describe()));
    }
    if members.iter().any(|m| m.leader) {
        return Some(request.expire());
    }
    Some(request.waiting(match decision {
        Decision::Wait(wait) => wait.message.clone(),
        Decision::Act(step) => describe(step),
        Decision::Settled => "waiting for the next pass".to_string(),
    }))
}

/// Where a repair asked for stands, for `status.repair`; `None` once the request is gone.
/// `replaced` is the id of the member removed for it, once it was; the repair is done when a
/// member of another id is back under the name, voting, healthy, on a wiped volume.
pub fn repair_record(
    request: Option<&RepairRequest>,
    replaced: Option<u64>,
    decision: &Decision,
    members: &[MemberFact],
    wipe_pending: &[usize],
) -> Option<RepairRecord> {
    let request = request?;
    let (phase, message) = match replaced {
        None => (
            RepairPhase::Waiting,
            match decision {
                Decision::Wait(wait) => wait.message.clone(),
                Decision::Act(step) => describe(step),
                Decision::Settled => "waiting for the next pass".to_string(),
            },
        ),
        Some(id) => {
            let rebuilt = request
                .ordinal
                .and_then(|ordinal| members.iter().find(|m| m.ordinal == ordinal))
                .filter(|m| {
                    m.id != id
                        && !m.learner
                        && m.observation.health.is_healthy()
                        && !wipe_pending.contains(&m.ordinal)
                });
            match rebuilt {
                Some(member) => (
                    RepairPhase::Done,
                    format!(
                        "{} was rebuilt from its peers (member id {:x}); remove the annotation to end the request",
                        request.member, member.id
                    ),
                ),
                None => (
                    RepairPhase::Rebuilding,
                    format!(
                        "member id {id:x} was removed; {} comes back on an empty volume and syncs from the leader",
                        request.member
                    ),
                ),
            }
        }
    };
    Some(RepairRecord {
        member: request.member.clone(),
        phase,
        replaced: replaced.map(|id| format!("{id:x}")),
        replaced_claim: None,
        message,
    })
}

/// The condition and event reason for a step.
pub fn step_reason(step: &Step) -> Reason {
    match step {
        Step::Bootstrap { .. } => Reason::Bootstrapping,
        Step::AddLearner { .. } => Reason::AddingMember,
        Step::StartPod { .. } => Reason::StartingMember,
        Step::Promote { .. } => Reason::PromotingMember,
        Step::Remove { .. } => Reason::RemovingMember,
        Step::StopPod { .. } => Reason::StoppingMember,
        Step::Replace { .. } => Reason::ReplacingMember,
        Step::WipeMember { .. } => Reason::WipingMember,
        Step::KeepJoinedReplacement { .. } => Reason::StepCompleted,
        Step::MoveLeader { .. } => Reason::MovingLeader,
        Step::Upgrade { .. } => Reason::UpgradingMember,
        Step::Recover { .. } | Step::EndForceNewCluster { .. } => Reason::RecoveringFromMember,
        Step::RestoreInPlace { .. } | Step::WipeForRestore { .. } => Reason::RestoringInPlace,
        Step::RestartMember { .. } => Reason::RestartingMember,
        Step::ClearInFlight => Reason::StepCompleted,
    }
}

/// A sentence for a step, for conditions and events.
pub fn describe(step: &Step) -> String {
    match step {
        Step::Bootstrap { members } => format!("creating a new cluster of {members} members"),
        Step::AddLearner { ordinal } => format!("adding member {ordinal} as a learner"),
        Step::StartPod { ordinal } => format!("starting the pod of member {ordinal}"),
        Step::Promote { ordinal, .. } => format!("promoting member {ordinal} to a voting member"),
        Step::Remove { ordinal, .. } => format!("removing member {ordinal} from the membership"),
        Step::StopPod { ordinal } => format!("stopping the pod of removed member {ordinal}"),
        Step::Replace { ordinal, .. } => format!("replacing failed member {ordinal}"),
        Step::WipeMember { ordinal, .. } => format!("deleting the old volume of replaced member {ordinal}"),
        Step::KeepJoinedReplacement { ordinal } => format!(
            "member {ordinal}'s replacement started on an empty volume of its own: there is no old volume left to delete"
        ),
        Step::MoveLeader { from, .. } => {
            format!("handing leadership over from member {from} before its restart")
        }
        Step::Upgrade { ordinal } => format!("restarting member {ordinal} with the new version"),
        Step::Recover { ordinal, lost } => format!(
            "recovering from member {ordinal} on request: deleting the pods and volumes of members {lost:?}, \
             which are added again empty once member {ordinal} leads a cluster of itself"
        ),
        Step::RestartMember { ordinal } => {
            format!("restarting member {ordinal} for the recovery's next phase")
        }
        Step::RestoreInPlace { members, backup } => format!(
            "restoring in place on request, no member having survived: the {members} members will form a new cluster \
             from {backup}, once the StatefulSet takes the restore template"
        ),
        Step::WipeForRestore { members } => format!(
            "restoring in place: deleting the pods and volumes of the {members} members, which restore the backup on \
             empty volumes"
        ),
        Step::EndForceNewCluster { ordinal } => {
            format!("member {ordinal} leads a cluster of itself; restarting it without --force-new-cluster")
        }
        Step::ClearInFlight => "the recorded step completed".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_with(in_flight: serde_json::Value) -> EtcdClusterStatus {
        serde_json::from_value(serde_json::json!({ "inFlight": in_flight })).expect("a status as stored")
    }

    #[test]
    fn steps_in_flight_stored_by_earlier_versions_still_read_and_round_trip() {
        let stored = [
            (
                serde_json::json!({"action": "AddLearner", "ordinal": 3, "startedAt": "2026-01-01T00:00:00Z"}),
                InFlight::AddLearner { ordinal: 3 },
            ),
            (
                serde_json::json!({"action": "Promote", "ordinal": 3, "memberId": "8e9e05c52164694d", "startedAt": "2026-01-01T00:00:00Z"}),
                InFlight::Promote {
                    ordinal: 3,
                    id: 0x8e9e05c52164694d,
                },
            ),
            (
                serde_json::json!({"action": "Remove", "ordinal": 4, "memberId": "a", "startedAt": "2026-01-01T00:00:00Z"}),
                InFlight::Remove { ordinal: 4, id: 10 },
            ),
            (
                serde_json::json!({"action": "Replace", "ordinal": 1, "memberId": "ff", "startedAt": "2026-01-01T00:00:00Z"}),
                InFlight::Replace { ordinal: 1, id: 255 },
            ),
            (
                serde_json::json!({"action": "Upgrade", "ordinal": 0, "startedAt": "2026-01-01T00:00:00Z"}),
                InFlight::Upgrade { ordinal: 0 },
            ),
        ];
        for (json, expected) in stored {
            let status = status_with(json.clone());
            assert_eq!(
                in_flight_from_status(Some(&status)),
                Ok(Some(expected.clone())),
                "{json}"
            );
            let written = in_flight_to_status(&expected, Timestamp::UNIX_EPOCH);
            let mut written_json = serde_json::to_value(&written).unwrap();
            written_json["startedAt"] = json["startedAt"].clone();
            assert_eq!(written_json, json, "written as it was stored");
        }
        assert_eq!(
            in_flight_from_status(Some(&EtcdClusterStatus::default())),
            Ok(None)
        );
    }

    #[test]
    fn an_unknown_or_incomplete_step_in_flight_is_unreadable_never_absent() {
        let unknown = status_with(
            serde_json::json!({"action": "Rewind", "ordinal": 1, "startedAt": "2026-01-01T00:00:00Z"}),
        );
        let error = in_flight_from_status(Some(&unknown)).unwrap_err();
        assert_eq!(error.field, "status.inFlight.action");
        let no_id = status_with(
            serde_json::json!({"action": "Remove", "ordinal": 1, "startedAt": "2026-01-01T00:00:00Z"}),
        );
        assert_eq!(
            in_flight_from_status(Some(&no_id)).unwrap_err().field,
            "status.inFlight.memberId"
        );
        let bad_id = status_with(
            serde_json::json!({"action": "Promote", "ordinal": 1, "memberId": "zz", "startedAt": "2026-01-01T00:00:00Z"}),
        );
        assert_eq!(
            in_flight_from_status(Some(&bad_id)).unwrap_err().field,
            "status.inFlight.memberId"
        );
        // An unknown action is kept as stored, so writing the status back does not erase it.
        assert_eq!(
            serde_json::to_value(unknown.in_flight.as_ref().unwrap()).unwrap()["action"],
            "Rewind"
        );
    }

    /// A cluster `prod/main` of three members.
    fn three_members() -> EtcdCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.quorum.dev/v1alpha1", "kind": "EtcdCluster",
            "metadata": {"name": "main", "namespace": "prod"},
            "spec": {"replicas": 3, "version": "3.6.16", "storage": {"size": "1Gi"}}
        }))
        .unwrap()
    }

    /// What a pass that read the membership (and nothing else) observed.
    fn membership_known() -> ClusterView {
        ClusterView {
            membership: Some(Vec::new()),
            reports: BTreeMap::new(),
            members: Vec::new(),
            heard_failing_at: BTreeMap::new(),
        }
    }

    /// A second of the tests' clock.
    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    /// Member `ordinal` of `main`, observed `health`.
    fn member_fact(ordinal: usize, health: Health, leader: bool) -> MemberFact {
        MemberFact {
            ordinal,
            id: ordinal as u64 + 100,
            learner: false,
            started: true,
            leader,
            version: Some("3.6.16".to_string()),
            raft_index: Some(10),
            observation: quorum_core::availability::health::Observation::new(
                format!("main-{ordinal}"),
                health,
                true,
            ),
            unhealthy_for: None,
        }
    }

    /// The status after a pass that observed `view` and `members` and decided nothing, at
    /// second `seconds`, kept in `cluster` for the next.
    fn settled_pass(
        cluster: &mut EtcdCluster,
        view: &ClusterView,
        members: &[MemberFact],
        seconds: i64,
    ) -> EtcdClusterStatus {
        let status = build_status(
            cluster,
            view,
            members,
            &Decision::Settled,
            None,
            Pending::default(),
            at(seconds),
        );
        cluster.status = Some(status.clone());
        status
    }

    /// A member Unhealthy, then a pass that reached no member at all, then the member seen
    /// Unhealthy again: its time towards a replacement counts from the new observation, not
    /// across the time nothing was seen.
    #[test]
    fn time_unhealthy_does_not_count_the_passes_that_observed_nothing() {
        let members = || {
            vec![
                member_fact(0, Health::Healthy, true),
                member_fact(1, Health::Healthy, false),
                member_fact(2, Health::Unhealthy("peers report it disconnected".into()), false),
            ]
        };
        let mut cluster: EtcdCluster = three_members();
        let mut pass = |view: &ClusterView, members: &[MemberFact], seconds| {
            settled_pass(&mut cluster, view, members, seconds)
        };
        let since = |status: &EtcdClusterStatus| status.members[2].unhealthy_since.clone().map(|t| t.0);
        assert_eq!(since(&pass(&membership_known(), &members(), 0)), Some(at(0)));
        assert_eq!(since(&pass(&membership_known(), &members(), 60)), Some(at(0)));
        let blind = ClusterView {
            membership: None,
            ..membership_known()
        };
        let unseen = pass(&blind, &[], 600);
        assert_eq!(unseen.members.len(), 3, "the members as last seen");
        assert_eq!(since(&unseen), None);
        assert_eq!(
            since(&pass(&membership_known(), &members(), 1800)),
            Some(at(1800))
        );
    }

    /// The leader lost, no leader for a pass, then another elected: recorded as a change from
    /// the lost leader, timed from the operator's first failed observation of it. A healthy
    /// leader handing over is no failover.
    #[test]
    fn a_leader_change_after_the_leader_failed_is_recorded_from_the_first_failure() {
        let member = member_fact;
        let view = membership_known();
        let mut cluster: EtcdCluster = three_members();
        let pass = |cluster: &mut EtcdCluster, members: &[MemberFact], seconds| {
            settled_pass(cluster, &view, members, seconds)
        };
        let down = || Health::Unknown("timed out".into());
        let led_by = |leader: usize| -> Vec<MemberFact> {
            (0..3).map(|o| member(o, Health::Healthy, o == leader)).collect()
        };
        assert_eq!(
            pass(&mut cluster, &led_by(0), 0).leader.as_deref(),
            Some("main-0")
        );

        let leaderless = [
            member(0, down(), false),
            member(1, Health::Healthy, false),
            member(2, Health::Healthy, false),
        ];
        let lost = pass(&mut cluster, &leaderless, 2);
        assert_eq!((lost.leader, lost.lost_leader.as_deref()), (None, Some("main-0")));
        let elected = [
            member(0, down(), false),
            member(1, Health::Healthy, true),
            member(2, Health::Healthy, false),
        ];
        let change = pass(&mut cluster, &elected, 5)
            .last_leader_change
            .expect("the change recorded");
        assert_eq!((change.from.as_str(), change.to.as_str()), ("main-0", "main-1"));
        assert_eq!(
            (change.lost_at.map(|t| t.0), change.from_loss_millis),
            (Some(at(2)), Some(3_000))
        );

        // main-1 hands over to main-2 while healthy: the record stays the one above.
        let handed_over = pass(&mut cluster, &led_by(2), 9);
        assert_eq!(handed_over.leader.as_deref(), Some("main-2"));
        assert_eq!(
            handed_over.last_leader_change.map(|c| c.to),
            Some("main-1".to_string())
        );

        // main-2 lost and main-0 elected, both first seen in one pass: recorded, when main-2
        // was lost unknown (no figure rather than an instant failover).
        let together = [
            member(0, Health::Healthy, true),
            member(1, Health::Healthy, false),
            member(2, down(), false),
        ];
        let change = pass(&mut cluster, &together, 12).last_leader_change.unwrap();
        assert_eq!(
            (change.from.as_str(), change.lost_at, change.from_loss_millis),
            ("main-2", None, None)
        );

        // main-0 lost and main-1 elected, both first seen in one pass that ran late, but
        // main-0's leader watch broke when it was lost: timed from there.
        let late = [
            member(0, down(), false),
            member(1, Health::Healthy, true),
            member(2, Health::Healthy, false),
        ];
        let heard = ClusterView {
            heard_failing_at: [(0, at(13))].into(),
            ..membership_known()
        };
        let status = build_status(
            &cluster,
            &heard,
            &late,
            &Decision::Settled,
            None,
            Pending::default(),
            at(15),
        );
        let change = status.last_leader_change.unwrap();
        assert_eq!(
            (
                change.from.as_str(),
                change.lost_at.map(|t| t.0),
                change.from_loss_millis
            ),
            ("main-0", Some(at(13)), Some(2_000))
        );
    }
    /// A lost quorum is `Degraded` with `QuorumLost` whatever the pass decided (a recovery
    /// refused, or under way); a recovery request seen while a member leads expires, one seen
    /// during the loss waits with the refusal, and a phase under way says which.
    #[test]
    fn a_lost_quorum_stays_degraded_and_a_recovery_request_expires_only_under_a_leader() {
        use quorum_core::{availability::health::Observation, recovery::RecoveryPhase};
        let member = |ordinal: usize, answering: bool, leader: bool| MemberFact {
            ordinal,
            id: ordinal as u64 + 100,
            learner: false,
            started: true,
            leader,
            version: None,
            raft_index: answering.then_some(10),
            observation: Observation::new(
                format!("main-{ordinal}"),
                if answering {
                    Health::Unhealthy("reports no leader".into())
                } else {
                    Health::Unknown("timed out".into())
                },
                true,
            ),
            unhealthy_for: Some(Duration::from_secs(120)),
        };
        let lost = [
            member(0, true, false),
            member(1, false, false),
            member(2, false, false),
        ];
        let cluster: EtcdCluster = three_members();
        let view = membership_known();
        let refused = Decision::wait(Reason::RecoveryRefused, "main-1 does not answer");
        let status = build_status(
            &cluster,
            &view,
            &lost,
            &refused,
            None,
            Pending::default(),
            Timestamp::UNIX_EPOCH,
        );
        let degraded = status.conditions.iter().find(|c| c.type_ == "Degraded").unwrap();
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "QuorumLost")
        );

        let request = RecoveryRequest {
            member: "main-1".into(),
            ordinal: Some(1),
            done: None,
            expired: false,
        };
        let record = |members: &[MemberFact], in_flight: Option<&InFlight>, decision: &Decision| {
            recovery_record(Some(&request), None, None, in_flight, decision, members).unwrap()
        };
        let waiting = record(&lost, None, &refused);
        assert_eq!(
            (waiting.phase, waiting.message.as_str()),
            (RecoveryPhase::Waiting, "main-1 does not answer")
        );
        let forcing = record(&lost, Some(&InFlight::ForceNewCluster { ordinal: 0 }), &refused);
        assert_eq!(
            forcing.message,
            "recovering from member 0: restarting it as a new cluster of itself"
        );
        let led = [
            member(0, true, true),
            member(1, true, false),
            member(2, true, false),
        ];
        assert_eq!(
            record(&led, None, &Decision::Settled).phase,
            RecoveryPhase::Expired
        );
        let done = recovery_record(
            Some(&request),
            None,
            Some("main-1, main-2"),
            None,
            &Decision::Settled,
            &led,
        )
        .unwrap();
        assert_eq!(
            (done.phase, done.replaced.as_deref()),
            (RecoveryPhase::Done, Some("main-1, main-2"))
        );
    }
}
