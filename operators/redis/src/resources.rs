//! Pure builders: a `RedisCluster` in, the Kubernetes objects it needs out. No API calls here;
//! every builder is unit-tested without a cluster.
//!
//! Every data node starts as a primary of nothing (replication mode) or as a lone cluster node
//! (cluster mode); only the operator, after observing the deployment, tells a node whom to
//! follow or which slots to serve. The `start.sh` scripts in the ConfigMaps write the server's
//! configuration, password included, into a memory volume from the mounted Secret, so the
//! password is never on a command line, in an environment variable or in a ConfigMap.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::{StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy},
        core::v1::{
            ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, KeyToPath, PodSpec, Probe,
            Secret, SecretVolumeSource, Service, ServicePort, ServiceSpec, TCPSocketAction, Volume,
        },
        policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec},
    },
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};
use kube::ResourceExt;
use quorum_core::{
    apply::child_metadata,
    crd::Storage,
    naming::{child_name, label_selector, selector_labels, standard_labels},
    pod::{
        MemberPods, affinity_or_spread, field_env, keep_apart, member_container_security, member_statefulset,
        memory_volume, mount, value_env,
    },
};

use crate::{
    OPERATOR_NAME,
    crd::{DataLayout, Mode, RedisCluster, RestoreSnapshot, RestoreStatus},
    restore::snapshot_argument,
};

/// `app.kubernetes.io/name` of everything this operator creates.
pub const APP: &str = "redis";
/// `app.kubernetes.io/component` of the data nodes and of the Sentinels.
pub const NODE_COMPONENT: &str = "node";
pub const SENTINEL_COMPONENT: &str = "sentinel";
pub const PORT: i32 = 6379;
pub const SENTINEL_PORT: i32 = 26379;
/// The label the operator sets on data pods from what it observed: the primary and replicas
/// Services select on it.
pub const ROLE_LABEL: &str = "redis.quorum.dev/role";
/// The key of the password in the auth Secret, and the file the pods read it from.
pub const PASSWORD_KEY: &str = "password";
/// The name Sentinel knows the primary by (`SENTINEL MONITOR <name> ...`).
pub const SENTINEL_PRIMARY_NAME: &str = "primary";
/// The init container of a restored cluster's data pods.
pub const RESTORE_CONTAINER: &str = "restore";
/// The data pods' server container (a Sentinel pod's is `sentinel`).
pub const SERVER_CONTAINER: &str = "redis";

const CONFIG_DIR: &str = "/etc/redis/quorum";
const CREDENTIALS_DIR: &str = "/etc/redis/credentials";
const DATA_DIR: &str = "/data";
const RUN_DIR: &str = "/run/redis";
/// The official images' `redis` account.
const REDIS_UID: i64 = 999;

type Result<T> = std::result::Result<T, quorum_core::Error>;

/// A data node's role, as its pod label says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleLabel {
    /// Accepts writes; selected by the primary Service.
    Primary,
    /// Replicating with its link up; selected by the replicas Service.
    Replica,
    /// Anything else (starting, syncing, not reachable, not yet placed): in no role Service.
    None,
}

impl RoleLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            RoleLabel::Primary => "primary",
            RoleLabel::Replica => "replica",
            RoleLabel::None => "none",
        }
    }
}

/// The data StatefulSet, its headless Service and its PodDisruptionBudget share the name.
pub fn statefulset_name(cluster: &str) -> String {
    child_name(cluster, "")
}

/// The Sentinels' StatefulSet is `<cluster>-sentinel`: the longest of a cluster's StatefulSet names.
pub const SENTINEL_SUFFIX: &str = "sentinel";

pub fn sentinel_statefulset_name(cluster: &str) -> String {
    child_name(cluster, SENTINEL_SUFFIX)
}

pub fn primary_service_name(cluster: &str) -> String {
    child_name(cluster, "primary")
}

pub fn replicas_service_name(cluster: &str) -> String {
    child_name(cluster, "replicas")
}

/// Cluster mode: the Service cluster-aware clients start from.
pub fn client_service_name(cluster: &str) -> String {
    child_name(cluster, "client")
}

/// The ConfigMap of a StatefulSet is named after it: `<statefulset>-config`.
pub fn config_map_name(statefulset: &str) -> String {
    child_name(statefulset, "config")
}

/// The generated password Secret, used when `spec.authSecret` is absent.
pub fn generated_auth_secret_name(cluster: &str) -> String {
    child_name(cluster, "auth")
}

/// The Secret holding the password, given or generated.
pub fn auth_secret_name(cluster: &RedisCluster) -> String {
    cluster
        .spec
        .auth_secret
        .clone()
        .unwrap_or_else(|| generated_auth_secret_name(&cluster.name_any()))
}

/// The pod (and node) name of data node `ordinal`.
pub fn node_name(cluster: &str, ordinal: usize) -> String {
    format!("{}-{ordinal}", statefulset_name(cluster))
}

pub fn sentinel_name(cluster: &str, ordinal: usize) -> String {
    format!("{}-{ordinal}", sentinel_statefulset_name(cluster))
}

/// The ordinal of a data node (pod) name of `cluster`.
pub fn ordinal_of(cluster: &str, node: &str) -> Option<usize> {
    node.strip_prefix(&statefulset_name(cluster))?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// The ordinal of any pod of a StatefulSet, from its name alone (`<statefulset>-<ordinal>`).
pub fn ordinal_of_pod(pod: &str) -> Option<usize> {
    pod.rsplit_once('-')?.1.parse().ok()
}

/// Cluster mode: the label naming the shard (0-based) a data pod of a per-shard StatefulSet
/// belongs to; a shard's pods never share a node unless the user's affinity says otherwise.
pub const SHARD_LABEL: &str = "redis.quorum.dev/shard";

/// Cluster mode: the StatefulSet of shard `shard`, `<cluster>-shard-<shard>`; with at most
/// [`crate::crd::MAX_SHARDS`] shards its suffix is never longer than the Sentinels'.
pub fn shard_statefulset_name(cluster: &str, shard: usize) -> String {
    child_name(cluster, &format!("shard-{shard}"))
}

/// How a deployment's data nodes are laid out, from its spec and the layout it recorded: in
/// cluster mode a deployment that served before the layout was recorded keeps its single
/// StatefulSet ([`DataLayout::OneStatefulSet`]); a new one gets a StatefulSet per shard.
pub fn data_layout(cluster: &RedisCluster) -> Option<DataLayout> {
    if cluster.spec.mode == Mode::Replication {
        return None;
    }
    let status = cluster.status.as_ref();
    let served = status.is_some_and(|s| !s.nodes.is_empty() || s.shards > 0 || s.rebalance.is_some());
    Some(match status.and_then(|s| s.data_layout) {
        Some(layout) => layout,
        None if served => DataLayout::OneStatefulSet,
        None => DataLayout::StatefulSetPerShard,
    })
}

/// Where each data node of a deployment lives: the StatefulSet and pod of node `ordinal`.
/// Ordinals run over the whole deployment, shard by shard (see [`shard_of`]), whatever the
/// layout, so the decisions never depend on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataNodes {
    cluster: String,
    /// Pods per StatefulSet when each shard has its own; `None` for the one StatefulSet.
    per_shard: Option<usize>,
}

impl DataNodes {
    /// The data nodes of `cluster`, as [`data_layout`] lays them out.
    pub fn of(cluster: &RedisCluster) -> Self {
        match data_layout(cluster) {
            Some(DataLayout::StatefulSetPerShard) => {
                Self::per_shard(&cluster.name_any(), cluster.spec.nodes_per_shard())
            }
            _ => Self::one_statefulset(&cluster.name_any()),
        }
    }

    /// Every data node in the StatefulSet `<cluster>`.
    pub fn one_statefulset(cluster: &str) -> Self {
        Self {
            cluster: cluster.to_string(),
            per_shard: None,
        }
    }

    /// Each shard's `nodes_per_shard` data nodes in the shard's StatefulSet.
    pub fn per_shard(cluster: &str, nodes_per_shard: usize) -> Self {
        Self {
            cluster: cluster.to_string(),
            per_shard: Some(nodes_per_shard.max(1)),
        }
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Pods per StatefulSet when each shard has its own.
    pub fn nodes_per_shard(&self) -> Option<usize> {
        self.per_shard
    }

    /// The StatefulSet holding node `ordinal`, and the node's ordinal in it.
    pub fn place(&self, ordinal: usize) -> (String, usize) {
        match self.per_shard {
            Some(per_shard) => (
                shard_statefulset_name(&self.cluster, ordinal / per_shard),
                ordinal % per_shard,
            ),
            None => (statefulset_name(&self.cluster), ordinal),
        }
    }

    /// The pod (and node) name of node `ordinal`.
    pub fn name(&self, ordinal: usize) -> String {
        let (statefulset, ordinal) = self.place(ordinal);
        format!("{statefulset}-{ordinal}")
    }

    /// The ordinal of the data node named `pod`; `None` for a pod of another layout or cluster.
    pub fn ordinal_of(&self, pod: &str) -> Option<usize> {
        let Some(per_shard) = self.per_shard else {
            return ordinal_of(&self.cluster, pod);
        };
        let (statefulset, ordinal) = pod.rsplit_once('-')?;
        let ordinal = number(ordinal).filter(|ordinal| *ordinal < per_shard)?;
        Some(self.shard_of_statefulset(statefulset)? * per_shard + ordinal)
    }

    /// The shard whose StatefulSet is `statefulset` (`<cluster>-shard-<s>`); `None` for any other
    /// name, the one StatefulSet's included.
    pub fn shard_of_statefulset(&self, statefulset: &str) -> Option<usize> {
        let shard = number(statefulset.strip_prefix(&self.cluster)?.strip_prefix("-shard-")?)?;
        (shard < crate::crd::MAX_SHARDS).then_some(shard)
    }

    /// The StatefulSet the first node is in: the one whose existence says the deployment has
    /// data nodes.
    pub fn first_statefulset(&self) -> String {
        self.place(0).0
    }
}

/// A number written in decimal digits only (no sign, no spaces).
fn number(text: &str) -> Option<usize> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

/// Cluster mode: the shard a data pod belongs to. Each shard's pods are consecutive
/// ordinals, its first one the primary the shard started with, so adding a shard appends pods
/// and removing one takes the highest.
pub fn shard_of(ordinal: usize, nodes_per_shard: usize) -> usize {
    ordinal / nodes_per_shard.max(1)
}

/// Labels selecting this deployment's pods of `component`.
pub fn selector(cluster: &RedisCluster, component: &str) -> BTreeMap<String, String> {
    selector_labels(APP, &cluster.name_any(), component)
}

/// The data node selector as a string, for pod lists.
pub fn node_selector_string(cluster: &RedisCluster) -> String {
    label_selector(&selector(cluster, NODE_COMPONENT))
}

pub(crate) fn labels(cluster: &RedisCluster, component: &str) -> BTreeMap<String, String> {
    standard_labels(APP, &cluster.name_any(), component, OPERATOR_NAME)
}

/// The image the nodes and Sentinels run.
pub fn image(cluster: &RedisCluster) -> String {
    cluster
        .spec
        .image
        .clone()
        .unwrap_or_else(|| format!("redis:{}", cluster.spec.version))
}

/// Seconds within which a replica must have acknowledged the primary's stream to count for
/// its write fence.
pub const WRITE_FENCE_MAX_LAG_SECONDS: u32 = 10;

/// Replication mode's write fence: with replicas, a primary accepts writes only while at least
/// one replica acknowledged its stream within [`WRITE_FENCE_MAX_LAG_SECONDS`], so a primary cut
/// off from its replicas (and so, in practice, from the Sentinels that would replace it) stops
/// acknowledging writes a failover would discard. Without replicas there is nothing to fence
/// for. `min-replicas-to-write` and `min-replicas-max-lag` in `spec.config` replace the
/// defaults. Cluster mode has its own: a primary on the minority side stops taking writes after
/// the node timeout.
pub fn write_fence(spec: &crate::crd::RedisClusterSpec) -> crate::admin::WriteFence {
    let configured = |name: &str| {
        spec.config
            .get(name)
            .and_then(|value| value.trim().parse::<u32>().ok())
    };
    let has_replicas = spec.mode == Mode::Replication && spec.node_count() > 1;
    crate::admin::WriteFence {
        min_replicas: configured("min-replicas-to-write").unwrap_or(u32::from(has_replicas)),
        max_lag_seconds: configured("min-replicas-max-lag").unwrap_or(WRITE_FENCE_MAX_LAG_SECONDS),
    }
}

/// How long a primary waits for more replicas to ask for a full copy before starting one.
pub const DISKLESS_SYNC_DELAY_SECONDS: u32 = 1;

/// `redis.conf` from the spec: persistence and the user's `config`. The settings the operator
/// owns (addresses, password, cluster membership) are appended by `start.sh` after it, so they
/// win.
pub fn redis_conf(cluster: &RedisCluster) -> String {
    let persistence = &cluster.spec.persistence;
    let mut lines = vec![
        "# Written by the Quorum Redis operator; edit spec.config of the RedisCluster instead.".to_string(),
        // Defaults a `config` entry may change, so before it. A restarted primary has a new
        // replication id, so each replica copies it whole, and the write fence refuses writes
        // until one has; Redis's own default waits five seconds for more replicas to ask before
        // starting the copy. Replicas ask again every second, so one second still serves them
        // all with one copy (`make bench`: the first write after a restart, 5.4 to 6.7 s before).
        format!("repl-diskless-sync-delay {DISKLESS_SYNC_DELAY_SECONDS}"),
    ];
    if !cluster.spec.config.is_empty() {
        lines.extend(
            cluster
                .spec
                .config
                .iter()
                .map(|(key, value)| format!("{key} {value}")),
        );
    }
    lines.push(format!("save \"{}\"", persistence.rdb_save.trim()));
    lines.push(format!(
        "appendonly {}",
        if persistence.append_only { "yes" } else { "no" }
    ));
    lines.push(format!("appendfsync {}", persistence.append_fsync.as_config()));
    lines.push(format!("appenddirname {APPEND_ONLY_DIR}"));
    lines.push(format!("appendfilename {APPEND_ONLY_FILE}"));
    lines.push("dbfilename dump.rdb".to_string());
    lines.push("protected-mode no".to_string());
    if cluster.spec.mode == Mode::Replication {
        let fence = write_fence(&cluster.spec);
        lines.push(format!("min-replicas-to-write {}", fence.min_replicas));
        lines.push(format!("min-replicas-max-lag {}", fence.max_lag_seconds));
    }
    if cluster.spec.mode == Mode::Cluster {
        lines.extend([
            "cluster-enabled yes".to_string(),
            "cluster-node-timeout 5000".to_string(),
            // Redis would otherwise move a replica to a primary left without one on its own;
            // the shard layout is the operator's to keep.
            "cluster-allow-replica-migration no".to_string(),
        ]);
    }
    lines.push(String::new());
    lines.join("\n")
}

/// The shared opening of both start scripts: paths from the environment with the pod's
/// values as defaults (so the local test harness runs the very same script), and the password
/// read from its file as a quoted config string.
fn script_preamble() -> String {
    format!(
        r#"#!/bin/sh
set -eu
CONFIG_DIR="${{CONFIG_DIR:-{CONFIG_DIR}}}"
CREDENTIALS_DIR="${{CREDENTIALS_DIR:-{CREDENTIALS_DIR}}}"
DATA_DIR="${{DATA_DIR:-{DATA_DIR}}}"
RUN_DIR="${{RUN_DIR:-{RUN_DIR}}}"
REDIS_SERVER="${{REDIS_SERVER:-redis-server}}"
umask 077
# The password as a double-quoted config string (a trailing newline is not part of it).
PASSWORD="\"$(sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' "$CREDENTIALS_DIR/{PASSWORD_KEY}" | tr -d '\n')\""
"#
    )
}

/// Where a node keeps its append-only files, under its data directory.
pub const APPEND_ONLY_DIR: &str = "appendonlydir";
const APPEND_ONLY_FILE: &str = "appendonly.aof";

/// With the append-only file on, the server loads only that file, and starts an empty one when
/// there is none, even beside an RDB snapshot (Redis 7). So a node that has a snapshot and no
/// append-only directory yet (persistence turned on for a deployment with data, or a node
/// restored from a backup) gets one whose base is the snapshot, written aside and renamed into
/// place only when complete.
fn append_only_from_snapshot() -> String {
    format!(
        r#"if grep -qx 'appendonly yes' "$CONFIG_DIR/redis.conf" && [ ! -e "$DATA_DIR/{APPEND_ONLY_DIR}" ] && [ -f "$DATA_DIR/dump.rdb" ]; then
  rm -rf "$DATA_DIR/{APPEND_ONLY_DIR}.new"
  mkdir "$DATA_DIR/{APPEND_ONLY_DIR}.new"
  cp "$DATA_DIR/dump.rdb" "$DATA_DIR/{APPEND_ONLY_DIR}.new/{APPEND_ONLY_FILE}.1.base.rdb"
  : > "$DATA_DIR/{APPEND_ONLY_DIR}.new/{APPEND_ONLY_FILE}.1.incr.aof"
  printf 'file {APPEND_ONLY_FILE}.1.base.rdb seq 1 type b\nfile {APPEND_ONLY_FILE}.1.incr.aof seq 1 type i\n' \
    > "$DATA_DIR/{APPEND_ONLY_DIR}.new/{APPEND_ONLY_FILE}.manifest"
  sync
  mv "$DATA_DIR/{APPEND_ONLY_DIR}.new" "$DATA_DIR/{APPEND_ONLY_DIR}"
fi
"#
    )
}

/// The data node's entry point: the spec's `redis.conf`, then the operator's settings, in a
/// file on the memory volume.
pub fn node_start_script(mode: Mode) -> String {
    let cluster_lines = match mode {
        Mode::Cluster => {
            r#"  echo "cluster-config-file $DATA_DIR/nodes.conf"
  echo "cluster-announce-ip $POD_IP"
"#
        }
        Mode::Replication => "",
    };
    format!(
        r#"{preamble}{append_only}# Starts one data node as a primary of nothing: the operator tells it whom to follow.
{{
  echo "include $CONFIG_DIR/redis.conf"
  echo "bind $POD_IP"
  echo "port {PORT}"
  echo "dir $DATA_DIR"
  echo "requirepass $PASSWORD"
  echo "masterauth $PASSWORD"
  echo "replica-announce-ip $POD_IP"
{cluster_lines}}} > "$RUN_DIR/redis.conf"
exec "$REDIS_SERVER" "$RUN_DIR/redis.conf"
"#,
        preamble = script_preamble(),
        append_only = append_only_from_snapshot(),
    )
}

/// The Sentinel's entry point. Sentinel rewrites its file with what it learns (what it
/// monitors, its peers, its own id), so the file is written only once per pod and kept across
/// container restarts; the operator tells a new Sentinel what to monitor.
pub fn sentinel_start_script() -> String {
    format!(
        r#"{preamble}# What the operator sets is written afresh at every start (the pod's address and the password
# may have changed); what the Sentinel learned and rewrote into its file (its id, the epochs,
# the primary it monitors, the replicas and Sentinels it knows) is kept from the volume.
conf="$DATA_DIR/sentinel.conf"
{{
  echo "bind $POD_IP"
  echo "port {SENTINEL_PORT}"
  echo "dir $DATA_DIR"
  echo "protected-mode no"
  echo "requirepass $PASSWORD"
  echo "sentinel sentinel-pass $PASSWORD"
  echo "sentinel announce-ip $POD_IP"
  if [ -f "$conf" ]; then
    grep -v -E '^(bind|port|dir|protected-mode|requirepass|user|sentinel sentinel-pass|sentinel announce-ip) ' "$conf" || true
  fi
}} > "$conf.next"
mv "$conf.next" "$conf"
exec "$REDIS_SERVER" "$conf" --sentinel
"#,
        preamble = script_preamble()
    )
}

/// The data nodes' ConfigMap: `redis.conf` and `start.sh`.
pub fn build_config_map(cluster: &RedisCluster) -> Result<ConfigMap> {
    let name = cluster.name_any();
    Ok(ConfigMap {
        metadata: child_metadata(
            cluster,
            config_map_name(&statefulset_name(&name)),
            labels(cluster, NODE_COMPONENT),
        )?,
        data: Some(BTreeMap::from([
            ("redis.conf".to_string(), redis_conf(cluster)),
            ("start.sh".to_string(), node_start_script(cluster.spec.mode)),
        ])),
        ..ConfigMap::default()
    })
}

/// The data nodes' ConfigMap as far as a node must restart to take it: without the write fence
/// (`min-replicas-*`), which the operator sets on every running node itself as the node count
/// changes, so scaling restarts no node.
fn restart_config(cluster: &RedisCluster) -> Result<ConfigMap> {
    let mut config = build_config_map(cluster)?;
    if let Some(conf) = config.data.as_mut().and_then(|data| data.get_mut("redis.conf")) {
        *conf = conf
            .lines()
            .filter(|line| !line.starts_with("min-replicas-"))
            .map(|line| format!("{line}\n"))
            .collect();
    }
    Ok(config)
}

/// The Sentinels' ConfigMap: `start.sh`.
pub fn build_sentinel_config_map(cluster: &RedisCluster) -> Result<ConfigMap> {
    let name = cluster.name_any();
    Ok(ConfigMap {
        metadata: child_metadata(
            cluster,
            config_map_name(&sentinel_statefulset_name(&name)),
            labels(cluster, SENTINEL_COMPONENT),
        )?,
        data: Some(BTreeMap::from([(
            "start.sh".to_string(),
            sentinel_start_script(),
        )])),
        ..ConfigMap::default()
    })
}

/// The Secret with the generated password, created once; the operator never rewrites it.
pub fn build_auth_secret(cluster: &RedisCluster, password: String) -> Result<Secret> {
    Ok(Secret {
        metadata: child_metadata(
            cluster,
            generated_auth_secret_name(&cluster.name_any()),
            labels(cluster, NODE_COMPONENT),
        )?,
        string_data: Some(BTreeMap::from([(PASSWORD_KEY.to_string(), password)])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    })
}

/// The headless Service of a StatefulSet: a stable name per pod, ready or not, since the
/// operator must reach a node before it is in service.
fn headless_service(cluster: &RedisCluster, name: String, component: &str, port: i32) -> Result<Service> {
    Ok(Service {
        metadata: child_metadata(cluster, name, labels(cluster, component))?,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector(cluster, component)),
            ports: Some(vec![service_port(component, port)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

pub fn build_headless_service(cluster: &RedisCluster) -> Result<Service> {
    headless_service(
        cluster,
        statefulset_name(&cluster.name_any()),
        NODE_COMPONENT,
        PORT,
    )
}

/// The Sentinels' Service: Sentinel-aware clients ask it for the primary.
pub fn build_sentinel_service(cluster: &RedisCluster) -> Result<Service> {
    headless_service(
        cluster,
        sentinel_statefulset_name(&cluster.name_any()),
        SENTINEL_COMPONENT,
        SENTINEL_PORT,
    )
}

/// Replication mode: the read-write Service, the one pod labelled primary (the primary the
/// Sentinels agree on).
pub fn build_primary_service(cluster: &RedisCluster) -> Result<Service> {
    role_service(
        cluster,
        primary_service_name(&cluster.name_any()),
        Some(RoleLabel::Primary),
    )
}

/// Replication mode: the read-only Service, replicas whose link to the primary is up.
pub fn build_replicas_service(cluster: &RedisCluster) -> Result<Service> {
    role_service(
        cluster,
        replicas_service_name(&cluster.name_any()),
        Some(RoleLabel::Replica),
    )
}

/// Cluster mode: every node; cluster-aware clients are redirected from there.
pub fn build_client_service(cluster: &RedisCluster) -> Result<Service> {
    role_service(cluster, client_service_name(&cluster.name_any()), None)
}

fn role_service(cluster: &RedisCluster, name: String, role: Option<RoleLabel>) -> Result<Service> {
    let mut selector = selector(cluster, NODE_COMPONENT);
    if let Some(role) = role {
        selector.insert(ROLE_LABEL.to_string(), role.as_str().to_string());
    }
    Ok(Service {
        metadata: child_metadata(cluster, name, labels(cluster, NODE_COMPONENT))?,
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![service_port(NODE_COMPONENT, PORT)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

fn port_name(component: &str) -> &'static str {
    if component == SENTINEL_COMPONENT {
        "sentinel"
    } else {
        "redis"
    }
}

fn service_port(component: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(port_name(component).into()),
        port,
        target_port: Some(IntOrString::String(port_name(component).into())),
        ..ServicePort::default()
    }
}

/// At most one pod of `component` down at a time through voluntary disruptions (drains).
pub fn build_pod_disruption_budget(cluster: &RedisCluster, component: &str) -> Result<PodDisruptionBudget> {
    let name = cluster.name_any();
    let budget_name = if component == SENTINEL_COMPONENT {
        sentinel_statefulset_name(&name)
    } else {
        statefulset_name(&name)
    };
    Ok(PodDisruptionBudget {
        metadata: child_metadata(cluster, budget_name, labels(cluster, component))?,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector(cluster, component)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    })
}

/// The data nodes' StatefulSet with `replicas` pods, each with a volume for its data (and, in
/// cluster mode, its `nodes.conf`, so a node keeps its id when its pod and address change).
///
/// A cluster created with `restoreFrom` gets a `restore` init step once the reconciler has
/// recorded its snapshots in `status.restore` (see [`crate::restore`]); it places a snapshot
/// only into a data directory that holds no data.
pub fn build_statefulset(cluster: &RedisCluster, replicas: i32) -> Result<StatefulSet> {
    data_statefulset(cluster, None, replicas)
}

/// Cluster mode with a StatefulSet per shard: shard `shard`'s StatefulSet, its `replicas` pods
/// labelled with the shard. They share the data nodes' ConfigMap and headless Service, and,
/// unless the user gives an affinity, never share a node with one another (a requirement: a
/// shard whose primary and replica die with one node loses its slots) and prefer nodes without
/// other shards' pods.
pub fn build_shard_statefulset(cluster: &RedisCluster, shard: usize, replicas: i32) -> Result<StatefulSet> {
    data_statefulset(cluster, Some(shard), replicas)
}

/// The labels selecting one shard's pods.
pub fn shard_selector(cluster: &RedisCluster, shard: usize) -> BTreeMap<String, String> {
    let mut labels = selector(cluster, NODE_COMPONENT);
    labels.insert(SHARD_LABEL.into(), shard.to_string());
    labels
}

fn data_statefulset(cluster: &RedisCluster, shard: Option<usize>, replicas: i32) -> Result<StatefulSet> {
    let name = cluster.name_any();
    let members = Members {
        statefulset: shard.map_or_else(
            || statefulset_name(&name),
            |shard| shard_statefulset_name(&name, shard),
        ),
        component: NODE_COMPONENT,
        config: restart_config(cluster)?,
        service: statefulset_name(&name),
        selector: shard.map_or_else(
            || selector(cluster, NODE_COMPONENT),
            |shard| shard_selector(cluster, shard),
        ),
        port: PORT,
        server: true,
        storage: cluster.spec.storage.clone(),
    };
    let mut statefulset = statefulset(cluster, members, replicas)?;
    let user_affinity = cluster
        .spec
        .pod_template
        .as_ref()
        .is_some_and(|template| template.affinity.is_some());
    if let (Some(shard), false) = (shard, user_affinity)
        && let Some(pod) = statefulset
            .spec
            .as_mut()
            .and_then(|spec| spec.template.spec.as_mut())
    {
        pod.affinity = Some(affinity_or_spread(None, &selector(cluster, NODE_COMPONENT)));
        keep_apart(
            pod,
            &shard_selector(cluster, shard),
            cluster.spec.nodes_per_shard() as i32,
        );
    }
    // The operator rolls the data pods itself: replicas first, a primary last after handing
    // its role (in cluster mode, its shard's slots) to a replica without losing a write.
    if let Some(spec) = statefulset.spec.as_mut() {
        spec.update_strategy = Some(quorum_core::rollout::operator_managed_updates());
    }
    let restore = cluster.status.as_ref().and_then(|status| status.restore.as_ref());
    if let (Some(_), Some(restore)) = (&cluster.spec.restore_from, restore)
        && let Some(pod) = statefulset
            .spec
            .as_mut()
            .and_then(|spec| spec.template.spec.as_mut())
    {
        let snapshots = restore_snapshots_of(restore, shard, cluster.spec.nodes_per_shard());
        pod.init_containers = Some(vec![restore_container(restore, &snapshots)]);
    }
    Ok(statefulset)
}

/// The snapshots one data StatefulSet's pods pick from, by their ordinal in it: all of them for
/// the one StatefulSet; for shard `shard`'s own, the shard's, numbered within the shard.
fn restore_snapshots_of(
    restore: &RestoreStatus,
    shard: Option<usize>,
    nodes_per_shard: usize,
) -> Vec<RestoreSnapshot> {
    restore
        .snapshots
        .iter()
        .filter_map(|snapshot| {
            let Some(shard) = shard else {
                return Some(snapshot.clone());
            };
            let ordinal = usize::try_from(snapshot.ordinal).ok()?;
            (shard_of(ordinal, nodes_per_shard) == shard).then(|| RestoreSnapshot {
                ordinal: (ordinal % nodes_per_shard.max(1)) as i32,
                ..snapshot.clone()
            })
        })
        .collect()
}

/// The init step of a restored cluster's data pods: `redis-operator restore-node` with every
/// planned snapshot; each pod picks its own by ordinal. S3 credentials come from the backup's
/// Secret as environment variables, so they are never in the arguments.
fn restore_container(restore: &RestoreStatus, snapshots: &[RestoreSnapshot]) -> Container {
    let mut args = vec![
        "restore-node".to_string(),
        "--pod-name=$(POD_NAME)".to_string(),
        format!("--data-dir={DATA_DIR}"),
    ];
    args.extend(
        snapshots
            .iter()
            .map(|snapshot| format!("--snapshot={}", snapshot_argument(snapshot))),
    );
    if let Some(endpoint) = &restore.s3_endpoint {
        args.push(format!("--s3-endpoint={endpoint}"));
    }
    if let Some(region) = &restore.s3_region {
        args.push(format!("--s3-region={region}"));
    }
    if restore.allow_http {
        args.push("--allow-http".to_string());
    }
    let mut env = vec![field_env("POD_NAME", "metadata.name")];
    if let Some(secret) = &restore.credentials_secret_name {
        env.extend(quorum_core::backup::s3_credentials_env(secret));
    }
    Container {
        name: RESTORE_CONTAINER.into(),
        image: Some(restore.image.clone()),
        args: Some(args),
        env: Some(env),
        volume_mounts: Some(vec![mount("data", DATA_DIR, false)]),
        ..Container::default()
    }
}

/// The size of each Sentinel's volume: it holds one small configuration file.
pub const SENTINEL_VOLUME_SIZE: &str = "64Mi";

/// The Sentinels' StatefulSet. A Sentinel keeps what it learns (its id, the epochs, the primary
/// it monitors) on a volume of its own, in the cluster's StorageClass: a Sentinel whose pod is
/// replaced, or every Sentinel after an outage, comes back knowing what it knew.
pub fn build_sentinel_statefulset(cluster: &RedisCluster, replicas: i32) -> Result<StatefulSet> {
    let name = sentinel_statefulset_name(&cluster.name_any());
    let members = Members {
        config: build_sentinel_config_map(cluster)?,
        service: name.clone(),
        statefulset: name,
        component: SENTINEL_COMPONENT,
        selector: selector(cluster, SENTINEL_COMPONENT),
        port: SENTINEL_PORT,
        server: false,
        storage: Storage {
            size: Quantity(SENTINEL_VOLUME_SIZE.into()),
            storage_class_name: cluster.spec.storage.storage_class_name.clone(),
        },
    };
    let mut statefulset = statefulset(cluster, members, replicas)?;
    // A Sentinel's volume holds nothing a new Sentinel cannot learn again: it goes with the
    // StatefulSet (the deployment deleted), where the data nodes' volumes are kept.
    if let Some(spec) = statefulset.spec.as_mut() {
        spec.persistent_volume_claim_retention_policy =
            Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_scaled: Some("Delete".into()),
                when_deleted: Some("Delete".into()),
            });
    }
    Ok(statefulset)
}

/// What differs between the StatefulSets of data nodes and Sentinels.
struct Members {
    statefulset: String,
    component: &'static str,
    /// The ConfigMap the pods read as they start: mounted, and its digest on the template.
    config: ConfigMap,
    /// The headless Service naming the pods.
    service: String,
    /// The StatefulSet's selector; its pods carry these labels.
    selector: BTreeMap<String, String>,
    port: i32,
    /// Data nodes (the server's container, the cluster's resources), else Sentinels.
    server: bool,
    /// Each pod's volume.
    storage: Storage,
}

fn statefulset(cluster: &RedisCluster, members: Members, replicas: i32) -> Result<StatefulSet> {
    let Members {
        statefulset: name,
        component,
        config,
        service,
        selector: pod_selector,
        port,
        server,
        storage,
    } = members;
    let mut pod_labels = labels(cluster, component);
    pod_labels.extend(pod_selector.clone());
    let env: Vec<EnvVar> = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_IP", "status.podIP"),
        value_env("HOME", RUN_DIR),
    ];
    let mounts = vec![
        mount("data", DATA_DIR, false),
        mount("config", CONFIG_DIR, true),
        mount("credentials", CREDENTIALS_DIR, true),
        mount("run", RUN_DIR, false),
    ];
    let volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: config.name_any(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "credentials".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(auth_secret_name(cluster)),
                default_mode: Some(0o400),
                items: Some(vec![KeyToPath {
                    key: PASSWORD_KEY.into(),
                    path: PASSWORD_KEY.into(),
                    ..KeyToPath::default()
                }]),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        memory_volume("run"),
    ];
    let port_name = port_name(component);
    let container = Container {
        name: if server { SERVER_CONTAINER } else { "sentinel" }.into(),
        image: Some(image(cluster)),
        command: Some(vec!["sh".into(), format!("{CONFIG_DIR}/start.sh")]),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some(port_name.into()),
            container_port: port,
            ..ContainerPort::default()
        }]),
        volume_mounts: Some(mounts),
        security_context: Some(member_container_security(true)),
        resources: if server {
            cluster.spec.resources.clone()
        } else {
            None
        },
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String(port_name.into()),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        liveness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String(port_name.into()),
                ..TCPSocketAction::default()
            }),
            initial_delay_seconds: Some(30),
            period_seconds: Some(10),
            failure_threshold: Some(6),
            ..Probe::default()
        }),
        ..Container::default()
    };
    member_statefulset(
        cluster,
        name,
        labels(cluster, component),
        service,
        replicas,
        pod_selector,
        MemberPods {
            overrides: cluster.spec.pod_template.as_ref(),
            labels: pod_labels,
            uid: REDIS_UID,
            spec: PodSpec {
                containers: vec![container],
                volumes: Some(volumes),
                termination_grace_period_seconds: Some(30),
                ..PodSpec::default()
            },
            config: Some(&config),
        },
        false,
        Some(&storage),
    )
}

impl quorum_core::pass::ClusterObject for RedisCluster {
    /// Every StatefulSet a deployment of this name may have, in either mode and layout, so
    /// that nothing a deleted predecessor left (its shards' volumes included) is taken for new.
    fn statefulsets(&self) -> Vec<String> {
        let name = self.name_any();
        let mut names = vec![statefulset_name(&name), sentinel_statefulset_name(&name)];
        if self.spec.mode == Mode::Cluster {
            names.extend((0..crate::crd::MAX_SHARDS).map(|shard| shard_statefulset_name(&name, shard)));
        }
        names
    }

    fn conditions(&self) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
        self.status
            .as_ref()
            .map_or(&[], |status| status.conditions.as_slice())
    }

    fn last_drill(&self) -> Option<&quorum_core::crd::DrillRecord> {
        self.status.as_ref()?.last_drill.as_ref()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::crd::{Persistence, RedisClusterSpec};

    pub(crate) fn cluster(mode: Mode) -> RedisCluster {
        let (replicas, shards, replicas_per_shard) = match mode {
            Mode::Replication => (Some(2), None, None),
            Mode::Cluster => (None, Some(3), Some(1)),
        };
        let mut cluster = RedisCluster::new(
            "cache",
            RedisClusterSpec {
                mode,
                replicas,
                sentinel: None,
                shards,
                replicas_per_shard,
                version: "7.0.15".into(),
                image: None,
                storage: Storage {
                    size: k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
                    storage_class_name: None,
                },
                resources: None,
                pod_template: None,
                persistence: Persistence::default(),
                config: BTreeMap::from([("maxmemory".to_string(), "100mb".to_string())]),
                auth_secret: None,
                backup: None,
                restore_from: None,
            },
        );
        cluster.metadata.namespace = Some("prod".into());
        cluster.metadata.uid = Some("uid-1".into());
        cluster
    }

    #[test]
    fn data_pods_change_only_when_the_operator_restarts_them_in_either_mode() {
        let managed = Some(quorum_core::rollout::operator_managed_updates());
        let strategy = |statefulset: StatefulSet| statefulset.spec.unwrap().update_strategy;
        assert_eq!(
            strategy(build_statefulset(&cluster(Mode::Replication), 3).unwrap()),
            managed
        );
        assert_eq!(
            strategy(build_statefulset(&cluster(Mode::Cluster), 3).unwrap()),
            managed
        );
        assert_eq!(
            strategy(build_shard_statefulset(&cluster(Mode::Cluster), 1, 2).unwrap()),
            managed
        );
    }

    #[test]
    fn a_changed_config_changes_the_data_pods_template_in_either_mode_so_they_roll_onto_it() {
        let template = |statefulset: StatefulSet| statefulset.spec.unwrap().template;
        for mode in [Mode::Replication, Mode::Cluster] {
            let before = cluster(mode);
            let mut tuned = before.clone();
            tuned.spec.config.insert("maxmemory".into(), "200mb".into());
            assert_ne!(
                template(build_statefulset(&before, 3).unwrap()),
                template(build_statefulset(&tuned, 3).unwrap()),
                "{mode:?}: redis.conf is read only as the server starts"
            );
            assert_ne!(
                template(build_shard_statefulset(&before, 1, 2).unwrap()),
                template(build_shard_statefulset(&tuned, 1, 2).unwrap()),
                "{mode:?}: a shard's StatefulSet"
            );
        }
        // The write fence the operator sets on running nodes: scaling restarts none.
        let mut alone = cluster(Mode::Replication);
        alone.spec.replicas = Some(1);
        let mut fenced = cluster(Mode::Replication);
        fenced.spec.replicas = Some(3);
        fenced
            .spec
            .config
            .insert("min-replicas-max-lag".into(), "5".into());
        assert_ne!(redis_conf(&alone), redis_conf(&fenced));
        assert_eq!(
            template(build_statefulset(&alone, 1).unwrap()),
            template(build_statefulset(&fenced, 1).unwrap())
        );
        // The Sentinels read only their start script, which follows the operator's release.
        let sentinels = template(build_sentinel_statefulset(&cluster(Mode::Replication), 3).unwrap());
        let digest = sentinels.metadata.unwrap().annotations.unwrap()
            [quorum_core::pod::CONFIG_DIGEST_ANNOTATION]
            .clone();
        assert_eq!(
            digest,
            quorum_core::pod::config_digest(&build_sentinel_config_map(&cluster(Mode::Replication)).unwrap())
        );
    }

    #[test]
    fn the_password_reaches_the_server_through_a_file_only() {
        let statefulset = build_statefulset(&cluster(Mode::Replication), 3).unwrap();
        let pod = statefulset.spec.unwrap().template.spec.unwrap();
        for env in pod.containers[0].env.as_ref().unwrap() {
            assert!(
                env.value_from
                    .as_ref()
                    .is_none_or(|from| from.secret_key_ref.is_none())
            );
        }
        assert_eq!(
            pod.containers[0].command.as_ref().unwrap(),
            &vec!["sh".to_string(), "/etc/redis/quorum/start.sh".to_string()]
        );
        let credentials = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "credentials")
            .unwrap();
        assert_eq!(
            credentials.secret.unwrap().secret_name.as_deref(),
            Some("cache-auth")
        );
        let script = node_start_script(Mode::Replication);
        assert!(script.contains(r#"echo "requirepass $PASSWORD""#));
        assert!(script.contains(r#"> "$RUN_DIR/redis.conf""#));
        assert!(!script.contains("-a "));
        assert!(!redis_conf(&cluster(Mode::Replication)).contains("requirepass"));
    }

    #[test]
    fn cluster_nodes_keep_their_identity_on_the_data_volume() {
        let script = node_start_script(Mode::Cluster);
        assert!(script.contains(r#"cluster-config-file $DATA_DIR/nodes.conf"#));
        let conf = redis_conf(&cluster(Mode::Cluster));
        assert!(conf.contains("cluster-enabled yes"));
        assert!(conf.contains("cluster-allow-replica-migration no"));
        assert!(!redis_conf(&cluster(Mode::Replication)).contains("cluster-enabled"));
        assert!(!node_start_script(Mode::Replication).contains("cluster-config-file"));
    }

    #[test]
    fn a_restarted_primary_copies_itself_to_its_replicas_after_one_second_unless_configured() {
        let conf = redis_conf(&cluster(Mode::Replication));
        let delay = conf
            .find("repl-diskless-sync-delay 1")
            .expect("the operator's default");
        assert!(
            delay < conf.find("maxmemory 100mb").unwrap(),
            "the user's config comes after it"
        );
        assert!(redis_conf(&cluster(Mode::Cluster)).contains("repl-diskless-sync-delay 1"));
    }

    /// Runs the Sentinels' `start.sh` as a pod at `ip` would, with a server that only prints
    /// the file it was given; returns that file.
    fn start_sentinel(data: &std::path::Path, ip: &str, password: &str) -> String {
        let credentials = data.join("credentials");
        std::fs::create_dir_all(&credentials).unwrap();
        std::fs::write(credentials.join(PASSWORD_KEY), password).unwrap();
        let server = data.join("print-config");
        std::fs::write(&server, "#!/bin/sh\ncat \"$1\"\n").unwrap();
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(&server)
            .status()
            .unwrap();
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(sentinel_start_script())
            .env("DATA_DIR", data)
            .env("CREDENTIALS_DIR", &credentials)
            .env("RUN_DIR", data)
            .env("REDIS_SERVER", &server)
            .env("POD_IP", ip)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    #[test]
    fn a_sentinel_keeps_what_it_learned_and_takes_its_new_address_and_password() {
        let data = std::env::temp_dir().join(format!("quorum-sentinel-start-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data).unwrap();
        let first = start_sentinel(&data, "10.0.0.7", "old");
        assert!(first.contains("bind 10.0.0.7\n"), "{first}");
        assert!(first.contains("requirepass \"old\"\n"), "{first}");
        // What the Sentinel rewrites into its file as it learns (CONFIG REWRITE).
        let learned = "sentinel myid 5f1c0e\nsentinel monitor primary 10.0.0.9 6379 2\n\
                       sentinel config-epoch primary 4\nsentinel known-sentinel primary 10.0.0.8 26379 77aa\n\
                       user default on sanitize-payload #abc ~* &* +@all\n";
        let conf = data.join("sentinel.conf");
        let written = std::fs::read_to_string(&conf).unwrap();
        std::fs::write(&conf, format!("{written}{learned}")).unwrap();

        let again = start_sentinel(&data, "10.0.0.12", "new");
        for kept in [
            "sentinel myid 5f1c0e",
            "sentinel monitor primary 10.0.0.9 6379 2",
            "sentinel config-epoch primary 4",
            "sentinel known-sentinel primary 10.0.0.8 26379 77aa",
        ] {
            assert!(again.contains(kept), "{kept} lost: {again}");
        }
        for now in [
            "bind 10.0.0.12\n",
            "sentinel announce-ip 10.0.0.12\n",
            "requirepass \"new\"\n",
            "sentinel sentinel-pass \"new\"\n",
        ] {
            assert_eq!(again.matches(now).count(), 1, "{now}: {again}");
        }
        for gone in ["10.0.0.7", "\"old\"", "user default"] {
            assert!(!again.contains(gone), "{gone} kept: {again}");
        }
        std::fs::remove_dir_all(&data).unwrap();
    }

    #[test]
    fn the_users_settings_come_first_so_the_operators_win() {
        let conf = redis_conf(&cluster(Mode::Replication));
        assert!(conf.find("maxmemory 100mb").unwrap() < conf.find("save ").unwrap());
        assert!(conf.contains("save \"3600 1 300 100 60 10000\""));
        let script = node_start_script(Mode::Replication);
        assert!(script.find("include").unwrap() < script.find("bind").unwrap());
    }

    #[test]
    fn sentinels_keep_what_they_learned_on_a_claim_of_their_own() {
        let mut cluster = cluster(Mode::Replication);
        cluster.spec.storage.storage_class_name = Some("fast".into());
        let statefulset = build_sentinel_statefulset(&cluster, 3).unwrap();
        let spec = statefulset.spec.unwrap();
        assert_eq!(spec.service_name.as_deref(), Some("cache-sentinel"));
        let claims = spec.volume_claim_templates.expect("a claim per Sentinel");
        let claim = claims[0].spec.as_ref().unwrap();
        assert_eq!(claim.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            claim.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"],
            Quantity(SENTINEL_VOLUME_SIZE.into())
        );
        let volumes = spec.template.spec.unwrap().volumes.unwrap();
        assert!(
            !volumes.iter().any(|v| v.name == "data"),
            "no pod-lifetime data volume"
        );
        let retention = spec.persistent_volume_claim_retention_policy.unwrap();
        assert_eq!(retention.when_deleted.as_deref(), Some("Delete"));
    }

    #[test]
    fn role_services_select_by_the_role_label() {
        let cluster = cluster(Mode::Replication);
        let primary = build_primary_service(&cluster).unwrap();
        assert_eq!(primary.metadata.name.as_deref(), Some("cache-primary"));
        assert_eq!(primary.spec.unwrap().selector.unwrap()[ROLE_LABEL], "primary");
        let replicas = build_replicas_service(&cluster).unwrap();
        assert_eq!(replicas.spec.unwrap().selector.unwrap()[ROLE_LABEL], "replica");
        let client = build_client_service(&cluster).unwrap();
        assert!(!client.spec.unwrap().selector.unwrap().contains_key(ROLE_LABEL));
    }

    #[test]
    fn a_restored_cluster_s_data_pods_place_the_recorded_snapshots_first() {
        use crate::crd::{RedisClusterStatus, RestoreSnapshot};
        use quorum_core::crd::RestoreSource;

        let init = |cluster: &RedisCluster| {
            build_statefulset(cluster, 3)
                .unwrap()
                .spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .init_containers
        };
        let mut restored = cluster(Mode::Replication);
        restored.spec.restore_from = Some(RestoreSource {
            backup_name: "nightly".into(),
        });
        assert_eq!(init(&restored), None, "nothing before the snapshots are recorded");
        restored.status = Some(RedisClusterStatus {
            restore: Some(RestoreStatus {
                backup_name: "nightly".into(),
                snapshots: vec![RestoreSnapshot {
                    ordinal: 0,
                    location: "s3://bucket/prod/old/old-1.rdb".into(),
                    sha256: "a".repeat(64),
                    slots: vec![],
                }],
                image: "operator:1".into(),
                s3_endpoint: Some("https://s3.example".into()),
                s3_region: None,
                credentials_secret_name: Some("backup-credentials".into()),
                allow_http: false,
            }),
            ..RedisClusterStatus::default()
        });
        let containers = init(&restored).expect("an init step");
        assert_eq!(containers.len(), 1);
        let restore = &containers[0];
        assert_eq!(restore.name, RESTORE_CONTAINER);
        assert_eq!(restore.image.as_deref(), Some("operator:1"));
        let args = restore.args.clone().unwrap();
        assert_eq!(args[0], "restore-node");
        assert!(args.contains(&"--pod-name=$(POD_NAME)".to_string()));
        assert!(args.contains(&"--data-dir=/data".to_string()));
        assert!(args.contains(&format!(
            "--snapshot=0={}=s3://bucket/prod/old/old-1.rdb",
            "a".repeat(64)
        )));
        assert!(args.contains(&"--s3-endpoint=https://s3.example".to_string()));
        let env = restore.env.clone().unwrap();
        let secret_key = |name: &str| {
            env.iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
                .map(|key| (key.name.clone(), key.key.clone()))
        };
        assert_eq!(
            secret_key("AWS_SECRET_ACCESS_KEY"),
            Some((
                "backup-credentials".into(),
                quorum_core::backup::SECRET_ACCESS_KEY_KEY.into()
            ))
        );
        assert!(!args.iter().any(|a| a.contains("backup-credentials")));
        assert_eq!(restore.volume_mounts.as_ref().unwrap()[0].mount_path, "/data");

        // The Sentinels never restore, and a cluster without restoreFrom has no init step.
        let sentinels = build_sentinel_statefulset(&restored, 3).unwrap();
        assert_eq!(
            sentinels.spec.unwrap().template.spec.unwrap().init_containers,
            None
        );
        restored.spec.restore_from = None;
        assert_eq!(init(&restored), None);
    }

    #[test]
    fn nodes_and_sentinels_prefer_distinct_nodes_unless_the_user_gives_an_affinity() {
        let template = |statefulset: StatefulSet| statefulset.spec.unwrap().template.spec.unwrap().affinity;
        for mode in [Mode::Replication, Mode::Cluster] {
            let mut cluster = cluster(mode);
            assert_eq!(
                template(build_statefulset(&cluster, 3).unwrap()),
                Some(quorum_core::pod::affinity_or_spread(
                    None,
                    &selector(&cluster, NODE_COMPONENT)
                ))
            );
            if mode == Mode::Replication {
                assert_eq!(
                    template(build_sentinel_statefulset(&cluster, 3).unwrap()),
                    Some(quorum_core::pod::affinity_or_spread(
                        None,
                        &selector(&cluster, SENTINEL_COMPONENT)
                    ))
                );
            }
            let own = k8s_openapi::api::core::v1::Affinity::default();
            cluster.spec.pod_template = Some(quorum_core::crd::PodOverrides {
                affinity: Some(own.clone()),
                ..Default::default()
            });
            assert_eq!(template(build_statefulset(&cluster, 3).unwrap()), Some(own));
        }
    }

    #[test]
    fn names_and_shards_round_trip() {
        assert_eq!(node_name("cache", 4), "cache-4");
        assert_eq!(ordinal_of("cache", "cache-4"), Some(4));
        assert_eq!(ordinal_of("cache", "cache-sentinel-1"), None);
        assert_eq!(
            config_map_name(&sentinel_statefulset_name("cache")),
            "cache-sentinel-config"
        );
        assert_eq!(shard_of(5, 2), 2);
        assert_eq!(shard_of(5, 1), 5);
        assert_eq!(ordinal_of_pod("cache-sentinel-12"), Some(12));
        assert_eq!(ordinal_of_pod("cache"), None);
    }

    #[test]
    fn a_shards_nodes_are_named_by_their_shard_and_read_back() {
        let one = DataNodes::one_statefulset("cache");
        let sharded = DataNodes::per_shard("cache", 2);
        for ordinal in 0..8 {
            assert_eq!(one.ordinal_of(&one.name(ordinal)), Some(ordinal));
            assert_eq!(sharded.ordinal_of(&sharded.name(ordinal)), Some(ordinal));
        }
        assert_eq!(sharded.name(5), "cache-shard-2-1");
        assert_eq!(sharded.place(5), ("cache-shard-2".to_string(), 1));
        assert_eq!(sharded.first_statefulset(), "cache-shard-0");
        for foreign in [
            "cache-3",
            "cache-shard-1-2",
            "cache-shard-x-0",
            "cache-shard-1",
            "other-shard-0-0",
        ] {
            assert_eq!(sharded.ordinal_of(foreign), None, "{foreign}");
        }
        assert_eq!(one.ordinal_of("cache-shard-0-0"), None);
        assert_eq!(sharded.shard_of_statefulset("cache-shard-7"), Some(7));
        for other in [
            "cache",
            "cache-sentinel",
            "cache-shard-",
            "cache-shard-+1",
            "cache-shard-32",
        ] {
            assert_eq!(sharded.shard_of_statefulset(other), None, "{other}");
        }
        let longest = shard_statefulset_name("c", crate::crd::MAX_SHARDS - 1);
        assert!(
            longest.len() <= sentinel_statefulset_name("c").len(),
            "{longest}: never longer than the Sentinels', which bound the name"
        );
    }

    #[test]
    fn a_new_cluster_mode_deployment_gets_a_statefulset_per_shard_and_one_that_served_keeps_its_own() {
        use crate::crd::{NodeStatus, RedisClusterStatus};
        let mut cluster = cluster(Mode::Cluster);
        assert_eq!(data_layout(&cluster), Some(DataLayout::StatefulSetPerShard));
        assert_eq!(DataNodes::of(&cluster), DataNodes::per_shard("cache", 2));
        cluster.status = Some(RedisClusterStatus {
            nodes: vec![NodeStatus {
                name: "cache-0".into(),
                role: "Primary".into(),
                health: "Healthy".into(),
                node_id: None,
                shard: Some(0),
                slots: vec![],
                following: None,
                link: None,
                message: None,
                failing_since: None,
            }],
            ..RedisClusterStatus::default()
        });
        assert_eq!(
            data_layout(&cluster),
            Some(DataLayout::OneStatefulSet),
            "served before a layout was recorded"
        );
        cluster.status.as_mut().unwrap().data_layout = Some(DataLayout::StatefulSetPerShard);
        assert_eq!(
            data_layout(&cluster),
            Some(DataLayout::StatefulSetPerShard),
            "as recorded"
        );
        assert_eq!(data_layout(&super::tests::cluster(Mode::Replication)), None);
        assert_eq!(
            DataNodes::of(&super::tests::cluster(Mode::Replication)),
            DataNodes::one_statefulset("cache")
        );
    }

    #[test]
    fn a_shards_pods_never_share_a_node_unless_the_user_gives_an_affinity() {
        let cluster = cluster(Mode::Cluster);
        let statefulset = build_shard_statefulset(&cluster, 1, 2).unwrap();
        assert_eq!(statefulset.metadata.name.as_deref(), Some("cache-shard-1"));
        let spec = statefulset.spec.unwrap();
        assert_eq!(spec.replicas, Some(2));
        assert_eq!(
            spec.service_name.as_deref(),
            Some("cache"),
            "the data nodes' headless Service"
        );
        let own_shard = shard_selector(&cluster, 1);
        assert_eq!(spec.selector.match_labels.as_ref(), Some(&own_shard));
        let template = spec.template;
        let labels = template.metadata.unwrap().labels.unwrap();
        assert_eq!(labels[SHARD_LABEL], "1");
        let pod = template.spec.unwrap();
        let config = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "config")
            .unwrap();
        assert_eq!(
            config.config_map.unwrap().name,
            "cache-config",
            "the data nodes' ConfigMap"
        );
        let apart = pod.topology_spread_constraints.clone().unwrap();
        assert_eq!(apart.len(), 1);
        assert_eq!(apart[0].topology_key, "kubernetes.io/hostname");
        assert_eq!(apart[0].when_unsatisfiable, "DoNotSchedule");
        assert_eq!(
            (apart[0].max_skew, apart[0].min_domains),
            (1, Some(2)),
            "one pod per node, over at least as many nodes as the shard has pods"
        );
        assert_eq!(
            apart[0].label_selector.as_ref().unwrap().match_labels.as_ref(),
            Some(&own_shard),
            "the shard's own pods, not the other shards'"
        );
        let anti = pod.affinity.unwrap().pod_anti_affinity.unwrap();
        assert_eq!(anti.required_during_scheduling_ignored_during_execution, None);
        let preferred = anti.preferred_during_scheduling_ignored_during_execution.unwrap();
        assert_eq!(
            preferred[0]
                .pod_affinity_term
                .label_selector
                .as_ref()
                .unwrap()
                .match_labels,
            Some(selector(&cluster, NODE_COMPONENT)),
            "every data pod prefers a node of its own"
        );

        let mut one_node = cluster.clone();
        let own = k8s_openapi::api::core::v1::Affinity::default();
        one_node.spec.pod_template = Some(quorum_core::crd::PodOverrides {
            affinity: Some(own.clone()),
            ..Default::default()
        });
        let pod = build_shard_statefulset(&one_node, 0, 2)
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        assert_eq!(pod.topology_spread_constraints, None);
        assert_eq!(
            pod.affinity,
            Some(own),
            "the user's affinity replaces the operator's"
        );
    }

    #[test]
    fn each_shards_statefulset_restores_its_own_snapshot_by_its_ordinal_in_the_shard() {
        use crate::crd::{RedisClusterStatus, RestoreSnapshot};
        use quorum_core::crd::RestoreSource;
        let snapshot = |ordinal: i32, location: &str| RestoreSnapshot {
            ordinal,
            location: location.into(),
            sha256: "a".repeat(64),
            slots: vec![],
        };
        let mut restored = cluster(Mode::Cluster);
        restored.spec.restore_from = Some(RestoreSource {
            backup_name: "nightly".into(),
        });
        restored.status = Some(RedisClusterStatus {
            restore: Some(RestoreStatus {
                backup_name: "nightly".into(),
                snapshots: vec![
                    snapshot(0, "/b/0.rdb"),
                    snapshot(2, "/b/1.rdb"),
                    snapshot(4, "/b/2.rdb"),
                ],
                image: "operator:1".into(),
                s3_endpoint: None,
                s3_region: None,
                credentials_secret_name: None,
                allow_http: false,
            }),
            ..RedisClusterStatus::default()
        });
        let snapshots = |shard| {
            let pod = build_shard_statefulset(&restored, shard, 2)
                .unwrap()
                .spec
                .unwrap()
                .template
                .spec
                .unwrap();
            pod.init_containers.unwrap()[0]
                .args
                .clone()
                .unwrap()
                .into_iter()
                .filter(|a| a.starts_with("--snapshot="))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            snapshots(1),
            vec![format!("--snapshot=0={}=/b/1.rdb", "a".repeat(64))]
        );
        assert_eq!(
            snapshots(2),
            vec![format!("--snapshot=0={}=/b/2.rdb", "a".repeat(64))]
        );
    }
}
