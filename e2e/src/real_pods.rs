//! The real-pod tier's shared scenario steps, the same for every engine: an operator installed by
//! its chart onto the real node in a test namespace, member pods found by their cluster's labels,
//! a database process killed inside its container, a pod deleted, a claim followed across both.
//! Each engine's `tests/real_pods.rs` adds only what is its own (clients, histories, members).

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams},
};

use crate::{
    control_plane::{TestNamespace, admin_client},
    helm::ChartRelease,
    real_node, wait,
};

/// A test namespace with one operator installed there by its chart, running on the real node.
pub struct OnRealNode {
    pub admin: Client,
    pub namespace: TestNamespace,
    pub ns: String,
    /// The release; `None` once [`Self::uninstall_operator`] removed it.
    pub chart: Option<ChartRelease>,
    chart_name: String,
}

impl OnRealNode {
    /// Creates a namespace named after `prefix` and installs `chart` there with `settings`
    /// (`--set` values), waiting until the operator's pod is Ready by its probe.
    pub async fn install(prefix: &str, chart: &str, settings: &[&str]) -> Self {
        quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
        let admin = admin_client().await;
        let namespace = TestNamespace::create(&admin, prefix).await;
        let ns = namespace.name().to_string();
        let release = ChartRelease::install_on_real_node(&admin, chart, &ns, settings).await;
        Self {
            admin,
            namespace,
            ns,
            chart: Some(release),
            chart_name: chart.to_string(),
        }
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    pub fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// The pods matching `selector`, by name.
    pub async fn pods_of(&self, selector: &str) -> Vec<Pod> {
        let mut pods = self
            .pods()
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items;
        pods.sort_by_key(|pod| pod.metadata.name.clone());
        pods
    }

    /// Waits until exactly `count` pods match `selector` and every one is Ready by its own
    /// probes, then asserts each runs on the real node with a pod-network address.
    pub async fn members_ready(&self, selector: &str, count: usize, timeout: Duration) -> Vec<Pod> {
        let pods = wait::until(
            &format!("{count} pods {selector} Ready by their probes"),
            timeout,
            || async {
                let pods = self.pods_of(selector).await;
                let ready = pods.iter().filter(|pod| real_node::pod_ready(pod)).count();
                if pods.len() == count && ready == count {
                    Ok(pods)
                } else {
                    Err(format!(
                        "{} pods, {ready} Ready: {}",
                        pods.len(),
                        describe_pods(&pods)
                    ))
                }
            },
        )
        .await;
        for pod in &pods {
            real_node::assert_on_real_node(pod);
        }
        pods
    }

    /// `helm uninstall`, then waits until the operator's pod is gone.
    pub async fn uninstall_operator(&mut self) {
        let chart = self.chart.take().expect("the chart is installed");
        chart.uninstall();
        let selector = format!("app.kubernetes.io/name={}", self.chart_name);
        let pods = self.pods();
        wait::until(
            "the operator's pod gone after helm uninstall",
            Duration::from_secs(60),
            || async {
                let left = pods
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|error| error.to_string())?
                    .items
                    .len();
                if left == 0 {
                    Ok(())
                } else {
                    Err(format!("{left} left"))
                }
            },
        )
        .await;
    }

    /// Kills `container`'s main process in pod `name` (as a crash or the OOM killer would) and
    /// waits until the kubelet restarted it in the same pod and the pod is Ready again.
    pub async fn kill_and_await_restart(&self, name: &str, container: &str, timeout: Duration) {
        let pods = self.pods();
        let pod = pods.get(name).await.unwrap();
        let restarts_before = real_node::restart_count(&pod, container);
        real_node::kill_container(&pod, container);
        wait::until(
            &format!("{name}'s {container} restarted by the kubelet and Ready again"),
            timeout,
            || async {
                let now = pods.get(name).await.map_err(|error| error.to_string())?;
                let restarts = real_node::restart_count(&now, container);
                if restarts > restarts_before && real_node::pod_ready(&now) {
                    Ok(())
                } else {
                    Err(format!(
                        "restarts {restarts}, ready {}",
                        real_node::pod_ready(&now)
                    ))
                }
            },
        )
        .await;
        assert_eq!(
            pods.get(name).await.unwrap().metadata.uid,
            pod.metadata.uid,
            "{name} was replaced, not restarted"
        );
    }

    /// Deletes pod `name` and waits until its StatefulSet made a new one that is Ready.
    pub async fn delete_and_await_recreated(&self, name: &str, timeout: Duration) {
        let pods = self.pods();
        let pod = pods.get(name).await.unwrap();
        pods.delete(name, &DeleteParams::default()).await.unwrap();
        wait::until(&format!("{name} re-created and Ready"), timeout, || async {
            let now = pods.get(name).await.map_err(|error| error.to_string())?;
            if now.metadata.uid != pod.metadata.uid && real_node::pod_ready(&now) {
                Ok(())
            } else {
                Err(describe_pods(std::slice::from_ref(&now)))
            }
        })
        .await;
    }

    /// The uid of claim `name`: a volume kept has the same one, a new volume another.
    pub async fn claim_uid(&self, name: &str) -> String {
        self.claims().get(name).await.unwrap().metadata.uid.unwrap()
    }

    /// Waits until claim `name` is gone (its volume with it).
    pub async fn claim_deleted(&self, name: &str, timeout: Duration) {
        let claims = self.claims();
        wait::until(&format!("claim {name} deleted"), timeout, || async {
            match claims.get_opt(name).await.map_err(|error| error.to_string())? {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            }
        })
        .await;
    }

    /// How often each of `reasons` was reported in the namespace's events so far (an event
    /// repeated is one object with a count or a series).
    pub async fn occurrences(&self, reasons: &[&str]) -> BTreeMap<String, i32> {
        let mut seen = BTreeMap::new();
        let events = Api::<Event>::namespaced(self.admin.clone(), &self.ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        for event in events {
            let Some(reason) = event.reason.filter(|reason| reasons.contains(&reason.as_str())) else {
                continue;
            };
            let times = event
                .series
                .and_then(|series| series.count)
                .or(event.count)
                .unwrap_or(1);
            *seen.entry(reason).or_insert(0) += times;
        }
        seen
    }

    /// Removes the release and the namespace (and with it the clusters, pods and claims).
    pub async fn remove(self) {
        if let Some(chart) = self.chart {
            chart.uninstall();
        }
        self.namespace.delete().await;
    }
}

/// Pods with their phases and container states, for a failing wait's message.
pub fn describe_pods(pods: &[Pod]) -> String {
    pods.iter()
        .map(|pod| {
            let status = pod.status.clone().unwrap_or_default();
            let containers: Vec<String> = status
                .container_statuses
                .unwrap_or_default()
                .into_iter()
                .map(|container| {
                    let state = container.state.unwrap_or_default();
                    let why = state
                        .waiting
                        .and_then(|waiting| waiting.reason)
                        .or_else(|| state.terminated.and_then(|terminated| terminated.reason))
                        .unwrap_or_else(|| if container.ready { "ready" } else { "running" }.into());
                    format!("{}={why}/{}", container.name, container.restart_count)
                })
                .collect();
            format!(
                "{} {} [{}]",
                pod.metadata.name.as_deref().unwrap_or_default(),
                status.phase.unwrap_or_default(),
                containers.join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
