//! The packaging (Helm chart, OLM bundle, file-based catalog) checked by the real tools, built
//! from their Go modules by `e2e/toolchain/packaging.sh`: `operator-sdk bundle validate`, `opm
//! validate` and `opm render`, `helm lint`, `helm template` and `helm install` against the local
//! control plane. A missing tool fails the test; nothing is skipped.

use std::{path::Path, time::Duration};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, ServiceAccount},
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
};
use kube::{Api, api::ListParams};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, kubeconfig_path},
    olm::{published_bundles, published_packages_and_channels, write_inline_catalog},
    tools::{kubectl_binary, packaging_tool, repository_root, run_tool, succeeds, transcript},
    wait,
};
use serde_json::Value;

const CHART: &str = "charts/quorum-etcd-operator";
const BUNDLE: &str = "bundle/quorum-etcd-operator";
/// Every operator's bundle (`bundle/<package>`), each validated on its own.
const BUNDLES: [&str; 4] = [
    BUNDLE,
    "bundle/quorum-mysql-operator",
    "bundle/quorum-redis-operator",
    "bundle/quorum-mongodb-operator",
];
const MONGODB_CHART: &str = "charts/quorum-mongodb-operator";
/// Every operator's chart (`charts/<package>`), each linted on its own.
const CHARTS: [&str; 4] = [
    CHART,
    "charts/quorum-mysql-operator",
    "charts/quorum-redis-operator",
    MONGODB_CHART,
];
const CATALOG: &str = "catalog";

/// Runs a tool that must fail; returns everything it said.
fn fails(program: &Path, args: &[&str]) -> String {
    let (command, output) = run_tool(program, args, None);
    let said = transcript(&command, &output);
    assert!(!output.status.success(), "expected a failure, got {said}");
    said
}

/// Decodes standard base64 (what `opm render` puts in `olm.bundle.object` properties).
fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bytes = Vec::with_capacity(text.len() * 3 / 4);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for character in text.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let value = ALPHABET
            .iter()
            .position(|a| *a == character)
            .unwrap_or_else(|| panic!("{:?} is not base64", character as char));
        buffer = (buffer << 6) | u32::try_from(value).expect("< 64");
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push(u8::try_from((buffer >> bits) & 0xff).expect("a byte"));
        }
    }
    bytes
}

/// The `kind/name` of every object in a rendered multi-document YAML stream. Helm's output is
/// block-style with `kind:` and `metadata.name` at fixed indentation, which is all this reads
/// (the e2e crate has no YAML parser; the cluster tests hand the YAML to the API server).
fn kinds_and_names(yaml: &str) -> Vec<String> {
    yaml.split("\n---")
        .filter_map(|document| {
            let kind = document.lines().find_map(|line| line.strip_prefix("kind: "))?;
            let mut in_metadata = false;
            let name = document.lines().find_map(|line| {
                if line == "metadata:" {
                    in_metadata = true;
                } else if in_metadata && !line.starts_with(' ') {
                    in_metadata = false;
                }
                if in_metadata {
                    line.strip_prefix("  name: ")
                } else {
                    None
                }
            })?;
            Some(format!("{}/{}", kind.trim(), name.trim()))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// OLM: operator-sdk and opm on the bundle directory and the catalog.

/// `opm render` of a bundle directory, as JSON (stdout, stderr).
fn opm_render_bundle(bundle: &str) -> (String, String) {
    succeeds(
        &packaging_tool("opm"),
        &["render", &format!("./{bundle}"), "-o", "json"],
        None,
    )
}

/// The manifests of a bundle as `opm render` reads them (decoded `olm.bundle.object`s).
fn bundle_manifests(bundle: &str) -> Vec<Value> {
    let (stdout, _) = opm_render_bundle(bundle);
    let bundle: Value = serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("{error}: {stdout}"));
    bundle["properties"]
        .as_array()
        .expect("properties")
        .iter()
        .filter(|property| property["type"] == "olm.bundle.object")
        .map(|property| {
            let data = property["value"]["data"]
                .as_str()
                .expect("olm.bundle.object data");
            serde_json::from_slice(&base64_decode(data)).expect("olm.bundle.object data is JSON")
        })
        .collect()
}

#[test]
fn operator_sdk_validates_every_bundle_with_the_operatorframework_suite() {
    let sdk = packaging_tool("operator-sdk");
    for bundle in BUNDLES {
        validate_bundle(&sdk, bundle);
    }
}

fn validate_bundle(sdk: &Path, bundle: &str) {
    let (stdout, stderr) = succeeds(
        sdk,
        &[
            "bundle",
            "validate",
            &format!("./{bundle}"),
            "--select-optional",
            "suite=operatorframework",
            "--optional-values=k8s-version=1.34",
            "-b",
            "none",
        ],
        None,
    );
    let said = format!("{stdout}{stderr}");
    assert!(
        said.contains("All validation tests have completed successfully"),
        "operator-sdk did not report success:\n{said}"
    );
    let errors: Vec<&str> = said.lines().filter(|line| line.contains("level=error")).collect();
    assert!(errors.is_empty(), "operator-sdk reported errors:\n{said}");
    // Warnings do not fail `bundle validate`, but a new one fails this test: the only one
    // accepted is a false positive. The removed-APIs check (operator-framework/api) matches RBAC
    // rules by group and resource only, so a rule for `events.k8s.io` `events` (GA as v1 since
    // 1.19; only v1beta1 went in 1.25) is reported as using an API removed in 1.25.
    let unexpected: Vec<&str> = said
        .lines()
        .filter(|line| line.contains("level=warning"))
        .filter(|line| {
            !(line.contains("removed in v1.25") && line.contains("Migrate the API(s) for events:"))
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "new operator-sdk warnings: {unexpected:#?}\n{said}"
    );
}

#[test]
fn opm_validates_the_published_catalog() {
    let opm = packaging_tool("opm");
    succeeds(&opm, &["validate", CATALOG], None);
}

/// `opm render` of a bundle directory: JSON objects, one per line or pretty-printed; the
/// bundle must be inline (no image, its manifests as `olm.bundle.object` properties), which is
/// what lets OLM install it without a registry or an unpack Job.
#[test]
fn opm_renders_the_bundle_directory_as_an_inline_bundle_that_validates() {
    let (stdout, _) = opm_render_bundle(BUNDLE);
    let rendered: Vec<Value> = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|error| panic!("opm render printed something that is not JSON: {error}\n{stdout}"));
    assert_eq!(rendered.len(), 1, "one bundle expected:\n{stdout}");
    let bundle = &rendered[0];
    assert_eq!(bundle["schema"], "olm.bundle", "{stdout}");
    assert_eq!(bundle["name"], "quorum-etcd-operator.v0.1.0", "{stdout}");
    assert_eq!(bundle["package"], "quorum-etcd-operator", "{stdout}");
    assert_eq!(
        bundle["image"].as_str().unwrap_or_default(),
        "",
        "an inline bundle has no image:\n{stdout}"
    );
    let properties = bundle["properties"].as_array().expect("properties");
    let of_type = |kind: &str| -> Vec<&Value> {
        properties
            .iter()
            .filter(|property| property["type"] == kind)
            .map(|property| &property["value"])
            .collect()
    };
    let objects = of_type("olm.bundle.object");
    assert_eq!(
        objects.len(),
        3,
        "the CSV and both CRDs as olm.bundle.object properties:\n{stdout}"
    );
    let mut kinds: Vec<String> = objects
        .iter()
        .map(|object| {
            let data = object["data"].as_str().expect("olm.bundle.object data");
            let decoded = base64_decode(data);
            let manifest: Value = serde_json::from_slice(&decoded).expect("olm.bundle.object data is JSON");
            manifest["kind"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "ClusterServiceVersion",
            "CustomResourceDefinition",
            "CustomResourceDefinition"
        ]
    );
    let package = of_type("olm.package");
    assert_eq!(package.len(), 1, "{stdout}");
    assert_eq!(package[0]["packageName"], "quorum-etcd-operator");
    assert_eq!(package[0]["version"], "0.1.0");
    assert_eq!(
        of_type("olm.gvk").len(),
        2,
        "both owned kinds are provided:\n{stdout}"
    );

    // The inline catalog the OLM tests serve: the published packages and channels, with the
    // rendered bundles in place of the image references. `opm validate` accepts it.
    let directory = std::env::temp_dir().join(format!("quorum-inline-catalog-{}", std::process::id()));
    write_inline_catalog(
        &directory,
        &published_packages_and_channels(),
        &published_bundles(),
    );
    let _ = std::fs::remove_dir_all(&directory);
}

// ---------------------------------------------------------------------------------------------
// Helm: lint, render, the values schema, and the chart against the real API server.

#[test]
fn helm_lint_strict_passes_for_every_chart() {
    let helm = packaging_tool("helm");
    for chart in CHARTS {
        let (stdout, stderr) = succeeds(&helm, &["lint", "--strict", chart], None);
        assert!(
            stdout.contains("1 chart(s) linted, 0 chart(s) failed"),
            "helm lint {chart}:\n{stdout}{stderr}"
        );
    }
}

#[test]
fn the_mongodb_chart_renders_its_admission_policy_unless_switched_off() {
    let helm = packaging_tool("helm");
    let policy = [
        "ValidatingAdmissionPolicy/quorum-mongodb-even-voting-members",
        "ValidatingAdmissionPolicyBinding/quorum-mongodb-even-voting-members",
    ];
    let (rendered, _) = succeeds(
        &helm,
        &[
            "template",
            "quorum-mongodb-operator",
            MONGODB_CHART,
            "--namespace",
            "ops",
        ],
        None,
    );
    let objects = kinds_and_names(&rendered);
    for expected in policy.iter().copied().chain([
        "Deployment/quorum-mongodb-operator",
        "ClusterRole/quorum-mongodb-operator",
    ]) {
        assert!(
            objects.iter().any(|object| object == expected),
            "{expected} is not rendered; rendered {objects:?}\n{rendered}"
        );
    }
    assert!(rendered.contains("validationActions:\n  - Warn"), "{rendered}");
    let (rendered, _) = succeeds(
        &helm,
        &[
            "template",
            "quorum-mongodb-operator",
            MONGODB_CHART,
            "--set",
            "admissionPolicy=false",
        ],
        None,
    );
    let objects = kinds_and_names(&rendered);
    assert!(
        !policy
            .iter()
            .any(|expected| objects.iter().any(|object| object == expected)),
        "{rendered}"
    );
}

#[test]
fn helm_template_renders_the_defaults() {
    let helm = packaging_tool("helm");
    let (rendered, _) = succeeds(
        &helm,
        &["template", "quorum-etcd-operator", CHART, "--namespace", "ops"],
        None,
    );
    let objects = kinds_and_names(&rendered);
    for expected in [
        "ServiceAccount/quorum-etcd-operator",
        "ClusterRole/quorum-etcd-operator",
        "ClusterRoleBinding/quorum-etcd-operator",
        "Role/quorum-etcd-operator-leader-election",
        "RoleBinding/quorum-etcd-operator-leader-election",
        "Service/quorum-etcd-operator-metrics",
        "Deployment/quorum-etcd-operator",
        "ValidatingAdmissionPolicy/quorum-etcd-odd-members",
        "ValidatingAdmissionPolicyBinding/quorum-etcd-odd-members",
    ] {
        assert!(
            objects.iter().any(|object| object == expected),
            "{expected} is not rendered; rendered {objects:?}\n{rendered}"
        );
    }
    assert!(
        !objects.iter().any(|object| object.starts_with("ServiceMonitor/")),
        "no ServiceMonitor by default:\n{rendered}"
    );
    assert!(
        rendered.contains("image: \"ghcr.io/quorum-dev/etcd-operator:v0.1.0\""),
        "the image defaults to the tag of the appVersion:\n{rendered}"
    );
    assert!(!rendered.contains("--watch-namespaces"), "{rendered}");
    assert!(rendered.contains("namespace: ops"), "{rendered}");
}

#[test]
fn helm_template_renders_with_watched_namespaces_and_without_a_service_monitor() {
    let helm = packaging_tool("helm");
    let (rendered, _) = succeeds(
        &helm,
        &[
            "template",
            "quorum-etcd-operator",
            CHART,
            "--set",
            "metrics.serviceMonitor.enabled=false,watchNamespaces={a,b}",
        ],
        None,
    );
    assert!(rendered.contains("- --watch-namespaces=a,b"), "{rendered}");
    assert!(
        !kinds_and_names(&rendered)
            .iter()
            .any(|object| object.starts_with("ServiceMonitor/")),
        "{rendered}"
    );

    let (rendered, _) = succeeds(
        &helm,
        &[
            "template",
            "quorum-etcd-operator",
            CHART,
            "--set",
            "metrics.serviceMonitor.enabled=true",
        ],
        None,
    );
    assert!(
        kinds_and_names(&rendered).contains(&"ServiceMonitor/quorum-etcd-operator".to_string()),
        "{rendered}"
    );
}

#[test]
fn the_values_schema_refuses_bad_values_naming_the_field() {
    let helm = packaging_tool("helm");
    for (setting, field) in [
        ("replicaCount=0", "replicaCount"),
        ("logFormat=xml", "logFormat"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("metrics.port=70000", "port"),
        ("replicas=3", "replicas"),
    ] {
        let said = fails(
            &helm,
            &["template", "quorum-etcd-operator", CHART, "--set", setting],
        );
        assert!(
            said.contains("values don't meet the specifications of the schema") && said.contains(field),
            "--set {setting} must be refused naming {field}:\n{said}"
        );
    }
}

/// Runs `kubectl` against the local control plane.
fn kubectl(args: &[&str], stdin: Option<&[u8]>) -> (String, String) {
    let kubeconfig = kubeconfig_path().display().to_string();
    let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
    all.extend_from_slice(args);
    succeeds(&kubectl_binary(), &all, stdin)
}

/// A release name no other test uses: its cluster-scoped objects (ClusterRole, binding) are
/// named after it.
fn release_name(prefix: &str) -> String {
    format!("{prefix}-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

#[tokio::test]
async fn every_rendered_chart_passes_server_side_dry_run() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "helm-dry-run").await;
    let helm = packaging_tool("helm");
    let release = release_name("dry");
    for chart in CHARTS {
        let package = chart.trim_start_matches("charts/");
        let crds: Vec<String> = std::fs::read_dir(repository_root().join(chart).join("crds"))
            .expect("the chart's crds/")
            .map(|entry| {
                let file = entry.expect("a CRD file").path();
                let name = file.file_stem().expect("a name").to_string_lossy().to_string();
                format!("customresourcedefinition.apiextensions.k8s.io/{name}")
            })
            .collect();
        assert_eq!(crds.len(), 2, "{chart}: a cluster kind and a backup kind");
        // Watching all namespaces, the rules are a ClusterRole; watching the test's namespace,
        // a Role there.
        let watching = format!(
            "watchNamespaces={{{}}},replicaCount=2,logFormat=text",
            namespace.name()
        );
        for (extra, grant) in [
            (
                &[][..],
                format!("clusterrole.rbac.authorization.k8s.io/{release}-{package}"),
            ),
            (
                &["--set", watching.as_str()][..],
                format!("role.rbac.authorization.k8s.io/{release}-{package}"),
            ),
        ] {
            let mut args = vec![
                "template",
                release.as_str(),
                chart,
                "--include-crds",
                "--namespace",
                namespace.name(),
            ];
            args.extend_from_slice(extra);
            let (rendered, _) = succeeds(&helm, &args, None);
            let (applied, _) = kubectl(
                &[
                    // Server-side: the CRDs may be created meanwhile by another test (the
                    // alm-examples one installs them), which a client-side apply that read them
                    // as absent then fails on as AlreadyExists.
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "--dry-run=server",
                    "--namespace",
                    namespace.name(),
                    "-f",
                    "-",
                ],
                Some(rendered.as_bytes()),
            );
            for expected in [
                format!("deployment.apps/{release}-{package} serverside-applied (server dry run)"),
                format!("{grant} serverside-applied (server dry run)"),
                format!(
                    "rolebinding.rbac.authorization.k8s.io/{release}-{package}-leader-election serverside-applied (server dry run)"
                ),
            ]
            .iter()
            .chain(&crds)
            {
                assert!(
                    applied.contains(expected.as_str()),
                    "{chart}: {expected} missing from kubectl's report:\n{applied}"
                );
            }
        }
    }
    namespace.delete().await;
}

#[tokio::test]
async fn every_bundles_alm_examples_are_accepted_by_its_crds() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "alm-examples").await;
    for bundle in BUNDLES {
        let manifests = bundle_manifests(bundle);
        // The bundle's own CRDs, installed for real: the examples are checked against them.
        let crds: Vec<&Value> = manifests
            .iter()
            .filter(|manifest| manifest["kind"] == "CustomResourceDefinition")
            .collect();
        let crd_list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": crds}).to_string();
        kubectl(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=quorum-packaging-test",
                "-f",
                "-",
            ],
            Some(crd_list.as_bytes()),
        );
        kubectl(
            &["wait", "--for=condition=Established", "--timeout=60s", "-f", "-"],
            Some(crd_list.as_bytes()),
        );

        // What OperatorHub offers to create: an example of every owned kind, each accepted.
        let csv = manifests
            .iter()
            .find(|manifest| manifest["kind"] == "ClusterServiceVersion")
            .expect("a CSV in the bundle");
        let examples = csv["metadata"]["annotations"]["alm-examples"]
            .as_str()
            .expect("alm-examples");
        let examples: Vec<Value> = serde_json::from_str(examples).expect("alm-examples is a JSON array");
        let mut example_kinds: Vec<&str> = examples
            .iter()
            .filter_map(|example| example["kind"].as_str())
            .collect();
        example_kinds.dedup();
        let mut owned_kinds: Vec<&str> = csv["spec"]["customresourcedefinitions"]["owned"]
            .as_array()
            .expect("owned CRDs")
            .iter()
            .filter_map(|owned| owned["kind"].as_str())
            .collect();
        owned_kinds.sort_unstable();
        example_kinds.sort_unstable();
        assert_eq!(example_kinds, owned_kinds, "{bundle}: an example per owned kind");
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": examples}).to_string();
        let (created, _) = kubectl(
            &[
                "create",
                "--dry-run=server",
                "--namespace",
                namespace.name(),
                "-f",
                "-",
            ],
            Some(list.as_bytes()),
        );
        assert_eq!(
            created.matches("created (server dry run)").count(),
            examples.len(),
            "{bundle}: {created}"
        );
    }
    namespace.delete().await;
}

#[tokio::test]
async fn helm_install_creates_the_operator_and_its_rbac_and_uninstall_removes_them() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "helm-install").await;
    let helm = packaging_tool("helm");
    let kubeconfig = kubeconfig_path().display().to_string();
    let release = release_name("quorum");
    let fullname = format!("{release}-quorum-etcd-operator");
    let (stdout, _) = succeeds(
        &helm,
        &[
            "install",
            &release,
            CHART,
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            namespace.name(),
            // The policy is cluster-scoped with a fixed name: one release per cluster owns it.
            "--set",
            "admissionPolicy=false",
            "--wait",
            "--timeout",
            "2m",
        ],
        None,
    );
    assert!(stdout.contains("STATUS: deployed"), "{stdout}");
    assert!(
        stdout.contains(&format!("running as {fullname} in {}", namespace.name())),
        "NOTES:\n{stdout}"
    );

    let ns = namespace.name();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment = deployments.get(&fullname).await.expect("the operator Deployment");
    assert_eq!(deployment.spec.as_ref().and_then(|s| s.replicas), Some(1));
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("app.kubernetes.io/instance={release}");
    let pod = wait::until(
        "the operator pod Running (KWOK)",
        Duration::from_secs(60),
        || async {
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|error| error.to_string())?;
            list.items
                .into_iter()
                .find(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .ok_or_else(|| "no Running pod yet".to_string())
        },
    )
    .await;
    let spec = pod.spec.expect("a pod spec");
    assert_eq!(spec.service_account_name.as_deref(), Some(fullname.as_str()));
    assert_eq!(
        spec.containers[0].image.as_deref(),
        Some("ghcr.io/quorum-dev/etcd-operator:v0.1.0")
    );

    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let roles: Api<Role> = Api::namespaced(client.clone(), ns);
    let role_bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let cluster_role_bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    accounts.get(&fullname).await.expect("the ServiceAccount");
    let leader_election = format!("{fullname}-leader-election");
    roles
        .get(&leader_election)
        .await
        .expect("the leader-election Role");
    let binding = role_bindings
        .get(&leader_election)
        .await
        .expect("the leader-election RoleBinding");
    assert_eq!(binding.subjects.expect("subjects")[0].name, fullname);
    let cluster_role = cluster_roles.get(&fullname).await.expect("the ClusterRole");
    assert!(
        cluster_role.rules.unwrap_or_default().iter().any(|rule| rule
            .resources
            .as_deref()
            .unwrap_or_default()
            .contains(&"etcdclusters".to_string())),
        "the ClusterRole grants access to EtcdClusters"
    );
    let cluster_binding = cluster_role_bindings
        .get(&fullname)
        .await
        .expect("the ClusterRoleBinding");
    let subject = &cluster_binding.subjects.expect("subjects")[0];
    assert_eq!(
        (subject.name.as_str(), subject.namespace.as_deref()),
        (fullname.as_str(), Some(ns))
    );

    let (stdout, _) = succeeds(
        &helm,
        &[
            "uninstall",
            &release,
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            ns,
            "--wait",
        ],
        None,
    );
    assert!(stdout.contains("uninstalled"), "{stdout}");
    wait::until("the release's objects gone", Duration::from_secs(60), || async {
        let left = [
            deployments.get_opt(&fullname).await.map(|o| o.is_some()),
            accounts.get_opt(&fullname).await.map(|o| o.is_some()),
            cluster_roles.get_opt(&fullname).await.map(|o| o.is_some()),
            cluster_role_bindings
                .get_opt(&fullname)
                .await
                .map(|o| o.is_some()),
        ];
        if left.iter().all(|exists| matches!(exists, Ok(false))) {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    namespace.delete().await;
}
