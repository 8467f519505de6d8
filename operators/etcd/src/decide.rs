//! The pure decision: from what was gathered, the one next step, or why to wait.
//!
//! `docs/etcd.md` states the rules; in short, in this order:
//! 1. Nothing is decided without a fresh membership list: "no member answered" is not
//!    "the cluster is gone".
//! 2. A step recorded in status and not yet visible in the membership is resumed first.
//! 3. A learner is started, then promoted once it is healthy (caught up).
//! 4. A member that its peers report as down for longer than the grace period is replaced,
//!    if the gate allows; a member that is merely Unknown never is.
//! 5. Scale up adds one learner at a time; scale down removes the highest ordinal, one at a
//!    time, through the gate, and only then stops its pod.
//! 6. A version change or a new pod template restarts one member at a time through the gate,
//!    the leader last (after handing leadership to an upgraded member).

use std::time::{Duration, Instant};

use quorum_core::{
    availability::{
        gate::{self, Disruption, Freshness, GateInput, Quorum, Verdict},
        health::{Health, Observation},
    },
    recovery::{NEWEST_BACKUP, RECOVER_ANNOTATION, RecoveryRequest, request_command},
    rollout::Templates,
};

use crate::resolver::member_name;

pub use crate::reasons::Reason;

/// One member as gathered: identity from the membership list, health from the observation.
#[derive(Clone, Debug)]
pub struct MemberFact {
    pub ordinal: usize,
    pub id: u64,
    pub learner: bool,
    /// The member has started and published its name.
    pub started: bool,
    pub leader: bool,
    /// The version the member reports it runs, when it answered.
    pub version: Option<String>,
    /// The raft index of its log, when it answered: how far its log reaches.
    pub raft_index: Option<u64>,
    pub observation: Observation,
    /// Since when the member has been continuously Unhealthy, as recorded in status.
    pub unhealthy_for: Option<Duration>,
}

/// The disruptive or membership step recorded in status before it is taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InFlight {
    AddLearner {
        ordinal: usize,
    },
    Promote {
        ordinal: usize,
        id: u64,
    },
    Remove {
        ordinal: usize,
        id: u64,
    },
    Upgrade {
        ordinal: usize,
    },
    Replace {
        ordinal: usize,
        id: u64,
    },
    /// A recovery from member `ordinal` after a lost quorum: the other members' pods and volumes
    /// are being deleted, so none of them can start on its old data while the next phase runs.
    Recover {
        ordinal: usize,
    },
    /// The other members are wiped: the pod template carries `--force-new-cluster`, and member
    /// `ordinal` restarts with it into a cluster of itself.
    ForceNewCluster {
        ordinal: usize,
    },
    /// Member `ordinal` leads a cluster of itself: the template no longer carries the flag, and
    /// the member restarts without it before any other member is added again.
    EndForceNewCluster {
        ordinal: usize,
    },
    /// No member survived: the restore is recorded (the snapshot in `status.restoringFrom`) and
    /// the template carries it; the members' volumes are wiped once the StatefulSet controller
    /// has taken that template, so every pod it creates again restores.
    RestoreInPlace,
    /// Every member's pod and volume was deleted: the members restore the snapshot on their
    /// empty volumes before etcd starts, and form a new cluster.
    RestoreForming,
}

impl InFlight {
    /// A short description for conditions and events.
    pub fn describe(&self) -> String {
        match self {
            InFlight::AddLearner { ordinal } => format!("adding member {ordinal} as a learner"),
            InFlight::Promote { ordinal, .. } => format!("promoting member {ordinal}"),
            InFlight::Remove { ordinal, .. } => format!("removing member {ordinal}"),
            InFlight::Upgrade { ordinal } => format!("upgrading member {ordinal}"),
            InFlight::Replace { ordinal, .. } => format!("replacing member {ordinal}"),
            InFlight::Recover { ordinal } => {
                format!("recovering from member {ordinal}: deleting the other members' pods and volumes")
            }
            InFlight::ForceNewCluster { ordinal } => {
                format!("recovering from member {ordinal}: restarting it as a new cluster of itself")
            }
            InFlight::EndForceNewCluster { ordinal } => {
                format!("recovering from member {ordinal}: restarting it without --force-new-cluster")
            }
            InFlight::RestoreInPlace => {
                "restoring in place from the newest backup: waiting for the StatefulSet to take the restore template"
                    .to_string()
            }
            InFlight::RestoreForming => {
                "restoring in place: the members form a new cluster from the newest backup".to_string()
            }
        }
    }

    /// A phase of a recovery from a lost quorum: taken before anything else, lost quorum or not.
    pub fn is_recovery(&self) -> bool {
        matches!(
            self,
            InFlight::Recover { .. }
                | InFlight::ForceNewCluster { .. }
                | InFlight::EndForceNewCluster { .. }
                | InFlight::RestoreInPlace
                | InFlight::RestoreForming
        )
    }

    /// Whether the member pods' template carries `--force-new-cluster` in this phase.
    pub fn forces_new_cluster(&self) -> bool {
        matches!(self, InFlight::ForceNewCluster { .. })
    }
}

/// A person's request to rebuild one member from its peers
/// ([`quorum_core::crd::REPAIR_ANNOTATION`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairRequest {
    /// The member the request names, as written.
    pub member: String,
    /// Its ordinal, when the name is a member name of this cluster.
    pub ordinal: Option<usize>,
    /// The etcd id of the member removed for this request, once it was (from status).
    pub replaced: Option<u64>,
}

/// Everything the decision needs, gathered by the reconciler.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The cluster's name: what a person types in a command the cluster asks them to run.
    pub cluster: String,
    pub desired_members: usize,
    pub desired_version: String,
    /// The cluster has formed before (status recorded its members).
    pub bootstrapped: bool,
    /// Replicas of the StatefulSet as it stands (`None`: not created yet).
    pub statefulset_replicas: Option<usize>,
    /// The membership with each member's health; `None` when no member answered.
    pub members: Option<Vec<MemberFact>>,
    /// Ordinals whose volume must be wiped before their pod may start again (being replaced).
    pub wipe_pending: Vec<usize>,
    /// Ordinals of members a recovery gave up, their volumes wiped by it: each is added back as a
    /// learner and never wiped again (its empty pod may join as soon as it is added).
    pub rejoin_pending: Vec<usize>,
    /// The etcd version each existing (not terminating) member pod was created for, by
    /// ordinal: whether a recorded upgrade's pod restart has happened yet.
    pub pod_versions: std::collections::BTreeMap<usize, String>,
    /// Which member pods run the StatefulSet's current template: a new template (a changed
    /// override, a new operator release) rolls like a version upgrade.
    pub templates: Templates,
    pub in_flight: Option<InFlight>,
    /// A repair a person asked for, while the request stands.
    pub repair: Option<RepairRequest>,
    /// A recovery from a lost quorum a person asked for, while the request stands.
    pub recovery: Option<RecoveryRequest>,
    /// Ordinals of the member pods (not terminating) created from a template that carried
    /// `--force-new-cluster`.
    pub forced_pods: std::collections::BTreeSet<usize>,
    /// Ordinals of the member pods (not terminating) that the kubelet reports Ready by their own
    /// probes.
    pub ready_pods: std::collections::BTreeSet<usize>,
    /// The uid of each member pod (not terminating), by ordinal: a wipe deletes the pod it was
    /// decided on, never one created again under its name since.
    pub pod_uids: std::collections::BTreeMap<usize, String>,
    /// The newest successful backup (`status.lastBackup`), described for people, if any.
    pub newest_backup: Option<String>,
    pub freshness: Duration,
    /// How long a member must stay Unhealthy (as its peers report) before it is replaced.
    pub replace_after: Duration,
    pub now: Instant,
}

/// The one step to take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Create the StatefulSet with this many members forming a new cluster.
    Bootstrap { members: usize },
    /// MemberAdd as a learner, before its pod exists.
    AddLearner { ordinal: usize },
    /// Raise the StatefulSet so the pod of an added member starts.
    StartPod { ordinal: usize },
    /// MemberPromote a learner that caught up.
    Promote { ordinal: usize, id: u64 },
    /// MemberRemove, before its pod goes.
    Remove { ordinal: usize, id: u64 },
    /// Lower the StatefulSet after the highest member was removed.
    StopPod { ordinal: usize },
    /// MemberRemove of a failed member that will come back empty under the same name.
    Replace { ordinal: usize, id: u64 },
    /// Delete the pod and volume of a replaced member, so it starts empty: only the pod
    /// `pod_uid` when the member had one (a pod created again since is left to the next pass);
    /// without one, its claim before the StatefulSet makes the pod again on it.
    WipeMember { ordinal: usize, pod_uid: Option<String> },
    /// A replaced member's learner already started: it joined on an empty volume of its own
    /// (its old data could not have joined under the new id), so its volume is kept.
    KeepJoinedReplacement { ordinal: usize },
    /// Hand leadership to an upgraded member before the leader restarts.
    MoveLeader { from: usize, to_id: u64 },
    /// Delete the pod so it restarts with the new version.
    Upgrade { ordinal: usize },
    /// The step recorded in status is visible now; clear it.
    ClearInFlight,
    /// Begin a recovery from member `ordinal`, the lost quorum's most advanced survivor: delete
    /// the pods and volumes of every other member (`lost`), which come back empty and are added
    /// again once the survivor leads a cluster of itself.
    Recover { ordinal: usize, lost: Vec<usize> },
    /// Delete member `ordinal`'s pod so it starts on the current template (with or without
    /// `--force-new-cluster`, as the recovery's phase says).
    RestartMember { ordinal: usize },
    /// Member `ordinal` leads a cluster of itself: take `--force-new-cluster` off the template.
    EndForceNewCluster { ordinal: usize },
    /// No member survived: delete the pods and volumes of `members` members, which come back
    /// empty and form a new cluster from the newest backup (`backup`, described for people).
    RestoreInPlace { members: usize, backup: String },
    /// The restore template is taken: delete the pods and volumes of `members` members at once.
    WipeForRestore { members: usize },
}

impl Step {
    /// What must be recorded in status before the step is taken, if anything.
    pub fn in_flight(&self) -> Option<InFlight> {
        match *self {
            Step::AddLearner { ordinal } => Some(InFlight::AddLearner { ordinal }),
            Step::Promote { ordinal, id } => Some(InFlight::Promote { ordinal, id }),
            Step::Remove { ordinal, id } => Some(InFlight::Remove { ordinal, id }),
            Step::Replace { ordinal, id } => Some(InFlight::Replace { ordinal, id }),
            Step::Upgrade { ordinal } => Some(InFlight::Upgrade { ordinal }),
            Step::Recover { ordinal, .. } => Some(InFlight::Recover { ordinal }),
            Step::EndForceNewCluster { ordinal } => Some(InFlight::EndForceNewCluster { ordinal }),
            Step::RestoreInPlace { .. } => Some(InFlight::RestoreInPlace),
            Step::WipeForRestore { .. } => Some(InFlight::RestoreForming),
            _ => None,
        }
    }
}

/// Why no step is taken now: a reason from [`Reason`] and a sentence for people.
pub type Wait = quorum_core::pass::Wait<Reason>;

/// The decision: a step, a wait, or `Settled` (the cluster matches its spec).
pub type Decision = quorum_core::pass::Decision<Step, Reason>;

fn wait(reason: Reason, message: impl Into<String>) -> Decision {
    Decision::wait(reason, message)
}

/// Decides the one next step.
pub fn decide(facts: &Facts) -> Decision {
    if !facts.bootstrapped {
        return match facts.statefulset_replicas {
            None | Some(0) => Decision::Act(Step::Bootstrap {
                members: facts.desired_members,
            }),
            Some(_) if facts.members.is_some() => Decision::Settled,
            Some(_) => wait(
                Reason::Bootstrapping,
                "waiting for the first members to form the cluster",
            ),
        };
    }
    // A recovery under way goes on whatever the quorum: it is what restores it.
    if let Some(recovery) = facts.in_flight.as_ref().filter(|step| step.is_recovery()) {
        return resume_recovery(facts, recovery);
    }
    let Some(members) = facts.members.as_deref() else {
        if let Some(restore) = restore_on_request(facts) {
            return restore;
        }
        return wait(
            Reason::NoMemberReachable,
            "no member answered; unreachable is not down, so nothing changes until one does",
        );
    };

    if let Some(lost) = quorum_lost(&facts.cluster, members) {
        return recover_on_request(facts, members).unwrap_or(Decision::Wait(lost));
    }

    if let Some(in_flight) = &facts.in_flight {
        return resume(facts, members, in_flight);
    }

    // A member being replaced: once its replacement is in the membership, wipe the old volume
    // (the old data cannot join under the new id, so the order is safe), unless the replacement
    // started already, which only a pod on an empty volume can have done. A member a recovery
    // gave up is only added back: its volume is empty already, and its pod may join as soon as
    // it is added, so a wipe after that would empty a member the leader counts as caught up.
    // etcd admits one learner at a time: the next is added once the learner before it is promoted.
    let other_learner = |ordinal: usize| members.iter().any(|m| m.learner && m.ordinal != ordinal);
    if let Some(&ordinal) = facts.wipe_pending.first() {
        match members.iter().find(|m| m.ordinal == ordinal) {
            Some(m) if m.started => return Decision::Act(Step::KeepJoinedReplacement { ordinal }),
            Some(_) => {
                return Decision::Act(Step::WipeMember {
                    ordinal,
                    pod_uid: facts.pod_uids.get(&ordinal).cloned(),
                });
            }
            None if !other_learner(ordinal) => return Decision::Act(Step::AddLearner { ordinal }),
            None => {}
        }
    }
    if let Some(&ordinal) = facts.rejoin_pending.first()
        && !other_learner(ordinal)
        && !members.iter().any(|m| m.ordinal == ordinal)
    {
        return Decision::Act(Step::AddLearner { ordinal });
    }

    let statefulset_replicas = facts.statefulset_replicas.unwrap_or(0);
    if let Some(learner) = members.iter().find(|m| m.learner) {
        if learner.ordinal >= statefulset_replicas {
            return Decision::Act(Step::StartPod {
                ordinal: learner.ordinal,
            });
        }
        return promote_when_ready(members, learner);
    }

    if let Some(failed) = members.iter().find(|m| {
        matches!(m.observation.health, Health::Unhealthy(_))
            && m.unhealthy_for.is_some_and(|d| d >= facts.replace_after)
    }) {
        return through_gate(
            facts,
            members,
            failed.ordinal,
            Disruption::Replace,
            Step::Replace {
                ordinal: failed.ordinal,
                id: failed.id,
            },
        );
    }

    let voters = members.iter().filter(|m| !m.learner).count();
    let highest = members.iter().map(|m| m.ordinal).max();
    // The pod of a removed member (a scale-in not yet finished) goes before any member is
    // added: a learner added under its ordinal would meet that pod, still running on the
    // removed member's volume, which its peers refuse, and never start.
    if voters <= facts.desired_members
        && let Some(highest) = highest
        && statefulset_replicas > highest + 1
    {
        return Decision::Act(Step::StopPod {
            ordinal: statefulset_replicas - 1,
        });
    }
    if voters < facts.desired_members {
        if let Some(blocked) = others_not_healthy(members, usize::MAX) {
            return blocked;
        }
        let ordinal = highest.map_or(0, |h| h + 1);
        return Decision::Act(Step::AddLearner { ordinal });
    }
    if voters > facts.desired_members {
        let target = members.iter().max_by_key(|m| m.ordinal).expect("voters > 0");
        return through_gate(
            facts,
            members,
            target.ordinal,
            Disruption::Remove,
            Step::Remove {
                ordinal: target.ordinal,
                id: target.id,
            },
        );
    }
    if let Some(repair) = facts.repair.as_ref().filter(|r| r.replaced.is_none()) {
        return repair_member(facts, members, repair);
    }

    upgrade(facts, members)
}

/// The next step of a repair a person asked for: the named member is removed from the
/// membership through the gate (as a failed member is replaced), then comes back empty as a
/// learner under its name and syncs from the leader. Never the leader: leadership moves to a
/// healthy member first. Never below quorum: the gate refuses.
fn repair_member(facts: &Facts, members: &[MemberFact], request: &RepairRequest) -> Decision {
    let target = request
        .ordinal
        .and_then(|ordinal| members.iter().find(|m| m.ordinal == ordinal && !m.learner));
    let Some(target) = target else {
        let names: Vec<String> = members
            .iter()
            .filter(|m| !m.learner)
            .map(|m| m.observation.member.clone())
            .collect();
        return wait(
            Reason::RepairRefused,
            format!(
                "{} names {:?}, which is not a voting member of this cluster, so nothing is \
                 changed: name one of {names:?}, or remove the annotation",
                quorum_core::crd::REPAIR_ANNOTATION,
                request.member
            ),
        );
    };
    if target.leader {
        let successor = members
            .iter()
            .find(|m| m.ordinal != target.ordinal && !m.learner && m.observation.health.is_healthy());
        return match successor {
            Some(successor) => through_gate(
                facts,
                members,
                target.ordinal,
                Disruption::Replace,
                Step::MoveLeader {
                    from: target.ordinal,
                    to_id: successor.id,
                },
            ),
            None => wait(
                Reason::RepairRefused,
                format!(
                    "member {} is the leader and no other member is healthy to take over, so it \
                     is not rebuilt",
                    target.ordinal
                ),
            ),
        };
    }
    through_gate(
        facts,
        members,
        target.ordinal,
        Disruption::Replace,
        Step::Replace {
            ordinal: target.ordinal,
            id: target.id,
        },
    )
}

/// A majority of the voting members does not answer and the members that do follow no leader:
/// the cluster serves no write and etcd accepts no membership change. A member that cannot be
/// reached is never taken for lost, so nothing is changed; the wait says what the operator knows
/// (who answers, whose log reaches furthest) and what a person can do.
pub fn quorum_lost(cluster: &str, members: &[MemberFact]) -> Option<Wait> {
    const KIND: &str = "EtcdCluster";
    let voters: Vec<&MemberFact> = members.iter().filter(|m| !m.learner).collect();
    if voters.is_empty() || voters.iter().any(|m| m.leader) {
        return None;
    }
    let (answering, silent): (Vec<&MemberFact>, Vec<&MemberFact>) =
        voters.iter().partition(|m| m.raft_index.is_some());
    // A majority that answers elects a leader by itself (an election in progress). Members
    // that have followed no leader only for a moment may be a cluster forming or waiting out an
    // election timeout: not yet a lost quorum.
    if answering.len() > voters.len() / 2
        || answering.iter().any(|m| {
            m.unhealthy_for
                .is_none_or(|leaderless| leaderless < QUORUM_LOST_AFTER)
        })
    {
        return None;
    }
    let ordinals = |members: &[&MemberFact]| {
        let mut ordinals: Vec<usize> = members.iter().map(|m| m.ordinal).collect();
        ordinals.sort_unstable();
        ordinals
    };
    let furthest = answering
        .iter()
        .max_by_key(|m| (m.raft_index, std::cmp::Reverse(m.ordinal)));
    let (furthest, recover) = match furthest {
        Some(m) => (
            format!(
                " Of those that answer, member {} holds the log that reaches furthest (raft index {}).",
                m.ordinal,
                m.raft_index.unwrap_or_default()
            ),
            format!(
                "recover from member {} with `{}`",
                m.ordinal,
                request_command(KIND, cluster, &member_name(cluster, m.ordinal))
            ),
        ),
        None => (
            String::new(),
            format!(
                "restore it in place from its newest backup with `{}`",
                request_command(KIND, cluster, NEWEST_BACKUP)
            ),
        ),
    };
    Some(Wait {
        reason: Reason::QuorumLost,
        message: format!(
            "quorum lost: voting members {:?} do not answer the operator and members {:?} have \
             followed no leader for {} s or more, so no write is served through them and no \
             membership change can be made.{furthest} Members that come \
             back on their volumes restore the quorum with every acknowledged write; the operator \
             removes no member it cannot reach. If they are lost for good, {recover} (what only \
             the lost members held is given up), or create a new cluster from the newest backup \
             (spec.restoreFrom; docs/etcd.md, \"Disaster recovery\").",
            ordinals(&silent),
            ordinals(&answering),
            QUORUM_LOST_AFTER.as_secs(),
        ),
    })
}

/// How long the members that answer must have followed no leader, with a majority silent,
/// before the quorum is reported lost: far longer than an election, shorter than a person's
/// patience.
pub const QUORUM_LOST_AFTER: Duration = Duration::from_secs(30);

/// A lost quorum is never ended by the operator alone: a member it cannot reach may be alive
/// behind a partition or slow to come back. A person who knows the silent members are lost for
/// good names the member to recover from ([`RECOVER_ANNOTATION`]). It is taken only while the
/// quorum is lost, only from a voting member that answers and whose raft log reaches at least as
/// far as every other member's that answers, once per request. `None` when there is no request
/// to take.
fn recover_on_request(facts: &Facts, members: &[MemberFact]) -> Option<Decision> {
    let request = facts.recovery.as_ref().filter(|request| request.is_open())?;
    let refused = |message: String| Some(wait(Reason::RecoveryRefused, message));
    if request.member == NEWEST_BACKUP {
        let answering: Vec<usize> = members
            .iter()
            .filter(|m| m.raft_index.is_some())
            .map(|m| m.ordinal)
            .collect();
        return refused(format!(
            "members {answering:?} answer, so the cluster is not restored from a backup: recover from the one whose \
             log reaches furthest ({RECOVER_ANNOTATION}=<member>), which holds more than any backup"
        ));
    }
    let ordinal = match request.target(member_slots(facts)) {
        Ok(ordinal) => ordinal,
        Err(refusal) => return refused(refusal),
    };
    let Some(named) = members.iter().find(|m| m.ordinal == ordinal && !m.learner) else {
        return refused(format!(
            "{} is not a voting member of the membership, so nothing is changed: name one, or remove {RECOVER_ANNOTATION}",
            request.member
        ));
    };
    let Some(reach) = named.raft_index else {
        return refused(format!(
            "{} does not answer; only a member that answers is recovered from",
            request.member
        ));
    };
    if let Some(further) = members
        .iter()
        .filter(|m| m.ordinal != ordinal)
        .find(|m| m.raft_index.is_some_and(|theirs| theirs > reach))
    {
        return refused(format!(
            "member {}'s raft log reaches further than {}'s ({} against {reach}); name the member whose log reaches furthest",
            further.ordinal,
            request.member,
            further.raft_index.unwrap_or_default()
        ));
    }
    Some(Decision::Act(Step::Recover {
        ordinal,
        lost: others(facts, ordinal),
    }))
}

/// No member answers and a person asked for the cluster to be restored in place from its newest
/// backup ([`NEWEST_BACKUP`]). It is taken only when no member pod is Ready by its own probes
/// either: a cluster that serves its clients while the operator cannot reach it is never wiped.
/// `None` when there is no such request to take.
fn restore_on_request(facts: &Facts) -> Option<Decision> {
    let request = facts
        .recovery
        .as_ref()
        .filter(|request| request.is_open() && request.member == NEWEST_BACKUP)?;
    let refused = |message: String| Some(wait(Reason::RecoveryRefused, message));
    if !facts.ready_pods.is_empty() {
        return refused(format!(
            "the pods of members {:?} are Ready by their own probes though the operator reaches no member: the \
             operator may be cut off from a cluster that serves, so nothing is wiped",
            facts.ready_pods
        ));
    }
    let Some(backup) = &facts.newest_backup else {
        return refused(format!(
            "{} asks for the newest backup, and no successful backup of this cluster is recorded (status.lastBackup); \
             create a new cluster from a backup instead (spec.restoreFrom)",
            request.member
        ));
    };
    Some(Decision::Act(Step::RestoreInPlace {
        members: member_slots(facts),
        backup: backup.clone(),
    }))
}

/// How many member ordinals may hold a pod or a member: the StatefulSet's, the spec's, and the
/// membership's, whichever is most.
fn member_slots(facts: &Facts) -> usize {
    let highest = facts
        .members
        .iter()
        .flatten()
        .map(|m| m.ordinal + 1)
        .max()
        .unwrap_or(0);
    highest
        .max(facts.statefulset_replicas.unwrap_or(0))
        .max(facts.desired_members)
}

/// A restore in place, recorded. Nothing is wiped before the StatefulSet controller has taken
/// the template that carries the restore (with the new-cluster settings), so no pod created
/// again starts empty without it and bootstraps an empty cluster; then every member is wiped at
/// once. A pod still on an older template after that (created again before the StatefulSet
/// took the restore template) is wiped again, but only while it cannot hold what the restored
/// cluster acknowledged: no restored member leads and the pod is not Ready by its own probes. A
/// template changed by a person while the restored cluster serves makes every pod outdated; those
/// pods are rolled, gated, once the restore is over. The restore is over once every pod runs the
/// restore template, every member votes and answers, and one leads.
fn restore_in_place(facts: &Facts, phase: &InFlight) -> Decision {
    let template_taken = facts.templates != Templates::Unknown;
    if *phase == InFlight::RestoreInPlace {
        if !template_taken {
            return wait(
                Reason::RecoveryInProgress,
                "restoring in place: waiting for the StatefulSet controller to take the restore template before any volume is wiped",
            );
        }
        return Decision::Act(Step::WipeForRestore {
            members: member_slots(facts),
        });
    }
    if let Some((ordinal, pod_uid)) =
        (0..member_slots(facts)).find_map(|o| Some((o, facts.templates.outdated_pod(o)?.to_string())))
    {
        let serving = facts
            .members
            .as_deref()
            .is_some_and(|members| members.iter().any(|m| m.leader && !m.learner));
        if !serving && !facts.ready_pods.contains(&ordinal) {
            return Decision::Act(Step::WipeMember {
                ordinal,
                pod_uid: Some(pod_uid),
            });
        }
        return wait(
            Reason::RecoveryInProgress,
            format!(
                "member {ordinal}'s pod runs an older template than the StatefulSet's, but the restored cluster {} and may hold acknowledged writes there, so it is not wiped; it is rolled once every member has joined the restored cluster (a pod that never started, Pending on an old template, may be deleted by hand to be created again)",
                if serving {
                    "has a leader"
                } else {
                    "counts it Ready"
                }
            ),
        );
    }
    let formed = template_taken
        && facts.members.as_deref().is_some_and(|members| {
            let voters: Vec<&MemberFact> = members.iter().filter(|m| !m.learner).collect();
            voters.len() >= facts.desired_members
                && voters.iter().any(|m| m.leader)
                && voters.iter().all(|m| m.observation.health.is_healthy())
        });
    if formed {
        return Decision::Act(Step::ClearInFlight);
    }
    wait(
        Reason::RecoveryInProgress,
        "the members restore the newest backup on their empty volumes and form a new cluster",
    )
}

/// Promotes `learner` once it has started and answers healthy and every other member is
/// healthy, fresh or resumed: a promotion whose learner then died would add a voter that counts
/// towards the quorum and cannot vote.
fn promote_when_ready(members: &[MemberFact], learner: &MemberFact) -> Decision {
    if !learner.started || !learner.observation.health.is_healthy() {
        return wait(
            Reason::LearnerCatchingUp,
            format!(
                "member {} is starting and catching up as a learner",
                learner.ordinal
            ),
        );
    }
    if let Some(blocked) = others_not_healthy(members, learner.ordinal) {
        return blocked;
    }
    Decision::Act(Step::Promote {
        ordinal: learner.ordinal,
        id: learner.id,
    })
}

/// Every member ordinal but `ordinal`.
fn others(facts: &Facts, ordinal: usize) -> Vec<usize> {
    (0..member_slots(facts))
        .filter(|other| *other != ordinal)
        .collect()
}

/// The next phase of a recovery recorded in status. Each phase is finished before the next
/// begins, and each is taken again if the operator stopped in it: the survivor restarts with
/// `--force-new-cluster` only once no other member can start on its old data, and without it
/// before any member is added again (a member restarted with the flag later would drop them).
fn resume_recovery(facts: &Facts, recovery: &InFlight) -> Decision {
    let leads_alone = |ordinal: usize| {
        facts.members.as_deref().is_some_and(|members| {
            let mut voters = members.iter().filter(|m| !m.learner);
            voters.next().is_some_and(|m| m.ordinal == ordinal && m.leader) && voters.next().is_none()
        })
    };
    let forced = |ordinal: usize| facts.forced_pods.contains(&ordinal);
    match *recovery {
        InFlight::Recover { ordinal } => Decision::Act(Step::Recover {
            ordinal,
            lost: others(facts, ordinal),
        }),
        InFlight::ForceNewCluster { ordinal } if !forced(ordinal) => {
            Decision::Act(Step::RestartMember { ordinal })
        }
        InFlight::ForceNewCluster { ordinal } if leads_alone(ordinal) => {
            Decision::Act(Step::EndForceNewCluster { ordinal })
        }
        InFlight::ForceNewCluster { ordinal } => wait(
            Reason::RecoveryInProgress,
            format!("member {ordinal} is starting with --force-new-cluster, as a cluster of itself"),
        ),
        // Any pod created while the template carried the flag (the survivor's, or another
        // created again meanwhile) restarts without it before the recovery ends.
        InFlight::EndForceNewCluster { .. } if let Some(&ordinal) = facts.forced_pods.first() => {
            Decision::Act(Step::RestartMember { ordinal })
        }
        InFlight::EndForceNewCluster { ordinal } if leads_alone(ordinal) => {
            Decision::Act(Step::ClearInFlight)
        }
        InFlight::EndForceNewCluster { ordinal } => wait(
            Reason::RecoveryInProgress,
            format!("member {ordinal} is restarting without --force-new-cluster"),
        ),
        InFlight::RestoreInPlace | InFlight::RestoreForming => restore_in_place(facts, recovery),
        _ => unreachable!("only a recovery is resumed here"),
    }
}

/// The next upgrade step: a member on another version or an older pod template, non-leaders
/// first in ordinal order, the leader last after handing leadership to an upgraded member.
fn upgrade(facts: &Facts, members: &[MemberFact]) -> Decision {
    let other_version = |m: &MemberFact| m.version.as_deref().is_some_and(|v| v != facts.desired_version);
    let outdated = |m: &&MemberFact| other_version(m) || facts.templates.is_outdated(m.ordinal);
    let unreported: Vec<usize> = members
        .iter()
        .filter(|m| m.version.is_none())
        .map(|m| m.ordinal)
        .collect();
    let Some(target) = members
        .iter()
        .filter(outdated)
        .min_by_key(|m| (m.leader, m.ordinal))
    else {
        if !unreported.is_empty() {
            return wait(
                Reason::MemberUnknown,
                format!("members {unreported:?} did not report their version"),
            );
        }
        return Decision::Settled;
    };
    if other_version(target)
        && let Some(refusal) = unsupported_change(
            target.version.as_deref().unwrap_or_default(),
            &facts.desired_version,
        )
    {
        return wait(Reason::UnsupportedVersionChange, refusal);
    }
    if target.leader {
        let successor = members.iter().find(|m| {
            !m.leader
                && !m.learner
                && m.observation.health.is_healthy()
                && m.version.as_deref() == Some(facts.desired_version.as_str())
                && !facts.templates.is_outdated(m.ordinal)
        });
        if let Some(successor) = successor {
            return through_gate(
                facts,
                members,
                target.ordinal,
                Disruption::Restart,
                Step::MoveLeader {
                    from: target.ordinal,
                    to_id: successor.id,
                },
            );
        }
        // A single-member cluster has no one to hand over to; the gate will say so.
    }
    through_gate(
        facts,
        members,
        target.ordinal,
        Disruption::Restart,
        Step::Upgrade {
            ordinal: target.ordinal,
        },
    )
}

/// Why etcd cannot go from `running` to `desired` by restarting members, if it cannot: etcd
/// refuses to start a member older than the cluster's version (a downgrade needs etcd's own
/// downgrade procedure), and upgrades go one minor version at a time.
pub fn unsupported_change(running: &str, desired: &str) -> Option<String> {
    let minor = |version: &str| -> Option<(u64, u64)> {
        let mut parts = version.split('.');
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    };
    let (Some(from), Some(to)) = (minor(running), minor(desired)) else {
        return None;
    };
    if to < from {
        return Some(format!(
            "members run {running}; going back to {desired} is a downgrade, which restarting members cannot do"
        ));
    }
    if to.0 != from.0 || to.1 > from.1 + 1 {
        return Some(format!(
            "members run {running}; {desired} skips a minor version: upgrade one minor version at a time"
        ));
    }
    None
}

/// Resumes the step recorded in status: clears it once its effect is visible, repeats it
/// (every step is idempotent) when it is not.
fn resume(facts: &Facts, members: &[MemberFact], in_flight: &InFlight) -> Decision {
    let member = |ordinal: usize| members.iter().find(|m| m.ordinal == ordinal);
    match *in_flight {
        InFlight::Recover { .. }
        | InFlight::ForceNewCluster { .. }
        | InFlight::EndForceNewCluster { .. }
        | InFlight::RestoreInPlace
        | InFlight::RestoreForming => resume_recovery(facts, in_flight),
        InFlight::AddLearner { ordinal } => match member(ordinal) {
            Some(_) => Decision::Act(Step::ClearInFlight),
            None => Decision::Act(Step::AddLearner { ordinal }),
        },
        InFlight::Promote { ordinal, .. } => match member(ordinal) {
            Some(m) if !m.learner => Decision::Act(Step::ClearInFlight),
            // Asked again only as a fresh promotion would be: the learner or a voter may have
            // gone down since the recorded attempt.
            Some(learner) => promote_when_ready(members, learner),
            None => Decision::Act(Step::ClearInFlight),
        },
        InFlight::Remove { ordinal, id } | InFlight::Replace { ordinal, id } => {
            match members.iter().find(|m| m.id == id) {
                None => Decision::Act(Step::ClearInFlight),
                Some(_) => {
                    let (disruption, step) = match in_flight {
                        InFlight::Remove { .. } => (Disruption::Remove, Step::Remove { ordinal, id }),
                        _ => (Disruption::Replace, Step::Replace { ordinal, id }),
                    };
                    through_gate(facts, members, ordinal, disruption, step)
                }
            }
        }
        InFlight::Upgrade { ordinal } => {
            // The restart was recorded but its pod still has the old version or template (the
            // operator stopped before deleting it, or the delete failed): take it again.
            let pod_behind = facts
                .pod_versions
                .get(&ordinal)
                .is_some_and(|version| *version != facts.desired_version)
                || facts.templates.is_outdated(ordinal);
            match member(ordinal) {
                _ if pod_behind => through_gate(
                    facts,
                    members,
                    ordinal,
                    Disruption::Restart,
                    Step::Upgrade { ordinal },
                ),
                // A terminating pod's member may still answer: the restart is done only once
                // its new pod exists on the current template (when that is known) and is Ready
                // by its own probes, so the next restart never overlaps a pod clients and
                // disruption budgets still count as down.
                Some(m)
                    if m.observation.health.is_healthy()
                        && m.version.as_deref() == Some(facts.desired_version.as_str())
                        && (facts.templates == Templates::Unknown || facts.templates.is_current(ordinal)) =>
                {
                    if facts.ready_pods.contains(&ordinal) {
                        Decision::Act(Step::ClearInFlight)
                    } else {
                        wait(
                            Reason::UpgradeInProgress,
                            format!(
                                "member {ordinal} answers on version {}; its pod is not Ready by its own probes yet",
                                facts.desired_version
                            ),
                        )
                    }
                }
                _ => wait(
                    Reason::UpgradeInProgress,
                    format!(
                        "member {ordinal} is restarting with version {} on the current pod template",
                        facts.desired_version
                    ),
                ),
            }
        }
    }
}

fn observations(members: &[MemberFact]) -> Vec<Observation> {
    members
        .iter()
        .map(|m| {
            let mut observation = m.observation.clone();
            observation.voting = !m.learner;
            observation
        })
        .collect()
}

/// Takes `step` if the safety gate lets a `disruption` of member `ordinal` through now.
fn through_gate(
    facts: &Facts,
    members: &[MemberFact],
    ordinal: usize,
    disruption: Disruption,
    step: Step,
) -> Decision {
    let observations = observations(members);
    let target = observations
        .iter()
        .zip(members)
        .find(|(_, m)| m.ordinal == ordinal)
        .map(|(o, _)| o.member.clone())
        .unwrap_or_default();
    match gate::check(&GateInput {
        target: &target,
        disruption,
        observations: &observations,
        // A step in flight was handled by `resume` before any gated step is considered.
        in_flight: None,
        freshness: Freshness::Within {
            window: facts.freshness,
            now: facts.now,
        },
        quorum: Quorum::Majority,
    }) {
        Verdict::Proceed => Decision::Act(step),
        Verdict::Wait(reason) => wait(Reason::of_gate(&reason), reason.to_string()),
    }
}

/// Adding or promoting changes the quorum: only while every other member is Healthy.
fn others_not_healthy(members: &[MemberFact], except: usize) -> Option<Decision> {
    members
        .iter()
        .filter(|m| m.ordinal != except && !m.learner)
        .find_map(|m| match &m.observation.health {
            Health::Healthy => None,
            Health::Unknown(why) => Some(wait(
                Reason::MemberUnknown,
                format!(
                    "member {} is unreachable ({why}); membership waits until it is observed",
                    m.ordinal
                ),
            )),
            Health::Unhealthy(why) => Some(wait(
                Reason::MemberUnhealthy,
                format!("member {} is unhealthy ({why})", m.ordinal),
            )),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const V_OLD: &str = "3.5.17";
    const V_NEW: &str = "3.6.16";

    fn member(ordinal: usize, health: Health) -> MemberFact {
        MemberFact {
            ordinal,
            id: 100 + ordinal as u64,
            learner: false,
            started: true,
            leader: ordinal == 0,
            version: Some(V_OLD.to_string()),
            raft_index: Some(50 + ordinal as u64),
            observation: Observation::new(format!("m-{ordinal}"), health, true),
            unhealthy_for: None,
        }
    }

    fn healthy(count: usize) -> Vec<MemberFact> {
        (0..count).map(|i| member(i, Health::Healthy)).collect()
    }

    fn facts(desired: usize, members: Option<Vec<MemberFact>>) -> Facts {
        let replicas = members
            .as_ref()
            .map(|m| m.iter().map(|m| m.ordinal + 1).max().unwrap_or(0));
        Facts {
            cluster: "demo".into(),
            desired_members: desired,
            desired_version: V_OLD.to_string(),
            bootstrapped: true,
            statefulset_replicas: replicas,
            members,
            wipe_pending: Vec::new(),
            rejoin_pending: Vec::new(),
            pod_versions: Default::default(),
            templates: Templates::Unknown,
            in_flight: None,
            repair: None,
            recovery: None,
            forced_pods: Default::default(),
            ready_pods: Default::default(),
            pod_uids: Default::default(),
            newest_backup: None,
            freshness: Duration::from_secs(30),
            replace_after: Duration::from_secs(300),
            now: Instant::now(),
        }
    }

    fn unknown() -> Health {
        Health::Unknown("timeout".into())
    }

    fn unhealthy() -> Health {
        Health::Unhealthy("peers report it disconnected".into())
    }

    fn reason(decision: &Decision) -> Reason {
        match decision {
            Decision::Wait(wait) => wait.reason,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    /// Members 1 and 2 of 3 silent for ten minutes (their peers report them disconnected),
    /// member 0 answering with no leader.
    fn majority_silent() -> Vec<MemberFact> {
        let mut members = healthy(3);
        members[0].leader = false;
        members[0].observation.health = Health::Unhealthy("reports no leader".into());
        members[0].unhealthy_for = Some(Duration::from_secs(60));
        for m in &mut members[1..] {
            m.version = None;
            m.raft_index = None;
            m.observation.health = unhealthy();
            m.unhealthy_for = Some(Duration::from_secs(600));
        }
        members
    }

    #[test]
    fn a_lost_quorum_needs_voters_to_have_lost_it() {
        // No membership known (a cluster forming, no member reachable) is not a lost quorum.
        assert_eq!(quorum_lost("demo", &[]), None);
    }

    #[test]
    fn a_lost_quorum_names_who_answers_and_whose_log_reaches_furthest() {
        let mut members = healthy(5);
        for m in &mut members {
            m.leader = false;
        }
        for m in &mut members[..3] {
            m.version = None;
            m.raft_index = None;
            m.observation.health = unknown();
        }
        members[3].raft_index = Some(900);
        members[4].raft_index = Some(700);
        for m in &mut members[3..] {
            m.observation.health = Health::Unhealthy("reports no leader".into());
            m.unhealthy_for = Some(Duration::from_secs(60));
        }
        let Decision::Wait(lost) = decide(&facts(5, Some(members))) else {
            panic!("expected a wait");
        };
        assert_eq!(lost.reason, Reason::QuorumLost);
        for said in [
            "voting members [0, 1, 2] do not answer",
            "members [3, 4] have followed no leader for 30 s or more",
            "member 3 holds the log that reaches furthest (raft index 900)",
            "recover from member 3 with `kubectl annotate etcdcluster demo quorum.dev/recover-from=demo-3`",
            "spec.restoreFrom",
        ] {
            assert!(lost.message.contains(said), "{said}: {}", lost.message);
        }
    }

    /// Each row: a name, the gathered facts, and the decision expected.
    #[test]
    fn decision_table() {
        let mut learner_unstarted = healthy(3);
        learner_unstarted.push(MemberFact {
            learner: true,
            started: false,
            ..member(3, unknown())
        });
        let mut learner_ready = healthy(3);
        learner_ready.push(MemberFact {
            learner: true,
            ..member(3, Health::Healthy)
        });
        let mut learner_lagging = healthy(3);
        learner_lagging.push(MemberFact {
            learner: true,
            ..member(3, unhealthy())
        });
        let mut failed_long = healthy(3);
        failed_long[2].observation.health = unhealthy();
        failed_long[2].unhealthy_for = Some(Duration::from_secs(600));
        let mut failed_recently = failed_long.clone();
        failed_recently[2].unhealthy_for = Some(Duration::from_secs(10));
        let mut one_unknown = healthy(3);
        one_unknown[1].observation.health = unknown();
        let mut target_unknown = healthy(5);
        target_unknown[4].observation.health = unknown();
        let mut two_failed = healthy(3);
        for m in &mut two_failed[1..] {
            m.observation.health = unhealthy();
            m.unhealthy_for = Some(Duration::from_secs(600));
        }
        let mut stale = healthy(5);
        stale[1].observation.observed_at = Instant::now() - Duration::from_secs(120);
        let majority_silent = majority_silent();
        let mut leaderless_a_moment = majority_silent.clone();
        leaderless_a_moment[0].unhealthy_for = Some(Duration::from_secs(2));
        for m in &mut leaderless_a_moment[1..] {
            m.unhealthy_for = None;
        }
        let mut electing = healthy(3);
        for m in &mut electing {
            m.leader = false;
            m.observation.health = Health::Unhealthy("reports no leader".into());
        }
        let mut replacement_added = healthy(2);
        replacement_added.push(MemberFact {
            id: 302,
            learner: true,
            started: false,
            ..member(2, unknown())
        });
        let mut replacement_started = healthy(2);
        replacement_started.push(MemberFact {
            id: 302,
            learner: true,
            ..member(2, Health::Healthy)
        });

        let rows: Vec<(&str, Facts, Decision)> = vec![
            (
                "a new cluster is bootstrapped with every member at once",
                Facts {
                    bootstrapped: false,
                    statefulset_replicas: None,
                    ..facts(3, None)
                },
                Decision::Act(Step::Bootstrap { members: 3 }),
            ),
            (
                "nothing happens while no member answers",
                facts(3, None),
                wait(Reason::NoMemberReachable, ""),
            ),
            (
                "a cluster matching its spec is settled",
                facts(3, Some(healthy(3))),
                Decision::Settled,
            ),
            (
                "scale up adds the next ordinal as a learner",
                facts(5, Some(healthy(3))),
                Decision::Act(Step::AddLearner { ordinal: 3 }),
            ),
            (
                "an added learner gets its pod",
                Facts {
                    statefulset_replicas: Some(3),
                    ..facts(5, Some(learner_unstarted.clone()))
                },
                Decision::Act(Step::StartPod { ordinal: 3 }),
            ),
            (
                "a started learner that caught up is promoted",
                facts(5, Some(learner_ready)),
                Decision::Act(Step::Promote { ordinal: 3, id: 103 }),
            ),
            (
                "a learner still catching up is waited for",
                facts(5, Some(learner_lagging)),
                wait(Reason::LearnerCatchingUp, ""),
            ),
            (
                "scale up waits while another member is Unknown",
                facts(5, Some(one_unknown.clone())),
                wait(Reason::MemberUnknown, ""),
            ),
            (
                "scale down removes the highest ordinal through the gate",
                facts(3, Some(healthy(5))),
                Decision::Act(Step::Remove { ordinal: 4, id: 104 }),
            ),
            (
                "scale down waits while another member is Unknown",
                facts(2, Some(one_unknown.clone())),
                wait(Reason::MemberUnknown, ""),
            ),
            (
                "scale down lets an Unknown target go only if quorum holds without it",
                facts(4, Some(target_unknown)),
                Decision::Act(Step::Remove { ordinal: 4, id: 104 }),
            ),
            (
                "the pod of a removed member is stopped after its removal",
                Facts {
                    statefulset_replicas: Some(5),
                    ..facts(3, Some(healthy(3)))
                },
                Decision::Act(Step::StopPod { ordinal: 4 }),
            ),
            (
                "scaled back up before a removed member's pod stopped: the pod goes before a learner is added in its place",
                Facts {
                    statefulset_replicas: Some(5),
                    ..facts(5, Some(healthy(4)))
                },
                Decision::Act(Step::StopPod { ordinal: 4 }),
            ),
            (
                "stale observations block a removal",
                facts(3, Some(stale)),
                wait(Reason::StaleObservation, ""),
            ),
            (
                "a member failed past the grace period is replaced",
                facts(3, Some(failed_long)),
                Decision::Act(Step::Replace { ordinal: 2, id: 102 }),
            ),
            (
                "a recent failure is given time",
                facts(3, Some(failed_recently)),
                Decision::Settled,
            ),
            (
                "an Unknown member is never replaced",
                facts(3, Some(one_unknown)),
                Decision::Settled,
            ),
            (
                "two failed members of three: replacing one would lose quorum",
                facts(3, Some(two_failed)),
                wait(Reason::MemberUnhealthy, ""),
            ),
            (
                "a silent majority and no leader: quorum lost, nothing is changed",
                facts(3, Some(majority_silent.clone())),
                wait(Reason::QuorumLost, ""),
            ),
            (
                "quorum lost: a recorded step is not resumed",
                Facts {
                    in_flight: Some(InFlight::AddLearner { ordinal: 3 }),
                    ..facts(5, Some(majority_silent))
                },
                wait(Reason::QuorumLost, ""),
            ),
            (
                "a majority answering without a leader is electing one, not lost",
                facts(3, Some(electing)),
                Decision::Settled,
            ),
            (
                "a minority leaderless only for a moment (forming, an election) is not lost yet",
                facts(3, Some(leaderless_a_moment)),
                wait(Reason::MemberUnknown, ""),
            ),
            (
                "a replaced member's learner is added before its volume is wiped",
                Facts {
                    wipe_pending: vec![2],
                    ..facts(3, Some(healthy(2)))
                },
                Decision::Act(Step::AddLearner { ordinal: 2 }),
            ),
            (
                "a replaced member's learner not started yet: its old volume is wiped",
                Facts {
                    wipe_pending: vec![2],
                    pod_uids: [(2, "uid-2".to_string())].into(),
                    ..facts(3, Some(replacement_added.clone()))
                },
                Decision::Act(Step::WipeMember {
                    ordinal: 2,
                    pod_uid: Some("uid-2".into()),
                }),
            ),
            (
                "a replaced member's learner not started and no pod: its old claim is wiped before a pod is made on it",
                Facts {
                    wipe_pending: vec![2],
                    ..facts(3, Some(replacement_added.clone()))
                },
                Decision::Act(Step::WipeMember {
                    ordinal: 2,
                    pod_uid: None,
                }),
            ),
            (
                "a replacement that started joined on an empty volume of its own: it is not wiped",
                Facts {
                    wipe_pending: vec![2],
                    ..facts(3, Some(replacement_started))
                },
                Decision::Act(Step::KeepJoinedReplacement { ordinal: 2 }),
            ),
        ];
        let repair = |member: &str, ordinal: Option<usize>, replaced: Option<u64>| RepairRequest {
            member: member.into(),
            ordinal,
            replaced,
        };
        let mut one_unhealthy = healthy(3);
        one_unhealthy[2].observation.health = unhealthy();
        let rows = rows.into_iter().chain([
            (
                "a repair removes the named healthy member through the gate",
                Facts {
                    repair: Some(repair("m-1", Some(1), None)),
                    ..facts(3, Some(healthy(3)))
                },
                Decision::Act(Step::Replace { ordinal: 1, id: 101 }),
            ),
            (
                "a repair of the leader moves leadership away first",
                Facts {
                    repair: Some(repair("m-0", Some(0), None)),
                    ..facts(3, Some(healthy(3)))
                },
                Decision::Act(Step::MoveLeader { from: 0, to_id: 101 }),
            ),
            (
                "a repair naming no member is refused",
                Facts {
                    repair: Some(repair("other-1", None, None)),
                    ..facts(3, Some(healthy(3)))
                },
                wait(Reason::RepairRefused, ""),
            ),
            (
                "a repair that would leave no healthy majority waits at the gate",
                Facts {
                    repair: Some(repair("m-1", Some(1), None)),
                    ..facts(3, Some(one_unhealthy))
                },
                wait(Reason::MemberUnhealthy, ""),
            ),
            (
                "a repair done is not taken again",
                Facts {
                    repair: Some(repair("m-1", Some(1), Some(101))),
                    ..facts(3, Some(healthy(3)))
                },
                Decision::Settled,
            ),
        ]);
        assert_decisions(rows);
    }

    /// Decides each row's facts: a wait is compared by its reason, a step or settled as a whole.
    fn assert_decisions<'a>(rows: impl IntoIterator<Item = (&'a str, Facts, Decision)>) {
        for (name, facts, expected) in rows {
            let decided = decide(&facts);
            match (&expected, &decided) {
                (Decision::Wait(want), Decision::Wait(got)) => {
                    assert_eq!(want.reason, got.reason, "{name}: {got:?}")
                }
                _ => assert_eq!(decided, expected, "{name}"),
            }
        }
    }

    fn recover_from(ordinal: usize) -> Option<RecoveryRequest> {
        Some(RecoveryRequest {
            member: format!("main-{ordinal}"),
            ordinal: (ordinal < 9).then_some(ordinal),
            done: None,
            expired: false,
        })
    }

    /// Member 0 alone, leading a cluster of itself: a forced new cluster.
    fn alone() -> Option<Vec<MemberFact>> {
        Some(vec![member(0, Health::Healthy)])
    }

    /// Each row: a name, the gathered facts, and the decision expected. A recovery is taken only
    /// on request, only from the member that answers with the log that reaches furthest, once;
    /// then phase by phase: the others wiped, the survivor restarted with the flag, restarted
    /// without it once it leads alone, and only then the others added back one at a time.
    #[test]
    fn a_lost_quorum_is_recovered_from_only_on_request_and_phase_by_phase() {
        let mut five = healthy(5);
        for m in &mut five {
            m.leader = false;
        }
        for m in &mut five[..3] {
            m.raft_index = None;
            m.observation.health = unknown();
            m.unhealthy_for = Some(Duration::from_secs(600));
        }
        five[3].raft_index = Some(900);
        five[4].raft_index = Some(700);
        for m in &mut five[3..] {
            m.observation.health = Health::Unhealthy("reports no leader".into());
            m.unhealthy_for = Some(Duration::from_secs(60));
        }
        let lost = || facts(3, Some(majority_silent()));
        let in_phase = |phase: InFlight, forced: &[usize], members: Option<Vec<MemberFact>>| Facts {
            in_flight: Some(phase),
            forced_pods: forced.iter().copied().collect(),
            recovery: recover_from(0),
            ..facts(3, members)
        };
        let mut learner_back = alone().unwrap();
        learner_back.push(MemberFact {
            learner: true,
            started: false,
            ..member(1, unknown())
        });
        let rows: Vec<(&str, Facts, Decision)> = vec![
            (
                "no request: nothing is forced",
                lost(),
                wait(Reason::QuorumLost, ""),
            ),
            (
                "a silent member is not recovered from",
                Facts {
                    recovery: recover_from(1),
                    ..lost()
                },
                wait(Reason::RecoveryRefused, ""),
            ),
            (
                "a name that is no member is refused",
                Facts {
                    recovery: recover_from(9),
                    ..lost()
                },
                wait(Reason::RecoveryRefused, ""),
            ),
            (
                "a member behind another that answers is refused",
                Facts {
                    recovery: recover_from(4),
                    ..facts(5, Some(five.clone()))
                },
                wait(Reason::RecoveryRefused, ""),
            ),
            (
                "the member whose log reaches furthest: every other member is wiped first",
                Facts {
                    recovery: recover_from(3),
                    ..facts(5, Some(five))
                },
                Decision::Act(Step::Recover {
                    ordinal: 3,
                    lost: vec![0, 1, 2, 4],
                }),
            ),
            (
                "the survivor of three",
                Facts {
                    recovery: recover_from(0),
                    ..lost()
                },
                Decision::Act(Step::Recover {
                    ordinal: 0,
                    lost: vec![1, 2],
                }),
            ),
            (
                "a request already taken is not taken again",
                Facts {
                    recovery: Some(RecoveryRequest {
                        done: Some("main-1, main-2".into()),
                        ..recover_from(0).unwrap()
                    }),
                    ..lost()
                },
                wait(Reason::QuorumLost, ""),
            ),
            (
                "a wipe interrupted is taken again, whoever answers",
                in_phase(InFlight::Recover { ordinal: 0 }, &[], None),
                Decision::Act(Step::Recover {
                    ordinal: 0,
                    lost: vec![1, 2],
                }),
            ),
            (
                "the survivor's pod is not yet on the template with the flag: restart it",
                in_phase(
                    InFlight::ForceNewCluster { ordinal: 0 },
                    &[],
                    Some(majority_silent()),
                ),
                Decision::Act(Step::RestartMember { ordinal: 0 }),
            ),
            (
                "the survivor starting with the flag: wait",
                in_phase(InFlight::ForceNewCluster { ordinal: 0 }, &[0], None),
                wait(Reason::RecoveryInProgress, ""),
            ),
            (
                "the survivor leads alone: the flag comes off",
                in_phase(InFlight::ForceNewCluster { ordinal: 0 }, &[0], alone()),
                Decision::Act(Step::EndForceNewCluster { ordinal: 0 }),
            ),
            (
                "its pod still carries the flag: restart it",
                in_phase(InFlight::EndForceNewCluster { ordinal: 0 }, &[0], alone()),
                Decision::Act(Step::RestartMember { ordinal: 0 }),
            ),
            (
                "another pod created while the template carried the flag: restarted too",
                in_phase(InFlight::EndForceNewCluster { ordinal: 0 }, &[2], alone()),
                Decision::Act(Step::RestartMember { ordinal: 2 }),
            ),
            (
                "restarted without the flag, leading alone: the recovery is over",
                in_phase(InFlight::EndForceNewCluster { ordinal: 0 }, &[], alone()),
                Decision::Act(Step::ClearInFlight),
            ),
            (
                "restarted without the flag, not answering yet: wait",
                in_phase(InFlight::EndForceNewCluster { ordinal: 0 }, &[], None),
                wait(Reason::RecoveryInProgress, ""),
            ),
            (
                "then the lost members are added back, the first as a learner",
                Facts {
                    rejoin_pending: vec![1, 2],
                    ..facts(3, alone())
                },
                Decision::Act(Step::AddLearner { ordinal: 1 }),
            ),
            (
                "a lost member added back is not wiped again: the recovery emptied its volume",
                Facts {
                    rejoin_pending: vec![1, 2],
                    ..facts(3, Some(learner_back.clone()))
                },
                wait(Reason::LearnerCatchingUp, ""),
            ),
            (
                "the next is added only once the learner before it is promoted",
                Facts {
                    rejoin_pending: vec![2],
                    ..facts(3, Some(learner_back))
                },
                wait(Reason::LearnerCatchingUp, ""),
            ),
        ];
        assert_decisions(rows);
    }

    /// Each row: a name, the gathered facts, and the decision expected. With no member
    /// answering, a restore in place from the newest backup is taken only on request, only
    /// when no member pod is Ready by its own probes and a backup is recorded; a member that
    /// answers is recovered from instead; the restore ends once every member votes and one leads.
    #[test]
    fn a_cluster_with_no_member_left_is_restored_in_place_only_on_request() {
        let newest = || {
            Some(RecoveryRequest {
                member: NEWEST_BACKUP.into(),
                ordinal: None,
                done: None,
                expired: false,
            })
        };
        let none_answer = || Facts {
            recovery: newest(),
            newest_backup: Some("EtcdBackup nightly".into()),
            statefulset_replicas: Some(3),
            ..facts(3, None)
        };
        let restoring = |members: Option<Vec<MemberFact>>, templates: Templates| Facts {
            in_flight: Some(InFlight::RestoreForming),
            templates,
            ..facts(3, members)
        };
        let all_current = || Templates::Known {
            outdated: Default::default(),
            current: [0, 1, 2].into(),
        };
        let mut leaderless = healthy(3);
        leaderless[0].leader = false;
        let mut two_lead_one_unknown = healthy(3);
        two_lead_one_unknown[2].observation.health = unknown();
        let rows: Vec<(&str, Facts, Decision)> = vec![
            (
                "no request: nothing is wiped",
                Facts {
                    recovery: None,
                    ..none_answer()
                },
                wait(Reason::NoMemberReachable, ""),
            ),
            (
                "requested, no backup recorded: refused",
                Facts {
                    newest_backup: None,
                    ..none_answer()
                },
                wait(Reason::RecoveryRefused, ""),
            ),
            (
                "a member pod Ready by its own probes: the operator may be cut off, refused",
                Facts {
                    ready_pods: [1].into(),
                    ..none_answer()
                },
                wait(Reason::RecoveryRefused, ""),
            ),
            (
                "requested with a survivor: recover from it instead",
                Facts {
                    recovery: newest(),
                    ..facts(3, Some(majority_silent()))
                },
                wait(Reason::RecoveryRefused, ""),
            ),
            (
                "requested, no member answers, none Ready, a backup recorded: every member wiped",
                none_answer(),
                Decision::Act(Step::RestoreInPlace {
                    members: 3,
                    backup: "EtcdBackup nightly".into(),
                }),
            ),
            (
                "recorded, the restore template not yet taken by the StatefulSet: nothing wiped",
                Facts {
                    in_flight: Some(InFlight::RestoreInPlace),
                    ..facts(3, None)
                },
                wait(Reason::RecoveryInProgress, ""),
            ),
            (
                "the restore template taken: every member wiped at once",
                Facts {
                    in_flight: Some(InFlight::RestoreInPlace),
                    statefulset_replicas: Some(3),
                    templates: Templates::Known {
                        outdated: [(0, "a".to_string()), (1, "b".to_string()), (2, "c".to_string())].into(),
                        current: Default::default(),
                    },
                    ..facts(3, None)
                },
                Decision::Act(Step::WipeForRestore { members: 3 }),
            ),
            (
                "a pod recreated from the template before the restore: wiped again",
                restoring(
                    None,
                    Templates::Known {
                        outdated: [(1, "uid-1".to_string())].into(),
                        current: [0, 2].into(),
                    },
                ),
                Decision::Act(Step::WipeMember {
                    ordinal: 1,
                    pod_uid: Some("uid-1".into()),
                }),
            ),
            (
                "an outdated pod Ready by its own probes: it may hold the restored cluster's writes, not wiped",
                Facts {
                    ready_pods: [1].into(),
                    ..restoring(
                        None,
                        Templates::Known {
                            outdated: [(1, "uid-1".to_string())].into(),
                            current: [0, 2].into(),
                        },
                    )
                },
                wait(Reason::RecoveryInProgress, ""),
            ),
            (
                "the template changed while the restored cluster leads with one pod still Pending: nothing wiped",
                Facts {
                    ready_pods: [0, 1].into(),
                    ..restoring(
                        Some(two_lead_one_unknown.clone()),
                        Templates::Known {
                            outdated: [
                                (0, "uid-0".to_string()),
                                (1, "uid-1".to_string()),
                                (2, "uid-2".to_string()),
                            ]
                            .into(),
                            current: Default::default(),
                        },
                    )
                },
                wait(Reason::RecoveryInProgress, ""),
            ),
            (
                "restoring, no member answers yet: wait",
                restoring(None, Templates::Unknown),
                wait(Reason::RecoveryInProgress, ""),
            ),
            (
                "restored members electing: wait",
                restoring(Some(leaderless), Templates::Unknown),
                wait(Reason::RecoveryInProgress, ""),
            ),
            (
                "every member votes and one leads, templates not known: wait",
                restoring(Some(healthy(3)), Templates::Unknown),
                wait(Reason::RecoveryInProgress, ""),
            ),
            (
                "every member votes and one leads, every pod on the restore template: over",
                restoring(Some(healthy(3)), all_current()),
                Decision::Act(Step::ClearInFlight),
            ),
        ];
        assert_decisions(rows);
    }

    #[test]
    fn a_new_pod_template_rolls_like_an_upgrade_and_a_recorded_restart_waits_for_the_pod() {
        let on = |outdated: &[usize]| Facts {
            templates: Templates::Known {
                outdated: outdated.iter().map(|o| (*o, format!("uid-{o}"))).collect(),
                current: (0..3).filter(|o| !outdated.contains(o)).collect(),
            },
            ..facts(3, Some(healthy(3)))
        };
        assert_eq!(
            decide(&on(&[0, 1, 2])),
            Decision::Act(Step::Upgrade { ordinal: 1 })
        );
        assert_eq!(decide(&on(&[0, 2])), Decision::Act(Step::Upgrade { ordinal: 2 }));
        assert_eq!(
            decide(&on(&[0])),
            Decision::Act(Step::MoveLeader { from: 0, to_id: 101 }),
            "the leader hands over to a member on the current template before it restarts"
        );
        assert_eq!(decide(&on(&[])), Decision::Settled);
        // Recorded, the member still answers on the same version, but its pod was not
        // restarted yet: taken again rather than cleared.
        let recorded = Facts {
            in_flight: Some(InFlight::Upgrade { ordinal: 1 }),
            ..on(&[0, 1, 2])
        };
        assert_eq!(decide(&recorded), Decision::Act(Step::Upgrade { ordinal: 1 }));
        let restarted = Facts {
            in_flight: Some(InFlight::Upgrade { ordinal: 1 }),
            ..on(&[0, 2])
        };
        // Its member answers on the new pod, but the pod is not Ready by its own probes yet:
        // still restarting, so the next member's restart cannot overlap it.
        assert_eq!(
            decide(&restarted),
            wait(
                Reason::UpgradeInProgress,
                "member 1 answers on version 3.5.17; its pod is not Ready by its own probes yet".to_string()
            )
        );
        let ready = Facts {
            ready_pods: [0, 1, 2].into(),
            ..restarted
        };
        assert_eq!(decide(&ready), Decision::Act(Step::ClearInFlight));
        // Its old pod is terminating (neither outdated nor current) while etcd in it still
        // answers: not done yet, or the next member could go down with it.
        let terminating = Facts {
            in_flight: Some(InFlight::Upgrade { ordinal: 1 }),
            templates: Templates::Known {
                outdated: [(0, "uid-0".to_string()), (2, "uid-2".to_string())].into(),
                current: Default::default(),
            },
            ..facts(3, Some(healthy(3)))
        };
        assert_eq!(reason(&decide(&terminating)), "UpgradeInProgress");
    }

    #[test]
    fn upgrades_go_one_member_at_a_time_leader_last() {
        let upgraded = |mut members: Vec<MemberFact>, ordinals: &[usize]| {
            for m in &mut members {
                if ordinals.contains(&m.ordinal) {
                    m.version = Some(V_NEW.into());
                }
            }
            members
        };
        let at = |members: Vec<MemberFact>| Facts {
            desired_version: V_NEW.into(),
            ..facts(3, Some(members))
        };
        assert_eq!(
            decide(&at(healthy(3))),
            Decision::Act(Step::Upgrade { ordinal: 1 })
        );
        assert_eq!(
            decide(&at(upgraded(healthy(3), &[1]))),
            Decision::Act(Step::Upgrade { ordinal: 2 })
        );
        assert_eq!(
            decide(&at(upgraded(healthy(3), &[1, 2]))),
            Decision::Act(Step::MoveLeader { from: 0, to_id: 101 }),
            "the leader hands over before it restarts"
        );
        let mut moved = upgraded(healthy(3), &[1, 2]);
        moved[0].leader = false;
        moved[1].leader = true;
        assert_eq!(decide(&at(moved)), Decision::Act(Step::Upgrade { ordinal: 0 }));
        assert_eq!(decide(&at(upgraded(healthy(3), &[0, 1, 2]))), Decision::Settled);

        let mut unknown_peer = healthy(3);
        unknown_peer[2].observation.health = unknown();
        assert_eq!(
            reason(&decide(&at(unknown_peer))),
            "MemberUnknown",
            "no restart while a peer is Unknown"
        );

        let single = Facts {
            desired_version: V_NEW.into(),
            ..facts(1, Some(healthy(1)))
        };
        assert_eq!(
            reason(&decide(&single)),
            "QuorumAtRisk",
            "a lone member cannot restart safely"
        );
    }

    #[test]
    fn a_recorded_step_is_resumed_not_repeated_blindly() {
        let with = |in_flight: InFlight, members: Vec<MemberFact>| Facts {
            in_flight: Some(in_flight),
            ..facts(3, Some(members))
        };
        // The removal went through before the crash: just clear the record.
        assert_eq!(
            decide(&with(InFlight::Remove { ordinal: 3, id: 103 }, healthy(3))),
            Decision::Act(Step::ClearInFlight)
        );
        // It did not: repeat it, through the gate again.
        assert_eq!(
            decide(&with(InFlight::Remove { ordinal: 3, id: 103 }, healthy(4))),
            Decision::Act(Step::Remove { ordinal: 3, id: 103 })
        );
        let mut unknown_peer = healthy(4);
        unknown_peer[0].observation.health = unknown();
        assert_eq!(
            reason(&decide(&with(
                InFlight::Remove { ordinal: 3, id: 103 },
                unknown_peer
            ))),
            "MemberUnknown"
        );
        // The learner was added: clear; it was not: add it (once: the add checks first).
        let mut with_learner = healthy(3);
        with_learner.push(MemberFact {
            learner: true,
            started: false,
            ..member(3, unknown())
        });
        assert_eq!(
            decide(&with(InFlight::AddLearner { ordinal: 3 }, with_learner)),
            Decision::Act(Step::ClearInFlight)
        );
        assert_eq!(
            decide(&with(InFlight::AddLearner { ordinal: 3 }, healthy(3))),
            Decision::Act(Step::AddLearner { ordinal: 3 })
        );
        // A recorded promotion is asked again only while the learner and every voter are
        // healthy, as a fresh one.
        let learning = |learner_health: Health, voter_1_health: Health| {
            let mut members = healthy(3);
            members[1].observation.health = voter_1_health;
            members.push(MemberFact {
                learner: true,
                ..member(3, learner_health)
            });
            with(InFlight::Promote { ordinal: 3, id: 103 }, members)
        };
        assert_eq!(
            decide(&learning(Health::Healthy, Health::Healthy)),
            Decision::Act(Step::Promote { ordinal: 3, id: 103 })
        );
        assert_eq!(
            reason(&decide(&learning(unhealthy(), Health::Healthy))),
            "LearnerCatchingUp"
        );
        assert_eq!(
            reason(&decide(&learning(Health::Healthy, unknown()))),
            "MemberUnknown"
        );
        // An upgrade is in flight until the member is back, healthy, on the new version.
        let upgrading = Facts {
            desired_version: V_NEW.into(),
            ..with(InFlight::Upgrade { ordinal: 1 }, healthy(3))
        };
        assert_eq!(reason(&decide(&upgrading)), "UpgradeInProgress");
        // Recorded, but the pod was never restarted (the operator stopped first): again.
        let never_restarted = Facts {
            pod_versions: [(1, V_OLD.to_string())].into(),
            ..upgrading.clone()
        };
        assert_eq!(
            decide(&never_restarted),
            Decision::Act(Step::Upgrade { ordinal: 1 })
        );
        // Restarted with the new version and still starting: wait.
        let restarting = Facts {
            pod_versions: [(1, V_NEW.to_string())].into(),
            ..upgrading
        };
        assert_eq!(reason(&decide(&restarting)), "UpgradeInProgress");
    }

    #[test]
    fn downgrades_and_minor_skips_are_refused_patch_changes_allowed() {
        assert_eq!(unsupported_change("3.5.17", "3.6.16"), None);
        assert_eq!(
            unsupported_change("3.6.16", "3.6.15"),
            None,
            "patch releases of one minor interoperate"
        );
        assert!(
            unsupported_change("3.6.16", "3.5.17")
                .unwrap()
                .contains("downgrade")
        );
        assert!(
            unsupported_change("3.5.17", "3.7.0")
                .unwrap()
                .contains("skips a minor")
        );
        let downgrade = Facts {
            desired_version: "3.4.0".into(),
            ..facts(3, Some(healthy(3)))
        };
        assert_eq!(
            reason(&decide(&downgrade)),
            "UnsupportedVersionChange",
            "no member is restarted"
        );
    }

    #[test]
    fn every_membership_and_disruptive_step_is_recorded_before_it_is_taken() {
        for step in [
            Step::AddLearner { ordinal: 1 },
            Step::Promote { ordinal: 1, id: 1 },
            Step::Remove { ordinal: 1, id: 1 },
            Step::Replace { ordinal: 1, id: 1 },
            Step::Upgrade { ordinal: 1 },
            Step::Recover {
                ordinal: 1,
                lost: vec![0],
            },
            Step::EndForceNewCluster { ordinal: 1 },
        ] {
            assert!(step.in_flight().is_some(), "{step:?}");
        }
        assert_eq!(Step::StartPod { ordinal: 1 }.in_flight(), None);
    }
}
