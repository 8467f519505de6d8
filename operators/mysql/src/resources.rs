//! Pure builders: a `MySQLCluster` in, the Kubernetes objects it needs out. No API calls here;
//! every builder is unit-tested without a cluster.
//!
//! Members start read-only, with replication stopped: only the operator, after observing the
//! cluster, opens the primary for writes and starts replication on the replicas. A former
//! primary that comes back therefore never accepts writes on its own. The `start.sh` in the
//! ConfigMap initialises an empty data directory and writes the operator's accounts from the
//! mounted credential files into a file on a memory volume, so passwords are never on a
//! command line, in an environment variable or in the ConfigMap.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::StatefulSet,
        core::v1::{
            ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, ExecAction, KeyToPath,
            PodSpec, Probe, ProjectedVolumeSource, Secret, SecretProjection, Service, ServicePort,
            ServiceSpec, TCPSocketAction, Volume, VolumeProjection,
        },
        policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec},
    },
    apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};
use kube::ResourceExt;
use quorum_core::{
    apply::child_metadata,
    naming::{child_name, label_selector, selector_labels, standard_labels},
    pod::{MemberPods, field_env, member_container_security, member_statefulset, memory_volume, mount},
};

use crate::{
    OPERATOR_NAME,
    crd::{Flavor, MySQLCluster, ReplicationMode},
};

/// `app.kubernetes.io/name` of everything this operator creates.
pub const APP: &str = "mysql";
/// `app.kubernetes.io/component` of the member pods.
pub const COMPONENT: &str = "member";
pub const PORT: i32 = 3306;
/// The label the operator sets on member pods after each role change; the primary and
/// replicas Services select on it.
pub const ROLE_LABEL: &str = "mysql.quorum.dev/role";
/// The account the replicas replicate with.
pub const REPLICATION_USER: &str = "quorum_repl";
/// Keys of the credentials in the generated Secrets and in the pods' credentials volume.
pub const PASSWORD_KEY: &str = "password";
pub const ROOT_PASSWORD_FILE: &str = "root-password";
pub const REPLICATION_PASSWORD_FILE: &str = "replication-password";

const CONFIG_DIR: &str = "/etc/mysql/quorum";
const CREDENTIALS_DIR: &str = "/etc/mysql/credentials";
/// Where the server's files are, in its pod and in a physical backup's Job beside it.
pub const DATA_DIR: &str = "/var/lib/mysql";
const RUN_DIR: &str = "/run/mysqld";
/// The server's scratch space (`tmpdir`): the root file system is read-only.
const TMP_DIR: &str = "/tmp";
/// The official images' `mysql` account.
const MYSQL_UID: i64 = 999;
/// The server's container in a member pod.
const SERVER_CONTAINER: &str = "mysqld";
/// The member's volume (its claim template's name).
const DATA_VOLUME: &str = quorum_core::pod::DATA_CLAIM;

type Result<T> = std::result::Result<T, quorum_core::Error>;

/// A member's role, as its pod label says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleLabel {
    /// Accepts writes; selected by the primary Service.
    Primary,
    /// Replicating and caught up; selected by the replicas Service.
    Replica,
    /// Replicating but not yet caught up, or not yet replicating: in no Service.
    CatchingUp,
    /// A former primary kept out of service.
    Fenced,
}

impl RoleLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            RoleLabel::Primary => "primary",
            RoleLabel::Replica => "replica",
            RoleLabel::CatchingUp => "catching-up",
            RoleLabel::Fenced => "fenced",
        }
    }
}

/// The StatefulSet, the headless Service and the PodDisruptionBudget share the cluster's name.
pub fn statefulset_name(cluster: &str) -> String {
    child_name(cluster, "")
}

pub fn headless_service_name(cluster: &str) -> String {
    child_name(cluster, "")
}

pub fn primary_service_name(cluster: &str) -> String {
    child_name(cluster, "primary")
}

pub fn replicas_service_name(cluster: &str) -> String {
    child_name(cluster, "replicas")
}

pub fn config_map_name(cluster: &str) -> String {
    child_name(cluster, "config")
}

/// The generated root password Secret, used when `spec.rootPasswordSecret` is absent.
pub fn generated_root_secret_name(cluster: &str) -> String {
    child_name(cluster, "root")
}

pub fn replication_secret_name(cluster: &str) -> String {
    child_name(cluster, "replication")
}

/// The Secret holding the root password, given or generated.
pub fn root_secret_name(cluster: &MySQLCluster) -> String {
    cluster
        .spec
        .root_password_secret
        .clone()
        .unwrap_or_else(|| generated_root_secret_name(&cluster.name_any()))
}

/// The pod (and member) name of `ordinal`.
pub fn member_name(cluster: &str, ordinal: usize) -> String {
    format!("{}-{ordinal}", statefulset_name(cluster))
}

/// The ordinal of a member (pod) name of `cluster`.
pub fn ordinal_of(cluster: &str, member: &str) -> Option<usize> {
    member
        .strip_prefix(&statefulset_name(cluster))?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// Labels selecting this cluster's member pods.
pub fn member_selector(cluster: &MySQLCluster) -> BTreeMap<String, String> {
    selector_labels(APP, &cluster.name_any(), COMPONENT)
}

/// The selector as a string, for the scale subresource and pod lists.
pub fn member_selector_string(cluster: &MySQLCluster) -> String {
    label_selector(&member_selector(cluster))
}

pub(crate) fn labels(cluster: &MySQLCluster) -> BTreeMap<String, String> {
    standard_labels(APP, &cluster.name_any(), COMPONENT, OPERATOR_NAME)
}

/// The image the members run.
pub fn image(cluster: &MySQLCluster) -> String {
    cluster
        .spec
        .image
        .clone()
        .unwrap_or_else(|| match cluster.spec.flavor {
            Flavor::MySQL => format!("mysql:{}", cluster.spec.version),
            Flavor::MariaDB => format!("mariadb:{}", cluster.spec.version),
        })
}

/// Whether commits wait for replicas: semi-synchronous mode with at least one replica.
pub fn semi_sync(cluster: &MySQLCluster) -> bool {
    cluster.spec.replicas > 1
        && cluster
            .spec
            .replication
            .as_ref()
            .is_none_or(|replication| replication.mode == ReplicationMode::SemiSync)
}

/// How long members keep binary logs once every member replicates at `now`
/// (`spec.replication.binlogExpireSeconds`). When the cluster's own backup policy archives the
/// binary log at each run (`spec.backup.archiveBinlogs`), at least two of its schedule's
/// longest intervals, up to MariaDB's limit: the next run reads the log from where the previous
/// run's archive ended, so a log expiring before then would break the archive (a point-in-time
/// restore could no longer reach any point between the two runs), even with one run missed.
pub fn binlog_expire_seconds(cluster: &MySQLCluster, now: jiff::Timestamp) -> u32 {
    let configured = cluster
        .spec
        .replication
        .clone()
        .unwrap_or_default()
        .binlog_expire_seconds;
    let archived_every = cluster
        .spec
        .backup
        .as_ref()
        .filter(|backup| backup.archive_binlogs)
        .and_then(|backup| {
            quorum_core::backup::longest_interval(&backup.policy.schedule, now, SCHEDULE_RUNS_LOOKED_AT).ok()
        });
    match archived_every {
        // 0 keeps every log for ever already.
        Some(interval) if configured != 0 => {
            let outlasting = u32::try_from(interval.as_secs().saturating_mul(2)).unwrap_or(u32::MAX);
            configured.max(outlasting.min(MAX_BINLOG_EXPIRE_SECONDS))
        }
        _ => configured,
    }
}

/// The runs of a backup schedule whose intervals the binary log expiry outlasts: enough for a
/// monthly schedule's longest month within a year.
const SCHEDULE_RUNS_LOOKED_AT: usize = 16;
/// MariaDB's longest binary log expiry (99 days), also the schema's.
const MAX_BINLOG_EXPIRE_SECONDS: u32 = 99 * 24 * 3600;

/// `my.cnf`: the settings the operator owns, then the user's `config`. The operator's settings
/// make every member start read-only with replication stopped, keeping every binary log until
/// the operator sees all members replicating.
pub fn my_cnf(cluster: &MySQLCluster) -> String {
    let mut lines = vec![
        "# Written by the Quorum MySQL operator; edit spec.config of the MySQLCluster instead.".to_string(),
        "[mysqld]".to_string(),
        "log_bin = binlog".to_string(),
        "relay_log = relay-bin".to_string(),
        "binlog_format = ROW".to_string(),
        "binlog_expire_logs_seconds = 0".to_string(),
        "skip_name_resolve = ON".to_string(),
        "read_only = ON".to_string(),
    ];
    let flavor_lines: &[&str] = match cluster.spec.flavor {
        Flavor::MariaDB => &[
            "log_slave_updates = ON",
            "gtid_strict_mode = ON",
            "skip_slave_start = ON",
            "rpl_semi_sync_master_wait_point = AFTER_SYNC",
        ],
        Flavor::MySQL => &[
            "super_read_only = ON",
            "log_replica_updates = ON",
            "gtid_mode = ON",
            "enforce_gtid_consistency = ON",
            "skip_replica_start = ON",
            "plugin_load_add = semisync_source.so",
            "plugin_load_add = semisync_replica.so",
            "rpl_semi_sync_source_wait_point = AFTER_SYNC",
        ],
    };
    lines.extend(flavor_lines.iter().map(|line| line.to_string()));
    let mariadb_semi_sync = cluster.spec.flavor == Flavor::MariaDB && semi_sync(cluster);
    if mariadb_semi_sync {
        // A member that crashed while commits waited for an acknowledgement recovers as a
        // replica would: the transactions it wrote to its binary log but had not committed (never
        // acknowledged to a client) are discarded rather than committed, so an old primary comes
        // back with nothing the new primary lacks, instead of errant. Every member, since any may
        // be the primary when it crashes; the operator reopens a restarted primary only when no
        // replica holds what it discarded (docs/mysql.md).
        lines.push("init_rpl_role = SLAVE".to_string());
        // With the binary log on, MariaDB leaves InnoDB's commit record in memory after a commit
        // (recovery would commit from the binary log), so a commit acknowledged to a client just
        // before a crash comes back only prepared, and the recovery above discards it: every
        // member down at once loses it for good. `3` writes the commit record at commit as well.
        lines.push(format!("{} = 3", crate::crd::SEMI_SYNC_MARIADB_SETTING));
    }
    if cluster.spec.tls.is_some() {
        lines.extend([
            "ssl_ca = /etc/mysql/tls/ca.crt".to_string(),
            "ssl_cert = /etc/mysql/tls/tls.crt".to_string(),
            "ssl_key = /etc/mysql/tls/tls.key".to_string(),
            "require_secure_transport = ON".to_string(),
        ]);
    }
    if !cluster.spec.config.is_empty() {
        lines.push("# spec.config".to_string());
        // Admission refuses it for these members; one stored before that rule is left out
        // rather than the cluster refused, so the operator's value holds.
        let owned_here =
            |key: &str| mariadb_semi_sync && key.replace('-', "_") == crate::crd::SEMI_SYNC_MARIADB_SETTING;
        lines.extend(
            cluster
                .spec
                .config
                .iter()
                .filter(|(key, _)| !owned_here(key))
                .map(|(key, value)| format!("{key} = {value}")),
        );
    }
    lines.push(String::new());
    lines.join("\n")
}

/// The member's entry point. Paths and programs come from the environment with the pod's
/// values as defaults, so local test harnesses run the very same script.
pub fn start_script(flavor: Flavor) -> String {
    let (server, initialise) = match flavor {
        Flavor::MariaDB => (
            "mariadbd",
            r#""${INSTALL_DB:-mariadb-install-db}" --datadir="$DATA_DIR" --auth-root-authentication-method=normal --skip-test-db ${INSTALL_DB_ARGS:-} >/dev/null"#,
        ),
        Flavor::MySQL => (
            "mysqld",
            r#""${MYSQLD:-mysqld}" --no-defaults --initialize-insecure --datadir="$DATA_DIR" ${INSTALL_DB_ARGS:-}"#,
        ),
    };
    format!(
        r#"#!/bin/sh
# Starts one member: initialises an empty data directory, writes the operator's accounts from
# the mounted credentials into a memory volume, then runs the server read-only. The initial
# password-less root accounts for TCP loopback are dropped: root logs in with its password.
set -eu
CONFIG_DIR="${{CONFIG_DIR:-{CONFIG_DIR}}}"
CREDENTIALS_DIR="${{CREDENTIALS_DIR:-{CREDENTIALS_DIR}}}"
DATA_DIR="${{DATA_DIR:-{DATA_DIR}}}"
RUN_DIR="${{RUN_DIR:-{RUN_DIR}}}"
MYSQLD="${{MYSQLD:-{server}}}"

# A SQL string literal of a file's content (a trailing newline is not part of a password).
literal() {{
  printf "'%s'" "$(sed -e 's/\\/\\\\/g' -e "s/'/\\\\'/g" "$1" | tr -d '\n')"
}}

if [ ! -d "$DATA_DIR/mysql" ]; then
  {initialise}
fi

umask 077
ROOT="$(literal "$CREDENTIALS_DIR/{ROOT_PASSWORD_FILE}")"
REPLICATION="$(literal "$CREDENTIALS_DIR/{REPLICATION_PASSWORD_FILE}")"
cat > "$RUN_DIR/accounts.sql" <<EOF
SET sql_log_bin = 0;
DROP USER IF EXISTS 'root'@'127.0.0.1', 'root'@'::1';
CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY $ROOT;
ALTER USER 'root'@'%' IDENTIFIED BY $ROOT;
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS '{REPLICATION_USER}'@'%' IDENTIFIED BY $REPLICATION;
ALTER USER '{REPLICATION_USER}'@'%' IDENTIFIED BY $REPLICATION;
GRANT REPLICATION SLAVE ON *.* TO '{REPLICATION_USER}'@'%';
SET sql_log_bin = 1;
EOF

exec "$MYSQLD" --defaults-file="$CONFIG_DIR/my.cnf" \
  --datadir="$DATA_DIR" --socket="$RUN_DIR/mysqld.sock" --pid-file="$RUN_DIR/mysqld.pid" \
  --bind-address="${{POD_IP:-0.0.0.0}}" --port={PORT} \
  --server-id="$((${{POD_INDEX}} + 1))" --report-host="${{REPORT_HOST:-$POD_IP}}" \
  --init-file="$RUN_DIR/accounts.sql" ${{MYSQLD_ARGS:-}}
"#
    )
}

/// Where a physical backup's Job runs to read `pod`'s files: its node, its `data` claim mounted
/// where the server has it, its server's image and user.
///
/// # Errors
/// Why `pod` cannot be read beside: not scheduled yet, or not a member pod as the operator
/// builds them.
pub fn beside_member(
    pod: &k8s_openapi::api::core::v1::Pod,
) -> std::result::Result<quorum_core::backup::job::BesideMember, String> {
    let name = pod.name_any();
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| format!("pod {name} has no spec"))?;
    let node = spec.node_name.clone().ok_or_else(|| {
        format!("pod {name} is not on a node yet; a physical backup reads its files on its node")
    })?;
    let image = spec
        .containers
        .iter()
        .find(|container| container.name == SERVER_CONTAINER)
        .and_then(|container| container.image.clone())
        .ok_or_else(|| format!("pod {name} has no {SERVER_CONTAINER} container"))?;
    let claim = spec
        .volumes
        .iter()
        .flatten()
        .find(|volume| volume.name == DATA_VOLUME)
        .and_then(|volume| volume.persistent_volume_claim.as_ref())
        .map(|claim| claim.claim_name.clone())
        .ok_or_else(|| format!("pod {name} has no {DATA_VOLUME} volume claim"))?;
    Ok(quorum_core::backup::job::BesideMember {
        pod: name,
        node,
        claim,
        mount_path: DATA_DIR.into(),
        image,
        uid: MYSQL_UID,
    })
}

/// The ConfigMap with `my.cnf` and `start.sh`.
pub fn build_config_map(cluster: &MySQLCluster) -> Result<ConfigMap> {
    Ok(ConfigMap {
        metadata: child_metadata(cluster, config_map_name(&cluster.name_any()), labels(cluster))?,
        data: Some(BTreeMap::from([
            ("my.cnf".to_string(), my_cnf(cluster)),
            ("start.sh".to_string(), start_script(cluster.spec.flavor)),
        ])),
        ..ConfigMap::default()
    })
}

/// A Secret with one generated password, created once; the operator never rewrites it.
pub fn build_password_secret(cluster: &MySQLCluster, name: String, password: String) -> Result<Secret> {
    Ok(Secret {
        metadata: child_metadata(cluster, name, labels(cluster))?,
        string_data: Some(BTreeMap::from([(PASSWORD_KEY.to_string(), password)])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    })
}

/// The headless Service that gives each member a stable DNS name, ready or not: the operator
/// and the replicas must reach a member before it is in service.
pub fn build_headless_service(cluster: &MySQLCluster) -> Result<Service> {
    let name = cluster.name_any();
    Ok(Service {
        metadata: child_metadata(cluster, headless_service_name(&name), labels(cluster))?,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(member_selector(cluster)),
            ports: Some(vec![mysql_port()]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

/// The read-write Service: the one pod labelled primary. Removing that label (fencing) takes
/// the old primary out of it before anything else happens.
pub fn build_primary_service(cluster: &MySQLCluster) -> Result<Service> {
    role_service(
        cluster,
        primary_service_name(&cluster.name_any()),
        RoleLabel::Primary,
    )
}

/// The read-only Service: replicas that are replicating and caught up.
pub fn build_replicas_service(cluster: &MySQLCluster) -> Result<Service> {
    role_service(
        cluster,
        replicas_service_name(&cluster.name_any()),
        RoleLabel::Replica,
    )
}

fn role_service(cluster: &MySQLCluster, name: String, role: RoleLabel) -> Result<Service> {
    let mut selector = member_selector(cluster);
    selector.insert(ROLE_LABEL.to_string(), role.as_str().to_string());
    Ok(Service {
        metadata: child_metadata(cluster, name, labels(cluster))?,
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![mysql_port()]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

fn mysql_port() -> ServicePort {
    ServicePort {
        name: Some("mysql".into()),
        port: PORT,
        target_port: Some(IntOrString::String("mysql".into())),
        ..ServicePort::default()
    }
}

/// At most one member down at a time through voluntary disruptions (drains).
pub fn build_pod_disruption_budget(cluster: &MySQLCluster) -> Result<PodDisruptionBudget> {
    Ok(PodDisruptionBudget {
        metadata: child_metadata(cluster, statefulset_name(&cluster.name_any()), labels(cluster))?,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(member_selector(cluster)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    })
}

/// The members' StatefulSet with `replicas` pods. Pods are created in parallel: ordinal 0 is
/// not special after the first bootstrap, so later pods must not wait for it.
pub fn build_statefulset(cluster: &MySQLCluster, replicas: i32) -> Result<StatefulSet> {
    build_restoring_statefulset(cluster, replicas, None)
}

/// How the members of a cluster restored from a physical copy get it: two init containers
/// before the server. The first copies the operator's binary (and its CA bundle) from the
/// operator's image; the second runs it in the member's image, which carries `mariadb-backup`,
/// as `restore-physical`: the first member's empty data directory gets the copy, and every
/// member's init container reports what it did in its termination message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhysicalRestoreInit {
    pub operator_image: String,
    pub fetch: quorum_core::backup::ObjectFetch,
    /// The GTID position the backup recorded for the copy.
    pub position: String,
}

/// The init container that restores the copy ([`PhysicalRestoreInit`]).
pub const RESTORE_CONTAINER: &str = "restore";

fn physical_restore_containers(cluster: &MySQLCluster, restore: &PhysicalRestoreInit) -> Vec<Container> {
    use quorum_core::backup::job::{
        BESIDE_BINARY, BESIDE_BINARY_DIR, CA_BUNDLE_COPY, INSTALL_BINARY_COMMAND,
    };
    let install = Container {
        name: "install-operator".into(),
        image: Some(restore.operator_image.clone()),
        args: Some(vec![
            INSTALL_BINARY_COMMAND.into(),
            format!("--to={BESIDE_BINARY_DIR}"),
        ]),
        volume_mounts: Some(vec![mount("operator-binary", BESIDE_BINARY_DIR, false)]),
        security_context: Some(member_container_security(true)),
        ..Container::default()
    };
    let mut args = vec!["restore-physical".to_string()];
    args.extend(restore.fetch.object_args());
    args.extend([
        format!("--position={}", restore.position),
        "--pod=$(POD_NAME)".to_string(),
        format!("--data-dir={DATA_DIR}"),
    ]);
    args.extend(restore.fetch.store_args());
    let mut env = vec![
        field_env("POD_NAME", "metadata.name"),
        EnvVar {
            name: "SSL_CERT_FILE".into(),
            value: Some(format!("{BESIDE_BINARY_DIR}/{CA_BUNDLE_COPY}")),
            ..EnvVar::default()
        },
    ];
    env.extend(restore.fetch.credentials_env());
    let restore = Container {
        name: RESTORE_CONTAINER.into(),
        image: Some(image(cluster)),
        command: Some(vec![format!("{BESIDE_BINARY_DIR}/{BESIDE_BINARY}")]),
        args: Some(args),
        env: Some(env),
        volume_mounts: Some(vec![
            mount(DATA_VOLUME, DATA_DIR, false),
            mount("operator-binary", BESIDE_BINARY_DIR, true),
            mount("tmp", TMP_DIR, false),
        ]),
        resources: cluster.spec.resources.clone(),
        security_context: Some(member_container_security(true)),
        ..Container::default()
    };
    vec![install, restore]
}

/// [`build_statefulset`], with the init containers of a physical restore while `restore` is
/// given.
pub fn build_restoring_statefulset(
    cluster: &MySQLCluster,
    replicas: i32,
    restore: Option<&PhysicalRestoreInit>,
) -> Result<StatefulSet> {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let pod_labels = labels(cluster);
    let env = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_IP", "status.podIP"),
        field_env("POD_INDEX", "metadata.labels['apps.kubernetes.io/pod-index']"),
        EnvVar {
            name: "REPORT_HOST".into(),
            value: Some(format!(
                "$(POD_NAME).{}.{namespace}.svc",
                headless_service_name(&name)
            )),
            ..EnvVar::default()
        },
    ];
    let mut mounts = vec![
        mount(DATA_VOLUME, DATA_DIR, false),
        mount("config", CONFIG_DIR, true),
        mount("credentials", CREDENTIALS_DIR, true),
        mount("run", RUN_DIR, false),
        mount("tmp", TMP_DIR, false),
    ];
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map_name(&name),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        credentials_volume(cluster),
        memory_volume("run"),
        memory_volume("tmp"),
    ];
    if restore.is_some() {
        volumes.push(Volume {
            name: "operator-binary".into(),
            empty_dir: Some(k8s_openapi::api::core::v1::EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
    }
    if let Some(tls) = &cluster.spec.tls {
        mounts.push(mount("tls", "/etc/mysql/tls", true));
        volumes.push(Volume {
            name: "tls".into(),
            secret: Some(k8s_openapi::api::core::v1::SecretVolumeSource {
                secret_name: Some(tls.secret_name.clone()),
                default_mode: Some(0o440),
                ..Default::default()
            }),
            ..Volume::default()
        });
    }
    let container = Container {
        name: SERVER_CONTAINER.into(),
        image: Some(image(cluster)),
        command: Some(vec!["sh".into(), format!("{CONFIG_DIR}/start.sh")]),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some("mysql".into()),
            container_port: PORT,
            ..ContainerPort::default()
        }]),
        volume_mounts: Some(mounts),
        resources: cluster.spec.resources.clone(),
        security_context: Some(member_container_security(true)),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("mysql".into()),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        liveness_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(vec![
                    "sh".into(),
                    "-c".into(),
                    format!("test -S {RUN_DIR}/mysqld.sock"),
                ]),
            }),
            initial_delay_seconds: Some(60),
            period_seconds: Some(10),
            failure_threshold: Some(6),
            ..Probe::default()
        }),
        ..Container::default()
    };
    member_statefulset(
        cluster,
        statefulset_name(&name),
        labels(cluster),
        headless_service_name(&name),
        replicas,
        member_selector(cluster),
        MemberPods {
            overrides: cluster.spec.pod_template.as_ref(),
            labels: pod_labels,
            uid: MYSQL_UID,
            spec: PodSpec {
                init_containers: restore.map(|restore| physical_restore_containers(cluster, restore)),
                containers: vec![container],
                volumes: Some(volumes),
                termination_grace_period_seconds: Some(60),
                ..PodSpec::default()
            },
            config: Some(&build_config_map(cluster)?),
        },
        true,
        Some(&cluster.spec.storage),
    )
}

/// The root and replication passwords as files, readable by the server only.
fn credentials_volume(cluster: &MySQLCluster) -> Volume {
    let secret = |name: String, file: &str| VolumeProjection {
        secret: Some(SecretProjection {
            name,
            items: Some(vec![KeyToPath {
                key: PASSWORD_KEY.into(),
                path: file.into(),
                ..KeyToPath::default()
            }]),
            ..SecretProjection::default()
        }),
        ..VolumeProjection::default()
    };
    Volume {
        name: "credentials".into(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o400),
            sources: Some(vec![
                secret(root_secret_name(cluster), ROOT_PASSWORD_FILE),
                secret(
                    replication_secret_name(&cluster.name_any()),
                    REPLICATION_PASSWORD_FILE,
                ),
            ]),
        }),
        ..Volume::default()
    }
}

impl quorum_core::pass::ClusterObject for MySQLCluster {
    fn statefulsets(&self) -> Vec<String> {
        vec![statefulset_name(&self.name_any())]
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

/// Sets the engine's own fields of `cluster`'s backup policy on the backup that carries it out.
pub fn scheduled_backup_fields(cluster: &MySQLCluster) -> impl FnOnce(&mut crate::crd::MySQLBackup) + '_ {
    move |backup| {
        if let Some(policy) = &cluster.spec.backup {
            backup.spec.archive_binlogs = policy.archive_binlogs;
            backup.spec.method = policy.method;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{MySQLClusterSpec, ReplicationSpec};
    use quorum_core::crd::Storage;

    fn cluster(flavor: Flavor, replicas: i32) -> MySQLCluster {
        let mut cluster = MySQLCluster::new(
            "shop",
            MySQLClusterSpec {
                replicas,
                flavor,
                version: "10.11.6".into(),
                image: None,
                storage: Storage {
                    size: k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
                    storage_class_name: None,
                },
                resources: None,
                pod_template: None,
                config: BTreeMap::from([("max_connections".to_string(), "500".to_string())]),
                root_password_secret: None,
                users: vec![],
                replication: None,
                tls: None,
                backup: None,
                restore_from: None,
            },
        );
        cluster.metadata.namespace = Some("prod".into());
        cluster.metadata.uid = Some("uid-1".into());
        cluster
    }

    #[test]
    fn members_restoring_a_physical_copy_run_the_operators_binary_in_their_image_first() {
        let cluster = cluster(Flavor::MariaDB, 3);
        let init = PhysicalRestoreInit {
            operator_image: "ghcr.io/quorum-dev/mysql-operator:v1".into(),
            fetch: quorum_core::backup::ObjectFetch {
                location: "s3://backups/mysql/ns/shop/x.xbstream".into(),
                sha256: "ab12".into(),
                s3_endpoint: Some("http://s3.example:9000".into()),
                s3_region: None,
                credentials_secret_name: Some("s3-credentials".into()),
                allow_http: true,
            },
            position: "0-1-42".into(),
        };
        let pod = build_restoring_statefulset(&cluster, 3, Some(&init))
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        let init_containers = pod.init_containers.unwrap();
        assert_eq!(
            init_containers[0].image.as_deref(),
            Some("ghcr.io/quorum-dev/mysql-operator:v1")
        );
        let restore = &init_containers[1];
        assert_eq!(restore.name, RESTORE_CONTAINER);
        assert_eq!(
            restore.image, pod.containers[0].image,
            "the member's image, with mariadb-backup"
        );
        assert_eq!(restore.command.as_deref().unwrap(), ["/quorum/bin/operator"]);
        let args = restore.args.clone().unwrap();
        for expected in [
            "restore-physical",
            "--location=s3://backups/mysql/ns/shop/x.xbstream",
            "--sha256=ab12",
            "--position=0-1-42",
            "--pod=$(POD_NAME)",
            "--data-dir=/var/lib/mysql",
            "--s3-endpoint=http://s3.example:9000",
            "--allow-http",
        ] {
            assert!(args.contains(&expected.to_string()), "{expected} in {args:?}");
        }
        let env = restore.env.clone().unwrap();
        assert!(env.iter().any(|e| e.name == "AWS_ACCESS_KEY_ID"));
        assert!(env.iter().any(|e| e.name == "SSL_CERT_FILE"));
        assert!(
            restore
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == "data" && m.mount_path == "/var/lib/mysql" && m.read_only.is_none())
        );
        // Without a restore, nothing of it.
        let plain = build_statefulset(&cluster, 3)
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        assert_eq!(plain.init_containers, None);
        assert!(plain.volumes.unwrap().iter().all(|v| v.name != "operator-binary"));
    }

    #[test]
    fn a_physical_backup_runs_beside_the_member_pod_it_was_built_as() {
        let cluster = cluster(Flavor::MariaDB, 3);
        let statefulset = build_statefulset(&cluster, 3).unwrap();
        let mut template = statefulset.spec.unwrap().template;
        let mut spec = template.spec.take().unwrap();
        // As the StatefulSet controller makes pod 1: its claim, on a node.
        spec.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: "data".into(),
            persistent_volume_claim: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                claim_name: "data-shop-1".into(),
                read_only: None,
            }),
            ..Volume::default()
        });
        let mut pod = k8s_openapi::api::core::v1::Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("shop-1".into()),
                ..Default::default()
            },
            spec: Some(spec),
            status: None,
        };
        let unscheduled = beside_member(&pod).unwrap_err();
        assert!(unscheduled.contains("not on a node"), "{unscheduled}");
        pod.spec.as_mut().unwrap().node_name = Some("node-a".into());
        let beside = beside_member(&pod).unwrap();
        assert_eq!(beside.pod, "shop-1");
        assert_eq!(beside.node, "node-a");
        assert_eq!(beside.claim, "data-shop-1");
        assert_eq!(beside.mount_path, "/var/lib/mysql");
        assert_eq!(beside.uid, 999);
        let server = pod
            .spec
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .find(|c| c.name == "mysqld")
            .unwrap();
        assert_eq!(Some(&beside.image), server.image.as_ref());
        let mounted = server
            .volume_mounts
            .iter()
            .flatten()
            .find(|mount| mount.name == "data")
            .unwrap();
        assert_eq!(mounted.mount_path, beside.mount_path);
    }

    #[test]
    fn members_start_read_only_with_replication_stopped() {
        let mariadb = my_cnf(&cluster(Flavor::MariaDB, 3));
        assert!(mariadb.contains("read_only = ON"));
        assert!(mariadb.contains("skip_slave_start = ON"));
        assert!(mariadb.contains("gtid_strict_mode = ON"));
        let mysql = my_cnf(&cluster(Flavor::MySQL, 3));
        assert!(mysql.contains("super_read_only = ON"));
        assert!(mysql.contains("skip_replica_start = ON"));
        assert!(mysql.contains("gtid_mode = ON"));
        assert!(mysql.ends_with("max_connections = 500\n"));
    }

    #[test]
    fn semi_sync_mariadb_members_recover_from_a_crash_as_replicas() {
        let semi_sync = my_cnf(&cluster(Flavor::MariaDB, 3));
        assert!(semi_sync.contains("init_rpl_role = SLAVE\n"), "{semi_sync}");
        assert!(
            semi_sync.contains("innodb_flush_log_at_trx_commit = 3\n"),
            "{semi_sync}"
        );
        // A value stored before admission refused it is left out: the operator's holds.
        let mut stored = cluster(Flavor::MariaDB, 3);
        stored
            .spec
            .config
            .insert("innodb-flush-log-at-trx-commit".into(), "2".into());
        let written = my_cnf(&stored);
        assert!(!written.contains("innodb-flush-log-at-trx-commit"), "{written}");
        assert!(
            written.contains("innodb_flush_log_at_trx_commit = 3\n"),
            "{written}"
        );
        // Elsewhere it is the user's to tune.
        let mut mysql = cluster(Flavor::MySQL, 3);
        mysql
            .spec
            .config
            .insert("innodb_flush_log_at_trx_commit".into(), "2".into());
        assert!(my_cnf(&mysql).contains("innodb_flush_log_at_trx_commit = 2\n"));
        let mut asynchronous = cluster(Flavor::MariaDB, 3);
        asynchronous.spec.replication = Some(ReplicationSpec {
            mode: crate::crd::ReplicationMode::Async,
            ..ReplicationSpec::default()
        });
        assert!(!my_cnf(&asynchronous).contains("init_rpl_role"));
        assert!(!my_cnf(&cluster(Flavor::MySQL, 3)).contains("init_rpl_role"));
    }

    #[test]
    fn passwords_reach_the_server_through_files_only() {
        let statefulset = build_statefulset(&cluster(Flavor::MariaDB, 3), 3).unwrap();
        let pod = statefulset.spec.unwrap().template.spec.unwrap();
        let container = &pod.containers[0];
        for env in container.env.as_ref().unwrap() {
            assert!(
                env.value_from
                    .as_ref()
                    .is_none_or(|from| from.secret_key_ref.is_none())
            );
        }
        let script = start_script(Flavor::MariaDB);
        assert!(script.contains("--init-file=\"$RUN_DIR/accounts.sql\""));
        assert!(!script.contains("--password"));
        let credentials = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "credentials")
            .unwrap();
        let sources = credentials.projected.unwrap().sources.unwrap();
        assert_eq!(sources[0].secret.as_ref().unwrap().name, "shop-root");
        assert_eq!(sources[1].secret.as_ref().unwrap().name, "shop-replication");
    }

    #[test]
    fn a_changed_config_changes_the_pod_template_so_the_members_roll_onto_it() {
        let template = |cluster: &MySQLCluster| build_statefulset(cluster, 3).unwrap().spec.unwrap().template;
        let before = cluster(Flavor::MariaDB, 3);
        let mut tuned = before.clone();
        tuned.spec.config.insert("max_connections".into(), "800".into());
        assert_ne!(
            template(&before),
            template(&tuned),
            "my.cnf is read only as mysqld starts: a template that does not change with it never restarts a member onto it"
        );
        assert_eq!(template(&before), template(&before.clone()));
    }

    #[test]
    fn pods_change_only_when_the_operator_restarts_them() {
        let statefulset = build_statefulset(&cluster(Flavor::MariaDB, 3), 3).unwrap();
        let strategy = statefulset.spec.unwrap().update_strategy.unwrap();
        assert_eq!(strategy.type_.as_deref(), Some("OnDelete"));
    }

    #[test]
    fn role_services_select_by_the_role_label() {
        let cluster = cluster(Flavor::MariaDB, 3);
        let primary = build_primary_service(&cluster).unwrap();
        assert_eq!(primary.metadata.name.as_deref(), Some("shop-primary"));
        let selector = primary.spec.unwrap().selector.unwrap();
        assert_eq!(selector[ROLE_LABEL], "primary");
        let replicas = build_replicas_service(&cluster).unwrap();
        assert_eq!(replicas.spec.unwrap().selector.unwrap()[ROLE_LABEL], "replica");
    }

    #[test]
    fn semi_sync_needs_a_replica_and_is_the_default() {
        assert!(semi_sync(&cluster(Flavor::MariaDB, 3)));
        assert!(!semi_sync(&cluster(Flavor::MariaDB, 1)));
        let mut asynchronous = cluster(Flavor::MariaDB, 3);
        asynchronous.spec.replication = Some(ReplicationSpec {
            mode: ReplicationMode::Async,
            ..ReplicationSpec::default()
        });
        assert!(!semi_sync(&asynchronous));
    }

    /// With the binary log archived at each run of the cluster's own schedule, members keep
    /// their logs at least two of its longest intervals, so the next run (or the one after a
    /// missed run) still finds where the archive ended.
    #[test]
    fn binary_logs_outlast_two_intervals_of_the_schedule_that_archives_them() {
        let now: jiff::Timestamp = "2026-11-21T15:30:00Z".parse().unwrap();
        let day = 24 * 3600;
        let with = |schedule: &str, archive_binlogs: bool, configured: u32| {
            let mut cluster = cluster(Flavor::MariaDB, 3);
            cluster.spec.replication = Some(crate::crd::ReplicationSpec {
                binlog_expire_seconds: configured,
                ..Default::default()
            });
            cluster.spec.backup = Some(crate::crd::MySqlBackupPolicy {
                policy: serde_json::from_value(serde_json::json!({
                    "schedule": schedule,
                    "destination": {"filesystem": {"path": "/backups"}},
                }))
                .unwrap(),
                archive_binlogs,
                method: crate::crd::BackupMethod::Logical,
            });
            binlog_expire_seconds(&cluster, now)
        };
        // (schedule, archived, configured expiry, kept)
        let table = [
            ("0 3 * * *", true, 7 * day, 7 * day),
            ("0 3 * * *", true, day, 2 * day),
            ("0 3 * * 1-5", true, day, 6 * day),
            ("0 3 * * 0", true, 7 * day, 14 * day),
            ("0 0 1 * *", true, 7 * day, 62 * day),
            ("0 0 1 */6 *", true, 7 * day, 99 * day),
            ("0 3 * * 0", false, day, day),
            ("0 3 * * 0", true, 0, 0),
        ];
        for (schedule, archived, configured, kept) in table {
            assert_eq!(
                with(schedule, archived, configured),
                kept,
                "{schedule} archived {archived}, configured {configured}"
            );
        }
        assert_eq!(binlog_expire_seconds(&cluster(Flavor::MariaDB, 3), now), 7 * day);
    }

    #[test]
    fn members_prefer_distinct_nodes_unless_the_user_gives_an_affinity() {
        let spread = |cluster: &MySQLCluster| {
            let statefulset = build_statefulset(cluster, 3).unwrap();
            statefulset.spec.unwrap().template.spec.unwrap().affinity
        };
        let mut cluster = cluster(Flavor::MariaDB, 3);
        assert_eq!(
            spread(&cluster),
            Some(quorum_core::pod::affinity_or_spread(
                None,
                &member_selector(&cluster)
            ))
        );
        let own = k8s_openapi::api::core::v1::Affinity::default();
        cluster.spec.pod_template = Some(quorum_core::crd::PodOverrides {
            affinity: Some(own.clone()),
            ..Default::default()
        });
        assert_eq!(spread(&cluster), Some(own));
    }

    #[test]
    fn member_names_round_trip() {
        assert_eq!(member_name("shop", 2), "shop-2");
        assert_eq!(ordinal_of("shop", "shop-2"), Some(2));
        assert_eq!(ordinal_of("shop", "shopx-2"), None);
    }
    #[test]
    fn a_drill_recorded_on_the_cluster_changes_what_wakes_its_pass_and_nothing_else_of_its_status_does() {
        use quorum_core::{
            backup::drill::{ended, started},
            pass::last_drill_digest,
        };
        let mut shop = cluster(Flavor::MariaDB, 3);
        assert_eq!(last_drill_digest(&shop), None);
        let now = jiff::Timestamp::now();
        let drill = started("nightly", "s3://b/shop/1", "nightly-drill", now);
        let status = shop.status.get_or_insert_with(Default::default);
        status.last_drill = Some(ended(&drill, None, now));
        let verified = last_drill_digest(&shop);
        assert!(verified.is_some());
        shop.status.as_mut().unwrap().ready_replicas = 3;
        assert_eq!(last_drill_digest(&shop), verified, "another status field");
        shop.status.as_mut().unwrap().last_drill = Some(ended(&drill, Some("content differs".into()), now));
        let failed = last_drill_digest(&shop);
        assert!(failed.is_some() && failed != verified, "{failed:?}");
    }

    #[test]
    fn a_backup_policy_that_archives_the_binary_log_makes_a_scheduled_backup_that_does() {
        let mut cluster = cluster(Flavor::MariaDB, 3);
        cluster.spec.backup = Some(
            serde_json::from_value(serde_json::json!({
                "schedule": "*/15 * * * *",
                "destination": {"filesystem": {"path": "/backups"}},
                "retain": 96,
                "archiveBinlogs": true,
            }))
            .unwrap(),
        );
        let backup = quorum_core::backup::controller::scheduled_backup::<crate::crd::MySQLBackup, _>(
            &cluster,
            cluster.spec.backup.as_ref().map(|policy| &policy.policy),
            "main-scheduled",
            std::collections::BTreeMap::new(),
            scheduled_backup_fields(&cluster),
        )
        .unwrap()
        .unwrap();
        assert!(backup.spec.archive_binlogs);
        assert_eq!(backup.spec.backup.retain, Some(96));
        assert_eq!(backup.spec.backup.schedule.as_deref(), Some("*/15 * * * *"));
    }
}
