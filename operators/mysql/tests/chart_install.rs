//! The Helm chart, checked by the real `helm` (built from its Go module by
//! `e2e/toolchain/packaging.sh`): `helm lint --strict`, `helm template` with the defaults and
//! with options, the values schema's refusals, and `helm install` into the local control plane.
//! Then the operator runs (as a host process would: in this test process) under a token of the
//! ServiceAccount the chart created, and brings the sample `MySQLCluster` (with its
//! application account's Secret) to Ready with a real MariaDB behind each member pod.

use crate::support;

use kube::{Api, CustomResourceExt, api::PostParams};
use mysql_operator::crd::{MySQLBackup, MySQLCluster};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, assert_lease_held, install_crd},
    helm::ChartRelease,
    local_members::{LocalMembers, MariaDbLauncher},
    tools::{packaging_tool, repository_root, run_tool, succeeds, transcript},
};

const CHART: &str = "charts/quorum-mysql-operator";

fn chart() -> String {
    repository_root().join(CHART).display().to_string()
}

/// `kind/name` of every object in `helm template` output (block style, fixed indentation).
fn kinds_and_names(yaml: &str) -> Vec<String> {
    yaml.split("\n---")
        .filter_map(|document| {
            let kind = document.lines().find_map(|line| line.strip_prefix("kind: "))?;
            let name = document
                .lines()
                .skip_while(|line| *line != "metadata:")
                .skip(1)
                .take_while(|line| line.starts_with(' '))
                .find_map(|line| line.strip_prefix("  name: "))?;
            Some(format!("{}/{}", kind.trim(), name.trim()))
        })
        .collect()
}

#[test]
fn helm_lint_strict_passes() {
    let (stdout, stderr) = succeeds(&packaging_tool("helm"), &["lint", "--strict", &chart()], None);
    assert!(
        stdout.contains("1 chart(s) linted, 0 chart(s) failed"),
        "helm lint:\n{stdout}{stderr}"
    );
}

#[test]
fn helm_template_renders_the_operator_its_rbac_and_no_admission_policy() {
    let helm = packaging_tool("helm");
    let chart = chart();
    let (rendered, _) = succeeds(
        &helm,
        &["template", "quorum-mysql-operator", &chart, "--namespace", "ops"],
        None,
    );
    let objects = kinds_and_names(&rendered);
    for expected in [
        "ServiceAccount/quorum-mysql-operator",
        "ClusterRole/quorum-mysql-operator",
        "ClusterRoleBinding/quorum-mysql-operator",
        "Role/quorum-mysql-operator-leader-election",
        "RoleBinding/quorum-mysql-operator-leader-election",
        "Service/quorum-mysql-operator-metrics",
        "Deployment/quorum-mysql-operator",
    ] {
        assert!(
            objects.iter().any(|object| object == expected),
            "{expected} is not rendered; rendered {objects:?}\n{rendered}"
        );
    }
    assert!(
        !objects
            .iter()
            .any(|object| object.starts_with("ServiceMonitor/") || object.starts_with("ValidatingAdmission")),
        "{objects:?}"
    );
    assert!(
        rendered.contains("image: \"ghcr.io/quorum-dev/mysql-operator:v0.1.0\""),
        "the image defaults to the tag of the appVersion:\n{rendered}"
    );
    assert!(rendered.contains("- mysqlclusters\n"), "{rendered}");
    assert!(rendered.contains("namespace: ops"), "{rendered}");
    assert!(!rendered.contains("--watch-namespaces"), "{rendered}");

    let (rendered, _) = succeeds(
        &helm,
        &[
            "template",
            "quorum-mysql-operator",
            &chart,
            "--set",
            "metrics.serviceMonitor.enabled=true,watchNamespaces={a,b}",
        ],
        None,
    );
    assert!(rendered.contains("- --watch-namespaces=a,b"), "{rendered}");
    let objects = kinds_and_names(&rendered);
    assert!(
        objects.contains(&"ServiceMonitor/quorum-mysql-operator".to_string()),
        "{rendered}"
    );
    // Watching namespaces a and b, the rules are granted there and nowhere else.
    assert!(
        !objects.iter().any(|object| object.starts_with("ClusterRole")),
        "a cluster-wide grant while watching a and b: {objects:?}"
    );
    for namespace in ["a", "b"] {
        assert!(
            rendered.contains(&format!(
                "kind: Role\nmetadata:\n  labels:\n    app.kubernetes.io/managed-by: Helm\n  name: quorum-mysql-operator\n  namespace: {namespace}\n"
            )),
            "no Role in {namespace}:\n{rendered}"
        );
    }
}

#[test]
fn the_values_schema_refuses_bad_values_naming_the_field() {
    let helm = packaging_tool("helm");
    let chart = chart();
    for (setting, field) in [
        ("replicaCount=0", "replicaCount"),
        ("logFormat=xml", "logFormat"),
        // The etcd chart's switch: this chart has no admission policy to switch on.
        ("admissionPolicy=true", "admissionPolicy"),
    ] {
        let (command, output) = run_tool(
            &helm,
            &["template", "quorum-mysql-operator", &chart, "--set", setting],
            None,
        );
        let said = transcript(&command, &output);
        assert!(
            !output.status.success()
                && said.contains("values don't meet the specifications of the schema")
                && said.contains(field),
            "--set {setting} must be refused naming {field}:\n{said}"
        );
    }
}

#[tokio::test]
async fn the_operator_runs_under_the_charts_service_account() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    // The chart's CRDs are these; installing them first keeps a stale copy from an older run
    // (which `helm install` would leave alone) out of the way.
    install_crd(&admin, &MySQLCluster::crd()).await;
    install_crd(&admin, &MySQLBackup::crd()).await;
    let namespace = TestNamespace::create(&admin, "mysql-helm").await;
    let ns = namespace.name().to_string();
    let chart = ChartRelease::install(&admin, "quorum-mysql-operator", &ns, &[]).await;
    let as_chart = chart.service_account_client(&admin).await;

    let state = std::env::temp_dir().join(format!("quorum-mysql-helm-{ns}"));
    let members = LocalMembers::start(admin.clone(), MariaDbLauncher, state.clone(), Some(ns.clone()));
    let operator = support::start_operator_with(as_chart, &ns, true);

    let cluster = support::create_sample_secret(&admin, &ns).await;
    let name = cluster.metadata.name.clone().unwrap();
    let clusters: Api<MySQLCluster> = Api::namespaced(admin.clone(), &ns);
    clusters.create(&PostParams::default(), &cluster).await.unwrap();
    let status = support::ready(&clusters, &name, cluster.spec.replicas - 1).await;
    support::application_account_connects(&ns, &cluster, &status).await;
    assert_lease_held(&admin, &ns, "quorum-mysql-operator").await;

    operator.stop().await;
    drop(members);
    chart.uninstall();
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(state);
}
