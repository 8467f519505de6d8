//! Shared pieces of the Redis operator's integration tests: the operator run in the test
//! process, specs, the local control plane with real Redis processes behind the pods, and
//! data access as an application would have it.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::Mutex,
    time::Duration,
};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{Api, CustomResourceExt};
use quorum_core::{crd::Storage, naming::loopback_ip};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, generated_secret, install_crd},
    local_members::{LocalMembers, RedisLauncher},
    operator, wait,
};
use redis::{ErrorKind, ServerErrorKind, aio::MultiplexedConnection};
use redis_operator::{
    RedisOperator,
    admin::cluster::key_slot,
    crd::{Mode, Persistence, RedisBackup, RedisCluster, RedisClusterSpec, RedisClusterStatus, SentinelSpec},
    reconcile::{MemberAddresses, MemberConfig, Settings, State},
    resources::{PASSWORD_KEY, generated_auth_secret_name},
    sentinel_events::ListenSettings,
};

/// A running operator; [`Running::stop`] shuts it down as SIGTERM would.
pub type Running = operator::Running<State>;

/// Starts the operator on `namespace`, with pods on loopback addresses.
pub fn start_operator(client: kube::Client, namespace: &str) -> Running {
    start_operator_with(client, namespace, false)
}

/// As [`start_operator`]; with `leader_elect`, it first takes its Lease in `namespace`, as a
/// deployed operator does.
pub fn start_operator_with(client: kube::Client, namespace: &str, leader_elect: bool) -> Running {
    start_operator_rechecking(client, namespace, leader_elect, Duration::from_secs(30))
}

/// As [`start_operator_with`], a settled cluster's next pass `settled_recheck` away unless
/// something wakes it sooner.
pub fn start_operator_rechecking(
    client: kube::Client,
    namespace: &str,
    leader_elect: bool,
    settled_recheck: Duration,
) -> Running {
    let settings = Settings {
        members: MemberConfig {
            cluster_domain: "cluster.local".into(),
            member_addresses: MemberAddresses::Loopback,
            allow_http_backups: true,
            backup_runner: quorum_core::config::BackupRunner::Operator,
        },
        // The local pods have no container runtime: their launcher runs this binary as the
        // restore step's image.
        operator_image: env!("CARGO_BIN_EXE_redis-operator").into(),
        settled_recheck,
        sentinel_events: ListenSettings {
            timeout: Duration::from_millis(1500),
            keepalive: Duration::from_secs(5),
            max_retry_delay: Duration::from_secs(2),
            ..ListenSettings::default()
        },
    };
    operator::start::<RedisOperator>(
        client,
        namespace,
        leader_elect,
        settings,
        Duration::from_millis(1500),
    )
}

/// The local control plane, a test namespace, real Redis processes for its pods, and the
/// operator.
pub struct Setup {
    pub client: kube::Client,
    pub namespace: TestNamespace,
    pub pods: LocalMembers,
    pub operator: Running,
    pub clusters: Api<RedisCluster>,
}

impl Setup {
    pub async fn start(prefix: &str) -> Self {
        Self::start_rechecking(prefix, Duration::from_secs(30)).await
    }

    /// As [`Setup::start`], with the operator's settled clusters rechecked every
    /// `settled_recheck` unless something wakes them sooner.
    pub async fn start_rechecking(prefix: &str, settled_recheck: Duration) -> Self {
        Self::start_with(prefix, settled_recheck, admin_client().await).await
    }

    /// As [`Setup::start_rechecking`], the operator sending its requests through
    /// `operator_client` (a recording one, to count them).
    pub async fn start_with(prefix: &str, settled_recheck: Duration, operator_client: kube::Client) -> Self {
        quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
        quorum_core::install_crypto_provider();
        let client = admin_client().await;
        install_crd(&client, &RedisCluster::crd()).await;
        install_crd(&client, &RedisBackup::crd()).await;
        let namespace = TestNamespace::create(&client, prefix).await;
        let ns = namespace.name().to_string();
        let state = std::env::temp_dir().join(format!("quorum-local-redis-{ns}"));
        let pods = LocalMembers::start(client.clone(), RedisLauncher, state, Some(ns.clone()));
        let operator = start_operator_rechecking(operator_client, &ns, false, settled_recheck);
        let clusters = Api::namespaced(client.clone(), &ns);
        Self {
            client,
            namespace,
            pods,
            operator,
            clusters,
        }
    }

    pub fn ns(&self) -> &str {
        self.namespace.name()
    }

    /// The password the operator generated for `cluster`.
    pub async fn password(&self, cluster: &str) -> String {
        generated_password(&self.client, self.ns(), cluster).await
    }

    /// Creates deployment `name` and waits until it is Ready with `nodes` ready nodes.
    pub async fn create_ready(&self, name: &str, spec: RedisClusterSpec, nodes: i32) -> RedisClusterStatus {
        self.clusters
            .create(&kube::api::PostParams::default(), &RedisCluster::new(name, spec))
            .await
            .unwrap_or_else(|e| panic!("creating RedisCluster {name}: {e}"));
        ready(&self.clusters, name, nodes).await
    }

    /// Polls deployment `name`'s status until `check` accepts it, and returns what `check`
    /// returned; `check`'s error says what it saw instead.
    pub async fn status_until<T>(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(RedisClusterStatus) -> Result<T, String>,
    ) -> T {
        wait::until(what, timeout, || async {
            let cluster = self.clusters.get(name).await.map_err(|e| e.to_string())?;
            check(cluster.status.unwrap_or_default())
        })
        .await
    }

    pub async fn stop(self) {
        self.operator.stop().await;
        drop(self.pods);
        self.namespace.delete().await;
    }
}

/// A replication-mode deployment: a primary, `replicas` replicas and three Sentinels that
/// deem a primary down after two seconds.
pub fn replication_spec(replicas: i32) -> RedisClusterSpec {
    RedisClusterSpec {
        mode: Mode::Replication,
        replicas: Some(replicas),
        sentinel: Some(SentinelSpec {
            replicas: 3,
            quorum: None,
            down_after_millis: 2000,
            failover_timeout_millis: 10_000,
        }),
        shards: None,
        replicas_per_shard: None,
        ..base_spec()
    }
}

/// A cluster-mode deployment of `shards` shards with `replicas_per_shard` replicas each.
pub fn cluster_spec(shards: i32, replicas_per_shard: i32) -> RedisClusterSpec {
    RedisClusterSpec {
        mode: Mode::Cluster,
        shards: Some(shards),
        replicas_per_shard: Some(replicas_per_shard),
        ..base_spec()
    }
}

fn base_spec() -> RedisClusterSpec {
    RedisClusterSpec {
        mode: Mode::Replication,
        replicas: None,
        sentinel: None,
        shards: None,
        replicas_per_shard: None,
        version: "7.0.15".into(),
        image: None,
        storage: Storage {
            size: Quantity("1Gi".into()),
            storage_class_name: None,
        },
        resources: None,
        pod_template: None,
        persistence: Persistence::default(),
        config: BTreeMap::from([("maxmemory".to_string(), "64mb".to_string())]),
        auth_secret: None,
        backup: None,
        restore_from: None,
    }
}

/// Waits until the deployment is Ready with `nodes` ready nodes and nothing left to do.
pub async fn ready(clusters: &Api<RedisCluster>, name: &str, nodes: i32) -> RedisClusterStatus {
    wait::until(
        &format!("{name} Ready with {nodes} ready nodes"),
        Duration::from_secs(180),
        || async {
            let cluster = clusters.get(name).await.map_err(|e| e.to_string())?;
            let status = cluster.status.clone().unwrap_or_default();
            let is = |type_: &str, value: &str| {
                status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == type_ && c.status == value)
            };
            if is("Ready", "True") && is("Progressing", "False") && status.ready_nodes == nodes {
                Ok(status)
            } else {
                Err(format!("{:?}", status))
            }
        },
    )
    .await
}

/// A data connection to `address`, as an application would open one.
pub async fn data_connection(
    address: SocketAddr,
    password: &str,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    use redis::IntoConnectionInfo;
    let info = redis::ConnectionAddr::Tcp(address.ip().to_string(), address.port())
        .into_connection_info()?
        .set_redis_settings(redis::RedisConnectionInfo::default().set_password(password));
    redis::Client::open(info)?
        .get_multiplexed_async_connection_with_config(&application_timeouts())
        .await
}

/// An application's timeouts: seconds, not the client library's default half second for an
/// answer, which a loaded test machine exceeds now and then; a write that times out is one
/// the tests would count as refused.
fn application_timeouts() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(std::time::Duration::from_secs(5)))
        .set_response_timeout(Some(std::time::Duration::from_secs(10)))
}

/// The password the operator generated for `cluster` in `namespace`.
pub async fn generated_password(client: &kube::Client, namespace: &str, cluster: &str) -> String {
    generated_secret(client, namespace, &generated_auth_secret_name(cluster)).await[PASSWORD_KEY].clone()
}

/// An application's write to the primary `status` names, with the generated password, is read
/// back from every replica of a replication-mode deployment.
pub async fn writes_replicate(
    client: &kube::Client,
    namespace: &str,
    cluster: &RedisCluster,
    status: &RedisClusterStatus,
) {
    use redis::AsyncCommands;
    let name = cluster.metadata.name.as_deref().expect("a name");
    let password = generated_password(client, namespace, name).await;
    let address = |ordinal: usize| SocketAddr::new(loopback_ip(namespace, name, ordinal).into(), 6379);
    let primary = status.primary.as_deref().expect("a primary");
    let primary_ordinal: usize = primary
        .strip_prefix(&format!("{name}-"))
        .and_then(|ordinal| ordinal.parse().ok())
        .unwrap_or_else(|| panic!("{primary} is not a node of {name}"));
    let mut connection = data_connection(address(primary_ordinal), &password)
        .await
        .unwrap();
    let _: () = connection.set("greeting", "hello").await.unwrap();
    let nodes = 1 + usize::try_from(cluster.spec.replicas.expect("replicas")).expect("positive");
    for ordinal in (0..nodes).filter(|ordinal| *ordinal != primary_ordinal) {
        let replica = data_connection(address(ordinal), &password).await.unwrap();
        wait::until(
            &format!("the write on {name}-{ordinal}"),
            Duration::from_secs(30),
            || {
                let mut replica = replica.clone();
                async move {
                    let value: Option<String> = replica.get("greeting").await.map_err(|e| e.to_string())?;
                    match value.as_deref() {
                        Some("hello") => Ok(()),
                        other => Err(format!("{other:?}")),
                    }
                }
            },
        )
        .await;
    }
}

/// A minimal cluster-aware client: routes by slot, follows `MOVED` (and remembers it) and
/// `ASK` (once, with `ASKING`), and falls back to its seeds when a node goes away.
pub struct ClusterClient {
    password: String,
    seeds: Vec<SocketAddr>,
    routes: Mutex<HashMap<u16, SocketAddr>>,
    connections: tokio::sync::Mutex<HashMap<SocketAddr, MultiplexedConnection>>,
}

impl ClusterClient {
    pub fn new(seeds: Vec<SocketAddr>, password: &str) -> Self {
        Self {
            password: password.to_string(),
            seeds,
            routes: Mutex::new(HashMap::new()),
            connections: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    async fn connection(&self, address: SocketAddr) -> redis::RedisResult<MultiplexedConnection> {
        let mut connections = self.connections.lock().await;
        if let Some(connection) = connections.get(&address) {
            return Ok(connection.clone());
        }
        let connection = data_connection(address, &self.password).await?;
        connections.insert(address, connection.clone());
        Ok(connection)
    }

    pub async fn execute<T: redis::FromRedisValue>(
        &self,
        key: &str,
        command: redis::Cmd,
    ) -> redis::RedisResult<T> {
        let slot = key_slot(key.as_bytes());
        let mut last = None;
        for attempt in 0..50 {
            let seed = self.seeds[attempt % self.seeds.len()];
            let address = self.routes.lock().unwrap().get(&slot).copied().unwrap_or(seed);
            let result = match self.connection(address).await {
                Ok(mut connection) => command.query_async(&mut connection).await,
                Err(error) => Err(error),
            };
            let error = match result {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let redirect = error
                .redirect_node()
                .and_then(|(node, _)| node.parse::<SocketAddr>().ok());
            match (error.kind(), redirect) {
                (ErrorKind::Server(ServerErrorKind::Moved), Some(node)) => {
                    self.routes.lock().unwrap().insert(slot, node);
                }
                (ErrorKind::Server(ServerErrorKind::Ask), Some(node)) => {
                    let mut connection = self.connection(node).await?;
                    let (value,): (T,) = redis::pipe()
                        .cmd("ASKING")
                        .ignore()
                        .add_command(command.clone())
                        .query_async(&mut connection)
                        .await?;
                    return Ok(value);
                }
                (ErrorKind::Server(ServerErrorKind::TryAgain | ServerErrorKind::ClusterDown), _) => {
                    self.routes.lock().unwrap().remove(&slot);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ if error.is_io_error()
                    || error.is_connection_refusal()
                    || error.is_connection_dropped() =>
                {
                    // The node went away (a removed shard): ask a seed, which redirects.
                    self.routes.lock().unwrap().remove(&slot);
                    self.connections.lock().await.remove(&address);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => return Err(error),
            }
            last = Some(error);
        }
        Err(last.expect("an error after 50 attempts"))
    }

    pub async fn set(&self, key: &str, value: &str) -> redis::RedisResult<()> {
        self.execute(key, redis::cmd("SET").arg(key).arg(value).clone())
            .await
    }

    pub async fn get(&self, key: &str) -> redis::RedisResult<Option<String>> {
        self.execute(key, redis::cmd("GET").arg(key).clone()).await
    }
}
