//! One pass shape for every operator: what a pass decided, where it left the cluster, and how
//! that is reported.
//!
//! A pass observes, decides one step ([`Decision`]), records a disruptive step in status before
//! taking it, takes it, and reports where it left the cluster ([`Progress`]): the `Progressing`
//! condition ([`Progress::progressing`]) and at most one event ([`Progress::event`],
//! [`publish`]). The rules every engine follows:
//!
//! - Reasons come from the operator's own fixed catalogue, one enum declared with [`reasons!`]
//!   (`as_str` is the variant's name, the string users see in events and conditions). A reason's
//!   [`Reason::severity`] is the severity of a *wait* with that reason: `Normal` for waits that
//!   are part of normal progress, `Warning` for waits a person should look at. A step taken is
//!   always reported as `Normal`; a failed step always as `Warning`.
//! - A failed step is reported ([`Progress::Failed`]: condition and event), then returned as
//!   `Err`, so the runner retries it with backoff and counts it.
//! - The record of a step in flight is typed: its kind is an enum declared with
//!   [`recorded_kinds!`], which reads any stored string. A string the operator does not know,
//!   or a record whose fields do not fit the kind, is an [`UnreadableRecord`]: the pass then
//!   waits with its own reason and takes no disruptive step, never treats the step as absent.

use std::{fmt, ops::ControlFlow, sync::Arc};

use k8s_openapi::{NamespaceResourceScope, apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};
use kube::{Resource, ResourceExt, runtime::controller::Action};
use serde::de::DeserializeOwned;

use crate::{
    Error,
    conditions::{ConditionType, ConditionUpdate, set_condition},
    events::{EventPublisher, Severity},
    runner::Context,
};

/// A failed pass, naming what failed: the error of every engine's cluster pass, `F` being the
/// engine's failed-step error.
#[derive(Debug, thiserror::Error)]
pub enum PassError<F: std::error::Error + Send + Sync + 'static> {
    #[error(transparent)]
    Kubernetes(#[from] Error),
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// An admin step the members refused or did not answer; they are as they were, or as a
    /// retry of the step expects them. Reported ([`Progress::Failed`]) before it is returned.
    #[error("{step}: {source}")]
    Step {
        step: String,
        #[source]
        source: F,
    },
    /// A Secret the cluster needs is missing or lacks a key. Nothing is started without it.
    #[error("Secret {secret} {problem}")]
    Secret { secret: String, problem: String },
    /// The spec asks for what the operator cannot do (settings it owns). Permanent: one
    /// warning, then the pass waits for the spec to change instead of retrying with backoff.
    #[error("{0}")]
    InvalidSpec(String),
}

impl<F: std::error::Error + Send + Sync + 'static> PassError<F> {
    /// Names a failed API call `what` (`"reading StatefulSet main"`).
    pub fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| PassError::Api { what, source }
    }
}

impl<F: std::error::Error + Send + Sync + 'static> crate::ReconcileError for PassError<F> {
    fn metric_label(&self) -> &'static str {
        match self {
            PassError::Kubernetes(error) => error.metric_label(),
            PassError::Api { .. } => "api",
            PassError::Step { .. } => "admin_step",
            PassError::Secret { .. } => "secret",
            PassError::InvalidSpec(_) => "invalid_spec",
        }
    }

    fn is_permanent(&self) -> bool {
        matches!(self, PassError::InvalidSpec(_))
    }

    fn shared(&self) -> Option<&Error> {
        match self {
            PassError::Kubernetes(error) => Some(error),
            _ => None,
        }
    }
}

/// A Secret a pass needs (a password, TLS material), as read for one pass: each key it takes
/// is there and not empty, or the error names the Secret and what it lacks.
pub struct NeededSecret {
    secret: String,
    data: std::collections::BTreeMap<String, k8s_openapi::ByteString>,
}

/// Reads the Secret `namespace/name` a pass needs; its absence is a [`PassError::Secret`].
///
/// # Errors
/// When the API server cannot be read, or the Secret does not exist.
pub async fn needed_secret<S, F>(
    context: &Context<S>,
    namespace: &str,
    name: &str,
) -> Result<NeededSecret, PassError<F>>
where
    F: std::error::Error + Send + Sync + 'static,
{
    let secret = context
        .read::<k8s_openapi::api::core::v1::Secret>(namespace, name)
        .await
        .map_err(PassError::api(format!("reading Secret {name}")))?;
    let secret_name = format!("{namespace}/{name}");
    let Some(secret) = secret else {
        return Err(PassError::Secret {
            secret: secret_name,
            problem: "does not exist".into(),
        });
    };
    Ok(NeededSecret {
        secret: secret_name,
        data: Arc::unwrap_or_clone(secret).data.unwrap_or_default(),
    })
}

impl NeededSecret {
    /// The bytes under `key`.
    ///
    /// # Errors
    /// When `key` is absent or empty.
    pub fn bytes<F: std::error::Error + Send + Sync + 'static>(
        &mut self,
        key: &str,
    ) -> Result<Vec<u8>, PassError<F>> {
        self.data
            .remove(key)
            .map(|bytes| bytes.0)
            .filter(|bytes| !bytes.is_empty())
            .ok_or_else(|| self.lacks(format!("has no (or an empty) `{key}`")))
    }

    /// The text under `key`, without the trailing newline `kubectl create secret
    /// --from-file` leaves.
    ///
    /// # Errors
    /// When `key` is absent, empty or not UTF-8.
    pub fn text<F: std::error::Error + Send + Sync + 'static>(
        &mut self,
        key: &str,
    ) -> Result<String, PassError<F>> {
        self.data
            .remove(key)
            .and_then(|bytes| String::from_utf8(bytes.0).ok())
            .map(|text| text.trim_end_matches(['\n', '\r']).to_string())
            .filter(|text| !text.is_empty())
            .ok_or_else(|| self.lacks(format!("has no (or an empty, or a non-UTF-8) `{key}`")))
    }

    fn lacks<F: std::error::Error + Send + Sync + 'static>(&self, problem: String) -> PassError<F> {
        PassError::Secret {
            secret: self.secret.clone(),
            problem,
        }
    }
}

/// A reason from an operator's catalogue. Declare the catalogue with [`reasons!`].
pub trait Reason: Copy + fmt::Debug + Eq + Send + Sync + 'static {
    /// The CamelCase string users see in events and conditions.
    fn as_str(self) -> &'static str;

    /// The severity of a wait with this reason: `Warning` when a person should look at it.
    fn severity(self) -> Severity;
}

/// Declares an operator's catalogue of reasons: an enum whose variants are the reasons, each
/// with the severity of a wait for it, plus [`Reason`], `ALL`, `Display`, `From<_> for String`
/// and comparison with `&str` (so tables of expected reasons read as the strings users see).
///
/// ```
/// quorum_core::reasons! {
///     /// Why a pass acted or waits.
///     pub enum Reason {
///         /// A member is being added.
///         AddingMember => Normal,
///         /// A member did not answer.
///         MemberUnknown => Warning,
///     }
/// }
/// use quorum_core::pass::Reason as _;
/// assert_eq!(Reason::MemberUnknown.as_str(), "MemberUnknown");
/// assert_eq!(Reason::ALL.len(), 2);
/// ```
#[macro_export]
macro_rules! reasons {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident => $severity:ident, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$variant_meta])* $variant, )+
        }

        impl $name {
            /// Every reason of the catalogue, in declaration order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant, )+ ];
        }

        impl $crate::pass::Reason for $name {
            fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => stringify!($variant), )+
                }
            }

            fn severity(self) -> $crate::events::Severity {
                match self {
                    $( $name::$variant => $crate::events::Severity::$severity, )+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, formatter: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                formatter.write_str($crate::pass::Reason::as_str(*self))
            }
        }

        impl ::std::convert::From<$name> for ::std::string::String {
            fn from(reason: $name) -> Self {
                $crate::pass::Reason::as_str(reason).to_string()
            }
        }

        impl ::std::cmp::PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                $crate::pass::Reason::as_str(*self) == *other
            }
        }
    };
}

/// Declares the kinds of a record kept in status (a step in flight, a membership change): an
/// enum with one variant per kind plus `Unrecognized(String)` for any other stored string, so
/// reading a status never fails on it. It serializes as the variant's name, exactly the string
/// stored before the record was typed; give the status field `#[schemars(with = "String")]` so
/// the generated schema stays a string. [`recorded_kinds!`]'s `known` turns an unrecognized kind
/// into an [`UnreadableRecord`].
#[macro_export]
macro_rules! recorded_kinds {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident in $field:literal {
            $( $(#[$variant_meta:meta])* $variant:ident, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize)]
        #[serde(from = "String", into = "String")]
        $vis enum $name {
            $( $(#[$variant_meta])* $variant, )+
            /// A kind this operator does not know (written by another version, or by hand).
            Unrecognized(::std::string::String),
        }

        impl $name {
            /// Where the kind is stored, for messages (`status.inFlight.action`).
            pub const FIELD: &'static str = $field;

            /// The stored string.
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => stringify!($variant), )+
                    $name::Unrecognized(text) => text.as_str(),
                }
            }

            /// The kind, or why it cannot be acted on.
            pub fn known(&self) -> ::std::result::Result<&Self, $crate::pass::UnreadableRecord> {
                match self {
                    $name::Unrecognized(text) => Err($crate::pass::UnreadableRecord::new(
                        Self::FIELD,
                        format!("`{text}` is no kind this operator knows"),
                    )),
                    known => Ok(known),
                }
            }
        }

        impl ::std::convert::From<::std::string::String> for $name {
            fn from(text: ::std::string::String) -> Self {
                match text.as_str() {
                    $( stringify!($variant) => $name::$variant, )+
                    _ => $name::Unrecognized(text),
                }
            }
        }

        impl ::std::convert::From<$name> for ::std::string::String {
            fn from(kind: $name) -> Self {
                kind.as_str().to_string()
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, formatter: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                formatter.write_str(self.as_str())
            }
        }

        impl ::std::cmp::PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

/// A record in status that the operator cannot act on: an unknown kind, or fields that do not
/// fit it. The pass waits (with the operator's `InFlightUnreadable` reason) and takes no
/// disruptive step until a person has looked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct UnreadableRecord {
    /// Where the record is stored (`status.inFlight.action`).
    pub field: &'static str,
    pub problem: String,
}

impl UnreadableRecord {
    pub fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Self {
            field,
            problem: problem.into(),
        }
    }

    /// The wait message: what the operator does and what a person can do, for a record stored at
    /// the JSON pointer `record` (`/status/inFlight`) of the resource `kind/name`.
    pub fn wait_message(&self, kind: &str, name: &str, record: &str) -> String {
        let removal = record
            .split('/')
            .filter(|segment| !segment.is_empty())
            .rev()
            .fold(
                serde_json::Value::Null,
                |inner, segment| serde_json::json!({ segment: inner }),
            );
        format!(
            "the step recorded in status cannot be read ({self}), so no disruptive step is taken: \
             run the operator version that recorded it, or check the cluster by hand and then \
             remove the record with `kubectl patch {kind} {name} --subresource=status --type=merge \
             -p '{removal}'`"
        )
    }
}

/// Why a pass does nothing now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait<R> {
    pub reason: R,
    pub message: String,
}

/// What a pass decided: one step, a wait, or nothing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision<S, R> {
    Act(S),
    Wait(Wait<R>),
    Settled,
}

impl<S, R> Decision<S, R> {
    /// A wait with `reason`.
    pub fn wait(reason: R, message: impl Into<String>) -> Self {
        Decision::Wait(Wait {
            reason,
            message: message.into(),
        })
    }

    /// The step to take, if any.
    pub fn step(&self) -> Option<&S> {
        match self {
            Decision::Act(step) => Some(step),
            _ => None,
        }
    }
}

/// How soon a pass follows a pass that took a step.
///
/// Steps come in sequences: a failover promotes a replica, then clears its record, then
/// points each other replica at the new primary, and with semi-synchronous replication writes
/// wait until one replica is back. Each link waiting a whole waiting interval would add that
/// interval to the time writes stop, so a pass that took a step is followed soon
/// ([`FollowUps::SOON`]). A step taken twice in a row, whose effect was then not seen, is
/// followed at the usual interval instead: a step that never takes effect costs no more than a
/// wait.
#[derive(Debug)]
pub struct FollowUps<S> {
    last_taken: std::sync::Mutex<std::collections::HashMap<String, S>>,
}

impl<S> Default for FollowUps<S> {
    fn default() -> Self {
        Self {
            last_taken: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }
}

impl<S: PartialEq + Clone> FollowUps<S> {
    /// How soon a pass follows one that took a new step.
    pub const SOON: std::time::Duration = std::time::Duration::from_millis(250);

    /// When the next pass on `cluster` runs: [`Self::SOON`] when this pass took `taken` and the
    /// previous pass did not take the same step, otherwise `usual`. `taken` is `None` for a pass
    /// that took no step or whose step did not complete.
    pub fn next_pass(
        &self,
        cluster: &str,
        taken: Option<&S>,
        usual: std::time::Duration,
    ) -> std::time::Duration {
        let mut last_taken = self
            .last_taken
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match taken {
            Some(step) => {
                let repeated = last_taken.get(cluster) == Some(step);
                last_taken.insert(cluster.to_string(), step.clone());
                if repeated { usual } else { Self::SOON }
            }
            None => {
                last_taken.remove(cluster);
                usual
            }
        }
    }

    /// Drops what is remembered of a deleted cluster.
    pub fn forget_cluster(&self, cluster: &str) {
        self.last_taken
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(cluster);
    }
}

/// Where a pass left the cluster: the `Progressing` condition, the event and the requeue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress<R> {
    /// Nothing to do.
    Settled,
    /// A step was taken.
    Acted { reason: R, message: String },
    /// Waiting for something, or refusing: the reason says which.
    Waiting { reason: R, message: String },
    /// A step was tried and failed; the pass returns the error after reporting it.
    Failed { reason: R, message: String },
}

impl<R> From<Wait<R>> for Progress<R> {
    fn from(wait: Wait<R>) -> Self {
        Progress::Waiting {
            reason: wait.reason,
            message: wait.message,
        }
    }
}

impl<R: Reason> Progress<R> {
    /// A wait with `reason`.
    pub fn waiting(reason: R, message: impl Into<String>) -> Self {
        Progress::Waiting {
            reason,
            message: message.into(),
        }
    }

    pub fn is_settled(&self) -> bool {
        matches!(self, Progress::Settled)
    }

    /// The reason, unless settled.
    pub fn reason(&self) -> Option<R> {
        match self {
            Progress::Settled => None,
            Progress::Acted { reason, .. }
            | Progress::Waiting { reason, .. }
            | Progress::Failed { reason, .. } => Some(*reason),
        }
    }

    /// The step this progress took, as its reason and message name it (a [`FollowUps`] step),
    /// `None` unless a step was taken and completed.
    pub fn acted(&self) -> Option<(R, String)> {
        match self {
            Progress::Acted { reason, message } => Some((*reason, message.clone())),
            _ => None,
        }
    }

    /// What the progress says: none when settled, else the step's, wait's or failure's message.
    pub fn message(&self) -> Option<&str> {
        self.event().map(|(_, _, message)| message)
    }

    /// The event that reports this progress: none when settled; `Normal` for a step taken; the
    /// reason's own severity for a wait; `Warning` for a failed step.
    pub fn event(&self) -> Option<(Severity, R, &str)> {
        match self {
            Progress::Settled => None,
            Progress::Acted { reason, message } => Some((Severity::Normal, *reason, message)),
            Progress::Waiting { reason, message } => Some((reason.severity(), *reason, message)),
            Progress::Failed { reason, message } => Some((Severity::Warning, *reason, message)),
        }
    }

    /// The event of a pass whose cluster's stored conditions are `conditions`: [`Progress::event`],
    /// except a wait the stored `Progressing` condition already reports, reason and message.
    /// Every pass of a long wait would otherwise bump the wait's event series (one write request
    /// each) to say again what the condition says; steps and failures are always published.
    pub fn event_after(&self, conditions: &[Condition]) -> Option<(Severity, R, &str)> {
        if let Progress::Waiting { reason, message } = self {
            let reported = conditions.iter().any(|condition| {
                condition.type_ == ConditionType::Progressing.as_str()
                    && condition.status == "True"
                    && condition.reason == reason.as_str()
                    && condition.message == *message
            });
            if reported {
                return None;
            }
        }
        self.event()
    }

    /// The `Progressing` condition: false with `Settled` and `settled_message` when there is
    /// nothing to do, else true with the reason and message.
    pub fn progressing(&self, settled_message: &str) -> ConditionUpdate {
        match self {
            Progress::Settled => {
                ConditionUpdate::new(ConditionType::Progressing, false, "Settled", settled_message)
            }
            Progress::Acted { reason, message }
            | Progress::Waiting { reason, message }
            | Progress::Failed { reason, message } => {
                ConditionUpdate::new(ConditionType::Progressing, true, reason.as_str(), message.clone())
            }
        }
    }
}

/// What a pass needs to know of a cluster kind beyond its metadata.
pub trait ClusterObject {
    /// The names of the StatefulSets the cluster's pods run in.
    fn statefulsets(&self) -> Vec<String>;
    /// The conditions of its stored status.
    fn conditions(&self) -> &[Condition];
    /// The last restore drill of its backups, which the backup controller records on it
    /// (`status.lastDrill`); `None` for an engine without drills.
    fn last_drill(&self) -> Option<&crate::crd::DrillRecord> {
        None
    }
}

/// A digest of what the backup controller last recorded on a cluster (`status.lastDrill`). The
/// cluster's watch lets a change of it through, as it does a new generation or annotations: a
/// drill that failed makes the cluster `BackupUnverified` and `Degraded` at once, not at its
/// next scheduled pass.
pub fn last_drill_digest<K: ClusterObject>(cluster: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let drill = serde_json::to_string(cluster.last_drill()?).ok()?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    drill.hash(&mut hasher);
    Some(hasher.finish())
}

/// The resource as stored, if a pass may run on it now: `Break` with the action to return when
/// it is gone (wait for a change) or held back by what a deleted cluster of the same name left
/// behind (see [`crate::predecessor`]). Status is an operator's memory, so a pass decides on the
/// resource as stored, never on a watch cache's copy that may lack this process's last write
/// ([`crate::status::current`]).
///
/// # Errors
/// As [`crate::status::latest`] and [`crate::predecessor::held_back`].
pub async fn admit<K, S>(context: &Context<S>, object: &K) -> Result<ControlFlow<Action, Arc<K>>, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + ClusterObject
        + Clone
        + DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let Some(object) = crate::status::current(&context.client, object).await? else {
        return Ok(ControlFlow::Break(Action::await_change()));
    };
    if crate::predecessor::held_back(
        context,
        object.as_ref(),
        &object.statefulsets(),
        object.conditions(),
    )
    .await?
    {
        tracing::info!(object = %object.name_any(), "held back by a deleted cluster's leftovers");
        return Ok(ControlFlow::Break(Action::requeue(crate::predecessor::RECHECK)));
    }
    Ok(ControlFlow::Continue(object))
}

/// What a pass found, for its three conditions.
pub struct Findings<'a, R> {
    /// `Ready`, as the engine judges it.
    pub ready: ConditionUpdate,
    /// Where the pass left the cluster, for `Progressing`.
    pub progress: &'a Progress<R>,
    /// What `Progressing` says when there is nothing to do.
    pub settled: &'a str,
    /// `Degraded`: the reason and message when something is wrong.
    pub degraded: Option<(&'static str, String)>,
    /// What `Degraded` says (reason `AllHealthy`) when nothing is.
    pub healthy: &'a str,
}

/// Sets `Ready`, `Progressing` and `Degraded` from a pass's findings, each with `generation` as
/// its `observedGeneration`.
pub fn set_conditions<R: Reason>(
    conditions: &mut Vec<Condition>,
    generation: Option<i64>,
    findings: Findings<'_, R>,
    now: Timestamp,
) {
    set_condition(conditions, findings.ready, generation, now);
    set_condition(
        conditions,
        findings.progress.progressing(findings.settled),
        generation,
        now,
    );
    let degraded = match findings.degraded {
        Some((reason, message)) => ConditionUpdate::new(ConditionType::Degraded, true, reason, message),
        None => ConditionUpdate::new(ConditionType::Degraded, false, "AllHealthy", findings.healthy),
    };
    set_condition(conditions, degraded, generation, now);
}

/// The names of a catalogue's reasons, split by severity (`Normal`, then `Warning`), in
/// declaration order, for each engine's catalogue test.
///
/// # Panics
/// When two reasons share a name, or a name is not CamelCase.
pub fn names_by_severity<R: Reason>(all: &[R]) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut seen = std::collections::BTreeSet::new();
    for reason in all {
        let name = reason.as_str();
        assert!(seen.insert(name), "{name} is declared twice");
        assert!(
            name.starts_with(|c: char| c.is_ascii_uppercase())
                && name.chars().all(|c| c.is_ascii_alphanumeric()),
            "{name} is not CamelCase"
        );
    }
    let named = |severity| {
        all.iter()
            .filter(|reason| reason.severity() == severity)
            .map(|reason| reason.as_str())
            .collect()
    };
    (named(Severity::Normal), named(Severity::Warning))
}

/// Publishes the one event of a pass ([`Progress::event_after`]) about `object`, if any.
pub async fn publish<K, R>(events: &EventPublisher, object: &K, progress: &Progress<R>)
where
    K: Resource<DynamicType = ()> + ClusterObject,
    R: Reason,
{
    let Some((severity, reason, message)) = progress.event_after(object.conditions()) else {
        return;
    };
    let action = match progress {
        Progress::Waiting { .. } => "Waiting",
        _ => "Reconcile",
    };
    events
        .publish(object, severity, reason.as_str(), action, message.to_string())
        .await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_step_taken_is_followed_soon_but_the_same_step_twice_in_a_row_is_not() {
        let usual = Duration::from_secs(2);
        let follow_ups = FollowUps::<&str>::default();
        let soon = FollowUps::<&str>::SOON;
        assert!(soon < usual);
        let sequence = [
            (Some("promote 1"), soon),
            (Some("clear record"), soon),
            (Some("wire 2"), soon),
            // Its effect was not seen: the usual interval, as long as it repeats.
            (Some("wire 2"), usual),
            (Some("wire 2"), usual),
            (None, usual),
            // After a pass without a step, the same step is new again.
            (Some("wire 2"), soon),
        ];
        for (taken, expected) in sequence {
            assert_eq!(
                follow_ups.next_pass("ns/a", taken.as_ref(), usual),
                expected,
                "{taken:?}"
            );
        }
        // Per cluster.
        assert_eq!(follow_ups.next_pass("ns/b", Some(&"wire 2"), usual), soon);
        follow_ups.forget_cluster("ns/a");
        assert_eq!(follow_ups.next_pass("ns/a", Some(&"wire 2"), usual), soon);
    }

    use super::*;

    #[test]
    fn a_needed_secret_gives_each_key_or_says_what_it_lacks() {
        type Failed = PassError<std::io::Error>;
        let mut secret = NeededSecret {
            secret: "prod/auth".into(),
            data: [
                ("password", b"s3cret\n".to_vec()),
                ("empty", Vec::new()),
                ("binary", vec![0xff, 0xfe]),
            ]
            .into_iter()
            .map(|(key, value)| (key.to_string(), k8s_openapi::ByteString(value)))
            .collect(),
        };
        assert_eq!(secret.text::<std::io::Error>("password").unwrap(), "s3cret");
        let lacks = |error: Failed| error.to_string();
        assert_eq!(
            lacks(secret.text("binary").unwrap_err()),
            "Secret prod/auth has no (or an empty, or a non-UTF-8) `binary`"
        );
        assert_eq!(
            lacks(secret.bytes("empty").unwrap_err()),
            "Secret prod/auth has no (or an empty) `empty`"
        );
        assert_eq!(
            lacks(secret.bytes("ca.crt").unwrap_err()),
            "Secret prod/auth has no (or an empty) `ca.crt`"
        );
    }

    #[test]
    fn only_an_invalid_spec_waits_for_a_change_instead_of_retrying() {
        use crate::ReconcileError;
        type Failed = PassError<std::io::Error>;
        assert!(
            Failed::InvalidSpec("spec.config sets requirepass, which the operator owns".into())
                .is_permanent()
        );
        // A missing Secret can appear without the cluster changing: that is retried.
        let missing = Failed::Secret {
            secret: "auth".into(),
            problem: "is missing".into(),
        };
        assert!(!missing.is_permanent());
        assert_eq!(missing.to_string(), "Secret auth is missing");
    }

    crate::reasons! {
        /// A catalogue for the tests.
        enum TestReason {
            AddingMember => Normal,
            MemberStarting => Normal,
            MemberUnknown => Warning,
            StepFailed => Warning,
        }
    }

    crate::recorded_kinds! {
        /// Kinds for the tests.
        enum TestKind in "status.inFlight.action" {
            Failover,
            RemoveMember,
        }
    }

    #[test]
    fn a_reason_is_the_string_users_see_and_carries_the_severity_of_its_wait() {
        assert_eq!(TestReason::MemberUnknown.as_str(), "MemberUnknown");
        assert_eq!(TestReason::MemberUnknown.to_string(), "MemberUnknown");
        assert_eq!(String::from(TestReason::AddingMember), "AddingMember");
        assert!(TestReason::MemberUnknown == "MemberUnknown");
        assert!(TestReason::MemberUnknown != "MemberStarting");
        assert_eq!(TestReason::ALL.len(), 4);
        assert_eq!(TestReason::MemberStarting.severity(), Severity::Normal);
        assert_eq!(TestReason::MemberUnknown.severity(), Severity::Warning);
    }

    #[test]
    fn a_step_taken_is_normal_a_wait_has_its_reasons_severity_and_a_failure_is_a_warning() {
        let acted = Progress::Acted {
            reason: TestReason::MemberUnknown,
            message: "m".into(),
        };
        assert_eq!(acted.event().map(|e| e.0), Some(Severity::Normal));
        let quiet = Progress::waiting(TestReason::MemberStarting, "m");
        assert_eq!(quiet.event().map(|e| e.0), Some(Severity::Normal));
        let loud = Progress::waiting(TestReason::MemberUnknown, "m");
        assert_eq!(loud.event().map(|e| e.0), Some(Severity::Warning));
        let failed = Progress::Failed {
            reason: TestReason::StepFailed,
            message: "m".into(),
        };
        assert_eq!(failed.event().map(|e| e.0), Some(Severity::Warning));
        assert_eq!(Progress::<TestReason>::Settled.event(), None);
    }

    #[test]
    fn a_wait_the_progressing_condition_already_reports_is_not_published_again() {
        let mut conditions = Vec::new();
        let now = Timestamp::now();
        let waiting = Progress::waiting(TestReason::MemberStarting, "member 2 is starting");
        set_condition(&mut conditions, waiting.progressing("x"), Some(1), now);
        assert_eq!(waiting.event_after(&conditions), None);
        // Another message, another reason, a step or a failure under the same words: published.
        let further = Progress::waiting(TestReason::MemberStarting, "member 3 is starting");
        assert!(further.event_after(&conditions).is_some());
        let other = Progress::waiting(TestReason::MemberUnknown, "member 2 is starting");
        assert!(other.event_after(&conditions).is_some());
        for repeated in [
            Progress::Acted {
                reason: TestReason::MemberStarting,
                message: "member 2 is starting".into(),
            },
            Progress::Failed {
                reason: TestReason::MemberStarting,
                message: "member 2 is starting".into(),
            },
        ] {
            assert!(repeated.event_after(&conditions).is_some(), "{repeated:?}");
        }
        // Nothing stored yet, or settled since: published.
        assert!(waiting.event_after(&[]).is_some());
        set_condition(
            &mut conditions,
            Progress::<TestReason>::Settled.progressing("matches its spec"),
            Some(1),
            now,
        );
        assert!(waiting.event_after(&conditions).is_some());
    }

    #[test]
    fn progressing_is_false_only_when_settled() {
        let settled = Progress::<TestReason>::Settled.progressing("matches its spec");
        assert_eq!(
            (settled.status, settled.reason.as_str(), settled.message.as_str()),
            (false, "Settled", "matches its spec")
        );
        let waiting =
            Progress::waiting(TestReason::MemberUnknown, "member 2 did not answer").progressing("x");
        assert_eq!(
            (waiting.status, waiting.reason.as_str(), waiting.message.as_str()),
            (true, "MemberUnknown", "member 2 did not answer")
        );
    }

    #[test]
    fn a_recorded_kind_keeps_its_stored_string_and_an_unknown_one_is_unreadable() {
        let stored: TestKind = serde_json::from_str("\"Failover\"").unwrap();
        assert_eq!(stored, TestKind::Failover);
        assert_eq!(serde_json::to_string(&stored).unwrap(), "\"Failover\"");
        let unknown: TestKind = serde_json::from_str("\"Rewind\"").unwrap();
        assert_eq!(unknown, TestKind::Unrecognized("Rewind".into()));
        assert_eq!(serde_json::to_string(&unknown).unwrap(), "\"Rewind\"");
        assert!(TestKind::RemoveMember.known().is_ok());
        let error = unknown.known().unwrap_err();
        assert_eq!(error.field, TestKind::FIELD);
        assert!(error.to_string().contains("`Rewind`"), "{error}");
        let message = error.wait_message("etcdcluster", "demo", "/status/inFlight");
        assert!(
            message.contains(
                "kubectl patch etcdcluster demo --subresource=status --type=merge -p '{\"status\":{\"inFlight\":null}}'"
            ),
            "{message}"
        );
    }
}
