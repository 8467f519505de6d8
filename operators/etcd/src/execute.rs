//! Taking the admin steps the decision chose. No Kubernetes here: pod starts, stops and
//! wipes are the reconciler's; these are etcd's own membership calls.
//!
//! Every step is idempotent: it first checks the membership it just gathered and does
//! nothing if its effect is already there, so a step repeated after a crash is harmless.

use quorum_core::availability::{clients::MemberKey, retry::CallError, retry::Idempotency};

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

/// Takes an admin step against the cluster observed in `view`.
pub async fn execute(
    clients: &EtcdClients,
    cluster: &str,
    resolver: &MemberResolver,
    view: &ClusterView,
    step: &Step,
) -> Result<StepOutcome, StepError> {
    let membership = view.membership.as_deref().unwrap_or_default();
    match *step {
        Step::AddLearner { ordinal } => {
            let peer_url = resolver.peer_url(ordinal).ok_or(StepError::NoAddress(ordinal))?;
            if membership.iter().any(|m| m.peer_urls.contains(&peer_url)) {
                return Ok(StepOutcome::Done);
            }
            let (key, endpoint) = healthy_member(view, resolver, cluster, None, "member_add")?;
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
            let (key, endpoint) = healthy_member(view, resolver, cluster, None, "member_promote")?;
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
            let (key, endpoint) = healthy_member(view, resolver, cluster, Some(ordinal), "member_remove")?;
            membership_change(
                clients
                    .call(
                        &key,
                        &endpoint,
                        "member_remove",
                        Idempotency::Mutation,
                        |admin| async move { admin.remove_member(id).await },
                    )
                    .await,
            )
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
        Err(CallError::Failed(error))
            if ["unhealthy cluster", "not in sync"]
                .iter()
                .any(|transient| error.to_string().contains(transient)) =>
        {
            Ok(StepOutcome::NotYet(error.to_string()))
        }
        Err(error) => Err(error.into()),
    }
}

/// A healthy voting member to send a membership change to, the leader first, never `except`.
fn healthy_member(
    view: &ClusterView,
    resolver: &MemberResolver,
    cluster: &str,
    except: Option<usize>,
    verb: &'static str,
) -> Result<(MemberKey, String), StepError> {
    let mut candidates: Vec<_> = view
        .members
        .iter()
        .filter(|m| !m.learner && m.observation.health.is_healthy() && Some(m.ordinal) != except)
        .collect();
    candidates.sort_by_key(|m| (!m.leader, m.ordinal));
    let member = candidates.first().ok_or(StepError::NoHealthyMember(verb))?;
    let endpoint = resolver
        .client_url(member.ordinal)
        .ok_or(StepError::NoAddress(member.ordinal))?;
    Ok((MemberKey::new(cluster, member.ordinal.to_string()), endpoint))
}
