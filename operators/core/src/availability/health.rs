//! Tri-state member health and the observations it comes from.

use std::time::{Duration, Instant};

/// What the operator knows about one member's health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// The member answered and says it is well.
    Healthy,
    /// The member, or a quorum of its peers, positively reports a fault.
    Unhealthy(String),
    /// The operator could not reach the member, and its peers did not say it is down.
    /// Never a reason to remove, replace or fail over.
    Unknown(String),
}

impl Health {
    /// `Healthy`, `Unhealthy` or `Unknown`, as written in status.
    pub fn as_str(&self) -> &'static str {
        match self {
            Health::Healthy => "Healthy",
            Health::Unhealthy(_) => "Unhealthy",
            Health::Unknown(_) => "Unknown",
        }
    }

    pub fn is_healthy(&self) -> bool {
        matches!(self, Health::Healthy)
    }

    /// Why the member is not healthy, when it is not.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Health::Healthy => None,
            Health::Unhealthy(why) | Health::Unknown(why) => Some(why),
        }
    }
}

/// Combines the operator's own view of a member with what its peers report.
///
/// - the member answered: its own report decides (`self_report`);
/// - it did not answer, and a majority of the *other* voting members positively report their
///   connection to it as down: `Unhealthy`;
/// - otherwise (peers say it is up, or too few peers could be asked): `Unknown`.
///
/// `peer_reports` holds, for each peer that answered, whether that peer sees the member as
/// connected (`true`) or disconnected (`false`); `other_voters` is how many other voting
/// members exist, reachable or not.
pub fn classify(self_report: Result<Health, String>, peer_reports: &[bool], other_voters: usize) -> Health {
    match self_report {
        Ok(health) => health,
        Err(unreachable) => {
            let disconnected = peer_reports.iter().filter(|connected| !**connected).count();
            let majority_of_peers = other_voters / 2 + 1;
            if other_voters > 0 && disconnected >= majority_of_peers {
                Health::Unhealthy(format!(
                    "{disconnected} of {other_voters} peers report it disconnected; the operator cannot reach it: {unreachable}"
                ))
            } else {
                Health::Unknown(format!("unreachable from the operator: {unreachable}"))
            }
        }
    }
}

/// One member's health at one moment.
#[derive(Clone, Debug)]
pub struct Observation {
    pub member: String,
    pub health: Health,
    /// Whether the member votes (learners and non-voting members do not count for quorum).
    pub voting: bool,
    pub observed_at: Instant,
}

impl Observation {
    pub fn new(member: impl Into<String>, health: Health, voting: bool) -> Self {
        Self {
            member: member.into(),
            health,
            voting,
            observed_at: Instant::now(),
        }
    }

    /// Whether this observation is older than `window` at `now`.
    pub fn is_stale(&self, now: Instant, window: Duration) -> bool {
        now.saturating_duration_since(self.observed_at) > window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answering_member_reports_for_itself() {
        assert_eq!(classify(Ok(Health::Healthy), &[false, false], 2), Health::Healthy);
        let alarm = Health::Unhealthy("NOSPACE alarm".into());
        assert_eq!(classify(Ok(alarm.clone()), &[true, true], 2), alarm);
    }

    #[test]
    fn unreachable_is_unknown_unless_a_majority_of_peers_say_disconnected() {
        let unreachable = || Err("timeout".to_string());
        assert!(matches!(
            classify(unreachable(), &[true, true], 2),
            Health::Unknown(_)
        ));
        assert!(matches!(
            classify(unreachable(), &[false, true], 2),
            Health::Unknown(_)
        ));
        assert!(matches!(
            classify(unreachable(), &[false, false], 2),
            Health::Unhealthy(_)
        ));
        // Four peers: three must agree.
        assert!(matches!(
            classify(unreachable(), &[false, false, true, true], 4),
            Health::Unknown(_)
        ));
        assert!(matches!(
            classify(unreachable(), &[false, false, false], 4),
            Health::Unhealthy(_)
        ));
        // Peers we could not ask do not count as agreeing.
        assert!(matches!(classify(unreachable(), &[false], 2), Health::Unknown(_)));
        // A lone member has nobody to vouch: unreachable stays Unknown.
        assert!(matches!(classify(unreachable(), &[], 0), Health::Unknown(_)));
    }

    #[test]
    fn staleness_is_judged_against_the_window() {
        let observation = Observation::new("m0", Health::Healthy, true);
        let later = observation.observed_at + Duration::from_secs(31);
        assert!(observation.is_stale(later, Duration::from_secs(30)));
        assert!(!observation.is_stale(later, Duration::from_secs(60)));
    }
}
