//! The catalogue of reasons a pass of a `MySQLCluster` reports in events and the `Progressing`
//! condition. Each wait's severity is declared here once: `Normal` only for members still
//! starting, `Warning` for every other wait (a person should look at it). A step taken is
//! always reported as `Normal` and a failed step as `Warning`, whatever its reason.
//!
//! The reasons of the `Ready` and `Degraded` conditions and the backup controller's are not
//! part of the pass and stay strings where they are set.

quorum_core::reasons! {
    /// Why a pass of a `MySQLCluster` acted, waits or failed.
    pub enum Reason {
        // Steps taken.
        ScalingPods => Normal,
        OpeningPrimary => Normal,
        FailingOver => Normal,
        SwitchingOver => Normal,
        SeedingMember => Normal,
        StartingReplication => Normal,
        SettingSemiSync => Normal,
        SettingBinlogExpiry => Normal,
        FencingMember => Normal,
        RemovingMember => Normal,
        Restoring => Normal,
        RestartingMember => Normal,
        RebuildingMember => Normal,
        StepCompleted => Normal,
        /// A backup was restored into the first primary (its own event, action `Restore`).
        Restored => Normal,
        // The one wait that is part of normal progress.
        /// Members have not all answered yet.
        MembersStarting => Normal,
        /// A member restarted onto the current pod template is not back and caught up yet.
        RestartInProgress => Normal,
        // Waits a person should look at.
        RestoreSourceNotReady => Warning,
        RestoreRefused => Warning,
        PrimaryMissing => Warning,
        StaleObservation => Warning,
        PrimaryUnknown => Warning,
        PrimaryReopenBlocked => Warning,
        Diverged => Warning,
        FailoverBlocked => Warning,
        ErrantTransactions => Warning,
        ScaleInBlocked => Warning,
        SwitchoverBlocked => Warning,
        SwitchoverTargetUnknown => Warning,
        /// A member runs an older pod template and cannot be restarted safely now.
        RestartBlocked => Warning,
        /// A member restarted onto the current pod template has not come back in a long time.
        RestartStuck => Warning,
        /// A repair was asked for that cannot be taken as asked.
        RepairRefused => Warning,
        /// A recovery was asked for that cannot be taken as asked.
        RecoveryRefused => Warning,
        /// A switchover asked for cannot be taken, or was given up: the request is removed.
        SwitchoverRefused => Warning,
        /// The step recorded in status cannot be read: nothing disruptive until a person looks.
        InFlightUnreadable => Warning,
        /// A step was tried and failed; nothing else was changed.
        StepFailed => Warning,
        /// `spec.config` overrides what the operator owns (its own event, action `Validate`).
        InvalidSpec => Warning,
    }
}

impl Reason {
    /// Whether a wait with this reason ends the switchover asked for through the annotation
    /// (the request is removed, so it is not refused again on every pass).
    pub fn ends_switchover_request(self) -> bool {
        matches!(self, Reason::SwitchoverRefused)
    }
}

#[cfg(test)]
mod tests {
    use quorum_core::pass::names_by_severity;

    use super::*;

    #[test]
    fn every_reason_has_a_severity_and_a_distinct_name() {
        let (normal, warnings) = names_by_severity(Reason::ALL);
        // Waits: only members starting is part of normal progress; every other wait warns.
        let waits = [
            "MembersStarting",
            "RestartInProgress",
            "RestoreSourceNotReady",
            "RestoreRefused",
            "PrimaryMissing",
            "StaleObservation",
            "PrimaryUnknown",
            "PrimaryReopenBlocked",
            "Diverged",
            "FailoverBlocked",
            "ErrantTransactions",
            "ScaleInBlocked",
            "SwitchoverBlocked",
            "SwitchoverTargetUnknown",
            "RestartBlocked",
            "RestartStuck",
            "RepairRefused",
            "RecoveryRefused",
            "SwitchoverRefused",
            "InFlightUnreadable",
            "StepFailed",
        ];
        let normal_waits: Vec<&str> = normal.into_iter().filter(|name| waits.contains(name)).collect();
        assert_eq!(normal_waits, ["MembersStarting", "RestartInProgress"]);
        assert_eq!(
            warnings,
            [
                "RestoreSourceNotReady",
                "RestoreRefused",
                "PrimaryMissing",
                "StaleObservation",
                "PrimaryUnknown",
                "PrimaryReopenBlocked",
                "Diverged",
                "FailoverBlocked",
                "ErrantTransactions",
                "ScaleInBlocked",
                "SwitchoverBlocked",
                "SwitchoverTargetUnknown",
                "RestartBlocked",
                "RestartStuck",
                "RepairRefused",
                "RecoveryRefused",
                "SwitchoverRefused",
                "InFlightUnreadable",
                "StepFailed",
                "InvalidSpec",
            ]
        );
    }
}
