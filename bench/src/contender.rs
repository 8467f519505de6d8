//! The two etcd operators the benchmark compares, each installed as its users install it, on the
//! real node: Quorum's by its Helm chart, the peer (etcd-io/etcd-operator) by its kustomize tree
//! (`make deploy`) with its image built here from its source.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, Pod};
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

/// The namespaces the API server's audit policy records (`e2e/cluster.sh`): each Quorum
/// operator and its clusters in one of its own ([`Engine::namespace`], so that runs of
/// different engines can share the node), the peer's operator in the last.
pub const PEER_NAMESPACE: &str = "etcd-operator-system";
/// The peer's clusters (it watches every namespace).
pub const PEER_CLUSTERS_NAMESPACE: &str = "quorum-bench-peer";
/// The peer's image (`e2e/images.sh import peer`), tagged with its commit.
pub fn peer_image() -> String {
    format!(
        "localhost/quorum-bench/etcd-operator:{}",
        pinned_version("PEER_ETCD_OPERATOR_COMMIT")
    )
}

/// A Quorum operator: one per engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
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

    /// Where the engine's operator and its clusters go.
    pub fn namespace(self) -> &'static str {
        match self {
            Engine::Etcd => "quorum-bench-etcd",
            Engine::Mysql => "quorum-bench-mysql",
            Engine::Redis => "quorum-bench-redis",
            Engine::Mongodb => "quorum-bench-mongodb",
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

    pub fn cluster_resource(self) -> ApiResource {
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
    /// `Available` condition with three ready pods and three healthy voting members. (Every
    /// member pod's own readiness is checked apart, the same for both.)
    pub fn is_ready(self, cluster: &DynamicObject) -> bool {
        let status = &cluster.data["status"];
        match self {
            Contender::Quorum(_) => condition_holds(status, "Ready"),
            Contender::Peer => peer_available_at(status, 3),
        }
    }

    /// Whether the operator reports the etcd `cluster` at `size` members, each a healthy voter,
    /// with nothing left to do: Quorum's settled with `size` members in status; the peer's
    /// available at `size` and not `Progressing`.
    pub fn settled_at(self, cluster: &DynamicObject, size: usize) -> bool {
        let status = &cluster.data["status"];
        match self {
            Contender::Quorum(_) => {
                let members = members(status);
                self.is_settled(cluster)
                    && members.len() == size
                    && members
                        .iter()
                        .all(|member| member["health"] == "Healthy" && member["learner"] != true)
            }
            Contender::Peer => peer_available_at(status, size) && !condition_holds(status, "Progressing"),
        }
    }

    /// The spec fields that size an etcd cluster at `size` members.
    pub fn size_spec(self, size: usize) -> Value {
        match self {
            Contender::Quorum(_) => json!({ "replicas": size }),
            Contender::Peer => json!({ "size": size }),
        }
    }

    /// The label selector of `cluster`'s member pods.
    pub fn member_selector(self, cluster: &str) -> String {
        match self {
            Contender::Quorum(engine) => quorum_core::naming::label_selector(
                &quorum_core::naming::selector_labels(engine.name(), cluster, "member"),
            ),
            Contender::Peer => format!("app={cluster}"),
        }
    }

    /// Whether `cluster` is ready and its operator has nothing left to do for it: Quorum's say so
    /// with `Progressing` false (`Settled`); the peer has no such condition, and ready is all
    /// it tells.
    pub fn is_settled(self, cluster: &DynamicObject) -> bool {
        let progressing = cluster.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|condition| condition["type"] == "Progressing")
            .map(|condition| condition["status"].clone());
        match self {
            Contender::Quorum(_) => {
                self.is_ready(cluster) && progressing.as_ref().is_some_and(|status| status == "False")
            }
            Contender::Peer => self.is_ready(cluster),
        }
    }

    /// Installs the operator on the real node and waits for its pod to be ready. What an
    /// interrupted run left is removed first; what a failed install left is removed after.
    pub async fn install(self, admin: &Client) -> anyhow::Result<Installed> {
        // Test support asserts (it panics) on what it installs: a panic is this install failing.
        let installed = std::panic::AssertUnwindSafe(self.install_once(admin))
            .catch_unwind()
            .await;
        let installed = match installed {
            Ok(result) => result,
            Err(panic) => Err(anyhow::anyhow!(
                "installing {} failed: {}",
                self.name(),
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
                    .unwrap_or_default()
            )),
        };
        if installed.is_err() {
            let _ = self.remove_everything(admin, None).await;
        }
        installed
    }

    async fn install_once(self, admin: &Client) -> anyhow::Result<Installed> {
        self.remove_everything(admin, None).await?;
        match self {
            Contender::Quorum(engine) => {
                let namespace = engine.namespace();
                create_namespace(admin, namespace).await?;
                // No cluster-wide admission policy: tests may run beside the benchmark. The
                // chart's own requests and limits, which the peer is given too.
                // Backups go to a store in the cluster over plain HTTP.
                let settings: &[&str] = match engine {
                    Engine::Etcd | Engine::Mongodb => &["admissionPolicy=false", "backups.allowHttp=true"],
                    Engine::Mysql | Engine::Redis => &["backups.allowHttp=true"],
                };
                let chart = ChartRelease::install_on_real_node(
                    admin,
                    &format!("quorum-{}-operator", engine.name()),
                    namespace,
                    settings,
                )
                .await;
                let selector = format!("app.kubernetes.io/instance={}", chart.release);
                let pod = ready_pod(admin, namespace, &selector).await?;
                Ok(Installed {
                    contender: self,
                    pod,
                    container: "operator",
                    username: format!("system:serviceaccount:{namespace}:{}", chart.account),
                    clusters_namespace: namespace,
                    chart: Some(chart),
                })
            }
            Contender::Peer => {
                create_namespace(admin, PEER_CLUSTERS_NAMESPACE).await?;
                let manifests = peer_manifests()?;
                let kubeconfig = quorum_e2e::control_plane::kubeconfig_path().display().to_string();
                let (command, output) = run_tool(
                    &kubectl_binary(),
                    &["--kubeconfig", &kubeconfig, "apply", "--server-side", "-f", "-"],
                    Some(manifests.as_bytes()),
                );
                anyhow::ensure!(output.status.success(), "{}", transcript(&command, &output));
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

    fn clusters_namespace(self) -> &'static str {
        match self {
            Contender::Quorum(engine) => engine.namespace(),
            Contender::Peer => PEER_CLUSTERS_NAMESPACE,
        }
    }

    /// Removes every trace of this contender, each step tried whatever the others did: its
    /// clusters (while their operator still runs, waiting until they are gone), the operator
    /// (`chart`, or the peer's manifests), then the namespaces and their volumes.
    async fn remove_everything(self, admin: &Client, chart: Option<ChartRelease>) -> anyhow::Result<()> {
        let mut failures = Vec::new();
        let clusters = self.clusters(admin, self.clusters_namespace());
        let deleted = async {
            match clusters
                .delete_collection(&DeleteParams::background(), &ListParams::default())
                .await
            {
                // No such namespace or resource yet: nothing to delete.
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
                other => other.map(|_| ())?,
            }
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            while !clusters.list(&ListParams::default()).await?.items.is_empty() {
                anyhow::ensure!(
                    tokio::time::Instant::now() < deadline,
                    "clusters still there 120 s after their deletion"
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            anyhow::Ok(())
        };
        if let Err(error) = deleted.await {
            failures.push(format!("deleting the clusters: {error:#}"));
        }
        match (self, chart) {
            (_, Some(chart)) => {
                if let Err(panic) =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| chart.uninstall()))
                {
                    failures.push(format!("helm uninstall: {panic:?}"));
                }
            }
            (Contender::Peer, None) => {
                let removed = peer_manifests().and_then(|manifests| {
                    let kubeconfig = quorum_e2e::control_plane::kubeconfig_path().display().to_string();
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
                    Ok(())
                });
                if let Err(error) = removed {
                    failures.push(format!("deleting the peer: {error:#}"));
                }
            }
            // A chart release whose handle was lost goes with its namespace.
            (Contender::Quorum(_), None) => {}
        }
        let namespaces = match self {
            Contender::Quorum(engine) => vec![engine.namespace()],
            Contender::Peer => vec![PEER_CLUSTERS_NAMESPACE, PEER_NAMESPACE],
        };
        for namespace in namespaces {
            if let Err(error) = delete_namespace(admin, namespace).await {
                failures.push(format!("{error:#}"));
            }
        }
        anyhow::ensure!(
            failures.is_empty(),
            "removing {}: {}",
            self.name(),
            failures.join("; ")
        );
        Ok(())
    }
}

impl Installed {
    /// Removes the operator and everything the benchmark made for it.
    pub async fn remove(self, admin: &Client) -> anyhow::Result<()> {
        self.contender.remove_everything(admin, self.chart).await
    }
}

/// The operator's requests and limits, the same for both contenders: the Quorum chart's
/// defaults (`resources` in its values.yaml).
fn chart_resources() -> anyhow::Result<Value> {
    let values = quorum_e2e::tools::repository_root()
        .join("charts")
        .join("quorum-etcd-operator")
        .join("values.yaml");
    let values: Value = serde_yaml::from_str(&std::fs::read_to_string(&values)?)?;
    Ok(values["resources"].clone())
}

/// What the peer's `make deploy` applies (`kustomize build config/default`), placed for the
/// benchmark ([`placed_for_the_benchmark`]).
fn peer_manifests() -> anyhow::Result<String> {
    let config = peer_directory()?.join("config").join("default");
    let (rendered, _) = succeeds(
        &kubectl_binary(),
        &["kustomize", &config.display().to_string()],
        None,
    );
    placed_for_the_benchmark(&rendered, &peer_image(), &chart_resources()?)
}

/// `rendered` manifests with the manager's image set to the one built here (as `make deploy
/// IMG=...` sets it), its pod placed on the real node, and its requests and limits replaced by
/// `resources` (the peer ships a 500m CPU limit that would throttle it against an operator
/// without one).
fn placed_for_the_benchmark(rendered: &str, image: &str, resources: &Value) -> anyhow::Result<String> {
    let mut documents = Vec::new();
    let mut managers = 0;
    for document in serde_yaml::Deserializer::from_str(rendered) {
        let mut value: Value = serde::Deserialize::deserialize(document)?;
        if value["kind"] == "Deployment" {
            let pod = &mut value["spec"]["template"]["spec"];
            pod["nodeSelector"] = serde_json::to_value(real_node::node_selector())?;
            pod["tolerations"] = serde_json::to_value(real_node::tolerations())?;
            for container in pod["containers"].as_array_mut().into_iter().flatten() {
                if container["name"] == "manager" {
                    container["image"] = image.into();
                    container["resources"] = resources.clone();
                    managers += 1;
                }
            }
        }
        if !value.is_null() {
            documents.push(serde_yaml::to_string(&value)?);
        }
    }
    anyhow::ensure!(
        managers == 1,
        "the peer's manifests have {managers} manager containers, not one"
    );
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

/// Whether the condition `type_` in `status` is `True`.
fn condition_holds(status: &Value, type_: &str) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|condition| condition["type"] == type_ && condition["status"] == "True")
}

/// The members `status` lists (the etcd operators and Quorum's MySQL operator name the list
/// `members`).
pub fn members(status: &Value) -> &[Value] {
    status["members"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The peer's `Available` condition with `size` ready pods and `size` healthy voting members.
fn peer_available_at(status: &Value, size: usize) -> bool {
    let members = members(status);
    condition_holds(status, "Available")
        && status["readyReplicas"] == size
        && members.len() == size
        && members
            .iter()
            .all(|member| member["isHealthy"] == true && member["isLearner"] != true)
}

/// Deletes `name` and waits until it is gone and the provisioner has removed its volumes, so
/// that the next contender does not share the node with their clean-up.
pub async fn delete_namespace(admin: &Client, name: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let volumes: Api<PersistentVolume> = Api::all(admin.clone());
    let _ = namespaces.delete(name, &DeleteParams::background()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let namespace_there = namespaces.get_opt(name).await?.is_some();
        let volumes_there = volumes
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|volume| {
                volume
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.claim_ref.as_ref())
                    .and_then(|claim| claim.namespace.as_deref())
                    == Some(name)
            })
            .count();
        if !namespace_there && volumes_there == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "namespace {name} (or {volumes_there} of its volumes) still there 300 s after its deletion"
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
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
        let member = |healthy: bool, learner: bool| json!({"isHealthy": healthy, "isLearner": learner});
        let voters = json!([member(true, false), member(true, false), member(true, false)]);
        assert!(Contender::Peer.is_ready(&with_status(
            json!({"conditions": available, "readyReplicas": 3, "memberCount": 3, "members": voters})
        )));
        for (case, members) in [
            ("two members", json!([member(true, false), member(true, false)])),
            (
                "a learner",
                json!([member(true, false), member(true, false), member(true, true)]),
            ),
            (
                "an unhealthy member",
                json!([member(true, false), member(false, false), member(true, false)]),
            ),
        ] {
            assert!(
                !Contender::Peer.is_ready(&with_status(
                    json!({"conditions": available, "readyReplicas": 3, "memberCount": 3, "members": members})
                )),
                "{case}"
            );
        }
        assert!(!Contender::Peer.is_ready(&with_status(
            json!({"conditions": available, "readyReplicas": 2, "memberCount": 3, "members": voters})
        )));
        assert!(!Contender::Peer.is_ready(&with_status(json!({"conditions": ready}))));
        assert!(Contender::Quorum(Engine::Etcd).is_ready(&with_status(json!({"conditions": ready}))));
        assert!(!Contender::Quorum(Engine::Etcd).is_ready(&with_status(
            json!({"conditions": [{"type": "Ready", "status": "False"}]})
        )));
        assert!(!Contender::Quorum(Engine::Etcd).is_ready(&with_status(Value::Null)));
    }

    #[test]
    fn each_contender_is_settled_at_a_size_by_its_own_status() {
        let quorum = Contender::Quorum(Engine::Etcd);
        let settled = json!([
            {"type": "Ready", "status": "True"},
            {"type": "Progressing", "status": "False"},
        ]);
        let voter = json!({"health": "Healthy", "learner": false});
        let five = json!([voter, voter, voter, voter, voter]);
        assert!(quorum.settled_at(&with_status(json!({"conditions": settled, "members": five})), 5));
        assert!(!quorum.settled_at(&with_status(json!({"conditions": settled, "members": five})), 3));
        let learning = json!([voter, voter, voter, voter, {"health": "Healthy", "learner": true}]);
        assert!(!quorum.settled_at(
            &with_status(json!({"conditions": settled, "members": learning})),
            5
        ));
        let progressing = json!([
            {"type": "Ready", "status": "True"},
            {"type": "Progressing", "status": "True"},
        ]);
        assert!(!quorum.settled_at(
            &with_status(json!({"conditions": progressing, "members": five})),
            5
        ));

        let member = json!({"isHealthy": true, "isLearner": false});
        let peer = |conditions: Value, ready: usize| {
            with_status(json!({
                "conditions": conditions,
                "readyReplicas": ready,
                "members": [member, member, member, member, member],
            }))
        };
        let available = json!([{"type": "Available", "status": "True"}]);
        assert!(Contender::Peer.settled_at(&peer(available.clone(), 5), 5));
        assert!(!Contender::Peer.settled_at(&peer(available, 4), 5));
        let scaling = json!([
            {"type": "Available", "status": "True"},
            {"type": "Progressing", "status": "True"},
        ]);
        assert!(!Contender::Peer.settled_at(&peer(scaling, 5), 5));
        assert_eq!(quorum.size_spec(5), json!({"replicas": 5}));
        assert_eq!(Contender::Peer.size_spec(3), json!({"size": 3}));
        assert_eq!(
            quorum.member_selector("bench-000"),
            "app.kubernetes.io/component=member,app.kubernetes.io/instance=bench-000,app.kubernetes.io/name=etcd"
        );
    }

    #[test]
    fn quorum_is_settled_once_ready_and_not_progressing_and_the_peer_once_ready() {
        let quorum = Contender::Quorum(Engine::Mysql);
        let with = |ready: &str, progressing: &str| {
            with_status(json!({"conditions": [
                {"type": "Ready", "status": ready},
                {"type": "Progressing", "status": progressing},
            ]}))
        };
        assert!(quorum.is_settled(&with("True", "False")));
        assert!(
            !quorum.is_settled(&with("True", "True")),
            "ready, still taking steps"
        );
        assert!(!quorum.is_settled(&with("False", "False")));
        assert!(!quorum.is_settled(&with_status(
            json!({"conditions": [{"type": "Ready", "status": "True"}]})
        )));
        let member = json!({"isHealthy": true, "isLearner": false});
        assert!(Contender::Peer.is_settled(&with_status(json!({
            "conditions": [{"type": "Available", "status": "True"}],
            "readyReplicas": 3,
            "members": [member, member, member],
        }))));
    }

    #[test]
    fn the_peer_runs_its_own_manager_built_here_on_the_real_node_with_the_same_resources() {
        let rendered = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: etcd-operator-system\n---\n\
            apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: etcd-operator-controller-manager\n\
            spec:\n  template:\n    spec:\n      containers:\n      - name: manager\n        \
            image: etcd-operator:v0.1\n        resources:\n          limits:\n            cpu: 500m\n";
        let resources = json!({"requests": {"cpu": "50m"}, "limits": {"memory": "256Mi"}});
        let placed = placed_for_the_benchmark(rendered, "localhost/peer:1", &resources).unwrap();
        let documents: Vec<Value> = serde_yaml::Deserializer::from_str(&placed)
            .map(|document| serde::Deserialize::deserialize(document).unwrap())
            .collect();
        assert_eq!(documents.len(), 2);
        assert_eq!(documents[0]["kind"], "Namespace");
        let pod = &documents[1]["spec"]["template"]["spec"];
        assert_eq!(pod["containers"][0]["image"], "localhost/peer:1");
        assert_eq!(
            pod["containers"][0]["resources"], resources,
            "no CPU limit of its own"
        );
        assert_eq!(pod["nodeSelector"]["type"], "real");
        assert_eq!(pod["tolerations"][0]["effect"], "NoSchedule");
        assert!(placed_for_the_benchmark("kind: Namespace\n", "i", &resources).is_err());
    }
}
