//! Real OLM v0 for the tests that install operators through it, in two forms:
//! - out of cluster: OLM's CRDs on the local control plane, its `olm` and `catalog` operators as
//!   host processes (built by `e2e/toolchain/packaging.sh olm`), and a file-based catalog of
//!   inline bundles (`opm render` of bundle directories, no image) served by `opm serve` on a
//!   loopback port: no catalog pod, no bundle image, no unpack Job;
//! - in the cluster ([`Olm::in_cluster`]): OLM's own chart, its images pulled from the real
//!   node's registry, catalogs and bundles as images there, as a user's cluster runs it.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use k8s_openapi::api::{
    core::v1::Namespace,
    rbac::v1::{ClusterRole, ClusterRoleBinding},
};
use kube::{
    Api, Client,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
        PostParams,
    },
};
use serde_json::{Value, json};

use crate::{
    control_plane::{TestNamespace, kubeconfig_path},
    tools::{kubectl_binary, olm_directory, packaging_tool, repository_root, succeeds},
    wait,
};

/// OLM's global catalog namespace (the catalog operator's `--namespace`).
pub const OLM_NAMESPACE: &str = "olm";

/// The namespace OLM's chart makes for operators installed for every namespace.
const OPERATORS_NAMESPACE: &str = "operators";

/// The Deployments of OLM's chart that act: its two operators.
const OLM_DEPLOYMENTS: [&str; 2] = ["olm-operator", "catalog-operator"];

/// A host process that is killed when dropped; its output goes to a log file whose tail is
/// printed if the test is failing.
pub struct HostProcess {
    name: String,
    child: Child,
    log: PathBuf,
}

impl HostProcess {
    pub fn spawn(name: &str, mut command: Command, logs: &Path) -> Self {
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
    pub fn assert_running(&mut self) {
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
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// Runs `kubectl` against the local control plane; returns its stdout and stderr.
pub fn kubectl(args: &[&str]) -> (String, String) {
    let kubeconfig = kubeconfig_path().display().to_string();
    let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
    all.extend_from_slice(args);
    succeeds(&kubectl_binary(), &all, None)
}

/// A Kubernetes object from its JSON.
pub fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a Kubernetes object")
}

/// `status.phase` of an OLM object (InstallPlan, CSV), empty when it has none yet.
pub fn phase(object: &DynamicObject) -> String {
    object.data["status"]["phase"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The CSV's `alm-examples` entry of `kind`: what OperatorHub offers to create.
///
/// # Panics
/// When the CSV has no such example.
pub fn alm_example(csv: &DynamicObject, kind: &str) -> Value {
    let examples: Vec<Value> = serde_json::from_str(
        csv.metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get("alm-examples"))
            .expect("alm-examples"),
    )
    .expect("alm-examples is JSON");
    examples
        .into_iter()
        .find(|example| example["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in alm-examples"))
}

// ---------------------------------------------------------------------------------------------
// Catalogs of inline bundles.

/// `opm render` of a bundle directory: one inline bundle (its manifests as `olm.bundle.object`
/// properties, no image), as JSON.
///
/// # Panics
/// When opm fails or the bundle is not inline.
pub fn render_bundle(directory: &Path) -> String {
    let (rendered, _) = succeeds(
        &packaging_tool("opm"),
        &["render", &directory.display().to_string(), "-o", "json"],
        None,
    );
    let bundle: Value = serde_json::from_str(&rendered).unwrap_or_else(|error| panic!("{error}: {rendered}"));
    assert_eq!(
        bundle["image"].as_str().unwrap_or_default(),
        "",
        "the bundle must be inline (no image) so OLM needs no unpack Job:\n{rendered}"
    );
    rendered
}

/// The published `catalog/index.yaml` without its `olm.bundle` documents (which reference
/// bundle images): every package and channel, for a catalog whose bundles are inline.
pub fn published_packages_and_channels() -> String {
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
    format!("{without_bundles}\n")
}

/// Every bundle directory under `bundle/`.
pub fn published_bundles() -> Vec<PathBuf> {
    let mut bundles: Vec<PathBuf> = std::fs::read_dir(repository_root().join("bundle"))
        .expect("bundle/")
        .map(|entry| entry.expect("a bundle directory").path())
        .collect();
    bundles.sort();
    bundles
}

/// Writes a file-based catalog into `directory`: `index` (packages and channels) and each of
/// `bundles` rendered inline; `opm validate` must accept it. Returns the rendered bundles.
pub fn write_inline_catalog(directory: &Path, index: &str, bundles: &[PathBuf]) -> Vec<String> {
    std::fs::create_dir_all(directory).expect("catalog directory");
    std::fs::write(directory.join("index.yaml"), index).expect("index.yaml");
    let rendered: Vec<String> = bundles
        .iter()
        .enumerate()
        .map(|(index, bundle)| {
            let rendered = render_bundle(bundle);
            let name = bundle.file_name().expect("a name").to_string_lossy();
            std::fs::write(directory.join(format!("{index:02}-{name}.json")), &rendered)
                .expect("bundle json");
            rendered
        })
        .collect();
    succeeds(
        &packaging_tool("opm"),
        &["validate", &directory.display().to_string()],
        None,
    );
    rendered
}

/// `opm serve` of a catalog directory on a free loopback port.
pub struct CatalogServer {
    pub port: u16,
    process: HostProcess,
}

impl CatalogServer {
    /// Serves `catalog` and waits until it listens; `scratch` holds its logs and files.
    pub async fn start(catalog: &Path, scratch: &Path) -> Self {
        let port = free_port();
        let mut serve = Command::new(packaging_tool("opm"));
        serve
            .args([
                "serve",
                &catalog.display().to_string(),
                "-p",
                &port.to_string(),
                "-t",
            ])
            .arg(scratch.join("opm-termination.log"))
            // Its startup profiler would otherwise take localhost:6060.
            .arg(format!("--pprof-addr=127.0.0.1:{}", free_port()))
            .current_dir(scratch);
        let logs = scratch.join("logs");
        std::fs::create_dir_all(&logs).expect("logs directory");
        let mut process = HostProcess::spawn("opm-serve", serve, &logs);
        wait::until("opm serve to listen", Duration::from_secs(60), || {
            process.assert_running();
            async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .map(drop)
                    .map_err(|error| error.to_string())
            }
        })
        .await;
        Self { port, process }
    }

    pub fn assert_running(&mut self) {
        self.process.assert_running();
    }
}

// ---------------------------------------------------------------------------------------------
// OLM itself.

/// OLM's CRDs installed, its namespace created and its two operators running, on the host or
/// in the cluster.
pub struct Olm {
    operators: OlmOperators,
    /// Held while OLM runs (dropped after its operators stop): one OLM at a time on this
    /// machine, as its operators listen on fixed ports and act in every namespace.
    _exclusive: std::fs::File,
}

enum OlmOperators {
    /// Host processes; their bundles are inline (no unpack Job).
    Host {
        catalog_operator: HostProcess,
        olm_operator: HostProcess,
    },
    /// Deployments from OLM's own chart, on the real node; their bundles are images, unpacked
    /// by Jobs. Removed when dropped.
    InCluster,
}

impl Olm {
    /// Takes the machine's one OLM lock, then installs OLM's CRDs (server-side: the CSV CRD is
    /// too large for a client-side apply annotation).
    async fn exclusive_with_crds() -> std::fs::File {
        let exclusive = tokio::task::spawn_blocking(|| {
            let path = std::env::temp_dir().join("quorum-olm.lock");
            let file = std::fs::File::create(&path)
                .unwrap_or_else(|error| panic!("creating {}: {error}", path.display()));
            file.lock()
                .unwrap_or_else(|error| panic!("locking {}: {error}", path.display()));
            file
        })
        .await
        .expect("waiting for the OLM lock");
        let crds = olm_directory().join("crds").display().to_string();
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
        exclusive
    }

    /// Installs OLM's CRDs and namespace, and starts its operators on the host; `scratch` holds
    /// their logs.
    pub async fn start(admin: &Client, scratch: &Path) -> Self {
        let exclusive = Self::exclusive_with_crds().await;
        let olm = olm_directory();
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

        let logs = scratch.join("logs");
        std::fs::create_dir_all(&logs).expect("logs directory");
        let kubeconfig = kubeconfig_path();
        let (cert, key) = health_tls(scratch);
        // OLM evaluates a CSV again on its objects' events and on a wake-up (5 and 15 minutes by
        // default). An upgrade's new CSV whose requirements were checked before OLM saw it
        // replaces the old one waits for that wake-up (RequirementsNotMet, the CRDs and the
        // ServiceAccount "owned by another CSV"): every 30 s here, within the tests' waits.
        let wake_up = "--interval=30s";
        let mut catalog_command = Command::new(olm.join("catalog"));
        catalog_command.arg("--kubeconfig").arg(&kubeconfig).args([
            &format!("--namespace={OLM_NAMESPACE}"),
            wake_up,
            "--writeStatusName=",
            &format!("--tls-cert={cert}"),
            &format!("--tls-key={key}"),
            &format!("--client-ca={cert}"),
        ]);
        let catalog_operator = HostProcess::spawn("olm-catalog", catalog_command, &logs);
        let mut olm_command = Command::new(olm.join("olm"));
        olm_command.env("KUBECONFIG", &kubeconfig).args([
            &format!("--namespace={OLM_NAMESPACE}"),
            wake_up,
            "--writeStatusName=",
            "--writePackageServerStatusName=",
        ]);
        let olm_operator = HostProcess::spawn("olm-olm", olm_command, &logs);
        Self {
            operators: OlmOperators::Host {
                catalog_operator,
                olm_operator,
            },
            _exclusive: exclusive,
        }
    }

    /// Installs OLM as its own chart does (`helm template` of the chart in OLM's module, into
    /// namespace `olm`, operators' namespace `operators`), its operators' images `olm_image` and
    /// `opm_image` pulled as the chart says (always), and waits until both operators' pods are
    /// ready. Left out of the chart: packageserver (an aggregated API the control plane has no
    /// front proxy for, which would break discovery for everyone) and the upstream catalog
    /// (unreachable here). Every pod in `olm` and `operators` runs on the real node (the
    /// namespaces' node selector and default toleration). `scratch` keeps the rendered chart.
    pub async fn in_cluster(admin: &Client, scratch: &Path, olm_image: &str, opm_image: &str) -> Self {
        let exclusive = Self::exclusive_with_crds().await;
        for namespace in [OLM_NAMESPACE, OPERATORS_NAMESPACE] {
            crate::real_node::namespace_on_real_node(admin, namespace).await;
        }
        let values = [
            format!("namespace={OLM_NAMESPACE}"),
            format!("catalog_namespace={OLM_NAMESPACE}"),
            format!("operator_namespace={OPERATORS_NAMESPACE}"),
            format!("olm.image.ref={olm_image}"),
            format!("catalog.image.ref={olm_image}"),
            format!("package.image.ref={olm_image}"),
            format!("catalog.opmImageArgs=--opmImage={opm_image}"),
            format!("catalog.commandArgs=--configmapServerImage={opm_image}"),
        ];
        let chart = olm_directory().join("chart").display().to_string();
        let (rendered, _) = succeeds(
            &packaging_tool("helm"),
            &[
                "template",
                "olm",
                &chart,
                "--namespace",
                OLM_NAMESPACE,
                "--set",
                &values.join(","),
            ],
            None,
        );
        let kept: Vec<&str> = rendered
            .split("\n---")
            .filter(|document| {
                !document.contains("\nkind: ClusterServiceVersion")
                    && !document.contains("\nkind: CatalogSource")
            })
            .collect();
        let path = scratch.join("olm.yaml");
        std::fs::write(&path, kept.join("\n---")).expect("the rendered chart");
        kubectl(&["apply", "-f", &path.display().to_string()]);
        for deployment in OLM_DEPLOYMENTS {
            kubectl(&[
                "-n",
                OLM_NAMESPACE,
                "rollout",
                "status",
                &format!("deployment/{deployment}"),
                "--timeout=300s",
            ]);
        }
        Self {
            operators: OlmOperators::InCluster,
            _exclusive: exclusive,
        }
    }

    /// Whether the catalogs' bundles are images that OLM unpacks with a Job (in the cluster),
    /// rather than inline.
    pub fn unpacks_bundle_images(&self) -> bool {
        matches!(self.operators, OlmOperators::InCluster)
    }

    /// Panics (with its log) if either operator runs on the host and has exited. In the
    /// cluster, the kubelet restarts them, and a wait that ends without them says so.
    pub fn assert_running(&mut self) {
        if let OlmOperators::Host {
            catalog_operator,
            olm_operator,
        } = &mut self.operators
        {
            catalog_operator.assert_running();
            olm_operator.assert_running();
        }
    }
}

impl Drop for Olm {
    /// OLM in the cluster stops acting before the lock goes: its operators' Deployments are
    /// deleted with their pods (foreground: a pod still terminating would act beside the next
    /// test's OLM); the rest of the chart stays, and serves the next install.
    fn drop(&mut self) {
        if let OlmOperators::InCluster = self.operators {
            let _ = std::process::Command::new(kubectl_binary())
                .args(["--kubeconfig", &kubeconfig_path().display().to_string()])
                .args([
                    "-n",
                    OLM_NAMESPACE,
                    "delete",
                    "deployment",
                    "--cascade=foreground",
                    "--wait=true",
                ])
                .args(OLM_DEPLOYMENTS)
                .output();
        }
    }
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

/// OLM's namespaced APIs in one namespace.
#[derive(Clone)]
pub struct OlmApis {
    client: Client,
    pub namespace: String,
    pub catalog_sources: Api<DynamicObject>,
    pub operator_groups: Api<DynamicObject>,
    pub subscriptions: Api<DynamicObject>,
    pub install_plans: Api<DynamicObject>,
    pub csvs: Api<DynamicObject>,
}

impl OlmApis {
    pub fn new(client: &Client, namespace: &str) -> Self {
        let api = |version: &str, kind: &str, plural: &str| {
            let resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("operators.coreos.com", version, kind),
                plural,
            );
            Api::namespaced_with(client.clone(), namespace, &resource)
        };
        Self {
            client: client.clone(),
            namespace: namespace.to_string(),
            catalog_sources: api("v1alpha1", "CatalogSource", "catalogsources"),
            operator_groups: api("v1", "OperatorGroup", "operatorgroups"),
            subscriptions: api("v1alpha1", "Subscription", "subscriptions"),
            install_plans: api("v1alpha1", "InstallPlan", "installplans"),
            csvs: api("v1alpha1", "ClusterServiceVersion", "clusterserviceversions"),
        }
    }

    /// An OperatorGroup targeting this namespace only, and a CatalogSource `name` of the
    /// catalog served on `port`; waits until OLM has connected to it.
    pub async fn add_catalog(&self, olm: &mut Olm, name: &str, port: u16) {
        let spec = json!({
            "sourceType": "grpc",
            "address": format!("127.0.0.1:{port}"),
            "displayName": "Quorum (inline, from bundle/)",
            "publisher": "Quorum tests",
        });
        self.add_catalog_source(olm, name, spec).await;
    }

    /// An OperatorGroup targeting this namespace only, and a CatalogSource `name` of the
    /// catalog image `image`, as the README's; waits until OLM has connected to its pod.
    pub async fn add_catalog_image(&self, olm: &mut Olm, name: &str, image: &str) {
        let spec = json!({"sourceType": "grpc", "image": image, "displayName": "Quorum"});
        self.add_catalog_source(olm, name, spec).await;
    }

    async fn add_catalog_source(&self, olm: &mut Olm, name: &str, spec: Value) {
        let post = PostParams::default();
        self.catalog_sources
            .create(
                &post,
                &object(json!({
                    "apiVersion": "operators.coreos.com/v1alpha1",
                    "kind": "CatalogSource",
                    "metadata": {"name": name},
                    "spec": spec,
                })),
            )
            .await
            .unwrap();
        self.operator_groups
            .create(
                &post,
                &object(json!({
                    "apiVersion": "operators.coreos.com/v1",
                    "kind": "OperatorGroup",
                    "metadata": {"name": "quorum"},
                    "spec": {"targetNamespaces": [self.namespace]},
                })),
            )
            .await
            .unwrap();
        wait::until(
            "the CatalogSource to connect to its catalog",
            Duration::from_secs(180),
            || {
                olm.assert_running();
                let catalog_sources = self.catalog_sources.clone();
                async move {
                    let source = catalog_sources.get(name).await.map_err(|e| e.to_string())?;
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
    }

    /// Subscribes to `package` on the `stable` channel of catalog `source`; `extra` is merged
    /// into the spec (`startingCSV`, `installPlanApproval`).
    pub async fn subscribe(&self, package: &str, source: &str, extra: Value) {
        let mut spec = json!({
            "channel": "stable",
            "name": package,
            "source": source,
            "sourceNamespace": self.namespace,
            "installPlanApproval": "Automatic",
        });
        for (key, value) in extra.as_object().into_iter().flatten() {
            spec[key] = value.clone();
        }
        self.subscriptions
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "operators.coreos.com/v1alpha1",
                    "kind": "Subscription",
                    "metadata": {"name": package},
                    "spec": spec,
                })),
            )
            .await
            .unwrap();
    }

    /// Waits until the Subscription `name` refers to an InstallPlan other than `not`, and
    /// returns that plan's name.
    pub async fn next_install_plan(&self, olm: &mut Olm, name: &str, not: Option<&str>) -> String {
        wait::until(
            &format!("an InstallPlan for Subscription {name}"),
            Duration::from_secs(180),
            || {
                olm.assert_running();
                let subscriptions = self.subscriptions.clone();
                async move {
                    let subscription = subscriptions.get(name).await.map_err(|e| e.to_string())?;
                    match subscription.data["status"]["installPlanRef"]["name"].as_str() {
                        Some(plan) if Some(plan) != not => Ok(plan.to_string()),
                        _ => Err(format!("{}", subscription.data["status"])),
                    }
                }
            },
        )
        .await
    }

    /// Approves a Manual InstallPlan.
    pub async fn approve(&self, plan: &str) {
        self.install_plans
            .patch(
                plan,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"approved": true}})),
            )
            .await
            .unwrap_or_else(|error| panic!("approving InstallPlan {plan}: {error}"));
    }

    /// Waits until the InstallPlan `name` is Complete (panics when it Failed) and returns it.
    pub async fn completed_plan(&self, olm: &mut Olm, name: &str) -> DynamicObject {
        let plan = wait::until(
            &format!("InstallPlan {name} to complete"),
            Duration::from_secs(180),
            || {
                olm.assert_running();
                let install_plans = self.install_plans.clone();
                async move {
                    let plan = install_plans.get(name).await.map_err(|e| e.to_string())?;
                    match phase(&plan).as_str() {
                        "Complete" | "Failed" => Ok(plan),
                        _ => Err(format!("{}", plan.data["status"])),
                    }
                }
            },
        )
        .await;
        assert_eq!(phase(&plan), "Complete", "InstallPlan: {}", plan.data["status"]);
        if olm.unpacks_bundle_images() {
            return plan;
        }
        // Inline bundles: the plan carries the manifests itself, and no unpack Job was needed.
        assert!(
            plan.data["status"]["bundleLookups"]
                .as_array()
                .is_none_or(Vec::is_empty),
            "an inline bundle needs no bundle lookup (unpack Job): {}",
            plan.data["status"]
        );
        plan
    }

    /// Waits until the CSV `name` has succeeded and returns it.
    pub async fn succeeded_csv(&self, olm: &mut Olm, name: &str) -> DynamicObject {
        wait::until(
            &format!("CSV {name} to succeed"),
            Duration::from_secs(180),
            || {
                olm.assert_running();
                let csvs = self.csvs.clone();
                async move {
                    let csv = csvs.get(name).await.map_err(|e| e.to_string())?;
                    match phase(&csv).as_str() {
                        "Succeeded" => Ok(csv),
                        _ => Err(format!("{}", csv.data["status"])),
                    }
                }
            },
        )
        .await
    }

    /// Waits until the CSV `name` is gone (OLM has finalized it).
    pub async fn csv_gone(&self, olm: &mut Olm, name: &str) {
        wait::until(
            &format!("CSV {name} to be gone"),
            Duration::from_secs(120),
            || {
                olm.assert_running();
                let csvs = self.csvs.clone();
                async move {
                    match csvs.get_opt(name).await.map_err(|e| e.to_string())? {
                        None => Ok(()),
                        Some(csv) => Err(format!(
                            "phase {:?}, finalizers {:?}",
                            phase(&csv),
                            csv.metadata.finalizers
                        )),
                    }
                }
            },
        )
        .await;
    }

    /// Subscribes to `package` of catalog `source` starting at CSV `from` with manual
    /// approval, approves the one InstallPlan, and waits until `from` has succeeded with its
    /// permissions made. Returns the plan's name and the CSV.
    pub async fn install_at(
        &self,
        olm: &mut Olm,
        package: &str,
        source: &str,
        from: &str,
    ) -> (String, DynamicObject) {
        self.subscribe(
            package,
            source,
            json!({"startingCSV": from, "installPlanApproval": "Manual"}),
        )
        .await;
        let plan = self.next_install_plan(olm, package, None).await;
        let planned = self.install_plans.get(&plan).await.unwrap();
        assert_eq!(planned.data["spec"]["clusterServiceVersionNames"], json!([from]));
        self.approve(&plan).await;
        self.completed_plan(olm, &plan).await;
        let csv = self.succeeded_csv(olm, from).await;
        let rbac = rbac_made_for(&self.client, &self.namespace, from).await;
        assert!(
            rbac.iter().any(|name| name.starts_with("Role/"))
                && rbac.iter().any(|name| name.starts_with("ClusterRole/")),
            "OLM made {from}'s permissions: {rbac:?}"
        );
        (plan, csv)
    }

    /// After `install_at`: OLM finds `to` in the channel and plans the upgrade by itself
    /// (an InstallPlan other than `installed_by`, held for approval); once approved, `to`
    /// succeeds as `from`'s replacement, `from`'s CSV and permissions are removed, `to`'s are
    /// made, the Subscription is at `to` and the operator's Deployment is `to`'s. Returns that
    /// Deployment.
    pub async fn upgrade(
        &self,
        olm: &mut Olm,
        package: &str,
        installed_by: &str,
        from: &str,
        to: &str,
    ) -> k8s_openapi::api::apps::v1::Deployment {
        let plan = self.next_install_plan(olm, package, Some(installed_by)).await;
        let planned = self.install_plans.get(&plan).await.unwrap();
        assert_eq!(
            planned.data["spec"]["clusterServiceVersionNames"],
            json!([to]),
            "{}",
            planned.data["spec"]
        );
        assert_eq!(
            planned.data["spec"]["approved"],
            json!(false),
            "manual approval holds the upgrade"
        );
        self.approve(&plan).await;
        self.completed_plan(olm, &plan).await;
        let upgraded = self.succeeded_csv(olm, to).await;
        assert_eq!(
            upgraded.data["spec"]["replaces"],
            json!(from),
            "OLM installed {to} as {from}'s replacement"
        );
        self.csv_gone(olm, from).await;
        wait::until(
            &format!("the Subscription at {to}"),
            Duration::from_secs(120),
            || {
                olm.assert_running();
                let subscriptions = self.subscriptions.clone();
                async move {
                    let status =
                        subscriptions.get(package).await.map_err(|e| e.to_string())?.data["status"].clone();
                    if status["installedCSV"] == json!(to)
                        && status["currentCSV"] == json!(to)
                        && status["state"] == "AtLatestKnown"
                    {
                        Ok(())
                    } else {
                        Err(status.to_string())
                    }
                }
            },
        )
        .await;
        wait::until(
            &format!("{from}'s permissions removed"),
            Duration::from_secs(120),
            || {
                olm.assert_running();
                async move {
                    let left = rbac_made_for(&self.client, &self.namespace, from).await;
                    if left.is_empty() {
                        Ok(())
                    } else {
                        Err(format!("{left:?}"))
                    }
                }
            },
        )
        .await;
        let rbac = rbac_made_for(&self.client, &self.namespace, to).await;
        assert!(
            rbac.iter().any(|name| name.starts_with("Role/"))
                && rbac.iter().any(|name| name.starts_with("ClusterRole/")),
            "OLM made {to}'s permissions: {rbac:?}"
        );
        let deployment =
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(self.client.clone(), &self.namespace)
                .get(package)
                .await
                .expect("the operator's Deployment");
        assert_eq!(
            deployment
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get("olm.owner"))
                .map(String::as_str),
            Some(to),
            "the Deployment is {to}'s"
        );
        deployment
    }

    /// Uninstalls through OLM while it runs: the CSV carries OLM's `csv-cleanup` finalizer,
    /// which only the olm operator removes (a namespace holding it would never finish
    /// deleting). The Subscription and its InstallPlans go first, then the CSV. The catalog
    /// operator can still be working through a queued sync of a plan from its cache, where the
    /// plan is not yet complete; it then runs the plan's steps again and creates the deleted CSV
    /// anew (seen right after an upgrade). So the CSV is deleted again whenever it reappears,
    /// until it has stayed gone for a few seconds.
    pub async fn uninstall(&self, olm: &mut Olm, subscription: &str, csv: &str) {
        self.subscriptions
            .delete(subscription, &DeleteParams::default())
            .await
            .unwrap();
        self.install_plans
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap();
        let settled = Duration::from_secs(5);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        let mut gone_since: Option<tokio::time::Instant> = None;
        loop {
            olm.assert_running();
            let now = tokio::time::Instant::now();
            match self.csvs.get_opt(csv).await.unwrap() {
                None => {
                    let since = *gone_since.get_or_insert(now);
                    if now - since >= settled {
                        return;
                    }
                }
                Some(found) => {
                    gone_since = None;
                    assert!(
                        now < deadline,
                        "CSV {csv} still there after 180 s: phase {:?}, finalizers {:?}",
                        phase(&found),
                        found.metadata.finalizers
                    );
                    if found.metadata.deletion_timestamp.is_none() {
                        self.csvs.delete(csv, &DeleteParams::default()).await.unwrap();
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Deletes OLM's cluster-scoped objects for this namespace (the CSV's and the
    /// OperatorGroup's RBAC), which nothing else deletes; call once OLM has stopped.
    pub async fn remove_cluster_rbac(&self, admin: &Client) {
        let for_namespace = ListParams::default().labels(&format!("olm.owner.namespace={}", self.namespace));
        let _ = Api::<ClusterRoleBinding>::all(admin.clone())
            .delete_collection(&DeleteParams::default(), &for_namespace)
            .await;
        let _ = Api::<ClusterRole>::all(admin.clone())
            .delete_collection(&DeleteParams::default(), &for_namespace)
            .await;
    }
}

// ---------------------------------------------------------------------------------------------
// One package installed the way a user does it.

/// A package installed through a Subscription in a namespace of its own: OLM running, an
/// inline catalog of every published bundle served, the InstallPlan complete and the CSV
/// `Succeeded`, and what OLM made from the CSV (ServiceAccount, RBAC, Deployment with its pod
/// Running on KWOK) checked.
pub struct SubscribedOperator {
    pub olm: Olm,
    pub catalog: CatalogServer,
    pub apis: OlmApis,
    pub csv: DynamicObject,
    /// Holds the catalog, the logs and whatever else the test keeps on disk.
    pub scratch: PathBuf,
    namespace: TestNamespace,
    package: String,
}

impl SubscribedOperator {
    /// Creates a namespace `<prefix>-<random>`, subscribes it to `package` on the `stable`
    /// channel and waits for `csv`.
    pub async fn install(admin: &Client, prefix: &str, package: &str, csv: &str) -> Self {
        let namespace = TestNamespace::create(admin, prefix).await;
        let ns = namespace.name().to_string();
        let scratch = std::env::temp_dir().join(format!("quorum-olm-{ns}"));
        std::fs::create_dir_all(&scratch).expect("scratch directory");
        let catalog_dir = scratch.join("catalog");
        let bundles = published_bundles();
        assert!(
            bundles.contains(&repository_root().join("bundle").join(package)),
            "bundle/{package} is published: {bundles:?}"
        );
        write_inline_catalog(&catalog_dir, &published_packages_and_channels(), &bundles);
        let catalog = CatalogServer::start(&catalog_dir, &scratch).await;
        let mut olm = Olm::start(admin, &scratch).await;

        let apis = OlmApis::new(admin, &ns);
        apis.add_catalog(&mut olm, "quorum-inline", catalog.port).await;
        apis.subscribe(package, "quorum-inline", json!({})).await;
        let plan_name = apis.next_install_plan(&mut olm, package, None).await;
        let plan = apis.completed_plan(&mut olm, &plan_name).await;
        assert_eq!(
            plan.data["spec"]["clusterServiceVersionNames"],
            json!([csv]),
            "{}",
            plan.data["spec"]
        );
        let csv = apis.succeeded_csv(&mut olm, csv).await;
        let installed = Self {
            olm,
            catalog,
            apis,
            csv,
            scratch,
            namespace,
            package: package.to_string(),
        };
        installed.assert_made_from_the_csv(admin).await;
        installed
    }

    /// The namespace the package is installed in (and watches).
    pub fn ns(&self) -> &str {
        self.namespace.name()
    }

    fn csv_name(&self) -> String {
        self.csv.metadata.name.clone().expect("a CSV name")
    }

    /// The ServiceAccount the CSV's Deployment runs as.
    pub fn service_account(&self) -> String {
        self.csv.data["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]
            ["serviceAccountName"]
            .as_str()
            .expect("the CSV's Deployment names its ServiceAccount")
            .to_string()
    }

    /// A client holding a token of the ServiceAccount OLM created: only the CSV's
    /// `permissions` and `clusterPermissions` are behind it.
    pub async fn service_account_client(&self, admin: &Client) -> Client {
        crate::control_plane::service_account_client(admin, &self.apis.namespace, &self.service_account())
            .await
    }

    /// The CSV's `alm-examples` entry of `kind`.
    pub fn example(&self, kind: &str) -> Value {
        alm_example(&self.csv, kind)
    }

    /// Panics (with its log) if OLM or the catalog server has exited.
    pub fn assert_running(&mut self) {
        self.olm.assert_running();
        self.catalog.assert_running();
    }

    async fn assert_made_from_the_csv(&self, admin: &Client) {
        use k8s_openapi::api::{
            apps::v1::Deployment,
            core::v1::{Pod, ServiceAccount},
            rbac::v1::{Role, RoleBinding},
        };
        let ns = self.apis.namespace.as_str();
        let csv = self.csv_name();
        Api::<ServiceAccount>::namespaced(admin.clone(), ns)
            .get(&self.service_account())
            .await
            .expect("OLM created the ServiceAccount");
        let deployment = Api::<Deployment>::namespaced(admin.clone(), ns)
            .get(&self.package)
            .await
            .expect("OLM created the Deployment");
        assert_eq!(
            deployment
                .metadata
                .labels
                .unwrap_or_default()
                .get("olm.owner")
                .map(String::as_str),
            Some(csv.as_str())
        );
        let pods = Api::<Pod>::namespaced(admin.clone(), ns)
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={}", self.package)))
            .await
            .unwrap();
        assert!(
            pods.items
                .iter()
                .any(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")),
            "the operator's pod is Running (KWOK): {:?}",
            pods.items.iter().map(|pod| &pod.status).collect::<Vec<_>>()
        );
        let owned_by_csv = ListParams::default().labels(&format!("olm.owner={csv},olm.owner.namespace={ns}"));
        let roles = Api::<Role>::namespaced(admin.clone(), ns)
            .list(&owned_by_csv)
            .await
            .unwrap();
        let role_bindings = Api::<RoleBinding>::namespaced(admin.clone(), ns)
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
    }

    /// Uninstalls through OLM (Subscription and CSV), stops OLM and the catalog server,
    /// removes the cluster-scoped RBAC OLM made for the namespace, and deletes the namespace
    /// and the scratch directory.
    pub async fn uninstall(mut self, admin: &Client) {
        let csv = self.csv_name();
        self.apis.uninstall(&mut self.olm, &self.package, &csv).await;
        let Self {
            olm,
            catalog,
            apis,
            scratch,
            namespace,
            ..
        } = self;
        drop(olm);
        drop(catalog);
        apis.remove_cluster_rbac(admin).await;
        namespace.delete().await;
        let _ = std::fs::remove_dir_all(scratch);
    }
}

/// `Role/<name>` and `ClusterRole/<name>` of what OLM made for `csv` in `namespace`.
pub async fn rbac_made_for(client: &Client, namespace: &str, csv: &str) -> Vec<String> {
    use k8s_openapi::api::rbac::v1::Role;
    let owned = ListParams::default().labels(&format!("olm.owner={csv},olm.owner.namespace={namespace}"));
    let roles = Api::<Role>::namespaced(client.clone(), namespace)
        .list(&owned)
        .await
        .expect("listing Roles");
    let cluster_roles = Api::<ClusterRole>::all(client.clone())
        .list(&owned)
        .await
        .expect("listing ClusterRoles");
    roles
        .items
        .iter()
        .filter_map(|role| role.metadata.name.as_ref().map(|name| format!("Role/{name}")))
        .chain(cluster_roles.items.iter().filter_map(|role| {
            role.metadata
                .name
                .as_ref()
                .map(|name| format!("ClusterRole/{name}"))
        }))
        .collect()
}
