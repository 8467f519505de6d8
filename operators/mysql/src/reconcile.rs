//! Reconciling a `MySQLCluster`: observe, decide one step, act, report.
//!
//! 1. Observe: the StatefulSet, the member pods' role labels, every member through the admin
//!    layer, and for a cluster created from a backup and not yet restored, that backup.
//! 2. Decide: [`crate::decide::decide`], a pure function of those facts.
//! 3. Act: apply the Kubernetes objects; fence a failing primary out of the primary Service;
//!    take the one step, recording it in status first when it changes the primary, removes a
//!    member or restores a backup; set the pods' role labels from what is now true.
//! 4. Report: status and conditions from what was observed, and an event for the step taken
//!    or refused.

use std::{ops::ControlFlow, sync::Arc, time::Duration};

use k8s_openapi::{
    api::{apps::v1::StatefulSet, core::v1::Pod},
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use quorum_core::{
    backup::{backup_target, credentials, restore_retry::FailedRestores},
    events::Severity,
    naming::PodHosts,
    pass::{FollowUps, Progress, Reason as _, UnreadableRecord, needed_secret, publish},
    recovery::{RecoveryRecord, RecoveryRequest},
    repair::{PodRepair, RepairRecord, WipedPod},
    role_labels::LabelledPods,
    rollout::{Templates, needs_take_over, restart_pod, take_over_updates},
    runner::Context,
    status::StatusWriter,
};
use secrecy::SecretString;
use sha2::{Digest, Sha256};

use crate::{
    address::Addresses,
    admin::{Credentials, gtid::GtidPosition},
    crd::{
        Access, BackupMethod, BackupRecord, FailoverRecord, MySQLBackup, MySQLCluster, MySQLClusterStatus,
        PrimaryPosition, RestoreRecord, SWITCHOVER_ANNOTATION, forbidden_config_keys,
    },
    decide::{Decision, Facts, InFlight, Reason, Restore, Step, caught_up_replica, decide},
    execute::{StepContext, StepError, StepOutcome, execute, step_failure},
    observe::{ClusterView, MySqlClients},
    resources::{
        PASSWORD_KEY, PhysicalRestoreInit, ROLE_LABEL, binlog_expire_seconds, build_config_map,
        build_headless_service, build_password_secret, build_pod_disruption_budget, build_primary_service,
        build_replicas_service, build_restoring_statefulset, build_statefulset, generated_root_secret_name,
        member_name, member_selector, ordinal_of, replication_secret_name, root_secret_name, semi_sync,
        statefulset_name,
    },
    restore::{StoredSnapshot, plan_recovery},
    status::{
        build_status, describe, failover_record, in_flight_from_status, role_labels,
        status_keeping_unreadable_record, step_reason, unreadable_record_wait,
    },
};

pub use quorum_core::config::{MemberAddresses, MemberConfig};

/// Operator-wide settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where members are found (`--cluster-domain`, `--member-addresses`) and whether backups
    /// may go to an `http://` S3 endpoint (`--allow-http-backups`).
    pub members: MemberConfig,
    /// How old an observation may be for the decision to act on it.
    pub freshness: Duration,
    /// The operator's own image: backup Jobs run it.
    pub operator_image: String,
}

/// The operator's own state in the shared context.
pub struct State {
    pub clients: MySqlClients,
    pub settings: Settings,
    pub follow_ups: FollowUps<Step>,
}

impl quorum_core::runner::ForgetsClusters for State {
    fn forget_cluster<'a>(&'a self, key: &'a str) -> futures::future::BoxFuture<'a, ()> {
        self.follow_ups.forget_cluster(key);
        Box::pin(self.clients.forget_cluster(key))
    }
}

impl State {
    pub fn addresses(&self, cluster: &MySQLCluster) -> Addresses {
        Addresses {
            cluster: cluster.name_any(),
            hosts: PodHosts::new(&self.settings.members, cluster),
        }
    }
}

/// A failed pass, naming what failed.
pub type Error = quorum_core::pass::PassError<StepError>;

/// Reconciles one `MySQLCluster`: observe, decide one step, apply the objects, record and take
/// the step, set the role labels, report.
pub async fn reconcile(cluster: Arc<MySQLCluster>, context: Arc<Context<State>>) -> Result<Action, Error> {
    let cluster = match admit(&context, &cluster).await? {
        ControlFlow::Continue(cluster) => cluster,
        ControlFlow::Break(action) => return Ok(action),
    };
    let replication_password = load_credentials(&context, &cluster).await?;
    let now = Timestamp::now();
    let mut observed = observe(&context, &cluster).await?;
    if let Some(statefulset) = &observed.statefulset_to_take_over {
        // Before any apply of the StatefulSet, which the API server would refuse until then.
        take_over_updates(&context.client, statefulset).await?;
    }
    let mut report = Report::new(&context, &cluster, &observed.view, now);
    let in_flight = match &observed.in_flight {
        Ok(in_flight) => in_flight.clone(),
        Err(unreadable) => {
            let pod_count = observed.statefulset_replicas.unwrap_or(observed.desired);
            return wait_on_unreadable_record(
                &context,
                &cluster,
                &observed,
                pod_count,
                unreadable,
                &mut report,
            )
            .await;
        }
    };

    let facts = observed.facts(&cluster, in_flight.clone(), &context.state.settings);
    let decision = decide(&facts);
    tracing::info!(cluster = %observed.key, ?decision, "decided");

    // The objects first, so a deleted Service comes back whatever the step.
    let pod_count = match decision.step() {
        Some(Step::ScalePods { replicas }) => *replicas,
        _ => observed.statefulset_replicas.unwrap_or(observed.desired),
    };
    apply_objects(&context, &cluster, pod_count, observed.members_restoring()).await?;

    let mut memory = Memory {
        restore_failures: cluster
            .status
            .as_ref()
            .and_then(|status| status.restore_failures.clone()),
        primary: observed.primary,
        in_flight,
        last_failover: None,
        restored: None,
        repair: observed
            .repair
            .as_ref()
            .map(|repair| repair.record(None, "", false)),
        // As stored while the request stands: a write before the end of the pass (a step
        // recorded in flight, a failed step) must not drop a recovery recorded as done.
        recovery: observed
            .recovery
            .as_ref()
            .and(cluster.status.as_ref().and_then(|s| s.recovery.clone())),
        pods: LabelledPods::new(std::mem::take(&mut observed.member_pods), ROLE_LABEL),
        primary_volume: observed.primary_volume.clone(),
        accounts: None,
    };
    let mut taken = None;
    if let Some(step) = decision.step() {
        let step_context = StepContext {
            clients: &context.state.clients,
            cluster: &observed.key,
            addresses: &observed.addresses,
            primary: observed.primary,
            replication_password: &replication_password,
            tls: cluster.spec.tls.is_some(),
            semi_sync_wait_for: semi_sync(&cluster).then(|| {
                cluster
                    .spec
                    .replication
                    .as_ref()
                    .map_or(1, |r| r.wait_for_replica_count.max(1) as u32)
            }),
            restore: observed.stored_snapshot(),
        };
        if act(
            &context,
            &cluster,
            &observed,
            &step_context,
            step,
            &mut memory,
            &mut report,
        )
        .await?
        {
            taken = Some(step);
        }
    }
    set_role_labels(&context, &cluster, &observed, &mut memory).await?;
    match &decision {
        Decision::Wait(wait) => {
            if wait.reason.ends_switchover_request() {
                remove_switchover_annotation(&context, &cluster).await?;
            }
            publish(&context.events, cluster.as_ref(), &Progress::from(wait.clone())).await;
        }
        Decision::Settled => {
            if let Some(primary) = memory.primary {
                memory.accounts = Some(
                    ensure_users(&context, &cluster, &observed.key, &observed.addresses, primary).await?,
                );
            }
        }
        Decision::Act(_) => {}
    }

    memory.repair = repair_record(&observed, &facts, &decision, memory.repair.take());
    memory.recovery = recovery_record(&observed, &decision, memory.primary);
    report.write(&decision, &memory).await?;
    let usual = match decision {
        Decision::Settled => Duration::from_secs(30),
        _ => Duration::from_secs(2),
    };
    Ok(Action::requeue(context.state.follow_ups.next_pass(
        &observed.key,
        taken,
        usual,
    )))
}

/// The cluster as stored, if a pass may run on it now (`quorum_core::pass::admit`: status is this
/// operator's memory, the primary, the step in flight, the restore taken). A spec overriding
/// what the operator owns is refused once, then waits for a change.
async fn admit(
    context: &Context<State>,
    cluster: &MySQLCluster,
) -> Result<ControlFlow<Action, Arc<MySQLCluster>>, Error> {
    let cluster = match quorum_core::pass::admit(context, cluster).await? {
        ControlFlow::Continue(cluster) => cluster,
        stop => return Ok(stop),
    };
    let forbidden = forbidden_config_keys(&cluster.spec.config);
    if !forbidden.is_empty() {
        let error = Error::InvalidSpec(format!(
            "spec.config sets {}, which the operator owns",
            forbidden.join(", ")
        ));
        context
            .events
            .publish(
                cluster.as_ref(),
                Severity::Warning,
                Reason::InvalidSpec.as_str(),
                "Validate",
                error.to_string(),
            )
            .await;
        return Err(error);
    }
    Ok(ControlFlow::Continue(cluster))
}

/// The generated Secrets, created once, and the admin credentials handed to the clients:
/// nothing can be observed or started without them. Returns the replication password.
async fn load_credentials(context: &Context<State>, cluster: &MySQLCluster) -> Result<SecretString, Error> {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    ensure_generated_secret(
        context,
        cluster,
        generated_root_secret_name(&name),
        cluster.spec.root_password_secret.is_none(),
    )
    .await?;
    ensure_generated_secret(context, cluster, replication_secret_name(&name), true).await?;
    hand_admin_credentials(context, cluster).await?;
    read_password(context, &namespace, &replication_secret_name(&name)).await
}

/// The admin credentials (the root password, the servers' CA) handed to the clients: by every
/// pass, and by a backup's run, which may come before any pass (after an operator restart, or
/// in a backup Job's process).
pub(crate) async fn hand_admin_credentials(
    context: &Context<State>,
    cluster: &MySQLCluster,
) -> Result<(), Error> {
    let credentials = admin_credentials(context, cluster).await?;
    context
        .state
        .clients
        .set_credentials(&cluster_key(cluster), cluster.spec.flavor, credentials)
        .await;
    Ok(())
}

/// The account the operator administers `cluster`'s servers as: root, its password and the
/// servers' CA read from their Secrets.
pub(crate) async fn admin_credentials(
    context: &Context<State>,
    cluster: &MySQLCluster,
) -> Result<Credentials, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let root_password = read_password(context, &namespace, &root_secret_name(cluster)).await?;
    let server_ca = match &cluster.spec.tls {
        Some(tls) => Some(read_server_ca(context, &namespace, &tls.secret_name).await?),
        None => None,
    };
    Ok(Credentials {
        user: "root".into(),
        password: root_password,
        server_ca,
    })
}

fn cluster_key(cluster: &MySQLCluster) -> String {
    format!(
        "{}/{}",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any()
    )
}

/// What one pass observed: the StatefulSet, every member through the admin layer, the
/// switchover asked for, a backup to restore, and the operator's memory as stored in status.
struct Observed {
    key: String,
    addresses: Addresses,
    statefulset_replicas: Option<usize>,
    /// The StatefulSet still updates `RollingUpdate` (made by an operator before managed rolls).
    statefulset_to_take_over: Option<Arc<StatefulSet>>,
    templates: Templates,
    /// The member pods, as listed this pass; the labelling in `Memory` takes them.
    member_pods: Vec<Pod>,
    desired: usize,
    view: ClusterView,
    primary: Option<usize>,
    in_flight: Result<Option<InFlight>, UnreadableRecord>,
    switchover_to: Option<usize>,
    pending_restore: Option<PendingRestore>,
    /// A repair a person asked for, resolved against the member pods.
    repair: Option<PodRepair>,
    /// A recovery a person asked for.
    recovery: Option<RecoveryRequest>,
    /// The recorded primary's data claim uid, read when status has no volume for it yet or the
    /// primary came back read-only.
    primary_volume: Option<(usize, String)>,
}

impl Observed {
    /// Whether the recorded primary's data claim is another than the one it was seen open on.
    fn primary_volume_replaced(&self, cluster: &MySQLCluster) -> bool {
        let recorded = self
            .primary
            .and_then(|primary| recorded_primary_position(cluster, primary))
            .and_then(|last| last.volume.as_deref());
        match (recorded, &self.primary_volume) {
            (Some(recorded), Some((ordinal, now))) => Some(*ordinal) == self.primary && recorded != now,
            _ => false,
        }
    }

    fn facts(&self, cluster: &MySQLCluster, in_flight: Option<InFlight>, settings: &Settings) -> Facts {
        Facts {
            cluster: cluster.name_any(),
            desired_members: self.desired,
            statefulset_replicas: self.statefulset_replicas,
            members: self.view.members.clone(),
            templates: self.templates.clone(),
            primary: self.primary,
            in_flight,
            in_flight_age: self.in_flight_age(cluster),
            switchover_to: self.switchover_to,
            restored_into: cluster
                .status
                .as_ref()
                .filter(|status| status.primary.is_none())
                .and_then(|status| status.restored_from.as_ref())
                .and_then(|record| crate::resources::ordinal_of(&cluster.name_any(), &record.member)),
            restore: self
                .pending_restore
                .as_ref()
                .map(|pending| match (pending, restore_waits(cluster)) {
                    (PendingRestore::NotReady { why, physical: true }, _)
                        if self.statefulset_replicas.is_none() =>
                    {
                        Restore::CopyAwaited(why.clone())
                    }
                    (PendingRestore::NotReady { why, .. }, _) => Restore::SourceNotReady(why.clone()),
                    (PendingRestore::Ready { .. }, Some(failed)) => {
                        Restore::RetryLater(failed.message.clone())
                    }
                    (PendingRestore::Ready { snapshot, physical }, None) => Restore::Ready {
                        backup: snapshot.backup.clone(),
                        position: snapshot.furthest_position().clone(),
                        copy: physical.as_ref().map(|_| {
                            let first = member_name(&cluster.name_any(), crate::decide::RESTORE_TARGET);
                            crate::restore::copy_state(
                                self.member_pods.iter().find(|pod| pod.name_any() == first),
                                &snapshot.sha256,
                            )
                        }),
                    },
                }),
            semi_sync: semi_sync(cluster),
            binlog_expire_seconds: binlog_expire_seconds(cluster, jiff::Timestamp::now()),
            repair: self.repair.clone(),
            recovery: self.recovery.clone(),
            primary_last_open: self
                .primary
                .and_then(|primary| recorded_primary_position(cluster, primary))
                .and_then(|last| GtidPosition::parse(cluster.spec.flavor, &last.gtid).ok()),
            primary_volume_replaced: self.primary_volume_replaced(cluster),
            freshness: settings.freshness,
            now: std::time::Instant::now(),
        }
    }

    /// How long the step in flight has been under way: since it was recorded, or, for a member
    /// whose pod was created after that (a restart taken again later), since its pod was.
    fn in_flight_age(&self, cluster: &MySQLCluster) -> Option<std::time::Duration> {
        let step = cluster.status.as_ref()?.in_flight.as_ref()?;
        let pod_created = self
            .member_pods
            .iter()
            .find(|pod| pod.metadata.name.as_deref() == Some(step.member.as_str()))
            .and_then(|pod| pod.metadata.creation_timestamp.as_ref())
            .map(|created| created.0);
        let since = pod_created
            .filter(|created| *created > step.started_at.0)
            .unwrap_or(step.started_at.0);
        Timestamp::now().duration_since(since).try_into().ok()
    }

    fn stored_snapshot(&self) -> Option<&StoredSnapshot> {
        match &self.pending_restore {
            Some(PendingRestore::Ready { snapshot, .. }) => Some(snapshot),
            _ => None,
        }
    }

    /// How the StatefulSet stands toward a physical restore: its members get the copy's init
    /// containers while it is pending, and are not made at all while the copy is awaited.
    fn members_restoring(&self) -> MembersRestoring<'_> {
        match &self.pending_restore {
            Some(PendingRestore::Ready {
                physical: Some(init), ..
            }) => MembersRestoring::From(init),
            Some(PendingRestore::NotReady { physical: true, .. }) if self.statefulset_replicas.is_none() => {
                MembersRestoring::Awaited
            }
            _ => MembersRestoring::No,
        }
    }
}

async fn observe(context: &Context<State>, cluster: &MySQLCluster) -> Result<Observed, Error> {
    let name = cluster.name_any();
    let key = cluster_key(cluster);
    let addresses = context.state.addresses(cluster);
    let statefulset = context
        .read::<StatefulSet>(&cluster.namespace().unwrap_or_default(), &statefulset_name(&name))
        .await
        .map_err(Error::api("reading the StatefulSet"))?;
    let statefulset_replicas = statefulset
        .as_ref()
        .and_then(|s| s.spec.as_ref()?.replicas)
        .map(|r| r.max(0) as usize);
    let member_pods: Vec<Pod> = context
        .pods(
            &cluster.namespace().unwrap_or_default(),
            &member_selector(cluster),
        )
        .await
        .map_err(Error::api("listing member pods"))?
        .into_iter()
        .map(Arc::unwrap_or_clone)
        .collect();
    let templates = Templates::observe(statefulset.as_deref(), &member_pods, |pod| ordinal_of(&name, pod));
    let view = context
        .state
        .clients
        .observe(&key, &addresses, statefulset_replicas.unwrap_or(0))
        .await;
    let primary = cluster
        .status
        .as_ref()
        .and_then(|s| s.primary.as_deref())
        .and_then(|p| ordinal_of(&name, p));
    // Only asynchronous replication uses it. A claim that cannot be read is no evidence either
    // way: the pass goes on with the GTIDs recorded, as before the claim was recorded at all.
    let primary_volume = match primary {
        Some(primary) if !semi_sync(cluster) && needs_primary_volume(cluster, primary, &view) => {
            let claim = quorum_core::pod::data_claim_name(&member_name(&name, primary));
            match context
                .read::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(
                    &cluster.namespace().unwrap_or_default(),
                    &claim,
                )
                .await
            {
                Ok(found) => found
                    .and_then(|claim| claim.metadata.uid.clone())
                    .map(|uid| (primary, uid)),
                Err(error) => {
                    tracing::warn!(cluster = %key, claim, %error, "reading the primary's data claim failed");
                    None
                }
            }
        }
        _ => None,
    };
    Ok(Observed {
        primary_volume,
        primary,
        desired: usize::try_from(cluster.spec.replicas).unwrap_or(0),
        in_flight: in_flight_from_status(cluster),
        switchover_to: cluster
            .annotations()
            .get(SWITCHOVER_ANNOTATION)
            .and_then(|target| ordinal_of(&name, target)),
        pending_restore: pending_restore(context, cluster).await?,
        key,
        addresses,
        statefulset_replicas,
        statefulset_to_take_over: statefulset.filter(|statefulset| needs_take_over(statefulset)),
        repair: quorum_core::repair::observe(
            &context.client,
            cluster,
            cluster.status.as_ref().and_then(|s| s.repair.as_ref()),
            &member_pods,
            |member| ordinal_of(&name, member),
        )
        .await
        .map_err(Error::api("reading the data claim of the member to repair"))?,
        recovery: quorum_core::recovery::request(
            cluster,
            cluster.status.as_ref().and_then(|s| s.recovery.as_ref()),
            |member| ordinal_of(&name, member),
        ),
        templates,
        member_pods,
        view,
    })
}

/// Where a repair asked for stands at the end of the pass, for `status.repair`; `None` once the
/// request is gone. `recorded` is what this pass recorded (a wipe, before it was taken).
fn repair_record(
    observed: &Observed,
    facts: &Facts,
    decision: &Decision,
    recorded: Option<RepairRecord>,
) -> Option<RepairRecord> {
    let repair = observed.repair.as_ref()?;
    let wiped_now = recorded.as_ref().and_then(WipedPod::recorded);
    let waiting = match decision {
        Decision::Wait(wait) => wait.message.clone(),
        Decision::Act(step) => describe(observed.key.rsplit('/').next().unwrap_or_default(), step),
        Decision::Settled => "waiting for the next pass".to_string(),
    };
    let back = match (repair.ordinal, observed.primary) {
        (Some(ordinal), Some(primary)) => caught_up_replica(facts, ordinal, primary),
        _ => false,
    };
    Some(repair.record(wiped_now.as_ref(), &waiting, back))
}

/// Whether this pass reads the recorded primary's data claim: status has no volume for it yet, or
/// it answers read-only (restarted, perhaps on a new volume). A settled primary costs no read.
fn needs_primary_volume(cluster: &MySQLCluster, primary: usize, view: &ClusterView) -> bool {
    let recorded = recorded_primary_position(cluster, primary);
    let read_only = view
        .members
        .iter()
        .find(|member| member.ordinal == primary)
        .and_then(|member| member.state.as_ref())
        .is_some_and(|state| state.read_only);
    recorded.is_none_or(|last| last.volume.is_none()) || read_only
}

/// What status records the primary `primary` held while it accepted writes (GTIDs and claim).
/// A record of another member is no witness of this one; GTIDs that cannot be read are none.
fn recorded_primary_position(cluster: &MySQLCluster, primary: usize) -> Option<&PrimaryPosition> {
    cluster
        .status
        .as_ref()?
        .primary_last_open
        .as_ref()
        .filter(|last| last.member == member_name(&cluster.name_any(), primary))
}

/// Where a recovery asked for stands at the end of the pass, for `status.recovery`; `None` once
/// the request is gone. It is done once the member it names became the primary while it stood
/// (this pass, or as recorded before); until then the record says what the pass decided about it.
fn recovery_record(
    observed: &Observed,
    decision: &Decision,
    primary_now: Option<usize>,
) -> Option<RecoveryRecord> {
    let request = observed.recovery.as_ref()?;
    let name = observed.key.rsplit('/').next().unwrap_or_default();
    let took_over_from = observed
        .primary
        .zip(primary_now)
        .filter(|(before, after)| request.ordinal == Some(*after) && before != after)
        .map(|(before, _)| member_name(name, before));
    let refused = match decision {
        Decision::Wait(wait) if wait.reason == Reason::RecoveryRefused => Some(wait.message.clone()),
        _ => None,
    };
    let taking = match decision {
        Decision::Act(step @ Step::Failover { to, .. }) if request.ordinal == Some(*to) => {
            Some(describe(name, step))
        }
        _ => None,
    };
    Some(request.outcome(took_over_from, refused, taking))
}

/// What the pass changes of the operator's memory in status.
struct Memory {
    /// The restore attempts failed in a row (`status.restoreFailures`).
    restore_failures: Option<FailedRestores>,
    primary: Option<usize>,
    in_flight: Option<InFlight>,
    last_failover: Option<FailoverRecord>,
    restored: Option<RestoreRecord>,
    /// Where a repair asked for stands (`status.repair`).
    repair: Option<RepairRecord>,
    /// Where a recovery asked for stands (`status.recovery`).
    recovery: Option<RecoveryRecord>,
    /// The member pods, with the role labels set so far this pass.
    pods: LabelledPods,
    /// The data claim uid of the member that was the primary when the pass began, if read.
    primary_volume: Option<(usize, String)>,
    /// The `spec.users` accounts this pass made sure of (`status.accounts`); `None`: as stored.
    accounts: Option<Vec<String>>,
}

/// The status writer of one pass: status is computed from what the pass observed and written
/// only when it changed, each write diffed against the one before (a record written before a
/// step and dropped after it in the same pass is removed, not left behind).
struct Report<'a> {
    metrics: &'a quorum_core::metrics::Metrics,
    cluster: &'a MySQLCluster,
    view: &'a ClusterView,
    now: Timestamp,
    writer: StatusWriter<'a, MySQLCluster, MySQLClusterStatus>,
}

impl<'a> Report<'a> {
    fn new(
        context: &'a Context<State>,
        cluster: &'a MySQLCluster,
        view: &'a ClusterView,
        now: Timestamp,
    ) -> Self {
        Self {
            metrics: &context.metrics,
            cluster,
            view,
            now,
            writer: StatusWriter::new(&context.client, cluster, cluster.status.as_ref()),
        }
    }

    async fn write(&mut self, decision: &Decision, memory: &Memory) -> Result<(), Error> {
        let status = build_status(
            self.cluster,
            &self.view.members,
            decision,
            memory.primary,
            memory.in_flight.as_ref(),
            memory.last_failover.clone(),
            memory.restored.clone(),
            // The claim read this pass is the primary's only while the primary did not change.
            memory
                .primary_volume
                .as_ref()
                .filter(|(ordinal, _)| memory.primary == Some(*ordinal))
                .map(|(_, volume)| volume.as_str()),
            memory.accounts.clone(),
            self.now,
        );
        let status = MySQLClusterStatus {
            repair: memory.repair.clone(),
            recovery: memory.recovery.clone(),
            restore_failures: memory.restore_failures.clone(),
            ..status
        };
        self.writer.write(&status).await?;
        self.metrics.observe_members_of(
            crate::observe::ENGINE,
            self.cluster,
            status.members.iter().map(|m| m.health.as_str()),
            // Every member: a failover waits for every replica to answer.
            status.members.iter().map(|m| m.health.as_str()),
        );
        Ok(())
    }
}

/// Records the step in status when it changes the primary, removes a member or restores a
/// backup (a crash from then on resumes it, never repeats it blindly), fences a failing primary
/// out of the primary Service, takes the step and publishes it. A failed step is reported, then
/// returned as the error; a switchover given up drops its record and the request, or every
/// retry would make the primary read-only again. `true` when the step was taken in full.
async fn act(
    context: &Context<State>,
    cluster: &MySQLCluster,
    observed: &Observed,
    step_context: &StepContext<'_>,
    step: &Step,
    memory: &mut Memory,
    report: &mut Report<'_>,
) -> Result<bool, Error> {
    let name = cluster.name_any();
    let decision = Decision::Act(step.clone());
    if let Some(recorded) = step.in_flight() {
        memory.in_flight = Some(recorded);
        report.write(&decision, memory).await?;
    }
    set_role_labels(context, cluster, observed, memory).await?;
    if let Step::RestartMember { ordinal } = *step
        && let Some(uid) = observed.templates.outdated_pod(ordinal)
    {
        let namespace = cluster.namespace().unwrap_or_default();
        restart_pod(&context.client, &namespace, &member_name(&name, ordinal), uid).await?;
    }
    if let Step::WipeMember { ordinal, pod_uid } = step
        && let Some(repair) = &observed.repair
    {
        // Recorded before it is taken, with the claim the pod stands on: one request wipes one
        // pod, never a second after a restart of the operator, and a pod replaced on the same
        // claim before the wipe reached it is wiped in its turn.
        memory.repair = Some(repair.record(Some(&repair.wiping(pod_uid)), "", false));
        report.write(&decision, memory).await?;
        let namespace = cluster.namespace().unwrap_or_default();
        let pod = member_name(&name, *ordinal);
        quorum_core::wipe::wipe_member(&context.client, &namespace, &pod, Some(pod_uid.clone()))
            .await
            .map_err(Error::api(format!("wiping {pod}")))?;
    }
    match execute(step_context, step).await {
        Ok(StepOutcome::Done) => {
            record_done(context, cluster, observed, step, memory, report.now).await?;
            Ok(true)
        }
        Ok(StepOutcome::NotYet(why)) => {
            tracing::info!(cluster = %observed.key, ?step, %why, "not yet");
            Ok(false)
        }
        Err(error) => {
            let failure = step_failure(&error);
            if failure.abandoned {
                memory.in_flight = None;
                remove_switchover_annotation(context, cluster).await?;
            }
            let failed = Progress::Failed {
                reason: failure.reason,
                message: format!("{}: {error}", describe(&name, step)),
            };
            publish(&context.events, cluster, &failed).await;
            let mut message = format!(
                "{} failed; nothing else was changed: {error}",
                describe(&name, step)
            );
            if let Step::Restore { .. } = step {
                // The next attempt reads the whole backup again: it waits, longer each time.
                message =
                    FailedRestores::record_failure(&mut memory.restore_failures, Timestamp::now(), &message);
            }
            let failed = Decision::wait(failure.reason, message);
            report.write(&failed, memory).await?;
            Err(Error::Step {
                step: describe(&name, step),
                source: error,
            })
        }
    }
}

/// The record of failed restores of `cluster` while the next attempt must wait.
fn restore_waits(cluster: &MySQLCluster) -> Option<&FailedRestores> {
    FailedRestores::waiting(
        cluster.status.as_ref()?.restore_failures.as_ref(),
        Timestamp::now(),
    )
}

/// What a step taken changes: its event, the primary, the record in flight, the failover or
/// restore record.
async fn record_done(
    context: &Context<State>,
    cluster: &MySQLCluster,
    observed: &Observed,
    step: &Step,
    memory: &mut Memory,
    now: Timestamp,
) -> Result<(), Error> {
    let name = cluster.name_any();
    if let (Step::Restore { ordinal, .. }, Some(snapshot)) = (step, observed.stored_snapshot()) {
        // Written with this pass's status: from then on the restore is never taken again,
        // whatever restarts (the record in flight goes in the next pass).
        let record = RestoreRecord {
            backup_name: snapshot.backup.clone(),
            location: snapshot.location.clone(),
            sha256: snapshot.sha256.clone(),
            gtid_position: snapshot.position.to_string(),
            binlogs_replayed: snapshot.stop.as_ref().map(|_| snapshot.binlogs.len() as u32),
            member: member_name(&name, *ordinal),
            completed_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        };
        context
            .events
            .publish(
                cluster,
                Severity::Normal,
                Reason::Restored.as_str(),
                "Restore",
                format!(
                    "restored MySQLBackup {} ({}, sha256 {} verified) into {} at GTID position {}",
                    record.backup_name, record.location, record.sha256, record.member, record.gtid_position
                ),
            )
            .await;
        memory.restored = Some(record);
        memory.restore_failures = None;
        memory.in_flight = None;
        return Ok(());
    }
    let acted = Progress::Acted {
        reason: step_reason(step),
        message: describe(&name, step),
    };
    publish(&context.events, cluster, &acted).await;
    match *step {
        Step::OpenPrimary { ordinal } => memory.primary = Some(ordinal),
        Step::Failover { to, .. } | Step::Switchover { to, .. } => memory.primary = Some(to),
        Step::RemoveMember { ordinal } => {
            context
                .applier
                .apply(&build_statefulset(cluster, ordinal as i32)?)
                .await?;
        }
        Step::ClearInFlight => {
            let recorded = cluster.status.as_ref().and_then(|s| s.in_flight.as_ref());
            if let (Some(InFlight::Failover { .. } | InFlight::Switchover { .. }), Some(recorded)) =
                (&memory.in_flight, recorded)
            {
                let record = failover_record(recorded, now);
                context.state.clients.record_failover(&record);
                memory.last_failover = Some(record);
                remove_switchover_annotation(context, cluster).await?;
            }
            memory.in_flight = None;
        }
        _ => {}
    }
    Ok(())
}

/// Whether the members restore a physical copy before their servers start.
enum MembersRestoring<'a> {
    No,
    /// The backup will hold a physical copy and holds none yet: no member is made, since its
    /// server would initialise the data directory the copy must find empty.
    Awaited,
    From(&'a PhysicalRestoreInit),
}

/// The cluster's Kubernetes objects, the StatefulSet at `pod_count` pods. Applied on every pass
/// whatever the step, so a deleted Service comes back.
async fn apply_objects(
    context: &Context<State>,
    cluster: &MySQLCluster,
    pod_count: usize,
    restoring: MembersRestoring<'_>,
) -> Result<(), Error> {
    let applier = &context.applier;
    applier.apply(&build_config_map(cluster)?).await?;
    applier.apply(&build_headless_service(cluster)?).await?;
    applier.apply(&build_primary_service(cluster)?).await?;
    applier.apply(&build_replicas_service(cluster)?).await?;
    applier.apply(&build_pod_disruption_budget(cluster)?).await?;
    quorum_core::backup::controller::ensure_scheduled_backup::<crate::crd::MySQLBackup, _, _>(
        context,
        cluster,
        cluster.spec.backup.as_ref().map(|policy| &policy.policy),
        crate::resources::labels(cluster),
        crate::resources::scheduled_backup_fields(cluster),
    )
    .await?;
    let restore = match restoring {
        MembersRestoring::Awaited => return Ok(()),
        MembersRestoring::From(init) => Some(init),
        MembersRestoring::No => None,
    };
    applier
        .apply(&build_restoring_statefulset(cluster, pod_count as i32, restore)?)
        .await?;
    Ok(())
}

/// A step in flight that this operator cannot read: status says so and no step is taken, so a
/// recorded change of primary, removal or restore is never forgotten (and never repeated on a
/// guess). The record stays as stored until a person removes it or an operator that can read it
/// resumes it; the pods' role labels are left as they are, so the primary Service does not move.
/// The objects are still applied (the StatefulSet at its current size), as on any wait.
async fn wait_on_unreadable_record(
    context: &Context<State>,
    cluster: &MySQLCluster,
    observed: &Observed,
    pod_count: usize,
    unreadable: &UnreadableRecord,
    report: &mut Report<'_>,
) -> Result<Action, Error> {
    tracing::warn!(cluster = %observed.key, %unreadable, "the step in flight cannot be read");
    let wait = unreadable_record_wait(cluster, unreadable);
    let status = status_keeping_unreadable_record(
        cluster,
        &observed.view.members,
        observed.primary,
        &wait,
        report.now,
    );
    report.writer.write(&status).await?;
    publish(&context.events, cluster, &Progress::from(wait)).await;
    apply_objects(context, cluster, pod_count, observed.members_restoring()).await?;
    Ok(Action::requeue(Duration::from_secs(30)))
}

/// Creates a generated password Secret once; an existing one is never rewritten.
async fn ensure_generated_secret(
    context: &Context<State>,
    cluster: &MySQLCluster,
    name: String,
    wanted: bool,
) -> Result<(), Error> {
    if wanted {
        let secret = build_password_secret(cluster, name, quorum_core::pod::generate_password())?;
        context.applier.create_once(&secret).await?;
    }
    Ok(())
}

/// The CA certificate (`ca.crt`) of the TLS Secret `name`, which the operator verifies the
/// members' certificates against; a missing Secret or key is an error naming it.
async fn read_server_ca(context: &Context<State>, namespace: &str, name: &str) -> Result<Vec<u8>, Error> {
    needed_secret(context, namespace, name).await?.bytes("ca.crt")
}

async fn read_password(context: &Context<State>, namespace: &str, name: &str) -> Result<SecretString, Error> {
    let password = needed_secret(context, namespace, name)
        .await?
        .text(PASSWORD_KEY)?;
    Ok(SecretString::from(password))
}

/// Sets each member pod's role label where it differs from what is true now.
async fn set_role_labels(
    context: &Context<State>,
    cluster: &MySQLCluster,
    observed: &Observed,
    memory: &mut Memory,
) -> Result<(), Error> {
    let name = cluster.name_any();
    let roles = role_labels(&observed.view.members, memory.primary, memory.in_flight.as_ref());
    memory
        .pods
        .set(&context.client, &cluster.namespace().unwrap_or_default(), |pod| {
            Some(roles.get(&ordinal_of(&name, pod)?)?.as_ref()?.as_str())
        })
        .await?;
    Ok(())
}

async fn remove_switchover_annotation(context: &Context<State>, cluster: &MySQLCluster) -> Result<(), Error> {
    if !cluster.annotations().contains_key(SWITCHOVER_ANNOTATION) {
        return Ok(());
    }
    let clusters: Api<MySQLCluster> =
        Api::namespaced(context.client.clone(), &cluster.namespace().unwrap_or_default());
    // The uid makes the API server refuse the patch if the cluster was created again meanwhile.
    let patch = serde_json::json!({
        "metadata": {"uid": cluster.metadata.uid, "annotations": {SWITCHOVER_ANNOTATION: null}},
    });
    let written = clusters
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await;
    quorum_core::freshness::record_write::<MySQLCluster, _>(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
        &written,
    );
    written.map_err(Error::api("removing the switchover annotation"))?;
    Ok(())
}

/// The application accounts of `spec.users`, created or updated on the primary when they or
/// their passwords changed since this operator process last applied them (the statements are
/// idempotent, so a restarted operator applying them once more is harmless). Returns the names
/// of the accounts that now exist.
async fn ensure_users(
    context: &Context<State>,
    cluster: &MySQLCluster,
    key: &str,
    addresses: &Addresses,
    primary: usize,
) -> Result<Vec<String>, Error> {
    let names = cluster.spec.users.iter().map(|user| user.name.clone()).collect();
    if cluster.spec.users.is_empty() {
        return Ok(names);
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let mut accounts = Vec::new();
    let mut fingerprint = Sha256::new();
    for user in &cluster.spec.users {
        let password = read_password(context, &namespace, &user.password_secret).await?;
        use secrecy::ExposeSecret;
        fingerprint.update(user.name.as_bytes());
        fingerprint.update(user.database.as_bytes());
        fingerprint.update(format!("{:?}", user.access).as_bytes());
        fingerprint.update(password.expose_secret().as_bytes());
        let privileges = match user.access {
            Access::ReadWrite => "ALL PRIVILEGES",
            Access::ReadOnly => "SELECT",
        };
        accounts.push((
            user.name.clone(),
            user.database.clone(),
            password,
            vec![format!(
                "{privileges} ON {}.*",
                crate::admin::dialect::quote_identifier(&user.database)
            )],
        ));
    }
    let fingerprint = hex::encode(fingerprint.finalize());
    if !context.state.clients.users_changed(key, &fingerprint) {
        return Ok(names);
    }
    for (user, database, password, grants) in accounts {
        context
            .state
            .clients
            .call(
                key,
                addresses,
                primary,
                "ensure_user",
                quorum_core::availability::retry::Idempotency::Mutation,
                |admin| {
                    let (user, database, password, grants) =
                        (user.clone(), database.clone(), password.clone(), grants.clone());
                    async move {
                        admin.ensure_database(&database).await?;
                        admin.ensure_user(&user, "%", &password, &grants).await
                    }
                },
            )
            .await
            .map_err(|source| Error::Step {
                step: format!("creating account {user}"),
                source: StepError::Admin {
                    ordinal: primary,
                    source,
                },
            })?;
    }
    context.state.clients.users_applied(key, fingerprint);
    Ok(names)
}

/// The restore a cluster created from a backup still has to take.
enum PendingRestore {
    /// The backup does not exist, has no stored snapshot, or its destination cannot be read;
    /// `physical` when its spec says it copies files, so that no member may start before the
    /// copy is there (a started server initialises its empty data directory).
    NotReady { why: String, physical: bool },
    /// For a physical copy, the init containers that restore it (`physical`).
    Ready {
        snapshot: Box<StoredSnapshot>,
        physical: Option<PhysicalRestoreInit>,
    },
}

/// What a cluster created with `restoreFrom` restores, while it has not: `None` for another
/// cluster, and for one with a restore or a primary recorded (a restore never happens into a
/// cluster that already served).
async fn pending_restore(
    context: &Context<State>,
    cluster: &MySQLCluster,
) -> Result<Option<PendingRestore>, Error> {
    let Some(source) = &cluster.spec.restore_from else {
        return Ok(None);
    };
    if crate::restore::restore_done(cluster) {
        return Ok(None);
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let name = &source.backup.backup_name;
    let backups: Api<MySQLBackup> = Api::namespaced(context.client.clone(), &namespace);
    let Some(backup) = backups
        .get_opt(name)
        .await
        .map_err(Error::api(format!("reading MySQLBackup {name}")))?
    else {
        return Ok(Some(PendingRestore::NotReady {
            why: format!("MySQLBackup {name} does not exist"),
            physical: false,
        }));
    };
    let recorded = backup.status.clone().unwrap_or_default();
    let physical = backup.spec.method == BackupMethod::Physical;
    let (Some(snapshot), Some(position)) = (recorded.run.last_snapshot, recorded.gtid_position) else {
        return Ok(Some(PendingRestore::NotReady {
            why: format!("MySQLBackup {name} has no stored snapshot yet"),
            physical,
        }));
    };
    if recorded.method == Some(BackupMethod::Physical) {
        let init = PhysicalRestoreInit {
            operator_image: context.state.settings.operator_image.clone(),
            fetch: quorum_core::backup::ObjectFetch::of(
                &snapshot.location,
                &snapshot.sha256,
                backup.spec.backup.destination.s3.as_ref(),
                context.state.settings.members.allow_http_backups,
            ),
            position: position.clone(),
        };
        return Ok(Some(
            match (
                &source.point_in_time,
                stored_snapshot(context, cluster, &backup, &snapshot, &position).await,
            ) {
                (Some(_), _) => PendingRestore::NotReady {
                    why: format!(
                        "MySQLBackup {name} holds a physical copy: restoreFrom.pointInTime needs a Logical backup that archives the binary log"
                    ),
                    physical: true,
                },
                (None, Ok(stored)) => PendingRestore::Ready {
                    snapshot: Box::new(StoredSnapshot {
                        method: BackupMethod::Physical,
                        ..stored
                    }),
                    physical: Some(init),
                },
                (None, Err(why)) => PendingRestore::NotReady {
                    why: format!("MySQLBackup {name}: {why}"),
                    physical: true,
                },
            },
        ));
    }
    let stored = stored_snapshot(context, cluster, &backup, &snapshot, &position)
        .await
        .and_then(|stored| match &source.point_in_time {
            None => Ok(stored),
            Some(_) if !backup.spec.archive_binlogs && recorded.recovery_runs.is_empty() => Err(
                "restoreFrom.pointInTime needs a backup that archives the binary log (archiveBinlogs)"
                    .to_string(),
            ),
            Some(point) => {
                let plan = plan_recovery(&recorded.recovery_runs, point, cluster.spec.flavor)?;
                stored.at_point(&recorded.recovery_runs, &plan, cluster.spec.flavor)
            }
        });
    Ok(Some(match stored {
        Ok(stored) => PendingRestore::Ready {
            snapshot: Box::new(stored),
            physical: None,
        },
        Err(why) => PendingRestore::NotReady {
            why: format!("MySQLBackup {name}: {why}"),
            physical,
        },
    }))
}

/// Where `backup`'s snapshot is and what it recorded about it, or why it cannot be read.
async fn stored_snapshot(
    context: &Context<State>,
    cluster: &MySQLCluster,
    backup: &MySQLBackup,
    snapshot: &BackupRecord,
    position: &str,
) -> Result<StoredSnapshot, String> {
    let namespace = cluster.namespace().unwrap_or_default();
    let position = GtidPosition::parse(cluster.spec.flavor, position).map_err(|e| e.to_string())?;
    let credentials = credentials(&context.client, &namespace, &backup.spec.backup.destination)
        .await
        .map_err(|e| e.to_string())?;
    let target = backup_target(
        &backup.spec.backup.destination,
        credentials,
        context.state.settings.members.allow_http_backups,
    )
    .map_err(|e| e.to_string())?;
    StoredSnapshot::locate(
        &backup.name_any(),
        target,
        &namespace,
        &backup.spec.backup.cluster_name,
        &snapshot.location,
        &snapshot.sha256,
        position,
    )
}
