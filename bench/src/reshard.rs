//! Redis Cluster resharded: a fourth shard added to a three-shard cluster that holds the same
//! keys, once by Quorum's operator (the spec's `shards` raised from 3 to 4) and once by
//! `redis-cli --cluster rebalance --cluster-use-empty-masters`, the tool people run by hand, on
//! four plain pods of the same image, with the same `redis.conf` the operator renders (the
//! fourth node added with `redis-cli --cluster add-node`). Both move a quarter of the slots,
//! with their keys, from the three primaries to the new one.
//!
//! Keys moved per second is the keys the new shard holds at the end over the time the moving
//! took: for Quorum, from the moment its status first records the rebalance until it reports
//! the cluster settled at four shards; for `redis-cli`, its run (timed around `kubectl exec`).
//! Quorum's whole scale-out, from the spec change (the new shard's pod started and introduced to
//! the cluster first), is printed beside it. At the end every key is counted again on the four
//! primaries: none may be lost.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use quorum_e2e::{real_node, wait};
use redis_operator::{
    admin::cluster::{ClusterNode, key_slot, owner_of, parse_cluster_info, parse_cluster_nodes},
    crd::RedisCluster,
};
use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    contender::{Engine, Installed},
    failover::{generated_password, redis_connection, redis_connection_info},
};

/// The cluster Quorum's operator reshards.
pub const CLUSTER: &str = "bench-reshard";
/// The plain pods `redis-cli` reshards: `<BASELINE>-0` to `-3`.
const BASELINE: &str = "bench-reshard-cli";
const SHARDS_BEFORE: usize = 3;
const SHARDS_AFTER: usize = 4;
const REDIS_PORT: u16 = 6379;
/// The server's container, in Quorum's pods and in the baseline's.
const SERVER: &str = "redis";
/// Keys written per pipeline while loading.
const LOAD_BATCH: usize = 1_000;
/// Each value: small, as the keys of a cache are; what is measured is keys moved.
const VALUE_BYTES: usize = 32;
/// How long a cluster may take to form, and a resharding to finish.
/// A request to one node, a pipeline of [`LOAD_BATCH`] keys included, on a busy machine.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const FORM_TIMEOUT: Duration = Duration::from_secs(600);
const RESHARD_TIMEOUT: Duration = Duration::from_secs(1_800);
/// How often Quorum's status is read while it reshards.
const STATUS_INTERVAL: Duration = Duration::from_millis(200);

/// One resharding: the keys that moved to the new shard and how long the moving took.
#[derive(Clone, Debug, Serialize)]
pub struct Moved {
    pub keys_moved: u64,
    pub seconds: f64,
}

impl Moved {
    pub fn keys_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.keys_moved as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// The scenario's result.
#[derive(Clone, Debug, Serialize)]
pub struct Reshard {
    /// Keys in each cluster before the fourth shard was added, all of them found after.
    pub keys: usize,
    pub quorum: Moved,
    /// Quorum's scale-out from the spec change: the new shard's pod started, met, and the slots
    /// moved.
    pub quorum_from_spec_seconds: f64,
    pub redis_cli: Moved,
}

/// Reshards a cluster holding `keys` keys with Quorum's operator, then the same data with
/// `redis-cli`, and checks that every key is still there after each.
pub async fn measure(admin: &Client, installed: &Installed, keys: usize) -> anyhow::Result<Reshard> {
    let namespace = installed.clusters_namespace;
    // Without replicas: the moving is the same with them, they would only double the pods.
    let spec = cluster_spec(SHARDS_BEFORE, 0);
    let (quorum, quorum_from_spec_seconds, image) = quorum_reshard(admin, installed, &spec, keys).await?;
    eprintln!(
        "[bench] redis: Quorum moved {} keys in {:.1} s ({:.1} s from the spec change)",
        quorum.keys_moved, quorum.seconds, quorum_from_spec_seconds
    );
    let baseline = Baseline::new(admin, namespace);
    let redis_cli = baseline.reshard(&spec, &image, keys).await;
    let removed = baseline.remove().await;
    let redis_cli = redis_cli?;
    removed?;
    eprintln!(
        "[bench] redis: redis-cli moved {} keys in {:.1} s",
        redis_cli.keys_moved, redis_cli.seconds
    );
    Ok(Reshard {
        keys,
        quorum,
        quorum_from_spec_seconds,
        redis_cli,
    })
}

/// A cluster-mode deployment of `shards` shards of `replicas_per_shard` replicas each, every pod
/// on the one real node.
pub fn cluster_spec(shards: usize, replicas_per_shard: usize) -> Value {
    let mut template = serde_json::to_value(real_node::pod_overrides()).expect("pod overrides serialize");
    // One node holds every shard: allowed, as a user with one node allows it.
    template["affinity"] = json!({});
    json!({
        "mode": "Cluster",
        "shards": shards,
        "replicasPerShard": replicas_per_shard,
        "version": "7.0.15",
        "storage": {"size": "1Gi", "storageClassName": real_node::STORAGE_CLASS},
        "podTemplate": template,
    })
}

/// Creates the cluster-mode deployment `name` of `spec` and waits until it is settled; its
/// deployments, for the next calls.
pub async fn create_settled(
    admin: &Client,
    installed: &Installed,
    name: &str,
    spec: &Value,
) -> anyhow::Result<Api<DynamicObject>> {
    let contender = installed.contender;
    let clusters = contender.clusters(admin, installed.clusters_namespace);
    let mut cluster = DynamicObject::new(name, &contender.cluster_resource());
    cluster.data = json!({ "spec": spec });
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .with_context(|| format!("creating {name}"))?;
    wait::within(&format!("{name} ready and settled"), FORM_TIMEOUT, || async {
        let cluster = clusters.get(name).await.map_err(|error| error.to_string())?;
        contender
            .is_settled(&cluster)
            .then_some(())
            .ok_or_else(|| format!("{:?}", cluster.data["status"]["conditions"]))
    })
    .await
    .map_err(anyhow::Error::msg)?;
    Ok(clusters)
}

/// The selector of a deployment's data pods.
pub fn node_selector(cluster: &str) -> String {
    quorum_core::naming::label_selector(&quorum_core::naming::selector_labels("redis", cluster, "node"))
}

/// Quorum's turn: the moving, the whole scale-out's seconds, and the image its pods ran.
async fn quorum_reshard(
    admin: &Client,
    installed: &Installed,
    spec: &Value,
    keys: usize,
) -> anyhow::Result<(Moved, f64, String)> {
    let namespace = installed.clusters_namespace;
    let contender = installed.contender;
    let clusters = create_settled(admin, installed, CLUSTER, spec).await?;

    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let selector = node_selector(CLUSTER);
    let password = generated_password(admin, namespace, Engine::Redis, CLUSTER).await?;
    let before = pod_addresses(&pods, &selector).await?;
    anyhow::ensure!(
        before.len() == SHARDS_BEFORE,
        "{CLUSTER} has {} data pods, not {SHARDS_BEFORE}",
        before.len()
    );
    let nodes = Nodes::new(before.values().copied().collect(), &password);
    nodes.load(keys).await?;

    let started = Instant::now();
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shards": SHARDS_AFTER}})),
        )
        .await?;
    let mut moving_since = None;
    let deadline = started + RESHARD_TIMEOUT;
    loop {
        let cluster = clusters.get(CLUSTER).await?;
        let status = &cluster.data["status"];
        if moving_since.is_none() && !status["rebalance"].is_null() {
            moving_since = Some(Instant::now());
        }
        let at_four = status["shards"].as_u64() == Some(SHARDS_AFTER as u64) && status["rebalance"].is_null();
        if moving_since.is_some() && at_four && contender.is_settled(&cluster) {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{CLUSTER} not settled at {SHARDS_AFTER} shards after {RESHARD_TIMEOUT:?}: {status}"
        );
        tokio::time::sleep(STATUS_INTERVAL).await;
    }
    let moving_since = moving_since.expect("the loop ends only once the rebalance was seen");
    let seconds = moving_since.elapsed().as_secs_f64();
    let from_spec_seconds = started.elapsed().as_secs_f64();

    let after = pod_addresses(&pods, &selector).await?;
    let added: Vec<SocketAddr> = after
        .iter()
        .filter(|(name, _)| !before.contains_key(*name))
        .map(|(_, address)| *address)
        .collect();
    let [new_shard] = added[..] else {
        anyhow::bail!("after the scale-out {CLUSTER} has pods {after:?}, from {before:?}");
    };
    let keys_moved = Nodes::new(after.values().copied().collect(), &password)
        .count_all(keys, new_shard)
        .await?;
    let image = server_image(&pods, &selector).await?;

    clusters
        .delete(CLUSTER, &DeleteParams::background())
        .await
        .with_context(|| format!("deleting {CLUSTER}"))?;
    // Its memory is the baseline's to use.
    real_node::pods_gone(
        &pods,
        &selector,
        &format!("{CLUSTER}'s pods gone"),
        Duration::from_secs(180),
    )
    .await
    .map_err(anyhow::Error::msg)?;
    Ok((Moved { keys_moved, seconds }, from_spec_seconds, image))
}

/// The data pods matching `selector` that have an address, by name.
async fn pod_addresses(pods: &Api<Pod>, selector: &str) -> anyhow::Result<BTreeMap<String, SocketAddr>> {
    pods.list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .filter(real_node::pod_ready)
        .map(|pod| {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let ip = pod
                .status
                .and_then(|status| status.pod_ip)
                .with_context(|| format!("{name} has no address"))?;
            Ok((name, SocketAddr::new(ip.parse()?, REDIS_PORT)))
        })
        .collect()
}

async fn server_image(pods: &Api<Pod>, selector: &str) -> anyhow::Result<String> {
    pods.list(&ListParams::default().labels(selector))
        .await?
        .items
        .iter()
        .flat_map(|pod| pod.spec.iter().flat_map(|spec| &spec.containers))
        .find(|container| container.name == SERVER)
        .and_then(|container| container.image.clone())
        .context("no data pod with a server container")
}

/// The four plain Redis pods `redis-cli` reshards, in the benchmark's namespace.
struct Baseline<'a> {
    namespace: &'a str,
    pods: Api<Pod>,
}

impl<'a> Baseline<'a> {
    fn new(admin: &Client, namespace: &'a str) -> Self {
        Self {
            namespace,
            pods: Api::namespaced(admin.clone(), namespace),
        }
    }

    async fn reshard(&self, spec: &Value, image: &str, keys: usize) -> anyhow::Result<Moved> {
        let password = format!("{BASELINE}-{}", std::process::id());
        let config = baseline_config(spec, &password)?;
        for ordinal in 0..SHARDS_AFTER {
            self.pods
                .create(&PostParams::default(), &baseline_pod(ordinal, image, &config)?)
                .await
                .with_context(|| format!("creating {BASELINE}-{ordinal}"))?;
        }
        let selector = format!("app.kubernetes.io/instance={BASELINE}");
        let addresses = wait::within("the baseline's pods ready", FORM_TIMEOUT, || async {
            let ready = pod_addresses(&self.pods, &selector)
                .await
                .map_err(|error| error.to_string())?;
            (ready.len() == SHARDS_AFTER)
                .then(|| ready.clone())
                .ok_or(format!("{} of {SHARDS_AFTER} ready", ready.len()))
        })
        .await
        .map_err(anyhow::Error::msg)?;
        let addresses: Vec<SocketAddr> = addresses.into_values().collect();
        let (first, added) = (addresses[0], addresses[SHARDS_AFTER - 1]);
        let primaries = Nodes::new(addresses[..SHARDS_BEFORE].to_vec(), &password);
        primaries.answering().await?;

        let mut create = vec!["--cluster".to_string(), "create".to_string()];
        create.extend(addresses[..SHARDS_BEFORE].iter().map(SocketAddr::to_string));
        create.push("--cluster-yes".into());
        self.redis_cli(&password, &create).await?;
        primaries.formed(SHARDS_BEFORE).await?;
        primaries.load(keys).await?;

        self.redis_cli(
            &password,
            &["--cluster", "add-node", &added.to_string(), &first.to_string()].map(String::from),
        )
        .await?;
        let all = Nodes::new(addresses.clone(), &password);
        all.formed(SHARDS_AFTER).await?;
        let started = Instant::now();
        self.redis_cli(
            &password,
            &[
                "--cluster",
                "rebalance",
                &first.to_string(),
                "--cluster-use-empty-masters",
            ]
            .map(String::from),
        )
        .await?;
        let seconds = started.elapsed().as_secs_f64();
        let keys_moved = all.count_all(keys, added).await?;
        Ok(Moved { keys_moved, seconds })
    }

    /// `redis-cli` with `arguments` in the first baseline pod, the password from the environment
    /// (never on its command line).
    async fn redis_cli(&self, password: &str, arguments: &[String]) -> anyhow::Result<()> {
        let command = format!("REDISCLI_AUTH='{password}' redis-cli {}", arguments.join(" "));
        let args = [
            "exec".to_string(),
            "-n".into(),
            self.namespace.into(),
            format!("{BASELINE}-0"),
            "-c".into(),
            SERVER.into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            command,
        ];
        let (shown, output) = tokio::time::timeout(
            RESHARD_TIMEOUT,
            tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                real_node::kubectl(&args)
            }),
        )
        .await
        .context("redis-cli took too long")??;
        anyhow::ensure!(
            output.status.success(),
            "{shown}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }

    async fn remove(&self) -> anyhow::Result<()> {
        for ordinal in 0..SHARDS_AFTER {
            let name = format!("{BASELINE}-{ordinal}");
            match self.pods.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error).with_context(|| format!("deleting {name}")),
            }
        }
        Ok(())
    }
}

/// The operator's `redis.conf` for `spec`, then what its start script adds for a data node
/// (the directory, the password, the node's file), for a plain pod.
fn baseline_config(spec: &Value, password: &str) -> anyhow::Result<String> {
    let cluster = RedisCluster::new(BASELINE, serde_json::from_value(spec.clone())?);
    let mut config = redis_operator::resources::redis_conf(&cluster);
    config.push_str(&format!(
        "port {REDIS_PORT}\ndir /data\nrequirepass \"{password}\"\nmasterauth \"{password}\"\n\
         cluster-config-file /data/nodes.conf\n"
    ));
    Ok(config)
}

fn baseline_pod(ordinal: usize, image: &str, config: &str) -> anyhow::Result<Pod> {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{BASELINE}-{ordinal}"),
            "labels": {"app.kubernetes.io/instance": BASELINE},
        },
        "spec": {
            "nodeSelector": real_node::node_selector(),
            "tolerations": real_node::tolerations(),
            "securityContext": {"runAsUser": 999, "runAsGroup": 999, "fsGroup": 999, "runAsNonRoot": true},
            "containers": [{
                "name": SERVER,
                "image": image,
                "command": ["sh", "-c", "printf '%s' \"$REDIS_CONF\" > /data/redis.conf && exec redis-server /data/redis.conf"],
                "env": [{"name": "REDIS_CONF", "value": config}],
                "ports": [{"containerPort": REDIS_PORT}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    });
    Ok(serde_json::from_value(pod)?)
}

/// Redis servers the benchmark talks to directly, from this machine.
struct Nodes {
    addresses: Vec<SocketAddr>,
    password: String,
}

impl Nodes {
    fn new(addresses: Vec<SocketAddr>, password: &str) -> Self {
        Self {
            addresses,
            password: password.to_string(),
        }
    }

    async fn connection(&self, address: SocketAddr) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        let info = redis_connection_info(address, self.password.clone())?;
        redis_connection(&info, REQUEST_TIMEOUT)
            .await
            .with_context(|| format!("connecting to {address}"))
    }

    async fn cluster_nodes(
        connection: &mut redis::aio::MultiplexedConnection,
    ) -> anyhow::Result<Vec<ClusterNode>> {
        let text: String = redis::cmd("CLUSTER").arg("NODES").query_async(connection).await?;
        parse_cluster_nodes(&text).map_err(anyhow::Error::msg)
    }

    /// Every node answers a `PING`.
    async fn answering(&self) -> anyhow::Result<()> {
        for &address in &self.addresses {
            wait::within(
                &format!("{address} answering"),
                Duration::from_secs(60),
                || async {
                    let mut connection = self
                        .connection(address)
                        .await
                        .map_err(|error| error.to_string())?;
                    redis::cmd("PING")
                        .query_async::<String>(&mut connection)
                        .await
                        .map_err(|error| error.to_string())
                },
            )
            .await
            .map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }

    /// Every node sees `primaries` connected primaries, none in a handshake, and its cluster
    /// state ok: what `redis-cli --cluster` checks before it moves anything.
    async fn formed(&self, primaries: usize) -> anyhow::Result<()> {
        for &address in &self.addresses {
            wait::within(
                &format!("{address} seeing {primaries} connected primaries"),
                Duration::from_secs(120),
                || async {
                    let mut connection = self
                        .connection(address)
                        .await
                        .map_err(|error| error.to_string())?;
                    let nodes = Self::cluster_nodes(&mut connection)
                        .await
                        .map_err(|error| error.to_string())?;
                    let info: String = redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query_async(&mut connection)
                        .await
                        .map_err(|error| error.to_string())?;
                    let state_ok = parse_cluster_info(&info)?.state_ok;
                    let joined = nodes
                        .iter()
                        .filter(|node| node.flags.primary && (node.connected || node.flags.myself))
                        .filter(|node| !node.flags.handshake)
                        .count();
                    (joined == primaries && state_ok)
                        .then_some(())
                        .ok_or(format!("{joined} primaries joined; cluster state ok: {state_ok}"))
                },
            )
            .await
            .map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }

    /// Writes `keys` keys, each to the primary that serves its slot, a pipeline at a time.
    async fn load(&self, keys: usize) -> anyhow::Result<()> {
        let nodes = Self::cluster_nodes(&mut self.connection(self.addresses[0]).await?).await?;
        let mut connections = BTreeMap::new();
        for node in nodes.iter().filter(|node| node.flags.primary) {
            let address = node.address.context("a primary without an address")?;
            connections.insert(node.id.clone(), self.connection(address).await?);
        }
        let value = "v".repeat(VALUE_BYTES);
        for first in (0..keys).step_by(LOAD_BATCH) {
            let mut pipelines: BTreeMap<&str, redis::Pipeline> = BTreeMap::new();
            for index in first..keys.min(first + LOAD_BATCH) {
                let key = key_name(index);
                let owner = owner_of(&nodes, key_slot(key.as_bytes()))
                    .with_context(|| format!("no primary serves the slot of {key}"))?;
                pipelines
                    .entry(owner.id.as_str())
                    .or_insert_with(redis::pipe)
                    .set(key, &value)
                    .ignore();
            }
            for (id, pipeline) in pipelines {
                let connection = connections.get_mut(id).context("a primary not connected")?;
                pipeline.query_async::<()>(connection).await?;
            }
        }
        Ok(())
    }

    /// Counts the keys on every node: all `keys` must be there (a key left behind on its old
    /// node as well would count twice). Returns the keys on `added`, the shard that was empty.
    async fn count_all(&self, keys: usize, added: SocketAddr) -> anyhow::Result<u64> {
        let mut total = 0;
        let mut on_added = 0;
        for &address in &self.addresses {
            let mut connection = self.connection(address).await?;
            let count: u64 = redis::cmd("DBSIZE").query_async(&mut connection).await?;
            total += count;
            if address == added {
                on_added = count;
            }
        }
        anyhow::ensure!(
            total == keys as u64,
            "after resharding the primaries hold {total} keys, not the {keys} written"
        );
        anyhow::ensure!(
            on_added > 0,
            "the new shard {added} holds no key after resharding"
        );
        Ok(on_added)
    }
}

fn key_name(index: usize) -> String {
    format!("reshard-{index:08}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_runs_the_operators_configuration_with_its_own_password() {
        let config = baseline_config(&cluster_spec(SHARDS_BEFORE, 0), "secret").unwrap();
        assert!(config.contains("cluster-enabled yes"), "{config}");
        assert!(config.contains("appendonly yes"), "{config}");
        assert!(config.contains("requirepass \"secret\""), "{config}");
        assert!(
            config.contains("cluster-config-file /data/nodes.conf"),
            "{config}"
        );
    }

    #[test]
    fn keys_per_second_is_the_keys_moved_over_the_time_and_zero_without_time() {
        let moved = Moved {
            keys_moved: 500,
            seconds: 2.0,
        };
        assert_eq!(moved.keys_per_second(), 250.0);
        let instant = Moved {
            keys_moved: 500,
            seconds: 0.0,
        };
        assert_eq!(instant.keys_per_second(), 0.0);
    }
}
