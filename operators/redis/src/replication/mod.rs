//! Replication mode: one primary, its replicas, and the Sentinels that fail over.
//!
//! One pass: observe every node and Sentinel ([`observe`]), decide one step
//! ([`decide::decide`], pure), size the StatefulSets, take the step ([`execute`]), label the
//! pods from what is true now, and report.

pub mod decide;
pub mod handover;

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{api::apps::v1::StatefulSet, apimachinery::pkg::apis::meta::v1::Time};
use quorum_core::{
    availability::{
        health::{Health, classify},
        retry::{CallError, Idempotency},
    },
    conditions::{ConditionType, ConditionUpdate},
    pass::publish,
    repair::{RepairRecord, WipedPod},
    role_labels::LabelledPods,
    rollout::{
        Templates, lacks_claims_of, needs_take_over, pending_members, ready_members, recreate_keeping_pods,
        restart_pod, rolled_out, take_over_updates, unready_members, without_claim,
    },
    status::StatusWriter,
    wakeups::ObjectKey,
};

use crate::{
    address::Kind,
    admin::{
        AdminError, Role,
        sentinel::{SentinelAdmin, SentinelSetting},
    },
    crd::{FailoverRecord, NodeStatus, RedisCluster, RedisClusterStatus, SentinelStatus},
    pass::{Error, Pass, Progress, replicas_of, set_conditions},
    resources::{
        RoleLabel, SENTINEL_PRIMARY_NAME, build_sentinel_statefulset, build_statefulset, node_name,
        ordinal_of, sentinel_name, sentinel_statefulset_name, statefulset_name,
    },
};

use handover::Handover;

use decide::{
    Decision, Facts, NodeFact, PrimaryFinding, Reason, SentinelFact, SentinelSettings, SentinelView, Step,
    decide, find_primary, primary_on_request_after, serving_primary_given,
};

/// One reconcile pass in replication mode.
pub async fn pass(pass: &Pass<'_>) -> Result<Progress, Error> {
    let Observed {
        facts,
        data_statefulset,
        sentinel_statefulset,
        mut data_pods,
    } = observe(pass).await?;

    let decision = decide(&facts);
    let finding = find_primary(&facts);
    let primary = serving_primary_given(&facts, &finding);
    tracing::info!(cluster = %pass.key, ?decision, ?primary, "decided");

    size_statefulsets(
        pass,
        &facts,
        [data_statefulset.as_ref(), sentinel_statefulset.as_ref()],
        &decision,
    )
    .await?;
    // One writer for the pass: a wipe recorded before it is taken and the report after it
    // write in turn, each at the version the one before left.
    let mut writer = pass.status_writer();
    let taken = take_step(pass, &mut writer, &facts, &decision).await?;

    // Labels from what is true now: only the agreed (or, while the Sentinels cannot agree, the
    // last agreed) primary takes writes; after a handover in this pass, the node that has the
    // role now.
    let primary = taken.handed_over_to.or(primary);
    pass.set_role_labels(&mut data_pods, &role_labels(&facts, primary))
        .await?;

    report(pass, &mut writer, &facts, &decision, finding, primary, &taken).await?;
    match taken.failure {
        Some(error) => Err(error),
        None => Ok(taken.progress),
    }
}

/// What one pass observed: the facts `decide` reads, and the objects the pass acts on.
struct Observed {
    facts: Facts,
    data_statefulset: Option<StatefulSet>,
    sentinel_statefulset: Option<StatefulSet>,
    data_pods: LabelledPods,
}

/// The StatefulSets, the pods, every node and Sentinel, and what status recorded.
async fn observe(pass: &Pass<'_>) -> Result<Observed, Error> {
    let name = pass.name();
    let spec = &pass.cluster.spec;
    let sentinel_spec = spec.sentinel_settings();
    let data_statefulset = pass.statefulset(&statefulset_name(&name)).await?;
    let node_pods = replicas_of(data_statefulset.as_ref());
    let sentinel_statefulset = pass.statefulset(&sentinel_statefulset_name(&name)).await?;
    let sentinel_pods = replicas_of(sentinel_statefulset.as_ref());
    let data_pods = pass.data_pods().await?;
    let sentinel_pods_listed = pass.sentinel_pods().await?;

    let nodes = observe_nodes(pass, node_pods.unwrap_or(0)).await;
    let sentinels = observe_sentinels(pass, sentinel_pods.unwrap_or(0)).await;
    follow_sentinel_events(pass, sentinel_pods.unwrap_or(0)).await;
    let status = pass.cluster.status.as_ref();
    let facts = Facts {
        cluster: name.clone(),
        desired_nodes: spec.node_count(),
        node_pods,
        desired_sentinels: sentinel_spec.replicas.max(1) as usize,
        sentinel_pods,
        nodes,
        sentinels,
        recorded_primary: status
            .and_then(|s| s.primary.as_deref())
            .and_then(|p| ordinal_of(&name, p)),
        recorded_primary_address: status
            .and_then(|s| s.primary_address.as_deref())
            .and_then(|address| address.parse().ok()),
        settings: SentinelSettings {
            quorum: sentinel_spec.effective_quorum(),
            down_after: Duration::from_millis(sentinel_spec.down_after_millis.max(0) as u64),
            failover_timeout: Duration::from_millis(sentinel_spec.failover_timeout_millis.max(0) as u64),
        },
        write_fence: crate::resources::write_fence(spec),
        templates: Templates::observe(data_statefulset.as_ref(), data_pods.pods(), |pod| {
            ordinal_of(&name, pod)
        }),
        sentinels_rolled: sentinel_statefulset.as_ref().is_some_and(rolled_out),
        sentinels_without_volume: without_claim(
            &sentinel_pods_listed,
            quorum_core::pod::DATA_CLAIM,
            crate::resources::ordinal_of_pod,
        ),
        sentinels_ready: ready_members(&sentinel_pods_listed, crate::resources::ordinal_of_pod),
        repair: pass
            .repair(data_pods.pods(), |member| ordinal_of(&name, member))
            .await?,
        recovery: quorum_core::recovery::request(
            pass.cluster,
            status.and_then(|status| status.recovery.as_ref()),
            |member| ordinal_of(&name, member),
        ),
        pending: pending_members(data_pods.pods(), |pod| ordinal_of(&name, pod)),
        unready: unready_members(data_pods.pods(), |pod| ordinal_of(&name, pod)),
        held_back: quorum_core::pod_failures::held_back(
            data_pods.pods(),
            crate::resources::SERVER_CONTAINER,
            |pod| ordinal_of(&name, pod),
        ),
        primary_on_request: status
            .and_then(|s| s.primary_on_request.as_deref())
            .and_then(|node| ordinal_of(&name, node)),
    };
    Ok(Observed {
        facts,
        data_statefulset,
        sentinel_statefulset,
        data_pods,
    })
}

/// Where a repair asked for stands, for `status.repair`; `None` once the request is gone.
/// `wiped_now` is the pod this pass wiped for it. The node is back once it follows the primary
/// with its link up and no sync under way.
fn repair_record(facts: &Facts, wiped_now: Option<&WipedPod>, progress: &Progress) -> Option<RepairRecord> {
    let repair = facts.repair.as_ref()?;
    let back = facts.nodes.iter().any(|node| {
        Some(node.ordinal) == repair.ordinal
            && node
                .answered()
                .is_some_and(|info| info.role == Role::Replica && info.link_up && !info.sync_in_progress)
    });
    let waiting = progress.message().unwrap_or("waiting for the next pass");
    Some(repair.record(wiped_now, waiting, back))
}

/// Applies both StatefulSets at the size the step asks for (the size they have otherwise). A
/// data StatefulSet made before the operator rolled pods itself is taken over first (no pod
/// restarts: the template is unchanged). A Sentinels' StatefulSet made before Sentinels had
/// volumes is deleted with its pods left running, and made again by a later pass, once it is
/// gone: the new one adopts the Sentinels, which the decision then moves onto volumes one at a
/// time (`MoveSentinelOntoVolume`).
async fn size_statefulsets(
    pass: &Pass<'_>,
    facts: &Facts,
    [data_statefulset, sentinel_statefulset]: [Option<&StatefulSet>; 2],
    decision: &Decision,
) -> Result<(), Error> {
    if let Some(data_statefulset) = data_statefulset.filter(|statefulset| needs_take_over(statefulset)) {
        take_over_updates(&pass.context.client, data_statefulset).await?;
    }
    let (node_replicas, sentinel_replicas) = match decision {
        Decision::Act(Step::ScaleNodes { replicas }) => (*replicas, facts.sentinel_pods.unwrap_or(0)),
        Decision::Act(Step::ScaleSentinels { replicas }) => (facts.node_pods.unwrap_or(0), *replicas),
        _ => (
            facts.node_pods.unwrap_or(facts.desired_nodes),
            facts.sentinel_pods.unwrap_or(facts.desired_sentinels),
        ),
    };
    pass.apply(&build_statefulset(pass.cluster, node_replicas as i32)?)
        .await?;
    let sentinels = build_sentinel_statefulset(pass.cluster, sentinel_replicas as i32)?;
    match sentinel_statefulset {
        Some(current) if current.metadata.deletion_timestamp.is_some() => {}
        Some(current) if lacks_claims_of(current, &sentinels) => {
            tracing::info!(cluster = %pass.key, "the Sentinels' StatefulSet made again, its pods kept, to give each Sentinel a volume");
            recreate_keeping_pods(&pass.context.client, current).await?;
        }
        _ => pass.apply(&sentinels).await?,
    }
    Ok(())
}

/// Where the pass left the cluster after its step.
struct Taken {
    progress: Progress,
    /// The step's failure, returned once the pass has reported it.
    failure: Option<Error>,
    /// The node a handover in this pass made the primary.
    handed_over_to: Option<usize>,
    /// The pod wiped in this pass for a repair asked for.
    wiped_for_repair: Option<WipedPod>,
}

/// Takes the decided step, if any, and what follows from it in Kubernetes: the shrunken
/// StatefulSet after a node leaves, the pod deleted for a restart (only the one observed).
async fn take_step(
    pass: &Pass<'_>,
    writer: &mut StatusWriter<'_, RedisCluster, RedisClusterStatus>,
    facts: &Facts,
    decision: &Decision,
) -> Result<Taken, Error> {
    let name = pass.name();
    let progress = match decision {
        Decision::Settled => Progress::Settled,
        Decision::Wait(wait) => Progress::from(wait.clone()),
        Decision::Act(step) => Progress::Acted {
            reason: step_reason(step),
            message: describe(&name, step),
        },
    };
    let Decision::Act(step) = decision else {
        return Ok(Taken {
            progress,
            failure: None,
            handed_over_to: None,
            wiped_for_repair: None,
        });
    };
    let started = std::time::Instant::now();
    let moved = match execute(pass, facts, step).await {
        Ok(moved) => moved,
        Err(source) => {
            return Ok(Taken {
                progress: Progress::Failed {
                    reason: Reason::StepFailed,
                    message: format!(
                        "{} failed; nothing else was changed: {source}",
                        describe(&name, step)
                    ),
                },
                failure: Some(Error::Step {
                    step: describe(&name, step),
                    source,
                }),
                handed_over_to: None,
                wiped_for_repair: None,
            });
        }
    };
    let mut handed_over_to = None;
    let mut wiped_for_repair = None;
    match step {
        Step::Promote { .. } => handed_over_to = moved,
        Step::HandOver { .. } => {
            handed_over_to = moved;
            pass.context.state.clients.metrics().observe_primary_change(
                crate::clients::ENGINE,
                "Switchover",
                started.elapsed().as_secs_f64(),
            );
        }
        Step::RemoveNode { ordinal } => {
            pass.apply(&build_statefulset(pass.cluster, *ordinal as i32)?)
                .await?;
        }
        Step::MoveSentinelOntoVolume { sentinel, pod_uid } => {
            restart_pod(
                &pass.context.client,
                &pass.namespace(),
                &sentinel_name(&name, *sentinel),
                pod_uid,
            )
            .await?;
        }
        Step::RestartNode { ordinal } => {
            if let Some(uid) = facts.templates.outdated_pod(*ordinal) {
                restart_pod(
                    &pass.context.client,
                    &pass.namespace(),
                    &node_name(&name, *ordinal),
                    uid,
                )
                .await?;
            }
        }
        Step::WipeNode { ordinal, pod_uid } => {
            // Recorded before it is taken, with the claim the pod stands on: one request wipes
            // one pod, never a second after a restart of the operator, and a pod replaced on
            // the same claim before the wipe reached it is wiped in its turn.
            let wiping = facts.repair.as_ref().map(|repair| repair.wiping(pod_uid));
            if let Some(record) = repair_record(facts, wiping.as_ref(), &progress) {
                let mut status = pass.cluster.status.clone().unwrap_or_default();
                status.repair = Some(record);
                writer.write(&status).await?;
            }
            pass.wipe_data_pod(&node_name(&name, *ordinal), pod_uid).await?;
            wiped_for_repair = wiping;
        }
        _ => {}
    }
    Ok(Taken {
        progress,
        failure: None,
        handed_over_to,
        wiped_for_repair,
    })
}

/// Publishes the pass's event, records a primary the Sentinels changed (an event, the failover
/// metric, `lastFailover`) and writes status.
async fn report(
    pass: &Pass<'_>,
    writer: &mut StatusWriter<'_, RedisCluster, RedisClusterStatus>,
    facts: &Facts,
    decision: &Decision,
    finding: PrimaryFinding,
    primary: Option<usize>,
    taken: &Taken,
) -> Result<(), Error> {
    let name = pass.name();
    publish(&pass.context.events, pass.cluster, &taken.progress).await;
    let mut status = build_status(pass, facts, primary, &taken.progress);
    status.repair = repair_record(facts, taken.wiped_for_repair.as_ref(), &taken.progress);
    status.recovery = recovery_record(&name, facts, decision, primary);
    let promoted = match decision {
        Decision::Act(Step::Promote { to, .. }) if taken.handed_over_to == Some(*to) => Some(*to),
        _ => None,
    };
    status.primary_on_request =
        primary_on_request_after(facts, promoted).map(|ordinal| node_name(&name, ordinal));
    let recorded_primary = facts.recorded_primary;
    status.primary_address = decide::primary_address_after(facts, &finding, primary, taken.handed_over_to)
        .map(|address| address.to_string());
    if let (Some(from), Some(to)) = (recorded_primary, primary)
        && from != to
        && taken.handed_over_to.is_none()
    {
        let from_name = node_name(&name, from);
        let lost_at = status
            .nodes
            .iter()
            .find(|node| node.name == from_name)
            .and_then(|node| node.failing_since.clone());
        status.last_failover = Some(FailoverRecord::new(
            from_name,
            node_name(&name, to),
            lost_at,
            None,
            pass.now,
        ));
    }
    writer.write(&status).await?;
    pass.observe_members(&status);
    quorum_core::failover::report_new(
        &pass.context.events,
        pass.context.state.clients.metrics(),
        crate::clients::ENGINE,
        pass.cluster,
        pass.cluster
            .status
            .as_ref()
            .and_then(|s| s.last_failover.as_ref()),
        status.last_failover.as_ref(),
        "the Sentinels",
    )
    .await;
    Ok(())
}

/// Asks every node for `INFO replication`. A node the operator cannot reach is `Unhealthy`
/// only when a majority of the others are its replicas and report their link to it down;
/// otherwise `Unknown`.
async fn observe_nodes(pass: &Pass<'_>, count: usize) -> Vec<NodeFact> {
    let clients = &pass.context.state.clients;
    let asks = (0..count).map(|ordinal| async move {
        let address = pass.addresses.resolve(Kind::Node, ordinal).await;
        let answer = clients
            .node(
                &pass.key,
                &pass.addresses,
                ordinal,
                "replication_info",
                Idempotency::Read,
                |admin| async move {
                    // The fence and key count are read beside the role; a server that will not
                    // tell (a renamed CONFIG, or still loading its data) is still healthy, what
                    // it withheld just unknown.
                    Ok((
                        admin.replication_info().await?,
                        admin.write_fence().await.ok(),
                        admin.key_count().await.ok(),
                    ))
                },
            )
            .await;
        (ordinal, address, answer)
    });
    let answers = futures::future::join_all(asks).await;
    let infos: BTreeMap<usize, _> = answers
        .iter()
        .filter_map(|(ordinal, _, answer)| answer.as_ref().ok().map(|(info, ..)| (*ordinal, info.clone())))
        .collect();
    answers
        .into_iter()
        .map(|(ordinal, address, answer)| {
            let (health, replication, write_fence, keys) = match answer {
                Ok((info, fence, keys)) => (Health::Healthy, Some(info), fence, keys),
                Err(error) => {
                    // Testimony: the replicas that follow this node's address.
                    let testimony: Vec<bool> = address
                        .map(|address| {
                            infos
                                .values()
                                .filter(|info| info.follows(address))
                                .map(|info| info.link_up)
                                .collect()
                        })
                        .unwrap_or_default();
                    (
                        classify(Err(error.to_string()), &testimony, count.saturating_sub(1)),
                        None,
                        None,
                        None,
                    )
                }
            };
            NodeFact {
                ordinal,
                address,
                health,
                replication,
                write_fence,
                keys,
            }
        })
        .collect()
}

/// Keeps a subscription to every Sentinel's primary switches, so a failover wakes the next pass
/// at once ([`crate::sentinel_events`]).
async fn follow_sentinel_events(pass: &Pass<'_>, count: usize) {
    let clients = &pass.context.state.clients;
    let addresses =
        (0..count).map(|ordinal| clients.dial_address(&pass.key, &pass.addresses, Kind::Sentinel, ordinal));
    let sentinels = futures::future::join_all(addresses)
        .await
        .into_iter()
        .flatten()
        .collect();
    pass.context.state.sentinel_events.follow(
        ObjectKey::new(pass.namespace(), pass.name()),
        sentinels,
        clients.credentials(&pass.key),
    );
}

/// Asks every Sentinel what it monitors.
async fn observe_sentinels(pass: &Pass<'_>, count: usize) -> Vec<SentinelFact> {
    let clients = &pass.context.state.clients;
    let asks = (0..count).map(|ordinal| async move {
        let answer = clients
            .sentinel(
                &pass.key,
                &pass.addresses,
                ordinal,
                "sentinel_master",
                Idempotency::Read,
                |admin| async move {
                    match admin.primary(SENTINEL_PRIMARY_NAME).await {
                        Ok(primary) => Ok(Some(primary)),
                        // "No such master with that name": a Sentinel that monitors nothing yet.
                        Err(AdminError::Refused { message, .. }) if message.contains("No such master") => {
                            Ok(None)
                        }
                        Err(error) => Err(error),
                    }
                },
            )
            .await;
        match answer {
            Ok(view) => SentinelFact {
                ordinal,
                health: Health::Healthy,
                view: view.map(|primary| SentinelView {
                    primary: primary.address,
                    quorum: primary.quorum,
                    down_after: primary.down_after,
                    failover_timeout: primary.failover_timeout,
                    failover_in_progress: primary.flags.failover_in_progress,
                    config_epoch: primary.config_epoch,
                    known_replicas: primary.replicas,
                    known_sentinels: primary.other_sentinels,
                }),
            },
            Err(error) => SentinelFact {
                ordinal,
                health: Health::Unknown(format!("unreachable from the operator: {error}")),
                view: None,
            },
        }
    });
    futures::future::join_all(asks).await
}

/// Takes one step; returns the new primary when the step moved the role.
async fn execute(
    pass: &Pass<'_>,
    facts: &Facts,
    step: &Step,
) -> Result<Option<usize>, crate::clients::CallFailure> {
    let clients = &pass.context.state.clients;
    let (key, addresses) = (&pass.key, &pass.addresses);
    let taken = match step {
        Step::ScaleNodes { .. } | Step::ScaleSentinels { .. } | Step::RemoveNode { .. } => Ok(()),
        Step::Monitor { sentinel, primary } => {
            monitor(
                pass,
                *sentinel,
                *primary,
                facts.settings,
                false,
                "sentinel_monitor",
            )
            .await
        }
        Step::RepointSentinel { sentinel, primary } => {
            monitor(
                pass,
                *sentinel,
                *primary,
                facts.settings,
                true,
                "sentinel_repoint",
            )
            .await
        }
        Step::Configure { sentinel } => {
            let settings = facts.settings;
            clients
                .sentinel(
                    key,
                    addresses,
                    *sentinel,
                    "sentinel_set",
                    Idempotency::Mutation,
                    |admin| async move {
                        admin
                            .set(SENTINEL_PRIMARY_NAME, &SentinelSetting::Quorum(settings.quorum))
                            .await?;
                        set_timeouts(&admin, settings).await
                    },
                )
                .await
        }
        Step::FenceWrites { node, fence } => {
            let fence = *fence;
            clients
                .node(
                    key,
                    addresses,
                    *node,
                    "set_write_fence",
                    Idempotency::Mutation,
                    |admin| async move { admin.set_write_fence(fence).await },
                )
                .await
        }
        Step::Replicate { node, primary } => {
            let primary = *primary;
            clients
                .node(
                    key,
                    addresses,
                    *node,
                    "replicaof",
                    Idempotency::Mutation,
                    |admin| async move {
                        // The sync that follows is watched by later passes (`ReplicaSyncing`),
                        // not waited for here.
                        admin.ensure_replica_of(primary).await
                    },
                )
                .await
        }
        Step::HandOver { primary, sentinel } => {
            let replicas = facts
                .nodes
                .iter()
                .filter(|node| node.ordinal != *primary)
                .filter_map(|node| Some((node.ordinal, node.address?)))
                .collect();
            let Some(primary_address) = facts.address_of(*primary) else {
                return Err(CallError::Failed(AdminError::Unexpected {
                    endpoint: node_name(&pass.name(), *primary),
                    command: "handover",
                    detail: "the primary has no address".into(),
                }));
            };
            let handover = Handover {
                clients,
                cluster: key,
                addresses,
                primary: *primary,
                primary_address,
                replicas,
                sentinel: *sentinel,
            };
            return handover.run().await.map(Some);
        }
        Step::Promote { to, .. } => return promote(pass, facts, *to).await.map(|()| Some(*to)),
        Step::RestartNode { .. } | Step::WipeNode { .. } | Step::MoveSentinelOntoVolume { .. } => Ok(()),
        Step::FailOver { sentinel, .. } => {
            clients
                .sentinel(
                    key,
                    addresses,
                    *sentinel,
                    "sentinel_failover",
                    Idempotency::Mutation,
                    |admin| async move { admin.failover(SENTINEL_PRIMARY_NAME).await },
                )
                .await
        }
        Step::ResetSentinel { sentinel } => {
            clients
                .sentinel(
                    key,
                    addresses,
                    *sentinel,
                    "sentinel_reset",
                    Idempotency::Mutation,
                    |admin| async move { admin.reset(SENTINEL_PRIMARY_NAME).await.map(|_| ()) },
                )
                .await
        }
    };
    taken.map(|()| None)
}

/// Makes node `to` the primary (`REPLICAOF NO ONE`, a no-op on a primary), then tells every
/// Sentinel that answered this pass to forget what it monitored and monitor `to`, so they fail
/// over from it from now on. Each part may be taken again: a step cut off halfway is taken
/// again whole by a later pass.
async fn promote(pass: &Pass<'_>, facts: &Facts, to: usize) -> Result<(), crate::clients::CallFailure> {
    let Some(address) = facts.address_of(to) else {
        return Err(crate::clients::CallFailure::Failed(AdminError::Unexpected {
            endpoint: node_name(&pass.name(), to),
            command: "promote",
            detail: "the node has no address".into(),
        }));
    };
    pass.context
        .state
        .clients
        .node(
            &pass.key,
            &pass.addresses,
            to,
            "promote",
            Idempotency::Mutation,
            |admin| async move { admin.promote().await },
        )
        .await?;
    for sentinel in facts.sentinels.iter().filter(|s| s.health.is_healthy()) {
        monitor(
            pass,
            sentinel.ordinal,
            address,
            facts.settings,
            true,
            "sentinel_repoint",
        )
        .await?;
    }
    Ok(())
}

/// Where a recovery asked for stands at the end of the pass, for `status.recovery`; `None` once
/// the request is gone. It is done once the node it names became the primary in place of the
/// one recorded while it stood (this pass, or as recorded before); until then the record says
/// what the pass decided about it. A request seen while the pass did not wait on a lost primary
/// is for no loss, and expires.
fn recovery_record(
    name: &str,
    facts: &Facts,
    decision: &Decision,
    primary_now: Option<usize>,
) -> Option<quorum_core::recovery::RecoveryRecord> {
    let request = facts.recovery.as_ref()?;
    let took_over_from = facts
        .recorded_primary
        .zip(primary_now)
        .filter(|(before, after)| request.ordinal == Some(*after) && before != after)
        .map(|(before, _)| node_name(name, before));
    let refused = match decision {
        Decision::Wait(wait) if wait.reason == Reason::RecoveryRefused => Some(wait.message.clone()),
        _ => None,
    };
    let taking = match decision {
        Decision::Act(step @ Step::Promote { to, .. }) if request.ordinal == Some(*to) => Some(format!(
            "{} did not complete; it is taken again",
            describe(name, step)
        )),
        _ => None,
    };
    Some(request.outcome(took_over_from, refused, taking))
}

/// Tells a Sentinel to monitor the primary at `primary` with the spec's settings and the
/// password; `forget_first` drops what it monitored before (`SENTINEL REMOVE`: the primary's old
/// address and the replicas it knew there).
async fn monitor(
    pass: &Pass<'_>,
    sentinel: usize,
    primary: std::net::SocketAddr,
    settings: SentinelSettings,
    forget_first: bool,
    operation: &'static str,
) -> Result<(), crate::clients::CallFailure> {
    let clients = &pass.context.state.clients;
    let credentials = clients.credentials(&pass.key);
    clients
        .sentinel(
            &pass.key,
            &pass.addresses,
            sentinel,
            operation,
            Idempotency::Mutation,
            |admin| {
                let credentials = credentials.clone();
                async move {
                    if forget_first {
                        match admin.remove(SENTINEL_PRIMARY_NAME).await {
                            // Removed by an earlier attempt whose MONITOR did not follow.
                            Err(AdminError::Refused { message, .. })
                                if message.contains("No such master") => {}
                            other => other?,
                        }
                    }
                    admin
                        .monitor(SENTINEL_PRIMARY_NAME, primary, settings.quorum)
                        .await?;
                    if let Some(credentials) = credentials {
                        admin
                            .set(SENTINEL_PRIMARY_NAME, &SentinelSetting::Auth(credentials))
                            .await?;
                    }
                    set_timeouts(&admin, settings).await
                }
            },
        )
        .await
}

/// The spec's `down-after` and failover timeout, on the primary a Sentinel monitors.
async fn set_timeouts(admin: &SentinelAdmin, settings: SentinelSettings) -> Result<(), AdminError> {
    admin
        .set(
            SENTINEL_PRIMARY_NAME,
            &SentinelSetting::DownAfter(settings.down_after),
        )
        .await?;
    admin
        .set(
            SENTINEL_PRIMARY_NAME,
            &SentinelSetting::FailoverTimeout(settings.failover_timeout),
        )
        .await
}

/// The role label each data pod should carry: the primary the Sentinels agree on, replicas
/// that follow it with their link up, and no role for the rest.
pub fn role_labels(facts: &Facts, primary: Option<usize>) -> BTreeMap<usize, RoleLabel> {
    let primary_address = primary.and_then(|p| facts.address_of(p));
    facts
        .nodes
        .iter()
        .map(|node| {
            let role = if Some(node.ordinal) == primary {
                RoleLabel::Primary
            } else {
                // The operator cannot vouch for a node it cannot see, and only the agreed
                // primary may carry that label.
                let replicating = node.replication.as_ref().is_some_and(|info| {
                    primary_address.is_some_and(|address| info.follows(address)) && info.link_up
                });
                if replicating {
                    RoleLabel::Replica
                } else {
                    RoleLabel::None
                }
            };
            (node.ordinal, role)
        })
        .collect()
}

fn build_status(
    pass: &Pass<'_>,
    facts: &Facts,
    primary: Option<usize>,
    progress: &Progress,
) -> RedisClusterStatus {
    let name = pass.name();
    let mut status = pass.cluster.status.clone().unwrap_or_default();
    let previous_nodes = std::mem::take(&mut status.nodes);
    let labels = role_labels(facts, primary);
    let address_names: BTreeMap<_, _> = facts
        .nodes
        .iter()
        .filter_map(|n| Some((n.address?, node_name(&name, n.ordinal))))
        .collect();
    status.nodes = facts
        .nodes
        .iter()
        .map(|node| {
            let info = node.replication.as_ref();
            let following = info.filter(|i| i.role == Role::Replica).and_then(|i| {
                let host = i.primary_host.as_deref()?;
                let name = i
                    .primary_address()
                    .and_then(|address| address_names.get(&address));
                Some(name.cloned().unwrap_or_else(|| host.to_string()))
            });
            NodeStatus {
                name: node_name(&name, node.ordinal),
                role: match info.map(|i| i.role) {
                    Some(Role::Primary) => "Primary",
                    Some(Role::Replica) => "Replica",
                    None => "Unknown",
                }
                .into(),
                health: node.health.as_str().into(),
                node_id: None,
                shard: None,
                slots: vec![],
                link: info
                    .filter(|i| i.role == Role::Replica)
                    .map(|i| if i.link_up { "up" } else { "down" }.to_string()),
                following,
                message: node.health.detail().map(str::to_string),
                failing_since: quorum_core::status::failing_since(
                    previous_failing_since(&previous_nodes, &node_name(&name, node.ordinal)),
                    &node.health,
                    pass.now,
                ),
            }
        })
        .collect();
    status.sentinels = facts
        .sentinels
        .iter()
        .map(|sentinel| SentinelStatus {
            name: sentinel_name(&name, sentinel.ordinal),
            health: sentinel.health.as_str().into(),
            primary: sentinel.view.as_ref().map(|v| {
                address_names
                    .get(&v.primary)
                    .cloned()
                    .unwrap_or_else(|| v.primary.to_string())
            }),
        })
        .collect();
    status.primary = primary.map(|p| node_name(&name, p)).or(status.primary);
    status.shards = 0;
    status.rebalance = None;
    let replicas_ready = labels.values().filter(|l| **l == RoleLabel::Replica).count();
    let primary_ready = primary.is_some_and(|p| labels.get(&p) == Some(&RoleLabel::Primary))
        && facts
            .nodes
            .iter()
            .any(|n| Some(n.ordinal) == primary && n.health.is_healthy());
    status.ready_nodes = (replicas_ready + usize::from(primary_ready)) as i32;
    let primary_address = primary.and_then(|p| facts.address_of(p));
    let watching = facts
        .sentinels
        .iter()
        .filter(|s| {
            s.view
                .as_ref()
                .is_some_and(|v| Some(v.primary) == primary_address)
        })
        .count();
    let wanted_replicas = facts.desired_nodes.saturating_sub(1);
    let ready = if !primary_ready {
        ConditionUpdate::new(
            ConditionType::Ready,
            false,
            "NoPrimary",
            "no primary the Sentinels agree on answers",
        )
    } else if replicas_ready < wanted_replicas {
        ConditionUpdate::new(
            ConditionType::Ready,
            false,
            "ReplicasNotReady",
            format!("{replicas_ready} of {wanted_replicas} replicas are linked to the primary"),
        )
    } else if watching < facts.settings.quorum as usize {
        ConditionUpdate::new(
            ConditionType::Ready,
            false,
            "SentinelsNotReady",
            format!(
                "{watching} Sentinels watch the primary; failover needs {}",
                facts.settings.quorum
            ),
        )
    } else {
        ConditionUpdate::new(
            ConditionType::Ready,
            true,
            "Replicating",
            format!(
                "the primary takes writes, {replicas_ready} replicas follow it and {watching} Sentinels watch it"
            ),
        )
    };
    let degraded = facts.nodes.iter().find(|n| !n.health.is_healthy()).map(|n| {
        (
            if matches!(n.health, Health::Unhealthy(_)) {
                "NodeUnhealthy"
            } else {
                "NodeUnknown"
            },
            format!(
                "{}: {}",
                node_name(&name, n.ordinal),
                n.health.detail().unwrap_or_default()
            ),
        )
    });
    set_conditions(&mut status, pass.cluster, ready, progress, degraded, pass.now);
    status
}

/// The event reason of a step.
pub fn step_reason(step: &Step) -> Reason {
    match step {
        Step::ScaleNodes { .. } => Reason::ScalingNodes,
        Step::ScaleSentinels { .. } => Reason::ScalingSentinels,
        Step::Monitor { .. } => Reason::SentinelMonitoring,
        Step::RepointSentinel { .. } => Reason::SentinelRepointed,
        Step::Configure { .. } => Reason::SentinelConfigured,
        Step::Replicate { .. } => Reason::ReplicaConfigured,
        Step::FenceWrites { .. } => Reason::WriteFenceSet,
        Step::HandOver { .. } => Reason::SwitchoverRequested,
        Step::Promote { .. } => Reason::RecoveringFromNode,
        Step::RestartNode { .. } => Reason::RestartingNode,
        Step::WipeNode { .. } => Reason::RebuildingNode,
        Step::RemoveNode { .. } => Reason::RemovingNode,
        Step::ResetSentinel { .. } => Reason::SentinelReset,
        Step::MoveSentinelOntoVolume { .. } => Reason::MovingSentinelOntoVolume,
        Step::FailOver { .. } => Reason::FailingOverHeldBack,
    }
}

/// A step in words, for events and conditions.
pub fn describe(cluster: &str, step: &Step) -> String {
    match step {
        Step::ScaleNodes { replicas } => format!("scaling the data nodes to {replicas} pods"),
        Step::ScaleSentinels { replicas } => format!("scaling the Sentinels to {replicas} pods"),
        Step::Monitor { sentinel, primary } => format!(
            "telling {} to monitor the primary at {primary}",
            sentinel_name(cluster, *sentinel)
        ),
        Step::RepointSentinel { sentinel, primary } => format!(
            "telling {}, which names another address for the primary (an old one, or a primary a recovery replaced), to monitor it at {primary}",
            sentinel_name(cluster, *sentinel)
        ),
        Step::Configure { sentinel } => format!(
            "correcting the quorum and timeouts of {}",
            sentinel_name(cluster, *sentinel)
        ),
        Step::Replicate { node, primary } => format!(
            "pointing {} at the primary at {primary}",
            node_name(cluster, *node)
        ),
        Step::FenceWrites { node, fence } => format!(
            "making {} refuse writes unless {} replica(s) acknowledged within {} s",
            node_name(cluster, *node),
            fence.min_replicas,
            fence.max_lag_seconds
        ),
        Step::HandOver { primary, sentinel } => format!(
            "handing the role of the primary, {}, to a replica in sync: its writes held, {} asked to fail over",
            node_name(cluster, *primary),
            sentinel_name(cluster, *sentinel)
        ),
        Step::RestartNode { ordinal } => format!(
            "restarting {} onto the current pod template",
            node_name(cluster, *ordinal)
        ),
        Step::Promote { from, to } => format!(
            "making {} the primary in place of {}, lost for good, as {} asks; every Sentinel that answers monitors it",
            node_name(cluster, *to),
            node_name(cluster, *from),
            quorum_core::recovery::RECOVER_ANNOTATION
        ),
        Step::WipeNode { ordinal, .. } => format!(
            "rebuilding {} on request: its claim and pod deleted, so it comes back empty and copies everything from the primary",
            node_name(cluster, *ordinal)
        ),
        Step::RemoveNode { ordinal } => format!("removing replica {}", node_name(cluster, *ordinal)),
        Step::FailOver {
            sentinel,
            primary,
            held_back,
        } => format!(
            "asking {} to fail over now: the kubelet holds back the server of the primary, {} ({held_back}), so it would not answer before down-after",
            sentinel_name(cluster, *sentinel),
            node_name(cluster, *primary)
        ),
        Step::ResetSentinel { sentinel } => format!(
            "making {} forget nodes and Sentinels that are gone",
            sentinel_name(cluster, *sentinel)
        ),
        Step::MoveSentinelOntoVolume { sentinel, .. } => format!(
            "replacing {}, made by an earlier release on a pod-lifetime volume, with a Sentinel on a volume of its own",
            sentinel_name(cluster, *sentinel)
        ),
    }
}

/// What the previous status said of node `name`'s failing since.
pub(crate) fn previous_failing_since<'a>(previous: &'a [NodeStatus], name: &str) -> Option<&'a Time> {
    previous
        .iter()
        .find(|node| node.name == name)
        .and_then(|node| node.failing_since.as_ref())
}
