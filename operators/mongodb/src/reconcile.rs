//! Reconciling a `MongoDBReplicaSet`: apply the objects, observe the members, decide one step,
//! take it, report.

use std::{ops::ControlFlow, sync::Arc, time::Duration};

use k8s_openapi::jiff::Timestamp;
use kube::{ResourceExt, runtime::controller::Action};
use quorum_core::{
    conditions::{ConditionType, ConditionUpdate},
    pass::{Reason as _, needed_secret, publish},
    pod::generate_password,
    runner::Context,
    status::StatusWriter,
};
use secrecy::SecretString;

use crate::{
    admin::Credentials,
    crd::MongoDBReplicaSet,
    decide::{Desired, DesiredMember, decide},
    resources::{
        DEFAULT_ADMIN_USERNAME, PASSWORD_KEY, USERNAME_KEY, admin_secret_name, arbiter_name,
        arbiter_statefulset_name, build_admin_secret, build_arbiter_config_map, build_arbiter_statefulset,
        build_client_service, build_config_map, build_headless_service, build_keyfile_secret,
        build_pod_disruption_budget, build_statefulset, generate_keyfile, member_name, statefulset_name,
    },
};

pub use crate::pass::{Error, MemberAddresses, MemberConfig, Settings, State};

pub use crate::status::{Progress, RecordedChange, recorded_change};
use crate::{
    execute::{act, reported_failure, restore_step},
    observe::observe,
    status::{recovery_record, repair_record, set_conditions, status_from, wait_on_unreadable_record},
};

/// The configuration `_id` of the arbiter; data members use their ordinal (below 50).
pub const ARBITER_ID: i32 = 100;

/// The members the spec asks for: voting members, then non-voting ones (the last
/// `hiddenMembers` of them hidden), then the arbiter.
pub fn desired(replica_set: &MongoDBReplicaSet, state: &State) -> Desired {
    let spec = &replica_set.spec;
    let name = replica_set.name_any();
    let data_members = spec.data_members();
    let voting = spec.members.max(0) as usize;
    let hidden_from = data_members.saturating_sub(spec.hidden_members.max(0) as usize);
    let mut members: Vec<DesiredMember> = (0..data_members)
        .map(|ordinal| {
            let is_voting = ordinal < voting;
            DesiredMember {
                name: member_name(&name, ordinal),
                host: state.host(replica_set, &statefulset_name(&name), ordinal),
                id: ordinal as i32,
                votes: i32::from(is_voting),
                priority: if is_voting { 1.0 } else { 0.0 },
                hidden: !is_voting && ordinal >= hidden_from,
                arbiter: false,
            }
        })
        .collect();
    if spec.arbiter {
        members.push(DesiredMember {
            name: arbiter_name(&name),
            host: state.host(replica_set, &arbiter_statefulset_name(&name), 0),
            id: ARBITER_ID,
            votes: 1,
            priority: 0.0,
            hidden: false,
            arbiter: true,
        });
    }
    Desired {
        set_name: name,
        members,
        version: spec.version.clone(),
    }
}

/// Reconciles one `MongoDBReplicaSet`.
pub async fn reconcile(
    replica_set: Arc<MongoDBReplicaSet>,
    context: Arc<Context<State>>,
) -> Result<Action, Error> {
    let state = &context.state;
    let name = replica_set.name_any();
    let namespace = replica_set.namespace().unwrap_or_default();
    let key = format!("{namespace}/{name}");
    // Status is this operator's memory (the initiation, the membership change in flight):
    // decided on as stored (`quorum_core::pass::admit`).
    let replica_set = match quorum_core::pass::admit(&context, replica_set.as_ref()).await? {
        ControlFlow::Continue(replica_set) => replica_set,
        ControlFlow::Break(action) => return Ok(action),
    };

    // Credentials first: nothing can be observed or started without them.
    ensure_generated_secrets(&context, &replica_set).await?;
    let credentials = read_credentials(&context, &namespace, &admin_secret_name(&replica_set)).await?;
    state.clients.set_credentials(&key, credentials).await;

    let applier = &context.applier;
    applier.apply(&build_config_map(&replica_set)?).await?;
    applier.apply(&build_headless_service(&replica_set)?).await?;
    applier.apply(&build_client_service(&replica_set)?).await?;
    applier.apply(&build_pod_disruption_budget(&replica_set)?).await?;
    if let Some(arbiter) = build_arbiter_statefulset(&replica_set)? {
        applier.apply(&build_arbiter_config_map(&replica_set)?).await?;
        applier.apply(&arbiter).await?;
    }
    quorum_core::backup::controller::ensure_scheduled_backup::<crate::crd::MongoDBBackup, _, _>(
        &context,
        replica_set.as_ref(),
        replica_set.spec.backup.as_ref().map(|policy| &policy.policy),
        crate::resources::labels(&replica_set, crate::resources::MEMBER_COMPONENT),
        crate::resources::scheduled_backup_fields(&replica_set),
    )
    .await?;

    let desired = desired(&replica_set, state);
    let observed = observe(&context, &replica_set, &key, &desired).await?;

    let current = match observed.config {
        Some(_) => None,
        None => context
            .read::<k8s_openapi::api::apps::v1::StatefulSet>(&namespace, &statefulset_name(&name))
            .await
            .map_err(Error::api("reading the member StatefulSet"))?
            .and_then(|statefulset| statefulset.spec.as_ref()?.replicas),
    };
    let replicas = statefulset_replicas(replica_set.spec.data_members(), observed.config.as_ref(), current);
    applier
        .apply(&build_statefulset(&replica_set, replicas as i32)?)
        .await?;

    let now = Timestamp::now();
    let mut status = status_from(&replica_set, &desired, &observed, now);
    // Each status write of the pass is diffed against the one before.
    let mut writer = StatusWriter::new(&context.client, replica_set.as_ref(), replica_set.status.as_ref());
    let (progress, failure) = match recorded_change(replica_set.status.as_ref()) {
        // A recorded change this operator cannot read is never taken for none: the record stays
        // as stored (`status_from` keeps it) and nothing is reconfigured or restarted.
        Err(unreadable) => (wait_on_unreadable_record(&name, &unreadable), None),
        Ok(recorded) => match restore_step(
            &context,
            &replica_set,
            &key,
            &observed,
            recorded.as_ref(),
            &mut status,
            &mut writer,
        )
        .await?
        {
            Some(progress) => (progress, None),
            None => {
                let step = decide(&desired, &observed);
                let taken = act(
                    &context,
                    &replica_set,
                    &key,
                    &observed,
                    &step,
                    &mut status,
                    &mut writer,
                )
                .await;
                reported_failure(taken)?
            }
        },
    };
    status.repair = repair_record(&observed, status.repair.as_ref(), &progress);
    status.recovery = recovery_record(&observed, status.recovery.as_ref(), &progress);
    let settled = progress.is_settled();
    publish(&context.events, replica_set.as_ref(), &progress).await;

    let not_healthy: Vec<String> = status
        .members
        .iter()
        .filter(|member| member.health != "Healthy")
        .map(|member| member.name.clone())
        .collect();
    let degraded = (!not_healthy.is_empty()).then(|| {
        (
            "MembersNotHealthy",
            format!("not healthy: {}", not_healthy.join(", ")),
        )
    });
    let ready = match (&status.primary, settled && not_healthy.is_empty()) {
        (Some(primary), true) => ConditionUpdate::new(
            ConditionType::Ready,
            true,
            "Ready",
            format!("{primary} is primary; every member serves as specified"),
        ),
        (None, _) => ConditionUpdate::new(ConditionType::Ready, false, "NoPrimary", "no member is primary"),
        (Some(_), false) => {
            let (reason, message) = match &progress {
                Progress::Acted { reason, message }
                | Progress::Waiting { reason, message }
                | Progress::Failed { reason, message } => (reason.as_str(), message.clone()),
                Progress::Settled => (
                    "MembersNotHealthy",
                    format!("not healthy: {}", not_healthy.join(", ")),
                ),
            };
            ConditionUpdate::new(ConditionType::Ready, false, reason, message)
        }
    };
    set_conditions(&mut status, &replica_set, ready, &progress, degraded, now);
    writer.write(&status).await?;
    context.metrics.observe_members_of(
        crate::clients::ENGINE,
        replica_set.as_ref(),
        status.members.iter().map(|m| m.health.as_str()),
        crate::status::voter_healths(&status.members, &desired, observed.config.is_some()),
    );
    quorum_core::failover::report_new(
        &context.events,
        context.state.clients.metrics(),
        crate::clients::ENGINE,
        replica_set.as_ref(),
        replica_set.status.as_ref().and_then(|s| s.last_failover.as_ref()),
        status.last_failover.as_ref(),
        "the replica set's election",
    )
    .await;
    // A failed step, now reported, is returned: the runner retries it with backoff and counts it.
    if let Some(failure) = failure {
        return Err(failure);
    }
    let usual = if settled && not_healthy.is_empty() {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(2)
    };
    Ok(Action::requeue(state.follow_ups.next_pass(
        &key,
        progress.acted().as_ref(),
        usual,
    )))
}

/// Creates the generated administrator and keyfile Secrets once; existing ones are never
/// rewritten (the members were started with them).
async fn ensure_generated_secrets(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
) -> Result<(), Error> {
    if replica_set.spec.admin_secret.is_none() {
        let admin = build_admin_secret(
            replica_set,
            DEFAULT_ADMIN_USERNAME.to_string(),
            generate_password(),
        )?;
        context.applier.create_once(&admin).await?;
    }
    if replica_set.spec.keyfile_secret.is_none() {
        let keyfile = build_keyfile_secret(replica_set, generate_keyfile())?;
        context.applier.create_once(&keyfile).await?;
    }
    Ok(())
}

/// The administrator's login from the Secret `name`.
pub async fn read_credentials(
    context: &Context<State>,
    namespace: &str,
    name: &str,
) -> Result<Credentials, Error> {
    let mut secret = needed_secret(context, namespace, name).await?;
    let username = secret.text(USERNAME_KEY)?;
    let password = secret.text(PASSWORD_KEY)?;
    Ok(Credentials {
        username,
        password: SecretString::from(password),
    })
}

/// How many data members the StatefulSet keeps: the wanted ones, and every ordinal the set's
/// configuration still holds, so it shrinks only once the leaving members are out of it. While
/// the configuration could not be read (no member answered, or the read timed out), never fewer
/// than it keeps now (`current`): unknown is not "nothing configured".
pub fn statefulset_replicas(
    wanted: usize,
    config: Option<&crate::admin::ReplConfig>,
    current: Option<i32>,
) -> usize {
    let kept = match config {
        Some(config) => config
            .members
            .iter()
            .filter(|member| !member.arbiter_only && member.id < ARBITER_ID)
            .map(|member| member.id as usize + 1)
            .max()
            .unwrap_or(0),
        None => current.map_or(0, |replicas| usize::try_from(replicas).unwrap_or(0)),
    };
    wanted.max(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{ConfigMember, ReplConfig};

    /// Scaling 3 → 1: the StatefulSet keeps the members the configuration still holds, and,
    /// while the configuration cannot be read, the members it keeps now; it shrinks only once
    /// the configuration was read without them.
    #[test]
    fn the_statefulset_never_shrinks_on_a_configuration_it_could_not_read() {
        let member = |id: i32| ConfigMember {
            id,
            host: format!("rs-{id}.rs:27017"),
            votes: 1,
            priority: 1.0,
            hidden: false,
            arbiter_only: false,
            other: bson::Document::new(),
        };
        let configured = |ids: &[i32]| ReplConfig::initial("rs", ids.iter().copied().map(member).collect());
        assert_eq!(statefulset_replicas(1, Some(&configured(&[0, 1, 2])), None), 3);
        assert_eq!(
            statefulset_replicas(1, None, Some(3)),
            3,
            "unknown is not nothing configured"
        );
        assert_eq!(statefulset_replicas(1, Some(&configured(&[0])), None), 1);
        assert_eq!(statefulset_replicas(3, None, None), 3, "a new set");
        assert_eq!(
            statefulset_replicas(3, Some(&configured(&[0])), None),
            3,
            "growing"
        );
    }
}
