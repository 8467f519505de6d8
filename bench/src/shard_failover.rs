//! Failover of one Redis shard as a client sees it: a cluster-mode deployment of three shards,
//! each a primary and a replica, written through one shard (every key of the writer carries the
//! same hash tag, so one slot holds them all), and that shard's primary killed again and again.
//! Redis Cluster itself promotes the replica once the primary is past `cluster-node-timeout`,
//! unless the killed server is back sooner; the operator keeps the shard whole afterwards.
//!
//! The writer sends each write to every data node at once, as no client knows the new primary
//! before asking: only the node serving the slot takes it, the others answer `MOVED`.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use anyhow::Context;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::DeleteParams};
use quorum_e2e::real_node;
use redis_operator::admin::cluster::key_slot;

use crate::{
    contender::{Engine, Installed},
    failover::{
        self, Aim, DataClient, Failovers, PodAddresses, WRITE_TIMEOUT, generated_password, redis_connection,
        redis_connection_info,
    },
    reshard,
};

/// The deployment whose shard is killed.
pub const CLUSTER: &str = "bench-shards";
pub const SHARDS: usize = 3;
/// Every key of the writer: `{failover}/<n>`, all in the slot of `failover`.
const PREFIX: &str = "{failover}";
const REDIS_PORT: u16 = 6379;
/// How long the deployment's pods may take to go once it is deleted.
const GONE_TIMEOUT: Duration = Duration::from_secs(180);

/// Forms [`CLUSTER`], kills the primary of the shard the writer writes to `kills` times, and
/// deletes the deployment (its memory is the next scenario's).
pub async fn measure(admin: &Client, installed: &Installed, kills: usize) -> anyhow::Result<Failovers> {
    let namespace = installed.clusters_namespace;
    let clusters =
        reshard::create_settled(admin, installed, CLUSTER, &reshard::cluster_spec(SHARDS, 1)).await?;

    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let selector = reshard::node_selector(CLUSTER);
    let client = DataClient::RedisShard(ShardClient {
        addresses: PodAddresses::look_up(pods.clone(), selector.clone()).await?,
        password: generated_password(admin, namespace, Engine::Redis, CLUSTER).await?,
    });
    let aim = Aim::SlotOwner {
        cluster: CLUSTER,
        slot: key_slot(PREFIX.as_bytes()),
    };
    let measured = failover::measure_aimed(admin, installed, Engine::Redis, aim, client, PREFIX, kills).await;

    clusters
        .delete(CLUSTER, &DeleteParams::background())
        .await
        .with_context(|| format!("deleting {CLUSTER}"))?;
    real_node::pods_gone(&pods, &selector, &format!("{CLUSTER}'s pods gone"), GONE_TIMEOUT)
        .await
        .map_err(anyhow::Error::msg)?;
    measured
}

/// A client of one shard of a cluster-mode deployment, through every data node's address.
pub struct ShardClient {
    pub addresses: PodAddresses,
    password: String,
}

impl ShardClient {
    /// A connection to the data node at `ip`, made for one request (as the other engines'
    /// writers make one per write).
    async fn connection(&self, ip: IpAddr) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        let info = redis_connection_info(SocketAddr::new(ip, REDIS_PORT), self.password.clone())?;
        Ok(redis_connection(&info, WRITE_TIMEOUT).await?)
    }

    /// `SET key value` sent to every data node at once: whether one (the node serving the key's
    /// slot) acknowledged it.
    pub async fn set(&self, key: String, value: String) -> bool {
        let addresses = self.addresses.current().await;
        let sets = addresses.iter().map(|&ip| {
            let (key, value) = (&key, &value);
            async move {
                let mut connection = self.connection(ip).await?;
                redis::cmd("SET")
                    .arg(key)
                    .arg(value)
                    .query_async::<()>(&mut connection)
                    .await?;
                anyhow::Ok(())
            }
            .boxed()
        });
        futures::future::select_ok(sets).await.is_ok()
    }

    /// Every key of the writer with its value, read from the node serving their slot: each node
    /// is asked for them all, and only that node answers (the others redirect).
    pub async fn read_all(&self) -> Result<BTreeMap<String, Option<String>>, String> {
        let mut refusals = Vec::new();
        for ip in self.addresses.current().await {
            match self.read_all_from(ip).await {
                Ok(held) => return Ok(held),
                Err(error) => refusals.push(format!("{ip}: {error:#}")),
            }
        }
        Err(format!("no data node served the writer's slot: {refusals:?}"))
    }

    async fn read_all_from(&self, ip: IpAddr) -> anyhow::Result<BTreeMap<String, Option<String>>> {
        let mut connection = self.connection(ip).await?;
        let slot = key_slot(PREFIX.as_bytes());
        let count: u64 = redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot)
            .query_async(&mut connection)
            .await?;
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(count)
            .query_async(&mut connection)
            .await?;
        if keys.is_empty() {
            // A node that owns no key of the slot says nothing of who does; only the owner's
            // MGET below is an answer.
            anyhow::bail!("holds no key of slot {slot}");
        }
        // Answered by the slot's primary only: a replica or another shard's primary redirects.
        let values: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query_async(&mut connection).await?;
        Ok(keys.into_iter().zip(values).collect())
    }
}
