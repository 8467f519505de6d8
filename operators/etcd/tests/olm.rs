//! A Subscription install with real OLM v0, out of cluster: OLM's CRDs on the local control
//! plane, its `olm` and `catalog` operators as host processes (built by
//! `e2e/toolchain/packaging.sh olm`), and an inline catalog rendered from
//! `bundle/quorum-etcd-operator` by `opm render` and served by `opm serve` (no catalog pod, no
//! bundle image, no unpack Job). A CatalogSource, an OperatorGroup and a Subscription make OLM
//! resolve the package, run the InstallPlan (CRDs, ServiceAccount, RBAC, Deployment) and bring
//! the CSV to `Succeeded`; KWOK runs the Deployment's pod. The operator then runs in-process
//! under a token of the ServiceAccount OLM created, so only the CSV's permissions are behind it,
//! and reconciles the CSV's `alm-examples` EtcdCluster to Ready with real etcd members.

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use std::{
    collections::BTreeMap,
    fs::File,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use etcd_operator::{
    crd::{EtcdBackup, EtcdCluster},
    reconcile::MemberAddresses,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Pod, ServiceAccount},
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
};
use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams},
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, kubeconfig_path, service_account_client},
    local_members::{EtcdLauncher, LocalMembers},
    tools::{
        etcd_binary, kubectl_binary, olm_directory, packaging_tool, pinned_version, repository_root, succeeds,
    },
    wait,
};
use serde_json::{Value, json};

const BUNDLE: &str = "bundle/quorum-etcd-operator";
const PACKAGE: &str = "quorum-etcd-operator";
const CSV: &str = "quorum-etcd-operator.v0.1.0";
/// OLM's global catalog namespace (the catalog operator's `--namespace`).
const OLM_NAMESPACE: &str = "olm";

/// A host process that is killed when dropped; its output goes to a log file whose tail is
/// printed if the test is failing.
struct HostProcess {
    name: String,
    child: Child,
    log: PathBuf,
}

impl HostProcess {
    fn spawn(name: &str, mut command: Command, logs: &Path) -> Self {
        let log = logs.join(format!("{name}.log"));
        let out = File::create(&log).expect("log file");
        command
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out);
        let child = command
            .spawn()
            .unwrap_or_else(|error| panic!("starting {name}: {error}"));
        Self {
            name: name.to_string(),
            child,
            log,
        }
    }

    /// Panics (with its log) if the process has exited.
    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited with {status}:\n{}",
                self.name,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(60)..].join("\n");
            eprintln!(
                "--- last lines of {} ({}) ---\n{tail}",
                self.name,
                self.log.display()
            );
        }
    }
}

/// A free TCP port on the loopback address (there is a small window before it is used).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

fn kubectl(args: &[&str]) -> (String, String) {
    let kubeconfig = kubeconfig_path().display().to_string();
    let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
    all.extend_from_slice(args);
    succeeds(&kubectl_binary(), &all, None)
}

fn dynamic_api(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    ns: &str,
) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), ns, &resource)
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a Kubernetes object")
}

/// Renders the bundle directory inline (`opm render`, no image) into `directory` with the
/// published package and channels from `catalog/index.yaml`, so `opm serve` can serve it.
fn render_inline_catalog(directory: &Path) {
    let opm = packaging_tool("opm");
    let (bundle, _) = succeeds(&opm, &["render", &format!("./{BUNDLE}"), "-o", "json"], None);
    let rendered: Value = serde_json::from_str(&bundle).unwrap_or_else(|error| panic!("{error}: {bundle}"));
    assert_eq!(rendered["name"], CSV, "{bundle}");
    assert_eq!(
        rendered["image"].as_str().unwrap_or_default(),
        "",
        "the bundle must be inline (no image) so OLM needs no unpack Job:\n{bundle}"
    );
    let published =
        std::fs::read_to_string(repository_root().join("catalog/index.yaml")).expect("catalog/index.yaml");
    let without_bundles: String = published
        .split("\n---\n")
        .filter(|document| {
            !document.contains("schema: olm.bundle\n") && !document.ends_with("schema: olm.bundle")
        })
        .collect::<Vec<_>>()
        .join("\n---\n");
    assert!(
        without_bundles.contains("schema: olm.channel") && without_bundles.contains("name: stable"),
        "catalog/index.yaml has no stable channel:\n{published}"
    );
    std::fs::create_dir_all(directory).expect("catalog directory");
    std::fs::write(directory.join("index.yaml"), format!("{without_bundles}\n")).expect("index.yaml");
    std::fs::write(directory.join("bundle.json"), &bundle).expect("bundle.json");
    // The catalog lists every package: the other bundles go in inline too, or their channels
    // would name bundles the catalog lacks.
    for other in std::fs::read_dir(repository_root().join("bundle")).expect("bundle/") {
        let other = other.expect("a bundle directory").path();
        if other.ends_with(BUNDLE) {
            continue;
        }
        let (rendered, _) = succeeds(
            &opm,
            &["render", &other.display().to_string(), "-o", "json"],
            None,
        );
        let name = other.file_name().expect("a name").to_string_lossy().to_string();
        std::fs::write(directory.join(format!("{name}.json")), rendered).expect("bundle json");
    }
    succeeds(&opm, &["validate", &directory.display().to_string()], None);
}

/// A self-signed certificate and key for the catalog operator's health server: with TLS it
/// listens on :8443, leaving :8080 to the olm operator.
fn health_tls(directory: &Path) -> (String, String) {
    let cert = directory.join("health.crt").display().to_string();
    let key = directory.join("health.key").display().to_string();
    let output = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
            &key,
            "-out",
            &cert,
        ])
        .output()
        .expect("openssl");
    assert!(output.status.success(), "openssl: {output:?}");
    (cert, key)
}

fn phase(object: &DynamicObject) -> String {
    object.data["status"]["phase"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_subscription_installs_the_operator_through_olm_and_it_reconciles_the_example() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    let olm = olm_directory();

    // OLM's CRDs, server-side (the CSV CRD is too large for a client-side apply annotation).
    let crds = olm.join("crds").display().to_string();
    kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=quorum-olm-test",
        "-f",
        &crds,
    ]);
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "-f",
        &crds,
    ]);

    // OLM's global catalog namespace.
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    if namespaces.get_opt(OLM_NAMESPACE).await.unwrap().is_none() {
        let created = namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": OLM_NAMESPACE}})).unwrap(),
            )
            .await;
        if let Err(kube::Error::Api(response)) = &created {
            assert_eq!(
                response.code, 409,
                "creating namespace {OLM_NAMESPACE}: {created:?}"
            );
        }
    }

    let namespace = TestNamespace::create(&admin, "etcd-olm").await;
    let ns = namespace.name().to_string();
    let scratch = std::env::temp_dir().join(format!("quorum-olm-{ns}"));
    let logs = scratch.join("logs");
    std::fs::create_dir_all(&logs).expect("scratch directory");

    // The catalog, served by opm on a local port.
    let catalog_dir = scratch.join("catalog");
    render_inline_catalog(&catalog_dir);
    let port = free_port();
    let mut serve = Command::new(packaging_tool("opm"));
    serve
        .args([
            "serve",
            &catalog_dir.display().to_string(),
            "-p",
            &port.to_string(),
            "-t",
        ])
        .arg(scratch.join("opm-termination.log"))
        // Its startup profiler would otherwise take localhost:6060.
        .arg(format!("--pprof-addr=127.0.0.1:{}", free_port()))
        .current_dir(&scratch);
    let mut opm_serve = HostProcess::spawn("opm-serve", serve, &logs);
    wait::until("opm serve to listen", Duration::from_secs(60), || {
        opm_serve.assert_running();
        async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .map(drop)
                .map_err(|error| error.to_string())
        }
    })
    .await;

    // OLM's operators, against the local control plane.
    let kubeconfig = kubeconfig_path();
    let (cert, key) = health_tls(&scratch);
    let mut catalog_command = Command::new(olm.join("catalog"));
    catalog_command.arg("--kubeconfig").arg(&kubeconfig).args([
        &format!("--namespace={OLM_NAMESPACE}"),
        "--writeStatusName=",
        &format!("--tls-cert={cert}"),
        &format!("--tls-key={key}"),
        &format!("--client-ca={cert}"),
    ]);
    let mut catalog_operator = HostProcess::spawn("olm-catalog", catalog_command, &logs);
    let mut olm_command = Command::new(olm.join("olm"));
    olm_command.env("KUBECONFIG", &kubeconfig).args([
        &format!("--namespace={OLM_NAMESPACE}"),
        "--writeStatusName=",
        "--writePackageServerStatusName=",
    ]);
    let mut olm_operator = HostProcess::spawn("olm-olm", olm_command, &logs);

    // CatalogSource -> OperatorGroup -> Subscription.
    let catalog_sources = dynamic_api(
        &admin,
        "operators.coreos.com",
        "v1alpha1",
        "CatalogSource",
        "catalogsources",
        &ns,
    );
    let operator_groups = dynamic_api(
        &admin,
        "operators.coreos.com",
        "v1",
        "OperatorGroup",
        "operatorgroups",
        &ns,
    );
    let subscriptions = dynamic_api(
        &admin,
        "operators.coreos.com",
        "v1alpha1",
        "Subscription",
        "subscriptions",
        &ns,
    );
    let install_plans = dynamic_api(
        &admin,
        "operators.coreos.com",
        "v1alpha1",
        "InstallPlan",
        "installplans",
        &ns,
    );
    let csvs = dynamic_api(
        &admin,
        "operators.coreos.com",
        "v1alpha1",
        "ClusterServiceVersion",
        "clusterserviceversions",
        &ns,
    );
    let post = PostParams::default();
    catalog_sources
        .create(
            &post,
            &object(json!({
                "apiVersion": "operators.coreos.com/v1alpha1",
                "kind": "CatalogSource",
                "metadata": {"name": "quorum-inline"},
                "spec": {
                    "sourceType": "grpc",
                    "address": format!("127.0.0.1:{port}"),
                    "displayName": "Quorum (inline, from bundle/)",
                    "publisher": "Quorum tests",
                },
            })),
        )
        .await
        .unwrap();
    operator_groups
        .create(
            &post,
            &object(json!({
                "apiVersion": "operators.coreos.com/v1",
                "kind": "OperatorGroup",
                "metadata": {"name": "quorum"},
                "spec": {"targetNamespaces": [ns]},
            })),
        )
        .await
        .unwrap();

    wait::until(
        "the CatalogSource to connect to opm serve",
        Duration::from_secs(120),
        || {
            catalog_operator.assert_running();
            olm_operator.assert_running();
            let catalog_sources = catalog_sources.clone();
            async move {
                let source = catalog_sources
                    .get("quorum-inline")
                    .await
                    .map_err(|e| e.to_string())?;
                let state = &source.data["status"]["connectionState"]["lastObservedState"];
                if state == "READY" {
                    Ok(())
                } else {
                    Err(format!("{}", source.data["status"]))
                }
            }
        },
    )
    .await;

    subscriptions
        .create(
            &post,
            &object(json!({
                "apiVersion": "operators.coreos.com/v1alpha1",
                "kind": "Subscription",
                "metadata": {"name": PACKAGE},
                "spec": {
                    "channel": "stable",
                    "name": PACKAGE,
                    "source": "quorum-inline",
                    "sourceNamespace": ns,
                    "installPlanApproval": "Automatic",
                },
            })),
        )
        .await
        .unwrap();

    let plan_name = wait::until("the Subscription's InstallPlan", Duration::from_secs(180), || {
        catalog_operator.assert_running();
        olm_operator.assert_running();
        let subscriptions = subscriptions.clone();
        async move {
            let subscription = subscriptions.get(PACKAGE).await.map_err(|e| e.to_string())?;
            subscription.data["status"]["installPlanRef"]["name"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{}", subscription.data["status"]))
        }
    })
    .await;
    let plan = wait::until("the InstallPlan to complete", Duration::from_secs(180), || {
        catalog_operator.assert_running();
        let install_plans = install_plans.clone();
        let plan_name = plan_name.clone();
        async move {
            let plan = install_plans.get(&plan_name).await.map_err(|e| e.to_string())?;
            match phase(&plan).as_str() {
                "Complete" => Ok(plan),
                "Failed" => Ok(plan),
                _ => Err(format!("{}", plan.data["status"])),
            }
        }
    })
    .await;
    assert_eq!(phase(&plan), "Complete", "InstallPlan: {}", plan.data["status"]);
    assert_eq!(
        plan.data["spec"]["clusterServiceVersionNames"],
        json!([CSV]),
        "{}",
        plan.data["spec"]
    );
    // Inline bundle: the plan carries the manifests itself, and no unpack Job was needed.
    assert!(
        plan.data["status"]["bundleLookups"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "an inline bundle needs no bundle lookup (unpack Job): {}",
        plan.data["status"]
    );

    let csv = wait::until("the CSV to succeed", Duration::from_secs(180), || {
        catalog_operator.assert_running();
        olm_operator.assert_running();
        let csvs = csvs.clone();
        async move {
            let csv = csvs.get(CSV).await.map_err(|e| e.to_string())?;
            match phase(&csv).as_str() {
                "Succeeded" => Ok(csv),
                _ => Err(format!("{}", csv.data["status"])),
            }
        }
    })
    .await;

    // What OLM created from the CSV: the ServiceAccount, the RBAC, the Deployment and its pod.
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .get(PACKAGE)
        .await
        .expect("OLM created the ServiceAccount");
    let deployment = Api::<Deployment>::namespaced(admin.clone(), &ns)
        .get(PACKAGE)
        .await
        .expect("OLM created the Deployment");
    assert_eq!(
        deployment
            .metadata
            .labels
            .unwrap_or_default()
            .get("olm.owner")
            .map(String::as_str),
        Some(CSV)
    );
    let pods = Api::<Pod>::namespaced(admin.clone(), &ns)
        .list(&ListParams::default().labels("app.kubernetes.io/name=quorum-etcd-operator"))
        .await
        .unwrap();
    assert!(
        pods.items
            .iter()
            .any(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")),
        "the operator's pod is Running (KWOK): {:?}",
        pods.items.iter().map(|pod| &pod.status).collect::<Vec<_>>()
    );
    let owned_by_csv = ListParams::default().labels(&format!("olm.owner={CSV},olm.owner.namespace={ns}"));
    let roles = Api::<Role>::namespaced(admin.clone(), &ns)
        .list(&owned_by_csv)
        .await
        .unwrap();
    let role_bindings = Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .list(&owned_by_csv)
        .await
        .unwrap();
    let cluster_roles = Api::<ClusterRole>::all(admin.clone())
        .list(&owned_by_csv)
        .await
        .unwrap();
    let cluster_role_bindings = Api::<ClusterRoleBinding>::all(admin.clone())
        .list(&owned_by_csv)
        .await
        .unwrap();
    assert!(
        !roles.items.is_empty() && !role_bindings.items.is_empty(),
        "OLM created the Role and RoleBinding for `permissions`"
    );
    assert!(
        !cluster_roles.items.is_empty() && !cluster_role_bindings.items.is_empty(),
        "OLM created the ClusterRole and ClusterRoleBinding for `clusterPermissions`"
    );

    // The operator, in-process, with the ServiceAccount OLM created and nothing else.
    let examples: Vec<Value> = serde_json::from_str(
        csv.metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get("alm-examples"))
            .expect("alm-examples"),
    )
    .expect("alm-examples is JSON");
    let example = examples
        .iter()
        .find(|example| example["kind"] == "EtcdCluster")
        .expect("an EtcdCluster example")
        .clone();
    let cluster_name = example["metadata"]["name"].as_str().expect("a name").to_string();
    let version = example["spec"]["version"]
        .as_str()
        .expect("a version")
        .to_string();
    assert_eq!(
        version,
        pinned_version("ETCD_VERSION").trim_start_matches('v'),
        "the example's etcd version is the pinned one (the local members run that binary)"
    );
    let as_operator = service_account_client(&admin, &ns, PACKAGE).await;
    let _members = LocalMembers::start(
        admin.clone(),
        EtcdLauncher::new(BTreeMap::from([(version.clone(), etcd_binary())])),
        scratch.join("members"),
        Some(ns.clone()),
    );
    let operator = support::operator::start_with(as_operator, &ns, MemberAddresses::Loopback, true);

    let example_cluster: EtcdCluster =
        serde_json::from_value(example).expect("the example is an EtcdCluster");
    let clusters: Api<EtcdCluster> = Api::namespaced(admin.clone(), &ns);
    clusters.create(&post, &example_cluster).await.unwrap();
    let replicas = usize::try_from(example_cluster.spec.replicas).expect("positive replicas");
    support::ready_with(&clusters, &cluster_name, replicas, Duration::from_secs(180)).await;
    // The operator held its Lease under OLM's Role.
    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(admin.clone(), &ns)
        .get("quorum-etcd-operator-leader")
        .await
        .expect("the operator holds its Lease");
    assert!(lease.spec.unwrap().holder_identity.is_some());
    catalog_operator.assert_running();
    olm_operator.assert_running();

    operator.stop().await;
    let _ = Api::<EtcdCluster>::namespaced(admin.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let _ = Api::<EtcdBackup>::namespaced(admin.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    // Uninstall through OLM while it runs: the CSV carries OLM's `csv-cleanup` finalizer, which
    // only the olm operator removes (a namespace holding it would never finish deleting).
    subscriptions
        .delete(PACKAGE, &DeleteParams::default())
        .await
        .unwrap();
    csvs.delete(CSV, &DeleteParams::default()).await.unwrap();
    wait::until(
        "OLM to finalize the deleted CSV",
        Duration::from_secs(120),
        || {
            olm_operator.assert_running();
            let csvs = csvs.clone();
            async move {
                match csvs.get_opt(CSV).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(csv) => Err(format!("finalizers {:?}", csv.metadata.finalizers)),
                }
            }
        },
    )
    .await;
    drop(olm_operator);
    drop(catalog_operator);
    drop(opm_serve);
    // OLM's cluster-scoped objects for this namespace (the CSV's and the OperatorGroup's RBAC).
    let for_namespace = ListParams::default().labels(&format!("olm.owner.namespace={ns}"));
    let _ = Api::<ClusterRoleBinding>::all(admin.clone())
        .delete_collection(&DeleteParams::default(), &for_namespace)
        .await;
    let _ = Api::<ClusterRole>::all(admin.clone())
        .delete_collection(&DeleteParams::default(), &for_namespace)
        .await;
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}
