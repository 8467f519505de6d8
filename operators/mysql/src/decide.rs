//! The decision: given what was observed, the one next step, or why to wait. Pure: no I/O,
//! no clock reads (the caller passes `now`), so every rule is table-tested.
//!
//! The rules, in order:
//! 1. A step in flight is finished before anything else is considered.
//! 2. Pods come first: the StatefulSet grows to the desired size before members are wired.
//! 3. The primary: a cluster created from a backup opens none until the backup's snapshot is
//!    restored into ordinal 0, which must be empty (the restore never writes over data);
//!    with none recorded, the most advanced member is opened once every started
//!    member answered; a recorded primary that restarted read-only is reopened; a primary that
//!    is Unhealthy **as its replicas testify** (their IO threads lost it) is failed over to the
//!    replica whose GTIDs include every other replica's, once every replica answered. A primary
//!    that is merely Unknown to the operator is waited for, never failed over.
//! 4. Replicas: a member with transactions the primary lacks (errant) is reported and kept out
//!    of service, never rewound; an empty member is seeded from a consistent snapshot before it
//!    replicates; a member not replicating from the primary is pointed at it; semi-synchronous
//!    acknowledgement is set as the spec asks.
//! 5. Scale in removes the highest ordinal, only while every other member is Healthy; a leaving
//!    primary is first switched over.
//! 6. A requested switchover, only while every member is Healthy.
//! 7. A managed roll onto the StatefulSet's current pod template (a version bump, a changed
//!    override, a new operator release): pods update only when the operator deletes them, one
//!    outdated replica at a time while every other member is Healthy and every replica is
//!    caught up, then the primary's role is switched over to a current replica, and the old
//!    primary goes last.

use std::time::{Duration, Instant};

use quorum_core::{
    availability::{
        gate::{self, Disruption, Freshness, GateInput, Quorum, Verdict},
        health::{Health, Observation},
    },
    recovery::{RECOVER_ANNOTATION, RecoveryRequest, request_command},
    repair::PodRepair,
    rollout::{RollTarget, Templates},
};

pub use crate::reasons::Reason;
use crate::{admin::gtid::GtidPosition, crd::SWITCHOVER_ANNOTATION, resources::member_name};

/// What a reachable member reported, reduced to what the decision needs.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerState {
    pub read_only: bool,
    pub executed: GtidPosition,
    /// Replication as configured on the member; `None` when it has no source.
    pub replication: Option<Replication>,
    pub semi_sync_source: bool,
    pub semi_sync_replica: bool,
    /// How long it keeps binary logs; 0 for ever.
    pub binlog_expire_seconds: u32,
}

/// A member's replication from its source.
#[derive(Clone, Debug, PartialEq)]
pub struct Replication {
    /// The ordinal of the member it replicates from, when the source is one of the cluster's.
    pub source: Option<usize>,
    pub io_running: bool,
    pub sql_running: bool,
    /// The IO thread positively reports the source gone (connection refused, lost).
    pub source_lost: bool,
    pub lag_seconds: Option<u64>,
    /// What it has received from its source (applied or still in its relay log).
    pub received: GtidPosition,
}

impl Replication {
    pub fn running(&self) -> bool {
        self.io_running && self.sql_running
    }
}

/// One member as observed in this pass.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberFact {
    pub ordinal: usize,
    pub health: Health,
    pub observed_at: Instant,
    /// `Some` when the member answered.
    pub state: Option<ServerState>,
}

impl MemberFact {
    /// How the safety gate sees this member: every member of a replication cluster counts.
    fn observation(&self) -> Observation {
        Observation {
            member: format!("member {}", self.ordinal),
            health: self.health.clone(),
            voting: true,
            observed_at: self.observed_at,
        }
    }

    fn healthy_state(&self, now: Instant, freshness: Duration) -> Option<&ServerState> {
        let fresh = now.saturating_duration_since(self.observed_at) <= freshness;
        (fresh && self.health.is_healthy())
            .then_some(self.state.as_ref())
            .flatten()
    }
}

/// A step recorded in status before it is taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InFlight {
    Failover {
        from: usize,
        to: usize,
    },
    Switchover {
        from: usize,
        to: usize,
    },
    RemoveMember {
        ordinal: usize,
    },
    /// A backup being restored into `ordinal`: what that member holds is the restore's own
    /// doing, so taking the restore again over it is allowed.
    Restore {
        ordinal: usize,
    },
    /// `ordinal`'s pod deleted so it comes back on the current template.
    Restart {
        ordinal: usize,
    },
}

/// The member a backup is restored into: the first primary of a new cluster.
pub const RESTORE_TARGET: usize = 0;

/// A cluster created from a backup whose restore is not recorded as done.
#[derive(Clone, Debug, PartialEq)]
pub enum Restore {
    /// The backup does not exist or has no stored snapshot (the message says which): no
    /// primary is opened, so an empty cluster never stands in for the one asked for.
    SourceNotReady(String),
    /// The snapshot is stored; `position` is the GTID position it was taken at. For a
    /// physical copy (`copy`), what the first member's restore init container reported.
    Ready {
        backup: String,
        position: GtidPosition,
        copy: Option<CopyState>,
    },
    /// The last attempts failed and the next may not start yet (the message says why and when).
    RetryLater(String),
    /// The backup will hold a physical copy and holds none yet (the message says why): no
    /// member is made, since a started server initialises the data directory the copy must
    /// find empty.
    CopyAwaited(String),
}

/// Whether the first member holds a physical copy its init container restored before its
/// server started: the one thing that tells its files are the copy's, and not a data directory
/// its server initialised empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopyState {
    Restored,
    /// Not (yet), and why.
    NotRestored(String),
}

/// Everything the decision looks at.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The cluster's name: what a person types in a command the cluster asks them to run.
    pub cluster: String,
    pub desired_members: usize,
    /// The StatefulSet's replicas; `None` when it does not exist yet.
    pub statefulset_replicas: Option<usize>,
    /// Members `0..statefulset_replicas`, by ordinal.
    pub members: Vec<MemberFact>,
    /// Which member pods run the StatefulSet's current template.
    pub templates: Templates,
    /// The primary recorded in status.
    pub primary: Option<usize>,
    pub in_flight: Option<InFlight>,
    /// How long the step in flight has been under way (`status.inFlight.startedAt`, or the
    /// creation of its member's pod when that came later).
    pub in_flight_age: Option<Duration>,
    /// A switchover asked for through the annotation.
    pub switchover_to: Option<usize>,
    /// `Some` while a cluster created from a backup has not been restored.
    pub restore: Option<Restore>,
    /// The member a backup was restored into, while no primary was opened yet: the first
    /// primary, whatever the others hold (volumes kept from a deleted cluster of the same name).
    pub restored_into: Option<usize>,
    /// Whether commits should wait for a replica.
    pub semi_sync: bool,
    /// How long members keep binary logs while every member replicates.
    pub binlog_expire_seconds: u32,
    /// A repair a person asked for, while the request stands.
    pub repair: Option<PodRepair>,
    /// A recovery a person asked for, while the request stands.
    pub recovery: Option<RecoveryRequest>,
    /// The recorded primary's executed GTIDs as last seen while it accepted writes
    /// (`status.primaryLastOpen`).
    pub primary_last_open: Option<GtidPosition>,
    /// The recorded primary's data claim is another than the one it was last seen open on.
    pub primary_volume_replaced: bool,
    pub freshness: Duration,
    pub now: Instant,
}

/// The one next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Set the StatefulSet's replicas (pods only; no member is touched).
    ScalePods { replicas: usize },
    /// Make `ordinal` the primary of a cluster that has none: read-write, no source.
    OpenPrimary { ordinal: usize },
    /// The primary is down: fence it, promote `to`.
    Failover { from: usize, to: usize },
    /// Hand the primary role over without losing a write: fence `from`, wait for `to` to
    /// apply everything, promote `to`.
    Switchover { from: usize, to: usize },
    /// Copy a consistent snapshot of the primary into an empty member, then replicate.
    SeedMember { ordinal: usize },
    /// Point `ordinal` at the primary and start replicating.
    StartReplication { ordinal: usize },
    /// Turn semi-synchronous acknowledgement on or off on `ordinal`, for its role.
    SetSemiSync { ordinal: usize, on: bool },
    /// Keep `ordinal`'s binary logs for `seconds` (0: for ever).
    SetBinlogExpiry { ordinal: usize, seconds: u32 },
    /// Make `ordinal`, writable but not the primary (a former primary the failover could not
    /// reach), read-only, and close its clients' connections.
    FenceMember { ordinal: usize },
    /// Stop and reset replication on the highest member, then remove its pod.
    RemoveMember { ordinal: usize },
    /// Stream the backup's snapshot into `ordinal` (empty, or holding an interrupted restore
    /// when `resume`), verify it, and make the backup's position the member's GTID history. The
    /// member stays read-only; it is opened as the primary by the next step.
    Restore { ordinal: usize, resume: bool },
    /// Delete `ordinal`'s pod: the StatefulSet recreates it on its current template, on the
    /// same volume.
    RestartMember { ordinal: usize },
    /// Delete a replica's claim and pod (exactly the pod observed), so it comes back empty and
    /// is seeded again from the primary: a repair asked for.
    WipeMember { ordinal: usize, pod_uid: String },
    /// The recorded step is complete.
    ClearInFlight,
}

impl Step {
    /// What to record in status before taking the step.
    pub fn in_flight(&self) -> Option<InFlight> {
        match *self {
            Step::Failover { from, to } => Some(InFlight::Failover { from, to }),
            Step::Switchover { from, to } => Some(InFlight::Switchover { from, to }),
            Step::RemoveMember { ordinal } => Some(InFlight::RemoveMember { ordinal }),
            Step::Restore { ordinal, .. } => Some(InFlight::Restore { ordinal }),
            Step::RestartMember { ordinal } => Some(InFlight::Restart { ordinal }),
            _ => None,
        }
    }
}

/// Why nothing is done now: a reason from [`Reason`] and a sentence for people.
pub type Wait = quorum_core::pass::Wait<Reason>;

/// The decision: a step, a wait, or `Settled` (the cluster matches its spec).
pub type Decision = quorum_core::pass::Decision<Step, Reason>;

fn wait(reason: Reason, message: impl Into<String>) -> Decision {
    Decision::wait(reason, message)
}

/// Decides the next step.
pub fn decide(facts: &Facts) -> Decision {
    if let Some(in_flight) = &facts.in_flight {
        return continue_in_flight(facts, in_flight);
    }
    if let Some(Restore::CopyAwaited(why)) = &facts.restore {
        return wait(Reason::RestoreSourceNotReady, why.clone());
    }
    let started = facts.statefulset_replicas.unwrap_or(0);
    if started < facts.desired_members {
        return Decision::Act(Step::ScalePods {
            replicas: facts.desired_members,
        });
    }
    let primary = match choose_primary(facts) {
        Ok(primary) => primary,
        Err(decision) => return decision,
    };
    if let Some(ordinal) = writable_besides(facts, primary) {
        return Decision::Act(Step::FenceMember { ordinal });
    }
    if let Some(step) = binlog_expiry(facts, primary) {
        return Decision::Act(step);
    }
    if let Some(decision) = wire_replicas(facts, primary) {
        return decision;
    }
    if started > facts.desired_members {
        return scale_in(facts, primary, started - 1);
    }
    if let Some(target) = facts.switchover_to.filter(|target| *target != primary) {
        return switchover(facts, primary, target);
    }
    if let Some(repair) = &facts.repair
        && let Some(decision) = repair_member(facts, primary, repair)
    {
        return decision;
    }
    roll(facts, primary)
}

/// The next step of a repair a person asked for: the named replica is wiped through the gate,
/// once per request (the pod recorded as wiped is wiped again only while it is still that pod),
/// and is seeded again from the primary as an empty member is. The primary is never wiped: a
/// switchover comes first, asked for by the person. `None` once the request is done with.
fn repair_member(facts: &Facts, primary: usize, repair: &PodRepair) -> Option<Decision> {
    let ordinal = match repair.target(facts.desired_members) {
        Ok(ordinal) => ordinal,
        Err(refusal) => return Some(wait(Reason::RepairRefused, refusal)),
    };
    if repair.wiped() {
        return None;
    }
    if ordinal == primary {
        return Some(wait(
            Reason::RepairRefused,
            format!(
                "member {ordinal} is the primary and is never rebuilt in place: switch over first \
                 (annotation {SWITCHOVER_ANNOTATION} naming a replica), then the repair is taken"
            ),
        ));
    }
    if let Verdict::Wait(blocking) = gate_check(facts, ordinal, Disruption::Restart) {
        return Some(wait(
            Reason::RestartBlocked,
            format!(
                "{blocking}; member {ordinal} is rebuilt on request only while all the others are Healthy"
            ),
        ));
    }
    // An answering replica counts as Healthy while it catches up (a member rebuilt a moment
    // ago, a lagging one): wiping another then would leave the acknowledged writes on the
    // primary alone.
    let behind = replicas_behind(facts, primary, ordinal);
    if !behind.is_empty() {
        return Some(wait(
            Reason::RestartBlocked,
            format!(
                "member {ordinal} is rebuilt on request once every other replica has caught up: {}",
                behind.join(", ")
            ),
        ));
    }
    let Some(pod_uid) = repair.pod_uid.clone() else {
        return Some(wait(
            Reason::RestartInProgress,
            format!("member {ordinal} is to be rebuilt and has no pod yet"),
        ));
    };
    Some(Decision::Act(Step::WipeMember { ordinal, pod_uid }))
}

/// Whether member `ordinal` serves again as a replica of `primary` that has caught up: what a
/// member rebuilt on request must do before its repair is done.
pub fn caught_up_replica(facts: &Facts, ordinal: usize, primary: usize) -> bool {
    let primary_executed = member(facts, primary)
        .and_then(|m| m.healthy_state(facts.now, facts.freshness))
        .map(|state| &state.executed);
    member(facts, ordinal)
        .and_then(|m| m.healthy_state(facts.now, facts.freshness))
        .is_some_and(|state| {
            state.replication.is_some()
                && primary_executed.is_some_and(|executed| {
                    state.held().transactions_behind(executed) <= CAUGHT_UP_TRANSACTIONS
                })
        })
}

/// The first answering member but `target` and `except` holding a transaction `target` does
/// not hold; `None` while `target` answers holding everything the others hold, or does not
/// answer.
fn holds_more_than(facts: &Facts, target: usize, except: usize) -> Option<usize> {
    let held = member(facts, target)?
        .healthy_state(facts.now, facts.freshness)?
        .held();
    facts
        .members
        .iter()
        .filter(|m| m.ordinal != target && m.ordinal != except)
        .find(|m| {
            m.healthy_state(facts.now, facts.freshness)
                .is_some_and(|state| !held.includes(&state.held()))
        })
        .map(|m| m.ordinal)
}

/// A step recorded in status: taken again until its effect is observed, then cleared.
fn continue_in_flight(facts: &Facts, in_flight: &InFlight) -> Decision {
    match *in_flight {
        InFlight::Failover { to, .. } | InFlight::Switchover { to, .. } => {
            let promoted = member(facts, to)
                .and_then(|m| m.healthy_state(facts.now, facts.freshness))
                .is_some_and(|state| !state.read_only && state.replication.is_none());
            let target_answers = member(facts, to)
                .and_then(|m| m.healthy_state(facts.now, facts.freshness))
                .is_some();
            if promoted && facts.primary == Some(to) {
                Decision::Act(Step::ClearInFlight)
            } else if let (InFlight::Switchover { from, .. }, false) = (in_flight, target_answers) {
                // The target may or may not have been opened: reopening the old primary now
                // could leave two writable. Writes wait until the target answers again.
                wait(
                    Reason::SwitchoverTargetUnknown,
                    format!(
                        "switchover from member {from} to member {to}: the target stopped answering; the old primary stays read-only until it answers"
                    ),
                )
            } else if let InFlight::Failover { from, .. } = *in_flight
                && let Some(holder) = holds_more_than(facts, to, from)
            {
                // Chosen when recorded, but it may have come back since on a new, empty volume:
                // opened now it would serve without what the others hold.
                wait(
                    Reason::FailoverBlocked,
                    format!(
                        "the failover from member {from} to member {to} is recorded, but member {holder} now holds transactions member {to} lacks (its volume replaced?); it is not opened as the primary: name the member to serve from with {RECOVER_ANNOTATION} (docs/mysql.md, Disaster recovery)"
                    ),
                )
            } else {
                match *in_flight {
                    InFlight::Failover { from, to } => Decision::Act(Step::Failover { from, to }),
                    InFlight::Switchover { from, to } => Decision::Act(Step::Switchover { from, to }),
                    InFlight::RemoveMember { .. } | InFlight::Restore { .. } | InFlight::Restart { .. } => {
                        unreachable!("matched above")
                    }
                }
            }
        }
        InFlight::RemoveMember { ordinal } => {
            if facts
                .statefulset_replicas
                .is_some_and(|replicas| replicas <= ordinal)
            {
                Decision::Act(Step::ClearInFlight)
            } else {
                Decision::Act(Step::RemoveMember { ordinal })
            }
        }
        InFlight::Restart { ordinal } => {
            if facts.templates.is_outdated(ordinal) {
                // Recorded, but the pod was not deleted (the operator stopped first, or the
                // delete failed): taken again, through the gate again.
                return restart(facts, ordinal);
            }
            let back = facts.templates.is_current(ordinal)
                && member(facts, ordinal)
                    .and_then(|m| m.healthy_state(facts.now, facts.freshness))
                    .is_some();
            match facts.in_flight_age {
                _ if back => Decision::Act(Step::ClearInFlight),
                Some(age) if age > RESTART_STUCK_AFTER => wait(
                    Reason::RestartStuck,
                    format!(
                        "member {ordinal} has not come back {} minutes after its restart onto the current pod \
                         template; nothing else is restarted meanwhile. The PodsFailing condition and \
                         `kubectl describe pod {pod}` say why (image, configuration, volume, node); once the \
                         cause is fixed in the cluster's spec, `kubectl delete pod {pod}` makes the pod again \
                         from the fixed template",
                        age.as_secs() / 60,
                        pod = member_name(&facts.cluster, ordinal),
                    ),
                ),
                _ => wait(
                    Reason::RestartInProgress,
                    format!("member {ordinal} is restarting onto the current pod template"),
                ),
            }
        }
        InFlight::Restore { ordinal } => match &facts.restore {
            // The restore is recorded as done: only the record in flight is left.
            None => Decision::Act(Step::ClearInFlight),
            Some(Restore::SourceNotReady(why) | Restore::CopyAwaited(why)) => {
                wait(Reason::RestoreSourceNotReady, why.clone())
            }
            Some(Restore::Ready { position, copy, .. }) => {
                restore_into(facts, ordinal, position, copy.as_ref(), true)
            }
            Some(Restore::RetryLater(why)) => wait(Reason::StepFailed, why.clone()),
        },
    }
}

/// The restore of a cluster created from a backup: into [`RESTORE_TARGET`], once the backup
/// is stored and the member answers, only while it is empty.
fn restore(facts: &Facts, restore: &Restore) -> Decision {
    match restore {
        Restore::SourceNotReady(why) | Restore::CopyAwaited(why) => {
            wait(Reason::RestoreSourceNotReady, why.clone())
        }
        Restore::Ready { position, copy, .. } => {
            restore_into(facts, RESTORE_TARGET, position, copy.as_ref(), false)
        }
        Restore::RetryLater(why) => wait(Reason::StepFailed, why.clone()),
    }
}

/// Restores into `ordinal` if it is a fresh member: read-only, not replicating, with no GTID
/// history (or, when resuming, none but the restore's own). The step itself also checks that
/// a member it was not already restoring holds no table.
///
/// A physical copy is in the member's files before its server starts: the step then gives the
/// server the copy's history, once the member's init container reported the copy restored (a
/// member whose server initialised an empty directory holds no copy). The copy's own history
/// (a copied replica's `gtid_slave_pos`) is part of the position, so is the member's.
fn restore_into(
    facts: &Facts,
    ordinal: usize,
    position: &GtidPosition,
    copy: Option<&CopyState>,
    resume: bool,
) -> Decision {
    if let Some(CopyState::NotRestored(why)) = copy {
        return wait(
            Reason::RestoreSourceNotReady,
            format!("member {ordinal} holds no restored copy of the backup's files: {why}"),
        );
    }
    let Some(state) = member(facts, ordinal).and_then(|m| m.healthy_state(facts.now, facts.freshness)) else {
        return wait(
            Reason::MembersStarting,
            format!("member {ordinal} has not answered yet; the backup is restored into it once it does"),
        );
    };
    let own_history =
        state.executed.is_empty() || ((resume || copy.is_some()) && position.includes(&state.executed));
    if state.replication.is_some() || !state.read_only || !own_history {
        return wait(
            Reason::RestoreRefused,
            format!(
                "member {ordinal} is not a fresh member ({}); a backup is restored only into an empty member, never over data",
                if !own_history {
                    format!("it executed {}", state.executed)
                } else if state.replication.is_some() {
                    "it has a replication source".to_string()
                } else {
                    "it accepts writes".to_string()
                }
            ),
        );
    }
    Decision::Act(Step::Restore { ordinal, resume })
}

/// The primary to wire replicas to, or the decision to take about the primary first.
fn choose_primary(facts: &Facts) -> Result<usize, Decision> {
    let Some(primary) = facts.primary else {
        if let Some(pending) = &facts.restore {
            return Err(restore(facts, pending));
        }
        return open_first_primary(facts);
    };
    let Some(fact) = member(facts, primary) else {
        return Err(recover_on_request(
            facts,
            primary,
            wait(
                Reason::PrimaryMissing,
                format!(
                    "the recorded primary (ordinal {primary}) has no pod; if it is lost for good, {} (docs/mysql.md, Disaster recovery)",
                    match survivor_holding_everything(facts, primary) {
                        Some(survivor) => format!(
                            "promote member {survivor}, which holds every transaction the members that answer hold, with `{}`",
                            request_command(
                                "MySQLCluster",
                                &facts.cluster,
                                &member_name(&facts.cluster, survivor)
                            )
                        ),
                        None => format!("name the survivor to serve from with {RECOVER_ANNOTATION}"),
                    }
                ),
            ),
        ));
    };
    match &fact.health {
        Health::Healthy => match fact.healthy_state(facts.now, facts.freshness) {
            Some(state) if state.read_only || state.replication.is_some() => {
                // Status names it primary and no failover happened: it restarted read-only.
                Err(reopen_primary(facts, primary, state))
            }
            Some(_) => Ok(primary),
            None => Err(wait(
                Reason::StaleObservation,
                format!("the primary (ordinal {primary}) was not observed recently"),
            )),
        },
        Health::Unknown(why) => Err(recover_on_request(
            facts,
            primary,
            wait(
                Reason::PrimaryUnknown,
                format!(
                    "the primary (ordinal {primary}) is unreachable from the operator but its replicas do not report it down; no failover: {why}"
                ),
            ),
        )),
        Health::Unhealthy(why) => Err(match failover(facts, primary, why) {
            blocked @ Decision::Wait(_) => recover_on_request(facts, primary, blocked),
            decision => decision,
        }),
    }
}

/// The primary does not answer and the operator waits (`blocked`): no pod, unreachable with
/// no majority testifying, or no failover possible while a replica does not answer. A person
/// who knows the primary is lost for good may name the survivor to promote
/// ([`RECOVER_ANNOTATION`]). It is promoted, as in a failover, only if it answers, no member that
/// answers still replicates from the primary (then the primary is not lost), and it holds every
/// transaction any member that answers holds; what only the members that do not answer held is
/// given up, which is why only a person asks for it. Once per request.
fn recover_on_request(facts: &Facts, primary: usize, blocked: Decision) -> Decision {
    promote_on_request(facts, primary, blocked, PrimaryLoss::Gone)
}

/// The member other than `primary` that answers and holds every transaction any other member
/// that answers holds: the one a recovery request may promote.
fn survivor_holding_everything(facts: &Facts, primary: usize) -> Option<usize> {
    let answering: Vec<(usize, GtidPosition)> = facts
        .members
        .iter()
        .filter(|m| m.ordinal != primary)
        .filter_map(|m| Some((m.ordinal, m.healthy_state(facts.now, facts.freshness)?.held())))
        .collect();
    answering
        .iter()
        .find(|(_, held)| answering.iter().all(|(_, other)| held.includes(other)))
        .map(|(ordinal, _)| *ordinal)
}

/// What a recovery asked for replaces.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PrimaryLoss {
    /// A primary that does not answer: a member still replicating from it shows it is not lost.
    Gone,
    /// A primary that answers without its data: its replicas may still be linked to it.
    Data,
}

fn promote_on_request(facts: &Facts, primary: usize, blocked: Decision, loss: PrimaryLoss) -> Decision {
    let Some(request) = facts.recovery.as_ref().filter(|request| request.is_open()) else {
        return blocked;
    };
    let refused = |message: String| wait(Reason::RecoveryRefused, message);
    let to = match request.target(facts.desired_members) {
        Ok(to) => to,
        Err(refusal) => return refused(refusal),
    };
    if to == primary {
        return refused(match loss {
            PrimaryLoss::Gone => format!(
                "{RECOVER_ANNOTATION} names the primary (member {primary}), the member that is lost: name the surviving member to promote"
            ),
            // Reopened, it would write again under the GTIDs it lost, which a member holding
            // them would then take for its own history: the members would diverge unseen.
            PrimaryLoss::Data => format!(
                "{RECOVER_ANNOTATION} names the primary (member {primary}), which lost data: it is not reopened over what it lost; name a member that answers, or restore a new cluster from the newest backup"
            ),
        });
    }
    let Some(target) = member(facts, to).and_then(|m| m.healthy_state(facts.now, facts.freshness)) else {
        return refused(format!(
            "member {to} does not answer; only a member that answers is promoted"
        ));
    };
    let held = target.held();
    // A primary that lost data still answers: the member named must hold what it holds too.
    for fact in facts
        .members
        .iter()
        .filter(|m| m.ordinal != primary || loss == PrimaryLoss::Data)
    {
        let Some(state) = fact.healthy_state(facts.now, facts.freshness) else {
            continue;
        };
        if loss == PrimaryLoss::Gone
            && state
                .replication
                .as_ref()
                .is_some_and(|r| r.source == Some(primary) && r.io_running)
        {
            return refused(format!(
                "member {} still replicates from the primary (member {primary}): it is not lost, nothing is promoted",
                fact.ordinal
            ));
        }
        if !held.includes(&state.held()) {
            return refused(format!(
                "member {} holds transactions member {to} lacks (it holds {}); name the member that holds everything the others that answer hold",
                fact.ordinal,
                state.held()
            ));
        }
    }
    Decision::Act(Step::Failover { from: primary, to })
}

/// The recorded primary restarted and no failover happened. It may have come back with less than
/// it had: on an empty volume (its claim lost), without its newest commits (a power loss with
/// `sync_binlog = 0`), or, in SemiSync mode with MariaDB, having discarded what it wrote but had
/// not committed (never acknowledged), which a replica may already have received. Reopening it
/// then would serve clients less than they wrote, or let it write other transactions under the
/// same GTIDs, which the replicas would skip: the members diverge. So it is reopened only when no
/// replica holds a transaction it lacks; otherwise the member holding everything takes over, as
/// in a failover. In SemiSync mode every other member must answer first (one that does not may
/// hold an acknowledged transaction); in asynchronous mode the members that answer are compared,
/// as asynchronous replication never promised more.
fn reopen_primary(facts: &Facts, primary: usize, state: &ServerState) -> Decision {
    // Asynchronous mode has one witness of what the primary held: what it was last seen
    // holding while it accepted writes. Came back without it, it lost data (a new or emptied
    // volume), and a member that does not answer may hold what it lost.
    let lost = facts
        .primary_last_open
        .as_ref()
        .filter(|last| !facts.semi_sync && !state.executed.includes(last));
    let mut states = vec![(primary, state)];
    let mut silent = None;
    for fact in facts.members.iter().filter(|m| m.ordinal != primary) {
        match fact.healthy_state(facts.now, facts.freshness) {
            Some(replica) => states.push((fact.ordinal, replica)),
            None => {
                silent.get_or_insert(fact);
            }
        }
    }
    if let Some(fact) = silent {
        if facts.semi_sync {
            return wait(
                Reason::PrimaryReopenBlocked,
                format!(
                    "the primary (ordinal {primary}) restarted and is reopened once every member answers: member {} is {} and may hold a transaction the restart discarded",
                    fact.ordinal,
                    fact.health.as_str()
                ),
            );
        }
        // Back on a new volume, what it held is known only as far as the witness goes: every
        // member must answer first. Without what it was seen holding, it waits unless a member
        // that answers holds all of that.
        let loss = if facts.primary_volume_replaced {
            Some((
                "came back on a new volume (its data claim is not the one it was seen accepting writes on)"
                    .to_string(),
                "it",
            ))
        } else {
            lost.filter(|last| !states.iter().any(|(_, other)| other.held().includes(last)))
                .map(|last| {
                    (
                        format!(
                            "came back without transactions it was last seen holding while it accepted writes ({last}; it holds {})",
                            state.executed
                        ),
                        "them",
                    )
                })
        };
        if let Some((how, what)) = loss {
            return promote_on_request(
                facts,
                primary,
                wait(
                    Reason::PrimaryReopenBlocked,
                    format!(
                        "the primary (ordinal {primary}) {how}: its data was lost, and it is replaced or reopened once every member answers: member {} is {} and may hold {what}. If that member is lost for good too, name the member to serve from with {RECOVER_ANNOTATION}, or restore a new cluster from the newest backup (docs/mysql.md, Disaster recovery)",
                        fact.ordinal,
                        fact.health.as_str()
                    ),
                ),
                PrimaryLoss::Data,
            );
        }
    }
    if states
        .iter()
        .all(|(_, other)| state.executed.includes(&other.held()))
    {
        return Decision::Act(Step::OpenPrimary { ordinal: primary });
    }
    match most_advanced_by(&states, ServerState::held) {
        Some(to) if to != primary => Decision::Act(Step::Failover { from: primary, to }),
        // Asynchronous replication: no member holds everything (a replica with errant writes,
        // say); the primary is reopened as before rather than writes stopped, and the errant
        // replica is fenced. Not a primary that lost data: what it lost may be on that replica.
        _ if !facts.semi_sync && lost.is_none() && !facts.primary_volume_replaced => {
            Decision::Act(Step::OpenPrimary { ordinal: primary })
        }
        _ => wait(
            Reason::Diverged,
            format!(
                "the restarted primary (ordinal {primary}) and its replicas each hold transactions the others lack; the operator promotes none of them (each member's GTIDs are in status.members): keep the members as they are and restore a new cluster from the newest backup (docs/mysql.md, Disaster recovery)"
            ),
        ),
    }
}

/// With no primary recorded: once every started member answered, the one whose GTIDs include
/// everyone else's (the lowest ordinal among equals, so a new cluster starts on ordinal 0).
fn open_first_primary(facts: &Facts) -> Result<usize, Decision> {
    let mut states = Vec::new();
    for fact in &facts.members {
        match fact.healthy_state(facts.now, facts.freshness) {
            Some(state) => states.push((fact.ordinal, state)),
            None => {
                return Err(wait(
                    Reason::MembersStarting,
                    format!(
                        "member {} has not answered yet; the first primary is chosen once every member has",
                        fact.ordinal
                    ),
                ));
            }
        }
    }
    if states.is_empty() {
        return Err(wait(Reason::MembersStarting, "no member has started yet"));
    }
    // The restore is the history the cluster continues from: a member holding more (a volume
    // kept from a deleted cluster of the same name, the very writes a point-in-time restore
    // undoes) is then errant, never the primary the restored member replicates from.
    if let Some(restored) = facts.restored_into
        && states.iter().any(|(ordinal, _)| *ordinal == restored)
    {
        return Err(Decision::Act(Step::OpenPrimary { ordinal: restored }));
    }
    match most_advanced(&states) {
        Some(ordinal) => Err(Decision::Act(Step::OpenPrimary { ordinal })),
        None => Err(wait(
            Reason::Diverged,
            "no member has every transaction the others have; the operator promotes none of them (each member's GTIDs are in status.members): keep the members as they are and restore a new cluster from the newest backup (docs/mysql.md, Disaster recovery)",
        )),
    }
}

/// The member whose executed GTIDs include every other's; the lowest ordinal among equals.
fn most_advanced(states: &[(usize, &ServerState)]) -> Option<usize> {
    most_advanced_by(states, |state| state.executed.clone())
}

/// The member whose `position` includes every other's; the lowest ordinal among equals.
fn most_advanced_by(
    states: &[(usize, &ServerState)],
    position: impl Fn(&ServerState) -> GtidPosition,
) -> Option<usize> {
    let positions: Vec<(usize, GtidPosition)> = states
        .iter()
        .map(|(ordinal, state)| (*ordinal, position(state)))
        .collect();
    positions
        .iter()
        .find(|(_, candidate)| positions.iter().all(|(_, other)| candidate.includes(other)))
        .map(|(ordinal, _)| *ordinal)
}

impl ServerState {
    /// Every transaction the member holds: executed, or received and still in its relay log.
    /// A semi-sync acknowledgement is sent on receipt, so this is what a failover must keep.
    fn held(&self) -> GtidPosition {
        match &self.replication {
            Some(replication) => self.executed.union(&replication.received),
            None => self.executed.clone(),
        }
    }
}

/// The primary is down as its replicas testify: fail over, if a safe candidate exists.
fn failover(facts: &Facts, from: usize, why: &str) -> Decision {
    let mut replicas = Vec::new();
    for fact in facts.members.iter().filter(|m| m.ordinal != from) {
        match fact.healthy_state(facts.now, facts.freshness) {
            Some(state) => replicas.push((fact.ordinal, state)),
            // It may hold the newest acknowledged commits: choosing without it could lose them.
            None => {
                return wait(
                    Reason::FailoverBlocked,
                    format!(
                        "the primary (ordinal {from}) is down ({why}), but replica {} is {}; every replica must answer before one is promoted, or, if it is lost for good, name the survivor to serve from with {RECOVER_ANNOTATION} (docs/mysql.md, Disaster recovery)",
                        fact.ordinal,
                        fact.health.as_str()
                    ),
                );
            }
        }
    }
    if replicas.is_empty() {
        return wait(
            Reason::FailoverBlocked,
            format!("the primary (ordinal {from}) is down ({why}) and there is no replica to promote"),
        );
    }
    // Chosen on what each replica received, not what it applied: the failover step lets the
    // candidate apply its relay log before it opens.
    match most_advanced_by(&replicas, ServerState::held) {
        Some(to) => Decision::Act(Step::Failover { from, to }),
        None => wait(
            Reason::FailoverBlocked,
            format!(
                "the primary (ordinal {from}) is down, but no replica has every transaction the others have (diverged); the operator promotes none of them (each member's GTIDs are in status.members): keep the members as they are and restore a new cluster from the newest backup (docs/mysql.md, Disaster recovery)"
            ),
        ),
    }
}

/// The first member whose binary log expiry is not what the cluster's state calls for. Logs may
/// expire only while every wanted member answers and replicates from the primary: a member that
/// is down, unreachable or not yet copied may need any of them to catch up, so until it does
/// every member keeps them all (expiry 0), which is also what each member starts with.
fn binlog_expiry(facts: &Facts, primary: usize) -> Option<Step> {
    let replicating = |ordinal: usize| {
        member(facts, ordinal)
            .and_then(|m| m.healthy_state(facts.now, facts.freshness))
            .is_some_and(|state| {
                ordinal == primary
                    || state
                        .replication
                        .as_ref()
                        .is_some_and(|r| r.source == Some(primary) && r.running())
            })
    };
    let seconds = if (0..facts.desired_members).all(replicating) {
        facts.binlog_expire_seconds
    } else {
        0
    };
    facts.members.iter().find_map(|fact| {
        let state = fact.healthy_state(facts.now, facts.freshness)?;
        (state.binlog_expire_seconds != seconds).then_some(Step::SetBinlogExpiry {
            ordinal: fact.ordinal,
            seconds,
        })
    })
}

/// The first member but the primary that answers writable: a former primary the failover's
/// fence could not reach, back with clients that may still commit there. It is fenced before
/// anything else, errant or not.
fn writable_besides(facts: &Facts, primary: usize) -> Option<usize> {
    facts
        .members
        .iter()
        .filter(|m| m.ordinal != primary)
        .find(|m| {
            m.healthy_state(facts.now, facts.freshness)
                .is_some_and(|state| !state.read_only)
        })
        .map(|m| m.ordinal)
}

/// The first replica that needs wiring, as a step; `None` when every member is wired.
fn wire_replicas(facts: &Facts, primary: usize) -> Option<Decision> {
    let primary_state = member(facts, primary)?.healthy_state(facts.now, facts.freshness)?;
    let replicas_exist = facts.members.len() > 1;
    if primary_state.semi_sync_source != (facts.semi_sync && replicas_exist) {
        return Some(Decision::Act(Step::SetSemiSync {
            ordinal: primary,
            on: facts.semi_sync && replicas_exist,
        }));
    }
    // A member with errant transactions is kept out of service; the others are still wired,
    // so one such member never leaves the rest without a source (or a semi-sync primary
    // without the replica its commits wait for).
    let mut first_errant = None;
    for fact in facts.members.iter().filter(|m| m.ordinal != primary) {
        let Some(state) = fact.healthy_state(facts.now, facts.freshness) else {
            continue;
        };
        if let Some(errant) = errant(state, primary_state) {
            first_errant.get_or_insert((fact.ordinal, errant));
            continue;
        }
        let replicating_from_primary = state
            .replication
            .as_ref()
            .is_some_and(|r| r.source == Some(primary) && r.running());
        if replicating_from_primary {
            if state.semi_sync_replica != facts.semi_sync {
                return Some(Decision::Act(Step::SetSemiSync {
                    ordinal: fact.ordinal,
                    on: facts.semi_sync,
                }));
            }
            continue;
        }
        let empty = state.executed.is_empty() && state.replication.is_none();
        if empty && !primary_state.executed.is_empty() {
            return Some(Decision::Act(Step::SeedMember {
                ordinal: fact.ordinal,
            }));
        }
        return Some(Decision::Act(Step::StartReplication {
            ordinal: fact.ordinal,
        }));
    }
    first_errant.map(|(ordinal, errant)| {
        wait(
            Reason::ErrantTransactions,
            format!(
                "member {ordinal} has transactions the primary does not ({errant}); it is kept out of service and nothing is discarded"
            ),
        )
    })
}

/// Transactions `member` has that the primary does not, rendered; `None` when there are none.
pub fn errant(member: &ServerState, primary: &ServerState) -> Option<String> {
    (!primary.executed.includes(&member.executed)).then(|| format!("executed {}", member.executed))
}

/// Removes the highest member, once every other member is Healthy.
fn scale_in(facts: &Facts, primary: usize, leaving: usize) -> Decision {
    if let Verdict::Wait(blocking) = gate_check(facts, leaving, Disruption::Remove) {
        return wait(
            Reason::ScaleInBlocked,
            format!("{blocking}; a member is removed only while all the others are Healthy"),
        );
    }
    if leaving == primary {
        let candidates: Vec<(usize, &ServerState)> = facts
            .members
            .iter()
            .filter(|m| m.ordinal != leaving)
            .filter_map(|m| Some((m.ordinal, m.healthy_state(facts.now, facts.freshness)?)))
            .collect();
        return match most_advanced(&candidates) {
            Some(to) => switchover(facts, primary, to),
            None => wait(
                Reason::ScaleInBlocked,
                "the leaving primary has no caught-up successor",
            ),
        };
    }
    // A replica that answers counts as Healthy while it catches up: removing another, with its
    // volume, would leave the writes acknowledged by the leaving one on the primary alone.
    let behind = replicas_behind(facts, primary, leaving);
    if !behind.is_empty() {
        return wait(
            Reason::ScaleInBlocked,
            format!(
                "member {leaving} is removed once every other replica has caught up: {}",
                behind.join(", ")
            ),
        );
    }
    Decision::Act(Step::RemoveMember { ordinal: leaving })
}

/// A switchover to `to`, once every member is Healthy and `to` replicates from the primary.
fn switchover(facts: &Facts, from: usize, to: usize) -> Decision {
    if to >= facts.members.len() {
        return wait(
            Reason::SwitchoverRefused,
            format!("member {to} does not exist; nothing was changed"),
        );
    }
    if let Verdict::Wait(blocking) = gate_check(facts, from, Disruption::Handover) {
        return wait(
            Reason::SwitchoverBlocked,
            format!("{blocking}; a switchover needs every member Healthy"),
        );
    }
    let replicating = member(facts, to)
        .and_then(|m| m.healthy_state(facts.now, facts.freshness))
        .and_then(|state| state.replication.as_ref())
        .is_some_and(|r| r.source == Some(from) && r.running());
    if !replicating {
        return wait(
            Reason::SwitchoverBlocked,
            format!("member {to} is not replicating from the primary yet"),
        );
    }
    Decision::Act(Step::Switchover { from, to })
}

/// The replication lag, in seconds, under which a replica counts as caught up before the roll
/// restarts another member.
pub const CAUGHT_UP_LAG_SECONDS: u64 = 1;

/// How long a member restarted onto the current pod template may take to come back before the
/// wait for it warns: far longer than a restart takes, even one that pulls a new image.
pub const RESTART_STUCK_AFTER: Duration = Duration::from_secs(10 * 60);

/// The transactions of the primary's a replica may still not have received and count as caught
/// up: those a busy primary commits between its observation and the replica's, never a backlog
/// (applying what it received is what the lag measures).
pub const CAUGHT_UP_TRANSACTIONS: u64 = 1000;

/// The next step of a managed roll onto the current pod template; `Settled` when every pod
/// runs it. Reached only once every member is wired to the primary.
fn roll(facts: &Facts, primary: usize) -> Decision {
    let Some(target) = facts.templates.next(Some(primary)) else {
        return Decision::Settled;
    };
    let (RollTarget::Replica(ordinal) | RollTarget::Primary(ordinal)) = target;
    // Members that are not Healthy are the gate's to report; the target may be restarted
    // whatever its own state, as a restart onto a new template may be what it needs.
    let behind = replicas_behind(facts, primary, ordinal);
    if !behind.is_empty() {
        return wait(
            Reason::RestartInProgress,
            format!(
                "rolling onto the current pod template: waiting for {} to catch up before the next restart",
                behind.join(", ")
            ),
        );
    }
    if matches!(target, RollTarget::Replica(_)) || facts.members.len() == 1 {
        return restart(facts, ordinal);
    }
    // The primary goes last, after handing its role to the most advanced current replica.
    let current: Vec<(usize, &ServerState)> = facts
        .members
        .iter()
        .filter(|m| m.ordinal != ordinal && facts.templates.is_current(m.ordinal))
        .filter_map(|m| Some((m.ordinal, m.healthy_state(facts.now, facts.freshness)?)))
        .collect();
    match most_advanced(&current) {
        Some(to) => switchover(facts, ordinal, to),
        None => wait(
            Reason::RestartBlocked,
            format!(
                "the primary, member {ordinal}, runs an older pod template and no Healthy replica on the current one can take its role"
            ),
        ),
    }
}

/// Restarts `ordinal` onto the current pod template, once every other member is Healthy.
fn restart(facts: &Facts, ordinal: usize) -> Decision {
    if let Verdict::Wait(blocking) = gate_check(facts, ordinal, Disruption::Restart) {
        return wait(
            Reason::RestartBlocked,
            format!(
                "{blocking}; a member is restarted onto the current pod template only while all the others are Healthy"
            ),
        );
    }
    Decision::Act(Step::RestartMember { ordinal })
}

/// The replicas other than `except` that have not caught up with `primary`, described. The lag
/// alone reads 0 right after a restarted replica starts replicating, before it has even fetched
/// its backlog; the transactions of the primary's it has not received say whether it has.
fn replicas_behind(facts: &Facts, primary: usize, except: usize) -> Vec<String> {
    let primary_executed = member(facts, primary)
        .and_then(|m| m.healthy_state(facts.now, facts.freshness))
        .map(|state| &state.executed);
    facts
        .members
        .iter()
        .filter(|m| m.ordinal != primary && m.ordinal != except)
        .filter_map(|m| {
            let state = m.healthy_state(facts.now, facts.freshness)?;
            let missing = primary_executed.map(|executed| state.held().transactions_behind(executed));
            match (state.replication.as_ref().and_then(|r| r.lag_seconds), missing) {
                (_, Some(missing)) if missing > CAUGHT_UP_TRANSACTIONS => {
                    Some(format!("member {} ({missing} transactions behind)", m.ordinal))
                }
                (Some(lag), _) if lag <= CAUGHT_UP_LAG_SECONDS => None,
                (Some(lag), _) => Some(format!("member {} ({lag} s behind)", m.ordinal)),
                (None, _) => Some(format!("member {} (lag unknown)", m.ordinal)),
            }
        })
        .collect()
}

/// What the safety gate says of a `disruption` of member `target` now.
fn gate_check(facts: &Facts, target: usize, disruption: Disruption) -> Verdict {
    let observations: Vec<Observation> = facts.members.iter().map(MemberFact::observation).collect();
    gate::check(&GateInput {
        target: &format!("member {target}"),
        disruption,
        observations: &observations,
        // A step in flight is resumed before any new step is considered.
        in_flight: None,
        freshness: Freshness::Within {
            window: facts.freshness,
            now: facts.now,
        },
        quorum: Quorum::EveryOtherMember,
    })
}

fn member(facts: &Facts, ordinal: usize) -> Option<&MemberFact> {
    facts.members.iter().find(|m| m.ordinal == ordinal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Flavor;

    const WEEK: u32 = 604_800;

    fn gtid(text: &str) -> GtidPosition {
        GtidPosition::parse(Flavor::MariaDB, text).unwrap()
    }

    fn primary_state(executed: &str) -> ServerState {
        ServerState {
            read_only: false,
            executed: gtid(executed),
            replication: None,
            semi_sync_source: true,
            semi_sync_replica: false,
            binlog_expire_seconds: WEEK,
        }
    }

    /// A primary that restarted read-only holding `executed`.
    fn restarted(executed: &str) -> ServerState {
        ServerState {
            read_only: true,
            ..primary_state(executed)
        }
    }

    /// A member the operator cannot reach.
    fn down(ordinal: usize, now: Instant) -> MemberFact {
        unreachable(ordinal, Health::Unknown("timed out".into()), now)
    }

    fn replica_state(executed: &str, source: usize) -> ServerState {
        ServerState {
            read_only: true,
            executed: gtid(executed),
            replication: Some(Replication {
                source: Some(source),
                io_running: true,
                sql_running: true,
                source_lost: false,
                lag_seconds: Some(0),
                received: gtid(executed),
            }),
            semi_sync_source: false,
            semi_sync_replica: true,
            binlog_expire_seconds: WEEK,
        }
    }

    fn healthy(ordinal: usize, state: ServerState, now: Instant) -> MemberFact {
        MemberFact {
            ordinal,
            health: Health::Healthy,
            observed_at: now,
            state: Some(state),
        }
    }

    fn unreachable(ordinal: usize, health: Health, now: Instant) -> MemberFact {
        MemberFact {
            ordinal,
            health,
            observed_at: now,
            state: None,
        }
    }

    fn facts(members: Vec<MemberFact>, primary: Option<usize>, now: Instant) -> Facts {
        Facts {
            cluster: "main".into(),
            desired_members: members.len(),
            statefulset_replicas: Some(members.len()),
            members,
            templates: Templates::Unknown,
            primary,
            in_flight: None,
            in_flight_age: None,
            switchover_to: None,
            restore: None,
            restored_into: None,
            semi_sync: true,
            binlog_expire_seconds: WEEK,
            repair: None,
            recovery: None,
            primary_last_open: None,
            primary_volume_replaced: false,
            freshness: Duration::from_secs(30),
            now,
        }
    }

    fn fresh_state() -> ServerState {
        ServerState {
            read_only: true,
            executed: gtid(""),
            replication: None,
            semi_sync_source: false,
            semi_sync_replica: false,
            binlog_expire_seconds: WEEK,
        }
    }

    fn stored(position: &str) -> Option<Restore> {
        Some(Restore::Ready {
            backup: "nightly".into(),
            position: gtid(position),
            copy: None,
        })
    }

    fn copied(position: &str, copy: CopyState) -> Option<Restore> {
        Some(Restore::Ready {
            backup: "nightly".into(),
            position: gtid(position),
            copy: Some(copy),
        })
    }

    /// `members` as they are while one of them does not replicate: keeping every binary log.
    fn keeping_logs(mut members: Vec<MemberFact>) -> Vec<MemberFact> {
        for state in members.iter_mut().filter_map(|m| m.state.as_mut()) {
            state.binlog_expire_seconds = 0;
        }
        members
    }

    fn settled_three(now: Instant) -> Vec<MemberFact> {
        vec![
            healthy(0, primary_state("0-1-10"), now),
            healthy(1, replica_state("0-1-10", 0), now),
            healthy(2, replica_state("0-1-9", 0), now),
        ]
    }

    /// Binary logs expire only while every wanted member replicates from the primary.
    #[test]
    fn binary_logs_expire_only_while_every_member_replicates() {
        let now = Instant::now();
        let expiry = |seconds: u32, mut state: ServerState| {
            state.binlog_expire_seconds = seconds;
            state
        };
        let expire = |ordinal, seconds| Decision::Act(Step::SetBinlogExpiry { ordinal, seconds });
        let cases: Vec<(&str, Vec<MemberFact>, Decision)> = vec![
            (
                "members start keeping everything; all replicate: the primary expires first",
                vec![
                    healthy(0, expiry(0, primary_state("0-1-10")), now),
                    healthy(1, expiry(0, replica_state("0-1-10", 0)), now),
                ],
                expire(0, WEEK),
            ),
            (
                "then each replica",
                vec![
                    healthy(0, primary_state("0-1-10"), now),
                    healthy(1, expiry(0, replica_state("0-1-10", 0)), now),
                ],
                expire(1, WEEK),
            ),
            (
                "a replica that does not answer may need any log: the primary keeps them all",
                vec![
                    healthy(0, primary_state("0-1-10"), now),
                    unreachable(1, Health::Unknown("refused".into()), now),
                ],
                expire(0, 0),
            ),
            (
                "a member not yet copied: keep them all before seeding it",
                vec![
                    healthy(0, primary_state("0-1-10"), now),
                    healthy(1, fresh_state(), now),
                ],
                expire(0, 0),
            ),
            (
                "kept on every member, the seeding goes on",
                vec![
                    healthy(0, expiry(0, primary_state("0-1-10")), now),
                    healthy(1, expiry(0, fresh_state()), now),
                ],
                Decision::Act(Step::SeedMember { ordinal: 1 }),
            ),
            (
                "a replica whose replication stopped",
                vec![
                    healthy(0, primary_state("0-1-10"), now),
                    healthy(
                        1,
                        {
                            let mut stopped = replica_state("0-1-10", 0);
                            stopped.replication.as_mut().unwrap().io_running = false;
                            stopped
                        },
                        now,
                    ),
                ],
                expire(0, 0),
            ),
            (
                "all replicating at the wanted expiry",
                settled_three(now),
                Decision::Settled,
            ),
        ];
        for (case, members, expected) in cases {
            assert_eq!(decide(&facts(members, Some(0), now)), expected, "{case}");
        }
    }

    fn with_repair(mut facts: Facts, member: &str, ordinal: Option<usize>, taken: Option<&str>) -> Facts {
        facts.repair = Some(PodRepair {
            member: member.into(),
            ordinal,
            taken: taken.map(str::to_string),
            taken_claim: taken.map(|uid| format!("claim-of-{uid}")),
            pod_uid: ordinal.map(|o| format!("uid-{o}")),
            claim_uid: ordinal.map(|o| format!("claim-of-uid-{o}")),
        });
        facts
    }

    #[test]
    fn a_repair_wipes_a_replica_once_through_the_gate_and_never_the_primary() {
        let now = Instant::now();
        let settled = || facts(settled_three(now), Some(0), now);
        let wipe = Decision::Act(Step::WipeMember {
            ordinal: 2,
            pod_uid: "uid-2".into(),
        });
        assert_eq!(decide(&with_repair(settled(), "shop-2", Some(2), None)), wipe);
        // Recorded, and its pod is still there (stopped between the record and the wipe): again.
        assert_eq!(
            decide(&with_repair(settled(), "shop-2", Some(2), Some("uid-2"))),
            wipe
        );
        // Another pod under the name: the request is done with.
        assert_eq!(
            decide(&with_repair(settled(), "shop-2", Some(2), Some("uid-old"))),
            Decision::Settled
        );
        // Answering and Healthy, 30 s behind: rebuilt a moment ago, or lagging.
        let mut lagging = settled();
        let mut behind = replica_state("0-1-10", 0);
        if let Some(replication) = behind.replication.as_mut() {
            replication.lag_seconds = Some(30);
        }
        lagging.members[1] = healthy(1, behind, now);
        let mut one_down = settled();
        one_down.members[1].health = Health::Unknown("timeout".into());
        // Binary logs already kept for ever, as while a member does not replicate.
        for member in &mut one_down.members {
            if let Some(state) = member.state.as_mut() {
                state.binlog_expire_seconds = 0;
            }
        }
        for (case, facts, reason) in [
            (
                "the primary",
                with_repair(settled(), "shop-0", Some(0), None),
                Reason::RepairRefused,
            ),
            (
                "no member",
                with_repair(settled(), "other-1", None, None),
                Reason::RepairRefused,
            ),
            (
                "beyond the cluster",
                with_repair(settled(), "shop-5", Some(5), None),
                Reason::RepairRefused,
            ),
            (
                "another member Unknown",
                with_repair(one_down, "shop-2", Some(2), None),
                Reason::RestartBlocked,
            ),
            (
                "another replica behind",
                with_repair(lagging, "shop-2", Some(2), None),
                Reason::RestartBlocked,
            ),
        ] {
            let decided = decide(&facts);
            let Decision::Wait(wait) = decided else {
                panic!("{case}: not a wait: {decided:?}")
            };
            assert_eq!(wait.reason, reason, "{case}: {wait:?}");
        }
    }

    #[test]
    fn a_wired_cluster_is_settled() {
        let now = Instant::now();
        assert_eq!(
            decide(&facts(settled_three(now), Some(0), now)),
            Decision::Settled
        );
    }

    #[test]
    fn pods_come_first() {
        let now = Instant::now();
        let mut facts = facts(vec![], None, now);
        facts.desired_members = 3;
        facts.statefulset_replicas = None;
        assert_eq!(decide(&facts), Decision::Act(Step::ScalePods { replicas: 3 }));
    }

    #[test]
    fn a_new_cluster_opens_ordinal_zero_once_every_member_answered() {
        let now = Instant::now();
        let fresh = |ordinal| {
            healthy(
                ordinal,
                ServerState {
                    read_only: true,
                    executed: gtid(""),
                    replication: None,
                    semi_sync_source: false,
                    semi_sync_replica: false,
                    binlog_expire_seconds: WEEK,
                },
                now,
            )
        };
        let starting = facts(
            vec![
                fresh(0),
                unreachable(1, Health::Unknown("refused".into()), now),
                fresh(2),
            ],
            None,
            now,
        );
        assert!(matches!(
            decide(&starting),
            Decision::Wait(Wait {
                reason: Reason::MembersStarting,
                ..
            })
        ));
        let ready = facts(vec![fresh(0), fresh(1), fresh(2)], None, now);
        assert_eq!(decide(&ready), Decision::Act(Step::OpenPrimary { ordinal: 0 }));
    }

    #[test]
    fn an_unknown_primary_is_never_failed_over() {
        let now = Instant::now();
        let mut members = settled_three(now);
        members[0] = unreachable(0, Health::Unknown("timed out".into()), now);
        let decision = decide(&facts(members, Some(0), now));
        assert!(matches!(
            decision,
            Decision::Wait(Wait {
                reason: Reason::PrimaryUnknown,
                ..
            })
        ));
    }

    #[test]
    fn a_primary_its_replicas_report_down_fails_over_to_the_most_advanced_replica() {
        let now = Instant::now();
        let mut members = settled_three(now);
        members[0] = unreachable(0, Health::Unhealthy("2 of 2 replicas lost it".into()), now);
        // Ordinal 2 is ahead of ordinal 1 here.
        members[1] = healthy(1, replica_state("0-1-9", 0), now);
        members[2] = healthy(2, replica_state("0-1-10", 0), now);
        assert_eq!(
            decide(&facts(members, Some(0), now)),
            Decision::Act(Step::Failover { from: 0, to: 2 })
        );
    }

    #[test]
    fn failover_chooses_the_replica_that_received_the_most_not_the_one_that_applied_the_most() {
        let now = Instant::now();
        let mut members = settled_three(now);
        members[0] = unreachable(0, Health::Unhealthy("2 of 2 replicas lost it".into()), now);
        // Ordinal 1 applied less but received (and acknowledged) transactions 8 to 12 that
        // ordinal 2 never got: promoting 2 would lose them.
        let mut behind_in_applying = replica_state("0-1-7", 0);
        if let Some(replication) = behind_in_applying.replication.as_mut() {
            replication.received = gtid("0-1-12");
        }
        members[1] = healthy(1, behind_in_applying, now);
        members[2] = healthy(2, replica_state("0-1-9", 0), now);
        assert_eq!(
            decide(&facts(members, Some(0), now)),
            Decision::Act(Step::Failover { from: 0, to: 1 })
        );
    }

    #[test]
    fn failover_waits_for_every_replica_and_refuses_diverged_ones() {
        let now = Instant::now();
        let mut members = settled_three(now);
        members[0] = unreachable(0, Health::Unhealthy("lost".into()), now);
        members[2] = unreachable(2, Health::Unknown("timed out".into()), now);
        let decision = decide(&facts(members.clone(), Some(0), now));
        assert!(matches!(
            decision,
            Decision::Wait(Wait {
                reason: Reason::FailoverBlocked,
                ..
            })
        ));

        members[1] = healthy(1, replica_state("0-1-9,1-2-3", 0), now);
        members[2] = healthy(2, replica_state("0-1-10", 0), now);
        let decision = decide(&facts(members, Some(0), now));
        assert!(matches!(
            decision,
            Decision::Wait(Wait {
                reason: Reason::FailoverBlocked,
                ..
            })
        ));
    }

    #[test]
    fn a_stale_observation_is_not_acted_on() {
        let now = Instant::now();
        let then = now - Duration::from_secs(120);
        let mut members = settled_three(now);
        members[0] = unreachable(0, Health::Unhealthy("lost".into()), now);
        members[1].observed_at = then;
        let decision = decide(&facts(members, Some(0), now));
        assert!(matches!(
            decision,
            Decision::Wait(Wait {
                reason: Reason::FailoverBlocked,
                ..
            })
        ));
    }

    /// A former primary the failover's fence could not reach answers again, still writable:
    /// fenced before anything else, whether it took writes meanwhile (errant) or not.
    #[test]
    fn a_writable_member_that_is_not_the_primary_is_fenced_first() {
        let now = Instant::now();
        let mut members = settled_three(now);
        members[0] = healthy(0, primary_state("0-1-10"), now);
        members[1] = healthy(1, primary_state("0-1-10"), now);
        members[2] = healthy(2, replica_state("0-1-10", 1), now);
        assert_eq!(
            decide(&facts(members.clone(), Some(1), now)),
            Decision::Act(Step::FenceMember { ordinal: 0 })
        );
        members[0] = healthy(0, primary_state("0-1-11"), now);
        assert_eq!(
            decide(&facts(members, Some(1), now)),
            Decision::Act(Step::FenceMember { ordinal: 0 }),
            "errant too"
        );
    }

    /// A cluster created again with `restoreFrom` over volumes kept from a deleted one of the
    /// same name: member 0 holds the restore, member 1 the old history past it. Member 0 is the
    /// first primary; member 1 is then errant, never the source member 0 replays from.
    #[test]
    fn the_member_restored_into_is_the_first_primary_whatever_the_others_hold() {
        let now = Instant::now();
        let mut restored = fresh_state();
        restored.executed = gtid("0-1-42");
        let mut leftover = fresh_state();
        leftover.executed = gtid("0-1-50");
        let members = vec![healthy(0, restored, now), healthy(1, leftover, now)];
        let mut opening = facts(members, None, now);
        opening.desired_members = 2;
        assert_eq!(
            decide(&opening),
            Decision::Act(Step::OpenPrimary { ordinal: 1 }),
            "without the record"
        );
        opening.restored_into = Some(0);
        assert_eq!(decide(&opening), Decision::Act(Step::OpenPrimary { ordinal: 0 }));
    }

    #[test]
    fn a_failover_in_flight_is_resumed_until_the_new_primary_is_open() {
        let now = Instant::now();
        let mut members = settled_three(now);
        members[0] = unreachable(0, Health::Unhealthy("lost".into()), now);
        let mut in_progress = facts(members.clone(), Some(0), now);
        in_progress.in_flight = Some(InFlight::Failover { from: 0, to: 1 });
        assert_eq!(
            decide(&in_progress),
            Decision::Act(Step::Failover { from: 0, to: 1 })
        );

        // The target came back on a new, empty volume before the failover was taken again:
        // not opened without what member 2 holds.
        let mut emptied = in_progress.clone();
        emptied.members[1] = healthy(1, fresh_state(), now);
        assert!(
            matches!(
                decide(&emptied),
                Decision::Wait(Wait {
                    reason: Reason::FailoverBlocked,
                    ..
                })
            ),
            "{:?}",
            decide(&emptied)
        );

        members[1] = healthy(1, primary_state("0-1-10"), now);
        let mut done = facts(members, Some(1), now);
        done.in_flight = Some(InFlight::Failover { from: 0, to: 1 });
        assert_eq!(decide(&done), Decision::Act(Step::ClearInFlight));
    }

    #[test]
    fn a_switchover_whose_target_stops_answering_never_reopens_the_old_primary_blindly() {
        let now = Instant::now();
        let mut members = settled_three(now);
        members[2] = unreachable(2, Health::Unknown("timed out".into()), now);
        let mut stuck = facts(members, Some(0), now);
        stuck.in_flight = Some(InFlight::Switchover { from: 0, to: 2 });
        assert!(matches!(
            decide(&stuck),
            Decision::Wait(Wait {
                reason: Reason::SwitchoverTargetUnknown,
                ..
            })
        ));
    }

    #[test]
    fn errant_transactions_are_reported_not_replicated_over() {
        let now = Instant::now();
        let mut members = settled_three(now);
        // The old primary came back with a transaction nobody else received.
        members[2] = healthy(
            2,
            ServerState {
                replication: None,
                ..replica_state("0-1-11", 0)
            },
            now,
        );
        let decision = decide(&facts(keeping_logs(members), Some(0), now));
        assert!(matches!(
            decision,
            Decision::Wait(Wait {
                reason: Reason::ErrantTransactions,
                ..
            })
        ));
    }

    #[test]
    fn an_errant_member_does_not_keep_the_others_from_being_wired() {
        let now = Instant::now();
        let mut members = settled_three(now);
        // Member 1 came back with a transaction nobody else received; member 2 is empty.
        members[1] = healthy(
            1,
            ServerState {
                replication: None,
                ..replica_state("0-1-11", 0)
            },
            now,
        );
        members[2] = healthy(
            2,
            ServerState {
                replication: None,
                ..replica_state("", 0)
            },
            now,
        );
        assert_eq!(
            decide(&facts(keeping_logs(members.clone()), Some(0), now)),
            Decision::Act(Step::SeedMember { ordinal: 2 })
        );
        members[2] = healthy(2, replica_state("0-1-10", 0), now);
        assert!(matches!(
            decide(&facts(keeping_logs(members), Some(0), now)),
            Decision::Wait(Wait {
                reason: Reason::ErrantTransactions,
                ..
            })
        ));
    }

    #[test]
    fn empty_members_are_seeded_and_others_repointed() {
        let now = Instant::now();
        let mut members = settled_three(now);
        members[2] = healthy(
            2,
            ServerState {
                replication: None,
                ..replica_state("", 0)
            },
            now,
        );
        assert_eq!(
            decide(&facts(keeping_logs(members.clone()), Some(0), now)),
            Decision::Act(Step::SeedMember { ordinal: 2 })
        );
        // Replicating from a former primary: repointed.
        members[2] = healthy(2, replica_state("0-1-9", 1), now);
        assert_eq!(
            decide(&facts(keeping_logs(members), Some(0), now)),
            Decision::Act(Step::StartReplication { ordinal: 2 })
        );
    }

    #[test]
    fn a_restarted_primary_is_reopened() {
        let now = Instant::now();
        let mut members = settled_three(now);
        members[0] = healthy(
            0,
            ServerState {
                read_only: true,
                ..primary_state("0-1-10")
            },
            now,
        );
        assert_eq!(
            decide(&facts(members, Some(0), now)),
            Decision::Act(Step::OpenPrimary { ordinal: 0 })
        );
    }

    #[test]
    fn scale_in_removes_a_replica_only_while_the_rest_are_healthy() {
        let now = Instant::now();
        let mut wanted = facts(settled_three(now), Some(0), now);
        wanted.desired_members = 2;
        assert_eq!(decide(&wanted), Decision::Act(Step::RemoveMember { ordinal: 2 }));

        // A replica that answers but is far behind (restarted a moment ago): the leaving one
        // may hold the acknowledged writes it lacks.
        let mut lagging = wanted.clone();
        lagging.members = vec![
            healthy(0, primary_state("0-1-5000"), now),
            healthy(1, replica_state("0-1-10", 0), now),
            healthy(2, replica_state("0-1-5000", 0), now),
        ];
        assert!(
            matches!(
                decide(&lagging),
                Decision::Wait(Wait {
                    reason: Reason::ScaleInBlocked,
                    ..
                })
            ),
            "{:?}",
            decide(&lagging)
        );

        wanted.members[1] = unreachable(1, Health::Unknown("timed out".into()), now);
        wanted.members = keeping_logs(wanted.members);
        assert!(matches!(
            decide(&wanted),
            Decision::Wait(Wait {
                reason: Reason::ScaleInBlocked,
                ..
            })
        ));
    }

    #[test]
    fn a_leaving_primary_is_switched_over_first() {
        let now = Instant::now();
        let members = vec![
            healthy(0, replica_state("0-1-10", 1), now),
            healthy(1, primary_state("0-1-10"), now),
        ];
        let mut wanted = facts(members, Some(1), now);
        wanted.desired_members = 1;
        assert_eq!(
            decide(&wanted),
            Decision::Act(Step::Switchover { from: 1, to: 0 })
        );
    }

    #[test]
    fn switchover_needs_every_member_healthy() {
        let now = Instant::now();
        let mut asked = facts(settled_three(now), Some(0), now);
        asked.switchover_to = Some(2);
        assert_eq!(decide(&asked), Decision::Act(Step::Switchover { from: 0, to: 2 }));
        asked.members[1] = unreachable(1, Health::Unknown("timed out".into()), now);
        asked.members = keeping_logs(asked.members);
        assert!(matches!(
            decide(&asked),
            Decision::Wait(Wait {
                reason: Reason::SwitchoverBlocked,
                ..
            })
        ));
        asked.switchover_to = Some(7);
        asked.members = settled_three(now);
        assert!(matches!(
            decide(&asked),
            Decision::Wait(Wait {
                reason: Reason::SwitchoverRefused,
                ..
            })
        ));
    }

    #[test]
    fn a_restored_cluster_opens_no_primary_until_its_backup_is_stored() {
        let now = Instant::now();
        let mut waiting = facts(
            vec![healthy(0, fresh_state(), now), healthy(1, fresh_state(), now)],
            None,
            now,
        );
        waiting.restore = Some(Restore::SourceNotReady(
            "MySQLBackup nightly does not exist".into(),
        ));
        assert_eq!(
            decide(&waiting),
            Decision::Wait(Wait {
                reason: Reason::RestoreSourceNotReady,
                message: "MySQLBackup nightly does not exist".into(),
            })
        );
        // Pods still come first.
        waiting.statefulset_replicas = None;
        assert_eq!(decide(&waiting), Decision::Act(Step::ScalePods { replicas: 2 }));
    }

    #[test]
    fn a_physical_copy_is_taken_up_only_by_a_first_member_that_reported_it_restored() {
        let now = Instant::now();
        let copy_of_a_replica = ServerState {
            executed: gtid("0-1-40"),
            ..fresh_state()
        };
        let mut restoring = facts(vec![healthy(0, copy_of_a_replica.clone(), now)], None, now);
        let step = Decision::Act(Step::Restore {
            ordinal: 0,
            resume: false,
        });

        // The server answers, but nothing says its files are the copy: an initialised empty
        // directory looks the same.
        restoring.restore = copied(
            "0-1-42",
            CopyState::NotRestored("its pod has no restore init container".into()),
        );
        let decision = decide(&restoring);
        assert_eq!(reason(&decision), Reason::RestoreSourceNotReady);
        assert!(
            matches!(&decision, Decision::Wait(wait) if wait.message.contains("no restore init container")),
            "{decision:?}"
        );

        // Reported restored: the copy's own history (a copied replica's) is within the
        // position, so the position is taken up.
        restoring.restore = copied("0-1-42", CopyState::Restored);
        assert_eq!(decide(&restoring), step);
        restoring.members[0] = healthy(0, fresh_state(), now);
        assert_eq!(decide(&restoring), step);

        // History beyond the position is not the copy's: refused, as for a logical restore.
        restoring.members[0] = healthy(
            0,
            ServerState {
                executed: gtid("0-1-43"),
                ..fresh_state()
            },
            now,
        );
        assert_eq!(reason(&decide(&restoring)), Reason::RestoreRefused);

        // A logical restore takes no history it did not write itself.
        restoring.restore = stored("0-1-42");
        restoring.members[0] = healthy(0, copy_of_a_replica, now);
        assert_eq!(reason(&decide(&restoring)), Reason::RestoreRefused);

        // Before the backup holds its copy, no member is made at all.
        let mut awaited = facts(vec![], None, now);
        awaited.statefulset_replicas = None;
        awaited.restore = Some(Restore::CopyAwaited(
            "MySQLBackup nightly has no stored snapshot yet".into(),
        ));
        assert_eq!(reason(&decide(&awaited)), Reason::RestoreSourceNotReady);
    }

    #[test]
    fn a_stored_backup_is_restored_into_an_empty_ordinal_zero_only() {
        let now = Instant::now();
        let mut restoring = facts(
            vec![
                healthy(0, fresh_state(), now),
                unreachable(1, Health::Unknown("refused".into()), now),
            ],
            None,
            now,
        );
        restoring.restore = stored("0-1-42");
        // The other members need not answer: they are copied from the restored one later.
        let step = Step::Restore {
            ordinal: 0,
            resume: false,
        };
        assert_eq!(decide(&restoring), Decision::Act(step.clone()));
        assert_eq!(step.in_flight(), Some(InFlight::Restore { ordinal: 0 }));

        restoring.members[0] = unreachable(0, Health::Unknown("refused".into()), now);
        assert!(matches!(
            decide(&restoring),
            Decision::Wait(Wait {
                reason: Reason::MembersStarting,
                ..
            })
        ));

        let refused = |state: ServerState| {
            let mut facts = restoring.clone();
            facts.members[0] = healthy(0, state, now);
            decide(&facts)
        };
        for not_fresh in [
            ServerState {
                executed: gtid("0-3-7"),
                ..fresh_state()
            },
            ServerState {
                read_only: false,
                ..fresh_state()
            },
            ServerState {
                replication: replica_state("", 1).replication,
                ..fresh_state()
            },
        ] {
            assert!(
                matches!(
                    refused(not_fresh.clone()),
                    Decision::Wait(Wait {
                        reason: Reason::RestoreRefused,
                        ..
                    })
                ),
                "{not_fresh:?}"
            );
        }
    }

    #[test]
    fn a_restore_that_failed_waits_for_its_next_attempt_fresh_or_resumed() {
        let now = Instant::now();
        let why = "restoring MySQLBackup nightly into member 0 failed (failed 1 time in a row; the next \
                   attempt is not before 2026-12-02T06:00:10Z)";
        let waits = Decision::Wait(Wait {
            reason: Reason::StepFailed,
            message: why.into(),
        });
        let mut waiting = facts(vec![healthy(0, fresh_state(), now)], None, now);
        waiting.restore = Some(Restore::RetryLater(why.into()));
        assert_eq!(decide(&waiting), waits);
        waiting.in_flight = Some(InFlight::Restore { ordinal: 0 });
        assert_eq!(decide(&waiting), waits, "resumed");
    }

    #[test]
    fn an_interrupted_restore_is_taken_again_over_its_own_work_only() {
        let now = Instant::now();
        let mut resumed = facts(vec![healthy(0, fresh_state(), now)], None, now);
        resumed.restore = stored("0-1-42");
        resumed.in_flight = Some(InFlight::Restore { ordinal: 0 });
        let again = Decision::Act(Step::Restore {
            ordinal: 0,
            resume: true,
        });
        assert_eq!(decide(&resumed), again);
        // Interrupted after the history was set: still the restore's own.
        resumed.members[0] = healthy(
            0,
            ServerState {
                executed: gtid("0-1-42"),
                ..fresh_state()
            },
            now,
        );
        assert_eq!(decide(&resumed), again);
        // Anything else was written by someone else.
        resumed.members[0] = healthy(
            0,
            ServerState {
                executed: gtid("0-1-43"),
                ..fresh_state()
            },
            now,
        );
        assert!(matches!(
            decide(&resumed),
            Decision::Wait(Wait {
                reason: Reason::RestoreRefused,
                ..
            })
        ));
        resumed.restore = Some(Restore::SourceNotReady("deleted".into()));
        assert!(matches!(
            decide(&resumed),
            Decision::Wait(Wait {
                reason: Reason::RestoreSourceNotReady,
                ..
            })
        ));
        // Recorded as done: only the record in flight is left to clear.
        resumed.restore = None;
        assert_eq!(decide(&resumed), Decision::Act(Step::ClearInFlight));
    }

    #[test]
    fn a_restored_member_is_opened_as_the_first_primary_and_never_restored_again() {
        let now = Instant::now();
        let restored = ServerState {
            executed: gtid("0-1-42"),
            ..fresh_state()
        };
        let done = facts(
            vec![healthy(0, restored.clone(), now), healthy(1, fresh_state(), now)],
            None,
            now,
        );
        assert_eq!(decide(&done), Decision::Act(Step::OpenPrimary { ordinal: 0 }));
        // A cluster with a primary is past any restore, whatever else is reported.
        let mut opened = facts(
            vec![
                healthy(0, primary_state("0-1-42"), now),
                healthy(1, replica_state("0-1-42", 0), now),
            ],
            Some(0),
            now,
        );
        opened.restore = stored("0-1-42");
        assert_eq!(decide(&opened), Decision::Settled);
    }

    #[test]
    fn semi_sync_follows_the_spec() {
        let now = Instant::now();
        let mut asynchronous = facts(settled_three(now), Some(0), now);
        asynchronous.semi_sync = false;
        assert_eq!(
            decide(&asynchronous),
            Decision::Act(Step::SetSemiSync {
                ordinal: 0,
                on: false
            })
        );
    }

    #[test]
    fn a_restarted_primary_is_reopened_only_when_no_replica_holds_what_it_lacks() {
        let now = Instant::now();
        let received = |executed: &str, received: &str| {
            let mut state = replica_state(executed, 0);
            state.replication.as_mut().unwrap().received = gtid(received);
            state
        };
        let cases: Vec<(&str, Vec<MemberFact>, bool, Decision)> = vec![
            (
                "holds everything the replicas have: reopened",
                vec![
                    healthy(0, restarted("0-1-10"), now),
                    healthy(1, replica_state("0-1-10", 0), now),
                    healthy(2, replica_state("0-1-9", 0), now),
                ],
                true,
                Decision::Act(Step::OpenPrimary { ordinal: 0 }),
            ),
            (
                "a replica received what the restart discarded: it takes over",
                vec![
                    healthy(0, restarted("0-1-9"), now),
                    healthy(1, received("0-1-9", "0-1-10"), now),
                    healthy(2, replica_state("0-1-9", 0), now),
                ],
                true,
                Decision::Act(Step::Failover { from: 0, to: 1 }),
            ),
            (
                "a replica that does not answer may hold it: waits",
                vec![
                    healthy(0, restarted("0-1-10"), now),
                    healthy(1, replica_state("0-1-10", 0), now),
                    unreachable(2, Health::Unknown("timed out".into()), now),
                ],
                true,
                Decision::Wait(Wait {
                    reason: Reason::PrimaryReopenBlocked,
                    message: "the primary (ordinal 0) restarted and is reopened once every member answers: member 2 is Unknown and may hold a transaction the restart discarded".into(),
                }),
            ),
            (
                "each holds what the other lacks: a human chooses",
                vec![
                    healthy(0, restarted("0-1-9,1-1-1"), now),
                    healthy(1, received("0-1-9", "0-1-10"), now),
                    healthy(2, replica_state("0-1-9", 0), now),
                ],
                true,
                Decision::Wait(Wait {
                    reason: Reason::Diverged,
                    message: "the restarted primary (ordinal 0) and its replicas each hold transactions the others lack; the operator promotes none of them (each member's GTIDs are in status.members): keep the members as they are and restore a new cluster from the newest backup (docs/mysql.md, Disaster recovery)".into(),
                }),
            ),
            (
                "asynchronous mode discards nothing at restart: reopened as before",
                vec![
                    healthy(0, restarted("0-1-10"), now),
                    healthy(1, replica_state("0-1-10", 0), now),
                    unreachable(2, Health::Unknown("timed out".into()), now),
                ],
                false,
                Decision::Act(Step::OpenPrimary { ordinal: 0 }),
            ),
            (
                "asynchronous mode, the primary back on an empty volume: the replica holding everything takes over",
                vec![
                    healthy(0, restarted(""), now),
                    healthy(1, replica_state("0-1-10", 0), now),
                    healthy(2, replica_state("0-1-9", 0), now),
                ],
                false,
                Decision::Act(Step::Failover { from: 0, to: 1 }),
            ),
            (
                "asynchronous mode, a replica with errant writes and less than the primary: reopened as before",
                vec![
                    healthy(0, restarted("0-1-10"), now),
                    healthy(1, replica_state("0-1-9,1-2-1", 0), now),
                    healthy(2, replica_state("0-1-10", 0), now),
                ],
                false,
                Decision::Act(Step::OpenPrimary { ordinal: 0 }),
            ),
            (
                "asynchronous mode, the primary lost its newest commits that a replica received: it takes over",
                vec![
                    healthy(0, restarted("0-1-8"), now),
                    healthy(1, replica_state("0-1-8", 0), now),
                    healthy(2, received("0-1-8", "0-1-9"), now),
                ],
                false,
                Decision::Act(Step::Failover { from: 0, to: 2 }),
            ),
        ];
        for (case, members, semi_sync, expected) in cases {
            let mut facts = facts(members, Some(0), now);
            facts.semi_sync = semi_sync;
            assert_eq!(decide(&facts), expected, "{case}");
        }
    }
    /// Asynchronous mode: a primary that comes back without what it was last seen holding while
    /// it accepted writes (its volume lost) is not reopened while a member that may hold it does
    /// not answer. It was: with its replicas down, it reopened empty over their data.
    #[test]
    fn an_asynchronous_primary_back_without_what_it_was_last_seen_holding_waits_for_every_member() {
        let now = Instant::now();
        let lost_wait = |member: usize, health: &str| {
            Decision::Wait(Wait {
                reason: Reason::PrimaryReopenBlocked,
                message: format!(
                    "the primary (ordinal 0) came back without transactions it was last seen holding while it accepted writes (0-1-10; it holds 0-1-3): its data was lost, and it is replaced or reopened once every member answers: member {member} is {health} and may hold them. If that member is lost for good too, name the member to serve from with {RECOVER_ANNOTATION}, or restore a new cluster from the newest backup (docs/mysql.md, Disaster recovery)"
                ),
            })
        };
        let cases: Vec<(&str, Vec<MemberFact>, Option<&str>, Decision)> = vec![
            (
                "back on an empty volume, its replicas down: waits",
                vec![healthy(0, restarted("0-1-3"), now), down(1, now), down(2, now)],
                None,
                lost_wait(1, "Unknown"),
            ),
            (
                "back with everything it was seen holding, its replicas down: reopened as before",
                vec![healthy(0, restarted("0-1-12"), now), down(1, now), down(2, now)],
                None,
                Decision::Act(Step::OpenPrimary { ordinal: 0 }),
            ),
            (
                "a replica that answers holds less, another does not answer: waits",
                vec![
                    healthy(0, restarted("0-1-3"), now),
                    healthy(1, replica_state("0-1-7", 0), now),
                    down(2, now),
                ],
                None,
                lost_wait(2, "Unknown"),
            ),
            (
                "every member answers: the one holding the most takes over, nothing more can be had",
                vec![
                    healthy(0, restarted("0-1-3"), now),
                    healthy(1, replica_state("0-1-7", 0), now),
                    healthy(2, replica_state("0-1-8", 0), now),
                ],
                None,
                Decision::Act(Step::Failover { from: 0, to: 2 }),
            ),
            (
                "a person naming the primary is refused: it would write again under the GTIDs it lost",
                vec![healthy(0, restarted("0-1-3"), now), down(1, now), down(2, now)],
                Some("main-0"),
                Decision::Wait(Wait {
                    reason: Reason::RecoveryRefused,
                    message: format!("{RECOVER_ANNOTATION} names the primary (member 0), which lost data: it is not reopened over what it lost; name a member that answers, or restore a new cluster from the newest backup"),
                }),
            ),
            (
                "a person names a replica that answers and holds the most of those that answer",
                vec![
                    healthy(0, restarted("0-1-3"), now),
                    healthy(1, replica_state("0-1-7", 0), now),
                    down(2, now),
                ],
                Some("main-1"),
                Decision::Act(Step::Failover { from: 0, to: 1 }),
            ),
            (
                "a person names a replica holding less than the primary: refused",
                vec![
                    healthy(0, restarted("0-1-3,1-1-2"), now),
                    healthy(1, replica_state("0-1-7", 0), now),
                    down(2, now),
                ],
                Some("main-1"),
                Decision::Wait(Wait {
                    reason: Reason::RecoveryRefused,
                    message: "member 0 holds transactions member 1 lacks (it holds 0-1-3,1-1-2); name the member that holds everything the others that answer hold".into(),
                }),
            ),
            (
                "a replica that answers holds everything it was seen holding: it takes over without waiting for the other",
                vec![
                    healthy(0, restarted("0-1-3"), now),
                    healthy(1, replica_state("0-1-10", 0), now),
                    down(2, now),
                ],
                None,
                Decision::Act(Step::Failover { from: 0, to: 1 }),
            ),
            (
                "every member answers but none holds everything: nothing is reopened over what may be the lost data",
                vec![
                    healthy(0, restarted("0-1-3"), now),
                    healthy(1, replica_state("0-1-7,1-2-1", 0), now),
                    healthy(2, replica_state("0-1-9", 0), now),
                ],
                None,
                Decision::Wait(Wait {
                    reason: Reason::Diverged,
                    message: "the restarted primary (ordinal 0) and its replicas each hold transactions the others lack; the operator promotes none of them (each member's GTIDs are in status.members): keep the members as they are and restore a new cluster from the newest backup (docs/mysql.md, Disaster recovery)".into(),
                }),
            ),
        ];
        for (case, members, recover_from, expected) in cases {
            let mut facts = facts(members, Some(0), now);
            facts.semi_sync = false;
            facts.primary_last_open = Some(gtid("0-1-10"));
            facts.recovery = recover_from.map(|member| RecoveryRequest {
                member: member.into(),
                ordinal: member.strip_prefix("main-").and_then(|o| o.parse().ok()),
                done: None,
                expired: false,
            });
            assert_eq!(decide(&facts), expected, "{case}");
        }
    }

    /// Asynchronous mode: a primary back on another data claim than the one it was seen open on
    /// came back on a new volume, whatever the GTIDs recorded say (a witness taken before the
    /// newest writes, or by an operator that did not record one). It is not reopened while a
    /// member does not answer, and the member holding the most takes over once all do.
    #[test]
    fn an_asynchronous_primary_back_on_a_new_volume_waits_for_every_member() {
        let now = Instant::now();
        let cases: Vec<(&str, Vec<MemberFact>, Decision)> = vec![
            (
                "its replicas down, an old witness it still covers: waits",
                vec![healthy(0, restarted("0-1-2"), now), down(1, now), down(2, now)],
                Decision::Wait(Wait {
                    reason: Reason::PrimaryReopenBlocked,
                    message: format!(
                        "the primary (ordinal 0) came back on a new volume (its data claim is not the one it was seen accepting writes on): its data was lost, and it is replaced or reopened once every member answers: member 1 is Unknown and may hold it. If that member is lost for good too, name the member to serve from with {RECOVER_ANNOTATION}, or restore a new cluster from the newest backup (docs/mysql.md, Disaster recovery)"
                    ),
                }),
            ),
            (
                "a replica that answers holds nothing more, another does not answer: waits",
                vec![
                    healthy(0, restarted("0-1-2"), now),
                    healthy(1, replica_state("0-1-2", 0), now),
                    down(2, now),
                ],
                Decision::Wait(Wait {
                    reason: Reason::PrimaryReopenBlocked,
                    message: format!(
                        "the primary (ordinal 0) came back on a new volume (its data claim is not the one it was seen accepting writes on): its data was lost, and it is replaced or reopened once every member answers: member 2 is Unknown and may hold it. If that member is lost for good too, name the member to serve from with {RECOVER_ANNOTATION}, or restore a new cluster from the newest backup (docs/mysql.md, Disaster recovery)"
                    ),
                }),
            ),
            (
                "every member answers: the one holding the most takes over",
                vec![
                    healthy(0, restarted("0-1-2"), now),
                    healthy(1, replica_state("0-1-30", 0), now),
                    healthy(2, replica_state("0-1-29", 0), now),
                ],
                Decision::Act(Step::Failover { from: 0, to: 1 }),
            ),
            (
                "every member answers, none holds everything: nothing is reopened over what a replica may hold",
                vec![
                    healthy(0, restarted("0-1-2"), now),
                    healthy(1, replica_state("0-1-30,1-2-1", 0), now),
                    healthy(2, replica_state("0-1-29,2-3-1", 0), now),
                ],
                Decision::Wait(Wait {
                    reason: Reason::Diverged,
                    message: "the restarted primary (ordinal 0) and its replicas each hold transactions the others lack; the operator promotes none of them (each member's GTIDs are in status.members): keep the members as they are and restore a new cluster from the newest backup (docs/mysql.md, Disaster recovery)".into(),
                }),
            ),
        ];
        for (case, members, expected) in cases {
            let mut facts = facts(members, Some(0), now);
            facts.semi_sync = false;
            facts.primary_last_open = Some(gtid("0-1-2"));
            facts.primary_volume_replaced = true;
            assert_eq!(decide(&facts), expected, "{case}");
        }
    }

    #[test]
    fn a_recovery_request_promotes_the_named_survivor_only_while_the_primary_is_lost_and_only_if_it_holds_the_most()
     {
        let now = Instant::now();
        let request = |member: &str, done: bool| RecoveryRequest {
            member: member.to_string(),
            ordinal: member.strip_prefix("main-").and_then(|o| o.parse().ok()),
            done: done.then(|| "main-0".to_string()),
            expired: false,
        };
        let lost_replica = |ordinal: usize, executed: &str| {
            let mut state = replica_state(executed, 0);
            let replication = state.replication.as_mut().unwrap();
            replication.io_running = false;
            replication.source_lost = true;
            healthy(ordinal, state, now)
        };
        let unknown = |ordinal| unreachable(ordinal, Health::Unknown("timed out".into()), now);
        // The primary (0) and member 2 gone: one replica cannot testify alone (PrimaryUnknown).
        let primary_and_one_gone = || vec![unknown(0), lost_replica(1, "0-1-10"), unknown(2)];
        let refused = |message: &str| {
            Decision::Wait(Wait {
                reason: Reason::RecoveryRefused,
                message: message.into(),
            })
        };
        let cases: Vec<(&str, Vec<MemberFact>, Option<RecoveryRequest>, Decision)> = vec![
            (
                "no request: waits as before",
                primary_and_one_gone(),
                None,
                Decision::Wait(Wait {
                    reason: Reason::PrimaryUnknown,
                    message: "the primary (ordinal 0) is unreachable from the operator but its replicas do not report it down; no failover: timed out".into(),
                }),
            ),
            (
                "the survivor named: promoted",
                primary_and_one_gone(),
                Some(request("main-1", false)),
                Decision::Act(Step::Failover { from: 0, to: 1 }),
            ),
            (
                "taken once: a request recorded done is not taken again",
                primary_and_one_gone(),
                Some(request("main-1", true)),
                Decision::Wait(Wait {
                    reason: Reason::PrimaryUnknown,
                    message: "the primary (ordinal 0) is unreachable from the operator but its replicas do not report it down; no failover: timed out".into(),
                }),
            ),
            (
                "the primary named",
                primary_and_one_gone(),
                Some(request("main-0", false)),
                refused("quorum.dev/recover-from names the primary (member 0), the member that is lost: name the surviving member to promote"),
            ),
            (
                "a member that does not answer named",
                primary_and_one_gone(),
                Some(request("main-2", false)),
                refused("member 2 does not answer; only a member that answers is promoted"),
            ),
            (
                "no such member",
                primary_and_one_gone(),
                Some(request("cache-1", false)),
                refused("quorum.dev/recover-from names \"cache-1\", which is not one of this cluster's 3 members (ordinals 0 to 2), so nothing is changed: name one, or remove the annotation"),
            ),
            (
                "another survivor holds more: refused, naming it",
                vec![unknown(0), lost_replica(1, "0-1-9"), lost_replica(2, "0-1-10")],
                Some(request("main-1", false)),
                refused("member 2 holds transactions member 1 lacks (it holds 0-1-10); name the member that holds everything the others that answer hold"),
            ),
            (
                "a member still replicating from the primary: it is not lost",
                vec![unknown(0), lost_replica(1, "0-1-10"), healthy(2, replica_state("0-1-10", 0), now)],
                Some(request("main-1", false)),
                refused("member 2 still replicates from the primary (member 0): it is not lost, nothing is promoted"),
            ),
            (
                "the primary down by testimony but a replica unreachable (FailoverBlocked): promoted on request",
                vec![
                    unreachable(0, Health::Unhealthy("2 of 2 replicas lost it".into()), now),
                    lost_replica(1, "0-1-10"),
                    unknown(2),
                ],
                Some(request("main-1", false)),
                Decision::Act(Step::Failover { from: 0, to: 1 }),
            ),
            (
                "the primary with no pod: promoted on request",
                vec![lost_replica(1, "0-1-10"), lost_replica(2, "0-1-10")],
                Some(request("main-2", false)),
                Decision::Act(Step::Failover { from: 0, to: 2 }),
            ),
        ];
        for (case, members, recovery, expected) in cases {
            let mut facts = facts(keeping_logs(members), Some(0), now);
            facts.desired_members = 3;
            facts.statefulset_replicas = Some(3);
            facts.recovery = recovery;
            assert_eq!(decide(&facts), expected, "{case}");
        }
        // No request: the wait names the survivor to promote and the command that asks for it.
        let mut missing = facts(
            keeping_logs(vec![lost_replica(1, "0-1-9"), lost_replica(2, "0-1-10")]),
            Some(0),
            now,
        );
        missing.desired_members = 3;
        missing.statefulset_replicas = Some(3);
        let Decision::Wait(wait) = decide(&missing) else {
            panic!("expected a wait");
        };
        assert_eq!(wait.reason, Reason::PrimaryMissing);
        assert!(
            wait.message.contains(
                "promote member 2, which holds every transaction the members that answer hold, \
                 with `kubectl annotate mysqlcluster main quorum.dev/recover-from=main-2`"
            ),
            "{}",
            wait.message
        );
        // Expired (seen while nothing was lost): never taken.
        let mut expired = facts(keeping_logs(primary_and_one_gone()), Some(0), now);
        expired.recovery = Some(RecoveryRequest {
            expired: true,
            ..request("main-1", false)
        });
        assert_eq!(reason(&decide(&expired)), Reason::PrimaryUnknown);
        // A healthy primary: the request changes nothing.
        let mut healthy_primary = facts(settled_three(now), Some(0), now);
        let without = decide(&healthy_primary);
        healthy_primary.recovery = Some(request("main-1", false));
        assert_eq!(decide(&healthy_primary), without);
    }

    fn templates(outdated: &[usize], current: &[usize]) -> Templates {
        Templates::Known {
            outdated: outdated.iter().map(|o| (*o, format!("uid-{o}"))).collect(),
            current: current.iter().copied().collect(),
        }
    }

    fn reason(decision: &Decision) -> Reason {
        match decision {
            Decision::Wait(wait) => wait.reason,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    #[test]
    fn a_new_pod_template_rolls_replicas_one_at_a_time_then_the_primary_after_a_switchover() {
        let now = Instant::now();
        let at = |outdated: &[usize], current: &[usize]| Facts {
            templates: templates(outdated, current),
            ..facts(settled_three(now), Some(0), now)
        };
        let table = [
            (
                at(&[0, 1, 2], &[]),
                Decision::Act(Step::RestartMember { ordinal: 1 }),
            ),
            (
                at(&[0, 2], &[1]),
                Decision::Act(Step::RestartMember { ordinal: 2 }),
            ),
            // Only the primary is left: its role goes to the most advanced current replica.
            (
                at(&[0], &[1, 2]),
                Decision::Act(Step::Switchover { from: 0, to: 1 }),
            ),
            (at(&[], &[0, 1, 2]), Decision::Settled),
            // Which revision is current is not known yet: nothing is restarted.
            (
                Facts {
                    templates: Templates::Unknown,
                    ..at(&[], &[])
                },
                Decision::Settled,
            ),
        ];
        for (case, expected) in table {
            assert_eq!(decide(&case), expected, "{:?}", case.templates);
        }
        // After the switchover the old primary is a replica of the new one, restarted last.
        let switched = Facts {
            templates: templates(&[0], &[1, 2]),
            ..facts(
                vec![
                    healthy(0, replica_state("0-1-10", 1), now),
                    healthy(1, primary_state("0-1-10"), now),
                    healthy(2, replica_state("0-1-10", 1), now),
                ],
                Some(1),
                now,
            )
        };
        assert_eq!(
            decide(&switched),
            Decision::Act(Step::RestartMember { ordinal: 0 })
        );
        // A cluster of one has no one to hand over to: its primary is restarted as it is.
        let alone = Facts {
            templates: templates(&[0], &[]),
            ..facts(
                vec![healthy(
                    0,
                    ServerState {
                        semi_sync_source: false,
                        ..primary_state("0-1-10")
                    },
                    now,
                )],
                Some(0),
                now,
            )
        };
        assert_eq!(decide(&alone), Decision::Act(Step::RestartMember { ordinal: 0 }));
    }

    #[test]
    fn a_roll_waits_for_every_other_member_healthy_and_every_replica_caught_up() {
        let now = Instant::now();
        let rolling = |members: Vec<MemberFact>| Facts {
            templates: templates(&[1, 2], &[0]),
            ..facts(members, Some(0), now)
        };
        let mut down = settled_three(now);
        down[2] = unreachable(2, Health::Unknown("timed out".into()), now);
        let blocked = decide(&rolling(keeping_logs(down)));
        assert_eq!(reason(&blocked), Reason::RestartBlocked, "{blocked:?}");

        let mut lagging = settled_three(now);
        if let Some(replication) = lagging[2].state.as_mut().and_then(|s| s.replication.as_mut()) {
            replication.lag_seconds = Some(5);
        }
        let catching_up = decide(&rolling(lagging));
        assert_eq!(reason(&catching_up), Reason::RestartInProgress);
        assert!(
            format!("{catching_up:?}").contains("member 2 (5 s behind)"),
            "{catching_up:?}"
        );

        // Right after START REPLICA the lag reads 0 before the backlog is even fetched: what the
        // replica holds (executed or received), against the primary's, says whether it caught up.
        let mut fetching = settled_three(now);
        fetching[2].state = Some(replica_state("0-1-2", 0));
        fetching[0].state = Some(primary_state("0-1-5000"));
        fetching[1].state = Some(replica_state("0-1-5000", 0));
        let fetching = decide(&rolling(fetching));
        assert_eq!(reason(&fetching), Reason::RestartInProgress, "{fetching:?}");
        assert!(
            format!("{fetching:?}").contains("member 2 (4998 transactions behind)"),
            "{fetching:?}"
        );

        // The target itself may be down: a restart onto the new template may be its cure.
        let mut target_down = settled_three(now);
        target_down[1] = unreachable(1, Health::Unhealthy("crashing".into()), now);
        assert_eq!(
            decide(&rolling(keeping_logs(target_down))),
            Decision::Act(Step::RestartMember { ordinal: 1 })
        );

        // The primary is never restarted while no current replica can take its role.
        let mut no_successor = facts(settled_three(now), Some(0), now);
        no_successor.templates = templates(&[0], &[]);
        assert_eq!(reason(&decide(&no_successor)), Reason::RestartBlocked);
    }

    #[test]
    fn a_recorded_restart_is_taken_again_until_the_pod_goes_and_cleared_once_the_member_is_back() {
        let now = Instant::now();
        let recorded = |templates: Templates, members: Vec<MemberFact>| Facts {
            templates,
            in_flight: Some(InFlight::Restart { ordinal: 1 }),
            ..facts(members, Some(0), now)
        };
        // The operator stopped between recording the restart and deleting the pod.
        assert_eq!(
            decide(&recorded(templates(&[1], &[0, 2]), settled_three(now))),
            Decision::Act(Step::RestartMember { ordinal: 1 })
        );
        // Taken again through the gate.
        let mut down = settled_three(now);
        down[2] = unreachable(2, Health::Unknown("timed out".into()), now);
        assert_eq!(
            reason(&decide(&recorded(templates(&[1], &[0]), down))),
            Reason::RestartBlocked
        );
        // The pod is gone or back but the member does not answer yet.
        let mut starting = settled_three(now);
        starting[1] = unreachable(1, Health::Unknown("connection refused".into()), now);
        for (templates, members) in [
            (templates(&[], &[0, 2]), settled_three(now)),
            (templates(&[], &[0, 1, 2]), starting),
        ] {
            assert_eq!(
                reason(&decide(&recorded(templates, members))),
                Reason::RestartInProgress
            );
        }
        assert_eq!(
            decide(&recorded(templates(&[], &[0, 1, 2]), settled_three(now))),
            Decision::Act(Step::ClearInFlight)
        );
        // A member that does not come back in far longer than a restart takes: the wait warns
        // and says where to look; still nothing else is restarted.
        let mut never_back = settled_three(now);
        never_back[1] = unreachable(1, Health::Unknown("connection refused".into()), now);
        let long_ago = |age: u64| Facts {
            in_flight_age: Some(Duration::from_secs(age)),
            ..recorded(templates(&[], &[0, 2]), never_back.clone())
        };
        assert_eq!(reason(&decide(&long_ago(9 * 60))), Reason::RestartInProgress);
        let stuck = decide(&long_ago(11 * 60));
        assert_eq!(reason(&stuck), Reason::RestartStuck, "{stuck:?}");
        assert!(
            format!("{stuck:?}").contains("has not come back 11 minutes")
                && format!("{stuck:?}").contains("`kubectl delete pod main-1`"),
            "{stuck:?}"
        );
        assert_eq!(
            Step::RestartMember { ordinal: 1 }.in_flight(),
            Some(InFlight::Restart { ordinal: 1 })
        );
    }
}
