//! The admin verbs against real `redis-server` and `redis-sentinel` processes.

use std::{
    collections::{BTreeSet, HashMap},
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use quorum_core::availability::metrics::AdminMetrics;
use quorum_e2e::{
    redis::{Mode, RedisProcesses},
    wait,
};
use redis::{ErrorKind, ServerErrorKind, aio::MultiplexedConnection};
use redis_operator::{
    address::{Addresses, Kind},
    admin::{
        AdminError, Credentials, RedisAdmin, Role,
        cluster::{SlotRange, SlotState, key_slot, myself, owner_of, shared_config_epoch, slot_ownership},
        migrate::{MigrationSettings, migrate_slot, migrate_slots},
        rebalance::{PlanError, check_removable, initial_ranges, plan_rebalance},
        sentinel::{SentinelAdmin, SentinelSetting},
        snapshot::place_snapshot,
    },
    clients::RedisClients,
    replication::handover::Handover,
};
use sha2::{Digest, Sha256};

const TIMEOUT: Duration = Duration::from_secs(5);
/// The name the Sentinels know the primary by: the operator's.
const PRIMARY: &str = redis_operator::resources::SENTINEL_PRIMARY_NAME;

async fn admin(address: SocketAddr, password: &str) -> RedisAdmin {
    RedisAdmin::connect(address, Some(Credentials::password(password)), TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("connect to {address}: {e}"))
}

async fn admins(processes: &RedisProcesses) -> Vec<RedisAdmin> {
    let mut all = Vec::new();
    for address in processes.addresses() {
        all.push(admin(address, processes.password()).await);
    }
    all
}

/// A plain data connection, for writing and reading keys as an application would.
async fn data_connection(address: SocketAddr, password: &str) -> MultiplexedConnection {
    crate::support::data_connection(address, password)
        .await
        .unwrap_or_else(|e| panic!("data connection to {address}: {e}"))
}

async fn ids(nodes: &[RedisAdmin]) -> Vec<String> {
    let mut ids = Vec::new();
    for node in nodes {
        ids.push(node.cluster_myid().await.unwrap());
    }
    ids
}

/// Waits until every node sees exactly `expected` (by id, links up) and reports
/// `cluster_state:ok`.
async fn wait_converged(nodes: &[RedisAdmin], expected: &[String], processes: &RedisProcesses) {
    wait::until("the cluster to converge", Duration::from_secs(60), || async {
        for node in nodes {
            if !node
                .cluster_sees_exactly(expected)
                .await
                .map_err(|e| e.to_string())?
            {
                let view = node.cluster_nodes().await.map_err(|e| e.to_string())?;
                return Err(format!(
                    "{} sees {view:?}\n{}",
                    node.endpoint(),
                    processes.log_tails(5)
                ));
            }
            let info = node.cluster_info().await.map_err(|e| e.to_string())?;
            if !info.state_ok {
                return Err(format!("{} reports {info:?}", node.endpoint()));
            }
        }
        // A slot moved before Redis has given colliding primaries distinct epochs can be
        // claimed back by its source, and its keys deleted on the target: the operator waits
        // for this too (`ConfigEpochShared`).
        let mut own = Vec::new();
        for node in nodes {
            own.push(node.cluster_myself().await.map_err(|e| e.to_string())?);
        }
        match shared_config_epoch(&own) {
            Some(shared) => Err(format!("two primaries share a config epoch: {shared:?}")),
            None => Ok(()),
        }
    })
    .await;
}

/// MEETs every node from the first, assigns the slots evenly, waits for `cluster_state:ok`.
async fn form_cluster(processes: &RedisProcesses) -> Vec<RedisAdmin> {
    let nodes = admins(processes).await;
    for other in &nodes[1..] {
        nodes[0].cluster_meet(other.address()).await.unwrap();
    }
    for (node, range) in nodes.iter().zip(initial_ranges(nodes.len())) {
        node.cluster_add_slot_ranges(&[range]).await.unwrap();
    }
    wait_converged(&nodes, &ids(&nodes).await, processes).await;
    nodes
}

/// A minimal cluster-aware client: routes by slot, follows `MOVED` (and remembers it) and
/// `ASK` (once, with `ASKING`), as applications do during a resharding.
struct ClusterClient {
    password: String,
    seed: SocketAddr,
    routes: Mutex<HashMap<u16, SocketAddr>>,
    connections: tokio::sync::Mutex<HashMap<SocketAddr, MultiplexedConnection>>,
}

impl ClusterClient {
    fn new(seed: SocketAddr, password: &str) -> Self {
        Self {
            password: password.to_string(),
            seed,
            routes: Mutex::new(HashMap::new()),
            connections: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    async fn connection(&self, address: SocketAddr) -> MultiplexedConnection {
        let mut connections = self.connections.lock().await;
        if let Some(connection) = connections.get(&address) {
            return connection.clone();
        }
        let connection = data_connection(address, &self.password).await;
        connections.insert(address, connection.clone());
        connection
    }

    async fn execute<T: redis::FromRedisValue>(
        &self,
        key: &str,
        command: redis::Cmd,
    ) -> redis::RedisResult<T> {
        let slot = key_slot(key.as_bytes());
        let mut last = None;
        for _ in 0..50 {
            let address = self
                .routes
                .lock()
                .unwrap()
                .get(&slot)
                .copied()
                .unwrap_or(self.seed);
            let mut connection = self.connection(address).await;
            let error = match command.query_async(&mut connection).await {
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
                    let mut connection = self.connection(node).await;
                    let (value,): (T,) = redis::pipe()
                        .cmd("ASKING")
                        .ignore()
                        .add_command(command.clone())
                        .query_async(&mut connection)
                        .await?;
                    return Ok(value);
                }
                (ErrorKind::Server(ServerErrorKind::TryAgain), _) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                (ErrorKind::Server(ServerErrorKind::ClusterDown), _) => {
                    // A node that no longer knows the slot (a removed node after its reset):
                    // ask the seed again, which redirects to the owner.
                    if self.routes.lock().unwrap().remove(&slot).is_none() {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                _ => return Err(error),
            }
            last = Some(error);
        }
        Err(last.expect("an error after 50 attempts"))
    }

    async fn set(&self, key: &str, value: &str) -> redis::RedisResult<()> {
        self.execute(key, redis::cmd("SET").arg(key).arg(value).clone())
            .await
    }

    async fn get(&self, key: &str) -> redis::RedisResult<Option<String>> {
        self.execute(key, redis::cmd("GET").arg(key).clone()).await
    }
}

fn value_of(key: &str) -> String {
    format!("value-of-{key}")
}

/// Writes `writer-N` keys until stopped; returns the keys acknowledged and the errors seen.
fn start_writer(
    client: Arc<ClusterClient>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(Vec<String>, Vec<String>)> {
    tokio::spawn(async move {
        let mut written = Vec::new();
        let mut errors = Vec::new();
        let mut number = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let key = format!("writer-{number}");
            match client.set(&key, &value_of(&key)).await {
                Ok(()) => written.push(key),
                Err(error) => errors.push(format!("{key}: {error}")),
            }
            number += 1;
            // Paced, so the servers' two cores are left for the migration itself.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        (written, errors)
    })
}

async fn assert_all_readable(client: &ClusterClient, keys: &[String]) {
    for key in keys {
        let value = client.get(key).await.unwrap_or_else(|e| panic!("GET {key}: {e}"));
        assert_eq!(value.as_deref(), Some(value_of(key).as_str()), "key {key}");
    }
}

fn by_id<'a>(nodes: &'a [RedisAdmin], node_ids: &[String], id: &str) -> &'a RedisAdmin {
    let position = node_ids
        .iter()
        .position(|candidate| candidate == id)
        .expect("a known node");
    &nodes[position]
}

/// Plans the moves from the first node's view to an even share over `desired`, and carries
/// them out slot by slot; returns how many slots moved.
async fn rebalance(
    nodes: &[RedisAdmin],
    node_ids: &[String],
    desired: &BTreeSet<String>,
    processes: &RedisProcesses,
) -> usize {
    let current = slot_ownership(&nodes[0].cluster_nodes().await.unwrap());
    let moves = plan_rebalance(&current, desired).unwrap();
    for step in &moves {
        let source = by_id(nodes, node_ids, &step.from);
        let target = by_id(nodes, node_ids, &step.to);
        let others: Vec<RedisAdmin> = nodes
            .iter()
            .zip(node_ids)
            .filter(|(_, id)| **id != step.from && **id != step.to)
            .map(|(node, _)| node.clone())
            .collect();
        migrate_slots(source, target, step.slots, &others, MigrationSettings::default())
            .await
            .unwrap_or_else(|e| panic!("moving {step:?}: {e}\n{}", processes.log_tails(30)));
    }
    moves.iter().map(|step| step.slots.len()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scales_three_to_four_to_three_under_writes_without_losing_keys() {
    let started = Instant::now();
    let mut processes = RedisProcesses::start(Mode::Cluster, 3).await;
    let mut nodes = form_cluster(&processes).await;
    let client = Arc::new(ClusterClient::new(processes.address(0), processes.password()));
    let preloaded: Vec<String> = (0..2000).map(|n| format!("preloaded-{n}")).collect();
    for key in &preloaded {
        client.set(key, &value_of(key)).await.unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = start_writer(client.clone(), stop.clone());

    // Scale out: a fourth node meets the cluster and takes a quarter of the slots.
    let fourth = processes.add_server().await;
    nodes.push(admin(processes.address(fourth), processes.password()).await);
    nodes[0].cluster_meet(processes.address(fourth)).await.unwrap();
    let node_ids = ids(&nodes).await;
    wait_converged(&nodes, &node_ids, &processes).await;
    let four: BTreeSet<String> = node_ids.iter().cloned().collect();
    let scale_out = Instant::now();
    assert_eq!(rebalance(&nodes, &node_ids, &four, &processes).await, 4096);
    eprintln!("moved 4096 slots to the new primary in {:?}", scale_out.elapsed());
    for node in &nodes {
        assert_eq!(
            node.cluster_myself().await.unwrap().slot_count(),
            4096,
            "{}",
            node.endpoint()
        );
    }
    assert_eq!(
        rebalance(&nodes, &node_ids, &four, &processes).await,
        0,
        "balanced: nothing more to move"
    );

    // Scale in: the fourth cannot be removed while it serves slots; its slots go back first.
    let leaving = node_ids[3].clone();
    let ownership = slot_ownership(&nodes[0].cluster_nodes().await.unwrap());
    assert_eq!(
        check_removable(&ownership, &leaving),
        Err(PlanError::StillOwnsSlots {
            node: leaving.clone(),
            slots: 4096
        })
    );
    let three: BTreeSet<String> = node_ids[..3].iter().cloned().collect();
    let scale_in = Instant::now();
    assert_eq!(rebalance(&nodes, &node_ids, &three, &processes).await, 4096);
    let ownership = slot_ownership(&nodes[0].cluster_nodes().await.unwrap());
    check_removable(&ownership, &leaving).unwrap();
    eprintln!(
        "moved 4096 slots off the leaving primary in {:?}",
        scale_in.elapsed()
    );
    for node in &nodes[..3] {
        node.cluster_forget(&leaving).await.unwrap();
    }
    // The removed node forgets the others too, so it does not gossip about them.
    nodes[3].cluster_reset(true).await.unwrap();
    wait_converged(&nodes[..3], &node_ids[..3], &processes).await;
    eprintln!("forgotten after {:?}", scale_in.elapsed());

    stop.store(true, Ordering::Relaxed);
    let (written, errors) = writer.await.unwrap();
    assert!(errors.is_empty(), "writes failed: {errors:?}");
    assert!(
        written.len() > 100,
        "the writer wrote only {} keys",
        written.len()
    );
    assert_all_readable(&client, &preloaded).await;
    assert_all_readable(&client, &written).await;
    let mut total = 0;
    for node in &nodes[..3] {
        total += node.key_count().await.unwrap();
    }
    assert_eq!(
        total as usize,
        preloaded.len() + written.len(),
        "no key lost or duplicated"
    );
    eprintln!(
        "scaled 3 -> 4 -> 3 with {} concurrent writes in {:?}",
        written.len(),
        started.elapsed()
    );
}

/// Keys that all hash to one slot.
fn keys_in_one_slot(tag: &str, count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{{{tag}}}:{n}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_stopped_halfway_is_completed_by_calling_it_again() {
    let processes = RedisProcesses::start(Mode::Cluster, 3).await;
    let nodes = form_cluster(&processes).await;
    let node_ids = ids(&nodes).await;
    let client = ClusterClient::new(processes.address(0), processes.password());

    // Crash after IMPORTING, MIGRATING and one batch of keys.
    let keys = keys_in_one_slot("half", 300);
    for key in &keys {
        client.set(key, &value_of(key)).await.unwrap();
    }
    let slot = key_slot(keys[0].as_bytes());
    let view = nodes[0].cluster_nodes().await.unwrap();
    let source_id = owner_of(&view, slot).unwrap().id.clone();
    let source = by_id(&nodes, &node_ids, &source_id);
    let target_id = node_ids.iter().find(|id| **id != source_id).unwrap().clone();
    let target = by_id(&nodes, &node_ids, &target_id);
    let others: Vec<RedisAdmin> = nodes
        .iter()
        .filter(|node| node.address() != source.address() && node.address() != target.address())
        .cloned()
        .collect();
    target
        .cluster_set_slot(slot, &SlotState::Importing(source_id.clone()))
        .await
        .unwrap();
    source
        .cluster_set_slot(slot, &SlotState::Migrating(target_id.clone()))
        .await
        .unwrap();
    let batch = source.keys_in_slot(slot, 50).await.unwrap();
    let options = redis_operator::admin::cluster::MigrateOptions {
        timeout: TIMEOUT,
        replace: true,
    };
    source
        .migrate_keys(target.address(), target.credentials(), &batch, options)
        .await
        .unwrap();
    assert_eq!(source.count_keys_in_slot(slot).await.unwrap(), 250);
    assert_all_readable(&client, &keys).await; // through ASK while half moved

    let report = migrate_slot(source, target, slot, &others, MigrationSettings::default())
        .await
        .unwrap();
    assert_eq!(report.keys_moved, 250);
    assert!(!report.already_done);
    assert_eq!(target.count_keys_in_slot(slot).await.unwrap(), 300);
    assert_eq!(source.count_keys_in_slot(slot).await.unwrap(), 0);
    for node in &nodes {
        let view = node.cluster_nodes().await.unwrap();
        assert_eq!(
            owner_of(&view, slot).unwrap().id,
            target_id,
            "{}",
            node.endpoint()
        );
        let me = myself(&view).unwrap();
        assert!(me.migrating_to(slot).is_none() && me.importing_from(slot).is_none());
    }
    assert_all_readable(&client, &keys).await;
    let again = migrate_slot(source, target, slot, &others, MigrationSettings::default())
        .await
        .unwrap();
    assert!(again.already_done, "a finished move is a no-op");

    // Crash after the target took the slot but before the source was told.
    let keys = keys_in_one_slot("late", 40);
    for key in &keys {
        client.set(key, &value_of(key)).await.unwrap();
    }
    let slot = key_slot(keys[0].as_bytes());
    let view = nodes[0].cluster_nodes().await.unwrap();
    let source_id = owner_of(&view, slot).unwrap().id.clone();
    let source = by_id(&nodes, &node_ids, &source_id);
    let target_id = node_ids.iter().find(|id| **id != source_id).unwrap().clone();
    let target = by_id(&nodes, &node_ids, &target_id);
    target
        .cluster_set_slot(slot, &SlotState::Importing(source_id.clone()))
        .await
        .unwrap();
    source
        .cluster_set_slot(slot, &SlotState::Migrating(target_id.clone()))
        .await
        .unwrap();
    let batch = source.keys_in_slot(slot, 100).await.unwrap();
    source
        .migrate_keys(target.address(), target.credentials(), &batch, options)
        .await
        .unwrap();
    target
        .cluster_set_slot(slot, &SlotState::Node(target_id.clone()))
        .await
        .unwrap();
    let report = migrate_slot(source, target, slot, &[], MigrationSettings::default())
        .await
        .unwrap();
    assert!(report.already_done);
    let source_me = source.cluster_myself().await.unwrap();
    assert!(!source_me.owns(slot) && source_me.migrating_to(slot).is_none());
    assert_all_readable(&client, &keys).await;

    // A slot neither node owns is refused, not taken from its owner.
    let elsewhere = (0..16384u16)
        .find(|slot| {
            owner_of(&view, *slot).is_some_and(|owner| owner.id != source_id && owner.id != target_id)
        })
        .unwrap();
    let refused = migrate_slot(source, target, elsewhere, &[], MigrationSettings::default()).await;
    assert!(
        matches!(
            refused,
            Err(redis_operator::admin::migrate::MigrationError::NotOwned { .. })
        ),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_added_synced_and_removed() {
    let processes = RedisProcesses::start(Mode::Standalone, 2).await;
    let primary = admin(processes.address(0), processes.password()).await;
    let replica = admin(processes.address(1), processes.password()).await;
    let mut data = data_connection(processes.address(0), processes.password()).await;
    for n in 0..500 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{n}"))
            .arg(n)
            .query_async(&mut data)
            .await
            .unwrap();
    }

    replica
        .set_primary_credentials(&Credentials::password(processes.password()))
        .await
        .unwrap();
    replica.replicate_from(primary.address()).await.unwrap();
    replica
        .wait_for_sync(&primary, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(replica.key_count().await.unwrap(), 500);
    let info = replica.replication_info().await.unwrap();
    assert_eq!(info.role, Role::Replica);
    assert!(info.follows(primary.address()) && info.link_up);
    // The primary marks the replica online at its first acknowledgement after loading, a
    // moment after the replica reports its link up.
    let replica_ip = processes.address(1).ip().to_string();
    wait::until(
        "the primary seeing the replica online",
        Duration::from_secs(30),
        || async {
            let seen = primary.replication_info().await.map_err(|e| e.to_string())?;
            match seen.replica(&replica_ip, 6379).map(|r| r.state.clone()) {
                Some(state) if state == "online" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let seen = primary.replication_info().await.unwrap();
    replica.ensure_replica_of(primary.address()).await.unwrap(); // already: no resync
    assert_eq!(
        replica.replication_info().await.unwrap().replication_id,
        seen.replication_id
    );

    replica.promote().await.unwrap();
    wait::until(
        "the primary to drop its replica",
        Duration::from_secs(10),
        || async {
            let seen = primary.replication_info().await.map_err(|e| e.to_string())?;
            match seen.replica(&replica_ip, 6379) {
                None => Ok(()),
                Some(entry) => Err(format!("{entry:?}")),
            }
        },
    )
    .await;
    let info = replica.replication_info().await.unwrap();
    assert_eq!(info.role, Role::Primary);
    assert_eq!(
        replica.key_count().await.unwrap(),
        500,
        "a promoted replica keeps its data"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_and_refused_are_told_apart_and_passwords_never_show() {
    let processes = RedisProcesses::start(Mode::Standalone, 1).await;
    let password = processes.password().to_string();

    let nobody: SocketAddr = format!("{}:6379", processes.ip(99)).parse().unwrap();
    let error = RedisAdmin::connect(nobody, Some(Credentials::password(&password)), TIMEOUT)
        .await
        .unwrap_err();
    assert!(error.is_unreachable(), "{error:?}");

    let wrong = RedisAdmin::connect(
        processes.address(0),
        Some(Credentials::password("not-it")),
        TIMEOUT,
    )
    .await
    .unwrap_err();
    assert!(matches!(wrong, AdminError::Refused { .. }), "{wrong:?}");
    assert!(!format!("{wrong} {wrong:?}").contains("not-it"));

    let node = admin(processes.address(0), &password).await;
    let refused = node.cluster_myid().await.unwrap_err();
    match &refused {
        AdminError::Refused { command, message, .. } => {
            assert_eq!(*command, "CLUSTER MYID");
            assert!(message.contains("cluster support disabled"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let shown = format!("{node:?} {refused} {refused:?}");
    assert!(!shown.contains(&password), "{shown}");
    let server = node.server_info().await.unwrap();
    assert!(server.version.starts_with('7'), "{server:?}");
}

/// The primary every Sentinel names for `main`, once they agree on one other than `old`.
async fn primary_all_name(sentinels: &[SentinelAdmin], old: SocketAddr) -> Result<SocketAddr, String> {
    let mut answers = BTreeSet::new();
    for sentinel in sentinels {
        answers.insert(
            sentinel
                .primary_address(PRIMARY)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    match answers.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(address)] if *address != old => Ok(*address),
        other => Err(format!("sentinels answer {other:?}")),
    }
}

/// Servers 1 and 2 replicate server 0, and three Sentinels watch it (as [`PRIMARY`], quickly: down
/// after one second) and know every replica and one another.
async fn watched_by_sentinels(processes: &mut RedisProcesses) -> (Vec<RedisAdmin>, Vec<SentinelAdmin>) {
    let password = processes.password().to_string();
    let servers = admins(processes).await;
    for replica in &servers[1..] {
        replica.replicate_from(servers[0].address()).await.unwrap();
    }
    for replica in &servers[1..] {
        replica
            .wait_for_sync(&servers[0], Duration::from_secs(30))
            .await
            .unwrap();
    }

    processes.start_sentinels(3).await;
    let mut sentinels = Vec::new();
    for index in 0..3 {
        let sentinel = SentinelAdmin::connect(
            processes.sentinel_address(index),
            Some(Credentials::password(&password)),
            TIMEOUT,
        )
        .await
        .unwrap();
        sentinel.monitor(PRIMARY, servers[0].address(), 2).await.unwrap();
        for setting in [
            SentinelSetting::Auth(Credentials::password(&password)),
            SentinelSetting::DownAfter(Duration::from_millis(1000)),
            SentinelSetting::FailoverTimeout(Duration::from_millis(3000)),
        ] {
            sentinel.set(PRIMARY, &setting).await.unwrap();
        }
        sentinels.push(sentinel);
    }
    wait::until(
        "the sentinels to find each other and the replicas",
        Duration::from_secs(30),
        || async {
            for sentinel in &sentinels {
                let seen = sentinel.primary(PRIMARY).await.map_err(|e| e.to_string())?;
                if seen.other_sentinels != 2 || seen.replicas != 2 {
                    return Err(format!("{} sees {seen:?}", sentinel.endpoint()));
                }
                sentinel.check_quorum(PRIMARY).await.map_err(|e| e.to_string())?;
            }
            Ok(())
        },
    )
    .await;
    (servers, sentinels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_fail_over_to_a_replica_and_the_old_primary_rejoins_as_a_replica() {
    let mut processes = RedisProcesses::start(Mode::Standalone, 3).await;
    let password = processes.password().to_string();
    let mut data = data_connection(processes.address(0), &password).await;
    let _: () = redis::cmd("SET")
        .arg("before")
        .arg("failover")
        .query_async(&mut data)
        .await
        .unwrap();
    let (servers, sentinels) = watched_by_sentinels(&mut processes).await;
    assert_eq!(sentinels[0].replicas(PRIMARY).await.unwrap().len(), 2);

    processes.kill(0).await;
    let old = servers[0].address();
    let new_primary = wait::until("a replica to be promoted", Duration::from_secs(60), || async {
        primary_all_name(&sentinels, old)
            .await
            .map_err(|error| format!("{error}\n{}", processes.log_tails(8)))
    })
    .await;
    let promoted = servers.iter().find(|s| s.address() == new_primary).unwrap();
    // Sentinel kills the promoted server's clients (ours included): the first call may find
    // the connection broken, the next reconnects.
    let role = match promoted.replication_info().await {
        Err(error) if error.is_unreachable() => promoted.replication_info().await,
        other => other,
    };
    assert_eq!(role.unwrap().role, Role::Primary);

    // The old primary comes back (empty: nothing persisted) claiming to be a primary; the
    // Sentinels turn it into a replica of the primary they name. That may no longer be the
    // first one they agreed on: a failover that overruns its timeout is retried with another
    // replica.
    processes.restart(0).await;
    let returned = admin(old, &password).await;
    let new_primary = wait::until(
        "the old primary to follow the primary the sentinels name",
        Duration::from_secs(60),
        || async {
            let named = primary_all_name(&sentinels, old).await?;
            let info = returned.replication_info().await.map_err(|e| e.to_string())?;
            if info.follows(named) && info.link_up {
                Ok(named)
            } else {
                Err(format!(
                    "sentinels name {named}; the old primary reports {info:?}"
                ))
            }
        },
    )
    .await;
    // A fresh connection: Sentinel kills the clients of every server it promotes.
    let promoted = admin(new_primary, &password).await;
    returned.ensure_replica_of(new_primary).await.unwrap();
    returned
        .wait_for_sync(&promoted, Duration::from_secs(30))
        .await
        .unwrap();
    let mut read = data_connection(old, &password).await;
    let value: Option<String> = redis::cmd("GET")
        .arg("before")
        .query_async(&mut read)
        .await
        .unwrap();
    assert_eq!(value.as_deref(), Some("failover"));

    assert_eq!(sentinels[0].reset(PRIMARY).await.unwrap(), 1);
    sentinels[0].remove(PRIMARY).await.unwrap();
    assert_eq!(sentinels[0].primary_address(PRIMARY).await.unwrap(), None);
    assert!(
        sentinels[0]
            .primary(PRIMARY)
            .await
            .unwrap_err()
            .refusal()
            .is_some()
    );
}

/// The operator's handover under a writer that writes to the old primary as fast as it
/// answers, for as long as the test runs: the role moves to a replica, the old primary follows
/// it (at once, not when the Sentinels get round to it) and refuses writes from then on, and
/// every write it acknowledged is on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_moves_the_primary_without_losing_an_acknowledged_write() {
    let mut processes = RedisProcesses::start(Mode::Standalone, 3).await;
    let password = processes.password().to_string();
    let (servers, sentinels) = watched_by_sentinels(&mut processes).await;
    let cluster = "handover/main";
    let clients = RedisClients::new(Default::default(), AdminMetrics::default());
    clients
        .set_credentials(cluster, Credentials::password(&password))
        .await;
    for ordinal in 0..3 {
        clients
            .route(cluster, Kind::Node, ordinal, processes.address(ordinal))
            .await;
        clients
            .route(
                cluster,
                Kind::Sentinel,
                ordinal,
                processes.sentinel_address(ordinal),
            )
            .await;
    }

    // The writer: one key after another to the old primary, bounded in count and time.
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let refused = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (stop, acknowledged, refused) = (stop.clone(), acknowledged.clone(), refused.clone());
        let (address, password) = (processes.address(0), password.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut connection = data_connection(address, &password).await;
            for n in 0..200_000 {
                if stop.load(Ordering::SeqCst) || Instant::now() > deadline {
                    break;
                }
                let key = format!("handover-{n}");
                let written: redis::RedisResult<()> = redis::cmd("SET")
                    .arg(&key)
                    .arg(value_of(&key))
                    .query_async(&mut connection)
                    .await;
                match written {
                    Ok(()) => acknowledged.lock().unwrap().push(key),
                    Err(_) => {
                        refused.fetch_add(1, Ordering::SeqCst);
                        connection = data_connection(address, &password).await;
                    }
                }
            }
        })
    };
    wait::until("writes acknowledged", Duration::from_secs(30), || async {
        let count = acknowledged.lock().unwrap().len();
        (count >= 500)
            .then_some(())
            .ok_or(format!("{count} acknowledged"))
    })
    .await;

    // Every call is routed above: the addresses are never resolved.
    let addresses = Addresses {
        nodes: redis_operator::resources::DataNodes::one_statefulset("main"),
        hosts: quorum_core::naming::PodHosts::Loopback {
            namespace: "handover".into(),
        },
    };
    let handover = Handover {
        clients: &clients,
        cluster,
        addresses: &addresses,
        primary: 0,
        primary_address: processes.address(0),
        replicas: vec![(1, processes.address(1)), (2, processes.address(2))],
        sentinel: 0,
    };
    let promoted = handover.run().await.expect("the handover");
    assert_ne!(promoted, 0);
    let new_primary = processes.address(promoted);
    let old = servers[0].replication_info().await.unwrap();
    assert!(
        old.follows(new_primary),
        "the old primary follows {new_primary}: {old:?}"
    );

    // The writer goes on writing to the old primary, which refuses it now.
    let acknowledged_at_handover = acknowledged.lock().unwrap().len();
    wait::until(
        "the old primary refusing writes",
        Duration::from_secs(30),
        || async {
            let refused = refused.load(Ordering::SeqCst);
            (refused > 0).then_some(()).ok_or(format!("{refused} refused"))
        },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() <= acknowledged_at_handover + 1,
        "the old primary acknowledged {} writes after it handed over",
        acknowledged.len() - acknowledged_at_handover
    );

    let mut read = data_connection(new_primary, &password).await;
    for key in &acknowledged {
        let value: Option<String> = redis::cmd("GET").arg(key).query_async(&mut read).await.unwrap();
        assert_eq!(
            value.as_deref(),
            Some(value_of(key).as_str()),
            "acknowledged write {key} lost in the handover ({} acknowledged)",
            acknowledged.len()
        );
    }
    let named = primary_all_name(&sentinels, servers[0].address()).await.unwrap();
    assert_eq!(named, new_primary, "every Sentinel names the new primary");

    // A handover that cannot complete (a replica gone, so it can never be shown caught up)
    // leaves the primary as it was: still the primary, taking writes, its fence as before.
    let other = (1..3).find(|o| *o != promoted).unwrap();
    // A fresh connection: Sentinel kills the clients of every server it promotes.
    let primary_admin = admin(new_primary, &password).await;
    let fence = primary_admin.write_fence().await.unwrap();
    processes.kill(other).await;
    let refused_handover = Handover {
        clients: &clients,
        cluster,
        addresses: &addresses,
        primary: promoted,
        primary_address: new_primary,
        replicas: vec![(0, processes.address(0)), (other, processes.address(other))],
        sentinel: 1,
    };
    refused_handover
        .run()
        .await
        .expect_err("a handover with a replica gone");
    assert_eq!(
        primary_admin.replication_info().await.unwrap().role,
        Role::Primary
    );
    assert_eq!(
        primary_admin.write_fence().await.unwrap(),
        fence,
        "the fence set back"
    );
    let mut write = data_connection(new_primary, &password).await;
    let _: () = redis::cmd("SET")
        .arg("after-a-refused-handover")
        .arg("written")
        .query_async(&mut write)
        .await
        .expect("the primary takes writes again at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rdb_snapshot_taken_over_sync_restores_identical_keys() {
    let mut processes = RedisProcesses::start(Mode::Standalone, 1).await;
    let password = processes.password().to_string();
    let source = admin(processes.address(0), &password).await;
    let mut data = data_connection(processes.address(0), &password).await;
    for n in 0..1000 {
        let _: () = redis::cmd("SET")
            .arg(format!("string-{n}"))
            .arg(format!("v{n}").repeat(n % 7 + 1))
            .query_async(&mut data)
            .await
            .unwrap();
    }
    for n in 0..20 {
        let _: () = redis::cmd("HSET")
            .arg(format!("hash-{n}"))
            .arg("a")
            .arg(n)
            .arg("b")
            .arg("x")
            .query_async(&mut data)
            .await
            .unwrap();
        let _: () = redis::cmd("RPUSH")
            .arg(format!("list-{n}"))
            .arg(1)
            .arg(2)
            .arg(n)
            .query_async(&mut data)
            .await
            .unwrap();
    }

    // Both framings: a snapshot written to disk first ($<length>), and a diskless one
    // ($EOF:<mark>, Redis 7's default).
    let mut snapshots = Vec::new();
    for diskless in ["no", "yes"] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("repl-diskless-sync")
            .arg(diskless)
            .query_async(&mut data)
            .await
            .unwrap();
        let mut bytes = Vec::new();
        let info = source.snapshot(&mut bytes, TIMEOUT).await.unwrap();
        assert_eq!(info.size, bytes.len() as u64);
        assert_eq!(
            info.sha256,
            hex::encode(Sha256::digest(&bytes)),
            "the checksum is of the bytes written"
        );
        assert!(bytes.starts_with(b"REDIS"));
        snapshots.push((info, bytes));
    }
    let (info, bytes) = snapshots.pop().unwrap();

    let index = 1;
    let dir = processes.server_dir(index);
    std::fs::create_dir_all(&dir).unwrap();
    let damaged = place_snapshot(&mut &bytes[..bytes.len() - 1], &dir, &info.sha256).await;
    assert!(damaged.is_err(), "a truncated snapshot is never placed");
    place_snapshot(&mut &bytes[..], &dir, &info.sha256).await.unwrap();
    assert_eq!(processes.add_server().await, index);
    let restored = admin(processes.address(index), &password).await;
    assert_eq!(
        restored.key_count().await.unwrap(),
        source.key_count().await.unwrap()
    );
    let mut restored_data = data_connection(processes.address(index), &password).await;
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut data).await.unwrap();
    assert_eq!(keys.len(), 1040);
    for key in &keys {
        // DUMP serialises any type the same way on the same version: equal bytes, equal value.
        let original: Vec<u8> = redis::cmd("DUMP").arg(key).query_async(&mut data).await.unwrap();
        let copy: Vec<u8> = redis::cmd("DUMP")
            .arg(key)
            .query_async(&mut restored_data)
            .await
            .unwrap();
        assert_eq!(original, copy, "key {key}");
    }
}

/// What a snapshot holds, read as it streams, is what the server holds: every key without an
/// expiry, of every type and encoding Redis writes (integers, compressed strings, list packs,
/// intsets, hash tables, quicklists, streams with consumer groups), in two databases, digested
/// as the server's own answers (`SCAN`, `TYPE`, `GET`) give them; keys with an expiry counted
/// apart. A server restored from the snapshot reads the same, and a changed value does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rdb_snapshot_is_read_for_what_it_holds_and_a_restored_copy_holds_the_same() {
    use quorum_core::backup::digest::ContentDigest;

    let mut processes = RedisProcesses::start(Mode::Standalone, 1).await;
    let password = processes.password().to_string();
    let source = admin(processes.address(0), &password).await;
    let mut db0 = data_connection(processes.address(0), &password).await;
    let mut db1 = data_connection(processes.address(0), &password).await;
    let _: () = redis::cmd("SELECT").arg(1).query_async(&mut db1).await.unwrap();
    let run = |connection: &mut MultiplexedConnection, words: Vec<String>| {
        let mut command = redis::cmd(&words[0]);
        for word in &words[1..] {
            command.arg(word);
        }
        let mut connection = connection.clone();
        async move {
            let _: redis::Value = command.query_async(&mut connection).await.unwrap();
        }
    };
    let words = |text: &str| text.split(' ').map(str::to_string).collect::<Vec<_>>();
    let many = |prefix: &str, count: usize, pairs: bool| {
        (0..count)
            .flat_map(|n| {
                let member = format!("{prefix}{n}");
                if pairs {
                    vec![n.to_string(), member]
                } else {
                    vec![member]
                }
            })
            .collect::<Vec<_>>()
    };
    for command in [
        "SET int 12345",
        "SET small-int -7",
        "SET short hello",
        "SET volatile-string gone-later EX 3600",
        "RPUSH short-list a b c",
        "SADD small-intset 1 2 3",
        "SADD small-set a b c",
        "ZADD small-zset 1 a 2 b",
        "HSET small-hash f1 v1 f2 v2",
        "XADD stream 1-1 field value",
        "XADD stream 2-1 field value",
        "XGROUP CREATE stream readers 0",
        "EXPIRE short-list 3600",
    ] {
        run(&mut db0, words(command)).await;
    }
    run(
        &mut db0,
        words("XREADGROUP GROUP readers reader-1 COUNT 1 STREAMS stream >"),
    )
    .await;
    run(
        &mut db0,
        vec!["SET".into(), "compressible".into(), "abc".repeat(200)],
    )
    .await;
    run(
        &mut db0,
        vec![
            "SET".into(),
            "incompressible".into(),
            hex::encode(Sha256::digest(b"x")),
        ],
    )
    .await;
    run(
        &mut db0,
        [
            vec!["RPUSH".into(), "long-list".into()],
            many("item-", 2000, false),
        ]
        .concat(),
    )
    .await;
    run(
        &mut db0,
        [
            vec!["SADD".into(), "large-set".into()],
            many("member-", 300, false),
        ]
        .concat(),
    )
    .await;
    run(
        &mut db0,
        [
            vec!["ZADD".into(), "large-zset".into()],
            many("member-", 300, true),
        ]
        .concat(),
    )
    .await;
    run(
        &mut db0,
        [
            vec!["HSET".into(), "large-hash".into()],
            many("field-", 600, true),
        ]
        .concat(),
    )
    .await;
    run(&mut db1, words("SET in-db-1 one")).await;
    run(&mut db1, words("SADD set-in-db-1 x y")).await;

    // The digest as the server's own answers give it.
    let mut expected = ContentDigest::default();
    let mut volatile = 0;
    for (database, connection) in [(0u64, &mut db0), (1u64, &mut db1)] {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(connection).await.unwrap();
        for key in keys {
            let ttl: i64 = redis::cmd("TTL").arg(&key).query_async(connection).await.unwrap();
            if ttl != -1 {
                volatile += 1;
                continue;
            }
            let kind: String = redis::cmd("TYPE")
                .arg(&key)
                .query_async(connection)
                .await
                .unwrap();
            let value: Vec<u8> = if kind == "string" {
                redis::cmd("GET").arg(&key).query_async(connection).await.unwrap()
            } else {
                Vec::new()
            };
            expected.add_parts(&[
                &database.to_be_bytes(),
                &(key.len() as u64).to_be_bytes(),
                key.as_bytes(),
                kind.as_bytes(),
                b"\0",
                &value,
            ]);
        }
    }

    let mut bytes = Vec::new();
    let (info, content) = source.snapshot_with_content(&mut bytes, TIMEOUT).await.unwrap();
    let content = content.expect("every type is read");
    assert_eq!(info.size, bytes.len() as u64, "the snapshot is whole besides");
    assert_eq!(content.volatile, volatile);
    assert_eq!(
        content.persistent,
        expected,
        "{} keys without an expiry",
        expected.records()
    );
    assert_eq!(content.persistent.records(), 16);

    // Restored on another server, whose snapshot is read alike.
    let index = 1;
    let dir = processes.server_dir(index);
    std::fs::create_dir_all(&dir).unwrap();
    place_snapshot(&mut &bytes[..], &dir, &info.sha256).await.unwrap();
    assert_eq!(processes.add_server().await, index);
    let restored = admin(processes.address(index), &password).await;
    let (_, restored_content) = restored
        .snapshot_with_content(&mut tokio::io::sink(), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(restored_content.unwrap().fingerprint(), content.fingerprint());

    // A value changed is a content that differs.
    let mut changed = data_connection(processes.address(index), &password).await;
    run(&mut changed, words("SET short hullo")).await;
    let (_, changed_content) = restored
        .snapshot_with_content(&mut tokio::io::sink(), TIMEOUT)
        .await
        .unwrap();
    let changed_content = changed_content.unwrap().fingerprint();
    assert_eq!(changed_content.records, content.fingerprint().records);
    assert!(content.fingerprint().mismatch(&changed_content).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_restarted_on_new_addresses_keeps_its_ids_and_recovers_by_meet() {
    let mut processes = RedisProcesses::start(Mode::Cluster, 3).await;
    let nodes = form_cluster(&processes).await;
    let before = ids(&nodes).await;
    drop(nodes);

    for index in 0..3 {
        processes.kill(index).await;
    }
    for index in 0..3 {
        let new_ip = processes.ip(50 + index as u8);
        processes.restart_on(index, new_ip).await;
    }
    let nodes = admins(&processes).await;
    assert_eq!(ids(&nodes).await, before, "node ids survive in nodes.conf");
    // Each node still has the others at their old addresses: they cannot reach each other.
    let view = nodes[0].cluster_nodes().await.unwrap();
    let old_peer = view.iter().find(|node| node.id == before[1]).unwrap();
    assert_ne!(old_peer.address, Some(processes.address(1)));

    // What the operator does: introduce the nodes at their new addresses.
    for other in &nodes[1..] {
        nodes[0].cluster_meet(other.address()).await.unwrap();
    }
    wait_converged(&nodes, &before, &processes).await;
    for node in &nodes {
        let view = node.cluster_nodes().await.unwrap();
        for (index, id) in before.iter().enumerate() {
            let entry = view.iter().find(|n| n.id == *id).unwrap();
            assert_eq!(
                entry.address,
                Some(processes.address(index)),
                "{} sees {id}",
                node.endpoint()
            );
        }
        assert_eq!(
            slot_ownership(&view)
                .values()
                .flatten()
                .map(SlotRange::len)
                .sum::<usize>(),
            16384
        );
    }
}
