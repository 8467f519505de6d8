//! RBAC rules as each operator declares them for the generator (`cargo xtask generate`).

use k8s_openapi::api::rbac::v1::PolicyRule;

/// A rule granting `verbs` on `resources` of API `group` (`""` for the core group).
pub fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    }
}

/// Whether `rules` allow `verb` on `resource` of API `group`.
pub fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|rule| {
        rule.api_groups.iter().flatten().any(|g| g == group)
            && rule.resources.iter().flatten().any(|r| r == resource)
            && rule.verbs.iter().any(|v| v == verb)
    })
}

/// What `granted` allows that `holder` does not, as `verb group/resource` (the API server lets
/// an account grant only what it holds itself).
pub fn beyond(granted: &[PolicyRule], holder: &[PolicyRule]) -> Vec<String> {
    let mut beyond = Vec::new();
    for rule in granted {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    if !allows(holder, group, resource, verb) {
                        beyond.push(format!("{verb} {group}/{resource}"));
                    }
                }
            }
        }
    }
    beyond
}

/// The rules on an engine's own resources in API `group`: its clusters (`clusters`, read and
/// watched, plus `extra_cluster_verbs`) and their status, which is its to write; its backups
/// (`backups`), applied and deleted on behalf of a cluster's backup policy, and their status.
pub fn custom_resource_rules(
    group: &str,
    clusters: &str,
    backups: &str,
    extra_cluster_verbs: &[&str],
) -> Vec<PolicyRule> {
    let cluster_verbs: Vec<&str> = ["get", "list", "watch"]
        .into_iter()
        .chain(extra_cluster_verbs.iter().copied())
        .collect();
    vec![
        rule(group, &[clusters], &cluster_verbs),
        rule(group, &[&format!("{clusters}/status")], &["get", "patch"]),
        rule(
            group,
            &[backups],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(group, &[&format!("{backups}/status")], &["get", "patch"]),
    ]
}

/// Every rule an operator needs in the namespaces it manages: its own resources
/// ([`custom_resource_rules`]), the child objects it applies ([`child_object_rules`]), the
/// engine's `own` rules (its Secrets and pods, each with why), the claims it lists for a deleted
/// cluster's leftovers ([`crate::predecessor`]) and the events it records.
pub fn operator_rules(
    group: &str,
    clusters: &str,
    backups: &str,
    extra_cluster_verbs: &[&str],
    own: impl IntoIterator<Item = PolicyRule>,
) -> Vec<PolicyRule> {
    let mut rules = custom_resource_rules(group, clusters, backups, extra_cluster_verbs);
    rules.extend(child_object_rules());
    rules.extend(own);
    // Claims listed to find a deleted cluster's leftovers (`crate::predecessor::find`).
    rules.push(rule("", &["persistentvolumeclaims"], &["list"]));
    // Backups run in Jobs beside the data, as their own service account.
    rules.extend(crate::backup::job::operator_rules());
    rules.push(events_rule());
    rules
}

/// The child objects every operator applies with server-side apply and watches, so a deleted
/// one comes back: StatefulSets, Services, ConfigMaps and PodDisruptionBudgets. Never deleted:
/// they go with their owner.
pub fn child_object_rules() -> Vec<PolicyRule> {
    let applied = ["get", "list", "watch", "create", "patch"];
    vec![
        rule("apps", &["statefulsets"], &applied),
        rule("", &["services", "configmaps"], &applied),
        rule("policy", &["poddisruptionbudgets"], &applied),
    ]
}

/// Events about the resources, through the de-duplicating recorder.
pub fn events_rule() -> PolicyRule {
    rule("events.k8s.io", &["events"], &["create", "patch"])
}

/// The rules for the operator's own namespace: its leader-election Lease.
pub fn leader_election_rules() -> Vec<PolicyRule> {
    vec![rule(
        "coordination.k8s.io",
        &["leases"],
        &["get", "create", "update"],
    )]
}
