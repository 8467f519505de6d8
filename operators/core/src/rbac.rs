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
