//! The Helm chart of each operator. Generated here: `Chart.yaml`, `values.yaml` and
//! `values.schema.json` (both from [`ChartValues`], so they cannot disagree), the CRDs and the
//! RBAC templates (from the operator's declared rules). The templates every chart shares
//! (`templates/deployment.yaml` and friends, which read these values) are written by hand once,
//! in `xtask/chart-templates/`, and copied into each chart.

use std::path::{Path, PathBuf};

use k8s_openapi::{
    api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use schemars::JsonSchema;
use serde::Serialize;

use crate::{GeneratedFile, HEADER, OperatorPackage};

/// The templates every chart shares, from their one copy in `xtask/chart-templates/`.
const SHARED_TEMPLATES: &[(&str, &str)] = &[
    ("_helpers.tpl", include_str!("../chart-templates/_helpers.tpl")),
    (
        "deployment.yaml",
        include_str!("../chart-templates/deployment.yaml"),
    ),
    ("service.yaml", include_str!("../chart-templates/service.yaml")),
    (
        "serviceaccount.yaml",
        include_str!("../chart-templates/serviceaccount.yaml"),
    ),
    (
        "servicemonitor.yaml",
        include_str!("../chart-templates/servicemonitor.yaml"),
    ),
    (
        "prometheusrule.yaml",
        include_str!("../chart-templates/prometheusrule.yaml"),
    ),
    (
        "dashboards.yaml",
        include_str!("../chart-templates/dashboards.yaml"),
    ),
];

/// A shared template as written into a chart, marked with where to edit it.
fn shared_template(name: &str, text: &str) -> String {
    let origin =
        format!("Written by `cargo xtask generate` from xtask/chart-templates/{name}: edit it there.");
    if name.ends_with(".tpl") {
        format!("{{{{/* {origin} */}}}}\n{text}")
    } else {
        format!("# {origin}\n{text}")
    }
}

/// Placeholder names replaced by Helm template expressions after serialization.
const FULLNAME: &str = "QUORUM_FULLNAME";
const NAMESPACE: &str = "QUORUM_NAMESPACE";
const SERVICE_ACCOUNT: &str = "QUORUM_SERVICE_ACCOUNT";
const WATCHED_NAMESPACE: &str = "QUORUM_WATCHED_NAMESPACE";

/// The chart's values: their defaults are `values.yaml`, their schema `values.schema.json`.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(deny_unknown_fields)]
pub struct ChartValues {
    /// The operator's container image.
    pub image: Image,
    /// Operator replicas; one leads at a time (leader election), the others stand by.
    #[schemars(range(min = 1))]
    pub replica_count: u32,
    /// Namespaces to watch; empty for all namespaces.
    pub watch_namespaces: Vec<String>,
    /// `text` or `json`.
    #[schemars(regex(pattern = r"^(text|json)$"))]
    pub log_format: String,
    pub leader_election: bool,
    /// How fast the operator may call the API server.
    pub api: ApiRate,
    /// Passes each controller runs at once, over different clusters.
    #[schemars(range(min = 1, max = 1000))]
    pub max_concurrent_reconciles: u16,
    /// Resources of the operator container.
    pub resources: Resources,
    pub metrics: Metrics,
    /// The ServiceAccount the operator runs as.
    pub service_account: ServiceAccount,
    pub node_selector: std::collections::BTreeMap<String, String>,
    pub tolerations: Vec<serde_json::Value>,
    pub affinity: serde_json::Map<String, serde_json::Value>,
    pub backups: Backups,
    /// Install the operator's ValidatingAdmissionPolicy (only charts that have one).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub admission_policy: Option<bool>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiRate {
    /// Requests per second on average.
    #[schemars(range(min = 1))]
    pub qps: u32,
    /// Requests at once above that average.
    #[schemars(range(min = 1))]
    pub burst: u32,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Image {
    pub repository: String,
    /// The tag the operator's images are published under for this chart's version.
    pub tag: String,
    #[schemars(regex(pattern = r"^(Always|IfNotPresent|Never)$"))]
    pub pull_policy: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    pub requests: std::collections::BTreeMap<String, String>,
    pub limits: std::collections::BTreeMap<String, String>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metrics {
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    pub service_monitor: ServiceMonitor,
    /// The alerts of docs/alerts.md as a Prometheus Operator PrometheusRule, over this
    /// operator's series only.
    pub prometheus_rule: PrometheusRule,
    /// The overview and this operator's Grafana dashboards (docs/dashboards.md) in a ConfigMap
    /// labelled `grafana_dashboard: "1"`, for Grafana's dashboard sidecar.
    pub grafana_dashboards: Toggle,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrometheusRule {
    pub enabled: bool,
    /// Labels added to the PrometheusRule (a Prometheus's `ruleSelector` may ask for some).
    pub labels: std::collections::BTreeMap<String, String>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Toggle {
    pub enabled: bool,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceMonitor {
    /// Create a Prometheus Operator ServiceMonitor.
    pub enabled: bool,
    pub interval: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Backups {
    /// Allow backups to plain-HTTP S3 endpoints (an in-cluster store without TLS). Credentials
    /// and data then cross the network in clear text.
    pub allow_http: bool,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceAccount {
    pub create: bool,
    /// Defaults to the release's full name when empty.
    pub name: String,
}

impl ChartValues {
    fn defaults(operator: &OperatorPackage) -> Self {
        Self {
            image: Image {
                repository: crate::image::repository(operator),
                tag: crate::image::tag(crate::bundle::VERSION),
                pull_policy: "IfNotPresent".into(),
            },
            replica_count: 1,
            watch_namespaces: Vec::new(),
            log_format: "json".into(),
            leader_election: true,
            api: ApiRate { qps: 20, burst: 30 },
            max_concurrent_reconciles: 10,
            resources: Resources {
                requests: [
                    ("cpu".to_string(), "50m".to_string()),
                    ("memory".to_string(), "64Mi".to_string()),
                ]
                .into(),
                limits: [("memory".to_string(), "256Mi".to_string())].into(),
            },
            metrics: Metrics {
                port: 8080,
                service_monitor: ServiceMonitor {
                    enabled: false,
                    interval: "30s".into(),
                },
                prometheus_rule: PrometheusRule {
                    enabled: false,
                    labels: Default::default(),
                },
                grafana_dashboards: Toggle { enabled: false },
            },
            service_account: ServiceAccount {
                create: true,
                name: String::new(),
            },
            node_selector: Default::default(),
            tolerations: Vec::new(),
            affinity: Default::default(),
            backups: Backups { allow_http: false },
            admission_policy: operator.admission_policy.as_ref().map(|_| true),
        }
    }
}

fn metadata(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some([("app.kubernetes.io/managed-by".to_string(), "Helm".to_string())].into()),
        ..ObjectMeta::default()
    }
}

/// The RBAC template. With `watchNamespaces` set, a Role and RoleBinding with the operator's
/// rules in each watched namespace and nothing cluster-wide (the operator then sees Secrets,
/// pods and claims of those namespaces only); with it empty (all namespaces), a ClusterRole
/// and its binding. Either way, a Role for the leader-election Lease in the release namespace.
fn rbac_template(rules: Vec<PolicyRule>, leader_rules: Vec<PolicyRule>) -> anyhow::Result<String> {
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: SERVICE_ACCOUNT.into(),
        namespace: Some(NAMESPACE.into()),
        ..Subject::default()
    };
    let role_ref = |kind: &str| RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: FULLNAME.into(),
    };
    let per_namespace = [
        serde_yaml::to_string(&Role {
            metadata: metadata(FULLNAME, Some(WATCHED_NAMESPACE)),
            rules: Some(rules.clone()),
        })?,
        serde_yaml::to_string(&RoleBinding {
            metadata: metadata(FULLNAME, Some(WATCHED_NAMESPACE)),
            role_ref: role_ref("Role"),
            subjects: Some(vec![subject.clone()]),
        })?,
    ]
    .join("---\n");
    let cluster_wide = [
        serde_yaml::to_string(&ClusterRole {
            metadata: metadata(FULLNAME, None),
            rules: Some(rules),
            ..ClusterRole::default()
        })?,
        serde_yaml::to_string(&ClusterRoleBinding {
            metadata: metadata(FULLNAME, None),
            role_ref: role_ref("ClusterRole"),
            subjects: Some(vec![subject.clone()]),
        })?,
    ]
    .join("---\n");
    // Named apart from the rules' Role: the release namespace may also be a watched one.
    let leader_name = format!("{FULLNAME}-leader-election");
    let leader = [
        serde_yaml::to_string(&Role {
            metadata: metadata(&leader_name, Some(NAMESPACE)),
            rules: Some(leader_rules),
        })?,
        serde_yaml::to_string(&RoleBinding {
            metadata: metadata(&leader_name, Some(NAMESPACE)),
            role_ref: RoleRef {
                name: leader_name.clone(),
                ..role_ref("Role")
            },
            subjects: Some(vec![subject]),
        })?,
    ]
    .join("---\n");
    // Inside `range`, `.` is the namespace: the release's values are reached through `$`.
    let per_namespace = per_namespace
        .replace(FULLNAME, "{{ include \"quorum.fullname\" $ }}")
        .replace(WATCHED_NAMESPACE, "{{ $namespace }}")
        .replace(NAMESPACE, "{{ $.Release.Namespace }}")
        .replace(SERVICE_ACCOUNT, "{{ include \"quorum.serviceAccountName\" $ }}");
    Ok(format!(
        "{HEADER}{{{{- if .Values.watchNamespaces }}}}\n{{{{- range $namespace := .Values.watchNamespaces }}}}\n---\n{per_namespace}{{{{- end }}}}\n{{{{- else }}}}\n---\n{}{{{{- end }}}}\n---\n{}",
        templated(&cluster_wide),
        templated(&leader)
    ))
}

fn templated(text: &str) -> String {
    text.replace(FULLNAME, "{{ include \"quorum.fullname\" . }}")
        .replace(NAMESPACE, "{{ .Release.Namespace }}")
        .replace(SERVICE_ACCOUNT, "{{ include \"quorum.serviceAccountName\" . }}")
}

/// The generated files of one operator's chart.
pub fn chart_files(operator: &OperatorPackage) -> anyhow::Result<Vec<GeneratedFile>> {
    let root = Path::new("charts").join(operator.package);
    let file = |path: &str, contents: String| GeneratedFile {
        path: root.join(path),
        contents,
    };
    let chart = serde_json::json!({
        "apiVersion": "v2",
        "name": operator.package,
        "description": operator.description,
        "type": "application",
        "version": env!("CARGO_PKG_VERSION"),
        "appVersion": env!("CARGO_PKG_VERSION"),
        "kubeVersion": ">=1.30.0-0",
        "keywords": operator.keywords,
        "home": "https://github.com/quorum-dev/quorum",
        // `helm lint` recommends an icon, and it must be a URL (not a data: URI): the SVG the
        // bundle embeds, as the repository serves it.
        "icon": format!(
            "https://raw.githubusercontent.com/quorum-dev/quorum/main/operators/{}/assets/icon.svg",
            operator.engine
        ),
        "sources": ["https://github.com/quorum-dev/quorum"],
        "maintainers": [{"name": "Quorum developers", "email": "dev@quorum.dev"}],
        "annotations": {"category": "Database"},
    });
    let values = ChartValues::defaults(operator);
    let mut schema = schemars::schema_for!(ChartValues);
    match &operator.admission_policy {
        // The schema refuses unknown values: a chart without a policy has no switch for one.
        None => without_property(&mut schema, "admissionPolicy"),
        Some(policy) => {
            if let Some(described) = schema
                .get_mut("properties")
                .and_then(|p| p.get_mut("admissionPolicy"))
                .and_then(|p| p.as_object_mut())
            {
                described.insert("description".into(), policy.description.into());
            }
        }
    }
    let mut files = vec![
        file(
            "Chart.yaml",
            format!("{HEADER}{}", serde_yaml::to_string(&chart)?),
        ),
        file(
            "values.yaml",
            format!("{HEADER}{}", serde_yaml::to_string(&values)?),
        ),
        file(
            "values.schema.json",
            format!("{}\n", serde_json::to_string_pretty(&schema)?),
        ),
        file(
            "templates/rbac.yaml",
            rbac_template(operator.rules.clone(), operator.leader_election_rules.clone())?,
        ),
    ];
    for (name, text) in SHARED_TEMPLATES {
        files.push(file(&format!("templates/{name}"), shared_template(name, text)));
    }
    if let Some(policy) = &operator.admission_policy {
        files.push(file(
            &format!("templates/{}", policy.file),
            format!(
                "{HEADER}{{{{- if .Values.admissionPolicy }}}}\n{}---\n{}{{{{- end }}}}\n",
                serde_yaml::to_string(&policy.policy)?,
                serde_yaml::to_string(&policy.binding)?
            ),
        ));
    }
    Ok(files)
}

/// Removes a property (and its `required` entry) from a generated object schema.
fn without_property(schema: &mut schemars::Schema, name: &str) {
    if let Some(properties) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
        properties.remove(name);
    }
    if let Some(required) = schema.get_mut("required").and_then(|r| r.as_array_mut()) {
        required.retain(|entry| entry != name);
    }
}

/// Where the chart of `operator` lives.
pub fn chart_directory(operator: &OperatorPackage) -> PathBuf {
    Path::new("charts").join(operator.package)
}
