//! Pure builders: a `MongoDBReplicaSet` in, the Kubernetes objects it needs out. No API calls
//! here; every builder is unit-tested without a cluster.
//!
//! Every member pod runs the official image's entrypoint with `mongod --replSet`: on an empty
//! data directory the entrypoint first creates the administrator from the files of the admin
//! Secret, so the password is never on a command line, in an environment variable's value or in
//! a ConfigMap. Nothing in a pod forms the set: the operator initiates it and adds, removes and
//! reconfigures members through `replSetReconfig`. The StatefulSets update `OnDelete`: the
//! operator restarts members itself, secondaries first, the primary after stepping down.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::StatefulSet,
        core::v1::{
            ConfigMap, ConfigMapEnvSource, Container, ContainerPort, EnvFromSource, KeyToPath, PodSpec,
            Probe, Secret, SecretVolumeSource, Service, ServicePort, ServiceSpec, TCPSocketAction, Volume,
        },
        policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec},
    },
    apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};
use kube::ResourceExt;
use quorum_core::{
    apply::child_metadata,
    config::MemberConfig,
    naming::{PodHosts, child_name, label_selector, selector_labels, standard_labels},
    pod::{
        MemberPods, generate_password, member_container_security, member_statefulset, memory_volume, mount,
        value_env,
    },
};

use crate::{OPERATOR_NAME, crd::MongoDBReplicaSet};

/// `app.kubernetes.io/name` of everything this operator creates.
pub const APP: &str = "mongodb";
/// `app.kubernetes.io/component` of the data-bearing members and of the arbiter.
pub const MEMBER_COMPONENT: &str = "member";
pub const ARBITER_COMPONENT: &str = "arbiter";
pub const PORT: i32 = 27017;
/// Keys of the admin Secret, and the files the pods read them from.
pub const USERNAME_KEY: &str = "username";
pub const PASSWORD_KEY: &str = "password";
/// The key of the keyfile Secret, and the file name `mongod` reads.
pub const KEYFILE_KEY: &str = "keyfile";
/// The version a pod was created for: the operator compares it with the spec's to find the
/// members a rolling upgrade has yet to restart.
pub const VERSION_LABEL: &str = "mongodb.quorum.dev/version";
/// The administrator the operator generates when `spec.adminSecret` is absent.
pub const DEFAULT_ADMIN_USERNAME: &str = "quorum-admin";

/// The members' `mongod` container.
pub const MONGOD_CONTAINER: &str = "mongod";
/// The init container that gives `mongod` a keyfile only its own user can read.
pub const KEYFILE_PERMISSIONS_CONTAINER: &str = "keyfile-permissions";
/// The ConfigMap key holding the replica set's name (`--replSet $(REPLICA_SET_NAME)`).
pub const REPLICA_SET_NAME_VARIABLE: &str = "REPLICA_SET_NAME";
/// The ConfigMap key holding the spec's version.
pub const VERSION_VARIABLE: &str = "MONGODB_VERSION";

/// The official image's `mongodb` user and group.
const MONGODB_UID: i64 = 999;
const DATA_DIR: &str = "/data/db";
const ADMIN_DIR: &str = "/etc/mongodb/admin";
const KEYFILE_DIR: &str = "/etc/mongodb/keyfile";
const KEYFILE_PRIVATE_DIR: &str = "/etc/mongodb/keyfile-private";
/// The entrypoint's pid file and `mongod`'s Unix socket go here; the root filesystem is
/// read-only.
const TMP_DIR: &str = "/tmp";
/// The length of a generated keyfile: MongoDB accepts 6 to 1024 base64 characters.
const KEYFILE_LENGTH: usize = 756;

type Result<T> = std::result::Result<T, quorum_core::Error>;

/// The data members' StatefulSet is named after the replica set.
pub fn statefulset_name(replica_set: &str) -> String {
    child_name(replica_set, "")
}

/// The arbiter's StatefulSet is `<replica set>-arbiter`: the longest of a replica set's
/// StatefulSet names.
pub const ARBITER_SUFFIX: &str = "arbiter";

pub fn arbiter_statefulset_name(replica_set: &str) -> String {
    child_name(replica_set, ARBITER_SUFFIX)
}

/// The headless Service that gives every member, the arbiter included, a stable DNS name;
/// named after the replica set, as the data StatefulSet.
pub fn headless_service_name(replica_set: &str) -> String {
    child_name(replica_set, "")
}

/// The Service applications start from: the data members (the driver discovers the set and
/// its primary from any of them).
pub fn client_service_name(replica_set: &str) -> String {
    child_name(replica_set, "client")
}

/// The ConfigMap of a StatefulSet is named after it: `<statefulset>-config`.
pub fn config_map_name(statefulset: &str) -> String {
    child_name(statefulset, "config")
}

/// The generated administrator Secret, used when `spec.adminSecret` is absent.
pub fn generated_admin_secret_name(replica_set: &str) -> String {
    child_name(replica_set, "admin")
}

/// The Secret holding the administrator's username and password, given or generated.
pub fn admin_secret_name(replica_set: &MongoDBReplicaSet) -> String {
    replica_set
        .spec
        .admin_secret
        .clone()
        .unwrap_or_else(|| generated_admin_secret_name(&replica_set.name_any()))
}

/// The generated keyfile Secret, used when `spec.keyfileSecret` is absent.
pub fn generated_keyfile_secret_name(replica_set: &str) -> String {
    child_name(replica_set, "keyfile")
}

/// The Secret holding the members' shared keyfile, given or generated.
pub fn keyfile_secret_name(replica_set: &MongoDBReplicaSet) -> String {
    replica_set
        .spec
        .keyfile_secret
        .clone()
        .unwrap_or_else(|| generated_keyfile_secret_name(&replica_set.name_any()))
}

/// The pod (and member) name of data member `ordinal`.
pub fn member_name(replica_set: &str, ordinal: usize) -> String {
    format!("{}-{ordinal}", statefulset_name(replica_set))
}

/// The pod (and member) name of the arbiter.
pub fn arbiter_name(replica_set: &str) -> String {
    format!("{}-0", arbiter_statefulset_name(replica_set))
}

/// The ordinal of a data member's name; `None` for the arbiter and for other names.
pub fn ordinal_of(replica_set: &str, member: &str) -> Option<usize> {
    member
        .strip_prefix(&statefulset_name(replica_set))?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// The `host:port` of pod `ordinal` of `statefulset` in the replica set configuration: its
/// name under the headless Service, or, for members run as local processes, the loopback
/// address the local launcher gives that pod. Members and clients alike know each other by
/// this, so it must never change for a member's lifetime.
pub fn member_host(
    replica_set: &MongoDBReplicaSet,
    statefulset: &str,
    ordinal: usize,
    members: &MemberConfig,
) -> String {
    let host = PodHosts::new(members, replica_set).host(
        statefulset,
        &headless_service_name(&replica_set.name_any()),
        ordinal,
    );
    format!("{host}:{PORT}")
}

/// Labels selecting this replica set's pods of `component`.
pub fn selector(replica_set: &MongoDBReplicaSet, component: &str) -> BTreeMap<String, String> {
    selector_labels(APP, &replica_set.name_any(), component)
}

/// The selector of this replica set's pods of `component` as a string, for pod lists.
pub fn selector_string(replica_set: &MongoDBReplicaSet, component: &str) -> String {
    label_selector(&selector(replica_set, component))
}

pub(crate) fn labels(replica_set: &MongoDBReplicaSet, component: &str) -> BTreeMap<String, String> {
    standard_labels(APP, &replica_set.name_any(), component, OPERATOR_NAME)
}

/// The image the members and the arbiter run.
pub fn image(replica_set: &MongoDBReplicaSet) -> String {
    replica_set
        .spec
        .image
        .clone()
        .unwrap_or_else(|| format!("mongo:{}", replica_set.spec.version))
}

fn config_map(replica_set: &MongoDBReplicaSet, statefulset: &str, component: &str) -> Result<ConfigMap> {
    Ok(ConfigMap {
        metadata: child_metadata(
            replica_set,
            config_map_name(statefulset),
            labels(replica_set, component),
        )?,
        data: Some(BTreeMap::from([
            (REPLICA_SET_NAME_VARIABLE.to_string(), replica_set.name_any()),
            (VERSION_VARIABLE.to_string(), replica_set.spec.version.clone()),
        ])),
        ..ConfigMap::default()
    })
}

/// The data members' ConfigMap, their environment (`envFrom`): the replica set's name and
/// the spec's version.
pub fn build_config_map(replica_set: &MongoDBReplicaSet) -> Result<ConfigMap> {
    config_map(
        replica_set,
        &statefulset_name(&replica_set.name_any()),
        MEMBER_COMPONENT,
    )
}

/// The arbiter's ConfigMap, with the same settings as the data members'.
pub fn build_arbiter_config_map(replica_set: &MongoDBReplicaSet) -> Result<ConfigMap> {
    config_map(
        replica_set,
        &arbiter_statefulset_name(&replica_set.name_any()),
        ARBITER_COMPONENT,
    )
}

/// The Secret with the generated administrator, created once; the operator never rewrites it.
pub fn build_admin_secret(
    replica_set: &MongoDBReplicaSet,
    username: String,
    password: String,
) -> Result<Secret> {
    Ok(Secret {
        metadata: child_metadata(
            replica_set,
            generated_admin_secret_name(&replica_set.name_any()),
            labels(replica_set, MEMBER_COMPONENT),
        )?,
        string_data: Some(BTreeMap::from([
            (USERNAME_KEY.to_string(), username),
            (PASSWORD_KEY.to_string(), password),
        ])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    })
}

/// The Secret with the generated keyfile, created once: a changed keyfile would lock the
/// members that still have the old one out of the set.
pub fn build_keyfile_secret(replica_set: &MongoDBReplicaSet, keyfile: String) -> Result<Secret> {
    Ok(Secret {
        metadata: child_metadata(
            replica_set,
            generated_keyfile_secret_name(&replica_set.name_any()),
            labels(replica_set, MEMBER_COMPONENT),
        )?,
        string_data: Some(BTreeMap::from([(KEYFILE_KEY.to_string(), keyfile)])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    })
}

/// A random keyfile: 756 letters and digits, all in the base64 alphabet MongoDB requires.
pub fn generate_keyfile() -> String {
    let mut keyfile = String::with_capacity(KEYFILE_LENGTH + 32);
    while keyfile.len() < KEYFILE_LENGTH {
        keyfile.push_str(&generate_password());
    }
    keyfile.truncate(KEYFILE_LENGTH);
    keyfile
}

/// The headless Service of both StatefulSets: a stable name per member and for the arbiter,
/// ready or not, since members must reach one another (and the operator them) before any is
/// ready. It selects on the instance, not the component, so the arbiter's pod is named under
/// it too.
pub fn build_headless_service(replica_set: &MongoDBReplicaSet) -> Result<Service> {
    let mut instance = selector(replica_set, MEMBER_COMPONENT);
    instance.remove("app.kubernetes.io/component");
    Ok(Service {
        metadata: child_metadata(
            replica_set,
            headless_service_name(&replica_set.name_any()),
            labels(replica_set, MEMBER_COMPONENT),
        )?,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(instance),
            ports: Some(vec![service_port()]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

/// The Service applications connect through: the data members that are ready. The arbiter
/// holds no data and serves no client.
pub fn build_client_service(replica_set: &MongoDBReplicaSet) -> Result<Service> {
    Ok(Service {
        metadata: child_metadata(
            replica_set,
            client_service_name(&replica_set.name_any()),
            labels(replica_set, MEMBER_COMPONENT),
        )?,
        spec: Some(ServiceSpec {
            selector: Some(selector(replica_set, MEMBER_COMPONENT)),
            ports: Some(vec![service_port()]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

fn service_port() -> ServicePort {
    ServicePort {
        name: Some("mongodb".into()),
        port: PORT,
        target_port: Some(IntOrString::String("mongodb".into())),
        ..ServicePort::default()
    }
}

/// At most one data member down at a time through voluntary disruptions (drains).
pub fn build_pod_disruption_budget(replica_set: &MongoDBReplicaSet) -> Result<PodDisruptionBudget> {
    Ok(PodDisruptionBudget {
        metadata: child_metadata(
            replica_set,
            statefulset_name(&replica_set.name_any()),
            labels(replica_set, MEMBER_COMPONENT),
        )?,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector(replica_set, MEMBER_COMPONENT)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    })
}

/// The data members' StatefulSet with `replicas` pods, each with a volume for its data.
pub fn build_statefulset(replica_set: &MongoDBReplicaSet, replicas: i32) -> Result<StatefulSet> {
    statefulset(
        replica_set,
        statefulset_name(&replica_set.name_any()),
        MEMBER_COMPONENT,
        replicas,
    )
}

/// The arbiter's StatefulSet, one pod on a pod-lifetime volume (an arbiter holds no data;
/// a new one is added again by the operator); `None` unless `spec.arbiter`.
pub fn build_arbiter_statefulset(replica_set: &MongoDBReplicaSet) -> Result<Option<StatefulSet>> {
    if !replica_set.spec.arbiter {
        return Ok(None);
    }
    statefulset(
        replica_set,
        arbiter_statefulset_name(&replica_set.name_any()),
        ARBITER_COMPONENT,
        1,
    )
    .map(Some)
}

fn secret_volume(name: &str, secret: String, keys: &[&str]) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            default_mode: Some(0o400),
            items: Some(
                keys.iter()
                    .map(|key| KeyToPath {
                        key: (*key).into(),
                        path: (*key).into(),
                        ..KeyToPath::default()
                    })
                    .collect(),
            ),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn tcp_probe() -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::String("mongodb".into()),
            ..TCPSocketAction::default()
        }),
        ..Probe::default()
    }
}

/// `mongod`'s arguments. Authentication between members and of clients follows from
/// `--keyFile`; the keyfile is the private copy, since `mongod` refuses one its group can read.
pub fn mongod_args() -> Vec<String> {
    vec![
        "mongod".into(),
        "--replSet".into(),
        format!("$({REPLICA_SET_NAME_VARIABLE})"),
        "--bind_ip_all".into(),
        "--port".into(),
        PORT.to_string(),
        "--dbpath".into(),
        DATA_DIR.into(),
        "--keyFile".into(),
        format!("{KEYFILE_PRIVATE_DIR}/{KEYFILE_KEY}"),
    ]
}

fn statefulset(
    replica_set: &MongoDBReplicaSet,
    name: String,
    component: &str,
    replicas: i32,
) -> Result<StatefulSet> {
    let persistent = component == MEMBER_COMPONENT;
    let mut pod_labels = labels(replica_set, component);
    pod_labels.insert(VERSION_LABEL.to_string(), replica_set.spec.version.clone());
    let image = image(replica_set);
    let security = member_container_security(true);
    // `mongod` refuses a keyfile its group can read, and Secret volumes are group-readable
    // under an fsGroup whatever their mode: it gets a private copy on a memory volume.
    let keyfile_permissions = Container {
        name: KEYFILE_PERMISSIONS_CONTAINER.into(),
        image: Some(image.clone()),
        command: Some(vec![
            "install".into(),
            "-m".into(),
            "0400".into(),
            format!("{KEYFILE_DIR}/{KEYFILE_KEY}"),
            format!("{KEYFILE_PRIVATE_DIR}/{KEYFILE_KEY}"),
        ]),
        volume_mounts: Some(vec![
            mount("keyfile", KEYFILE_DIR, true),
            mount("keyfile-private", KEYFILE_PRIVATE_DIR, false),
        ]),
        security_context: Some(security.clone()),
        ..Container::default()
    };
    let mongod = Container {
        name: MONGOD_CONTAINER.into(),
        image: Some(image),
        // The image's entrypoint stays: on an empty data directory it creates the
        // administrator from these files before starting `mongod` with these arguments.
        args: Some(mongod_args()),
        env: Some(vec![
            value_env(
                "MONGO_INITDB_ROOT_USERNAME_FILE",
                format!("{ADMIN_DIR}/{USERNAME_KEY}"),
            ),
            value_env(
                "MONGO_INITDB_ROOT_PASSWORD_FILE",
                format!("{ADMIN_DIR}/{PASSWORD_KEY}"),
            ),
        ]),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: config_map_name(&name),
                optional: Some(false),
            }),
            ..EnvFromSource::default()
        }]),
        ports: Some(vec![ContainerPort {
            name: Some("mongodb".into()),
            container_port: PORT,
            ..ContainerPort::default()
        }]),
        volume_mounts: Some(vec![
            mount("data", DATA_DIR, false),
            mount("admin-credentials", ADMIN_DIR, true),
            mount("keyfile-private", KEYFILE_PRIVATE_DIR, true),
            mount("tmp", TMP_DIR, false),
        ]),
        resources: if persistent {
            replica_set.spec.resources.clone()
        } else {
            None
        },
        readiness_probe: Some(Probe {
            period_seconds: Some(5),
            ..tcp_probe()
        }),
        // The entrypoint's first start on an empty volume listens on localhost only while it
        // creates the administrator: leave it time before counting failures.
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(30),
            period_seconds: Some(10),
            failure_threshold: Some(6),
            ..tcp_probe()
        }),
        security_context: Some(security),
        ..Container::default()
    };
    let mut volumes = vec![
        secret_volume(
            "admin-credentials",
            admin_secret_name(replica_set),
            &[USERNAME_KEY, PASSWORD_KEY],
        ),
        secret_volume("keyfile", keyfile_secret_name(replica_set), &[KEYFILE_KEY]),
        memory_volume("keyfile-private"),
        Volume {
            name: "tmp".into(),
            empty_dir: Some(Default::default()),
            ..Volume::default()
        },
    ];
    if !persistent {
        volumes.push(Volume {
            name: "data".into(),
            empty_dir: Some(Default::default()),
            ..Volume::default()
        });
    }
    member_statefulset(
        replica_set,
        name.clone(),
        labels(replica_set, component),
        headless_service_name(&replica_set.name_any()),
        replicas,
        selector(replica_set, component),
        MemberPods {
            overrides: replica_set.spec.pod_template.as_ref(),
            labels: pod_labels,
            uid: MONGODB_UID,
            spec: PodSpec {
                init_containers: Some(vec![keyfile_permissions]),
                containers: vec![mongod],
                volumes: Some(volumes),
                // A primary shutting down steps down first and waits for a secondary to
                // catch up (up to ten seconds by default).
                termination_grace_period_seconds: Some(30),
                ..PodSpec::default()
            },
            // The ConfigMap holds the set's name, which never changes, and the version, which
            // changes the image in the template already.
            config: None,
        },
        true,
        persistent.then_some(&replica_set.spec.storage),
    )
}

impl quorum_core::pass::ClusterObject for MongoDBReplicaSet {
    fn statefulsets(&self) -> Vec<String> {
        let name = self.name_any();
        vec![statefulset_name(&name), arbiter_statefulset_name(&name)]
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

/// Sets the engine's own fields of `replica_set`'s backup policy on the backup that carries it out.
pub fn scheduled_backup_fields(
    replica_set: &MongoDBReplicaSet,
) -> impl FnOnce(&mut crate::crd::MongoDBBackup) + '_ {
    move |backup| {
        if let Some(policy) = &replica_set.spec.backup {
            backup.spec.archive_oplog = policy.archive_oplog;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::crd::MongoDBReplicaSetSpec;
    use k8s_openapi::{
        api::{apps::v1::StatefulSetSpec, core::v1::PodTemplateSpec},
        apimachinery::pkg::api::resource::Quantity,
    };
    use quorum_core::config::MemberAddresses;
    use quorum_core::crd::{BackupPolicy, PodOverrides, Storage};

    pub(crate) fn replica_set(members: i32, arbiter: bool) -> MongoDBReplicaSet {
        let mut replica_set = MongoDBReplicaSet::new(
            "orders",
            MongoDBReplicaSetSpec {
                members,
                non_voting_members: 0,
                hidden_members: 0,
                arbiter,
                version: "7.0.14".into(),
                image: None,
                storage: Storage {
                    size: Quantity("1Gi".into()),
                    storage_class_name: None,
                },
                resources: None,
                pod_template: None,
                admin_secret: None,
                keyfile_secret: None,
                backup: None,
                restore_from: None,
            },
        );
        replica_set.metadata.namespace = Some("shop".into());
        replica_set.metadata.uid = Some("uid-1".into());
        replica_set
    }

    fn pod(statefulset: StatefulSet) -> (PodTemplateSpec, StatefulSetSpec) {
        let spec = statefulset.spec.unwrap();
        (spec.template.clone(), spec)
    }

    fn volume<'a>(pod: &'a PodSpec, name: &str) -> &'a Volume {
        pod.volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|volume| volume.name == name)
            .unwrap_or_else(|| panic!("no volume {name}"))
    }

    fn mount_path(container: &Container, volume: &str) -> Option<String> {
        container
            .volume_mounts
            .as_ref()?
            .iter()
            .find(|mount| mount.name == volume)
            .map(|mount| mount.mount_path.clone())
    }

    #[test]
    fn names_round_trip_and_the_arbiter_is_no_data_member() {
        assert_eq!(statefulset_name("orders"), "orders");
        assert_eq!(arbiter_statefulset_name("orders"), "orders-arbiter");
        assert_eq!(headless_service_name("orders"), "orders");
        assert_eq!(client_service_name("orders"), "orders-client");
        assert_eq!(config_map_name("orders-arbiter"), "orders-arbiter-config");
        assert_eq!(generated_admin_secret_name("orders"), "orders-admin");
        assert_eq!(generated_keyfile_secret_name("orders"), "orders-keyfile");
        assert_eq!(member_name("orders", 2), "orders-2");
        assert_eq!(arbiter_name("orders"), "orders-arbiter-0");
        assert_eq!(ordinal_of("orders", "orders-2"), Some(2));
        assert_eq!(ordinal_of("orders", &arbiter_name("orders")), None);
        assert_eq!(ordinal_of("orders", "orders2-1"), None);

        let mut given = replica_set(3, false);
        assert_eq!(admin_secret_name(&given), "orders-admin");
        assert_eq!(keyfile_secret_name(&given), "orders-keyfile");
        given.spec.admin_secret = Some("dba".into());
        given.spec.keyfile_secret = Some("shared-key".into());
        assert_eq!(admin_secret_name(&given), "dba");
        assert_eq!(keyfile_secret_name(&given), "shared-key");
    }

    fn members(member_addresses: MemberAddresses, cluster_domain: &str) -> MemberConfig {
        MemberConfig {
            cluster_domain: cluster_domain.into(),
            member_addresses,
            allow_http_backups: false,
            backup_runner: quorum_core::config::BackupRunner::Operator,
        }
    }

    #[test]
    fn hosts_follow_the_headless_service_or_the_loopback_blocks() {
        let replica_set = replica_set(3, true);
        assert_eq!(
            member_host(
                &replica_set,
                "orders",
                1,
                &members(MemberAddresses::Dns, "cluster.local")
            ),
            "orders-1.orders.shop.svc.cluster.local:27017"
        );
        assert_eq!(
            member_host(
                &replica_set,
                &arbiter_statefulset_name("orders"),
                0,
                &members(MemberAddresses::Dns, "example.org")
            ),
            "orders-arbiter-0.orders.shop.svc.example.org:27017"
        );
        let loopback = |statefulset: &str, ordinal| {
            member_host(
                &replica_set,
                statefulset,
                ordinal,
                &members(MemberAddresses::Loopback, "cluster.local"),
            )
        };
        assert_eq!(
            loopback("orders", 2),
            format!("{}:27017", quorum_core::naming::loopback_ip("shop", "orders", 2))
        );
        assert_ne!(loopback("orders", 0), loopback("orders-arbiter", 0));
    }

    #[test]
    fn members_prefer_distinct_nodes() {
        let set = replica_set(3, false);
        let (template, _) = pod(build_statefulset(&set, 3).unwrap());
        assert_eq!(
            template.spec.unwrap().affinity,
            Some(quorum_core::pod::affinity_or_spread(
                None,
                &selector(&set, MEMBER_COMPONENT)
            ))
        );
    }

    #[test]
    fn members_run_the_entrypoint_with_the_replica_set_and_the_private_keyfile() {
        let (template, spec) = pod(build_statefulset(&replica_set(3, false), 3).unwrap());
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.service_name.as_deref(), Some("orders"));
        assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
        let pod = template.spec.unwrap();
        let mongod = &pod.containers[0];
        assert_eq!(mongod.name, "mongod");
        assert_eq!(mongod.image.as_deref(), Some("mongo:7.0.14"));
        assert_eq!(mongod.command, None, "the image's entrypoint runs");
        assert_eq!(
            mongod.args.as_ref().unwrap().join(" "),
            "mongod --replSet $(REPLICA_SET_NAME) --bind_ip_all --port 27017 --dbpath /data/db \
             --keyFile /etc/mongodb/keyfile-private/keyfile"
        );
        let env: BTreeMap<_, _> = mongod
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|env| (env.name.as_str(), env.value.as_deref()))
            .collect();
        assert_eq!(
            env["MONGO_INITDB_ROOT_USERNAME_FILE"],
            Some("/etc/mongodb/admin/username")
        );
        assert_eq!(
            env["MONGO_INITDB_ROOT_PASSWORD_FILE"],
            Some("/etc/mongodb/admin/password")
        );
        let from = &mongod.env_from.as_ref().unwrap()[0];
        assert_eq!(from.config_map_ref.as_ref().unwrap().name, "orders-config");
        assert_eq!(mount_path(mongod, "data").as_deref(), Some("/data/db"));
        assert_eq!(
            mount_path(mongod, "admin-credentials").as_deref(),
            Some("/etc/mongodb/admin")
        );
        assert_eq!(
            mount_path(mongod, "keyfile-private").as_deref(),
            Some("/etc/mongodb/keyfile-private")
        );
        assert_eq!(mount_path(mongod, "keyfile"), None, "only the private copy");

        let admin = volume(&pod, "admin-credentials").secret.clone().unwrap();
        assert_eq!(admin.secret_name.as_deref(), Some("orders-admin"));
        let keys: Vec<_> = admin.items.unwrap().into_iter().map(|item| item.key).collect();
        assert_eq!(keys, ["username", "password"]);
        let keyfile = volume(&pod, "keyfile").secret.clone().unwrap();
        assert_eq!(keyfile.secret_name.as_deref(), Some("orders-keyfile"));
        assert_eq!(keyfile.items.unwrap()[0].key, "keyfile");
        let private = volume(&pod, "keyfile-private").empty_dir.clone().unwrap();
        assert_eq!(private.medium.as_deref(), Some("Memory"));

        let init = &pod.init_containers.as_ref().unwrap()[0];
        assert_eq!(init.name, "keyfile-permissions");
        assert_eq!(init.image, mongod.image);
        assert_eq!(
            init.command.as_ref().unwrap().join(" "),
            "install -m 0400 /etc/mongodb/keyfile/keyfile /etc/mongodb/keyfile-private/keyfile"
        );
        assert_eq!(
            mount_path(init, "keyfile").as_deref(),
            Some("/etc/mongodb/keyfile")
        );
        assert_eq!(
            mount_path(init, "keyfile-private").as_deref(),
            Some("/etc/mongodb/keyfile-private")
        );

        let claims = spec.volume_claim_templates.unwrap();
        assert_eq!(claims[0].metadata.name.as_deref(), Some("data"));
        let labels = template.metadata.unwrap().labels.unwrap();
        assert_eq!(labels[VERSION_LABEL], "7.0.14");
        assert_eq!(labels["app.kubernetes.io/component"], "member");
    }

    #[test]
    fn the_operator_restarts_members_itself() {
        let (_, spec) = pod(build_statefulset(&replica_set(3, false), 3).unwrap());
        assert_eq!(spec.update_strategy.unwrap().type_.as_deref(), Some("OnDelete"));
        let (_, arbiter) = pod(build_arbiter_statefulset(&replica_set(2, true)).unwrap().unwrap());
        assert_eq!(
            arbiter.update_strategy.unwrap().type_.as_deref(),
            Some("OnDelete")
        );
    }

    #[test]
    fn pods_run_restricted_as_the_images_mongodb_user() {
        let (template, _) = pod(build_statefulset(&replica_set(3, false), 3).unwrap());
        let pod = template.spec.unwrap();
        let security = pod.security_context.as_ref().unwrap();
        assert_eq!(security.run_as_user, Some(999));
        assert_eq!(security.fs_group, Some(999));
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(security.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
        for container in pod.containers.iter().chain(pod.init_containers.iter().flatten()) {
            let security = container.security_context.as_ref().unwrap();
            assert_eq!(security.allow_privilege_escalation, Some(false));
            assert_eq!(security.read_only_root_filesystem, Some(true));
            assert_eq!(
                security.capabilities.as_ref().unwrap().drop.as_deref(),
                Some(&["ALL".to_string()][..])
            );
        }
        let mongod = &pod.containers[0];
        assert_eq!(mount_path(mongod, "tmp").as_deref(), Some("/tmp"));
        for probe in [&mongod.readiness_probe, &mongod.liveness_probe] {
            let port = &probe.as_ref().unwrap().tcp_socket.as_ref().unwrap().port;
            assert_eq!(port, &IntOrString::String("mongodb".into()));
        }
        assert_eq!(mongod.ports.as_ref().unwrap()[0].container_port, 27017);
    }

    #[test]
    fn secrets_reach_the_pods_through_files_only() {
        let replica_set = replica_set(3, true);
        let statefulsets = [
            build_statefulset(&replica_set, 3).unwrap(),
            build_arbiter_statefulset(&replica_set).unwrap().unwrap(),
        ];
        for statefulset in statefulsets {
            let pod = statefulset.spec.unwrap().template.spec.unwrap();
            for container in pod.containers.iter().chain(pod.init_containers.iter().flatten()) {
                for env in container.env.iter().flatten() {
                    assert!(env.value_from.is_none(), "{env:?}");
                    assert!(
                        env.value
                            .as_deref()
                            .is_none_or(|value| value.starts_with("/etc/mongodb/")),
                        "{env:?}"
                    );
                }
                for arg in container.args.iter().chain(container.command.iter()).flatten() {
                    assert!(!arg.contains("password"), "{arg}");
                }
            }
        }
        let secret = build_admin_secret(&replica_set, "quorum-admin".into(), "s3cret".into()).unwrap();
        assert_eq!(secret.metadata.name.as_deref(), Some("orders-admin"));
        let data = secret.string_data.unwrap();
        assert_eq!(data[USERNAME_KEY], "quorum-admin");
        assert_eq!(data[PASSWORD_KEY], "s3cret");
        let config = build_config_map(&replica_set).unwrap().data.unwrap();
        assert!(!config.values().any(|value| value.contains("s3cret")));
    }

    #[test]
    fn keyfiles_are_long_base64_and_differ() {
        let (one, two) = (generate_keyfile(), generate_keyfile());
        assert_eq!(one.len(), 756);
        assert!(
            one.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/')
        );
        assert_ne!(one, two);
        let secret = build_keyfile_secret(&replica_set(3, false), one.clone()).unwrap();
        assert_eq!(secret.metadata.name.as_deref(), Some("orders-keyfile"));
        assert_eq!(secret.string_data.unwrap()[KEYFILE_KEY], one);
    }

    #[test]
    fn the_arbiter_runs_only_when_asked_without_a_claim() {
        assert!(
            build_arbiter_statefulset(&replica_set(3, false))
                .unwrap()
                .is_none()
        );
        let replica_set = replica_set(2, true);
        let (template, spec) = pod(build_arbiter_statefulset(&replica_set).unwrap().unwrap());
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(spec.service_name.as_deref(), Some("orders"));
        assert!(spec.volume_claim_templates.is_none());
        assert_eq!(
            spec.selector.match_labels.unwrap()["app.kubernetes.io/component"],
            "arbiter"
        );
        let pod = template.spec.unwrap();
        assert!(volume(&pod, "data").empty_dir.is_some());
        let mongod = &pod.containers[0];
        assert_eq!(mongod.args, Some(mongod_args()));
        assert_eq!(
            mongod.env_from.as_ref().unwrap()[0]
                .config_map_ref
                .as_ref()
                .unwrap()
                .name,
            "orders-arbiter-config"
        );
        let config = build_arbiter_config_map(&replica_set).unwrap();
        assert_eq!(config.metadata.name.as_deref(), Some("orders-arbiter-config"));
        let data = config.data.unwrap();
        assert_eq!(data["REPLICA_SET_NAME"], "orders");
        assert_eq!(data["MONGODB_VERSION"], "7.0.14");
    }

    #[test]
    fn services_name_every_pod_and_serve_only_data_members() {
        let replica_set = replica_set(2, true);
        let headless = build_headless_service(&replica_set).unwrap();
        assert_eq!(headless.metadata.name.as_deref(), Some("orders"));
        let spec = headless.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let selector = spec.selector.unwrap();
        assert_eq!(selector["app.kubernetes.io/instance"], "orders");
        assert!(!selector.contains_key("app.kubernetes.io/component"));

        let client = build_client_service(&replica_set).unwrap();
        assert_eq!(client.metadata.name.as_deref(), Some("orders-client"));
        let spec = client.spec.unwrap();
        assert_eq!(spec.cluster_ip, None);
        assert_eq!(spec.selector.unwrap()["app.kubernetes.io/component"], "member");
        assert_eq!(spec.ports.unwrap()[0].port, 27017);

        let budget = build_pod_disruption_budget(&replica_set).unwrap().spec.unwrap();
        assert_eq!(budget.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(
            budget.selector.unwrap().match_labels.unwrap()["app.kubernetes.io/component"],
            "member"
        );
    }

    #[test]
    fn the_spec_shapes_image_resources_and_pod_overrides() {
        let mut replica_set = replica_set(3, true);
        replica_set.spec.image = Some("registry.example/mongo:7.0.14-custom".into());
        replica_set.spec.resources = Some(Default::default());
        replica_set.spec.pod_template = Some(PodOverrides {
            labels: BTreeMap::from([("team".to_string(), "shop".to_string())]),
            annotations: BTreeMap::from([("note".to_string(), "x".to_string())]),
            node_selector: BTreeMap::from([("disk".to_string(), "ssd".to_string())]),
            priority_class_name: Some("databases".into()),
            ..PodOverrides::default()
        });
        let (template, spec) = pod(build_statefulset(&replica_set, 3).unwrap());
        let metadata = template.metadata.unwrap();
        assert_eq!(metadata.labels.as_ref().unwrap()["team"], "shop");
        assert_eq!(metadata.annotations.unwrap()["note"], "x");
        assert!(!spec.selector.match_labels.unwrap().contains_key("team"));
        let pod = template.spec.unwrap();
        assert_eq!(pod.node_selector.unwrap()["disk"], "ssd");
        assert_eq!(pod.priority_class_name.as_deref(), Some("databases"));
        assert_eq!(
            pod.containers[0].image.as_deref(),
            Some("registry.example/mongo:7.0.14-custom")
        );
        assert!(pod.containers[0].resources.is_some());
        let (arbiter, _) = pod_of_arbiter(&replica_set);
        assert!(arbiter.containers[0].resources.is_none());
        let owner = &build_config_map(&replica_set)
            .unwrap()
            .metadata
            .owner_references
            .unwrap()[0];
        assert_eq!(owner.kind, "MongoDBReplicaSet");
        assert_eq!(owner.controller, Some(true));
    }

    fn pod_of_arbiter(replica_set: &MongoDBReplicaSet) -> (PodSpec, StatefulSetSpec) {
        let (template, spec) = pod(build_arbiter_statefulset(replica_set).unwrap().unwrap());
        (template.spec.unwrap(), spec)
    }

    #[test]
    fn a_backup_policy_becomes_a_scheduled_backup_that_archives_the_oplog_when_asked() {
        let scheduled = |replica_set: &MongoDBReplicaSet| {
            quorum_core::backup::controller::scheduled_backup::<crate::crd::MongoDBBackup, _>(
                replica_set,
                replica_set.spec.backup.as_ref().map(|policy| &policy.policy),
                "orders-scheduled",
                labels(replica_set, MEMBER_COMPONENT),
                scheduled_backup_fields(replica_set),
            )
            .unwrap()
        };
        let mut replica_set = replica_set(3, false);
        assert!(scheduled(&replica_set).is_none());
        replica_set.spec.backup = Some(crate::crd::MongoBackupPolicy {
            policy: BackupPolicy {
                schedule: "0 3 * * *".into(),
                destination: serde_json::from_value(serde_json::json!({"filesystem": {"path": "/backups"}}))
                    .unwrap(),
                retain: 5,
                max_age_minutes: None,
                verify: false,
            },
            archive_oplog: false,
        });
        let backup = scheduled(&replica_set).unwrap();
        assert_eq!(backup.metadata.name.as_deref(), Some("orders-scheduled"));
        assert_eq!(backup.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(backup.spec.backup.cluster_name, "orders");
        assert_eq!(backup.spec.backup.schedule.as_deref(), Some("0 3 * * *"));
        assert_eq!(backup.spec.backup.retain, Some(5));
        assert!(!backup.spec.archive_oplog);
        replica_set.spec.backup.as_mut().unwrap().archive_oplog = true;
        assert!(scheduled(&replica_set).unwrap().spec.archive_oplog);
    }
    #[test]
    fn a_drill_recorded_on_the_replica_set_changes_what_wakes_its_pass() {
        use quorum_core::{backup::drill::started, pass::last_drill_digest};
        let mut set = replica_set(3, false);
        assert_eq!(last_drill_digest(&set), None);
        let drill = started("nightly", "s3://b/rs/1", "nightly-drill", jiff::Timestamp::now());
        set.status.get_or_insert_with(Default::default).last_drill = Some(drill);
        assert!(last_drill_digest(&set).is_some());
    }
}
