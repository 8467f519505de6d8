//! The catalogue of reasons the MongoDB operator reports, for a replica set's pass, in events
//! and the `Progressing` condition. Each wait's severity is declared here once: `Normal` for
//! the waits that are part of normal progress, `Warning` for the waits a person should look at.
//! A step taken is always reported as `Normal`, a failed step as `Warning`.
//!
//! The reasons of the `Ready` and `Degraded` conditions alone, and the backup controller's, are
//! not part of it.

quorum_core::reasons! {
    /// Why a pass of a `MongoDBReplicaSet` acted or waits.
    pub enum Reason {
        // Steps taken.
        /// `replSetInitiate` with the first member.
        Initiated => Normal,
        MemberAdded => Normal,
        MemberPromoted => Normal,
        MemberDemoted => Normal,
        MemberRemoved => Normal,
        MemberReconfigured => Normal,
        SteppedDown => Normal,
        MemberRestarted => Normal,
        MemberResynced => Normal,
        FeatureCompatibilityVersionSet => Normal,
        /// A backup was loaded into the first member of a set created with `restoreFrom`.
        Restored => Normal,
        /// The members left of a set that lost its majority were given a configuration of
        /// their own, on request.
        Recovered => Normal,
        // Waits that are part of normal progress.
        MemberStarting => Normal,
        MemberSyncing => Normal,
        MemberCatchingUp => Normal,
        ConfigurationPropagating => Normal,
        NoPrimary => Normal,
        UpgradeWaiting => Normal,
        /// `replSetInitiate` found a configuration already there: observed next.
        AlreadyInitiated => Normal,
        // Waits a person should look at.
        WrongReplicaSet => Warning,
        PrimaryStatusUnknown => Warning,
        RestorePending => Warning,
        MembersUnknown => Warning,
        ConfigurationMissing => Warning,
        NoMembers => Warning,
        PrimaryUnknown => Warning,
        ResyncBlocked => Warning,
        /// A repair was asked for that cannot be taken as asked.
        RepairRefused => Warning,
        /// A majority of the voters does not answer: the set cannot elect a primary.
        QuorumLost => Warning,
        /// A recovery was asked for that cannot be taken as asked.
        RecoveryRefused => Warning,
        MemberUnknown => Warning,
        MemberNotHealthy => Warning,
        LastVoter => Warning,
        MemberInAnotherSet => Warning,
        MemberIdInUse => Warning,
        MemberAddressChanged => Warning,
        FeatureCompatibilityBehind => Warning,
        NoElectableSecondary => Warning,
        RestoreSourceInvalid => Warning,
        RestoreSourceNotReady => Warning,
        RestoreInterrupted => Warning,
        RestoreTargetNotEmpty => Warning,
        RestoreFailed => Warning,
        /// The membership change recorded in status cannot be read: nothing disruptive until a
        /// person looks.
        InFlightUnreadable => Warning,
        /// A step was tried and failed; the pass reports it and returns the error.
        StepFailed => Warning,
        /// The set elected another primary than the one it had (not one the operator stepped
        /// down).
        PrimaryChanged => Warning,
    }
}

#[cfg(test)]
mod tests {
    use quorum_core::{
        events::Severity,
        pass::{Reason as _, names_by_severity},
    };

    use super::*;

    #[test]
    fn every_reason_has_a_severity_and_a_distinct_name() {
        let (normal, _) = names_by_severity(Reason::ALL);
        let steps = [
            "Initiated",
            "MemberAdded",
            "MemberPromoted",
            "MemberDemoted",
            "MemberRemoved",
            "MemberReconfigured",
            "SteppedDown",
            "MemberRestarted",
            "MemberResynced",
            "FeatureCompatibilityVersionSet",
            "Restored",
            "Recovered",
        ];
        // The waits that are part of normal progress; every other wait is a warning.
        let normal_waits = [
            "MemberStarting",
            "MemberSyncing",
            "MemberCatchingUp",
            "ConfigurationPropagating",
            "NoPrimary",
            "UpgradeWaiting",
            "AlreadyInitiated",
        ];
        assert_eq!(normal, [&steps[..], &normal_waits[..]].concat());
        assert_eq!(Reason::StepFailed.severity(), Severity::Warning);
        assert_eq!(Reason::InFlightUnreadable.severity(), Severity::Warning);
    }

    #[test]
    fn a_failover_the_database_made_is_reported_under_this_catalogue_s_name() {
        assert_eq!(
            Reason::PrimaryChanged.as_str(),
            quorum_core::failover::PRIMARY_CHANGED
        );
        assert_eq!(Reason::PrimaryChanged.severity(), Severity::Warning);
    }
}
