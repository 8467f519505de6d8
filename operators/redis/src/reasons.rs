//! The catalogue of reasons a `RedisCluster`'s passes report in events and the `Progressing`
//! condition, for both modes ([`crate::replication`] and [`crate::sharded`]). Each wait's
//! severity is declared here once: `Normal` for the waits that are part of normal progress,
//! `Warning` for the waits a person should look at. A step taken is always reported as `Normal`,
//! a failed step always as `Warning`, whatever the severity declared for its reason.
//!
//! The `Ready` and `Degraded` conditions' own reasons, and the backup controller's, are not
//! here: they are no pass's wait or step.

quorum_core::reasons! {
    /// Why a pass of a `RedisCluster` acted or waits.
    pub enum Reason {
        // Steps taken, in either mode.
        ScalingNodes => Normal,
        // Steps taken in replication mode.
        ScalingSentinels => Normal,
        SentinelMonitoring => Normal,
        SentinelRepointed => Normal,
        SentinelConfigured => Normal,
        ReplicaConfigured => Normal,
        WriteFenceSet => Normal,
        SwitchoverRequested => Normal,
        RemovingNode => Normal,
        SentinelReset => Normal,
        MovingSentinelOntoVolume => Normal,
        RestartingNode => Normal,
        RebuildingNode => Normal,
        RecoveringFromNode => Normal,
        /// The primary's server is held back by the kubelet (a crash loop): a Sentinel was
        /// asked to fail over without waiting for `down-after`.
        FailingOverHeldBack => Normal,
        // Steps taken in cluster mode.
        FormingCluster => Normal,
        MeetingNodes => Normal,
        FinishingSlotMove => Normal,
        PlacingReplicas => Normal,
        MovingSlots => Normal,
        RemovingShards => Normal,
        ForgettingStrayNodes => Normal,

        // Waits that are part of normal progress.
        /// A node has not answered yet (both modes).
        NodesStarting => Normal,
        /// A replica is syncing from its primary (both modes).
        ReplicaSyncing => Normal,
        /// A Sentinel has not answered yet (replication mode).
        SentinelsStarting => Normal,
        /// A Sentinel has not yet discovered every replica and every other Sentinel, so a
        /// failover it started now could not promote every replica (replication mode).
        SentinelsDiscovering => Normal,
        /// A node restarted onto the current pod template is not back or not in sync yet
        /// (replication mode).
        RestartInProgress => Normal,
        /// Nodes are not linked to one another yet (cluster mode).
        Joining => Normal,
        /// A node does not report `cluster_state:ok` yet (cluster mode).
        ClusterStateNotOk => Normal,
        /// Two primaries hold the same config epoch until Redis gives one a new one (cluster
        /// mode).
        ConfigEpochShared => Normal,

        // Waits a person should look at, in replication mode.
        FailoverInProgress => Warning,
        PrimaryAddressReused => Warning,
        PrimaryNotANode => Warning,
        PrimaryUnknown => Warning,
        SentinelsDisagree => Warning,
        SentinelsUnknown => Warning,
        SeveralPrimaries => Warning,
        PrimaryLoading => Warning,
        PrimaryEmpty => Warning,
        PrimaryLeaving => Warning,
        NodeNotHealthy => Warning,
        /// A node runs an older pod template and cannot be restarted safely now.
        RestartBlocked => Warning,
        /// A repair was asked for that cannot be taken as asked.
        RepairRefused => Warning,
        RecoveryRefused => Warning,
        // Waits a person should look at, in either mode.
        ScaleInBlocked => Warning,
        // Waits a person should look at, in cluster mode.
        NodesNotAnswering => Warning,
        NodeIdsChanged => Warning,
        MigrationBlocked => Warning,
        StrayMigration => Warning,
        ShardWithoutPrimary => Warning,
        SlotsUncovered => Warning,
        RebalanceBlocked => Warning,
        NodeUnhealthy => Warning,
        NodeUnknown => Warning,
        /// The slot move recorded in status cannot be read: no step until a person looks.
        InFlightUnreadable => Warning,
        /// A step was tried and failed; nothing else was changed.
        StepFailed => Warning,

        // The passes' own events, and the waits before a pass.
        /// `spec.config` sets what the operator owns.
        InvalidSpec => Warning,
        /// `restoreFrom` names a backup that is not complete yet.
        RestoreSourceNotReady => Warning,
        /// `restoreFrom` names a backup that cannot be restored into this spec.
        RestoreSourceInvalid => Warning,
        /// `restoreFrom` on a deployment that already has data nodes.
        RestoreIgnored => Warning,
        /// The Sentinels made another node the primary.
        PrimaryChanged => Warning,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use quorum_core::{
        events::Severity,
        pass::{Reason as _, names_by_severity},
    };

    use super::*;

    /// The steps: reported as `Normal` whatever is declared, declared `Normal`.
    const STEPS: &[&str] = &[
        "ScalingNodes",
        "ScalingSentinels",
        "SentinelMonitoring",
        "SentinelRepointed",
        "SentinelConfigured",
        "ReplicaConfigured",
        "WriteFenceSet",
        "SwitchoverRequested",
        "RemovingNode",
        "SentinelReset",
        "MovingSentinelOntoVolume",
        "RestartingNode",
        "RebuildingNode",
        "RecoveringFromNode",
        "FailingOverHeldBack",
        "FormingCluster",
        "MeetingNodes",
        "FinishingSlotMove",
        "PlacingReplicas",
        "MovingSlots",
        "RemovingShards",
        "ForgettingStrayNodes",
    ];

    /// The waits published as `Normal` events: replication mode's `NodesStarting`,
    /// `SentinelsStarting`, `SentinelsDiscovering` and `ReplicaSyncing`, cluster mode's `NodesStarting`, `Joining`,
    /// `ReplicaSyncing`, `ClusterStateNotOk` and `ConfigEpochShared`. Every other wait is a `Warning`.
    const NORMAL_WAITS: &[&str] = &[
        "NodesStarting",
        "ReplicaSyncing",
        "SentinelsStarting",
        "SentinelsDiscovering",
        "RestartInProgress",
        "Joining",
        "ClusterStateNotOk",
        "ConfigEpochShared",
    ];

    #[test]
    fn every_reason_has_a_severity_and_a_distinct_name() {
        let (normal, warnings) = names_by_severity(Reason::ALL);
        let names: BTreeSet<&str> = normal.iter().chain(&warnings).copied().collect();
        let normal: BTreeSet<&str> = normal.into_iter().collect();
        let expected: BTreeSet<&str> = STEPS.iter().chain(NORMAL_WAITS).copied().collect();
        assert_eq!(normal, expected);
        for name in STEPS.iter().chain(NORMAL_WAITS) {
            assert!(names.contains(name), "{name} is in the catalogue");
        }
        assert_eq!(
            warnings,
            [
                "FailoverInProgress",
                "PrimaryAddressReused",
                "PrimaryNotANode",
                "PrimaryUnknown",
                "SentinelsDisagree",
                "SentinelsUnknown",
                "SeveralPrimaries",
                "PrimaryLoading",
                "PrimaryEmpty",
                "PrimaryLeaving",
                "NodeNotHealthy",
                "RestartBlocked",
                "RepairRefused",
                "RecoveryRefused",
                "ScaleInBlocked",
                "NodesNotAnswering",
                "NodeIdsChanged",
                "MigrationBlocked",
                "StrayMigration",
                "ShardWithoutPrimary",
                "SlotsUncovered",
                "RebalanceBlocked",
                "NodeUnhealthy",
                "NodeUnknown",
                "InFlightUnreadable",
                "StepFailed",
                "InvalidSpec",
                "RestoreSourceNotReady",
                "RestoreSourceInvalid",
                "RestoreIgnored",
                "PrimaryChanged",
            ]
        );
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
