//! Reconciling a `RedisCluster`: the Kubernetes side shared by both modes, then one pass of
//! the mode's own story (observe, decide one step, act, report) in [`crate::replication`] or
//! [`crate::sharded`].

use std::{ops::ControlFlow, sync::Arc, time::Duration};

use k8s_openapi::{api::apps::v1::StatefulSet, jiff::Timestamp};
use kube::{Api, ResourceExt, runtime::controller::Action};
use quorum_core::{
    conditions::{ConditionType, ConditionUpdate},
    events::Severity,
    pass::needed_secret,
    pod::generate_password,
    runner::Context,
    status::{patch_status, write_status},
};

use crate::{
    admin::Credentials,
    crd::{DataLayout, Mode, RedisBackup, RedisCluster, RedisClusterStatus, forbidden_config_keys},
    reasons::Reason,
    resources::{
        DataNodes, NODE_COMPONENT, PASSWORD_KEY, SENTINEL_COMPONENT, auth_secret_name, build_auth_secret,
        build_client_service, build_config_map, build_headless_service, build_pod_disruption_budget,
        build_primary_service, build_replicas_service, build_sentinel_config_map, build_sentinel_service,
        data_layout, statefulset_name,
    },
    restore::{RestoreRefusal, plan_restore, restore_status},
};

use crate::pass::publish;
pub use crate::pass::{
    Error, MemberAddresses, MemberConfig, Pass, Progress, Settings, State, set_conditions,
};

/// Reconciles one `RedisCluster`.
pub async fn reconcile(cluster: Arc<RedisCluster>, context: Arc<Context<State>>) -> Result<Action, Error> {
    let state = &context.state;
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let key = format!("{namespace}/{name}");
    // Status is this operator's memory (the primary, the rebalance in flight, the restore
    // recorded): decided on as stored (`quorum_core::pass::admit`).
    let cluster = match quorum_core::pass::admit(&context, cluster.as_ref()).await? {
        ControlFlow::Continue(cluster) => cluster,
        ControlFlow::Break(action) => return Ok(action),
    };

    let forbidden = forbidden_config_keys(&cluster.spec.config);
    if !forbidden.is_empty() {
        let error = Error::InvalidSpec(format!(
            "spec.config sets {}, which the operator owns",
            forbidden.join(", ")
        ));
        publish(
            &context,
            &cluster,
            Severity::Warning,
            Reason::InvalidSpec,
            error.to_string(),
        )
        .await;
        return Err(error);
    }

    // Credentials first: nothing can be observed or started without them.
    if cluster.spec.auth_secret.is_none() {
        ensure_generated_secret(&context, &cluster).await?;
    }
    let password = read_password(&context, &namespace, &auth_secret_name(&cluster)).await?;
    state
        .clients
        .set_credentials(&key, Credentials::password(password))
        .await;

    // The objects every pass needs, applied first so a deleted one comes back whatever the
    // step.
    let applier = &context.applier;
    applier.apply(&build_config_map(&cluster)?).await?;
    applier.apply(&build_headless_service(&cluster)?).await?;
    applier
        .apply(&build_pod_disruption_budget(&cluster, NODE_COMPONENT)?)
        .await?;
    match cluster.spec.mode {
        Mode::Replication => {
            applier.apply(&build_sentinel_config_map(&cluster)?).await?;
            applier.apply(&build_sentinel_service(&cluster)?).await?;
            applier
                .apply(&build_pod_disruption_budget(&cluster, SENTINEL_COMPONENT)?)
                .await?;
            applier.apply(&build_primary_service(&cluster)?).await?;
            applier.apply(&build_replicas_service(&cluster)?).await?;
        }
        Mode::Cluster => {
            applier.apply(&build_client_service(&cluster)?).await?;
        }
    }
    quorum_core::backup::controller::ensure_scheduled_backup::<crate::crd::RedisBackup, _, _>(
        &context,
        cluster.as_ref(),
        cluster.spec.backup.as_ref(),
        crate::resources::labels(&cluster, crate::resources::NODE_COMPONENT),
        |_| {},
    )
    .await?;

    let cluster = with_data_layout(&context, cluster).await?;
    // A cluster created from a backup forms only once its snapshots are known: never an
    // empty cluster in place of the one asked for.
    let cluster = match restore_gate(&context, &cluster).await? {
        Some(cluster) => cluster,
        None => return Ok(Action::requeue(Duration::from_secs(10))),
    };

    let pass = Pass {
        context: &context,
        cluster: &cluster,
        addresses: state.addresses(&cluster),
        key,
        now: Timestamp::now(),
    };
    let progress = match cluster.spec.mode {
        Mode::Replication => crate::replication::pass(&pass).await?,
        Mode::Cluster => crate::sharded::pass(&pass).await?,
    };
    let usual = match progress {
        Progress::Settled => state.settings.settled_recheck,
        _ => Duration::from_secs(2),
    };
    Ok(Action::requeue(state.follow_ups.next_pass(
        &pass.key,
        progress.acted().as_ref(),
        usual,
    )))
}

/// Cluster mode: the deployment with its data layout recorded in status, recorded now when it
/// is not yet. A deployment that already has a StatefulSet `<name>` (made by an operator from
/// before per-shard StatefulSets, which recorded no layout) keeps it: an operator upgrade moves
/// no data and restarts no pod.
async fn with_data_layout(
    context: &Context<State>,
    cluster: Arc<RedisCluster>,
) -> Result<Arc<RedisCluster>, Error> {
    let recorded = cluster.status.as_ref().and_then(|status| status.data_layout);
    let Some(layout) = data_layout(&cluster).filter(|_| recorded.is_none()) else {
        return Ok(cluster);
    };
    let name = statefulset_name(&cluster.name_any());
    let layout = match layout {
        DataLayout::StatefulSetPerShard
            if context
                .read::<StatefulSet>(&cluster.namespace().unwrap_or_default(), &name)
                .await
                .map_err(Error::api(format!("reading StatefulSet {name}")))?
                .is_some() =>
        {
            DataLayout::OneStatefulSet
        }
        layout => layout,
    };
    let mut status = cluster.status.clone().unwrap_or_default();
    status.data_layout = Some(layout);
    record_status(context, &cluster, status).await
}

/// Writes `status` and returns the cluster as it now stands, for the rest of the pass to decide
/// on: a record made before the pass's own status write.
async fn record_status(
    context: &Context<State>,
    cluster: &RedisCluster,
    status: RedisClusterStatus,
) -> Result<Arc<RedisCluster>, Error> {
    let written = write_status(&context.client, cluster, cluster.status.as_ref(), &status).await?;
    let mut recorded = cluster.clone();
    // The version written, so the pass's next write is not refused as a conflict with its own.
    if let Some(written) = written {
        recorded.metadata.resource_version = written.metadata.resource_version;
    }
    recorded.status = Some(status);
    Ok(Arc::new(recorded))
}

/// Creates the generated password Secret once; an existing one is never rewritten.
async fn ensure_generated_secret(context: &Context<State>, cluster: &RedisCluster) -> Result<(), Error> {
    let secret = build_auth_secret(cluster, generate_password())?;
    context.applier.create_once(&secret).await?;
    Ok(())
}

/// The password in the Secret `name`, as the servers are configured with it.
pub async fn read_password(context: &Context<State>, namespace: &str, name: &str) -> Result<String, Error> {
    needed_secret(context, namespace, name).await?.text(PASSWORD_KEY)
}

/// For a cluster with `restoreFrom`, the cluster to form with its restore recorded in
/// `status.restore` (which the data StatefulSet's restore step is built from), or `None` while
/// it must wait, with a condition and an event saying why. The snapshots are recorded once,
/// before the data StatefulSet exists; a cluster that already has one keeps what it has.
async fn restore_gate(
    context: &Context<State>,
    cluster: &Arc<RedisCluster>,
) -> Result<Option<Arc<RedisCluster>>, Error> {
    let Some(source) = &cluster.spec.restore_from else {
        return Ok(Some(cluster.clone()));
    };
    let recorded = cluster.status.as_ref().and_then(|s| s.restore.as_ref());
    if recorded.is_some() {
        return Ok(Some(cluster.clone()));
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let statefulset = DataNodes::of(cluster).first_statefulset();
    let statefulsets: Api<StatefulSet> = Api::namespaced(context.client.clone(), &namespace);
    if statefulsets
        .get_opt(&statefulset)
        .await
        .map_err(Error::api(format!("reading StatefulSet {statefulset}")))?
        .is_some()
    {
        // Its nodes have data of their own, which a restore must never replace.
        publish(
            context,
            cluster,
            Severity::Warning,
            Reason::RestoreIgnored,
            "restoreFrom applies only to a new deployment; this one already has data nodes".into(),
        )
        .await;
        return Ok(Some(cluster.clone()));
    }
    let backups: Api<RedisBackup> = Api::namespaced(context.client.clone(), &namespace);
    let backup = backups
        .get_opt(&source.backup_name)
        .await
        .map_err(Error::api(format!("reading RedisBackup {}", source.backup_name)))?;
    let (reason, message) = match plan_restore(&cluster.spec, &source.backup_name, backup.as_ref()) {
        Ok(snapshots) => {
            let backup = backup.expect("a plan comes from an existing backup");
            let settings = &context.state.settings;
            let mut status = cluster.status.clone().unwrap_or_default();
            status.restore = Some(restore_status(
                &backup,
                snapshots,
                &settings.operator_image,
                settings.members.allow_http_backups,
            ));
            return Ok(Some(record_status(context, cluster, status).await?));
        }
        Err(RestoreRefusal::NotReady(message)) => (Reason::RestoreSourceNotReady, message),
        Err(RestoreRefusal::Invalid(message)) => (Reason::RestoreSourceInvalid, message),
    };
    let mut status = cluster.status.clone().unwrap_or_default();
    let progress = Progress::waiting(reason, message.clone());
    let ready = ConditionUpdate::new(ConditionType::Ready, false, reason, message.clone());
    set_conditions(&mut status, cluster, ready, &progress, None, Timestamp::now());
    patch_status(
        &context.client,
        cluster.as_ref(),
        cluster.status.as_ref(),
        &status,
    )
    .await?;
    publish(context, cluster, Severity::Warning, reason, message).await;
    Ok(None)
}
