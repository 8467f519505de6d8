//! The safety gate: the one place that says whether a disruptive step may be taken now.
//!
//! A step passes only when all of these hold:
//! 1. no other membership change is in flight for this cluster;
//! 2. every observation the decision rests on is fresh;
//! 3. every *other* member that counts was positively observed `Healthy` (an `Unknown` member
//!    is not assumed down, and not assumed up either), and for a handover the target too;
//! 4. under a [`Quorum::Majority`] rule, quorum survives the step: the healthy voters that
//!    remain during and after it are a majority of the voting membership as it will be.
//!
//! Each engine brings its own rules as inputs: which members vote, whether its members keep a
//! consensus quorum (etcd) or are a primary and replicas that must all be healthy (MySQL,
//! Redis, MongoDB's membership changes), and how its observations age.
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
    /// The member hands its role (primary, leader) to another and stays: it must itself be
    /// observed `Healthy`, or the handover could lose what only it holds.
    Handover,
    /// The membership changes around the member (it joins, starts or stops voting) while every
    /// current member keeps serving: the member need not be observed yet.
    Reconfigure,
}

/// How the members that remain must stand for a step to pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quorum {
    /// Consensus members: every other voter Healthy, and the healthy voters during and after
    /// the step a majority of the voting membership as it will be.
    Majority,
    /// A primary and its replicas, which keep no vote: every other member, voting or not,
    /// positively Healthy.
    EveryOtherMember,
}

/// How old an observation may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Observations are kept across passes and age: each must be within `window` of `now`.
    Within { window: Duration, now: Instant },
    /// Every observation was made by the pass that decides, so none has aged.
    ThisPass,
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
    pub freshness: Freshness,
    pub quorum: Quorum,
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
    let target = input.observations.iter().find(|o| o.member == input.target);
    if target.is_none() && input.disruption != Disruption::Reconfigure {
        return Verdict::Wait(WaitReason::TargetNotObserved(input.target.to_string()));
    }
    if let Freshness::Within { window, now } = input.freshness
        && let Some(stale) = input.observations.iter().find(|o| o.is_stale(now, window))
    {
        return Verdict::Wait(WaitReason::StaleObservation(stale.member.clone()));
    }
    let counts = |o: &&Observation| match input.quorum {
        Quorum::Majority => o.voting,
        Quorum::EveryOtherMember => true,
    };
    let others = input
        .observations
        .iter()
        .filter(|o| o.member != input.target)
        .filter(counts);
    let must_be_healthy = others
        .clone()
        .chain(target.filter(|_| input.disruption == Disruption::Handover));
    for member in must_be_healthy {
        match &member.health {
            Health::Healthy => {}
            Health::Unknown(_) => return Verdict::Wait(WaitReason::MemberUnknown(member.member.clone())),
            Health::Unhealthy(_) => return Verdict::Wait(WaitReason::MemberUnhealthy(member.member.clone())),
        }
    }
    let (Quorum::Majority, Some(target)) = (input.quorum, target) else {
        return Verdict::Proceed;
    };
    let voters_now = input.observations.iter().filter(|o| o.voting).count();
    let target_votes = usize::from(target.voting);
    let voters_after = match input.disruption {
        // Removing shrinks the membership, and the quorum with it.
        Disruption::Remove => voters_now - target_votes,
        // A replaced or restarting member still counts towards the quorum while it is away.
        Disruption::Replace | Disruption::Restart => voters_now,
        // The target keeps serving: every healthy voter, it included, stays.
        Disruption::Handover | Disruption::Reconfigure => return Verdict::Proceed,
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
            freshness: Freshness::Within {
                window: Duration::from_secs(30),
                now: Instant::now(),
            },
            quorum: Quorum::Majority,
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

    fn replicas_gate(target: &str, disruption: Disruption, observations: &[Observation]) -> Verdict {
        check(&GateInput {
            target,
            disruption,
            observations,
            in_flight: None,
            freshness: Freshness::ThisPass,
            quorum: Quorum::EveryOtherMember,
        })
    }

    #[test]
    fn a_primary_and_replicas_need_every_other_member_healthy_but_no_majority() {
        // Two members: removing or restarting one is allowed when the other is Healthy, as
        // replicas keep no vote; a non-voting member that is not Healthy still blocks.
        let two = [healthy("m0"), healthy("m1")];
        assert_eq!(replicas_gate("m1", Disruption::Restart, &two), Verdict::Proceed);
        let mut unknown = member("m1", Health::Unknown("timeout".into()));
        unknown.voting = false;
        assert_eq!(
            replicas_gate("m0", Disruption::Remove, &[healthy("m0"), unknown]),
            Verdict::Wait(WaitReason::MemberUnknown("m1".into()))
        );
    }

    #[test]
    fn a_handover_needs_the_target_healthy_too() {
        let members = [member("m0", Health::Unknown("timeout".into())), healthy("m1")];
        assert_eq!(
            replicas_gate("m0", Disruption::Handover, &members),
            Verdict::Wait(WaitReason::MemberUnknown("m0".into()))
        );
        assert_eq!(
            replicas_gate("m0", Disruption::Remove, &members),
            Verdict::Proceed
        );
    }

    #[test]
    fn a_reconfiguration_needs_no_observed_target_but_every_other_member_healthy() {
        let members = [healthy("m0"), healthy("m1")];
        assert_eq!(
            gate("m2", Disruption::Reconfigure, &members, None),
            Verdict::Proceed
        );
        let members = [healthy("m0"), member("m1", Health::Unhealthy("down".into()))];
        assert_eq!(
            gate("m2", Disruption::Reconfigure, &members, None),
            Verdict::Wait(WaitReason::MemberUnhealthy("m1".into()))
        );
    }

    #[test]
    fn observations_made_by_this_pass_never_count_as_stale() {
        let mut old = healthy("m1");
        old.observed_at = Instant::now() - Duration::from_secs(120);
        let members = [healthy("m0"), old, healthy("m2")];
        assert_eq!(
            replicas_gate("m2", Disruption::Remove, &members),
            Verdict::Proceed
        );
    }
}
