//! Taking the admin steps the decision chose. No Kubernetes here: pod starts, stops and
//! wipes are the reconciler's; these are etcd's own membership calls.
//!
//! Every step is idempotent: it first checks the membership it just gathered and does
//! nothing if its effect is already there, so a step repeated after a crash is harmless.

use quorum_core::availability::{clients::MemberKey, retry::CallError, retry::Idempotency};
use std::time::Duration;

use crate::{
    admin::AdminError,
    decide::Step,
    observe::{ClusterView, EtcdClients},
    resolver::MemberResolver,
};

/// What became of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    Done,
    /// etcd declined for now (a learner not yet in sync); try again on a later pass.
    NotYet(String),
}

/// Why a step failed. The membership is as it was: etcd refused or could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("no healthy member to send {0} to")]
    NoHealthyMember(&'static str),
    #[error("no address for member {0}")]
    NoAddress(usize),
    #[error("{0} is not an admin step")]
    NotAnAdminStep(&'static str),
    #[error(transparent)]
    Call(#[from] CallError<AdminError>),
}

/// Takes an admin step against the cluster observed in `view`; `tried_for` is how long the
/// step has been tried (since it was recorded in flight), which picks the member a membership
/// change goes to ([`membership_target`]).
pub async fn execute(
    clients: &EtcdClients,
    cluster: &str,
    resolver: &MemberResolver,
    view: &ClusterView,
    step: &Step,
    tried_for: Duration,
) -> Result<StepOutcome, StepError> {
    let membership = view.membership.as_deref().unwrap_or_default();
    match *step {
        Step::AddLearner { ordinal } => {
            let peer_url = resolver.peer_url(ordinal).ok_or(StepError::NoAddress(ordinal))?;
            if membership.iter().any(|m| m.peer_urls.contains(&peer_url)) {
                return Ok(StepOutcome::Done);
            }
            let (key, endpoint) = healthy_member(view, resolver, cluster, None, tried_for, "member_add")?;
            membership_change(
                clients
                    .call(&key, &endpoint, "member_add", Idempotency::Mutation, |admin| {
                        let peer_url = peer_url.clone();
                        async move { admin.add_learner(&peer_url).await }
                    })
                    .await,
            )
        }
        Step::Promote { id, .. } => {
            if membership.iter().any(|m| m.id == id && !m.learner) {
                return Ok(StepOutcome::Done);
            }
            let (key, endpoint) = healthy_member(view, resolver, cluster, None, tried_for, "member_promote")?;
            membership_change(
                clients
                    .call(
                        &key,
                        &endpoint,
                        "member_promote",
                        Idempotency::Mutation,
                        |admin| async move { admin.promote(id).await },
                    )
                    .await,
            )
        }
        Step::Remove { ordinal, id } | Step::Replace { ordinal, id } => {
            if !membership.iter().any(|m| m.id == id) {
                return Ok(StepOutcome::Done);
            }
            let (key, endpoint) =
                healthy_member(view, resolver, cluster, Some(ordinal), tried_for, "member_remove")?;
            let removed = clients
                .call(
                    &key,
                    &endpoint,
                    "member_remove",
                    Idempotency::Mutation,
                    |admin| async move { admin.remove_member(id).await },
                )
                .await;
            // Already gone (a list read before the removal reached the member asked): done.
            if let Err(CallError::Failed(error)) = &removed
                && already_removed(&error.to_string())
            {
                return Ok(StepOutcome::Done);
            }
            membership_change(removed)
        }
        Step::MoveLeader { from, to_id } => {
            if view.members.iter().any(|m| m.leader && m.id == to_id) {
                return Ok(StepOutcome::Done);
            }
            let endpoint = resolver.client_url(from).ok_or(StepError::NoAddress(from))?;
            let key = MemberKey::new(cluster, from.to_string());
            clients
                .call(
                    &key,
                    &endpoint,
                    "move_leader",
                    Idempotency::Mutation,
                    |admin| async move { admin.move_leader(to_id).await },
                )
                .await?;
            Ok(StepOutcome::Done)
        }
        Step::Bootstrap { .. } => Err(StepError::NotAnAdminStep("Bootstrap")),
        Step::StartPod { .. } => Err(StepError::NotAnAdminStep("StartPod")),
        Step::StopPod { .. } => Err(StepError::NotAnAdminStep("StopPod")),
        Step::WipeMember { .. } => Err(StepError::NotAnAdminStep("WipeMember")),
        Step::KeepJoinedReplacement { .. } => Err(StepError::NotAnAdminStep("KeepJoinedReplacement")),
        Step::Upgrade { .. } => Err(StepError::NotAnAdminStep("Upgrade")),
        Step::ClearInFlight => Err(StepError::NotAnAdminStep("ClearInFlight")),
        Step::Recover { .. } => Err(StepError::NotAnAdminStep("Recover")),
        Step::RestartMember { .. } => Err(StepError::NotAnAdminStep("RestartMember")),
        Step::EndForceNewCluster { .. } => Err(StepError::NotAnAdminStep("EndForceNewCluster")),
        Step::RestoreInPlace { .. } => Err(StepError::NotAnAdminStep("RestoreInPlace")),
        Step::WipeForRestore { .. } => Err(StepError::NotAnAdminStep("WipeForRestore")),
    }
}

/// The outcome of a membership change. etcd refuses some changes for now without changing
/// anything: its strict reconfiguration check ("unhealthy cluster": members must have been
/// connected for a few seconds, as after a start or a promotion) and a learner not yet in sync
/// with the leader. Those are "not yet", asked again on a later pass; anything else is an error.
fn membership_change<T>(result: Result<T, CallError<AdminError>>) -> Result<StepOutcome, StepError> {
    match result {
        Ok(_) => Ok(StepOutcome::Done),
        Err(CallError::Failed(error)) if refused_for_now(&error.to_string()) => {
            Ok(StepOutcome::NotYet(error.to_string()))
        }
        Err(error) => Err(error.into()),
    }
}

/// Whether etcd refused a removal because the member is no longer in the membership
/// (`ErrGRPCMemberNotFound`, which it also answers for an id already removed).
fn already_removed(message: &str) -> bool {
    message.contains("etcdserver: member not found")
}

/// Whether etcd refused a membership change only for now, by its message: its strict
/// reconfiguration check (`ErrUnhealthy`) or a learner behind the leader (`ErrLearnerNotReady`).
fn refused_for_now(message: &str) -> bool {
    ["unhealthy cluster", "in sync with leader"]
        .iter()
        .any(|transient| message.contains(transient))
}

/// A healthy voting member to send a membership change to, never `except`: the leader first,
/// the others in turn once the change has been tried for a while ([`membership_target`]).
fn healthy_member(
    view: &ClusterView,
    resolver: &MemberResolver,
    cluster: &str,
    except: Option<usize>,
    tried_for: Duration,
    verb: &'static str,
) -> Result<(MemberKey, String), StepError> {
    let mut candidates: Vec<_> = view
        .members
        .iter()
        .filter(|m| !m.learner && m.observation.health.is_healthy() && Some(m.ordinal) != except)
        .collect();
    candidates.sort_by_key(|m| (!m.leader, m.ordinal));
    let member = candidates
        .get(membership_target(candidates.len(), tried_for))
        .ok_or(StepError::NoHealthyMember(verb))?;
    let endpoint = resolver
        .client_url(member.ordinal)
        .ok_or(StepError::NoAddress(member.ordinal))?;
    Ok((MemberKey::new(cluster, member.ordinal.to_string()), endpoint))
}

/// How long a membership change goes to the leader before the others are tried.
const LEADER_FIRST_FOR: Duration = Duration::from_secs(15);
/// How long each member gets the change after that, in turn.
const EACH_MEMBER_FOR: Duration = Duration::from_secs(5);

/// Which of `candidates` healthy voting members (the leader first) a membership change tried
/// for `tried_for` goes to: the leader for [`LEADER_FIRST_FOR`], then each in turn for
/// [`EACH_MEMBER_FOR`]. etcd's strict reconfiguration check runs on the member that receives the
/// change, against its own record of which peers it reached lately, and a member can keep a
/// peer marked unreachable while their streams work: after one failed send to the address of a
/// member's pod since replaced, until the streams reconnect. Seen on the real node after a
/// member's pod was given a new address: the leader declined to add a learner ("unhealthy
/// cluster") for ten minutes, while a follower accepted it at once.
pub fn membership_target(candidates: usize, tried_for: Duration) -> usize {
    if candidates == 0 || tried_for < LEADER_FIRST_FOR {
        return 0;
    }
    let turns = (tried_for - LEADER_FIRST_FOR).as_secs() / EACH_MEMBER_FOR.as_secs();
    // The leader (index 0) has had its turn: the others first, then all again.
    (1 + turns as usize) % candidates
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A membership change goes to the leader for fifteen seconds, then to each other member in
    /// turn for five, then round again; with one candidate, always to it.
    /// etcd's own messages (server/etcdserver/errors), as the client reports them.
    #[test]
    fn a_learner_not_in_sync_and_an_unhealthy_cluster_are_refusals_for_now() {
        assert!(refused_for_now(
            "status: FailedPrecondition, message: \"etcdserver: can only promote a learner member which is in sync with leader\""
        ));
        assert!(refused_for_now(
            "status: Unavailable, message: \"etcdserver: unhealthy cluster\""
        ));
        assert!(!refused_for_now(
            "status: NotFound, message: \"etcdserver: member not found\""
        ));
        assert!(already_removed(
            "status: NotFound, message: \"etcdserver: member not found\""
        ));
        assert!(!already_removed(
            "status: Unavailable, message: \"etcdserver: unhealthy cluster\""
        ));
    }

    #[test]
    fn a_declined_membership_change_goes_to_the_other_members_in_turn() {
        let seconds = Duration::from_secs;
        let cases = [
            (3, seconds(0), 0),
            (3, seconds(14), 0),
            (3, seconds(15), 1),
            (3, seconds(19), 1),
            (3, seconds(20), 2),
            (3, seconds(25), 0),
            (3, seconds(30), 1),
            (5, seconds(35), 0),
            (1, seconds(60), 0),
            (0, seconds(60), 0),
        ];
        for (candidates, tried_for, expected) in cases {
            assert_eq!(
                membership_target(candidates, tried_for),
                expected,
                "{candidates} candidates, tried for {tried_for:?}"
            );
        }
    }
}
