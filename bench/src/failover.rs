//! Failover as a client sees it: a writer through each engine's client Service (MongoDB's
//! members, as a driver finds its primary), the primary's server (etcd: the leader's) killed
//! inside its container again and again, as a crash or the OOM killer would. For each kill, the
//! time from the kill to the first write invoked after it that the database acknowledged; at the
//! end, every acknowledged write read back from the primary: none may be lost.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::{FutureExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams},
};
use mysql_async::prelude::Queryable;
use quorum_e2e::{
    control_plane::generated_secret,
    history::{History, Writer},
    real_node, wait,
};
use serde::Serialize;
use serde_json::Value;

use crate::contender::{Engine, Installed};

/// The cluster the kills are aimed at: the first the convergence scenario created.
pub const CLUSTER: &str = "bench-000";
const PREFIX: &str = "failover";
/// How long one write may take before the client gives up on it and tries the next: a client
/// with a shorter timeout would see a failover sooner, one with a longer one later.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
const WRITE_INTERVAL: Duration = Duration::from_millis(50);
/// Bounds the writer in count whatever happens (20 kills take a few minutes at 20 writes a second).
const MOST_WRITES: usize = 60_000;
/// Acknowledged writes that show the writer reaches the primary (at the start, and again after
/// a kill).
const WRITES_FLOWING: usize = 20;
/// The database the benchmark writes to (MySQL).
pub const MYSQL_DATABASE: &str = "quorum_bench";
/// The MySQL application account the writer uses (the cluster lives for one benchmark run).
const MYSQL_USER: &str = "bench";
const MYSQL_PASSWORD: &str = "bench-application";
/// How long the cluster may take to be whole and settled again after one kill.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(300);

/// One kill and what followed it.
#[derive(Clone, Debug, Serialize)]
pub struct Kill {
    /// The member whose server was killed: the primary (etcd: the leader) at the time.
    pub member: String,
    /// The primary once the cluster had settled again: the same member when its restart was
    /// quicker than a failover.
    pub primary_after: String,
    /// From the kill to the first write invoked after it that was acknowledged.
    pub seconds_to_first_write: f64,
}

/// The failover scenario's result for one engine.
#[derive(Clone, Debug, Serialize)]
pub struct Failovers {
    pub engine: Engine,
    /// Redis cluster mode: the primary of one shard of a three-shard deployment was killed,
    /// the writer's keys all in that shard's slots.
    pub one_shard: bool,
    pub kills: Vec<Kill>,
    pub writes_acknowledged: usize,
    /// Acknowledged writes read back from the primary at the end: all of them, or the run fails.
    pub writes_checked: usize,
}

impl Failovers {
    /// The kills after which another member was primary.
    pub fn primary_moved(&self) -> usize {
        self.kills
            .iter()
            .filter(|kill| kill.primary_after != kill.member)
            .count()
    }

    /// The nearest-rank `percentile` of the times to the first write.
    pub fn seconds_to_first_write(&self, percentile: f64) -> f64 {
        let mut seconds: Vec<f64> = self
            .kills
            .iter()
            .map(|kill| kill.seconds_to_first_write)
            .collect();
        seconds.sort_by(f64::total_cmp);
        nearest_rank(&seconds, percentile)
    }
}

/// The value at `percentile` (0 to 100) of `sorted`, by nearest rank; 0 for none.
fn nearest_rank(sorted: &[f64], percentile: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (percentile / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// For each kill instant, the time from it to the first write invoked at or after it that was
/// acknowledged; `None` when no such write was. A write invoked before the kill is left out even
/// when acknowledged after it: the old primary may have served it on its way down.
fn first_write_after(history: &History, kills: &[Instant]) -> Vec<Option<Duration>> {
    kills
        .iter()
        .map(|&killed| {
            history
                .operations
                .iter()
                .filter(|operation| operation.invoked >= killed)
                .find_map(|operation| operation.acknowledged)
                .map(|acknowledged| acknowledged - killed)
        })
        .collect()
}

/// What the kills aim at: a cluster, and the member of it that takes the writer's writes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Aim {
    /// [`CLUSTER`]'s primary (etcd: its leader), as its status names it.
    Primary,
    /// The primary of a Redis cluster-mode deployment that serves `slot`, as its status names it.
    SlotOwner { cluster: &'static str, slot: u16 },
}

impl Aim {
    fn cluster(self) -> &'static str {
        match self {
            Aim::Primary => CLUSTER,
            Aim::SlotOwner { cluster, .. } => cluster,
        }
    }

    /// The member aimed at, as the cluster's `status` names it.
    fn member(self, status: &Value) -> Option<String> {
        match self {
            Aim::Primary => status["primary"]
                .as_str()
                .or(status["leader"].as_str())
                .map(str::to_string),
            Aim::SlotOwner { slot, .. } => status["nodes"]
                .as_array()?
                .iter()
                .find(|node| {
                    node["role"] == "Primary"
                        && node["slots"]
                            .as_array()
                            .is_some_and(|ranges| ranges.iter().any(|range| slot_in(range, slot)))
                })
                .and_then(|node| node["name"].as_str())
                .map(str::to_string),
        }
    }
}

/// Whether `range`, a slot range as the Redis operator's status writes it (`start-end`, or one
/// slot), holds `slot`.
fn slot_in(range: &Value, slot: u16) -> bool {
    let Some(range) = range.as_str() else {
        return false;
    };
    let (start, end) = range.split_once('-').unwrap_or((range, range));
    match (start.parse::<u16>(), end.parse::<u16>()) {
        (Ok(start), Ok(end)) => (start..=end).contains(&slot),
        _ => false,
    }
}

/// Kills the primary of [`CLUSTER`] `kills` times under a writer, each once the cluster is whole
/// and settled again, and checks the writer's history on the primary at the end.
pub async fn measure(
    admin: &Client,
    installed: &Installed,
    engine: Engine,
    kills: usize,
) -> anyhow::Result<Failovers> {
    let namespace = installed.clusters_namespace;
    let client = DataClient::connect(admin, namespace, engine, CLUSTER, WRITE_TIMEOUT)
        .await?
        .prepare()
        .await?;
    measure_aimed(admin, installed, engine, Aim::Primary, client, PREFIX, kills).await
}

/// Kills the member `aim` names `kills` times under a writer of `prefix/<n>` through `client`,
/// each once the cluster is whole and settled again, and checks the writer's history at the end.
pub async fn measure_aimed(
    admin: &Client,
    installed: &Installed,
    engine: Engine,
    aim: Aim,
    client: DataClient,
    prefix: &str,
    kills: usize,
) -> anyhow::Result<Failovers> {
    let client = Arc::new(client);
    let writer = start_writer(client.clone(), prefix, MOST_WRITES);
    let killed = kill_primaries(admin, installed, aim, &writer, kills).await;
    let history = writer.stop().await;
    let killed = killed?;

    let held = wait::within(
        "every written key read back from the primary",
        Duration::from_secs(60),
        || client.read_all(),
    )
    .await
    .map_err(anyhow::Error::msg)?;
    let writes_checked = history.check(&held).map_err(|violations| {
        anyhow::anyhow!("{}: lost or invented writes: {violations:#?}", engine.name())
    })?;
    anyhow::ensure!(
        writes_checked > 0,
        "{}: the writer had no write acknowledged",
        engine.name()
    );

    let instants: Vec<Instant> = killed.iter().map(|(_, at, _)| *at).collect();
    let kills = killed
        .into_iter()
        .zip(first_write_after(&history, &instants))
        .map(|((member, _, primary_after), first)| {
            let first = first.with_context(|| format!("no write acknowledged after {member} was killed"))?;
            Ok(Kill {
                member,
                primary_after,
                seconds_to_first_write: first.as_secs_f64(),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Failovers {
        engine,
        one_shard: matches!(aim, Aim::SlotOwner { .. }),
        kills,
        writes_acknowledged: history.acknowledged().count(),
        writes_checked,
    })
}

/// A writer through `client`, as an application writes: `prefix/<n>` every [`WRITE_INTERVAL`],
/// each write given up after [`WRITE_TIMEOUT`], at most `most_writes`.
pub fn start_writer(client: Arc<DataClient>, prefix: &str, most_writes: usize) -> Writer {
    Writer::start(prefix, WRITE_INTERVAL, most_writes, move |key, value| {
        let client = client.clone();
        async move {
            let acknowledged = tokio::time::timeout(WRITE_TIMEOUT, client.write(key, value))
                .await
                .unwrap_or(false);
            if !acknowledged {
                client.after_failure().await;
            }
            acknowledged
        }
    })
}

/// An etcd client of `endpoints` (`http://host:2379`), with the writer's timeouts.
pub async fn etcd_client(endpoints: &[String]) -> anyhow::Result<etcd_client::Client> {
    etcd_client_timing_out(endpoints, WRITE_TIMEOUT).await
}

/// An etcd client of `endpoints` whose connections and requests are given up after `timeout`.
async fn etcd_client_timing_out(
    endpoints: &[String],
    timeout: Duration,
) -> anyhow::Result<etcd_client::Client> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout);
    Ok(etcd_client::Client::connect(endpoints, Some(options)).await?)
}

/// How to reach the Redis server at `address` as the default user with `password`.
pub fn redis_connection_info(
    address: std::net::SocketAddr,
    password: String,
) -> anyhow::Result<redis::ConnectionInfo> {
    use redis::IntoConnectionInfo;
    Ok(
        redis::ConnectionAddr::Tcp(address.ip().to_string(), address.port())
            .into_connection_info()?
            .set_redis_settings(redis::RedisConnectionInfo::default().set_password(password)),
    )
}

/// A connection to the Redis server of `info` whose requests are given up after `timeout`. The
/// crate's own default is half a second, which a bulk pipeline on a busy node outlasts.
pub async fn redis_connection(
    info: &redis::ConnectionInfo,
    timeout: Duration,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    redis::Client::open(info.clone())?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// The kills: for each, the member killed, when, and the primary once all was settled again.
async fn kill_primaries(
    admin: &Client,
    installed: &Installed,
    aim: Aim,
    writer: &Writer,
    kills: usize,
) -> anyhow::Result<Vec<(String, Instant, String)>> {
    let clusters = installed.contender.clusters(admin, installed.clusters_namespace);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), installed.clusters_namespace);
    writer
        .acknowledged_within(writer.acknowledged() + WRITES_FLOWING, Duration::from_secs(60))
        .await
        .map_err(|failure| anyhow::anyhow!("the writer's first writes: {failure}"))?;

    let mut killed = Vec::with_capacity(kills);
    for _ in 0..kills {
        let member = wait::within("a primary", Duration::from_secs(120), || aimed_at(&clusters, aim))
            .await
            .map_err(anyhow::Error::msg)?;
        let pod = pods.get(&member).await?;
        let container = server_container(&pod)?;
        let restarts = real_node::restart_count(&pod, &container);
        let acknowledged = writer.acknowledged();
        let pods_before = cluster_pods(&pods, aim.cluster()).await?.len();
        real_node::kill_container(&pod, &container);
        // Once the signal was sent (`ctr` takes a while to start): a write invoked between the
        // call and the signal would be the old primary's.
        let at = Instant::now();
        if let Err(failure) = writer
            .acknowledged_within(acknowledged + WRITES_FLOWING, RECOVERY_TIMEOUT)
            .await
        {
            // What the operator said then, for the diagnosis: the cluster goes with the run.
            let status = match clusters.get(aim.cluster()).await {
                Ok(cluster) => cluster.data["status"].to_string(),
                Err(error) => format!("unreadable: {error}"),
            };
            anyhow::bail!(
                "writes again after {member} was killed: {failure}; the cluster's status: {status}"
            );
        }
        // The kubelet restarts a container that crashed again with a growing delay (10 s, then
        // doubling up to 5 minutes). Once the client writes again, a server still held back is
        // given a new pod on its volume, so each kill starts from a whole cluster.
        let now = pods.get(&member).await?;
        if now.metadata.uid == pod.metadata.uid && real_node::restart_count(&now, &container) == restarts {
            pods.delete(&member, &Default::default()).await?;
        }
        wait::within(
            &format!("{member} back, every member ready and the cluster settled"),
            RECOVERY_TIMEOUT,
            || async {
                let now = pods.get(&member).await.map_err(|error| error.to_string())?;
                let back = now.metadata.uid != pod.metadata.uid
                    || real_node::restart_count(&now, &container) > restarts;
                let members = cluster_pods(&pods, aim.cluster())
                    .await
                    .map_err(|error| error.to_string())?;
                let ready = members.iter().filter(|pod| real_node::pod_ready(pod)).count();
                let cluster = clusters
                    .get(aim.cluster())
                    .await
                    .map_err(|error| error.to_string())?;
                let settled = installed.contender.is_settled(&cluster);
                (back && ready == pods_before && settled)
                    .then_some(())
                    .ok_or(format!(
                        "{member} back {back}, {ready} of {pods_before} pods ready, settled {settled}"
                    ))
            },
        )
        .await
        .map_err(anyhow::Error::msg)?;
        let after = wait::within("a primary", Duration::from_secs(120), || aimed_at(&clusters, aim))
            .await
            .map_err(anyhow::Error::msg)?;
        eprintln!("[bench] killed {member}'s {container}; primary after: {after}");
        killed.push((member, at, after));
    }
    Ok(killed)
}

/// Every pod of `cluster` (Redis: its Sentinels' too).
async fn cluster_pods(pods: &Api<Pod>, cluster: &str) -> kube::Result<Vec<Pod>> {
    let selector = format!("app.kubernetes.io/instance={cluster}");
    Ok(pods.list(&ListParams::default().labels(&selector)).await?.items)
}

/// The member `aim` names, as the cluster's status reports it.
async fn aimed_at(clusters: &Api<DynamicObject>, aim: Aim) -> Result<String, String> {
    let cluster = clusters
        .get(aim.cluster())
        .await
        .map_err(|error| error.to_string())?;
    aim.member(&cluster.data["status"])
        .ok_or_else(|| "none reported".to_string())
}

/// A member pod's database server: its first container.
pub fn server_container(pod: &Pod) -> anyhow::Result<String> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.containers.first())
        .map(|container| container.name.clone())
        .context("a member pod without containers")
}

/// The administrator's password the operator generated for `cluster` (MySQL's root, Redis's
/// default user); etcd's and MongoDB's are not asked for.
pub async fn generated_password(
    admin: &Client,
    namespace: &str,
    engine: Engine,
    cluster: &str,
) -> anyhow::Result<String> {
    let (secret, key) = match engine {
        Engine::Mysql => (
            mysql_operator::resources::generated_root_secret_name(cluster),
            mysql_operator::resources::PASSWORD_KEY,
        ),
        Engine::Redis => (
            redis_operator::resources::generated_auth_secret_name(cluster),
            redis_operator::resources::PASSWORD_KEY,
        ),
        Engine::Etcd | Engine::Mongodb => anyhow::bail!("no generated password asked for {}", engine.name()),
    };
    Ok(generated_secret(admin, namespace, &secret).await[key].clone())
}

/// Runs `statements` as MySQL's root, again from the first until all of them went through (the
/// primary Service may not reach the primary yet): `what` names them in the timeout's error.
async fn run_as_root(root: &mysql_async::Opts, what: &str, statements: &[String]) -> anyhow::Result<()> {
    wait::within(what, Duration::from_secs(60), || async {
        let mut conn = mysql_async::Conn::new(root.clone())
            .await
            .map_err(|error| error.to_string())?;
        for statement in statements {
            conn.query_drop(statement)
                .await
                .map_err(|error| error.to_string())?;
        }
        Ok(())
    })
    .await
    .map_err(anyhow::Error::msg)
}

/// Every key under `prefix` with its value, read through `client`.
pub async fn etcd_read_prefix(
    client: &etcd_client::Client,
    prefix: &str,
) -> Result<BTreeMap<String, Option<String>>, String> {
    let text = |error: &dyn std::fmt::Display| error.to_string();
    let options = etcd_client::GetOptions::new().with_prefix();
    let read = client
        .clone()
        .get(prefix, Some(options))
        .await
        .map_err(|e| text(&e))?;
    read.kvs()
        .iter()
        .map(|kv| {
            Ok((
                kv.key_str().map_err(|e| text(&e))?.to_string(),
                Some(kv.value_str().map_err(|e| text(&e))?.to_string()),
            ))
        })
        .collect()
}

/// A client of a cluster as an application reaches it from inside the cluster: through the
/// Service that follows the primary (etcd: any member), or, for MongoDB, every member's address,
/// the primary found by asking them.
pub enum DataClient {
    Etcd(Box<etcd_client::Client>),
    Mysql(mysql_async::Opts),
    Redis {
        info: redis::ConnectionInfo,
        request_timeout: Duration,
    },
    Mongodb(MongoMembers),
    /// One shard of a Redis cluster-mode deployment, its writes sent to every data node.
    RedisShard(crate::shard_failover::ShardClient),
}

/// The addresses of a cluster's pods, as a client that cannot resolve their DNS names (the
/// bench runs on the host) knows them. A member given a new pod (the kills replace one the
/// kubelet holds back in crash-loop back-off) has a new address, so they are looked up again
/// once a write failed, as a driver resolves its seed list again.
pub struct PodAddresses {
    pods: Api<Pod>,
    selector: String,
    known: tokio::sync::RwLock<Vec<IpAddr>>,
    /// When they were last looked up.
    looked_up: std::sync::Mutex<Option<Instant>>,
}

/// How often a failing writer may look the addresses up (a LIST of pods each).
const LOOK_UP_AGAIN_AFTER: Duration = Duration::from_secs(2);

impl PodAddresses {
    /// The addresses of the pods matching `selector`, looked up now.
    pub async fn look_up(pods: Api<Pod>, selector: String) -> anyhow::Result<Self> {
        let addresses = Self {
            pods,
            selector,
            known: tokio::sync::RwLock::new(Vec::new()),
            looked_up: std::sync::Mutex::new(None),
        };
        addresses.refresh().await?;
        Ok(addresses)
    }

    pub async fn current(&self) -> Vec<IpAddr> {
        self.known.read().await.clone()
    }

    async fn refresh(&self) -> anyhow::Result<()> {
        *self.looked_up.lock().expect("not poisoned") = Some(Instant::now());
        let listed = self
            .pods
            .list(&ListParams::default().labels(&self.selector))
            .await?;
        let addresses: Vec<IpAddr> = listed
            .items
            .into_iter()
            .filter_map(|pod| pod.status.and_then(|status| status.pod_ip)?.parse().ok())
            .collect();
        anyhow::ensure!(
            !addresses.is_empty(),
            "no pod matching {} has an address",
            self.selector
        );
        *self.known.write().await = addresses;
        Ok(())
    }

    /// Looks them up again unless that was done within [`LOOK_UP_AGAIN_AFTER`]; a failed
    /// look-up keeps those known (the next failing write tries again).
    pub async fn refresh_after_failure(&self) {
        let due = self
            .looked_up
            .lock()
            .expect("not poisoned")
            .is_none_or(|at| at.elapsed() >= LOOK_UP_AGAIN_AFTER);
        if due && let Err(error) = self.refresh().await {
            eprintln!("[bench] looking up {} again: {error:#}", self.selector);
        }
    }
}

/// A client of every member of a MongoDB replica set, at their pods' addresses.
pub struct MongoMembers {
    addresses: PodAddresses,
    username: String,
    password: String,
    /// A client per address, made on first use.
    clients: tokio::sync::Mutex<BTreeMap<IpAddr, mongodb::Client>>,
}

impl MongoMembers {
    /// A client of each member's current address.
    async fn clients(&self) -> anyhow::Result<Vec<mongodb::Client>> {
        let addresses = self.addresses.current().await;
        let mut clients = self.clients.lock().await;
        clients.retain(|ip, _| addresses.contains(ip));
        let mut current = Vec::with_capacity(addresses.len());
        for ip in addresses {
            let client = match clients.entry(ip) {
                std::collections::btree_map::Entry::Occupied(known) => known.get().clone(),
                std::collections::btree_map::Entry::Vacant(new) => {
                    let (username, password) = (&self.username, &self.password);
                    let client = mongodb::Client::with_uri_str(format!(
                        "mongodb://{username}:{password}@{ip}:27017/?directConnection=true&authSource=admin\
                         &retryWrites=false&serverSelectionTimeoutMS=1000&connectTimeoutMS=1000"
                    ))
                    .await?;
                    new.insert(client).clone()
                }
            };
            current.push(client);
        }
        Ok(current)
    }
}

impl DataClient {
    /// A client of `cluster`'s client Service, as an application's, each etcd or Redis request
    /// given up after `request_timeout` (the writer's second; longer for bulk loads, whose
    /// megabyte transactions and pipelines a busy member may take seconds to commit).
    pub async fn connect(
        admin: &Client,
        namespace: &str,
        engine: Engine,
        cluster: &str,
        request_timeout: Duration,
    ) -> anyhow::Result<Self> {
        let service_ip = |service: String| async move {
            real_node::cluster_ip(admin, namespace, &service)
                .await
                .parse::<std::net::IpAddr>()
                .with_context(|| format!("the cluster IP of {service}"))
        };
        Ok(match engine {
            Engine::Etcd => {
                let ip = service_ip(etcd_operator::resources::client_service_name(cluster)).await?;
                let endpoint = format!("http://{ip}:2379");
                DataClient::Etcd(Box::new(
                    etcd_client_timing_out(&[endpoint], request_timeout).await?,
                ))
            }
            Engine::Mysql => {
                let ip = service_ip(mysql_operator::resources::primary_service_name(cluster)).await?;
                let password = generated_password(admin, namespace, engine, cluster).await?;
                let options = mysql_async::OptsBuilder::default()
                    .ip_or_hostname(ip.to_string())
                    .tcp_port(3306)
                    .user(Some("root"))
                    .pass(Some(password))
                    .prefer_socket(false);
                DataClient::Mysql(options.into())
            }
            Engine::Redis => {
                let ip = service_ip(redis_operator::resources::primary_service_name(cluster)).await?;
                let password = generated_password(admin, namespace, engine, cluster).await?;
                DataClient::Redis {
                    info: redis_connection_info(std::net::SocketAddr::new(ip, 6379), password)?,
                    request_timeout,
                }
            }
            Engine::Mongodb => {
                let secret = mongodb_operator::resources::generated_admin_secret_name(cluster);
                let login = generated_secret(admin, namespace, &secret).await;
                let selector =
                    format!("app.kubernetes.io/instance={cluster},app.kubernetes.io/component=member");
                DataClient::Mongodb(MongoMembers {
                    addresses: PodAddresses::look_up(Api::namespaced(admin.clone(), namespace), selector)
                        .await?,
                    username: login[mongodb_operator::resources::USERNAME_KEY].clone(),
                    password: login[mongodb_operator::resources::PASSWORD_KEY].clone(),
                    clients: tokio::sync::Mutex::new(BTreeMap::new()),
                })
            }
        })
    }

    /// What the writes need before the first: MySQL's table, and an application's account to
    /// write with. Not root: an administrator's writes pass `read_only`, so they would be taken
    /// by a restarted primary before the operator reopened it, which no application's are.
    async fn prepare(self) -> anyhow::Result<Self> {
        let DataClient::Mysql(root) = self else {
            return Ok(self);
        };
        run_as_root(
            &root,
            "the benchmark's table and account",
            &[
                format!("CREATE DATABASE IF NOT EXISTS {MYSQL_DATABASE}"),
                format!("CREATE TABLE IF NOT EXISTS {MYSQL_DATABASE}.failover (k VARCHAR(64) PRIMARY KEY, v VARCHAR(64))"),
                format!("CREATE USER IF NOT EXISTS '{MYSQL_USER}'@'%' IDENTIFIED BY '{MYSQL_PASSWORD}'"),
                format!("GRANT SELECT, INSERT ON {MYSQL_DATABASE}.* TO '{MYSQL_USER}'@'%'"),
            ],
        )
        .await?;
        let application = mysql_async::OptsBuilder::from_opts(root)
            .user(Some(MYSQL_USER))
            .pass(Some(MYSQL_PASSWORD));
        Ok(DataClient::Mysql(application.into()))
    }

    /// What bulk writes need before the first: MySQL's table, written as root (the data is
    /// loaded before anything is measured, so root's passing `read_only` does not matter).
    pub async fn prepare_bulk(&self) -> anyhow::Result<()> {
        let DataClient::Mysql(root) = self else {
            return Ok(());
        };
        run_as_root(
            root,
            "the benchmark's bulk table",
            &[
                format!("CREATE DATABASE IF NOT EXISTS {MYSQL_DATABASE}"),
                format!(
                    "CREATE TABLE IF NOT EXISTS {MYSQL_DATABASE}.data (k VARCHAR(64) PRIMARY KEY, v LONGTEXT)"
                ),
            ],
        )
        .await
    }

    /// Writes `pairs` at once (one etcd transaction, one MySQL statement, one Redis pipeline);
    /// any failure fails the load.
    pub async fn write_batch(&self, pairs: Vec<(String, String)>) -> anyhow::Result<()> {
        match self {
            DataClient::Etcd(client) => {
                let puts: Vec<etcd_client::TxnOp> = pairs
                    .into_iter()
                    .map(|(key, value)| etcd_client::TxnOp::put(key, value, None))
                    .collect();
                client
                    .as_ref()
                    .clone()
                    .txn(etcd_client::Txn::new().and_then(puts))
                    .await?;
            }
            DataClient::Mysql(options) => {
                let rows = vec!["(?, ?)"; pairs.len()].join(", ");
                let values: Vec<mysql_async::Value> = pairs
                    .into_iter()
                    .flat_map(|(key, value)| [key.into(), value.into()])
                    .collect();
                let mut conn = mysql_async::Conn::new(options.clone()).await?;
                conn.exec_drop(
                    format!("INSERT INTO {MYSQL_DATABASE}.data VALUES {rows}"),
                    mysql_async::Params::Positional(values),
                )
                .await?;
                conn.disconnect().await?;
            }
            DataClient::Redis {
                info,
                request_timeout,
            } => {
                let mut connection = redis_connection(info, *request_timeout).await?;
                let mut pipeline = redis::pipe();
                for (key, value) in pairs {
                    pipeline.set(key, value).ignore();
                }
                pipeline.query_async::<()>(&mut connection).await?;
            }
            DataClient::Mongodb(_) => anyhow::bail!("no bulk load for MongoDB's simulator"),
            DataClient::RedisShard(_) => anyhow::bail!("no bulk load through one Redis shard"),
        }
        Ok(())
    }

    /// One write on a new connection (a client that reconnects after a failure would make one
    /// anyway, and a pooled one to a dead server would only add a failure): whether the
    /// database acknowledged it.
    async fn write(&self, key: String, value: String) -> bool {
        match self {
            DataClient::Etcd(client) => client.as_ref().clone().put(key, value, None).await.is_ok(),
            DataClient::Mysql(options) => {
                let insert = async {
                    let mut conn = mysql_async::Conn::new(options.clone()).await?;
                    conn.exec_drop(
                        format!("INSERT INTO {MYSQL_DATABASE}.failover VALUES (?, ?)"),
                        (key, value),
                    )
                    .await?;
                    conn.disconnect().await
                };
                insert.await.is_ok()
            }
            DataClient::Redis {
                info,
                request_timeout,
            } => {
                let set = async {
                    let mut connection = redis_connection(info, *request_timeout).await?;
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(&value)
                        .query_async::<()>(&mut connection)
                        .await
                };
                set.await.is_ok()
            }
            // Sent to every member at once, as no client knows the new primary before asking:
            // only the primary takes it, and only a majority's acknowledgement counts.
            DataClient::Mongodb(members) => {
                let Ok(clients) = members.clients().await else {
                    return false;
                };
                let inserts = clients.iter().map(|member| {
                    let collection = member
                        .database("quorum_bench")
                        .collection::<bson::Document>("failover");
                    let document = bson::doc! {"_id": &key, "v": &value};
                    async move {
                        collection
                            .insert_one(document)
                            .write_concern(mongodb::options::WriteConcern::majority())
                            .await
                    }
                    .boxed()
                });
                futures::future::select_ok(inserts).await.is_ok()
            }
            DataClient::RedisShard(shard) => shard.set(key, value).await,
        }
    }

    /// After a write that was not acknowledged: a client that knows its servers by their pods'
    /// addresses looks them up again.
    async fn after_failure(&self) {
        match self {
            DataClient::Etcd(_) | DataClient::Mysql(_) | DataClient::Redis { .. } => {}
            DataClient::Mongodb(members) => members.addresses.refresh_after_failure().await,
            DataClient::RedisShard(shard) => shard.addresses.refresh_after_failure().await,
        }
    }

    /// Every key the writer wrote, with its value, read from the primary.
    async fn read_all(&self) -> Result<BTreeMap<String, Option<String>>, String> {
        let text = |error: &dyn std::fmt::Display| error.to_string();
        match self {
            DataClient::Etcd(client) => etcd_read_prefix(client, PREFIX).await,
            DataClient::Mysql(options) => {
                let mut conn = mysql_async::Conn::new(options.clone())
                    .await
                    .map_err(|e| text(&e))?;
                let rows: Vec<(String, String)> = conn
                    .query(format!("SELECT k, v FROM {MYSQL_DATABASE}.failover"))
                    .await
                    .map_err(|e| text(&e))?;
                Ok(rows.into_iter().map(|(key, value)| (key, Some(value))).collect())
            }
            DataClient::Redis {
                info,
                request_timeout,
            } => {
                let mut connection = redis_connection(info, *request_timeout)
                    .await
                    .map_err(|e| text(&e))?;
                let mut held = BTreeMap::new();
                let mut cursor = 0u64;
                loop {
                    let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(format!("{PREFIX}/*"))
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut connection)
                        .await
                        .map_err(|e| text(&e))?;
                    if !keys.is_empty() {
                        let values: Vec<Option<String>> = redis::cmd("MGET")
                            .arg(&keys)
                            .query_async(&mut connection)
                            .await
                            .map_err(|e| text(&e))?;
                        held.extend(keys.into_iter().zip(values));
                    }
                    if next == 0 {
                        return Ok(held);
                    }
                    cursor = next;
                }
            }
            DataClient::RedisShard(shard) => shard.read_all().await,
            DataClient::Mongodb(members) => {
                // A member that does not answer (a killed one still held back by the kubelet)
                // says nothing about the others: the primary is asked all the same.
                let mut unanswered = Vec::new();
                for member in members.clients().await.map_err(|e| text(&e))? {
                    let hello = match member
                        .database("admin")
                        .run_command(bson::doc! {"hello": 1})
                        .await
                    {
                        Ok(hello) => hello,
                        Err(error) => {
                            unanswered.push(text(&error));
                            continue;
                        }
                    };
                    if !hello.get_bool("isWritablePrimary").unwrap_or(false) {
                        continue;
                    }
                    let documents: Vec<bson::Document> = member
                        .database("quorum_bench")
                        .collection::<bson::Document>("failover")
                        .find(bson::doc! {})
                        .await
                        .map_err(|e| text(&e))?
                        .try_collect()
                        .await
                        .map_err(|e| text(&e))?;
                    return Ok(documents
                        .iter()
                        .filter_map(|document| {
                            let key = document.get_str("_id").ok()?.to_string();
                            Some((key, document.get_str("v").ok().map(str::to_string)))
                        })
                        .collect());
                }
                Err(format!(
                    "no member says it is the primary; unanswered: {unanswered:?}"
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use quorum_e2e::history::Operation;

    use super::*;

    #[test]
    fn the_first_write_after_a_kill_is_the_first_invoked_after_it_and_acknowledged() {
        let start = Instant::now();
        let at = |millis: u64| start + Duration::from_millis(millis);
        let write = |invoked: u64, acknowledged: Option<u64>| Operation {
            key: format!("k{invoked}"),
            value: "v".into(),
            invoked: at(invoked),
            acknowledged: acknowledged.map(at),
        };
        let history = History {
            operations: vec![
                write(0, Some(10)),
                // In flight at the kill, acknowledged after it: the old primary served it.
                write(90, Some(400)),
                write(400, None),
                write(1_400, None),
                write(2_400, Some(2_450)),
                write(2_500, Some(2_510)),
            ],
        };
        assert_eq!(
            first_write_after(&history, &[at(100), at(2_480), at(3_000)]),
            vec![
                Some(Duration::from_millis(2_350)),
                Some(Duration::from_millis(30)),
                None
            ]
        );
    }

    #[test]
    fn the_kills_aim_at_the_reported_primary_or_the_primary_serving_the_slot() {
        let replication = serde_json::json!({"primary": "r-1"});
        let etcd = serde_json::json!({"leader": "e-2"});
        let shards = serde_json::json!({"nodes": [
            {"name": "s-0-0", "role": "Primary", "slots": ["0-5460"]},
            {"name": "s-1-1", "role": "Replica", "slots": ["5461-10922"]},
            {"name": "s-1-0", "role": "Primary", "slots": ["5461-6000", "6001-10922"]},
            {"name": "s-2-0", "role": "Primary", "slots": ["10923-16382", "16383"]},
        ]});
        let owner = |slot| Aim::SlotOwner { cluster: "s", slot };
        let cases = [
            (Aim::Primary, &replication, Some("r-1")),
            (Aim::Primary, &etcd, Some("e-2")),
            (Aim::Primary, &shards, None),
            (owner(0), &shards, Some("s-0-0")),
            (owner(5460), &shards, Some("s-0-0")),
            // A replica that still lists the slots is not aimed at.
            (owner(5461), &shards, Some("s-1-0")),
            (owner(6001), &shards, Some("s-1-0")),
            (owner(16383), &shards, Some("s-2-0")),
            (owner(100), &replication, None),
        ];
        for (aim, status, expected) in cases {
            assert_eq!(aim.member(status).as_deref(), expected, "{aim:?} in {status}");
        }
        let unserved = serde_json::json!({"nodes": [{"name": "s-0-0", "role": "Primary", "slots": ["x-y"]}]});
        assert_eq!(owner(3).member(&unserved), None);
    }

    #[test]
    fn percentiles_are_by_nearest_rank() {
        let twenty: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(nearest_rank(&twenty, 50.0), 10.0);
        assert_eq!(nearest_rank(&twenty, 99.0), 20.0);
        assert_eq!(nearest_rank(&[3.0, 7.0], 50.0), 3.0);
        assert_eq!(nearest_rank(&[3.0, 7.0], 99.0), 7.0);
        assert_eq!(nearest_rank(&[], 99.0), 0.0);
    }

    #[test]
    fn a_kill_moved_the_primary_when_another_member_leads_after_it() {
        let kill = |member: &str, after: &str| Kill {
            member: member.into(),
            primary_after: after.into(),
            seconds_to_first_write: 1.0,
        };
        let failovers = Failovers {
            engine: Engine::Redis,
            one_shard: false,
            kills: vec![kill("a-0", "a-0"), kill("a-0", "a-1"), kill("a-1", "a-1")],
            writes_acknowledged: 3,
            writes_checked: 3,
        };
        assert_eq!(failovers.primary_moved(), 1);
    }
}
