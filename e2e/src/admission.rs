//! Table-driven admission tests against the real API server: each row changes a valid resource
//! (before it is created, or by a merge patch afterwards) and says whether the API server must
//! accept it or refuse it with a message naming the field. Rows that must be accepted (boundary
//! values) catch a rule that refuses too much; [`assert_every_field_covered`] catches a field
//! no row exercises.
//!
//! The rows shared by every engine's resources (the fragments of `quorum_core::crd` and the
//! backup resources, whose specs are the same for every engine) are here; each engine's test
//! adds its own.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

/// What the API server must do with a row.
#[derive(Clone, Debug)]
pub enum Expect {
    /// Accept the change.
    Accepted,
    /// Refuse it (422) with a message containing each of these (the field's path first).
    Refused(Vec<String>),
}

/// One row of an admission table.
#[derive(Clone, Debug)]
pub struct Row {
    pub description: String,
    /// A merge patch applied to the valid resource before it is created (for example
    /// `{"spec": {"replicas": 0}}`); `metadata.name` may be set by it.
    pub create: Value,
    /// A merge patch sent after the resource was created: the row's expectation is then about
    /// this update, and the creation must succeed.
    pub update: Option<Value>,
    pub expect: Expect,
}

impl Row {
    /// A resource created with `create` must be refused, naming each of `fields`.
    pub fn refused(description: &str, create: Value, fields: &[&str]) -> Row {
        Row {
            description: description.to_string(),
            create,
            update: None,
            expect: Expect::Refused(fields.iter().map(|field| field.to_string()).collect()),
        }
    }

    /// A resource created with `create` must be accepted.
    pub fn accepted(description: &str, create: Value) -> Row {
        Row {
            description: description.to_string(),
            create,
            update: None,
            expect: Expect::Accepted,
        }
    }

    /// After creating with `create`, the `update` must be refused, naming each of `fields`.
    pub fn update_refused(description: &str, create: Value, update: Value, fields: &[&str]) -> Row {
        Row {
            update: Some(update),
            ..Row::refused(description, create, fields)
        }
    }

    /// After creating with `create`, the `update` must be accepted, and so must a status write.
    pub fn update_accepted(description: &str, create: Value, update: Value) -> Row {
        Row {
            update: Some(update),
            ..Row::accepted(description, create)
        }
    }
}

/// `{"spec": spec}`: most rows change the spec only.
pub fn spec(spec: Value) -> Value {
    json!({ "spec": spec })
}

/// Applies the JSON merge patch `patch` to `target` (RFC 7386: `null` removes a field).
pub fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(patch) => {
            if !target.is_object() {
                *target = json!({});
            }
            let object = target.as_object_mut().expect("made an object");
            for (key, value) in patch {
                if value.is_null() {
                    object.remove(key);
                } else {
                    merge(object.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Runs every row against the API server in `namespace`, each on its own resource made from
/// `valid` (a serialized resource the API server accepts, with `apiVersion` and `kind`), and
/// returns a line for every row whose outcome differed from its expectation.
pub async fn check_rows(
    client: &Client,
    namespace: &str,
    crd: &CustomResourceDefinition,
    valid: &Value,
    rows: &[Row],
) -> Vec<String> {
    let resource = api_resource(crd);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let mut failures = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        if let Err(failure) = check_row(&api, valid, index, row).await {
            failures.push(format!(
                "- {} row {index}, {}: {failure}",
                resource.kind, row.description
            ));
        }
    }
    failures
}

/// The whole table test of one engine: checks that `rows` cover every field of the cluster CRD
/// (but `affinity` and `claims`, taken whole from Kubernetes types, whose API server checks are
/// its own) and the shared backup rows every field of the backup CRD, installs both CRDs, runs
/// every row in a new namespace named `namespace`, and panics listing the rows whose outcome
/// differed.
pub async fn check_engine(
    namespace: &str,
    clusters: &CustomResourceDefinition,
    valid: &Value,
    rows: &[Row],
    backups: &CustomResourceDefinition,
) {
    check_engine_with_backup_rows(namespace, clusters, valid, rows, backups, &[]).await;
}

/// As [`check_engine`], with rows for the engine's own backup fields besides the shared ones.
pub async fn check_engine_with_backup_rows(
    namespace: &str,
    clusters: &CustomResourceDefinition,
    valid: &Value,
    rows: &[Row],
    backups: &CustomResourceDefinition,
    engine_backup_rows: &[Row],
) {
    let (cluster_verify, backup_verify) = verify_rows();
    let rows: Vec<Row> = rows.iter().cloned().chain([cluster_verify]).collect();
    let rows = &rows[..];
    assert_every_field_covered(clusters, rows, &["affinity", "claims"]);
    let backup_rows: Vec<Row> = backup_rows()
        .into_iter()
        .chain([backup_verify])
        .chain(engine_backup_rows.iter().cloned())
        .collect();
    assert_every_field_covered(backups, &backup_rows, &[]);

    let client = crate::control_plane::admin_client().await;
    crate::control_plane::install_crd(&client, clusters).await;
    crate::control_plane::install_crd(&client, backups).await;
    let namespace = crate::control_plane::TestNamespace::create(&client, namespace).await;
    let mut failures = check_rows(&client, namespace.name(), clusters, valid, rows).await;
    failures.extend(
        check_rows(
            &client,
            namespace.name(),
            backups,
            &valid_backup(backups),
            &backup_rows,
        )
        .await,
    );
    assert_no_failures(&failures);
    namespace.delete().await;
}

/// The rows of `verify`, on a cluster's backup policy and on a backup: every engine offers
/// restore drills.
fn verify_rows() -> (Row, Row) {
    let destination = json!({"filesystem": {"path": "/backups"}});
    let on_cluster =
        spec(json!({"backup": {"schedule": "0 3 * * *", "destination": destination, "verify": true}}));
    let on_backup = spec(json!({"verify": true}));
    (
        Row::accepted("a backup policy with restore drills", on_cluster),
        Row::accepted("a backup with restore drills", on_backup),
    )
}

/// Panics listing `failures` (from [`check_rows`]), if any.
pub fn assert_no_failures(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

async fn check_row(api: &Api<DynamicObject>, valid: &Value, index: usize, row: &Row) -> Result<(), String> {
    let mut object = valid.clone();
    merge(
        &mut object,
        &json!({"metadata": {"name": format!("row-{index}")}}),
    );
    merge(&mut object, &row.create);
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let object: DynamicObject = serde_json::from_value(object).map_err(|error| error.to_string())?;
    let created = api.create(&PostParams::default(), &object).await;
    let Some(update) = &row.update else {
        return judge(created.map(drop), &row.expect);
    };
    created.map_err(|error| format!("the resource to update was refused: {error}"))?;
    let updated = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(update))
        .await;
    judge(updated.map(drop), &row.expect)?;
    if matches!(row.expect, Expect::Accepted) {
        // A status write leaves the spec as it is: no rule on spec changes may block it.
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 2}})),
        )
        .await
        .map_err(|error| format!("the status write after the update was refused: {error}"))?;
    }
    Ok(())
}

fn judge(outcome: Result<(), kube::Error>, expect: &Expect) -> Result<(), String> {
    match (outcome, expect) {
        (Ok(()), Expect::Accepted) => Ok(()),
        (Ok(()), Expect::Refused(fields)) => Err(format!("accepted, expected a refusal naming {fields:?}")),
        (Err(error), Expect::Accepted) => Err(format!("refused: {error}")),
        (Err(kube::Error::Api(status)), Expect::Refused(fields)) => {
            if status.code != 422 {
                return Err(format!(
                    "refused with {}, not 422: {}",
                    status.code, status.message
                ));
            }
            let missing: Vec<&String> = fields
                .iter()
                .filter(|field| !status.message.contains(field.as_str()))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("refused without naming {missing:?}: {}", status.message))
            }
        }
        (Err(error), Expect::Refused(_)) => Err(format!("unexpected error: {error}")),
    }
}

fn api_resource(crd: &CustomResourceDefinition) -> ApiResource {
    let version = &crd.spec.versions[0].name;
    ApiResource {
        group: crd.spec.group.clone(),
        version: version.clone(),
        api_version: format!("{}/{version}", crd.spec.group),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    }
}

/// Panics naming every field of the CRD's `spec` that no row changes (a row covers a field
/// when its `create` or `update` patch reaches the field or something inside it). Fields named
/// in `opaque` (Kubernetes types passed through whole, such as `affinity`) count as one field.
pub fn assert_every_field_covered(crd: &CustomResourceDefinition, rows: &[Row], opaque: &[&str]) {
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|validation| validation.open_api_v3_schema.as_ref())
        .and_then(|root| root.properties.as_ref())
        .and_then(|properties| properties.get("spec"))
        .expect("the CRD has a spec");
    let mut fields = Vec::new();
    schema_paths(schema, "spec", opaque, &mut fields);
    let mut touched = Vec::new();
    for row in rows {
        patch_paths(&row.create, "", &mut touched);
        if let Some(update) = &row.update {
            patch_paths(update, "", &mut touched);
        }
    }
    let uncovered: Vec<&String> = fields
        .iter()
        .filter(|field| {
            !touched.iter().any(|path| {
                path == *field
                    || path.starts_with(&format!("{field}."))
                    || path.starts_with(&format!("{field}["))
            })
        })
        .collect();
    assert!(
        uncovered.is_empty(),
        "no row of the {} table changes {uncovered:?}",
        crd.spec.names.kind
    );
}

fn schema_paths(schema: &JSONSchemaProps, path: &str, opaque: &[&str], out: &mut Vec<String>) {
    if let Some(properties) = &schema.properties {
        for (name, property) in properties {
            let field = format!("{path}.{name}");
            out.push(field.clone());
            if !opaque.contains(&name.as_str()) {
                schema_paths(property, &field, opaque, out);
            }
        }
    }
    if let Some(
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(
            items,
        ),
    ) = &schema.items
    {
        schema_paths(items, &format!("{path}[]"), opaque, out);
    }
}

fn patch_paths(value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(object) => {
            for (key, value) in object {
                let field = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                out.push(field.clone());
                patch_paths(value, &field, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                patch_paths(item, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

/// Rows for the fields every cluster resource has from `quorum_core::crd`: `metadata.name`,
/// `image`, `storage`, `resources`, `podTemplate`, `backup` and `restoreFrom`.
pub fn cluster_rows() -> Vec<Row> {
    let long_label = "v".repeat(63);
    let destination = json!({"filesystem": {"path": "/backups"}});
    let backup = |schedule: &str| spec(json!({"backup": {"schedule": schedule, "destination": destination}}));
    let s3 = |s3: Value| {
        let mut s3_destination =
            json!({"bucket": "quorum-backups", "credentialsSecretName": "s3-credentials"});
        merge(&mut s3_destination, &s3);
        spec(json!({"backup": {"schedule": "0 3 * * *", "destination": {"s3": s3_destination}}}))
    };
    let pod = |template: Value| spec(json!({"podTemplate": template}));
    let resources = |resources: Value| spec(json!({"resources": resources}));
    vec![
        // metadata.name: the members' Services and pods are named after it.
        Row::refused(
            "a name starting with a digit",
            json!({"metadata": {"name": "9lives"}}),
            &["metadata.name"],
        ),
        Row::refused(
            "a name with a dot",
            json!({"metadata": {"name": "a.b"}}),
            &["metadata.name"],
        ),
        // image
        Row::refused(
            "an image with a space",
            spec(json!({"image": "my image"})),
            &["spec.image"],
        ),
        Row::accepted(
            "an image with a registry, port and digest",
            spec(json!({"image": "registry.example:5000/db@sha256:0123abcd"})),
        ),
        // storage
        Row::refused(
            "a storage size of zero",
            spec(json!({"storage": {"size": "0Gi"}})),
            &["spec.storage.size"],
        ),
        Row::refused(
            "a storage size that is no quantity",
            spec(json!({"storage": {"size": "8 GB"}})),
            &["spec.storage.size"],
        ),
        Row::refused(
            "a negative storage size",
            spec(json!({"storage": {"size": "-1Gi"}})),
            &["spec.storage.size"],
        ),
        Row::accepted(
            "the smallest storage size",
            spec(json!({"storage": {"size": "1"}})),
        ),
        Row::accepted(
            "a storage size in decimal units",
            spec(json!({"storage": {"size": "500M"}})),
        ),
        Row::refused(
            "a storage class that is no object name",
            spec(json!({"storage": {"size": "1Gi", "storageClassName": "Fast_SSD"}})),
            &["spec.storage.storageClassName"],
        ),
        Row::accepted(
            "a storage class",
            spec(json!({"storage": {"size": "1Gi", "storageClassName": "local-path"}})),
        ),
        Row::update_refused(
            "storage changed after creation",
            json!({}),
            spec(json!({"storage": {"size": "2Gi"}})),
            &["spec.storage", "storage is immutable"],
        ),
        // resources
        Row::refused(
            "a limit that is no quantity",
            resources(json!({"limits": {"memory": "1 GB"}})),
            &["spec.resources.limits.memory"],
        ),
        Row::refused(
            "a negative request",
            resources(json!({"requests": {"cpu": "-1"}})),
            &["spec.resources.requests.cpu"],
        ),
        Row::refused(
            "a resource a container cannot have",
            resources(json!({"limits": {"cpus": "1"}})),
            &["spec.resources.limits", "a container's resources are"],
        ),
        Row::refused(
            "a request above its limit",
            resources(json!({"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}})),
            &["spec.resources.requests", "a request may not exceed its limit"],
        ),
        Row::accepted(
            "requests equal to their limits, extended and huge-page resources",
            resources(json!({
                "requests": {"cpu": "500m", "memory": "1Gi", "example.com/gpu": 1},
                "limits": {"cpu": "0.5", "memory": "1024Mi", "hugepages-2Mi": "64Mi", "ephemeral-storage": "1G"}
            })),
        ),
        Row::accepted("resource claims", resources(json!({"claims": [{"name": "gpu"}]}))),
        // podTemplate
        Row::refused(
            "a pod label value too long",
            pod(json!({"labels": {"team": format!("{long_label}v")}})),
            &["spec.podTemplate.labels.team"],
        ),
        Row::refused(
            "a pod label value with a slash",
            pod(json!({"labels": {"team": "a/b"}})),
            &["spec.podTemplate.labels.team"],
        ),
        Row::refused(
            "a pod label key with a space",
            pod(json!({"labels": {"my team": "a"}})),
            &["spec.podTemplate.labels"],
        ),
        Row::accepted(
            "pod labels at their limits",
            pod(json!({"labels": {"example.com/team": long_label, "empty": ""}})),
        ),
        Row::refused(
            "an annotation key with two slashes",
            pod(json!({"annotations": {"a/b/c": "x"}})),
            &["spec.podTemplate.annotations"],
        ),
        Row::accepted(
            "annotations with any value",
            pod(json!({"annotations": {"example.com/note": "any text: at all / {}"}})),
        ),
        Row::refused(
            "a node selector value with a space",
            pod(json!({"nodeSelector": {"zone": "eu west"}})),
            &["spec.podTemplate.nodeSelector.zone"],
        ),
        Row::accepted(
            "a node selector",
            pod(json!({"nodeSelector": {"topology.kubernetes.io/zone": "eu-west-1a"}})),
        ),
        Row::refused(
            "a toleration with an unknown operator",
            pod(json!({"tolerations": [{"key": "dedicated", "operator": "Maybe"}]})),
            &["spec.podTemplate.tolerations[0].operator"],
        ),
        Row::refused(
            "a toleration with an unknown effect",
            pod(json!({"tolerations": [{"key": "dedicated", "effect": "Never"}]})),
            &["spec.podTemplate.tolerations[0].effect"],
        ),
        Row::refused(
            "a toleration with Exists and a value",
            pod(json!({"tolerations": [{"key": "dedicated", "operator": "Exists", "value": "db"}]})),
            &["spec.podTemplate.tolerations", "operator Exists has no value"],
        ),
        Row::refused(
            "a toleration value that is no label value",
            pod(json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "a b"}]})),
            &["spec.podTemplate.tolerations[0].value"],
        ),
        Row::accepted(
            "tolerations",
            pod(json!({"tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
                {"operator": "Exists"}
            ]})),
        ),
        Row::accepted(
            "an affinity",
            pod(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]
                }}}}),
            ),
        ),
        Row::refused(
            "a priority class that is no object name",
            pod(json!({"priorityClassName": "High Priority"})),
            &["spec.podTemplate.priorityClassName"],
        ),
        Row::accepted(
            "a priority class",
            pod(json!({"priorityClassName": "system-cluster-critical"})),
        ),
        // backup: the schedule, field by field
        Row::refused(
            "a schedule of four fields",
            backup("0 3 * *"),
            &["spec.backup.schedule", "five fields"],
        ),
        Row::refused(
            "minute 60",
            backup("60 3 * * *"),
            &["spec.backup.schedule", "minute 0-59"],
        ),
        Row::refused("hour 24", backup("0 24 * * *"), &["spec.backup.schedule"]),
        Row::refused("day of month 0", backup("0 3 0 * *"), &["spec.backup.schedule"]),
        Row::refused("day of month 32", backup("0 3 32 * *"), &["spec.backup.schedule"]),
        Row::refused("month 13", backup("0 3 * 13 *"), &["spec.backup.schedule"]),
        Row::refused("day of week 8", backup("0 3 * * 8"), &["spec.backup.schedule"]),
        Row::refused(
            "a descending range",
            backup("30-10 3 * * *"),
            &["spec.backup.schedule"],
        ),
        Row::refused("a step of zero", backup("*/0 3 * * *"), &["spec.backup.schedule"]),
        Row::refused("a nickname", backup("@daily"), &["spec.backup.schedule"]),
        Row::refused(
            "the last day of the month (L)",
            backup("0 3 L * *"),
            &["spec.backup.schedule"],
        ),
        Row::accepted("every field at its maximum", backup("59 23 31 12 7")),
        Row::accepted("every field at its minimum", backup("0 0 1 1 0")),
        Row::accepted(
            "lists, ranges, steps and names",
            backup("0,30 9-17/2 1-15 JAN-jun mon-FRI"),
        ),
        Row::refused(
            "a backup policy with both destinations",
            spec(json!({"backup": {"schedule": "0 3 * * *", "destination": {
                "filesystem": {"path": "/backups"},
                "s3": {"bucket": "quorum-backups", "credentialsSecretName": "s3-credentials"}
            }}})),
            &["spec.backup.destination", "set exactly one of s3 or filesystem"],
        ),
        Row::refused(
            "a backup policy with no destination",
            spec(json!({"backup": {"schedule": "0 3 * * *", "destination": {}}})),
            &["spec.backup.destination", "set exactly one of s3 or filesystem"],
        ),
        Row::refused(
            "a relative filesystem path",
            spec(
                json!({"backup": {"schedule": "0 3 * * *", "destination": {"filesystem": {"path": "backups"}}}}),
            ),
            &["spec.backup.destination.filesystem.path"],
        ),
        Row::refused(
            "a bucket name with capitals",
            s3(json!({"bucket": "Backups"})),
            &["spec.backup.destination.s3.bucket"],
        ),
        Row::refused(
            "a bucket name of two characters",
            s3(json!({"bucket": "ab"})),
            &["spec.backup.destination.s3.bucket"],
        ),
        Row::refused(
            "a credentials Secret that is no object name",
            s3(json!({"credentialsSecretName": "S3_credentials"})),
            &["spec.backup.destination.s3.credentialsSecretName"],
        ),
        Row::refused(
            "an endpoint that is no URL",
            s3(json!({"endpoint": "minio:9000"})),
            &["spec.backup.destination.s3.endpoint"],
        ),
        Row::refused(
            "a prefix with a leading slash",
            s3(json!({"prefix": "/quorum"})),
            &["spec.backup.destination.s3.prefix"],
        ),
        Row::refused(
            "a region with a space",
            s3(json!({"region": "eu west"})),
            &["spec.backup.destination.s3.region"],
        ),
        Row::accepted(
            "an S3 destination with every field",
            s3(
                json!({"bucket": "abc", "endpoint": "https://minio.storage.svc:9000", "prefix": "team/quorum",
                      "region": "eu-west-1", "credentialsSecretName": "s3.credentials"}),
            ),
        ),
        Row::refused(
            "retaining no snapshot",
            spec(json!({"backup": {"schedule": "0 3 * * *", "destination": destination, "retain": 0}})),
            &["spec.backup.retain"],
        ),
        Row::refused(
            "a maximum age of zero",
            spec(
                json!({"backup": {"schedule": "0 3 * * *", "destination": destination, "maxAgeMinutes": 0}}),
            ),
            &["spec.backup.maxAgeMinutes"],
        ),
        Row::accepted(
            "retaining one snapshot for a minute",
            spec(
                json!({"backup": {"schedule": "0 3 * * *", "destination": destination, "retain": 1, "maxAgeMinutes": 1}}),
            ),
        ),
        // restoreFrom
        Row::refused(
            "a backup name that is no object name",
            spec(json!({"restoreFrom": {"backupName": "Nightly Backup"}})),
            &["spec.restoreFrom.backupName"],
        ),
        Row::update_refused(
            "restoreFrom added after creation",
            json!({}),
            spec(json!({"restoreFrom": {"backupName": "nightly"}})),
            &["spec.restoreFrom", "restoreFrom is immutable"],
        ),
        Row::update_refused(
            "restoreFrom changed after creation",
            spec(json!({"restoreFrom": {"backupName": "nightly"}})),
            spec(json!({"restoreFrom": {"backupName": "weekly"}})),
            &["spec.restoreFrom", "restoreFrom is immutable"],
        ),
        Row::update_refused(
            "restoreFrom removed after creation",
            spec(json!({"restoreFrom": {"backupName": "nightly"}})),
            spec(json!({"restoreFrom": null})),
            &["spec.restoreFrom", "restoreFrom is immutable"],
        ),
        Row::update_accepted(
            "labels, resources and the backup policy changed after creation",
            json!({}),
            spec(json!({
                "podTemplate": {"labels": {"team": "b"}},
                "resources": {"requests": {"memory": "256Mi"}},
                "backup": {"schedule": "15 */4 * * *", "destination": destination}
            })),
        ),
    ]
}

/// Rows for a backup resource (`EtcdBackup`, `MySQLBackup`, `RedisBackup`, `MongoDBBackup`: the
/// same spec), whose valid form is a scheduled backup of a cluster to a filesystem directory.
pub fn backup_rows() -> Vec<Row> {
    let schedule = |schedule: &str| spec(json!({"schedule": schedule}));
    vec![
        Row::refused(
            "no cluster name",
            spec(json!({"clusterName": ""})),
            &["spec.clusterName"],
        ),
        Row::refused(
            "a cluster name that is no object name",
            spec(json!({"clusterName": "Main Cluster"})),
            &["spec.clusterName"],
        ),
        Row::update_refused(
            "the cluster changed after creation",
            json!({}),
            spec(json!({"clusterName": "other"})),
            &["spec.clusterName", "clusterName is immutable"],
        ),
        Row::refused(
            "both destinations",
            spec(
                json!({"destination": {"s3": {"bucket": "quorum-backups", "credentialsSecretName": "s3-credentials"}}}),
            ),
            &["spec.destination", "set exactly one of s3 or filesystem"],
        ),
        Row::refused(
            "a relative directory",
            spec(json!({"destination": {"filesystem": {"path": "backups"}}})),
            &["spec.destination.filesystem.path"],
        ),
        Row::refused(
            "an S3 bucket name with an underscore",
            spec(
                json!({"destination": {"filesystem": null, "s3": {"bucket": "my_backups", "credentialsSecretName": "s3-credentials"}}}),
            ),
            &["spec.destination.s3.bucket"],
        ),
        Row::refused(
            "an S3 credentials Secret that is no object name",
            spec(
                json!({"destination": {"filesystem": null, "s3": {"bucket": "quorum-backups", "credentialsSecretName": "-"}}}),
            ),
            &["spec.destination.s3.credentialsSecretName"],
        ),
        Row::refused(
            "an S3 endpoint with a space",
            spec(json!({"destination": {"filesystem": null, "s3": {
                "bucket": "quorum-backups", "credentialsSecretName": "s3-credentials", "endpoint": "https://minio example"
            }}})),
            &["spec.destination.s3.endpoint"],
        ),
        Row::refused(
            "an S3 prefix with a leading slash",
            spec(json!({"destination": {"filesystem": null, "s3": {
                "bucket": "quorum-backups", "credentialsSecretName": "s3-credentials", "prefix": "/x"
            }}})),
            &["spec.destination.s3.prefix"],
        ),
        Row::refused(
            "an S3 region with capitals",
            spec(json!({"destination": {"filesystem": null, "s3": {
                "bucket": "quorum-backups", "credentialsSecretName": "s3-credentials", "region": "EU"
            }}})),
            &["spec.destination.s3.region"],
        ),
        Row::accepted(
            "an S3 destination",
            spec(json!({"destination": {"filesystem": null, "s3": {
                "bucket": "quorum-backups", "credentialsSecretName": "s3-credentials", "endpoint": "http://127.0.0.1:9000",
                "prefix": "quorum", "region": "us-east-1"
            }}})),
        ),
        Row::refused(
            "a schedule of six fields",
            schedule("0 0 3 * * *"),
            &["spec.schedule", "five fields"],
        ),
        Row::refused("minute 60", schedule("60 * * * *"), &["spec.schedule"]),
        Row::refused("hour 24", schedule("0 24 * * *"), &["spec.schedule"]),
        Row::refused("day of month 32", schedule("0 3 32 * *"), &["spec.schedule"]),
        Row::refused("month 0", schedule("0 3 * 0 *"), &["spec.schedule"]),
        Row::refused("day of week 8", schedule("0 3 * * 8"), &["spec.schedule"]),
        Row::refused(
            "a day-of-week name that is no day",
            schedule("0 3 * * MONDAY"),
            &["spec.schedule"],
        ),
        Row::accepted("every field at its maximum", schedule("59 23 31 12 7")),
        Row::accepted("names and steps", schedule("*/15 */2 1,15 JAN-DEC SUN")),
        Row::refused(
            "retaining no snapshot",
            spec(json!({"retain": 0})),
            &["spec.retain"],
        ),
        Row::refused(
            "retention without a schedule",
            spec(json!({"schedule": null, "retain": 3})),
            &["retain applies only to scheduled backups"],
        ),
        Row::accepted(
            "a one-shot backup",
            spec(json!({"schedule": null, "retain": null})),
        ),
        Row::accepted("retaining one snapshot", spec(json!({"retain": 1}))),
    ]
}

/// A valid backup resource of `crd`'s kind: scheduled, to a filesystem directory.
pub fn valid_backup(crd: &CustomResourceDefinition) -> Value {
    json!({
        "apiVersion": format!("{}/{}", crd.spec.group, crd.spec.versions[0].name),
        "kind": crd.spec.names.kind,
        "metadata": {"name": "valid"},
        "spec": {
            "clusterName": "main",
            "destination": {"filesystem": {"path": "/backups"}},
            "schedule": "0 3 * * *",
            "retain": 3
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd_with_spec(spec: Value) -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "metadata": {"name": "things.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Thing", "plural": "things"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "properties": {"spec": spec}
                }}}]
            }
        }))
        .expect("a CRD")
    }

    #[test]
    #[should_panic(expected = "[\"spec.items[].name\", \"spec.size\"]")]
    fn a_field_no_row_changes_is_named() {
        let crd = crd_with_spec(json!({"type": "object", "properties": {
            "storage": {"type": "object", "properties": {"size": {"type": "string"}}},
            "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
            "affinity": {"type": "object", "properties": {"nodeAffinity": {"type": "object"}}},
            "size": {"type": "integer"}
        }}));
        let rows = [
            Row::accepted("storage", spec(json!({"storage": {"size": "1Gi"}}))),
            Row::accepted("affinity", spec(json!({"affinity": {}}))),
            Row::update_accepted("items", json!({}), spec(json!({"items": []}))),
        ];
        assert_every_field_covered(&crd, &rows, &["affinity"]);
    }

    #[test]
    fn merge_follows_rfc_7386() {
        let mut target = json!({"a": {"b": 1, "c": 2}, "d": [1]});
        merge(
            &mut target,
            &json!({"a": {"b": null, "e": 3}, "d": [2], "f": "x"}),
        );
        assert_eq!(target, json!({"a": {"c": 2, "e": 3}, "d": [2], "f": "x"}));
    }
}
