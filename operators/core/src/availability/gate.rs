//! The safety gate: the one place that says whether a disruptive step may be taken now.
//!
//! A step passes only when all of these hold:
//! 1. no other membership change is in flight for this cluster;
//! 2. every observation the decision rests on is fresh;
//! 3. every *other* voting member was positively observed `Healthy` (an `Unknown` member is not
//!    assumed down, and not assumed up either);
//! 4. quorum survives the step: the healthy voters that remain during and after it are a
//!    majority of the voting membership as it will be.
//!
//! The answer is [`Verdict::Proceed`] or [`Verdict::Wait`] with a reason a person can act on;
//! a `Wait` becomes a condition, an event and a requeue, never a guess.

use std::time::{Duration, Instant};

use super::health::{Health, Observation};

/// A disruptive step on one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disruption {
    /// The member leaves the voting membership for good (scale down).
    Remove,
    /// The member leaves and a new one takes its place (data lost, or replaced).
    Replace,
    /// The member stops for a while and comes back (upgrade, restart).
    Restart,
}

/// What the gate needs to know.
#[derive(Clone, Debug)]
pub struct GateInput<'a> {
    /// The member the step acts on.
    pub target: &'a str,
    pub disruption: Disruption,
    /// The latest observation of every member, the target included.
    pub observations: &'a [Observation],
    /// A membership change recorded in status and not yet finished, other than this one.
    pub in_flight: Option<&'a str>,
    /// How old an observation may be.
    pub freshness: Duration,
    pub now: Instant,
}

/// The gate's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Proceed,
    Wait(WaitReason),
}

/// Why a step must wait. `reason()` is the CamelCase condition reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitReason {
    ChangeInFlight(String),
    StaleObservation(String),
    MemberUnknown(String),
    MemberUnhealthy(String),
    QuorumAtRisk {
        healthy_after: usize,
        voters_after: usize,
    },
    TargetNotObserved(String),
}

impl WaitReason {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            WaitReason::ChangeInFlight(_) => "MembershipChangeInFlight",
            WaitReason::StaleObservation(_) => "StaleObservation",
            WaitReason::MemberUnknown(_) => "MemberUnknown",
            WaitReason::MemberUnhealthy(_) => "MemberUnhealthy",
            WaitReason::QuorumAtRisk { .. } => "QuorumAtRisk",
            WaitReason::TargetNotObserved(_) => "TargetNotObserved",
        }
    }
}

impl std::fmt::Display for WaitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitReason::ChangeInFlight(step) => write!(f, "another membership change is in flight: {step}"),
            WaitReason::StaleObservation(member) => {
                write!(f, "the observation of {member} is too old to act on")
            }
            WaitReason::MemberUnknown(member) => write!(
                f,
                "{member} is unreachable from the operator; unknown is not down, so nothing disruptive happens until it is observed"
            ),
            WaitReason::MemberUnhealthy(member) => write!(f, "{member} is unhealthy"),
            WaitReason::QuorumAtRisk {
                healthy_after,
                voters_after,
            } => write!(
                f,
                "only {healthy_after} of {voters_after} voting members would be healthy during the step; a majority is needed"
            ),
            WaitReason::TargetNotObserved(member) => write!(f, "{member} has not been observed"),
        }
    }
}

/// Consults the gate. Pure: the same input gives the same answer.
pub fn check(input: &GateInput<'_>) -> Verdict {
    if let Some(step) = input.in_flight {
        return Verdict::Wait(WaitReason::ChangeInFlight(step.to_string()));
    }
    let Some(target) = input.observations.iter().find(|o| o.member == input.target) else {
        return Verdict::Wait(WaitReason::TargetNotObserved(input.target.to_string()));
    };
    for observation in input.observations {
        if observation.is_stale(input.now, input.freshness) {
            return Verdict::Wait(WaitReason::StaleObservation(observation.member.clone()));
        }
    }
    let others = input
        .observations
        .iter()
        .filter(|o| o.member != input.target && o.voting);
    for other in others.clone() {
        match &other.health {
            Health::Healthy => {}
            Health::Unknown(_) => return Verdict::Wait(WaitReason::MemberUnknown(other.member.clone())),
            Health::Unhealthy(_) => return Verdict::Wait(WaitReason::MemberUnhealthy(other.member.clone())),
        }
    }
    let voters_now = input.observations.iter().filter(|o| o.voting).count();
    let target_votes = usize::from(target.voting);
    let voters_after = match input.disruption {
        // Removing shrinks the membership, and the quorum with it.
        Disruption::Remove => voters_now - target_votes,
        // A replaced or restarting member still counts towards the quorum while it is away.
        Disruption::Replace | Disruption::Restart => voters_now,
    };
    let healthy_after = others.filter(|o| o.health.is_healthy()).count();
    if voters_after > 0 && healthy_after < voters_after / 2 + 1 {
        return Verdict::Wait(WaitReason::QuorumAtRisk {
            healthy_after,
            voters_after,
        });
    }
    Verdict::Proceed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, health: Health) -> Observation {
        Observation::new(name, health, true)
    }

    fn healthy(name: &str) -> Observation {
        member(name, Health::Healthy)
    }

    fn gate(
        target: &str,
        disruption: Disruption,
        observations: &[Observation],
        in_flight: Option<&str>,
    ) -> Verdict {
        check(&GateInput {
            target,
            disruption,
            observations,
            in_flight,
            freshness: Duration::from_secs(30),
            now: Instant::now(),
        })
    }

    #[test]
    fn proceeds_when_everyone_else_is_healthy_and_quorum_survives() {
        let members = [healthy("m0"), healthy("m1"), healthy("m2")];
        assert_eq!(gate("m2", Disruption::Remove, &members, None), Verdict::Proceed);
        assert_eq!(gate("m0", Disruption::Restart, &members, None), Verdict::Proceed);
    }

    #[test]
    fn an_unknown_peer_blocks_every_disruption() {
        let members = [
            healthy("m0"),
            member("m1", Health::Unknown("timeout".into())),
            healthy("m2"),
        ];
        for disruption in [Disruption::Remove, Disruption::Replace, Disruption::Restart] {
            assert_eq!(
                gate("m2", disruption, &members, None),
                Verdict::Wait(WaitReason::MemberUnknown("m1".into()))
            );
        }
    }

    #[test]
    fn an_unknown_target_is_never_replaced_on_that_basis_alone() {
        // The gate lets a restart of an Unknown target through only if quorum holds without it;
        // the decision function never *chooses* to replace an Unknown member (see engines).
        let members = [
            healthy("m0"),
            healthy("m1"),
            member("m2", Health::Unknown("timeout".into())),
        ];
        assert_eq!(gate("m2", Disruption::Restart, &members, None), Verdict::Proceed);
    }

    #[test]
    fn an_unhealthy_peer_blocks_and_is_named() {
        let members = [
            healthy("m0"),
            member("m1", Health::Unhealthy("down".into())),
            healthy("m2"),
        ];
        assert_eq!(
            gate("m2", Disruption::Remove, &members, None),
            Verdict::Wait(WaitReason::MemberUnhealthy("m1".into()))
        );
    }

    #[test]
    fn replacing_the_one_failed_member_of_three_keeps_quorum() {
        let members = [
            healthy("m0"),
            healthy("m1"),
            member("m2", Health::Unhealthy("down".into())),
        ];
        assert_eq!(gate("m2", Disruption::Replace, &members, None), Verdict::Proceed);
    }

    #[test]
    fn quorum_must_survive_the_step() {
        // Two members: restarting one leaves 1 of 2 voters, not a majority.
        let two = [healthy("m0"), healthy("m1")];
        assert_eq!(
            gate("m1", Disruption::Restart, &two, None),
            Verdict::Wait(WaitReason::QuorumAtRisk {
                healthy_after: 1,
                voters_after: 2
            })
        );
        // But removing one of two leaves a one-member cluster with its one healthy voter.
        assert_eq!(gate("m1", Disruption::Remove, &two, None), Verdict::Proceed);
        // A single member can never be restarted without losing availability.
        assert!(matches!(
            gate("m0", Disruption::Restart, &[healthy("m0")], None),
            Verdict::Wait(WaitReason::QuorumAtRisk { .. })
        ));
    }

    #[test]
    fn learners_do_not_count_towards_quorum() {
        let mut learner = healthy("m3");
        learner.voting = false;
        let members = [healthy("m0"), healthy("m1"), learner];
        assert_eq!(
            gate("m1", Disruption::Restart, &members, None),
            Verdict::Wait(WaitReason::QuorumAtRisk {
                healthy_after: 1,
                voters_after: 2
            })
        );
    }

    #[test]
    fn a_change_in_flight_blocks_another() {
        let members = [healthy("m0"), healthy("m1"), healthy("m2")];
        assert_eq!(
            gate("m2", Disruption::Remove, &members, Some("add m3")),
            Verdict::Wait(WaitReason::ChangeInFlight("add m3".into()))
        );
    }

    #[test]
    fn stale_observations_block() {
        let mut old = healthy("m1");
        old.observed_at = Instant::now() - Duration::from_secs(120);
        let members = [healthy("m0"), old, healthy("m2")];
        assert_eq!(
            gate("m2", Disruption::Remove, &members, None),
            Verdict::Wait(WaitReason::StaleObservation("m1".into()))
        );
    }

    #[test]
    fn an_unobserved_target_blocks() {
        let members = [healthy("m0"), healthy("m1")];
        assert_eq!(
            gate("m9", Disruption::Remove, &members, None),
            Verdict::Wait(WaitReason::TargetNotObserved("m9".into()))
        );
    }
}
