//! The decision: from what the operator observed of a replica set and what the spec asks for,
//! the one next step. Pure: no I/O, table-tested.
//!
//! The rules, in the order they are applied:
//! - A set is initiated once, with its first member only, and only when every member pod that
//!   exists answered and none has a configuration. A set the operator initiated before is never
//!   initiated again, whatever the members say.
//! - Nothing changes without a primary, and nothing while the last configuration has not
//!   reached every member that answers.
//! - Leaving members go first: a leaving primary steps down; a leaving voter is demoted
//!   (`votes: 0`) in one reconfiguration and removed in the next; none of it while any other
//!   member is not positively healthy, never below one voter, and never a leaving member the
//!   operator cannot reach while the primary still hears it (Unknown is not down).
//! - Joining members are added with `votes: 0, priority: 0`, one per reconfiguration, and
//!   promoted to voting only once SECONDARY and caught up, while every voter is healthy.
//! - A version change restarts one member at a time, secondaries first, the primary after it
//!   stepped down, each only while every member is serving; then the featureCompatibilityVersion
//!   is raised once every member runs the new release.

use quorum_core::availability::{
    gate::{self, Disruption, Freshness, GateInput, Quorum, Verdict, WaitReason},
    health::{Health, Observation},
};
use quorum_core::{
    recovery::{RECOVER_ANNOTATION, RecoveryRequest, request_command},
    repair::RepairRequest,
};

use crate::admin::{ConfigMember, FeatureCompatibility, Hello, MemberState, ReplConfig, ReplStatus};
use crate::crd::release_of;
pub use crate::reasons::Reason;

/// How far (seconds) a member may trail the primary and still be promoted to voting, or be the
/// secondary a primary steps down for.
pub const MAX_CATCH_UP_LAG_SECONDS: i64 = 10;

/// A member the spec asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredMember {
    /// The pod's name.
    pub name: String,
    /// `host:port` in the configuration.
    pub host: String,
    /// The configuration's `_id`, stable for the pod.
    pub id: i32,
    pub votes: i32,
    pub priority: f64,
    pub hidden: bool,
    pub arbiter: bool,
}

impl DesiredMember {
    fn config_member(&self, votes: i32, priority: f64) -> ConfigMember {
        ConfigMember {
            id: self.id,
            host: self.host.clone(),
            votes,
            priority,
            hidden: self.hidden,
            arbiter_only: self.arbiter,
            other: Default::default(),
        }
    }
}

/// What the spec asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub set_name: String,
    /// Data members in ordinal order, then the arbiter.
    pub members: Vec<DesiredMember>,
    /// `spec.version`, as the pods are labelled with it.
    pub version: String,
}

/// Whether the operator reached a member.
#[derive(Clone, Debug, PartialEq)]
pub enum Reach {
    Answered(Hello),
    /// Not reachable from the operator: nothing is known about it.
    Unknown(String),
}

/// One member (asked for, or in the configuration) as the operator saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct SeenMember {
    pub name: String,
    pub host: String,
    /// The UID of its pod, `None` while it has none: a restart or a wipe acts on exactly this
    /// pod, never on one created again under its name since.
    pub pod_uid: Option<String>,
    /// The version label of its pod.
    pub pod_version: Option<String>,
    /// Its pod was created from an older template than its StatefulSet's current one (a
    /// changed override, a new operator release): it restarts like a version upgrade.
    pub pod_outdated: bool,
    /// The API server reports its pod `Pending`: nothing of the member runs or serves.
    pub pod_pending: bool,
    /// The kubelet reports its pod Ready by its own probes.
    pub pod_ready: bool,
    pub reach: Reach,
    /// The version its server reports.
    pub server_version: Option<String>,
    /// It says itself (its own `replSetGetStatus`) that it is too stale to catch up: RECOVERING,
    /// `error RS102 too stale to catch up`.
    pub too_stale: bool,
}

impl SeenMember {
    pub fn hello(&self) -> Option<&Hello> {
        match &self.reach {
            Reach::Answered(hello) => Some(hello),
            Reach::Unknown(_) => None,
        }
    }
}

/// Everything a decision is made from.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Observed {
    /// The operator initiated this set before (`status.initiatedAt`).
    pub initiated_before: bool,
    pub members: Vec<SeenMember>,
    /// The configuration, from the primary (or the newest a member holds, without one).
    pub config: Option<ReplConfig>,
    /// `replSetGetStatus` from the primary.
    pub status: Option<ReplStatus>,
    /// The primary's `host:port`.
    pub primary: Option<String>,
    pub feature_compatibility: Option<FeatureCompatibility>,
    /// The set waits for its data to be restored before any member joins the first.
    pub restore_pending: bool,
    /// A repair a person asked for, while the request stands.
    pub repair: Option<RepairRequest>,
    /// The uid of the data claim of the member a repair names, while the request stands and the
    /// claim does (not being deleted); `None` for a member that keeps its data in its pod.
    pub repair_claim: Option<String>,
    /// A recovery a person asked for, while the request stands.
    pub recovery: Option<RecoveryRequest>,
}

impl Observed {
    fn seen(&self, host: &str) -> Option<&SeenMember> {
        self.members.iter().find(|member| member.host == host)
    }

    fn name_of(&self, host: &str) -> String {
        self.seen(host)
            .map_or_else(|| host.to_string(), |member| member.name.clone())
    }

    /// The member's health, one word for status and decisions alike:
    /// - `Unhealthy` when the primary positively reports a fault: it does not hear the member's
    ///   heartbeats, or the member is in a state that serves nothing (recovering, rolling back,
    ///   removed);
    /// - `Unknown` when the operator cannot reach it and the primary does not report it down, or
    ///   when the primary's status leaves out a member of the configuration;
    /// - `Healthy` otherwise.
    pub fn health(&self, host: &str) -> Health {
        let reported = self.status.as_ref().and_then(|status| status.member(host));
        if let Some(reported) = reported
            && (!reported.healthy || reported.state == MemberState::Down)
        {
            return Health::Unhealthy("the primary does not hear its heartbeats".to_string());
        }
        match self.seen(host).map(|member| &member.reach) {
            None => Health::Unknown("not observed".to_string()),
            Some(Reach::Unknown(why)) => Health::Unknown(format!("not reachable from the operator: {why}")),
            Some(Reach::Answered(_)) => match reported.map(|reported| reported.state) {
                Some(
                    state @ (MemberState::Recovering
                    | MemberState::Rollback
                    | MemberState::Removed
                    | MemberState::Unknown),
                ) => Health::Unhealthy(format!("state {}", state.as_str())),
                Some(_) => Health::Healthy,
                // A member of the configuration the primary's status leaves out: not heard, so
                // not positively healthy (a member still joining is in no configuration).
                None if self.status.is_some()
                    && self
                        .config
                        .as_ref()
                        .is_some_and(|config| config.member(host).is_some()) =>
                {
                    Health::Unknown("the primary does not report it".to_string())
                }
                None => Health::Healthy,
            },
        }
    }

    fn healthy(&self, host: &str) -> bool {
        self.health(host).is_healthy()
    }

    /// Whether a new configuration reaches the member: the operator reached it and the
    /// primary hears its heartbeats.
    fn receives_configurations(&self, host: &str) -> bool {
        let answered = self.seen(host).is_some_and(|member| member.hello().is_some());
        let heard = self
            .status
            .as_ref()
            .and_then(|status| status.member(host))
            .is_some_and(|member| member.healthy && member.state != MemberState::Down);
        answered && heard
    }

    pub(crate) fn state(&self, host: &str) -> Option<MemberState> {
        self.status.as_ref()?.member(host).map(|member| member.state)
    }

    /// Seconds the member's last applied operation trails the primary's.
    pub fn lag_seconds(&self, host: &str) -> Option<i64> {
        let status = self.status.as_ref()?;
        let primary = status.member(self.primary.as_deref()?)?.optime?;
        let member = status.member(host)?.optime?;
        Some((i64::from(primary.time) - i64::from(member.time)).max(0))
    }

    /// What the safety gate says of a `disruption` of the member at `target`: every other
    /// member of the configuration, voting or not, must be positively healthy.
    fn gate(&self, config: &ReplConfig, target: &str, disruption: Disruption) -> Result<(), WaitReason> {
        let observations: Vec<Observation> = config
            .members
            .iter()
            .map(|member| {
                Observation::new(
                    self.name_of(&member.host),
                    self.health(&member.host),
                    member.is_voting(),
                )
            })
            .collect();
        match gate::check(&GateInput {
            target: &self.name_of(target),
            disruption,
            observations: &observations,
            // A reconfiguration in flight is seen as the configuration not yet reaching every
            // member, which waits before any step is considered.
            in_flight: None,
            freshness: Freshness::ThisPass,
            quorum: Quorum::EveryOtherMember,
        }) {
            Verdict::Proceed => Ok(()),
            Verdict::Wait(blocking) => Err(blocking),
        }
    }
}

/// What a reconfiguration changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new member, not voting.
    Add,
    /// A caught-up member made voting.
    Promote,
    /// A voter made non-voting (before it leaves, or as the spec asks).
    Demote,
    /// A non-voting member taken out.
    Remove,
    /// Priority or hidden of a non-voting member.
    Adjust,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Add => "Add",
            Change::Promote => "Promote",
            Change::Demote => "Demote",
            Change::Remove => "Remove",
            Change::Adjust => "Reconfigure",
        }
    }
}

/// Why a primary is asked to step down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepDownReason {
    /// It leaves the set.
    Leaving,
    /// It is demoted to non-voting.
    Demoted,
    /// It is the last member to restart for a version change.
    Upgrade,
    /// A person asked for it to be rebuilt.
    Repair,
}

/// Why a member is wiped and copies the data again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResyncCause {
    /// It says it is too stale to catch up (`error RS102`).
    TooStale,
    /// A person asked for it ([`quorum_core::repair::REPAIR_ANNOTATION`]).
    Requested,
}

/// The one next step.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Initiate {
        member: String,
        host: String,
        config: ReplConfig,
    },
    Reconfigure {
        change: Change,
        member: String,
        config: ReplConfig,
    },
    StepDown {
        member: String,
        host: String,
        reason: StepDownReason,
    },
    /// Delete the member's pod (the one observed) so it comes back with the new template.
    Restart {
        member: String,
        pod_uid: String,
    },
    /// Give the members left of a set that lost its majority for good a configuration of their
    /// own (`replSetReconfig` with `force`, on `host`), on a person's request.
    ForceReconfigure {
        member: String,
        host: String,
        config: ReplConfig,
    },
    /// Wipe the member's volume and pod (the one observed) so it comes back empty and copies
    /// the data again (an initial sync): the only way back for a member too stale to catch up.
    Resync {
        member: String,
        pod_uid: String,
        cause: ResyncCause,
    },
    SetFeatureCompatibility {
        release: String,
    },
    /// No step now: a reason from [`Reason`] and a sentence for people.
    Wait {
        reason: Reason,
        message: String,
    },
    Settled,
}

fn wait(reason: Reason, message: impl Into<String>) -> Step {
    Step::Wait {
        reason,
        message: message.into(),
    }
}

/// The next step for the set.
pub fn decide(desired: &Desired, observed: &Observed) -> Step {
    if let Some(step) = stuck_pod(desired, observed) {
        return step;
    }
    let Some(config) = &observed.config else {
        return initiate(desired, observed);
    };
    if config.set_name != desired.set_name {
        return wait(
            Reason::WrongReplicaSet,
            format!(
                "the members belong to replica set {}, not {}",
                config.set_name, desired.set_name
            ),
        );
    }
    let Some(primary) = observed.primary.as_deref() else {
        return recover_on_request(observed, config).unwrap_or_else(|| no_primary(desired, observed, config));
    };
    if observed.status.is_none() {
        return wait(
            Reason::PrimaryStatusUnknown,
            "the primary did not report the set's status",
        );
    }
    let behind: Vec<String> = config
        .members
        .iter()
        .filter(|member| observed.receives_configurations(&member.host))
        .filter(|member| {
            observed
                .status
                .as_ref()
                .and_then(|status| status.member(&member.host))
                .and_then(|member| member.config_version)
                .is_some_and(|version| version < config.version)
        })
        .map(|member| observed.name_of(&member.host))
        .collect();
    if !behind.is_empty() {
        return wait(
            Reason::ConfigurationPropagating,
            format!(
                "configuration version {} has not reached {} yet",
                config.version,
                behind.join(", ")
            ),
        );
    }
    if let Some(step) = leaving(desired, observed, config, primary) {
        return step;
    }
    if let Some(step) = resyncing(observed, config, primary) {
        return step;
    }
    if observed.restore_pending {
        return wait(
            Reason::RestorePending,
            "no member joins before the backup is restored into the first",
        );
    }
    if let Some(step) = joining(desired, observed, config) {
        return step;
    }
    if let Some(step) = adjusting(desired, observed, config, primary) {
        return step;
    }
    if let Some(step) = upgrading(desired, observed, config, primary) {
        return step;
    }
    Step::Settled
}

/// A member whose pod runs nothing (`Pending`: no node took it, say) on an older template is
/// replaced at once: replacing it disturbs nothing, it may start only on the current template,
/// and every other step would wait for it to answer. Not for a version its data may not start
/// on: that is the upgrade's to refuse.
fn stuck_pod(desired: &Desired, observed: &Observed) -> Option<Step> {
    let release = release_of(&desired.version);
    let compatible = observed
        .feature_compatibility
        .as_ref()
        .and_then(FeatureCompatibility::settled_version)
        .is_some_and(|fcv| runs_on_compatibility(&release, fcv));
    observed
        .members
        .iter()
        .filter(|member| member.pod_pending && member.pod_outdated)
        .filter(|member| member.pod_version.as_deref() == Some(desired.version.as_str()) || compatible)
        .find_map(|member| {
            Some(Step::Restart {
                member: member.name.clone(),
                pod_uid: member.pod_uid.clone()?,
            })
        })
}

fn initiate(desired: &Desired, observed: &Observed) -> Step {
    let existing: Vec<&SeenMember> = observed.members.iter().filter(|m| m.pod_uid.is_some()).collect();
    let unknown: Vec<&str> = existing
        .iter()
        .filter(|member| member.hello().is_none())
        .map(|member| member.name.as_str())
        .collect();
    if observed.initiated_before {
        if !unknown.is_empty() && unknown.len() == existing.len() {
            return wait(
                Reason::MembersUnknown,
                format!("no member can be reached ({})", unknown.join(", ")),
            );
        }
        return wait(
            Reason::ConfigurationMissing,
            "the set was initiated, yet no member that answers reports its configuration; \
             the operator will not initiate it again (restore the members' volumes or recreate the resource)",
        );
    }
    if !unknown.is_empty() {
        // A member out of reach may hold a configuration: initiating another would split the set.
        return wait(
            Reason::MembersUnknown,
            format!("not initiating while {} cannot be reached", unknown.join(", ")),
        );
    }
    // A member that says it belongs to a set holds its configuration even when reading it
    // failed (a timeout): initiating another would split the set.
    let in_a_set: Vec<&str> = existing
        .iter()
        .filter(|member| member.hello().is_some_and(|hello| hello.set_name.is_some()))
        .map(|member| member.name.as_str())
        .collect();
    if !in_a_set.is_empty() {
        return wait(
            Reason::ConfigurationMissing,
            format!(
                "not initiating: {} already belong to a replica set whose configuration could not be read",
                in_a_set.join(", ")
            ),
        );
    }
    let Some(first) = desired.members.first() else {
        return wait(Reason::NoMembers, "the spec asks for no members");
    };
    match observed.seen(&first.host) {
        Some(seen) if seen.pod_uid.is_some() && seen.hello().is_some() => Step::Initiate {
            member: first.name.clone(),
            host: first.host.clone(),
            config: ReplConfig::initial(&desired.set_name, vec![first.config_member(1, 1.0)]),
        },
        _ => wait(
            Reason::MemberStarting,
            format!("waiting for {} to start before initiating the set", first.name),
        ),
    }
}

fn no_primary(desired: &Desired, observed: &Observed, config: &ReplConfig) -> Step {
    let named: Vec<&str> = observed
        .members
        .iter()
        .filter_map(|member| member.hello()?.primary.as_deref())
        .collect();
    if let Some(primary) = named.first()
        && observed
            .seen(primary)
            .is_some_and(|member| member.hello().is_none())
    {
        return wait(
            Reason::PrimaryUnknown,
            format!(
                "the members name {} as primary, which the operator cannot reach",
                observed.name_of(primary)
            ),
        );
    }
    let silent: Vec<String> = config
        .members
        .iter()
        .filter(|member| member.is_voting())
        .filter(|member| observed.seen(&member.host).and_then(SeenMember::hello).is_none())
        .map(|member| observed.name_of(&member.host))
        .collect();
    let voters = config.voting_members();
    if silent.len() * 2 >= voters && !silent.is_empty() {
        let most_applied = config
            .members
            .iter()
            .filter_map(|member| {
                let seen = observed.seen(&member.host)?;
                Some((seen.hello()?.last_applied, seen.name.clone()))
            })
            .max()
            .map(|(_, name)| name);
        let recover = match most_applied {
            Some(name) => format!(
                "recover from {name}, which applied the most of those that answer, with `{}`",
                request_command("MongoDBReplicaSet", &desired.set_name, &name)
            ),
            None => format!("name the member to recover from with {RECOVER_ANNOTATION}"),
        };
        return wait(
            Reason::QuorumLost,
            format!(
                "{} of the {voters} voting members do not answer ({}): the set cannot elect a primary. \
                 If they are lost for good, {recover}; what only the lost members hold is given up \
                 (docs/mongodb.md, Disaster recovery)",
                silent.len(),
                silent.join(", "),
            ),
        );
    }
    wait(
        Reason::NoPrimary,
        "no member is primary; waiting for the set to elect one",
    )
}

/// A set with no primary whose voting majority does not answer cannot elect one, and the
/// operator never forces a configuration by itself: a member it cannot reach may only be slow to
/// come back. A person who knows the others are lost for good names the member to recover from
/// ([`RECOVER_ANNOTATION`]). It is given a configuration of the members that answer (forced, as
/// only that works without a majority) if it answers, no member that answers knows a primary
/// (then the set is not lost), a majority of the voters does not answer (otherwise the set elects
/// by itself), and no member that answers applied more than it. What only the members left out
/// held is given up. `None` when there is no request to take or it was taken.
fn recover_on_request(observed: &Observed, config: &ReplConfig) -> Option<Step> {
    let request = observed.recovery.as_ref().filter(|request| request.is_open())?;
    let refused = |message: String| Some(wait(Reason::RecoveryRefused, message));
    let Some(named) = observed
        .members
        .iter()
        .find(|member| member.name == request.member && config.member(&member.host).is_some())
    else {
        return refused(format!(
            "{RECOVER_ANNOTATION} names {:?}, which is not a member of the set's configuration, so nothing is changed: name one, or remove the annotation",
            request.member
        ));
    };
    let Some(hello) = named.hello() else {
        return refused(format!(
            "{} does not answer; only a member that answers is recovered from",
            named.name
        ));
    };
    if config
        .member(&named.host)
        .is_none_or(|member| !member.is_voting() || member.priority <= 0.0 || member.arbiter_only)
    {
        return refused(format!(
            "{} cannot be elected (no vote, priority 0 or an arbiter); name a voting data member",
            named.name
        ));
    }
    let answering: Vec<(&SeenMember, &Hello)> = config
        .members
        .iter()
        .filter_map(|member| {
            let seen = observed.seen(&member.host)?;
            Some((seen, seen.hello()?))
        })
        .collect();
    if let Some((seen, known)) = answering.iter().find(|(_, hello)| hello.primary.is_some()) {
        return refused(format!(
            "{} knows a primary ({}): the set is not lost, nothing is forced",
            seen.name,
            known.primary.as_deref().unwrap_or_default()
        ));
    }
    let voters = config.voting_members();
    let voters_answering = config
        .members
        .iter()
        .filter(|member| member.is_voting())
        .filter(|member| answering.iter().any(|(seen, _)| seen.host == member.host))
        .count();
    if voters_answering > voters / 2 {
        return refused(format!(
            "{voters_answering} of the {voters} voting members answer, a majority: the set elects a primary by itself, nothing is forced"
        ));
    }
    let Some(applied) = hello.last_applied else {
        return refused(format!(
            "{} does not report the last operation it applied, so it cannot be compared with the others",
            named.name
        ));
    };
    if let Some((ahead, their)) = answering
        .iter()
        .filter(|(seen, _)| seen.host != named.host)
        .find_map(|(seen, hello)| {
            hello
                .last_applied
                .filter(|theirs| *theirs > applied)
                .map(|t| (seen, t))
        })
    {
        return refused(format!(
            "{} applied more than {} ({their} against {applied}); name the member that applied the most",
            ahead.name, named.name
        ));
    }
    let members = config
        .members
        .iter()
        .filter(|member| answering.iter().any(|(seen, _)| seen.host == member.host))
        .cloned()
        .collect();
    Some(Step::ForceReconfigure {
        member: named.name.clone(),
        host: named.host.clone(),
        config: config.next(members),
    })
}

/// A member wiped to copy everything again: one too stale to catch up, then one a person asked
/// to rebuild. The stale one comes first: a repair waits until every other member is healthy,
/// which the stale one is not until it is resynced.
fn resyncing(observed: &Observed, config: &ReplConfig, primary: &str) -> Option<Step> {
    too_stale(observed, config, primary).or_else(|| repairing(observed, config, primary))
}

/// A member too stale to catch up (on its own word) never will: the operator wipes it so it
/// copies everything again from a healthy member. Never the primary, and only while every other
/// member is healthy, so the set keeps its majority and a source to copy from meanwhile.
fn too_stale(observed: &Observed, config: &ReplConfig, primary: &str) -> Option<Step> {
    let stale = config.members.iter().find(|member| {
        member.host != primary
            && !member.arbiter_only
            && observed.seen(&member.host).is_some_and(|seen| seen.too_stale)
    })?;
    let name = observed.name_of(&stale.host);
    // A pod being replaced is waited for: the wipe names the pod it was decided on.
    let Some(pod_uid) = observed.seen(&stale.host).and_then(|seen| seen.pod_uid.clone()) else {
        return Some(wait(
            Reason::ResyncBlocked,
            format!("{name} is too stale to catch up and has no pod to wipe yet; waiting for it"),
        ));
    };
    if let Err(blocking) = observed.gate(config, &stale.host, Disruption::Restart) {
        return Some(wait(
            Reason::ResyncBlocked,
            format!(
                "{name} is too stale to catch up and must copy the data again, which waits until every \
                 other member is healthy; {blocking}"
            ),
        ));
    }
    Some(Step::Resync {
        member: name,
        pod_uid,
        cause: ResyncCause::TooStale,
    })
}

/// A repair a person asked for: the named member is wiped as a member too stale is, through the
/// same gate, once per request. The primary steps down first. The pod recorded as wiped for the
/// request is wiped again only while it is still that pod (the operator stopped between the
/// record and the act); once another pod runs under the name, the request is done with.
fn repairing(observed: &Observed, config: &ReplConfig, primary: &str) -> Option<Step> {
    let request = observed.repair.as_ref()?;
    let data_members = || config.members.iter().filter(|member| !member.arbiter_only);
    let Some(target) = data_members().find(|member| observed.name_of(&member.host) == request.member) else {
        let names: Vec<String> = data_members()
            .map(|member| observed.name_of(&member.host))
            .collect();
        return Some(wait(
            Reason::RepairRefused,
            format!(
                "{} names {:?}, which is not a data member of this set, so nothing is changed: name \
                 one of {names:?}, or remove the annotation",
                quorum_core::repair::REPAIR_ANNOTATION,
                request.member
            ),
        ));
    };
    let name = request.member.clone();
    let pod_uid = observed.seen(&target.host).and_then(|seen| seen.pod_uid.clone());
    if request.wiped(pod_uid.as_deref(), observed.repair_claim.as_deref()) {
        return None;
    }
    if target.host == primary {
        return Some(step_down(observed, config, primary, StepDownReason::Repair));
    }
    let Some(pod_uid) = pod_uid else {
        return Some(wait(
            Reason::ResyncBlocked,
            format!("{name} is to be rebuilt on request and has no pod to wipe yet; waiting for it"),
        ));
    };
    if let Err(blocking) = observed.gate(config, &target.host, Disruption::Restart) {
        return Some(wait(
            Reason::ResyncBlocked,
            format!("{name} is rebuilt on request once every other member is healthy; {blocking}"),
        ));
    }
    // An answering member counts as healthy while it copies or catches up (a member rebuilt a
    // moment ago, in STARTUP2): wiping another then could leave majority-acknowledged writes on
    // too few members.
    let behind: Vec<String> = config
        .members
        .iter()
        .filter(|member| !member.arbiter_only && member.host != primary && member.host != target.host)
        .filter(|member| {
            observed.state(&member.host) != Some(MemberState::Secondary)
                || observed
                    .lag_seconds(&member.host)
                    .is_none_or(|lag| lag > MAX_CATCH_UP_LAG_SECONDS)
        })
        .map(|member| observed.name_of(&member.host))
        .collect();
    if !behind.is_empty() {
        return Some(wait(
            Reason::ResyncBlocked,
            format!(
                "{name} is rebuilt on request once every other member is a secondary within \
                 {MAX_CATCH_UP_LAG_SECONDS}s of the primary: not yet {}",
                behind.join(", ")
            ),
        ));
    }
    Some(Step::Resync {
        member: name,
        pod_uid,
        cause: ResyncCause::Requested,
    })
}

fn leaving(desired: &Desired, observed: &Observed, config: &ReplConfig, primary: &str) -> Option<Step> {
    // The highest ordinals leave first, as the StatefulSet shrinks from the top.
    let leaving = config
        .members
        .iter()
        .rev()
        .find(|member| !desired.members.iter().any(|d| d.host == member.host))?;
    // Its `_id` is a wanted member's: that member's address changed (the cluster domain or the
    // member addresses the operator is given), it is not leaving. Removing members one by one
    // for it would leave a set of one.
    if let Some(wanted) = desired.members.iter().find(|d| d.id == leaving.id) {
        return Some(wait(
            Reason::MemberAddressChanged,
            format!(
                "the set's member _id {} is configured as {}, but {} is now reached as {}: nothing is removed;                  give the operator back the member addresses the set was configured with",
                leaving.id, leaving.host, wanted.name, wanted.host
            ),
        ));
    }
    let name = observed.name_of(&leaving.host);
    if leaving.host == primary {
        return Some(step_down(observed, config, primary, StepDownReason::Leaving));
    }
    let operator_reaches_it = observed.seen(&leaving.host).is_some_and(|m| m.hello().is_some());
    let primary_hears_it = observed
        .status
        .as_ref()
        .and_then(|status| status.member(&leaving.host))
        .is_some_and(|member| member.healthy);
    if !operator_reaches_it && primary_hears_it {
        return Some(wait(
            Reason::MemberUnknown,
            format!(
                "{name} should leave, but the operator cannot reach it while the primary still hears it: \
                 it is Unknown, not down, and is left in the set"
            ),
        ));
    }
    if let Err(blocking) = observed.gate(config, &leaving.host, Disruption::Remove) {
        return Some(wait(
            Reason::MemberNotHealthy,
            format!("{name} leaves the set once every other member is healthy; {blocking}"),
        ));
    }
    let mut members = config.members.clone();
    // Arbiters always hold their vote: they leave in one step, which is one voting change.
    if leaving.is_voting() && !leaving.arbiter_only {
        if config.voting_members() <= 1 {
            return Some(wait(
                Reason::LastVoter,
                format!("{name} is the last voting member"),
            ));
        }
        for member in &mut members {
            if member.host == leaving.host {
                member.votes = 0;
                member.priority = 0.0;
            }
        }
        return Some(Step::Reconfigure {
            change: Change::Demote,
            member: name,
            config: config.next(members),
        });
    }
    members.retain(|member| member.host != leaving.host);
    Some(Step::Reconfigure {
        change: Change::Remove,
        member: name,
        config: config.next(members),
    })
}

fn joining(desired: &Desired, observed: &Observed, config: &ReplConfig) -> Option<Step> {
    let joining = desired
        .members
        .iter()
        .find(|member| config.member(&member.host).is_none())?;
    let Some(hello) = observed.seen(&joining.host).and_then(SeenMember::hello) else {
        return Some(wait(
            Reason::MemberStarting,
            format!("waiting for {} to answer before adding it", joining.name),
        ));
    };
    if let Some(other) = hello.set_name.as_deref().filter(|name| *name != desired.set_name) {
        return Some(wait(
            Reason::MemberInAnotherSet,
            format!("{} belongs to replica set {other}; not adding it", joining.name),
        ));
    }
    if let Some(taken) = config.members.iter().find(|member| member.id == joining.id) {
        return Some(wait(
            Reason::MemberIdInUse,
            format!(
                "{} would take _id {}, which {} holds",
                joining.name, joining.id, taken.host
            ),
        ));
    }
    let member = if joining.arbiter {
        // An arbiter votes from the start: one voting change, so the voters must be healthy.
        if let Err(blocking) = observed.gate(config, &joining.host, Disruption::Reconfigure) {
            return Some(wait(
                Reason::MemberNotHealthy,
                format!("the arbiter joins once every member is healthy; {blocking}"),
            ));
        }
        joining.config_member(1, 0.0)
    } else {
        joining.config_member(0, 0.0)
    };
    let mut members = config.members.clone();
    members.push(member);
    Some(Step::Reconfigure {
        change: Change::Add,
        member: joining.name.clone(),
        config: config.next(members),
    })
}

fn adjusting(desired: &Desired, observed: &Observed, config: &ReplConfig, primary: &str) -> Option<Step> {
    let (wanted, current) = desired.members.iter().find_map(|wanted| {
        let current = config.member(&wanted.host)?;
        let differs = current.votes != wanted.votes
            || current.priority != wanted.priority
            || current.hidden != wanted.hidden;
        differs.then_some((wanted, current))
    })?;
    let reconfigure = |change: Change| {
        let members = config
            .members
            .iter()
            .map(|member| {
                if member.host == wanted.host {
                    ConfigMember {
                        votes: wanted.votes,
                        priority: wanted.priority,
                        hidden: wanted.hidden,
                        ..member.clone()
                    }
                } else {
                    member.clone()
                }
            })
            .collect();
        Step::Reconfigure {
            change,
            member: wanted.name.clone(),
            config: config.next(members),
        }
    };
    if current.votes == 0 && wanted.votes > 0 {
        if observed.state(&wanted.host) != Some(MemberState::Secondary) {
            return Some(wait(
                Reason::MemberSyncing,
                format!(
                    "{} becomes voting once it is SECONDARY (now {})",
                    wanted.name,
                    observed
                        .state(&wanted.host)
                        .map_or("unknown", MemberState::as_str)
                ),
            ));
        }
        match observed.lag_seconds(&wanted.host) {
            Some(lag) if lag <= MAX_CATCH_UP_LAG_SECONDS => {}
            lag => {
                return Some(wait(
                    Reason::MemberCatchingUp,
                    format!(
                        "{} becomes voting once within {MAX_CATCH_UP_LAG_SECONDS}s of the primary (now {})",
                        wanted.name,
                        lag.map_or("unknown".to_string(), |lag| format!("{lag}s"))
                    ),
                ));
            }
        }
        if let Err(blocking) = observed.gate(config, &wanted.host, Disruption::Reconfigure) {
            return Some(wait(
                Reason::MemberNotHealthy,
                format!(
                    "{} becomes voting once every member is healthy; {blocking}",
                    wanted.name
                ),
            ));
        }
        return Some(reconfigure(Change::Promote));
    }
    if current.votes > 0 && wanted.votes == 0 {
        if wanted.host == primary {
            return Some(step_down(observed, config, primary, StepDownReason::Demoted));
        }
        if let Err(blocking) = observed.gate(config, &wanted.host, Disruption::Reconfigure) {
            return Some(wait(
                Reason::MemberNotHealthy,
                format!(
                    "{} stops voting once every other member is healthy; {blocking}",
                    wanted.name
                ),
            ));
        }
        return Some(reconfigure(Change::Demote));
    }
    Some(reconfigure(Change::Adjust))
}

fn upgrading(desired: &Desired, observed: &Observed, config: &ReplConfig, primary: &str) -> Option<Step> {
    let stale: Vec<&SeenMember> = observed
        .members
        .iter()
        .filter(|member| member.pod_uid.is_some() && config.member(&member.host).is_some())
        .filter(|member| {
            member.pod_version.as_deref() != Some(desired.version.as_str()) || member.pod_outdated
        })
        .collect();
    if !stale.is_empty() {
        // A server refuses data more than one release older than itself, and cannot be taken
        // back: no member restarts for a release its data is not compatible with.
        let release = release_of(&desired.version);
        // One whose change was cut short is neither release's: the servers refuse to start on
        // it until the change is completed (setFeatureCompatibilityVersion to its target).
        let compatibility = observed.feature_compatibility.as_ref();
        if !compatibility
            .and_then(FeatureCompatibility::settled_version)
            .is_some_and(|fcv| runs_on_compatibility(&release, fcv))
        {
            return Some(wait(
                Reason::FeatureCompatibilityBehind,
                format!(
                    "no member restarts for version {}: its servers refuse data whose featureCompatibilityVersion is older than the release before {release}, and it is {}; set spec.version back to the release the members run, let it complete, then upgrade one release at a time",
                    desired.version,
                    compatibility.map_or("not known".to_string(), ToString::to_string)
                ),
            ));
        }
        // A pod being replaced is not there, though its server may still answer; a restarted
        // server may answer before its pod is Ready by its probes, and until then the pod counts
        // against the disruption budget and the Services do not reach it. Either way the next
        // restart would leave two members out at once.
        let not_back: Vec<String> = observed
            .members
            .iter()
            .filter(|member| config.member(&member.host).is_some())
            .filter(|member| member.pod_uid.is_none() || !member.pod_ready)
            .map(|member| member.name.clone())
            .collect();
        if !not_back.is_empty() {
            return Some(wait(
                Reason::UpgradeWaiting,
                format!(
                    "the next member restarts once every member's pod is back and Ready; not yet: {}",
                    not_back.join(", ")
                ),
            ));
        }
        let not_serving: Vec<String> = config
            .members
            .iter()
            .filter(|member| {
                !observed.healthy(&member.host)
                    || !observed.state(&member.host).is_some_and(MemberState::is_serving)
            })
            .map(|member| observed.name_of(&member.host))
            .collect();
        if !not_serving.is_empty() {
            return Some(wait(
                Reason::UpgradeWaiting,
                format!(
                    "the next member restarts for version {} once every member serves; not serving: {}",
                    desired.version,
                    not_serving.join(", ")
                ),
            ));
        }
        // A new pod is not yet a new server: the next restart waits until every restarted member
        // reports the version itself, so it never rests on a process that is on its way out.
        let not_yet_running: Vec<String> = observed
            .members
            .iter()
            .filter(|member| member.pod_uid.is_some() && config.member(&member.host).is_some())
            .filter(|member| member.pod_version.as_deref() == Some(desired.version.as_str()))
            .filter(|member| {
                !member
                    .server_version
                    .as_deref()
                    .is_some_and(|server| runs_version(server, &desired.version))
            })
            .map(|member| member.name.clone())
            .collect();
        if !not_yet_running.is_empty() {
            return Some(wait(
                Reason::UpgradeWaiting,
                format!(
                    "the next member restarts for version {} once the restarted ones report it; not yet: {}",
                    desired.version,
                    not_yet_running.join(", ")
                ),
            ));
        }
        let secondary = stale.iter().find(|member| member.host != primary);
        if let Some((secondary, pod_uid)) =
            secondary.and_then(|member| Some((member, member.pod_uid.clone()?)))
        {
            return Some(Step::Restart {
                member: secondary.name.clone(),
                pod_uid,
            });
        }
        return Some(step_down(observed, config, primary, StepDownReason::Upgrade));
    }
    let release = release_of(&desired.version);
    let behind: Vec<String> = observed
        .members
        .iter()
        .filter(|member| config.member(&member.host).is_some())
        .filter(|member| member.server_version.as_deref().map(release_of) != Some(release.clone()))
        .map(|member| member.name.clone())
        .collect();
    // Also asked for when it is cut short on its way to (or from) this release: the same
    // command completes the change.
    if observed
        .feature_compatibility
        .as_ref()
        .and_then(FeatureCompatibility::settled_version)
        == Some(release.as_str())
    {
        return None;
    }
    if !behind.is_empty() {
        return Some(wait(
            Reason::UpgradeWaiting,
            format!(
                "featureCompatibilityVersion {release} waits until every member runs {release}; not yet: {}",
                behind.join(", ")
            ),
        ));
    }
    observed.feature_compatibility.as_ref()?;
    Some(Step::SetFeatureCompatibility { release })
}

/// Whether servers of `release` run on data at featureCompatibilityVersion `fcv`: their own
/// release or the one before (releases are `6.0`, `7.0`, `8.0`).
fn runs_on_compatibility(release: &str, fcv: &str) -> bool {
    let major = |version: &str| version.split('.').next()?.parse::<u32>().ok();
    match (major(release), major(fcv)) {
        (Some(release), Some(fcv)) => fcv == release || fcv + 1 == release,
        _ => false,
    }
}

/// Whether a server reporting `server` runs the version asked for: the same version, or a patch
/// of the release asked for (`8.0` is run by `8.0.3`).
fn runs_version(server: &str, wanted: &str) -> bool {
    server == wanted
        || server
            .strip_prefix(wanted)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// Steps the primary down when an electable secondary has caught up and every other member is
/// healthy; waits otherwise.
fn step_down(observed: &Observed, config: &ReplConfig, primary: &str, reason: StepDownReason) -> Step {
    let name = observed.name_of(primary);
    if let Err(blocking) = observed.gate(config, primary, Disruption::Handover) {
        return wait(
            Reason::MemberNotHealthy,
            format!("{name} (primary) steps down once every other member is healthy; {blocking}"),
        );
    }
    let electable = config.members.iter().any(|member| {
        member.host != primary
            && member.is_voting()
            && member.priority > 0.0
            && !member.arbiter_only
            && observed.state(&member.host) == Some(MemberState::Secondary)
            && observed
                .lag_seconds(&member.host)
                .is_some_and(|lag| lag <= MAX_CATCH_UP_LAG_SECONDS)
    });
    if !electable {
        return wait(
            Reason::NoElectableSecondary,
            format!("{name} (primary) steps down once an electable secondary has caught up"),
        );
    }
    Step::StepDown {
        member: name,
        host: primary.to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use bson::Timestamp;

    use super::*;
    use crate::admin::{OpTime, StatusMember};

    const SET: &str = "rs";

    fn host(ordinal: usize) -> String {
        format!("10.0.0.{ordinal}:27017")
    }

    fn name(ordinal: usize) -> String {
        format!("rs-{ordinal}")
    }

    fn pod_uid(ordinal: usize) -> Option<String> {
        Some(format!("{}-uid", name(ordinal)))
    }

    /// `voting` voting members then `non_voting` non-voting ones.
    fn desired(voting: usize, non_voting: usize) -> Desired {
        Desired {
            set_name: SET.into(),
            members: (0..voting + non_voting)
                .map(|ordinal| {
                    let votes = i32::from(ordinal < voting);
                    DesiredMember {
                        name: name(ordinal),
                        host: host(ordinal),
                        id: ordinal as i32,
                        votes,
                        priority: f64::from(votes),
                        hidden: false,
                        arbiter: false,
                    }
                })
                .collect(),
            version: "7.0".into(),
        }
    }

    fn config_member(ordinal: usize, votes: i32) -> ConfigMember {
        ConfigMember {
            id: ordinal as i32,
            host: host(ordinal),
            votes,
            priority: f64::from(votes),
            hidden: false,
            arbiter_only: false,
            other: Default::default(),
        }
    }

    fn hello(set: Option<&str>, primary: bool) -> Hello {
        Hello {
            set_name: set.map(str::to_string),
            is_writable_primary: primary,
            secondary: !primary && set.is_some(),
            primary: set.map(|_| host(0)),
            ..Hello::default()
        }
    }

    /// A set of members `0..n` with the given votes, member 0 primary, all healthy, caught up,
    /// on version 7.0.
    fn set(votes: &[i32]) -> Observed {
        let config = ReplConfig {
            set_name: SET.into(),
            version: 5,
            members: votes
                .iter()
                .enumerate()
                .map(|(ordinal, votes)| config_member(ordinal, *votes))
                .collect(),
            other: Default::default(),
        };
        let status = ReplStatus {
            set_name: SET.into(),
            term: Some(1),
            members: (0..votes.len())
                .map(|ordinal| StatusMember {
                    host: host(ordinal),
                    healthy: true,
                    state: if ordinal == 0 {
                        MemberState::Primary
                    } else {
                        MemberState::Secondary
                    },
                    optime: Some(Timestamp {
                        time: 1000,
                        increment: 1,
                    }),
                    config_version: Some(5),
                    is_self: ordinal == 0,
                    message: String::new(),
                    last_heard_from: None,
                    elected_at: None,
                })
                .collect(),
        };
        Observed {
            initiated_before: true,
            members: (0..votes.len())
                .map(|ordinal| SeenMember {
                    name: name(ordinal),
                    host: host(ordinal),
                    pod_uid: pod_uid(ordinal),
                    pod_version: Some("7.0".into()),
                    pod_outdated: false,
                    pod_pending: false,
                    pod_ready: true,
                    reach: Reach::Answered(hello(Some(SET), ordinal == 0)),
                    server_version: Some("7.0.14".into()),
                    too_stale: false,
                })
                .collect(),
            config: Some(config),
            status: Some(status),
            primary: Some(host(0)),
            feature_compatibility: Some(FeatureCompatibility::settled("7.0")),
            restore_pending: false,
            repair: None,
            repair_claim: None,
            recovery: None,
        }
    }

    fn with_new_pod(mut observed: Observed, ordinal: usize) -> Observed {
        observed.members.push(SeenMember {
            name: name(ordinal),
            host: host(ordinal),
            pod_uid: pod_uid(ordinal),
            pod_version: Some("7.0".into()),
            pod_outdated: false,
            pod_pending: false,
            pod_ready: true,
            reach: Reach::Answered(hello(None, false)),
            server_version: Some("7.0.14".into()),
            too_stale: false,
        });
        observed
    }

    fn unknown(mut observed: Observed, ordinal: usize) -> Observed {
        observed.members[ordinal].reach = Reach::Unknown("timed out".into());
        observed
    }

    fn status_member(observed: &mut Observed, ordinal: usize) -> &mut StatusMember {
        &mut observed.status.as_mut().unwrap().members[ordinal]
    }

    fn reason(step: &Step) -> Reason {
        match step {
            Step::Wait { reason, .. } => *reason,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    fn reconfigure(step: Step) -> (Change, String, ReplConfig) {
        match step {
            Step::Reconfigure {
                change,
                member,
                config,
            } => (change, member, config),
            other => panic!("expected a reconfiguration, got {other:?}"),
        }
    }

    fn fresh(pods: usize) -> Observed {
        Observed {
            members: (0..pods)
                .map(|ordinal| SeenMember {
                    name: name(ordinal),
                    host: host(ordinal),
                    pod_uid: pod_uid(ordinal),
                    pod_version: Some("7.0".into()),
                    pod_outdated: false,
                    pod_pending: false,
                    pod_ready: true,
                    reach: Reach::Answered(hello(None, false)),
                    server_version: Some("7.0.14".into()),
                    too_stale: false,
                })
                .collect(),
            ..Observed::default()
        }
    }

    /// A secondary that knows no primary and applied up to `applied`.
    fn secondary_applied(applied: u32) -> Reach {
        Reach::Answered(Hello {
            primary: None,
            last_applied: Some(OpTime {
                term: 1,
                time: applied,
                increment: 1,
            }),
            ..hello(Some(SET), false)
        })
    }

    /// A set of three whose primary (0) and member 2 do not answer: member 1 is left, knows no
    /// primary, and applied up to `applied`.
    fn majority_lost(applied: u32) -> Observed {
        let mut observed = unknown(unknown(set(&[1, 1, 1]), 0), 2);
        observed.primary = None;
        observed.status = None;
        observed.members[1].reach = secondary_applied(applied);
        observed
    }

    fn request(member: &str, done: bool) -> Option<RecoveryRequest> {
        Some(RecoveryRequest {
            member: member.into(),
            ordinal: None,
            done: done.then(|| "rs-0".to_string()),
            expired: false,
        })
    }

    fn message(step: &Step) -> &str {
        match step {
            Step::Wait { message, .. } => message,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    #[test]
    fn a_lost_majority_is_reported_and_forced_only_on_request_from_the_member_that_applied_the_most() {
        let desired = desired(3, 0);
        // No request: the operator says what is lost and what a person may do.
        let lost = decide(&desired, &majority_lost(1000));
        assert_eq!(reason(&lost), "QuorumLost");
        assert_eq!(
            message(&lost),
            "2 of the 3 voting members do not answer (rs-0, rs-2): the set cannot elect a primary. \
             If they are lost for good, recover from rs-1, which applied the most of those that answer, \
             with `kubectl annotate mongodbreplicaset rs quorum.dev/recover-from=rs-1`; what only the lost \
             members hold is given up (docs/mongodb.md, Disaster recovery)"
        );

        // The survivor named: a forced configuration of the members that answer, one version on.
        let mut observed = majority_lost(1000);
        observed.recovery = request("rs-1", false);
        match decide(&desired, &observed) {
            Step::ForceReconfigure {
                member,
                host: at,
                config,
            } => {
                assert_eq!((member.as_str(), at), ("rs-1", host(1)));
                assert_eq!(config.version, 6);
                assert_eq!(config.members, vec![config_member(1, 1)]);
            }
            other => panic!("expected a forced reconfiguration, got {other:?}"),
        }

        // Taken once: recorded done, it is not taken again.
        observed.recovery = request("rs-1", true);
        assert_eq!(reason(&decide(&desired, &observed)), "QuorumLost");

        let refusal = |observed: &Observed| {
            let step = decide(&desired, observed);
            assert_eq!(reason(&step), "RecoveryRefused", "{step:?}");
            message(&step).to_string()
        };
        // A member that does not answer, or none of the set.
        observed.recovery = request("rs-2", false);
        assert_eq!(
            refusal(&observed),
            "rs-2 does not answer; only a member that answers is recovered from"
        );
        observed.recovery = request("cache-1", false);
        assert!(refusal(&observed).contains("not a member of the set's configuration"));

        // Another member that answers applied more.
        let mut two_left = majority_lost(1000);
        two_left.members[2].reach = secondary_applied(2000);
        two_left.recovery = request("rs-1", false);
        // Two of three answer: a majority, which elects by itself.
        assert!(refusal(&two_left).contains("2 of the 3 voting members answer, a majority"));
        let mut five = set(&[1, 1, 1, 1, 1]);
        five.primary = None;
        five.status = None;
        for ordinal in [0, 3, 4] {
            five = unknown(five, ordinal);
        }
        for (ordinal, applied) in [(1, 1000), (2, 2000)] {
            five.members[ordinal].reach = secondary_applied(applied);
        }
        five.recovery = request("rs-1", false);
        assert!(
            refusal(&five).starts_with("rs-2 applied more than rs-1"),
            "{}",
            refusal(&five)
        );
        // A member that knows a primary: the set is not lost.
        five.members[2].reach = Reach::Answered(Hello {
            primary: Some(host(0)),
            ..hello(Some(SET), false)
        });
        assert!(refusal(&five).contains("knows a primary"));
        // A set with a primary: the request changes nothing.
        let mut healthy = set(&[1, 1, 1]);
        let without = decide(&desired, &healthy);
        healthy.recovery = request("rs-1", false);
        assert_eq!(decide(&desired, &healthy), without);
    }

    #[test]
    fn a_new_set_is_initiated_with_its_first_member_alone() {
        match decide(&desired(3, 0), &fresh(3)) {
            Step::Initiate { member, config, .. } => {
                assert_eq!(member, "rs-0");
                assert_eq!(config.version, 1);
                assert_eq!(config.members, vec![config_member(0, 1)]);
            }
            other => panic!("expected initiate, got {other:?}"),
        }
    }

    #[test]
    fn no_initiation_while_a_member_pod_cannot_be_reached() {
        let observed = unknown(fresh(3), 2);
        assert_eq!(reason(&decide(&desired(3, 0), &observed)), "MembersUnknown");
    }

    /// The record of the initiation lost (the resource created again over kept volumes) and
    /// the primary's configuration read timed out: members that say they belong to a set are
    /// never initiated over.
    #[test]
    fn no_initiation_while_a_member_says_it_belongs_to_a_set() {
        let mut observed = fresh(3);
        observed.members[1].reach = Reach::Answered(hello(Some("rs"), true));
        observed.members[2].reach = Reach::Answered(hello(Some("rs"), false));
        assert_eq!(reason(&decide(&desired(3, 0), &observed)), "ConfigurationMissing");
    }

    #[test]
    fn a_set_initiated_before_is_never_initiated_again() {
        let observed = Observed {
            initiated_before: true,
            ..fresh(3)
        };
        assert_eq!(reason(&decide(&desired(3, 0), &observed)), "ConfigurationMissing");
    }

    #[test]
    fn nothing_changes_without_a_primary() {
        let mut observed = set(&[1, 1, 1]);
        observed.primary = None;
        observed = unknown(observed, 0);
        assert_eq!(reason(&decide(&desired(3, 0), &observed)), "PrimaryUnknown");
    }

    #[test]
    fn a_joining_member_is_added_without_a_vote() {
        let observed = with_new_pod(set(&[1]), 1);
        let (change, member, config) = reconfigure(decide(&desired(3, 0), &observed));
        assert_eq!((change, member.as_str()), (Change::Add, "rs-1"));
        assert_eq!(config.version, 6);
        assert_eq!(config.member(&host(1)).unwrap().votes, 0);
        assert_eq!(config.member(&host(1)).unwrap().priority, 0.0);
    }

    #[test]
    fn a_joining_member_that_does_not_answer_is_waited_for() {
        let observed = unknown(with_new_pod(set(&[1]), 1), 1);
        assert_eq!(reason(&decide(&desired(2, 0), &observed)), "MemberStarting");
    }

    #[test]
    fn a_member_of_another_set_is_not_added() {
        let mut observed = with_new_pod(set(&[1]), 1);
        observed.members[1].reach = Reach::Answered(hello(Some("other"), false));
        assert_eq!(reason(&decide(&desired(2, 0), &observed)), "MemberInAnotherSet");
    }

    #[test]
    fn an_added_member_is_promoted_once_secondary_and_caught_up() {
        let mut observed = set(&[1, 0]);
        status_member(&mut observed, 1).state = MemberState::Startup2;
        assert_eq!(reason(&decide(&desired(2, 0), &observed)), "MemberSyncing");

        status_member(&mut observed, 1).state = MemberState::Secondary;
        status_member(&mut observed, 1).optime = Some(Timestamp {
            time: 900,
            increment: 1,
        });
        assert_eq!(reason(&decide(&desired(2, 0), &observed)), "MemberCatchingUp");

        status_member(&mut observed, 1).optime = Some(Timestamp {
            time: 995,
            increment: 1,
        });
        let (change, member, config) = reconfigure(decide(&desired(2, 0), &observed));
        assert_eq!((change, member.as_str()), (Change::Promote, "rs-1"));
        assert_eq!(config.member(&host(1)).unwrap().votes, 1);
        assert_eq!(config.voting_members(), 2);
    }

    #[test]
    fn no_promotion_while_a_voter_is_unknown() {
        let observed = unknown(set(&[1, 1, 0]), 1);
        assert_eq!(reason(&decide(&desired(3, 0), &observed)), "MemberNotHealthy");
    }

    #[test]
    fn a_leaving_voter_is_demoted_then_removed() {
        let (change, member, config) = reconfigure(decide(&desired(2, 0), &set(&[1, 1, 1])));
        assert_eq!((change, member.as_str()), (Change::Demote, "rs-2"));
        assert_eq!(config.voting_members(), 2);
        assert_eq!(config.members.len(), 3);

        let (change, _, config) = reconfigure(decide(&desired(2, 0), &set(&[1, 1, 0])));
        assert_eq!(change, Change::Remove);
        assert_eq!(config.members.len(), 2);
        assert!(config.member(&host(2)).is_none());
    }

    #[test]
    fn one_voting_change_per_reconfiguration() {
        // From five voters to three: one demotion at a time, each its own version.
        let (_, member, config) = reconfigure(decide(&desired(3, 0), &set(&[1, 1, 1, 1, 1])));
        assert_eq!(member, "rs-4");
        let before = set(&[1, 1, 1, 1, 1]).config.unwrap();
        let changed = before
            .members
            .iter()
            .zip(&config.members)
            .filter(|(a, b)| a.votes != b.votes)
            .count();
        assert_eq!(changed, 1);
        assert_eq!(config.version, before.version + 1);
    }

    #[test]
    fn nothing_is_removed_while_another_member_is_unknown() {
        let observed = unknown(set(&[1, 1, 1]), 1);
        let step = decide(&desired(2, 0), &observed);
        assert_eq!(reason(&step), "MemberNotHealthy");
        match step {
            Step::Wait { message, .. } => assert!(message.contains("rs-1"), "{message}"),
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_member_the_primary_cannot_hear_blocks_removal_too() {
        let mut observed = set(&[1, 1, 1]);
        status_member(&mut observed, 1).healthy = false;
        assert_eq!(reason(&decide(&desired(2, 0), &observed)), "MemberNotHealthy");
    }

    #[test]
    fn a_recovering_member_is_unhealthy_and_blocks_removal_as_status_says() {
        let mut observed = set(&[1, 1, 1]);
        status_member(&mut observed, 1).state = MemberState::Recovering;
        assert_eq!(
            observed.health(&host(1)),
            Health::Unhealthy("state RECOVERING".into())
        );
        assert_eq!(reason(&decide(&desired(2, 0), &observed)), "MemberNotHealthy");
    }

    #[test]
    fn a_configured_member_the_primary_does_not_report_is_unknown_and_blocks_removal() {
        let mut observed = set(&[1, 1, 1]);
        observed.status.as_mut().unwrap().members.remove(1);
        assert!(matches!(observed.health(&host(1)), Health::Unknown(_)));
        assert_eq!(reason(&decide(&desired(2, 0), &observed)), "MemberNotHealthy");
    }

    #[test]
    fn health_is_unknown_only_while_the_primary_does_not_report_the_member_down() {
        let observed = unknown(set(&[1, 1, 1]), 2);
        assert!(matches!(observed.health(&host(2)), Health::Unknown(_)));
        assert_eq!(observed.health(&host(1)), Health::Healthy);
        let mut down = observed;
        status_member(&mut down, 2).healthy = false;
        status_member(&mut down, 2).state = MemberState::Down;
        assert!(matches!(down.health(&host(2)), Health::Unhealthy(_)));
    }

    #[test]
    fn a_leaving_member_blackholed_from_the_operator_only_is_not_removed() {
        // The primary still hears it: it is Unknown to the operator, not down.
        let observed = unknown(set(&[1, 1, 0]), 2);
        assert_eq!(reason(&decide(&desired(2, 0), &observed)), "MemberUnknown");
    }

    #[test]
    fn a_leaving_member_its_peers_see_down_is_removed() {
        let mut observed = unknown(set(&[1, 1, 0]), 2);
        status_member(&mut observed, 2).healthy = false;
        status_member(&mut observed, 2).state = MemberState::Down;
        let (change, member, _) = reconfigure(decide(&desired(2, 0), &observed));
        assert_eq!((change, member.as_str()), (Change::Remove, "rs-2"));
    }

    /// The operator now reaches the members under other addresses (its cluster domain
    /// changed): the configured members keep their `_id`s, so they are not leaving, and none is
    /// demoted or removed.
    #[test]
    fn members_reached_under_new_addresses_are_not_removed() {
        let mut moved = desired(3, 0);
        for member in &mut moved.members {
            member.host = member.host.replace("10.0.0.", "10.0.1.");
        }
        assert_ne!(moved.members[0].host, host(0));
        let observed = set(&[1, 1, 1]);
        assert_eq!(reason(&decide(&moved, &observed)), "MemberAddressChanged");
    }

    #[test]
    fn a_leaving_primary_steps_down_first() {
        let mut observed = set(&[1, 1, 1]);
        observed.primary = Some(host(2));
        status_member(&mut observed, 0).state = MemberState::Secondary;
        status_member(&mut observed, 2).state = MemberState::Primary;
        match decide(&desired(2, 0), &observed) {
            Step::StepDown { member, reason, .. } => {
                assert_eq!(member, "rs-2");
                assert_eq!(reason, StepDownReason::Leaving);
            }
            other => panic!("expected a step-down, got {other:?}"),
        }
    }

    #[test]
    fn a_primary_steps_down_only_for_a_caught_up_secondary() {
        let mut wanted = desired(3, 0);
        wanted.members.remove(0);
        wanted.members.push(DesiredMember {
            name: name(3),
            host: host(3),
            id: 3,
            ..wanted.members[0].clone()
        });
        let mut observed = set(&[1, 1, 1]);
        for ordinal in [1, 2] {
            status_member(&mut observed, ordinal).optime = Some(Timestamp {
                time: 900,
                increment: 1,
            });
        }
        assert_eq!(reason(&decide(&wanted, &observed)), "NoElectableSecondary");
    }

    #[test]
    fn no_step_while_the_configuration_propagates() {
        let mut observed = set(&[1, 1, 1]);
        status_member(&mut observed, 2).config_version = Some(4);
        assert_eq!(
            reason(&decide(&desired(2, 0), &observed)),
            "ConfigurationPropagating"
        );
    }

    #[test]
    fn members_join_only_after_a_pending_restore() {
        let mut observed = with_new_pod(set(&[1]), 1);
        observed.restore_pending = true;
        assert_eq!(reason(&decide(&desired(2, 0), &observed)), "RestorePending");
    }

    #[test]
    fn a_non_voting_member_is_made_hidden_in_place() {
        let mut wanted = desired(1, 1);
        wanted.members[1].hidden = true;
        let (change, _, config) = reconfigure(decide(&wanted, &set(&[1, 0])));
        assert_eq!(change, Change::Adjust);
        assert!(config.member(&host(1)).unwrap().hidden);
    }

    #[test]
    fn an_arbiter_joins_with_its_vote_while_every_member_is_healthy() {
        let mut wanted = desired(2, 0);
        wanted.members.push(DesiredMember {
            name: "rs-arbiter-0".into(),
            host: host(7),
            id: 200,
            votes: 1,
            priority: 0.0,
            hidden: false,
            arbiter: true,
        });
        let mut observed = set(&[1, 1]);
        observed.members.push(SeenMember {
            name: "rs-arbiter-0".into(),
            host: host(7),
            pod_uid: Some("rs-arbiter-0-uid".into()),
            pod_version: Some("7.0".into()),
            pod_outdated: false,
            pod_pending: false,
            pod_ready: true,
            reach: Reach::Answered(hello(None, false)),
            server_version: None,
            too_stale: false,
        });
        let (change, _, config) = reconfigure(decide(&wanted, &observed));
        assert_eq!(change, Change::Add);
        let arbiter = config.member(&host(7)).unwrap();
        assert!(arbiter.arbiter_only);
        assert_eq!(arbiter.votes, 1);

        let observed = unknown(observed, 1);
        assert_eq!(reason(&decide(&wanted, &observed)), "MemberNotHealthy");
    }

    fn upgrading_to_8(observed: &mut Observed) -> Desired {
        let mut wanted = desired(observed.members.len(), 0);
        wanted.version = "8.0".into();
        let _ = observed;
        wanted
    }

    #[test]
    fn a_pod_stuck_pending_on_an_older_template_is_replaced_without_waiting_for_it() {
        // rs-2's pod was never placed under the old template (no node had the memory it asked
        // for, say); the template changed since.
        let mut observed = set(&[1, 1, 1]);
        let stuck = &mut observed.members[2];
        stuck.pod_outdated = true;
        stuck.pod_pending = true;
        stuck.reach = Reach::Unknown("connection refused".into());
        let wanted = desired(3, 0);
        let replaced = Step::Restart {
            member: "rs-2".into(),
            pod_uid: "rs-2-uid".into(),
        };
        assert_eq!(decide(&wanted, &observed), replaced);
        // Before the set is initiated too: the first member may be the one stuck.
        let mut uninitiated = observed.clone();
        uninitiated.config = None;
        uninitiated.initiated_before = false;
        assert_eq!(decide(&wanted, &uninitiated), replaced);
        // Pending on the current template, it is starting: it is left to start.
        let mut starting = observed.clone();
        starting.members[2].pod_outdated = false;
        assert_ne!(decide(&wanted, &starting), replaced);
        // The next release is one the data starts on (featureCompatibilityVersion 7.0)...
        let mut next = wanted.clone();
        next.version = "8.0".into();
        assert_eq!(decide(&next, &observed), replaced);
        // ...two releases ahead is not: the upgrade refuses it, the stuck pod stays.
        let mut far = wanted.clone();
        far.version = "9.0".into();
        assert_ne!(decide(&far, &observed), replaced);
    }

    #[test]
    fn an_upgrade_restarts_secondaries_first_then_steps_the_primary_down() {
        let mut observed = set(&[1, 1, 1]);
        let wanted = upgrading_to_8(&mut observed);
        assert_eq!(
            decide(&wanted, &observed),
            Step::Restart {
                member: "rs-1".into(),
                pod_uid: "rs-1-uid".into(),
            }
        );

        observed.members[1].pod_version = Some("8.0".into());
        status_member(&mut observed, 1).state = MemberState::Startup2;
        assert_eq!(reason(&decide(&wanted, &observed)), "UpgradeWaiting");

        status_member(&mut observed, 1).state = MemberState::Secondary;
        assert_eq!(
            reason(&decide(&wanted, &observed)),
            "UpgradeWaiting",
            "a new pod whose server still reports the old version is not restarted yet"
        );
        observed.members[1].server_version = Some("8.0.3".into());
        assert_eq!(
            decide(&wanted, &observed),
            Step::Restart {
                member: "rs-2".into(),
                pod_uid: "rs-2-uid".into(),
            }
        );

        observed.members[2].pod_version = Some("8.0".into());
        observed.members[2].server_version = Some("8.0.3".into());
        match decide(&wanted, &observed) {
            Step::StepDown { member, reason, .. } => {
                assert_eq!(member, "rs-0");
                assert_eq!(reason, StepDownReason::Upgrade);
            }
            other => panic!("expected the primary to step down, got {other:?}"),
        }
    }

    #[test]
    fn a_restart_names_the_pod_observed_not_whatever_pod_has_the_name_when_it_runs() {
        let mut observed = set(&[1, 1, 1]);
        for member in &mut observed.members {
            member.pod_outdated = true;
        }
        observed.members[1].pod_uid = Some("rs-1-created-again".into());
        assert_eq!(
            decide(&desired(3, 0), &observed),
            Step::Restart {
                member: "rs-1".into(),
                pod_uid: "rs-1-created-again".into(),
            }
        );
    }

    #[test]
    fn a_new_pod_template_restarts_secondaries_first_then_steps_the_primary_down() {
        let mut observed = set(&[1, 1, 1]);
        let wanted = desired(3, 0);
        assert!(
            !matches!(decide(&wanted, &observed), Step::Restart { .. }),
            "nothing to roll"
        );
        for member in &mut observed.members {
            member.pod_outdated = true;
        }
        assert_eq!(
            decide(&wanted, &observed),
            Step::Restart {
                member: "rs-1".into(),
                pod_uid: "rs-1-uid".into(),
            }
        );
        // Its old pod is terminating while its server still answers: the next one waits.
        observed.members[1].pod_outdated = false;
        observed.members[1].pod_uid = None;
        assert_eq!(reason(&decide(&wanted, &observed)), "UpgradeWaiting");
        observed.members[1].pod_uid = Some("rs-1-uid-2".into());
        // Back and answering, but its pod not yet Ready by its probes: the next one waits.
        observed.members[1].pod_ready = false;
        let waiting = decide(&wanted, &observed);
        assert_eq!(reason(&waiting), "UpgradeWaiting");
        assert!(
            message(&waiting).contains("pod is back and Ready; not yet: rs-1"),
            "{waiting:?}"
        );
        observed.members[1].pod_ready = true;
        observed.members[2].pod_outdated = false;
        match decide(&wanted, &observed) {
            Step::StepDown { member, reason, .. } => {
                assert_eq!(member, "rs-0");
                assert_eq!(reason, StepDownReason::Upgrade);
            }
            other => panic!("expected the primary to step down, got {other:?}"),
        }
    }

    #[test]
    fn the_feature_compatibility_version_rises_after_every_member_runs_the_release() {
        let mut observed = set(&[1, 1, 1]);
        let wanted = upgrading_to_8(&mut observed);
        for member in &mut observed.members {
            member.pod_version = Some("8.0".into());
            member.server_version = Some("8.0.3".into());
        }
        observed.members[2].server_version = Some("7.0.14".into());
        assert_eq!(reason(&decide(&wanted, &observed)), "UpgradeWaiting");

        observed.members[2].server_version = Some("8.0.3".into());
        assert_eq!(
            decide(&wanted, &observed),
            Step::SetFeatureCompatibility {
                release: "8.0".into()
            }
        );
        // Cut short on its way to 8.0: asked for again, which completes it.
        observed.feature_compatibility = Some(FeatureCompatibility {
            version: "7.0".into(),
            target: Some("8.0".into()),
        });
        assert_eq!(
            decide(&wanted, &observed),
            Step::SetFeatureCompatibility {
                release: "8.0".into()
            }
        );
        observed.feature_compatibility = Some(FeatureCompatibility::settled("8.0"));
        assert_eq!(decide(&wanted, &observed), Step::Settled);
    }

    #[test]
    fn no_member_restarts_for_a_release_its_data_is_not_compatible_with() {
        let mut observed = set(&[1, 1, 1]);
        let wanted = upgrading_to_8(&mut observed);
        // A change cut short (7.0 on its way down to 6.0) is neither: no server of either
        // release starts on it until the change completes.
        for (compatibility, expected) in [
            (
                Some(FeatureCompatibility::settled("6.0")),
                "FeatureCompatibilityBehind",
            ),
            (None, "FeatureCompatibilityBehind"),
            (
                Some(FeatureCompatibility {
                    version: "6.0".into(),
                    target: Some("7.0".into()),
                }),
                "FeatureCompatibilityBehind",
            ),
        ] {
            observed.feature_compatibility = compatibility.clone();
            assert_eq!(reason(&decide(&wanted, &observed)), expected, "{compatibility:?}");
        }
        observed.feature_compatibility = Some(FeatureCompatibility::settled("7.0"));
        assert_eq!(
            decide(&wanted, &observed),
            Step::Restart {
                member: "rs-1".into(),
                pod_uid: "rs-1-uid".into(),
            }
        );
    }

    #[test]
    fn a_settled_set_needs_nothing() {
        assert_eq!(decide(&desired(3, 0), &set(&[1, 1, 1])), Step::Settled);
    }

    /// Member `ordinal` says it is too stale to catch up, and the primary sees it RECOVERING.
    fn too_stale(mut observed: Observed, ordinal: usize) -> Observed {
        observed.members[ordinal].too_stale = true;
        observed.members[ordinal].reach = Reach::Answered(hello(Some(SET), false));
        status_member(&mut observed, ordinal).state = MemberState::Recovering;
        observed
    }

    fn repair_requested(mut observed: Observed, member: &str, taken: Option<&str>) -> Observed {
        observed.repair = Some(RepairRequest {
            member: member.into(),
            taken: taken.map(str::to_string),
            taken_claim: taken.map(|uid| format!("claim-of-{uid}")),
        });
        observed.repair_claim = Some(format!("claim-of-{member}-uid"));
        observed
    }

    #[test]
    fn a_repair_wipes_the_named_member_once_through_the_gate_and_never_the_primary_in_place() {
        let wanted = desired(3, 0);
        let resync = |member: &str| Step::Resync {
            member: member.into(),
            pod_uid: format!("{member}-uid"),
            cause: ResyncCause::Requested,
        };
        assert_eq!(
            decide(&wanted, &repair_requested(set(&[1, 1, 1]), "rs-2", None)),
            resync("rs-2")
        );
        // Recorded but its pod is still there (stopped between the record and the wipe): again.
        assert_eq!(
            decide(
                &wanted,
                &repair_requested(set(&[1, 1, 1]), "rs-2", Some("rs-2-uid"))
            ),
            resync("rs-2")
        );
        // Another pod runs under the name on another claim: the request is done with.
        assert_eq!(
            decide(
                &wanted,
                &repair_requested(set(&[1, 1, 1]), "rs-2", Some("an-older-uid"))
            ),
            Step::Settled
        );
        // Another pod runs under the name on the claim recorded (the pod was replaced before the
        // wipe reached it): the data is the same, and the pod now there is wiped.
        let mut replaced_before_the_wipe = repair_requested(set(&[1, 1, 1]), "rs-2", Some("an-older-uid"));
        replaced_before_the_wipe.repair_claim = Some("claim-of-an-older-uid".into());
        assert_eq!(decide(&wanted, &replaced_before_the_wipe), resync("rs-2"));
        assert!(matches!(
            decide(&wanted, &repair_requested(set(&[1, 1, 1]), "rs-0", None)),
            Step::StepDown {
                reason: StepDownReason::Repair,
                ..
            }
        ));
        for (case, observed, reason) in [
            (
                "a name that is no member",
                repair_requested(set(&[1, 1, 1]), "other-1", None),
                Reason::RepairRefused,
            ),
            (
                "another member Unknown",
                repair_requested(unknown(set(&[1, 1, 1]), 1), "rs-2", None),
                Reason::ResyncBlocked,
            ),
            (
                "another member still copying (rebuilt a moment ago)",
                {
                    let mut observed = set(&[1, 1, 1]);
                    status_member(&mut observed, 1).state = MemberState::Startup2;
                    repair_requested(observed, "rs-2", None)
                },
                Reason::ResyncBlocked,
            ),
        ] {
            match decide(&wanted, &observed) {
                Step::Wait { reason: got, .. } => assert_eq!(got, reason, "{case}"),
                other => panic!("{case}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_member_too_stale_to_catch_up_is_resynced_only_while_the_others_are_healthy() {
        let cases: Vec<(&str, Observed, Result<&str, &str>)> = vec![
            (
                "too stale, the others healthy: wiped to copy the data again",
                too_stale(set(&[1, 1, 1]), 2),
                Ok("rs-2"),
            ),
            (
                "a non-voting member too stale is resynced the same way",
                too_stale(set(&[1, 1, 1, 0]), 3),
                Ok("rs-3"),
            ),
            (
                "too stale while another member is Unknown: waits",
                unknown(too_stale(set(&[1, 1, 1]), 2), 1),
                Err("ResyncBlocked"),
            ),
            (
                "too stale while another is down in the primary's view: waits",
                {
                    let mut observed = too_stale(set(&[1, 1, 1]), 2);
                    status_member(&mut observed, 1).healthy = false;
                    observed
                },
                Err("ResyncBlocked"),
            ),
            (
                "RECOVERING for any other reason is not too stale: nothing is wiped",
                {
                    let mut observed = set(&[1, 1, 1]);
                    status_member(&mut observed, 2).state = MemberState::Recovering;
                    observed
                },
                Err("settled"),
            ),
        ];
        for (case, observed, expected) in cases {
            let voting = observed.config.as_ref().unwrap().voting_members();
            let wanted = desired(voting, observed.members.len() - voting);
            let step = decide(&wanted, &observed);
            match (expected, &step) {
                (
                    Ok(member),
                    Step::Resync {
                        member: wiped,
                        pod_uid,
                        cause: ResyncCause::TooStale,
                    },
                ) => {
                    assert_eq!(wiped, member, "{case}");
                    assert_eq!(pod_uid, &format!("{member}-uid"), "{case}: the pod observed");
                }
                (Err("settled"), step) => assert!(!matches!(step, Step::Resync { .. }), "{case}: {step:?}"),
                (Err(wanted), Step::Wait { reason, .. }) => assert_eq!(reason, &wanted, "{case}"),
                (_, other) => panic!("{case}: got {other:?}"),
            }
        }
    }

    #[test]
    fn the_primary_is_never_resynced() {
        let mut observed = set(&[1, 1, 1]);
        observed.members[0].too_stale = true;
        assert!(!matches!(decide(&desired(3, 0), &observed), Step::Resync { .. }));
    }

    fn three_member_set() -> crate::crd::MongoDBReplicaSet {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "mongodb.quorum.dev/v1alpha1", "kind": "MongoDBReplicaSet",
            "metadata": {"name": SET, "namespace": "prod"},
            "spec": {"members": 3, "version": "7.0", "storage": {"size": "1Gi"}}
        }))
        .unwrap()
    }

    /// An election the set held after its primary failed is recorded as a failover from that
    /// primary, timed from the operator's first failed observation of it, even across the passes
    /// in between that saw no primary; a primary the operator stepped down is no failover.
    #[test]
    fn an_election_after_the_primary_failed_is_a_failover_timed_from_the_first_failure() {
        use crate::crd::{MongoDBReplicaSet, MongoDBReplicaSetStatus};
        use crate::status::status_from;
        let at = |seconds: i64| k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + seconds).unwrap();
        let time = |seconds| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(seconds));
        let mut replica_set = three_member_set();
        let desired = desired(3, 0);
        let pass = |replica_set: &mut MongoDBReplicaSet, observed: &Observed, seconds| {
            let status = status_from(replica_set, &desired, observed, at(seconds));
            replica_set.status = Some(status.clone());
            status
        };
        let healthy = set(&[1, 1, 1]);
        assert_eq!(
            pass(&mut replica_set, &healthy, 0).primary.as_deref(),
            Some("rs-0")
        );

        // The primary stops answering; the others see no primary until they elect rs-1.
        let mut lost = unknown(set(&[1, 1, 1]), 0);
        lost.primary = None;
        let waiting = pass(&mut replica_set, &lost, 3);
        assert_eq!(waiting.primary, None);
        assert_eq!(waiting.lost_primary.as_deref(), Some("rs-0"));
        assert_eq!(waiting.members[0].failing_since, Some(time(3)));
        assert_eq!(
            pass(&mut replica_set, &lost, 5).members[0].failing_since,
            Some(time(3))
        );

        let mut elected = lost.clone();
        elected.primary = Some(host(1));
        let after = pass(&mut replica_set, &elected, 14);
        let failover = after.last_failover.clone().expect("the election recorded");
        assert_eq!((failover.from.as_str(), failover.to.as_str()), ("rs-0", "rs-1"));
        assert_eq!(
            (failover.lost_at.clone(), failover.from_loss_millis),
            (Some(time(3)), Some(11_000))
        );
        assert_eq!(after.lost_primary, None);
        assert_eq!(
            pass(&mut replica_set, &elected, 16).last_failover,
            Some(failover.clone())
        );

        // rs-1 stepped down by the operator, rs-2 elected: no failover.
        let mut stepping_down: MongoDBReplicaSetStatus = replica_set.status.clone().unwrap();
        stepping_down.membership_change = serde_json::from_value(serde_json::json!(
            {"kind": "StepDown", "member": "rs-1", "fromConfigVersion": 5, "startedAt": "2026-01-01T00:00:00Z"}
        ))
        .unwrap();
        replica_set.status = Some(stepping_down);
        let mut handed_over = set(&[1, 1, 1]);
        handed_over.primary = Some(host(2));
        let planned = pass(&mut replica_set, &handed_over, 20);
        assert_eq!(planned.primary.as_deref(), Some("rs-2"));
        assert_eq!(planned.last_failover, Some(failover));
    }

    /// The operator looked only after the election: the loss is timed from the new primary's
    /// last heartbeat from the old one, not from the operator's late first look.
    #[test]
    fn an_election_seen_late_is_timed_from_the_sets_last_heartbeat_from_the_old_primary_to_its_election() {
        use crate::status::status_from;
        let at = |seconds: i64| k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + seconds).unwrap();
        let mut replica_set = three_member_set();
        let desired = desired(3, 0);
        replica_set.status = Some(status_from(&replica_set, &desired, &set(&[1, 1, 1]), at(0)));

        let mut elected = unknown(set(&[1, 1, 1]), 0);
        elected.primary = Some(host(1));
        let old = status_member(&mut elected, 0);
        old.healthy = false;
        old.is_self = false;
        old.state = MemberState::Down;
        old.last_heard_from = Some(at(2));
        let after = status_from(&replica_set, &desired, &elected, at(30));
        let failover = after.last_failover.expect("the election recorded");
        assert_eq!(
            (failover.lost_at.map(|t| t.0), failover.from_loss_millis),
            (Some(at(2)), Some(28_000))
        );

        // Answered by the new primary, which says when it was elected: timed to then.
        let new = status_member(&mut elected, 1);
        new.is_self = true;
        new.state = MemberState::Primary;
        new.elected_at = Some(at(12));
        let after = status_from(&replica_set, &desired, &elected, at(30));
        let failover = after.last_failover.expect("the election recorded");
        assert_eq!(
            (failover.writable_at.map(|t| t.0), failover.from_loss_millis),
            (Some(at(12)), Some(10_000))
        );
    }
}
