//! The two etcd operators the benchmark compares, each installed as its users install it, on the
//! real node: Quorum's by its Helm chart, the peer (etcd-io/etcd-operator) by its kustomize tree
//! (`make deploy`) with its image built here from its source.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, PostParams},
};
use quorum_e2e::{
    helm::ChartRelease,
    real_node,
    tools::{kubectl_binary, pinned_version, run_tool, succeeds, transcript},
};
use serde_json::{Value, json};

/// The namespaces the API server's audit policy records (`e2e/cluster.sh`): Quorum's operator
/// and its clusters in the first, the peer's operator in the second.
pub const QUORUM_NAMESPACE: &str = "quorum-bench";
pub const PEER_NAMESPACE: &str = "etcd-operator-system";
/// The peer's clusters (it watches every namespace).
pub const PEER_CLUSTERS_NAMESPACE: &str = "quorum-bench-peer";
/// The peer's image (`e2e/images.sh import peer`).
pub const PEER_IMAGE: &str = "localhost/quorum-bench/etcd-operator:77c7f10";

/// A Quorum operator: one per engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Engine {
    Etcd,
    Mysql,
    Redis,
    Mongodb,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Etcd => "etcd",
            Engine::Mysql => "mysql",
            Engine::Redis => "redis",
            Engine::Mongodb => "mongodb",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Engine::Etcd => "EtcdCluster",
            Engine::Mysql => "MySQLCluster",
            Engine::Redis => "RedisCluster",
            Engine::Mongodb => "MongoDBReplicaSet",
        }
    }

    /// The sample's cluster (`samples/`), without its application account: three members
    /// (a primary, two replicas and three Sentinels for Redis).
    fn spec(self) -> Value {
        match self {
            Engine::Etcd => json!({
                "replicas": 3,
                "version": pinned_version("ETCD_VERSION").trim_start_matches('v'),
            }),
            Engine::Mysql => json!({
                "replicas": 3,
                "flavor": "MariaDB",
                "version": "10.11.19",
                "config": {"innodb_buffer_pool_size": "16M", "innodb_log_file_size": "8M"},
            }),
            Engine::Redis => json!({
                "mode": "Replication",
                "replicas": 2,
                "sentinel": {"replicas": 3},
                "version": "7.0.15",
                "config": {"maxmemory": "64mb", "maxmemory-policy": "allkeys-lru"},
            }),
            Engine::Mongodb => json!({"members": 3, "version": "7.0.14"}),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Contender {
    Quorum(Engine),
    /// etcd-io/etcd-operator, against Quorum's etcd operator.
    Peer,
}

/// An operator installed and running: where its process is and who it is to the API server.
pub struct Installed {
    pub contender: Contender,
    pub pod: Pod,
    pub container: &'static str,
    pub username: String,
    /// Where its clusters go.
    pub clusters_namespace: &'static str,
    chart: Option<ChartRelease>,
}

impl Contender {
    pub fn name(self) -> String {
        match self {
            Contender::Quorum(engine) => format!("quorum-{}-operator", engine.name()),
            Contender::Peer => "etcd-io/etcd-operator".into(),
        }
    }

    fn cluster_resource(self) -> ApiResource {
        let gvk = match self {
            Contender::Quorum(engine) => GroupVersionKind::gvk(
                &format!("{}.quorum.dev", engine.name()),
                "v1alpha1",
                engine.kind(),
            ),
            Contender::Peer => GroupVersionKind::gvk("operator.etcd.io", "v1alpha1", "EtcdCluster"),
        };
        ApiResource::from_gvk(&gvk)
    }

    pub fn clusters(self, admin: &Client, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(admin.clone(), namespace, &self.cluster_resource())
    }

    /// A three-member cluster on the real node, each member's data on a 1 GiB volume of the
    /// node's provisioner; for etcd, the same workload under both operators (the pinned etcd).
    pub fn cluster(self, name: &str) -> anyhow::Result<DynamicObject> {
        let spec = match self {
            Contender::Quorum(engine) => {
                let mut spec = engine.spec();
                spec["storage"] = json!({"size": "1Gi", "storageClassName": real_node::STORAGE_CLASS});
                spec["podTemplate"] = serde_json::to_value(real_node::pod_overrides())?;
                spec
            }
            Contender::Peer => json!({
                "size": 3,
                "version": pinned_version("ETCD_VERSION"),
                "storageSpec": {"storageClassName": real_node::STORAGE_CLASS, "volumeSizeRequest": "1Gi"},
                "podTemplate": {"spec": {
                    "nodeSelector": real_node::node_selector(),
                    "tolerations": real_node::tolerations(),
                }},
            }),
        };
        let mut object = DynamicObject::new(name, &self.cluster_resource());
        object.data = json!({ "spec": spec });
        Ok(object)
    }

    /// Whether the operator reports `cluster` ready: Quorum's `Ready` condition; the peer's
    /// `Available` condition with every member registered and every pod ready.
    pub fn is_ready(self, cluster: &DynamicObject) -> bool {
        let status = &cluster.data["status"];
        let condition = |type_: &str| {
            status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|condition| condition["type"] == type_ && condition["status"] == "True")
        };
        match self {
            Contender::Quorum(_) => condition("Ready"),
            Contender::Peer => {
                condition("Available") && status["readyReplicas"] == 3 && status["memberCount"] == 3
            }
        }
    }

    /// Installs the operator on the real node and waits for its pod to be ready.
    pub async fn install(self, admin: &Client) -> anyhow::Result<Installed> {
        match self {
            Contender::Quorum(engine) => {
                create_namespace(admin, QUORUM_NAMESPACE).await?;
                // No cluster-wide admission policy: tests may run beside the benchmark.
                let settings: &[&str] = match engine {
                    Engine::Etcd | Engine::Mongodb => &["admissionPolicy=false"],
                    Engine::Mysql | Engine::Redis => &[],
                };
                let chart = ChartRelease::install_on_real_node(
                    admin,
                    &format!("quorum-{}-operator", engine.name()),
                    QUORUM_NAMESPACE,
                    settings,
                )
                .await;
                let selector = format!("app.kubernetes.io/instance={}", chart.release);
                let pod = ready_pod(admin, QUORUM_NAMESPACE, &selector).await?;
                Ok(Installed {
                    contender: self,
                    pod,
                    container: "operator",
                    username: format!("system:serviceaccount:{QUORUM_NAMESPACE}:{}", chart.account),
                    clusters_namespace: QUORUM_NAMESPACE,
                    chart: Some(chart),
                })
            }
            Contender::Peer => {
                create_namespace(admin, PEER_CLUSTERS_NAMESPACE).await?;
                let manifests = peer_manifests()?;
                let kubeconfig = quorum_e2e::control_plane::kubeconfig_path().display().to_string();
                succeeds(
                    &kubectl_binary(),
                    &["--kubeconfig", &kubeconfig, "apply", "--server-side", "-f", "-"],
                    Some(manifests.as_bytes()),
                );
                let pod = ready_pod(admin, PEER_NAMESPACE, "control-plane=controller-manager").await?;
                let account = pod
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.service_account_name.clone())
                    .context("the peer's pod names no service account")?;
                Ok(Installed {
                    contender: self,
                    pod,
                    container: "manager",
                    username: format!("system:serviceaccount:{PEER_NAMESPACE}:{account}"),
                    clusters_namespace: PEER_CLUSTERS_NAMESPACE,
                    chart: None,
                })
            }
        }
    }
}

impl Installed {
    /// Removes the operator and everything the benchmark made for it: its clusters first (while
    /// their operator still runs), then the operator, then the namespaces.
    pub async fn remove(self, admin: &Client) -> anyhow::Result<()> {
        let clusters = self.contender.clusters(admin, self.clusters_namespace);
        clusters
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await
            .context("deleting the clusters")?;
        match self.chart {
            Some(chart) => chart.uninstall(),
            None => {
                let kubeconfig = quorum_e2e::control_plane::kubeconfig_path().display().to_string();
                let manifests = peer_manifests()?;
                let (command, output) = run_tool(
                    &kubectl_binary(),
                    &[
                        "--kubeconfig",
                        &kubeconfig,
                        "delete",
                        "--ignore-not-found",
                        "--wait=false",
                        "-f",
                        "-",
                    ],
                    Some(manifests.as_bytes()),
                );
                anyhow::ensure!(output.status.success(), "{}", transcript(&command, &output));
            }
        }
        delete_namespace(admin, self.clusters_namespace).await
    }
}

/// What the peer's `make deploy` applies (`kustomize build config/default`), with its image set
/// to the one built here, as `make deploy IMG=...` sets it, and its pod placed on the real node.
fn peer_manifests() -> anyhow::Result<String> {
    let config = peer_directory()?.join("config").join("default");
    let (rendered, _) = succeeds(
        &kubectl_binary(),
        &["kustomize", &config.display().to_string()],
        None,
    );
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&rendered) {
        let mut value: Value = serde::Deserialize::deserialize(document)?;
        if value["kind"] == "Deployment" {
            let pod = &mut value["spec"]["template"]["spec"];
            pod["nodeSelector"] = serde_json::to_value(real_node::node_selector())?;
            pod["tolerations"] = serde_json::to_value(real_node::tolerations())?;
            for container in pod["containers"].as_array_mut().into_iter().flatten() {
                if container["name"] == "manager" {
                    container["image"] = PEER_IMAGE.into();
                }
            }
        }
        documents.push(serde_yaml::to_string(&value)?);
    }
    if !documents.iter().any(|document| document.contains(PEER_IMAGE)) {
        bail!("the peer's kustomize tree has no Deployment with a manager container");
    }
    Ok(documents.join("---\n"))
}

/// The peer's build (`e2e/toolchain/build.sh peer`), named by `QUORUM_PEER_DIR`.
fn peer_directory() -> anyhow::Result<PathBuf> {
    let directory = std::env::var_os("QUORUM_PEER_DIR")
        .map(PathBuf::from)
        .context("QUORUM_PEER_DIR is not set: run the benchmark with `make bench`")?;
    anyhow::ensure!(
        directory.join("config").is_dir(),
        "{} holds no peer build",
        directory.display()
    );
    Ok(directory)
}

async fn ready_pod(admin: &Client, namespace: &str, selector: &str) -> anyhow::Result<Pod> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let listed = pods.list(&ListParams::default().labels(selector)).await?.items;
        if let Some(pod) = listed.iter().find(|pod| real_node::pod_ready(pod)) {
            return Ok(pod.clone());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "no ready pod {selector} in {namespace} after 180 s: {}",
                quorum_e2e::real_pods::describe_pods(&listed)
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Creates `name` afresh: a namespace left by an interrupted run is deleted first.
async fn create_namespace(admin: &Client, name: &str) -> anyhow::Result<()> {
    delete_namespace(admin, name).await?;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces.create(&PostParams::default(), &namespace).await?;
    Ok(())
}

/// Deletes `name` and waits until it is gone (its pods stopped, its volumes released).
pub async fn delete_namespace(admin: &Client, name: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let _ = namespaces.delete(name, &DeleteParams::background()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while namespaces.get_opt(name).await?.is_some() {
        if tokio::time::Instant::now() >= deadline {
            bail!("namespace {name} still there 300 s after its deletion");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_status(status: Value) -> DynamicObject {
        let mut object = DynamicObject::new("c", &Contender::Peer.cluster_resource());
        object.data = json!({ "status": status });
        object
    }

    #[test]
    fn each_contender_is_ready_by_its_own_status() {
        let available = json!([{"type": "Available", "status": "True"}]);
        let ready = json!([{"type": "Ready", "status": "True"}]);
        assert!(Contender::Peer.is_ready(&with_status(
            json!({"conditions": available, "readyReplicas": 3, "memberCount": 3})
        )));
        assert!(!Contender::Peer.is_ready(&with_status(
            json!({"conditions": available, "readyReplicas": 3, "memberCount": 2})
        )));
        assert!(!Contender::Peer.is_ready(&with_status(json!({"conditions": ready}))));
        assert!(Contender::Quorum(Engine::Etcd).is_ready(&with_status(json!({"conditions": ready}))));
        assert!(!Contender::Quorum(Engine::Etcd).is_ready(&with_status(
            json!({"conditions": [{"type": "Ready", "status": "False"}]})
        )));
        assert!(!Contender::Quorum(Engine::Etcd).is_ready(&with_status(Value::Null)));
    }
}
