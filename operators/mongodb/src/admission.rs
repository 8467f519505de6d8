//! Admission policy shipped with the operator: a warning (never a refusal) when a
//! `MongoDBReplicaSet` asks for an even number of voting members without an arbiter. Four
//! voting members tolerate one failure, as three do, while having more to lose; users may
//! still choose it.
//!
//! The policy also sees `kubectl scale`, whose object is a `Scale`: it carries the member count
//! as `spec.replicas` and says nothing of `spec.arbiter`, so a scale to an even count is warned
//! about with the arbiter named as the way out rather than judged with it.

use k8s_openapi::{
    api::admissionregistration::v1::{
        MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec, Validation, Variable,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// The policy's name (and its binding's).
pub const EVEN_VOTING_MEMBERS_POLICY: &str = "quorum-mongodb-even-voting-members";

/// The policy and its binding: `Warn` on create, update and scale to an even number of voting
/// members without an arbiter.
pub fn even_voting_members_policy() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let metadata = ObjectMeta {
        name: Some(EVEN_VOTING_MEMBERS_POLICY.to_string()),
        ..ObjectMeta::default()
    };
    let variable = |name: &str, expression: &str| Variable {
        name: name.into(),
        expression: expression.into(),
    };
    let policy = ValidatingAdmissionPolicy {
        metadata: metadata.clone(),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Ignore".into()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec!["mongodb.quorum.dev".into()]),
                    api_versions: Some(vec!["*".into()]),
                    operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                    resources: Some(vec![
                        "mongodbreplicasets".into(),
                        "mongodbreplicasets/scale".into(),
                    ]),
                    ..NamedRuleWithOperations::default()
                }]),
                ..MatchResources::default()
            }),
            variables: Some(vec![
                // `subResource` is absent, not empty, on requests for the resource itself.
                variable(
                    "scale",
                    "has(request.subResource) && request.subResource == 'scale'",
                ),
                // A Scale of zero omits `replicas`; the schema refuses zero members anyway.
                variable(
                    "members",
                    "variables.scale ? (has(object.spec.replicas) ? object.spec.replicas : 1) : object.spec.members",
                ),
                variable(
                    "arbiter",
                    "!variables.scale && has(object.spec.arbiter) && object.spec.arbiter",
                ),
            ]),
            validations: Some(vec![
                Validation {
                    expression: "variables.scale || variables.members % 2 == 1 || variables.arbiter".into(),
                    message_expression: Some(
                        "'spec.members: ' + string(variables.members) + ' voting members without an arbiter \
                         tolerate no more failures than ' + string(variables.members - 1) \
                         + ' would; an odd count, or spec.arbiter: true, is recommended'"
                            .into(),
                    ),
                    ..Validation::default()
                },
                Validation {
                    expression: "!variables.scale || variables.members % 2 == 1".into(),
                    message_expression: Some(
                        "'spec.members: ' + string(variables.members) + ' voting members tolerate no more \
                         failures than ' + string(variables.members - 1) + ' would unless spec.arbiter is true; \
                         an odd count is recommended'"
                            .into(),
                    ),
                    ..Validation::default()
                },
            ]),
            ..ValidatingAdmissionPolicySpec::default()
        }),
        ..ValidatingAdmissionPolicy::default()
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata,
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(EVEN_VOTING_MEMBERS_POLICY.into()),
            validation_actions: Some(vec!["Warn".into()]),
            ..ValidatingAdmissionPolicyBindingSpec::default()
        }),
    };
    (policy, binding)
}
