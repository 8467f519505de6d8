//! The catalogue of reasons the etcd operator reports in events and the `Progressing`
//! condition. Each wait's severity is declared here once: `Warning` for the waits a person
//! should look at, `Normal` for waits that are part of normal progress.

use quorum_core::availability::gate::WaitReason;

quorum_core::reasons! {
    /// Why a pass of an `EtcdCluster` acted or waits.
    pub enum Reason {
        // Steps taken.
        Bootstrapping => Normal,
        AddingMember => Normal,
        StartingMember => Normal,
        PromotingMember => Normal,
        RemovingMember => Normal,
        StoppingMember => Normal,
        ReplacingMember => Normal,
        WipingMember => Normal,
        MovingLeader => Normal,
        UpgradingMember => Normal,
        /// A phase of a recovery from a lost quorum, on a person's request.
        RecoveringFromMember => Normal,
        RestartingMember => Normal,
        /// No member survived: the cluster is restored in place from its newest backup, on a
        /// person's request.
        RestoringInPlace => Normal,
        StepCompleted => Normal,
        // Waits that are part of normal progress.
        LearnerCatchingUp => Normal,
        UpgradeInProgress => Normal,
        RecoveryInProgress => Normal,
        UnsupportedVersionChange => Normal,
        RestoreSourceNotReady => Warning,
        // Waits a person should look at.
        NoMemberReachable => Warning,
        MemberUnknown => Warning,
        MemberUnhealthy => Warning,
        QuorumAtRisk => Warning,
        /// A majority of the voting members does not answer and the rest follow no leader.
        QuorumLost => Warning,
        StaleObservation => Warning,
        MembershipChangeInFlight => Normal,
        TargetNotObserved => Normal,
        /// The step recorded in status cannot be read: nothing disruptive until a person looks.
        InFlightUnreadable => Warning,
        /// A step was tried and failed; nothing else was changed.
        StepFailed => Warning,
        /// A repair was asked for that cannot be taken as asked.
        RepairRefused => Warning,
        /// A recovery from a lost quorum was asked for that cannot be taken as asked.
        RecoveryRefused => Warning,
        /// The spec asks for an even number of members.
        EvenMemberCount => Warning,
    }
}

impl Reason {
    /// The reason of the safety gate's answer.
    pub fn of_gate(wait: &WaitReason) -> Self {
        match wait {
            WaitReason::ChangeInFlight(_) => Reason::MembershipChangeInFlight,
            WaitReason::StaleObservation(_) => Reason::StaleObservation,
            WaitReason::MemberUnknown(_) => Reason::MemberUnknown,
            WaitReason::MemberUnhealthy(_) => Reason::MemberUnhealthy,
            WaitReason::QuorumAtRisk { .. } => Reason::QuorumAtRisk,
            WaitReason::TargetNotObserved(_) => Reason::TargetNotObserved,
        }
    }
}

#[cfg(test)]
mod tests {
    use quorum_core::pass::{Reason as _, names_by_severity};

    use super::*;

    #[test]
    fn every_reason_has_a_severity_and_a_distinct_name() {
        let (_, warnings) = names_by_severity(Reason::ALL);
        assert_eq!(
            warnings,
            [
                "RestoreSourceNotReady",
                "NoMemberReachable",
                "MemberUnknown",
                "MemberUnhealthy",
                "QuorumAtRisk",
                "QuorumLost",
                "StaleObservation",
                "InFlightUnreadable",
                "StepFailed",
                "RepairRefused",
                "RecoveryRefused",
                "EvenMemberCount",
            ]
        );
    }

    #[test]
    fn the_gates_reasons_keep_the_gates_names() {
        let waits = [
            WaitReason::ChangeInFlight("x".into()),
            WaitReason::StaleObservation("x".into()),
            WaitReason::MemberUnknown("x".into()),
            WaitReason::MemberUnhealthy("x".into()),
            WaitReason::QuorumAtRisk {
                healthy_after: 1,
                voters_after: 3,
            },
            WaitReason::TargetNotObserved("x".into()),
        ];
        for wait in waits {
            assert_eq!(Reason::of_gate(&wait).as_str(), wait.reason());
        }
    }
}
