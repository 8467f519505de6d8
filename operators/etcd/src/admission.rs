//! Admission policy shipped with the operator: a warning (never a refusal) when an
//! `EtcdCluster` asks for an even number of members. Four members tolerate one failure, as
//! three do, while having more to lose; users may still choose it.

use k8s_openapi::{
    api::admissionregistration::v1::{
        MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec, Validation,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// The policy's name (and its binding's).
pub const ODD_MEMBERS_POLICY: &str = "quorum-etcd-odd-members";

/// The policy and its binding: `Warn` on create, update and scale to an even count.
pub fn odd_members_policy() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let metadata = ObjectMeta {
        name: Some(ODD_MEMBERS_POLICY.to_string()),
        ..ObjectMeta::default()
    };
    let policy = ValidatingAdmissionPolicy {
        metadata: metadata.clone(),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Ignore".into()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec!["etcd.quorum.dev".into()]),
                    api_versions: Some(vec!["*".into()]),
                    operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                    // The scale subresource's object is a Scale, which has spec.replicas too.
                    resources: Some(vec!["etcdclusters".into(), "etcdclusters/scale".into()]),
                    ..NamedRuleWithOperations::default()
                }]),
                ..MatchResources::default()
            }),
            validations: Some(vec![Validation {
                expression: "object.spec.replicas % 2 == 1".into(),
                message_expression: Some(
                    "'spec.replicas: ' + string(object.spec.replicas) + ' members tolerate no more failures than ' \
                     + string(object.spec.replicas - 1) + '; an odd count is recommended'"
                        .into(),
                ),
                ..Validation::default()
            }]),
            ..ValidatingAdmissionPolicySpec::default()
        }),
        ..ValidatingAdmissionPolicy::default()
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata,
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(ODD_MEMBERS_POLICY.into()),
            validation_actions: Some(vec!["Warn".into()]),
            ..ValidatingAdmissionPolicyBindingSpec::default()
        }),
    };
    (policy, binding)
}
