//! Reconciling an `EtcdCluster`: observe, decide one step, act, report.
//!
//! 1. Observe: the StatefulSet as it stands, and every member through the admin layer.
//! 2. Decide: [`crate::decide::decide`], a pure function of those facts.
//! 3. Act: apply the Kubernetes objects; take the one step, recording it in status first when
//!    it changes membership or disrupts a member.
//! 4. Report: status and conditions from what was observed, and an event for the step taken
//!    or refused.

use std::{ops::ControlFlow, sync::Arc, time::Duration};

use k8s_openapi::{
    api::{apps::v1::StatefulSet, core::v1::Pod},
    jiff::Timestamp,
};
use kube::{Api, ResourceExt, runtime::controller::Action};
use quorum_core::{
    crd::BackupRecord,
    events::Severity,
    pass::{Progress, Reason as _, UnreadableRecord, needed_secret, publish},
    rollout::restart_pod,
    runner::{Context, object_key},
    status::StatusWriter,
    wakeups::ObjectKey,
};

use crate::{
    admin::TlsMaterial,
    crd::{EtcdBackup, EtcdCluster, EtcdClusterStatus},
    decide::{Decision, Facts, InFlight, Reason, RepairRequest, Step, decide},
    execute::{StepError, StepOutcome, execute},
    leader_events::{LeaderEvents, ListenSettings},
    observe::EtcdClients,
    resolver::{MemberResolver, member_name},
    resources::{
        ClusterState, RestoreInit, bootstrap_members, build_client_service, build_config_map,
        build_peer_service, build_pod_disruption_budget, build_statefulset, client_service_name,
    },
    status::{
        Pending, build_status, describe, in_flight_from_status, recovery_record, repair_record, step_reason,
        unhealthy_durations,
    },
};

pub use quorum_core::config::{MemberAddresses, MemberConfig};

/// How soon a step etcd declined for now is asked again.
const DECLINED_STEP_RETRY: Duration = Duration::from_secs(1);

/// Operator-wide settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where members are found (`--cluster-domain`, `--member-addresses`) and whether backups
    /// may go to an `http://` S3 endpoint (`--allow-http-backups`).
    pub members: MemberConfig,
    /// How old an observation may be for the gate to act on it.
    pub freshness: Duration,
    /// How long a member must be Unhealthy (per its peers) before it is replaced.
    pub replace_after: Duration,
    /// The operator's image, run by the restore init container.
    pub operator_image: String,
    /// How the members' leader watches behave ([`crate::leader_events`]).
    pub leader_events: ListenSettings,
}

/// The operator's own state in the shared context.
pub struct State {
    pub clients: EtcdClients,
    pub leader_events: LeaderEvents,
    pub settings: Settings,
    /// When the pass after a step comes.
    pub follow_ups: quorum_core::pass::FollowUps<(Reason, String)>,
}

impl quorum_core::runner::ForgetsClusters for State {
    fn forget_cluster<'a>(&'a self, key: &'a str) -> futures::future::BoxFuture<'a, ()> {
        if let Some(cluster) = ObjectKey::parse(key) {
            self.leader_events.forget(&cluster);
        }
        self.follow_ups.forget_cluster(key);
        Box::pin(self.clients.forget_cluster(key))
    }
}

impl State {
    /// The resolver for one cluster's members.
    pub fn resolver(&self, cluster: &EtcdCluster) -> MemberResolver {
        let namespace = cluster.namespace().unwrap_or_default();
        match self.settings.members.member_addresses {
            MemberAddresses::Dns => {
                let tls = cluster.spec.tls.as_ref();
                MemberResolver::ClusterDns {
                    cluster: cluster.name_any(),
                    namespace,
                    cluster_domain: self.settings.members.cluster_domain.clone(),
                    client_tls: tls.is_some_and(|tls| tls.client_secret_name.is_some()),
                    peer_tls: tls.is_some_and(|tls| tls.peer_secret_name.is_some()),
                }
            }
            MemberAddresses::Loopback => MemberResolver::Loopback {
                namespace,
                cluster: cluster.name_any(),
            },
        }
    }
}

/// A failed pass, naming what failed.
pub type Error = quorum_core::pass::PassError<StepError>;

/// Reconciles one `EtcdCluster`: observe, decide one step, apply the objects, record and take
/// the step, report.
pub async fn reconcile(cluster: Arc<EtcdCluster>, context: Arc<Context<State>>) -> Result<Action, Error> {
    let cluster = match admit(&context, &cluster).await? {
        ControlFlow::Continue(cluster) => cluster,
        ControlFlow::Break(action) => return Ok(action),
    };
    let resolver = context.state.resolver(&cluster);
    let now = Timestamp::now();
    let observed = observe(&context, &cluster, &resolver, now).await?;
    let mut report = Report::new(&context, &cluster, &observed, now);
    let in_flight = match &observed.in_flight {
        Ok(in_flight) => in_flight.clone(),
        Err(unreadable) => {
            let waiting = report.unreadable_record(unreadable).await?;
            publish(&context.events, cluster.as_ref(), &waiting).await;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };

    let decision = decide(&observed.facts(&cluster, in_flight.clone(), &context.state.settings));
    tracing::info!(cluster = %observed.key, ?decision, "decided");

    // The objects first (so a deleted Service comes back whatever the step), then the step.
    if let ControlFlow::Break(action) = apply_objects(
        &context,
        &cluster,
        &resolver,
        &observed,
        decision.step(),
        &mut report,
    )
    .await?
    {
        return Ok(action);
    }
    let mut memory = Memory::of(&observed, in_flight);
    let progress = match decision.step() {
        Some(step) => {
            act(
                &context,
                &cluster,
                &resolver,
                &observed,
                step,
                &mut memory,
                &mut report,
            )
            .await?
        }
        None => match &decision {
            Decision::Wait(wait) => Progress::from(wait.clone()),
            _ => Progress::Settled,
        },
    };
    publish(&context.events, cluster.as_ref(), &progress).await;
    warn_on_even_member_count(&context, &cluster).await;

    report.write(&decision, &memory).await?;
    Ok(Action::requeue(context.state.follow_ups.next_pass(
        &observed.key,
        progress.acted().as_ref(),
        usual_interval(&decision, &progress),
    )))
}

/// How long the step recorded in flight has been tried by `now`: zero when none is recorded.
fn in_flight_for(cluster: &EtcdCluster, now: Timestamp) -> Duration {
    cluster
        .status
        .as_ref()
        .and_then(|status| status.in_flight.as_ref())
        .and_then(|step| now.duration_since(step.started_at.0).try_into().ok())
        .unwrap_or_default()
}

/// How soon the next pass runs unless this one took a new step: a minute once settled; a
/// second after a step etcd declined for now, whose reasons pass within seconds (a learner
/// catching up with the leader, members connected for less than etcd's five-second health
/// window); five seconds while waiting on anything else.
fn usual_interval(decision: &Decision, progress: &Progress<Reason>) -> Duration {
    match (decision, progress) {
        (Decision::Settled, _) => Duration::from_secs(60),
        (Decision::Act(_), Progress::Waiting { .. }) => DECLINED_STEP_RETRY,
        _ => Duration::from_secs(5),
    }
}

/// The cluster as stored, if a pass may run on it now (`quorum_core::pass::admit`: status is this
/// operator's memory, the step in flight and the volumes to wipe), with its client TLS material
/// handed to the clients.
async fn admit(
    context: &Context<State>,
    cluster: &EtcdCluster,
) -> Result<ControlFlow<Action, Arc<EtcdCluster>>, Error> {
    let cluster = match quorum_core::pass::admit(context, cluster).await? {
        ControlFlow::Continue(cluster) => cluster,
        stop => return Ok(stop),
    };
    hand_client_tls(context, &cluster).await?;
    Ok(ControlFlow::Continue(cluster))
}

/// Hands the clients `cluster`'s client TLS material: by every pass, and by a backup's run,
/// which may come before any pass (after an operator restart, and always in a backup Job's
/// process).
pub(crate) async fn hand_client_tls(context: &Context<State>, cluster: &EtcdCluster) -> Result<(), Error> {
    let tls = client_tls(context, cluster).await?;
    context.state.clients.set_tls(&object_key(cluster), tls).await;
    Ok(())
}

/// Keeps a leader watch open on every member that may exist, so a lost leader wakes the next
/// pass at once ([`crate::leader_events`]).
fn follow_leader_events(
    context: &Context<State>,
    cluster: &EtcdCluster,
    resolver: &MemberResolver,
    candidates: usize,
) {
    let endpoints = (0..candidates)
        .filter_map(|ordinal| resolver.client_url(ordinal))
        .collect();
    context.state.leader_events.follow(
        ObjectKey::of(cluster),
        endpoints,
        context.state.clients.tls(&object_key(cluster)),
    );
}

/// The members this pass sees failing whose leader watch broke before, with when it broke; a
/// member seen healthy closes its watch's break.
fn heard_failing(
    context: &Context<State>,
    cluster: &EtcdCluster,
    resolver: &MemberResolver,
    members: &[crate::decide::MemberFact],
) -> std::collections::BTreeMap<usize, Timestamp> {
    let key = ObjectKey::of(cluster);
    let events = &context.state.leader_events;
    for member in members.iter().filter(|m| m.observation.health.is_healthy()) {
        if let Some(url) = resolver.client_url(member.ordinal) {
            events.seen_healthy(&key, &url, member.observation.observed_at);
        }
    }
    let broken = events.broken_since(&key);
    members
        .iter()
        .filter(|m| !m.observation.health.is_healthy())
        .filter_map(|m| Some((m.ordinal, *broken.get(&resolver.client_url(m.ordinal)?)?)))
        .collect()
}

/// What one pass observed: the StatefulSet, every member through the admin layer, the member
/// pods' versions, and the operator's memory as stored in status.
struct Observed {
    key: String,
    statefulset_replicas: Option<usize>,
    desired: usize,
    recorded_members: usize,
    view: crate::observe::ClusterView,
    members: Vec<crate::decide::MemberFact>,
    bootstrapped: bool,
    wipe_pending: Vec<usize>,
    rejoin_pending: Vec<usize>,
    in_flight: Result<Option<InFlight>, UnreadableRecord>,
    pod_versions: std::collections::BTreeMap<usize, String>,
    templates: quorum_core::rollout::Templates,
    repair: Option<RepairRequest>,
    recovery: Option<quorum_core::recovery::RecoveryRequest>,
    /// Member pods created from a template that carried `--force-new-cluster`.
    forced_pods: std::collections::BTreeSet<usize>,
    /// Member pods the kubelet reports Ready.
    ready_pods: std::collections::BTreeSet<usize>,
    /// The uid of each member pod, by ordinal.
    pod_uids: std::collections::BTreeMap<usize, String>,
    /// The backup the members restore while the cluster is restored in place.
    restoring_from: Option<BackupRecord>,
}

impl Observed {
    fn facts(&self, cluster: &EtcdCluster, in_flight: Option<InFlight>, settings: &Settings) -> Facts {
        Facts {
            cluster: cluster.name_any(),
            desired_members: self.desired,
            desired_version: cluster.spec.version.clone(),
            bootstrapped: self.bootstrapped,
            statefulset_replicas: self.statefulset_replicas,
            members: self.view.membership.as_ref().map(|_| self.members.clone()),
            wipe_pending: self.wipe_pending.clone(),
            rejoin_pending: self.rejoin_pending.clone(),
            pod_versions: self.pod_versions.clone(),
            templates: self.templates.clone(),
            in_flight,
            repair: self.repair.clone(),
            recovery: self.recovery.clone(),
            forced_pods: self.forced_pods.clone(),
            ready_pods: self.ready_pods.clone(),
            pod_uids: self.pod_uids.clone(),
            newest_backup: cluster
                .status
                .as_ref()
                .and_then(|s| s.last_backup.as_ref())
                .map(|backup| {
                    format!(
                        "EtcdBackup {}'s snapshot completed at {} ({})",
                        backup.name, backup.completed_at.0, backup.location
                    )
                }),
            freshness: settings.freshness,
            replace_after: settings.replace_after,
            now: std::time::Instant::now(),
        }
    }
}

async fn observe(
    context: &Context<State>,
    cluster: &EtcdCluster,
    resolver: &MemberResolver,
    now: Timestamp,
) -> Result<Observed, Error> {
    let name = cluster.name_any();
    let key = object_key(cluster);
    let status = cluster.status.as_ref();
    let existing = context
        .read::<StatefulSet>(
            &cluster.namespace().unwrap_or_default(),
            &client_service_name(&name),
        )
        .await
        .map_err(Error::api("reading StatefulSet"))?;
    let statefulset_replicas = existing
        .as_ref()
        .and_then(|s| s.spec.as_ref()?.replicas)
        .map(|r| r.max(0) as usize);
    let desired = usize::try_from(cluster.spec.replicas).unwrap_or(0);
    let recorded_members = status.map_or(0, |s| s.members.len());
    // Only ordinals that may hold a member: probing one past them would fail on every pass and
    // keep that endpoint's circuit open for a healthy cluster. A member added but not yet in the
    // StatefulSet or status still shows in etcd's member list, as not answering.
    let candidates = statefulset_replicas
        .unwrap_or(0)
        .max(desired)
        .max(recorded_members);
    follow_leader_events(context, cluster, resolver, candidates);
    let mut view = context.state.clients.observe(&key, resolver, candidates).await;
    view.heard_failing_at = heard_failing(context, cluster, resolver, &view.members);
    let unhealthy_for = unhealthy_durations(status, now);
    let mut members = view.members.clone();
    for member in &mut members {
        member.unhealthy_for = unhealthy_for.get(&member_name(&name, member.ordinal)).copied();
    }
    let bootstrapped = status.is_some_and(|s| s.cluster_id.is_some()) || view.membership.is_some();
    let member_pods = member_pods(context, cluster).await?;
    let ordinals = |recorded: &[i32]| -> Vec<usize> {
        recorded.iter().filter_map(|o| usize::try_from(*o).ok()).collect()
    };
    let wipe_pending = status.map(|s| ordinals(&s.wipe_pending)).unwrap_or_default();
    let rejoin_pending = status.map(|s| ordinals(&s.rejoin_pending)).unwrap_or_default();
    Ok(Observed {
        key,
        statefulset_replicas,
        desired,
        recorded_members,
        bootstrapped,
        wipe_pending,
        rejoin_pending,
        in_flight: in_flight_from_status(status),
        pod_versions: pod_versions(cluster, &member_pods),
        templates: quorum_core::rollout::Templates::observe(existing.as_deref(), &member_pods, |pod| {
            crate::resolver::ordinal_of(&name, pod)
        }),
        repair: repair_request(cluster),
        recovery: quorum_core::recovery::request(
            cluster,
            status.and_then(|s| s.recovery.as_ref()),
            |member| crate::resolver::ordinal_of(&name, member),
        ),
        forced_pods: live_members(&name, &member_pods)
            .filter(|(_, pod)| {
                pod.labels()
                    .get(crate::resources::FORCE_NEW_CLUSTER_LABEL)
                    .is_some_and(|value| value == "true")
            })
            .map(|(ordinal, _)| ordinal)
            .collect(),
        restoring_from: status.and_then(|s| s.restoring_from.clone()),
        ready_pods: live_members(&name, &member_pods)
            .filter(|(_, pod)| quorum_core::pod::is_ready(pod))
            .map(|(ordinal, _)| ordinal)
            .collect(),
        pod_uids: live_members(&name, &member_pods)
            .filter_map(|(ordinal, pod)| Some((ordinal, pod.metadata.uid.clone()?)))
            .collect(),
        view,
        members,
    })
}

/// The repair a person asked for, joined with what status recorded of it. A recorded removal that
/// cannot be read counts as taken: a member is never rebuilt twice for one request on a guess.
fn repair_request(cluster: &EtcdCluster) -> Option<RepairRequest> {
    let recorded = cluster.status.as_ref().and_then(|s| s.repair.as_ref());
    let request = quorum_core::repair::request(cluster, recorded)?;
    Some(RepairRequest {
        ordinal: crate::resolver::ordinal_of(&cluster.name_any(), &request.member),
        replaced: request
            .taken
            .as_deref()
            .map(|id| u64::from_str_radix(id, 16).unwrap_or(0)),
        member: request.member,
    })
}

/// What the pass changes of the operator's memory in status: the step in flight, the volumes
/// still to wipe, the members still to add back, and the member removed for a repair.
struct Memory {
    in_flight: Option<InFlight>,
    wipe_pending: Vec<usize>,
    rejoin_pending: Vec<usize>,
    repair_replaced: Option<u64>,
    /// What was given up, when this pass finished a recovery.
    recovered: Option<Recovered>,
    /// The backup the members restore while the cluster is restored in place.
    restoring_from: Option<BackupRecord>,
}

/// What a finished recovery gave up.
#[derive(Clone, Debug, PartialEq)]
enum Recovered {
    /// These members, recovered from a survivor.
    Members(Vec<usize>),
    /// Every member: the cluster was restored in place from this backup.
    FromBackup(BackupRecord),
}

impl Memory {
    /// The memory as status stored it, with the step in flight as it was read.
    fn of(observed: &Observed, in_flight: Option<InFlight>) -> Self {
        Self {
            in_flight,
            wipe_pending: observed.wipe_pending.clone(),
            rejoin_pending: observed.rejoin_pending.clone(),
            repair_replaced: observed.repair.as_ref().and_then(|r| r.replaced),
            recovered: None,
            restoring_from: observed.restoring_from.clone(),
        }
    }

    /// Records `step` as in flight before it is taken; a restore in place records the backup
    /// it restores (the newest, `last_backup`) with it.
    fn record(&mut self, step: &Step, last_backup: Option<&BackupRecord>) {
        self.in_flight = step.in_flight();
        if let Step::RestoreInPlace { .. } = step {
            self.restoring_from = last_backup.cloned();
            // Every volume is wiped: no replacement is left to finish.
            self.wipe_pending.clear();
            self.rejoin_pending.clear();
        }
    }

    /// What a step done changes in memory. A member removed to be replaced, by the step itself or
    /// found removed when its recorded step is resumed after a crash, must be wiped before its
    /// pod returns; when a repair asked for it, the repair is recorded as taken.
    fn remember(&mut self, step: &Step, repair: Option<&RepairRequest>) {
        let replaced = match (step, &self.in_flight) {
            (Step::Replace { ordinal, id }, _)
            | (Step::ClearInFlight, Some(InFlight::Replace { ordinal, id })) => Some((*ordinal, *id)),
            _ => None,
        };
        match (step, &self.in_flight) {
            (Step::ClearInFlight, Some(InFlight::EndForceNewCluster { .. })) => {
                self.recovered = Some(Recovered::Members(self.rejoin_pending.clone()));
                self.in_flight = None;
            }
            (Step::ClearInFlight, Some(InFlight::AddLearner { ordinal })) => {
                self.rejoin_pending.retain(|o| o != ordinal);
                self.in_flight = None;
            }
            (Step::ClearInFlight, Some(InFlight::RestoreForming)) => {
                self.recovered = self.restoring_from.take().map(Recovered::FromBackup);
                self.in_flight = None;
            }
            (Step::ClearInFlight, _) => self.in_flight = None,
            (Step::WipeMember { ordinal, .. }, _) | (Step::KeepJoinedReplacement { ordinal }, _) => {
                self.wipe_pending.retain(|o| o != ordinal)
            }
            // The lost members come back empty and are added again once the recovery ends; the
            // recovery wiped them, a replacement among them included, so none is wiped again.
            (Step::Recover { ordinal, lost }, _) => {
                self.wipe_pending.retain(|o| !lost.contains(o));
                for member in lost {
                    if !self.rejoin_pending.contains(member) {
                        self.rejoin_pending.push(*member);
                    }
                }
                self.in_flight = Some(InFlight::ForceNewCluster { ordinal: *ordinal });
            }
            _ => {}
        }
        if let Some((ordinal, id)) = replaced {
            if !self.wipe_pending.contains(&ordinal) {
                self.wipe_pending.push(ordinal);
            }
            if repair.is_some_and(|r| r.ordinal == Some(ordinal)) {
                self.repair_replaced = Some(id);
            }
        }
    }
}

/// The status writer of one pass: status is computed from what the pass observed and written
/// only when it changed, each write diffed against the one before.
struct Report<'a> {
    context: &'a Context<State>,
    cluster: &'a EtcdCluster,
    observed: &'a Observed,
    now: Timestamp,
    writer: StatusWriter<'a, EtcdCluster, EtcdClusterStatus>,
    /// A change of leader this pass found, once reported (a pass may write status twice).
    leader_change_reported: bool,
    /// The snapshot this pass recorded as the one the cluster restores from.
    restore_pinned: Option<BackupRecord>,
}

impl<'a> Report<'a> {
    fn new(
        context: &'a Context<State>,
        cluster: &'a EtcdCluster,
        observed: &'a Observed,
        now: Timestamp,
    ) -> Self {
        Self {
            context,
            cluster,
            observed,
            now,
            writer: StatusWriter::new(&context.client, cluster, cluster.status.as_ref()),
            leader_change_reported: false,
            restore_pinned: None,
        }
    }

    /// Records `snapshot` as the one a cluster created from a backup restores, before the
    /// StatefulSet that carries it is applied (the pass's first write).
    async fn pin_restore(&mut self, snapshot: BackupRecord) -> Result<(), Error> {
        let status = EtcdClusterStatus {
            restored_from: Some(snapshot.clone()),
            ..self.cluster.status.clone().unwrap_or_default()
        };
        self.writer.write(&status).await?;
        self.restore_pinned = Some(snapshot);
        Ok(())
    }

    async fn write(&mut self, decision: &Decision, memory: &Memory) -> Result<(), Error> {
        let status = build_status(
            self.cluster,
            &self.observed.view,
            &self.observed.members,
            decision,
            memory.in_flight.as_ref(),
            Pending {
                wipe: &memory.wipe_pending,
                rejoin: &memory.rejoin_pending,
            },
            self.now,
        );
        let recovered = memory.recovered.as_ref().map(|given_up| match given_up {
            Recovered::Members(ordinals) => {
                let names: Vec<String> = ordinals
                    .iter()
                    .map(|ordinal| member_name(&self.cluster.name_any(), *ordinal))
                    .collect();
                names.join(", ")
            }
            Recovered::FromBackup(backup) => format!(
                "every member, restored from EtcdBackup {}'s snapshot completed at {}",
                backup.name, backup.completed_at.0
            ),
        });
        let restored_from = self
            .restore_pinned
            .clone()
            .or_else(|| status.restored_from.clone());
        let status = EtcdClusterStatus {
            restoring_from: memory.restoring_from.clone(),
            restored_from,
            recovery: recovery_record(
                self.observed.recovery.as_ref(),
                self.cluster.status.as_ref().and_then(|s| s.recovery.as_ref()),
                recovered.as_deref(),
                memory.in_flight.as_ref(),
                decision,
                &self.observed.members,
            ),
            repair: repair_record(
                self.observed.repair.as_ref(),
                memory.repair_replaced,
                decision,
                &self.observed.members,
                &memory.wipe_pending,
            ),
            ..status
        };
        self.writer.write(&status).await?;
        self.context.metrics.observe_members_of(
            crate::observe::ENGINE,
            self.cluster,
            status.members.iter().map(|m| m.health.as_str()),
            status
                .members
                .iter()
                .filter(|m| !m.learner)
                .map(|m| m.health.as_str()),
        );
        self.report_leader_change(&status).await;
        Ok(())
    }

    /// A leader change this pass found and stored: an event and the failover metrics, once
    /// though a pass may write status twice.
    async fn report_leader_change(&mut self, status: &EtcdClusterStatus) {
        if self.leader_change_reported {
            return;
        }
        self.leader_change_reported = quorum_core::failover::report_new(
            &self.context.events,
            self.context.state.clients.metrics(),
            crate::observe::ENGINE,
            self.cluster,
            self.cluster
                .status
                .as_ref()
                .and_then(|s| s.last_leader_change.as_ref()),
            status.last_leader_change.as_ref(),
            "etcd's election",
        )
        .await;
    }

    /// A step in flight that this operator cannot read: status says so and no step is taken, so
    /// a recorded membership change is never forgotten (and never repeated on a guess). The
    /// record stays as stored until a person removes it or an operator that can read it resumes
    /// it.
    async fn unreadable_record(&mut self, unreadable: &UnreadableRecord) -> Result<Progress<Reason>, Error> {
        let message = unreadable.wait_message("etcdcluster", &self.cluster.name_any(), "/status/inFlight");
        let decision = Decision::wait(Reason::InFlightUnreadable, message.clone());
        let mut status = build_status(
            self.cluster,
            &self.observed.view,
            &self.observed.members,
            &decision,
            None,
            Pending {
                wipe: &self.observed.wipe_pending,
                rejoin: &self.observed.rejoin_pending,
            },
            self.now,
        );
        status.in_flight = self.cluster.status.as_ref().and_then(|s| s.in_flight.clone());
        self.writer.write(&status).await?;
        self.report_leader_change(&status).await;
        Ok(Progress::waiting(Reason::InFlightUnreadable, message))
    }
}

/// Applies the cluster's objects: the configuration for new or existing members, the scheduled
/// backup, the Services, the disruption budget, and the StatefulSet at the size the step asks
/// for. A cluster restored from a backup that is not ready yet stops the pass (never an empty
/// cluster in place of the one asked for).
async fn apply_objects(
    context: &Context<State>,
    cluster: &EtcdCluster,
    resolver: &MemberResolver,
    observed: &Observed,
    step: Option<&Step>,
    report: &mut Report<'_>,
) -> Result<ControlFlow<Action>, Error> {
    let name = cluster.name_any();
    let applier = &context.applier;
    // A restore in place, taken now or under way: the members form a new cluster from the
    // backup, as a cluster created from it does.
    let restoring_in_place = match step {
        Some(Step::RestoreInPlace { .. }) => cluster.status.as_ref().and_then(|s| s.last_backup.as_ref()),
        _ if matches!(
            observed.in_flight,
            Ok(Some(InFlight::RestoreInPlace | InFlight::RestoreForming))
        ) =>
        {
            observed.restoring_from.as_ref()
        }
        _ => None,
    };
    // A recovery from a survivor, taken now or under way: the survivor alone is the cluster the
    // wiped members may be told of. An empty member told of the old membership would join it
    // under its old id and give the old cluster a quorum again, of empty members.
    let recovering_from = match (step, &observed.in_flight) {
        (Some(Step::Recover { ordinal, .. }), _)
        | (
            _,
            Ok(Some(
                InFlight::Recover { ordinal }
                | InFlight::ForceNewCluster { ordinal }
                | InFlight::EndForceNewCluster { ordinal },
            )),
        ) => Some(*ordinal),
        _ => None,
    };
    if !observed.bootstrapped || restoring_in_place.is_some() {
        let members = bootstrap_members(cluster, resolver, observed.desired);
        let restored_from = restoring_in_place.map(|backup| backup.sha256.as_str());
        applier
            .apply(&build_config_map(
                cluster,
                ClusterState::New,
                &members,
                restored_from,
            )?)
            .await?;
    } else if let Some(survivor) = recovering_from {
        let alone: Vec<(String, String)> = resolver
            .peer_url(survivor)
            .map(|url| (member_name(&name, survivor), url))
            .into_iter()
            .collect();
        applier
            .apply(&build_config_map(cluster, ClusterState::Existing, &alone, None)?)
            .await?;
    } else if let Some(membership) = observed.view.membership.as_deref() {
        let mut initial: Vec<(String, String)> = membership
            .iter()
            .filter_map(|m| {
                let url = m.peer_urls.first()?;
                Some((
                    member_name(&name, resolver.ordinal_of_peer_url(url)?),
                    url.clone(),
                ))
            })
            .collect();
        initial.sort();
        applier
            .apply(&build_config_map(
                cluster,
                ClusterState::Existing,
                &initial,
                None,
            )?)
            .await?;
    }
    quorum_core::backup::controller::ensure_scheduled_backup::<crate::crd::EtcdBackup, _, _>(
        context,
        cluster,
        cluster.spec.backup.as_ref(),
        crate::resources::labels(cluster),
        |_| {},
    )
    .await?;
    applier.apply(&build_peer_service(cluster)?).await?;
    applier.apply(&build_client_service(cluster)?).await?;
    applier.apply(&build_pod_disruption_budget(cluster)?).await?;
    let replicas = match step {
        Some(Step::Bootstrap { members }) => *members,
        Some(Step::StartPod { ordinal }) => ordinal + 1,
        Some(Step::StopPod { ordinal }) => *ordinal,
        _ => observed
            .statefulset_replicas
            .unwrap_or_else(|| observed.recorded_members.max(observed.desired)),
    };
    let pinned = cluster.status.as_ref().and_then(|s| s.restored_from.as_ref());
    let restore = match restore_source(
        context,
        cluster,
        restoring_in_place,
        pinned,
        observed.bootstrapped,
    )
    .await?
    {
        RestoreSource::None => None,
        RestoreSource::Ready { init, snapshot } => {
            // Each member restores when its pod first starts, and the backup may run again
            // meanwhile: every member restores the snapshot recorded first. A cluster formed
            // before this was recorded is left as it is, with no record made up after the fact.
            if restoring_in_place.is_none() && pinned.is_none() && !observed.bootstrapped {
                report.pin_restore(*snapshot).await?;
            }
            Some(*init)
        }
        RestoreSource::NotReady(why) => {
            if restoring_in_place.is_some()
                || (!observed.bootstrapped && observed.statefulset_replicas.is_none())
            {
                let wait = Decision::wait(Reason::RestoreSourceNotReady, why.clone());
                context
                    .events
                    .publish(
                        cluster,
                        Severity::Warning,
                        Reason::RestoreSourceNotReady.as_str(),
                        "Restore",
                        why,
                    )
                    .await;
                let memory = Memory::of(observed, observed.in_flight.clone().ok().flatten());
                report.write(&wait, &memory).await?;
                return Ok(ControlFlow::Break(Action::requeue(Duration::from_secs(10))));
            }
            None
        }
    };
    applier
        .apply(&build_statefulset(
            cluster,
            replicas as i32,
            &context.state.settings.members.cluster_domain,
            restore.as_ref(),
            observed
                .in_flight
                .as_ref()
                .is_ok_and(|step| step.as_ref().is_some_and(InFlight::forces_new_cluster)),
        )?)
        .await?;
    Ok(ControlFlow::Continue(()))
}

/// Records the step in status when it changes membership or disrupts a member (a crash from
/// then on resumes it, never repeats it blindly), takes it, and says where that left the
/// cluster. A failed step is reported, then returned as the error: the membership is as it was,
/// and the runner retries with backoff.
async fn act(
    context: &Context<State>,
    cluster: &EtcdCluster,
    resolver: &MemberResolver,
    observed: &Observed,
    step: &Step,
    memory: &mut Memory,
    report: &mut Report<'_>,
) -> Result<Progress<Reason>, Error> {
    let decision = Decision::Act(step.clone());
    if step.in_flight().is_some() {
        memory.record(step, cluster.status.as_ref().and_then(|s| s.last_backup.as_ref()));
        report.write(&decision, memory).await?;
    }
    match take(context, cluster, resolver, observed, step).await {
        Ok(StepOutcome::Done) => {
            memory.remember(step, observed.repair.as_ref());
            Ok(Progress::Acted {
                reason: step_reason(step),
                message: describe(step),
            })
        }
        Ok(StepOutcome::NotYet(why)) => {
            tracing::info!(cluster = %observed.key, ?step, %why, "etcd declined the step for now");
            Ok(Progress::Waiting {
                reason: step_reason(step),
                message: format!(
                    "{}: etcd declined it for now, asked again shortly: {why}",
                    describe(step)
                ),
            })
        }
        Err(error) => {
            let failed = Progress::Failed {
                reason: Reason::StepFailed,
                message: format!("{}: {error}", describe(step)),
            };
            publish(&context.events, cluster, &failed).await;
            let failed = Decision::wait(
                Reason::StepFailed,
                format!("{} failed; nothing was changed: {error}", describe(step)),
            );
            report.write(&failed, memory).await?;
            Err(error)
        }
    }
}

/// An even member count tolerates no more failures than one member fewer: said on every pass
/// while the spec asks for it.
async fn warn_on_even_member_count(context: &Context<State>, cluster: &EtcdCluster) {
    if cluster.spec.replicas % 2 != 0 {
        return;
    }
    context
        .events
        .publish(
            cluster,
            Severity::Warning,
            Reason::EvenMemberCount.as_str(),
            "Validate",
            format!(
                "{} members tolerate as many failures as {}; an odd count is recommended",
                cluster.spec.replicas,
                cluster.spec.replicas - 1
            ),
        )
        .await;
}

/// Takes one step: Kubernetes steps here, etcd's membership steps through [`execute`].
async fn take(
    context: &Context<State>,
    cluster: &EtcdCluster,
    resolver: &MemberResolver,
    observed: &Observed,
    step: &Step,
) -> Result<StepOutcome, Error> {
    let (key, view) = (observed.key.as_str(), &observed.view);
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    match step {
        // Applied with the StatefulSet above.
        Step::Bootstrap { .. }
        | Step::StartPod { .. }
        | Step::StopPod { .. }
        | Step::ClearInFlight
        | Step::KeepJoinedReplacement { .. } => Ok(StepOutcome::Done),
        Step::Upgrade { ordinal } | Step::RestartMember { ordinal } => {
            // Only the pod observed on an older template: one created again since is left to
            // the next pass.
            let Some(uid) = observed.templates.outdated_pod(*ordinal) else {
                return Ok(StepOutcome::NotYet(format!(
                    "member {ordinal}'s pod is not on an older template the StatefulSet controller has reported yet"
                )));
            };
            restart_pod(&context.client, &namespace, &member_name(&name, *ordinal), uid).await?;
            Ok(StepOutcome::Done)
        }
        Step::WipeMember { ordinal, pod_uid } => {
            let pod = member_name(&name, *ordinal);
            quorum_core::wipe::wipe_member(&context.client, &namespace, &pod, pod_uid.clone())
                .await
                .map_err(Error::api(format!("deleting {pod}")))?;
            Ok(StepOutcome::Done)
        }
        Step::Recover { lost, .. } => {
            wipe(context, (&namespace, &name), lost.iter().copied()).await?;
            Ok(StepOutcome::Done)
        }
        // Recorded; the template that carries the restore was applied above.
        Step::RestoreInPlace { .. } => Ok(StepOutcome::Done),
        Step::WipeForRestore { members } => {
            wipe(context, (&namespace, &name), 0..*members).await?;
            Ok(StepOutcome::Done)
        }
        // The template is applied without the flag from the next pass on.
        Step::EndForceNewCluster { .. } => Ok(StepOutcome::Done),
        admin_step => execute(
            &context.state.clients,
            key,
            resolver,
            view,
            admin_step,
            in_flight_for(cluster, Timestamp::now()),
        )
        .await
        .map_err(|source| Error::Step {
            step: describe(admin_step),
            source,
        }),
    }
}

/// Deletes the pods and volumes of members `ordinals` of cluster `(namespace, name)`, in turn,
/// so each starts again empty.
async fn wipe(
    context: &Context<State>,
    (namespace, name): (&str, &str),
    ordinals: impl IntoIterator<Item = usize>,
) -> Result<(), Error> {
    for ordinal in ordinals {
        let pod = member_name(name, ordinal);
        quorum_core::wipe::wipe_member(&context.client, namespace, &pod, None)
            .await
            .map_err(Error::api(format!("deleting {pod}")))?;
    }
    Ok(())
}

/// The material to reach members serving clients over TLS: `ca.crt`, `tls.crt` and `tls.key`
/// of `spec.tls.clientSecretName` (the certificate is presented as the operator's client
/// identity, so it must allow client authentication). `None` when clients use plain HTTP.
async fn client_tls(context: &Context<State>, cluster: &EtcdCluster) -> Result<Option<TlsMaterial>, Error> {
    let Some(secret_name) = cluster
        .spec
        .tls
        .as_ref()
        .and_then(|t| t.client_secret_name.as_ref())
    else {
        return Ok(None);
    };
    let namespace = cluster.namespace().unwrap_or_default();
    // The operator does not fall back to plain HTTP.
    let mut secret = needed_secret(context, &namespace, secret_name).await?;
    Ok(Some(TlsMaterial {
        ca_pem: secret.bytes("ca.crt")?,
        cert_pem: secret.bytes("tls.crt")?,
        key_pem: secret.bytes("tls.key")?,
    }))
}

/// The member pods.
async fn member_pods(context: &Context<State>, cluster: &EtcdCluster) -> Result<Vec<Pod>, Error> {
    let listed = context
        .pods(
            &cluster.namespace().unwrap_or_default(),
            &crate::resources::member_selector(cluster),
        )
        .await
        .map_err(Error::api("reading member pods"))?;
    Ok(listed.into_iter().map(Arc::unwrap_or_clone).collect())
}

/// The member pods of cluster `name` that are not terminating, with their ordinals.
fn live_members<'a>(name: &'a str, pods: &'a [Pod]) -> impl Iterator<Item = (usize, &'a Pod)> + 'a {
    pods.iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter_map(move |pod| Some((crate::resolver::ordinal_of(name, &pod.name_any())?, pod)))
}

/// The version label of each member pod that exists and is not terminating, by ordinal.
fn pod_versions(cluster: &EtcdCluster, pods: &[Pod]) -> std::collections::BTreeMap<usize, String> {
    let name = cluster.name_any();
    live_members(&name, pods)
        .filter_map(|(ordinal, pod)| {
            Some((
                ordinal,
                pod.labels().get(crate::resources::VERSION_LABEL)?.clone(),
            ))
        })
        .collect()
}

/// Where a cluster restored from a backup gets its data.
enum RestoreSource {
    /// Not a restored cluster.
    None,
    /// The init container's settings, and the snapshot it restores.
    Ready {
        init: Box<RestoreInit>,
        snapshot: Box<BackupRecord>,
    },
    /// The named backup has no stored snapshot (yet), or does not exist.
    NotReady(String),
}

/// Where the members get their data: `in_place`, the snapshot a restore in place uses, or else
/// the snapshot of the backup `spec.restoreFrom` names that the cluster recorded (`pinned`), or,
/// before the cluster formed, that backup's newest. The snapshot's backup resource says where
/// it is stored and with which credentials.
///
/// A cluster that formed from `restoreFrom` with no snapshot recorded (under a release that
/// recorded none) restores nothing more: its members hold their data, a member added later
/// joins from its peers, and following the backup's newest snapshot would roll every member
/// onto another restore at each of the backup's runs.
async fn restore_source(
    context: &Context<State>,
    cluster: &EtcdCluster,
    in_place: Option<&BackupRecord>,
    pinned: Option<&BackupRecord>,
    bootstrapped: bool,
) -> Result<RestoreSource, Error> {
    let backup_name = match (in_place, pinned, &cluster.spec.restore_from) {
        (Some(snapshot), _, _) => &snapshot.name,
        (None, None, Some(_)) if bootstrapped => return Ok(RestoreSource::None),
        (None, _, Some(source)) => &source.backup_name,
        (None, _, None) => return Ok(RestoreSource::None),
    };
    let backups: Api<EtcdBackup> =
        Api::namespaced(context.client.clone(), &cluster.namespace().unwrap_or_default());
    let backup = backups
        .get_opt(backup_name)
        .await
        .map_err(Error::api("reading EtcdBackup"))?;
    let Some(backup) = backup else {
        return Ok(RestoreSource::NotReady(format!(
            "EtcdBackup {backup_name} does not exist"
        )));
    };
    let snapshot = in_place
        .or(pinned)
        .cloned()
        .or_else(|| backup.status.as_ref().and_then(|s| s.run.last_snapshot.clone()));
    let Some(snapshot) = snapshot else {
        return Ok(RestoreSource::NotReady(format!(
            "EtcdBackup {backup_name} has no stored snapshot yet"
        )));
    };
    let s3 = backup.spec.backup.destination.s3.as_ref();
    Ok(RestoreSource::Ready {
        init: Box::new(RestoreInit {
            image: context.state.settings.operator_image.clone(),
            fetch: quorum_core::backup::ObjectFetch::of(
                &snapshot.location,
                &snapshot.sha256,
                s3,
                context.state.settings.members.allow_http_backups,
            ),
        }),
        snapshot: Box::new(snapshot),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(in_flight: Option<InFlight>, wipe_pending: Vec<usize>) -> Memory {
        Memory {
            in_flight,
            wipe_pending,
            rejoin_pending: Vec::new(),
            repair_replaced: None,
            recovered: None,
            restoring_from: None,
        }
    }

    fn repair_of(ordinal: usize) -> RepairRequest {
        RepairRequest {
            member: format!("demo-{ordinal}"),
            ordinal: Some(ordinal),
            replaced: None,
        }
    }

    /// A step etcd declined for now is asked again within a second, not at the five seconds
    /// of any other wait.
    #[test]
    fn a_declined_step_is_asked_again_sooner_than_any_other_wait() {
        let promote = Decision::Act(Step::Promote { ordinal: 3, id: 7 });
        let declined = Progress::Waiting {
            reason: Reason::PromotingMember,
            message: "promote member 3: etcd declined it for now".into(),
        };
        let taken = Progress::Acted {
            reason: Reason::PromotingMember,
            message: "promote member 3".into(),
        };
        let waiting = Decision::wait(Reason::LearnerCatchingUp, "member 3 is starting");
        let learner_waits = Progress::Waiting {
            reason: Reason::LearnerCatchingUp,
            message: "member 3 is starting".into(),
        };
        let cases = [
            (&promote, &declined, DECLINED_STEP_RETRY),
            (&promote, &taken, Duration::from_secs(5)),
            (&waiting, &learner_waits, Duration::from_secs(5)),
            (&Decision::Settled, &Progress::Settled, Duration::from_secs(60)),
        ];
        for (decision, progress, expected) in cases {
            assert_eq!(
                usual_interval(decision, progress),
                expected,
                "{decision:?} {progress:?}"
            );
        }
        assert!(DECLINED_STEP_RETRY < Duration::from_secs(5));
    }

    /// The wipe of the lost members moves a recovery to its forcing phase and leaves them to be
    /// added back, never wiped again (a replacement among them included: the recovery emptied
    /// its volume); the end of the last phase records them as given up, and each leaves the list
    /// once it is in the membership again.
    #[test]
    fn a_recovery_moves_phase_by_phase_and_ends_naming_the_members_given_up() {
        let mut taken = memory(Some(InFlight::Recover { ordinal: 0 }), vec![2]);
        taken.remember(
            &Step::Recover {
                ordinal: 0,
                lost: vec![1, 2],
            },
            None,
        );
        assert_eq!(taken.in_flight, Some(InFlight::ForceNewCluster { ordinal: 0 }));
        assert_eq!(
            (taken.wipe_pending.clone(), taken.rejoin_pending.clone()),
            (Vec::new(), vec![1, 2])
        );
        taken.remember(&Step::RestartMember { ordinal: 0 }, None);
        assert_eq!(taken.in_flight, Some(InFlight::ForceNewCluster { ordinal: 0 }));
        taken.in_flight = Some(InFlight::EndForceNewCluster { ordinal: 0 });
        taken.remember(&Step::ClearInFlight, None);
        assert_eq!(
            (taken.in_flight.clone(), taken.recovered.clone()),
            (None, Some(Recovered::Members(vec![1, 2])))
        );
        taken.in_flight = Some(InFlight::AddLearner { ordinal: 1 });
        taken.remember(&Step::ClearInFlight, None);
        assert_eq!((taken.in_flight, taken.rejoin_pending), (None, vec![2]));
    }

    /// A restore in place records the newest backup with the step, keeps it while the members
    /// form, and ends naming it, with the record cleared.
    #[test]
    fn a_restore_in_place_records_its_backup_and_ends_naming_it() {
        let backup = BackupRecord {
            name: "nightly".into(),
            location: "s3://b/k".into(),
            completed_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
            size_bytes: 1,
            sha256: "ab".into(),
        };
        // A replacement left pending when everything was lost: its member is wiped anyway.
        let mut taken = memory(None, vec![2]);
        let step = Step::RestoreInPlace {
            members: 3,
            backup: "EtcdBackup nightly".into(),
        };
        taken.record(&step, Some(&backup));
        assert_eq!(
            (
                taken.in_flight.clone(),
                taken.restoring_from.clone(),
                taken.wipe_pending.clone()
            ),
            (Some(InFlight::RestoreInPlace), Some(backup.clone()), Vec::new())
        );
        taken.remember(&step, None);
        let wipe = Step::WipeForRestore { members: 3 };
        taken.record(&wipe, Some(&backup));
        taken.remember(&wipe, None);
        assert_eq!(taken.in_flight, Some(InFlight::RestoreForming));
        taken.remember(
            &Step::WipeMember {
                ordinal: 1,
                pod_uid: None,
            },
            None,
        );
        assert_eq!(taken.restoring_from, Some(backup.clone()));
        taken.remember(&Step::ClearInFlight, None);
        assert_eq!(
            (taken.in_flight, taken.restoring_from, taken.recovered),
            (None, None, Some(Recovered::FromBackup(backup)))
        );
    }

    #[test]
    fn a_replaced_member_is_wiped_whether_its_removal_was_seen_now_or_after_a_crash() {
        let mut taken = memory(None, Vec::new());
        taken.remember(&Step::Replace { ordinal: 2, id: 102 }, None);
        assert_eq!(taken.wipe_pending, [2]);
        taken.in_flight = Some(InFlight::Replace { ordinal: 2, id: 102 });
        taken.remember(&Step::ClearInFlight, None);
        assert_eq!((taken.in_flight, taken.wipe_pending), (None, vec![2]));

        // The operator stopped after etcd removed the member and before status recorded it:
        // the resumed step finds it gone, and its volume is still wiped.
        let mut resumed = memory(Some(InFlight::Replace { ordinal: 2, id: 102 }), Vec::new());
        resumed.remember(&Step::ClearInFlight, None);
        assert_eq!((resumed.in_flight, resumed.wipe_pending), (None, vec![2]));
    }

    #[test]
    fn a_repair_is_recorded_as_taken_once_its_member_is_removed() {
        let mut other = memory(None, Vec::new());
        other.remember(&Step::Replace { ordinal: 2, id: 102 }, Some(&repair_of(1)));
        assert_eq!(other.repair_replaced, None);

        let mut resumed = memory(Some(InFlight::Replace { ordinal: 1, id: 101 }), Vec::new());
        resumed.remember(&Step::ClearInFlight, Some(&repair_of(1)));
        assert_eq!(resumed.repair_replaced, Some(101));

        let mut done = memory(None, vec![1]);
        done.remember(
            &Step::WipeMember {
                ordinal: 1,
                pod_uid: None,
            },
            Some(&repair_of(1)),
        );
        assert_eq!((done.wipe_pending, done.repair_replaced), (Vec::new(), None));
    }
}
