//! Operators installed from their Helm chart (`charts/<package>`) by the real `helm`, built
//! from its Go module by `e2e/toolchain/packaging.sh`.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, ServiceAccount},
    rbac::v1::{ClusterRole, Role},
};
use kube::{Api, Client, api::ListParams};

use crate::{
    control_plane::{kubeconfig_path, service_account_client},
    real_node,
    tools::{packaging_tool, repository_root, succeeds},
    wait,
};

/// Where the chart's operator pod runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A KWOK node: the pod is Running with no process behind it (the operator runs in the
    /// test process under the chart's ServiceAccount).
    Kwok,
    /// The real node: the operator runs as a container of its image, and its pod is Ready only
    /// once its own readiness probe passes.
    RealNode,
}

/// A release of `charts/<package>` installed into one namespace, watching only that namespace.
pub struct ChartRelease {
    pub release: String,
    pub namespace: String,
    /// The chart's ServiceAccount (also the Deployment's, the Roles' and the bindings' name).
    pub account: String,
    /// What `helm install` printed, NOTES included.
    pub installed: String,
}

impl ChartRelease {
    /// `helm install` of `charts/<package>` into `namespace` with `settings` (`--set` values)
    /// added, watching `namespace` only; checks the release deployed, its Deployment,
    /// ServiceAccount and a Role in `namespace` exist (and no ClusterRole), and the Deployment's
    /// pod runs (on KWOK) as that ServiceAccount.
    pub async fn install(admin: &Client, package: &str, namespace: &str, settings: &[&str]) -> Self {
        let chart = chart_directory(package);
        Self::install_placed(admin, &chart, package, namespace, settings, Placement::Kwok).await
    }

    /// `helm install` as [`Self::install`], with the operator's pod placed on the real node from
    /// the locally imported image (`e2e/images.sh import operators`); waits until its pod is
    /// Ready by its own `/readyz` probe.
    pub async fn install_on_real_node(
        admin: &Client,
        package: &str,
        namespace: &str,
        settings: &[&str],
    ) -> Self {
        Self::install_on_real_node_from(admin, &chart_directory(package), package, namespace, settings).await
    }

    /// [`Self::install_on_real_node`] from the chart of `package` in `chart`, a directory
    /// outside this checkout (an earlier release's chart, say).
    pub async fn install_on_real_node_from(
        admin: &Client,
        chart: &Path,
        package: &str,
        namespace: &str,
        settings: &[&str],
    ) -> Self {
        real_node::require(admin).await;
        let placement = real_node::chart_settings();
        let mut all: Vec<&str> = placement.iter().map(String::as_str).collect();
        all.extend_from_slice(settings);
        Self::install_placed(admin, chart, package, namespace, &all, Placement::RealNode).await
    }

    /// `helm upgrade` of this release to the chart in `chart` with the placement on the real
    /// node and `settings`, everything else back to the new chart's defaults (its image among
    /// them), as a user upgrading to a new release does; checks the release deployed.
    pub fn upgrade_on_real_node(&self, chart: &Path, settings: &[&str]) -> String {
        let placement = real_node::chart_settings();
        let mut all: Vec<&str> = placement.iter().map(String::as_str).collect();
        all.extend_from_slice(settings);
        let upgraded = deploy("upgrade", &self.release, chart, &self.namespace, &all);
        assert!(
            upgraded.contains("has been upgraded") && upgraded.contains("STATUS: deployed"),
            "{upgraded}"
        );
        upgraded
    }

    async fn install_placed(
        admin: &Client,
        chart: &Path,
        package: &str,
        namespace: &str,
        settings: &[&str],
        placement: Placement,
    ) -> Self {
        let release = format!("rbac-{}", &namespace[namespace.len().saturating_sub(6)..]);
        let installed = deploy("install", &release, chart, namespace, settings);
        let account = format!("{release}-{package}");
        assert!(
            installed.contains("STATUS: deployed")
                && installed.contains(&format!("running as {account} in {namespace}")),
            "{installed}"
        );
        Api::<Deployment>::namespaced(admin.clone(), namespace)
            .get(&account)
            .await
            .expect("the chart's Deployment");
        Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
            .get(&account)
            .await
            .expect("the chart's ServiceAccount");
        // Watching one namespace, the chart grants its rules there and nothing cluster-wide.
        Api::<Role>::namespaced(admin.clone(), namespace)
            .get(&account)
            .await
            .expect("the chart's Role in the watched namespace");
        assert!(
            Api::<ClusterRole>::all(admin.clone())
                .get_opt(&account)
                .await
                .expect("read ClusterRoles")
                .is_none(),
            "the chart grants a ClusterRole while watching only {namespace}"
        );
        let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
        let selector = format!("app.kubernetes.io/instance={release}");
        let (what, timeout) = match placement {
            Placement::Kwok => ("the operator's pod Running (KWOK)", Duration::from_secs(60)),
            Placement::RealNode => (
                "the operator's pod Ready on the real node",
                Duration::from_secs(120),
            ),
        };
        let pod = wait::until(what, timeout, || async {
            let pods = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|error| error.to_string())?
                .items;
            pods.iter()
                .find(|pod| match placement {
                    Placement::Kwok => {
                        pod.status.as_ref().and_then(|status| status.phase.as_deref()) == Some("Running")
                    }
                    Placement::RealNode => real_node::pod_ready(pod),
                })
                .cloned()
                .ok_or_else(|| {
                    format!(
                        "not yet: {:?}",
                        pods.iter()
                            .map(|pod| pod.status.as_ref().map(|status| &status.container_statuses))
                            .collect::<Vec<_>>()
                    )
                })
        })
        .await;
        if placement == Placement::RealNode {
            real_node::assert_on_real_node(&pod);
            real_node::ProcessConfinement::of(&pod, "operator").assert_restricted("the operator's container");
        }
        assert_eq!(
            pod.spec.and_then(|spec| spec.service_account_name).as_deref(),
            Some(account.as_str())
        );
        Self {
            release,
            namespace: namespace.to_string(),
            account,
            installed,
        }
    }

    /// A client holding a token of the chart's ServiceAccount: only the chart's RBAC is behind
    /// it.
    pub async fn service_account_client(&self, admin: &Client) -> Client {
        service_account_client(admin, &self.namespace, &self.account).await
    }

    /// `helm uninstall`.
    pub fn uninstall(self) {
        let kubeconfig = kubeconfig_path().display().to_string();
        succeeds(
            &packaging_tool("helm"),
            &[
                "uninstall",
                &self.release,
                "--kubeconfig",
                &kubeconfig,
                "--namespace",
                &self.namespace,
            ],
            None,
        );
    }
}

/// `helm install` or `helm upgrade` (`verb`) of `release` from the chart in `chart` into
/// `namespace`, watching `namespace` only, with `settings` (`--set` values); what helm printed.
fn deploy(verb: &str, release: &str, chart: &Path, namespace: &str, settings: &[&str]) -> String {
    let chart = chart.display().to_string();
    let kubeconfig = kubeconfig_path().display().to_string();
    let watch = format!("watchNamespaces={{{namespace}}}");
    let mut args = vec![
        verb,
        release,
        chart.as_str(),
        "--kubeconfig",
        kubeconfig.as_str(),
        "--namespace",
        namespace,
        "--set",
        watch.as_str(),
    ];
    for setting in settings {
        args.extend(["--set", setting]);
    }
    succeeds(&packaging_tool("helm"), &args, None).0
}

/// `charts/<package>` of this checkout.
pub fn chart_directory(package: &str) -> PathBuf {
    repository_root().join("charts").join(package)
}

/// The image a chart in `chart` runs by default: `image.repository:image.tag` of its generated
/// `values.yaml` (two-space indentation, one line each).
pub fn default_image(chart: &Path) -> String {
    let values = std::fs::read_to_string(chart.join("values.yaml"))
        .unwrap_or_else(|error| panic!("reading {}/values.yaml: {error}", chart.display()));
    let field = |name: &str| {
        values
            .lines()
            .skip_while(|line| *line != "image:")
            .take_while(|line| *line == "image:" || line.starts_with("  "))
            .find_map(|line| line.strip_prefix(&format!("  {name}: ")))
            .unwrap_or_else(|| panic!("no image.{name} in {}/values.yaml", chart.display()))
            .trim()
            .to_string()
    };
    format!("{}:{}", field("repository"), field("tag"))
}
