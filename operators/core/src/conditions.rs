//! The three standard conditions and the rule that a transition time moves only on a flip.
//!
//! `Ready`: the cluster serves clients as specified. `Progressing`: the operator is moving the
//! cluster towards its spec (or waiting, with the reason why). `Degraded`: something is wrong
//! that the operator cannot or may not fix by itself right now.

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};

/// The condition types every Quorum resource reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionType {
    Ready,
    Progressing,
    Degraded,
}

impl ConditionType {
    /// The condition's `type` as written in status.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::Progressing => "Progressing",
            ConditionType::Degraded => "Degraded",
        }
    }
}

/// What a reconcile decided about one condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionUpdate {
    /// The condition type; [`ConditionType::as_str`] for the standard ones.
    pub type_: String,
    pub status: bool,
    /// CamelCase, from the operator's catalogue of reasons.
    pub reason: String,
    pub message: String,
}

/// Anything that names a condition type: the standard ones, or an operator's own (`&str`).
pub trait ConditionName {
    fn condition_name(&self) -> String;
}

impl ConditionName for ConditionType {
    fn condition_name(&self) -> String {
        self.as_str().to_string()
    }
}

impl ConditionName for &str {
    fn condition_name(&self) -> String {
        (*self).to_string()
    }
}

impl ConditionUpdate {
    /// A condition with the given status, reason and message.
    pub fn new(
        type_: impl ConditionName,
        status: bool,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.condition_name(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Sets a condition in `conditions`.
///
/// The `lastTransitionTime` is `now` only when the condition is new or its status flips;
/// otherwise the stored time is kept, so `kubectl describe` tells how long a state has lasted.
/// Reason, message and `observedGeneration` are always updated.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    update: ConditionUpdate,
    observed_generation: Option<i64>,
    now: Timestamp,
) {
    let status = if update.status { "True" } else { "False" }.to_string();
    match conditions.iter_mut().find(|c| c.type_ == update.type_) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
            }
            existing.status = status;
            existing.reason = update.reason;
            existing.message = update.message;
            existing.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: update.type_,
            status,
            reason: update.reason,
            message: update.message,
            observed_generation,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
        }),
    }
}

/// Whether the condition of `type_` is present and `True`.
pub fn is_true(conditions: &[Condition], type_: ConditionType) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_.as_str() && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn transition_time_changes_only_when_status_flips() {
        let mut conditions = Vec::new();
        let ready = |status, reason: &str| ConditionUpdate::new(ConditionType::Ready, status, reason, "m");

        set_condition(&mut conditions, ready(false, "Starting"), Some(1), at(100));
        assert_eq!(conditions[0].last_transition_time.0, at(100));

        set_condition(&mut conditions, ready(false, "StillStarting"), Some(2), at(200));
        assert_eq!(
            conditions[0].last_transition_time.0,
            at(100),
            "same status keeps the time"
        );
        assert_eq!(conditions[0].reason, "StillStarting");
        assert_eq!(conditions[0].observed_generation, Some(2));

        set_condition(&mut conditions, ready(true, "AllMembersReady"), Some(2), at(300));
        assert_eq!(
            conditions[0].last_transition_time.0,
            at(300),
            "a flip moves the time"
        );
        assert_eq!(conditions[0].status, "True");
        assert!(is_true(&conditions, ConditionType::Ready));
        assert!(!is_true(&conditions, ConditionType::Degraded));
    }

    #[test]
    fn conditions_of_different_types_are_kept_apart() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            ConditionUpdate::new(ConditionType::Ready, true, "R", ""),
            None,
            at(1),
        );
        set_condition(
            &mut conditions,
            ConditionUpdate::new(ConditionType::Degraded, false, "D", ""),
            None,
            at(2),
        );
        assert_eq!(conditions.len(), 2);
        assert!(is_true(&conditions, ConditionType::Ready));
    }
}
