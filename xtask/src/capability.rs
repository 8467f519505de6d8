//! The OperatorHub capability level each CSV claims, derived from the tests that prove it: a
//! level is claimed only when every ability it and the levels below it ask for is shown by a
//! named test of this repository, and a test fails when a named test is gone.

use std::path::Path;

/// OperatorHub's capability levels, lowest first; each includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CapabilityLevel {
    BasicInstall,
    SeamlessUpgrades,
    FullLifecycle,
    DeepInsights,
    AutoPilot,
}

impl CapabilityLevel {
    const ALL: [CapabilityLevel; 5] = [
        CapabilityLevel::BasicInstall,
        CapabilityLevel::SeamlessUpgrades,
        CapabilityLevel::FullLifecycle,
        CapabilityLevel::DeepInsights,
        CapabilityLevel::AutoPilot,
    ];

    /// The CSV's `capabilities` annotation.
    pub fn annotation(self) -> &'static str {
        match self {
            CapabilityLevel::BasicInstall => "Basic Install",
            CapabilityLevel::SeamlessUpgrades => "Seamless Upgrades",
            CapabilityLevel::FullLifecycle => "Full Lifecycle",
            CapabilityLevel::DeepInsights => "Deep Insights",
            CapabilityLevel::AutoPilot => "Auto Pilot",
        }
    }
}

/// What a level asks of an operator, each ability proven (or not) by a test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ability {
    /// OLM installs it from a registry-served catalog, its pod runs, it reconciles its example.
    InstallsThroughOlm,
    /// Its chart installs it and it forms a cluster of real pods.
    FormsAClusterOfRealPods,
    /// A new operator release reaches it through its OLM channel and it keeps reconciling.
    UpgradesThroughItsChannel,
    /// A new pod template or version restarts one member at a time, the primary last.
    RollsOneMemberAtATime,
    /// Backups land in an S3 store and a new cluster restores from one.
    BacksUpAndRestores,
    /// Every member down and back: the cluster returns with every acknowledged write.
    SurvivesATotalOutage,
    /// A broken member is rebuilt on request, without `kubectl exec`.
    RepairsAMember,
    /// Alerts and dashboards are installed by the bundle itself. OLM fails an install whose
    /// bundle holds a `PrometheusRule` where the Prometheus Operator is absent, so the rules
    /// and dashboards ship with the charts and under `monitoring/` instead, and no test can
    /// prove this for the bundle.
    BundleShipsAlertsAndDashboards,
    /// Tunes itself (scaling, configuration) from what it observes.
    TunesItself,
}

impl Ability {
    const ALL: [Ability; 9] = [
        Ability::InstallsThroughOlm,
        Ability::FormsAClusterOfRealPods,
        Ability::UpgradesThroughItsChannel,
        Ability::RollsOneMemberAtATime,
        Ability::BacksUpAndRestores,
        Ability::SurvivesATotalOutage,
        Ability::RepairsAMember,
        Ability::BundleShipsAlertsAndDashboards,
        Ability::TunesItself,
    ];

    /// The level that asks for it.
    pub fn level(self) -> CapabilityLevel {
        match self {
            Ability::InstallsThroughOlm | Ability::FormsAClusterOfRealPods => CapabilityLevel::BasicInstall,
            Ability::UpgradesThroughItsChannel | Ability::RollsOneMemberAtATime => {
                CapabilityLevel::SeamlessUpgrades
            }
            Ability::BacksUpAndRestores | Ability::SurvivesATotalOutage | Ability::RepairsAMember => {
                CapabilityLevel::FullLifecycle
            }
            Ability::BundleShipsAlertsAndDashboards => CapabilityLevel::DeepInsights,
            Ability::TunesItself => CapabilityLevel::AutoPilot,
        }
    }
}

/// A test of this repository that shows `ability`: the function `test` in `file` (relative to
/// the repository's root).
#[derive(Clone, Copy, Debug)]
pub struct Proof {
    pub ability: Ability,
    pub file: &'static str,
    pub test: &'static str,
}

const OLM_IN_CLUSTER: &str = "xtask/tests/olm_in_cluster.rs";
const OLM_UPGRADES: &str = "xtask/tests/olm_upgrades.rs";

/// The tests that prove what the operator of `engine` can do.
pub fn proofs(engine: &str) -> Vec<Proof> {
    let proof = |ability, file, test| Proof { ability, file, test };
    let mut proofs = vec![
        proof(
            Ability::InstallsThroughOlm,
            OLM_IN_CLUSTER,
            "olm_in_the_cluster_installs_every_package_from_the_registry_and_upgrades_one",
        ),
        proof(
            Ability::UpgradesThroughItsChannel,
            OLM_UPGRADES,
            "every_package_upgrades_through_its_channel_with_olm",
        ),
    ];
    let real_pods_file: &'static str = match engine {
        "etcd" => "operators/etcd/tests/real_pods.rs",
        "mysql" => "operators/mysql/tests/real_pods.rs",
        "redis" => "operators/redis/tests/real_pods.rs",
        "mongodb" => "operators/mongodb/tests/real_pods.rs",
        _ => return proofs,
    };
    let real_pods = |ability, test| proof(ability, real_pods_file, test);
    let engine_proofs = match engine {
        "etcd" => vec![
            real_pods(
                Ability::FormsAClusterOfRealPods,
                "the_chart_installed_operator_forms_a_cluster_of_real_members",
            ),
            real_pods(
                Ability::RollsOneMemberAtATime,
                "a_new_pod_template_restarts_one_member_at_a_time_the_leader_last",
            ),
            real_pods(
                Ability::BacksUpAndRestores,
                "a_cluster_created_again_from_a_backup_holds_exactly_the_backups_data",
            ),
            real_pods(
                Ability::SurvivesATotalOutage,
                "a_total_outage_ends_with_the_same_members_and_every_acknowledged_write",
            ),
            real_pods(
                Ability::RepairsAMember,
                "a_repair_request_rebuilds_the_named_member_on_an_empty_volume",
            ),
        ],
        "mysql" => vec![
            real_pods(
                Ability::FormsAClusterOfRealPods,
                "the_chart_installed_operator_forms_a_cluster_of_real_members",
            ),
            real_pods(
                Ability::RollsOneMemberAtATime,
                "an_operator_upgrade_through_the_chart_rolls_one_member_at_a_time_the_primary_last",
            ),
            real_pods(
                Ability::BacksUpAndRestores,
                "backups_land_in_an_s3_store_and_a_new_cluster_restores_from_one",
            ),
            real_pods(
                Ability::SurvivesATotalOutage,
                "a_total_outage_ends_with_every_member_back_and_every_acknowledged_write",
            ),
            real_pods(
                Ability::RepairsAMember,
                "a_repair_request_rebuilds_the_named_replica_on_an_empty_volume",
            ),
        ],
        "redis" => vec![
            real_pods(
                Ability::FormsAClusterOfRealPods,
                "the_chart_installed_operator_runs_a_primary_replicas_and_sentinels_of_real_pods",
            ),
            real_pods(
                Ability::RollsOneMemberAtATime,
                "a_new_pod_template_restarts_one_node_at_a_time_the_primary_last_after_a_handover",
            ),
            real_pods(
                Ability::BacksUpAndRestores,
                "backups_land_in_an_s3_store_and_a_new_deployment_restores_from_one",
            ),
            real_pods(
                Ability::SurvivesATotalOutage,
                "replication_after_a_total_outage_serves_every_acknowledged_write",
            ),
            real_pods(
                Ability::RepairsAMember,
                "a_repair_request_rebuilds_the_named_replica_on_an_empty_volume",
            ),
        ],
        "mongodb" => vec![
            real_pods(
                Ability::FormsAClusterOfRealPods,
                "the_chart_installed_operator_forms_a_replica_set_of_real_pods",
            ),
            real_pods(
                Ability::RollsOneMemberAtATime,
                "a_new_pod_template_restarts_one_member_at_a_time_the_primary_last",
            ),
            real_pods(
                Ability::BacksUpAndRestores,
                "backups_land_in_an_s3_store_and_a_new_replica_set_restores_from_one",
            ),
            real_pods(
                Ability::SurvivesATotalOutage,
                "a_total_outage_ends_with_the_same_members_and_every_acknowledged_write",
            ),
            real_pods(
                Ability::RepairsAMember,
                "a_repair_request_rebuilds_the_named_member_on_an_empty_volume",
            ),
        ],
        _ => Vec::new(),
    };
    proofs.extend(engine_proofs);
    proofs
}

/// The highest level every ability of which, and of every level below it, has a proof.
pub fn proven_level(proofs: &[Proof]) -> Option<CapabilityLevel> {
    let proven = |level: CapabilityLevel| {
        Ability::ALL
            .iter()
            .filter(|ability| ability.level() == level)
            .all(|ability| proofs.iter().any(|proof| proof.ability == *ability))
    };
    CapabilityLevel::ALL
        .into_iter()
        .take_while(|level| proven(*level))
        .last()
}

/// The proofs whose test is not in its file under `root`: each one a claim no test holds up.
pub fn missing_tests(root: &Path, proofs: &[Proof]) -> Vec<String> {
    proofs
        .iter()
        .filter(|proof| {
            let source = std::fs::read_to_string(root.join(proof.file)).unwrap_or_default();
            !source.contains(&format!("async fn {}(", proof.test))
                && !source.contains(&format!("\nfn {}(", proof.test))
        })
        .map(|proof| format!("{}: {} ({:?})", proof.file, proof.test, proof.ability))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_is_proven_only_with_every_ability_of_it_and_of_the_levels_below() {
        let proof = |ability| Proof {
            ability,
            file: "",
            test: "",
        };
        let basic = [
            proof(Ability::InstallsThroughOlm),
            proof(Ability::FormsAClusterOfRealPods),
        ];
        let upgrades = [
            proof(Ability::UpgradesThroughItsChannel),
            proof(Ability::RollsOneMemberAtATime),
        ];
        let lifecycle = [
            proof(Ability::BacksUpAndRestores),
            proof(Ability::SurvivesATotalOutage),
            proof(Ability::RepairsAMember),
        ];
        assert_eq!(proven_level(&[]), None);
        assert_eq!(proven_level(&basic[..1]), None);
        assert_eq!(proven_level(&basic), Some(CapabilityLevel::BasicInstall));
        // Lifecycle abilities without a seamless upgrade prove only the basic level.
        assert_eq!(
            proven_level(&[&basic[..], &lifecycle[..]].concat()),
            Some(CapabilityLevel::BasicInstall)
        );
        assert_eq!(
            proven_level(&[&basic[..], &upgrades[..], &lifecycle[..2]].concat()),
            Some(CapabilityLevel::SeamlessUpgrades)
        );
        assert_eq!(
            proven_level(&[&basic[..], &upgrades[..], &lifecycle[..]].concat()),
            Some(CapabilityLevel::FullLifecycle)
        );
    }

    /// Every CSV's claim stands on tests that exist: a renamed or deleted proof fails here,
    /// and the level each operator claims is the one its proofs reach.
    #[test]
    fn every_operator_claims_the_level_its_tests_prove_and_every_proof_exists() {
        let root = crate::repository_root();
        for operator in crate::operators() {
            let proofs = proofs(operator.engine);
            assert_eq!(
                missing_tests(&root, &proofs),
                Vec::<String>::new(),
                "{}",
                operator.package
            );
            assert_eq!(
                proven_level(&proofs),
                Some(CapabilityLevel::FullLifecycle),
                "{}",
                operator.package
            );
        }
    }

    #[test]
    fn a_proof_naming_a_test_that_is_not_there_is_reported() {
        let root = crate::repository_root();
        let proofs = [Proof {
            ability: Ability::RepairsAMember,
            file: "operators/etcd/tests/real_pods.rs",
            test: "a_test_nobody_wrote",
        }];
        assert_eq!(missing_tests(&root, &proofs).len(), 1);
    }
}
