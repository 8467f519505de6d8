//! Pure builders: an `EtcdCluster` (and what was decided) in, the Kubernetes objects it needs
//! out. No API calls here; every builder is unit-tested without a cluster.
//!
//! The member pods read their per-cluster bootstrap settings from the ConfigMap through
//! environment variables, so changing them (new -> existing once the cluster formed) never
//! restarts a running member: only a pod started afterwards sees the new values. The pod
//! template carries nothing that changes with the operator's own version, so upgrading the
//! operator restarts no database pod.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::StatefulSet,
        core::v1::{
            ConfigMap, ConfigMapEnvSource, Container, ContainerPort, EnvFromSource, EnvVar, EnvVarSource,
            HTTPGetAction, ObjectFieldSelector, PodSpec, Probe, SecretVolumeSource, SecurityContext, Service,
            ServicePort, ServiceSpec, Volume, VolumeMount,
        },
        policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec},
    },
    apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};
use kube::ResourceExt;
use quorum_core::{
    apply::child_metadata,
    naming::{child_name, label_selector, selector_labels, standard_labels},
    pod::{MemberPods, member_container_security, member_statefulset},
};

use crate::{
    OPERATOR_NAME,
    crd::EtcdCluster,
    resolver::{MemberResolver, peer_service_name},
};

/// `app.kubernetes.io/name` of everything this operator creates.
pub const APP: &str = "etcd";
/// `app.kubernetes.io/component` of the member pods.
pub const COMPONENT: &str = "member";
pub const CLIENT_PORT: i32 = 2379;
pub const PEER_PORT: i32 = 2380;
/// etcd's plain-HTTP listener for `/health` and `/metrics` only: the kubelet's probes use it, as
/// they carry no client certificate and the client port may require one.
pub const METRICS_PORT: i32 = 2381;
/// Where a member keeps its data inside the pod.
pub const DATA_DIR: &str = "/var/lib/etcd/data";
/// The label carrying the etcd version a pod was created for.
pub const VERSION_LABEL: &str = "etcd.quorum.dev/version";
/// The label of a member pod created from a template that carried `--force-new-cluster`.
pub const FORCE_NEW_CLUSTER_LABEL: &str = "etcd.quorum.dev/force-new-cluster";
/// The account etcd runs as: the distroless images' `nonroot`.
const ETCD_UID: i64 = 65532;

type Result<T> = std::result::Result<T, quorum_core::Error>;

/// The name of the ConfigMap with the bootstrap settings.
pub fn config_map_name(cluster: &str) -> String {
    child_name(cluster, "config")
}

/// The name of the client Service (and of the StatefulSet).
pub fn client_service_name(cluster: &str) -> String {
    child_name(cluster, "")
}

/// Labels selecting this cluster's member pods.
pub fn member_selector(cluster: &EtcdCluster) -> BTreeMap<String, String> {
    selector_labels(APP, &cluster.name_any(), COMPONENT)
}

/// The selector as a string, for the scale subresource.
pub fn member_selector_string(cluster: &EtcdCluster) -> String {
    label_selector(&member_selector(cluster))
}

pub(crate) fn labels(cluster: &EtcdCluster) -> BTreeMap<String, String> {
    standard_labels(APP, &cluster.name_any(), COMPONENT, OPERATOR_NAME)
}

/// The image a member of `version` runs.
pub fn image(cluster: &EtcdCluster) -> String {
    cluster
        .spec
        .image
        .clone()
        .unwrap_or_else(|| format!("gcr.io/etcd-development/etcd:v{}", cluster.spec.version))
}

fn tls(cluster: &EtcdCluster) -> (Option<String>, Option<String>) {
    let tls = cluster.spec.tls.as_ref();
    (
        tls.and_then(|t| t.client_secret_name.clone()),
        tls.and_then(|t| t.peer_secret_name.clone()),
    )
}

/// Whether state of bootstrap is `new` (the cluster has not formed) or `existing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    New,
    Existing,
}

/// The ConfigMap with `ETCD_INITIAL_CLUSTER*` settings: for a new cluster, every member of
/// the bootstrap; afterwards, the membership as etcd reports it (names and peer URLs).
/// `restored_from` is the SHA-256 of the snapshot a cluster restored in place starts from: it
/// goes into the token, so the new cluster's id and member ids differ from the ones of the
/// cluster it replaces, whose processes could otherwise still be taken for peers.
pub fn build_config_map(
    cluster: &EtcdCluster,
    state: ClusterState,
    initial_cluster: &[(String, String)],
    restored_from: Option<&str>,
) -> Result<ConfigMap> {
    let name = cluster.name_any();
    let mut token = format!(
        "{}-{}",
        name,
        cluster
            .uid()
            .unwrap_or_default()
            .split('-')
            .next()
            .unwrap_or_default()
    );
    if let Some(sha256) = restored_from {
        token.push_str("-restored-");
        token.extend(sha256.chars().take(12));
    }
    let members = initial_cluster
        .iter()
        .map(|(member, url)| format!("{member}={url}"))
        .collect::<Vec<_>>()
        .join(",");
    Ok(ConfigMap {
        metadata: child_metadata(cluster, config_map_name(&name), labels(cluster))?,
        data: Some(BTreeMap::from([
            ("ETCD_INITIAL_CLUSTER".to_string(), members),
            (
                "ETCD_INITIAL_CLUSTER_STATE".to_string(),
                match state {
                    ClusterState::New => "new",
                    ClusterState::Existing => "existing",
                }
                .to_string(),
            ),
            ("ETCD_INITIAL_CLUSTER_TOKEN".to_string(), token),
        ])),
        ..ConfigMap::default()
    })
}

/// The bootstrap membership of a new cluster: members `0..members`, by their DNS peer URLs.
pub fn bootstrap_members(
    cluster: &EtcdCluster,
    resolver: &MemberResolver,
    members: usize,
) -> Vec<(String, String)> {
    (0..members)
        .filter_map(|ordinal| {
            Some((
                crate::resolver::member_name(&cluster.name_any(), ordinal),
                resolver.peer_url(ordinal)?,
            ))
        })
        .collect()
}

/// The headless Service that gives each member a stable DNS name. Addresses are published
/// before pods are ready: members must find each other to become ready at all.
pub fn build_peer_service(cluster: &EtcdCluster) -> Result<Service> {
    let name = cluster.name_any();
    Ok(Service {
        metadata: child_metadata(cluster, peer_service_name(&name), labels(cluster))?,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(member_selector(cluster)),
            ports: Some(vec![port("client", CLIENT_PORT), port("peer", PEER_PORT)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

/// The Service clients use: ready members only.
pub fn build_client_service(cluster: &EtcdCluster) -> Result<Service> {
    let name = cluster.name_any();
    Ok(Service {
        metadata: child_metadata(cluster, client_service_name(&name), labels(cluster))?,
        spec: Some(ServiceSpec {
            selector: Some(member_selector(cluster)),
            ports: Some(vec![port("client", CLIENT_PORT)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

fn port(name: &str, number: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port: number,
        target_port: Some(IntOrString::String(name.into())),
        ..ServicePort::default()
    }
}

/// At most one member down at a time through voluntary disruptions (drains).
pub fn build_pod_disruption_budget(cluster: &EtcdCluster) -> Result<PodDisruptionBudget> {
    let name = cluster.name_any();
    Ok(PodDisruptionBudget {
        metadata: child_metadata(cluster, child_name(&name, ""), labels(cluster))?,
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

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

/// Where a restored cluster's bootstrap members get their data: the init container that runs
/// `etcd-operator restore-member` (see [`crate::restore`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreInit {
    /// The operator's image (it carries `etcdutl`).
    pub image: String,
    /// The snapshot.
    pub fetch: quorum_core::backup::ObjectFetch,
}

fn restore_container(
    restore: &RestoreInit,
    environment: &[EnvVar],
    env_from: &[EnvFromSource],
    security: &SecurityContext,
) -> Container {
    let mut args = vec!["restore-member".to_string()];
    args.extend(restore.fetch.object_args());
    args.extend([
        "--name=$(POD_NAME)".to_string(),
        "--initial-cluster=$(ETCD_INITIAL_CLUSTER)".to_string(),
        "--initial-cluster-state=$(ETCD_INITIAL_CLUSTER_STATE)".to_string(),
        "--initial-cluster-token=$(ETCD_INITIAL_CLUSTER_TOKEN)".to_string(),
        "--peer-url=$(ETCD_INITIAL_ADVERTISE_PEER_URLS)".to_string(),
        format!("--data-dir={DATA_DIR}"),
    ]);
    args.extend(restore.fetch.store_args());
    let mut env = environment.to_vec();
    env.extend(restore.fetch.credentials_env());
    Container {
        name: "restore".into(),
        image: Some(restore.image.clone()),
        args: Some(args),
        env: Some(env),
        env_from: Some(env_from.to_vec()),
        volume_mounts: Some(vec![VolumeMount {
            name: "data".into(),
            mount_path: "/var/lib/etcd".into(),
            ..VolumeMount::default()
        }]),
        security_context: Some(security.clone()),
        ..Container::default()
    }
}

/// The StatefulSet of members, with `replicas` pods (the operator decides how many, one
/// membership change at a time; it is not simply `spec.replicas`).
///
/// Pods start in parallel (a new cluster needs all its members up to elect a leader) and are
/// replaced only when the operator deletes them (`OnDelete`): version upgrades go one member
/// at a time through the safety gate, never by the StatefulSet controller on its own.
///
/// A cluster restored from a backup gets a `restore` init container on every member; it acts
/// only for bootstrap members with an empty volume.
pub fn build_statefulset(
    cluster: &EtcdCluster,
    replicas: i32,
    cluster_domain: &str,
    restore: Option<&RestoreInit>,
    force_new_cluster: bool,
) -> Result<StatefulSet> {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let (client_secret, peer_secret) = tls(cluster);
    let client_scheme = if client_secret.is_some() { "https" } else { "http" };
    let peer_scheme = if peer_secret.is_some() { "https" } else { "http" };
    let host = format!(
        "$(POD_NAME).{}.{namespace}.svc.{cluster_domain}",
        peer_service_name(&name)
    );

    let mut pod_labels = member_selector(cluster);
    pod_labels.insert(VERSION_LABEL.to_string(), cluster.spec.version.clone());
    if force_new_cluster {
        pod_labels.insert(FORCE_NEW_CLUSTER_LABEL.to_string(), "true".to_string());
    }

    let mut environment = vec![
        EnvVar {
            name: "POD_NAME".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        },
        env("ETCD_NAME", "$(POD_NAME)"),
        env("ETCD_DATA_DIR", DATA_DIR),
        env(
            "ETCD_LISTEN_CLIENT_URLS",
            format!("{client_scheme}://0.0.0.0:{CLIENT_PORT}"),
        ),
        env(
            "ETCD_ADVERTISE_CLIENT_URLS",
            format!("{client_scheme}://{host}:{CLIENT_PORT}"),
        ),
        env(
            "ETCD_LISTEN_PEER_URLS",
            format!("{peer_scheme}://0.0.0.0:{PEER_PORT}"),
        ),
        env(
            "ETCD_INITIAL_ADVERTISE_PEER_URLS",
            format!("{peer_scheme}://{host}:{PEER_PORT}"),
        ),
        env(
            "ETCD_LISTEN_METRICS_URLS",
            format!("http://0.0.0.0:{METRICS_PORT}"),
        ),
        // Refuse membership changes that would make the cluster unavailable, as a last line
        // of defence behind the operator's own gate.
        env("ETCD_STRICT_RECONFIG_CHECK", "true"),
    ];
    let mut volumes = Vec::new();
    let mut mounts = vec![VolumeMount {
        name: "data".into(),
        mount_path: "/var/lib/etcd".into(),
        ..VolumeMount::default()
    }];
    for (kind, secret, prefix) in [
        ("client", &client_secret, "ETCD"),
        ("peer", &peer_secret, "ETCD_PEER"),
    ] {
        let Some(secret) = secret else { continue };
        let directory = format!("/etc/etcd/tls/{kind}");
        volumes.push(Volume {
            name: format!("tls-{kind}"),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: format!("tls-{kind}"),
            mount_path: directory.clone(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        environment.push(env(
            &format!("{prefix}_CERT_FILE"),
            format!("{directory}/tls.crt"),
        ));
        environment.push(env(&format!("{prefix}_KEY_FILE"), format!("{directory}/tls.key")));
        environment.push(env(
            &format!("{prefix}_TRUSTED_CA_FILE"),
            format!("{directory}/ca.crt"),
        ));
        environment.push(env(&format!("{prefix}_CLIENT_CERT_AUTH"), "true"));
    }

    let probe = |path: &str, period: i32, failures: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("metrics".into()),
            scheme: Some("HTTP".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(5),
        ..Probe::default()
    };

    let security = member_container_security(true);
    let environment_for_init = environment.clone();
    if force_new_cluster {
        // Only a member with a data directory acts on it: the others are on empty volumes
        // during a recovery, and cannot join a cluster that does not list them.
        environment.push(env("ETCD_FORCE_NEW_CLUSTER", "true"));
    }
    let container = Container {
        name: "etcd".into(),
        image: Some(image(cluster)),
        command: Some(vec!["/usr/local/bin/etcd".into()]),
        env: Some(environment),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: config_map_name(&name),
                optional: Some(false),
            }),
            ..EnvFromSource::default()
        }]),
        ports: Some(vec![
            ContainerPort {
                name: Some("client".into()),
                container_port: CLIENT_PORT,
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("peer".into()),
                container_port: PEER_PORT,
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("metrics".into()),
                container_port: METRICS_PORT,
                ..ContainerPort::default()
            },
        ]),
        readiness_probe: Some(probe("/health", 5, 3)),
        // Liveness must not depend on the leader: a follower cut off from the rest is alive.
        liveness_probe: Some(probe("/health?serializable=true", 10, 6)),
        resources: cluster.spec.resources.clone(),
        volume_mounts: Some(mounts),
        security_context: Some(security.clone()),
        ..Container::default()
    };
    let init_containers = restore.map(|restore| {
        vec![restore_container(
            restore,
            &environment_for_init,
            container.env_from.as_deref().unwrap_or_default(),
            &security,
        )]
    });

    member_statefulset(
        cluster,
        client_service_name(&name),
        labels(cluster),
        peer_service_name(&name),
        replicas,
        member_selector(cluster),
        MemberPods {
            overrides: cluster.spec.pod_template.as_ref(),
            labels: pod_labels,
            uid: ETCD_UID,
            spec: PodSpec {
                containers: vec![container],
                init_containers,
                volumes: (!volumes.is_empty()).then_some(volumes),
                automount_service_account_token: Some(false),
                enable_service_links: Some(false),
                ..PodSpec::default()
            },
            // The ConfigMap names the membership, which a member reads only to join on an
            // empty volume: a membership change must not restart every member.
            config: None,
        },
        true,
        Some(&cluster.spec.storage),
    )
}

impl quorum_core::pass::ClusterObject for EtcdCluster {
    fn statefulsets(&self) -> Vec<String> {
        vec![client_service_name(&self.name_any())]
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
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::crd::{EtcdClusterSpec, EtcdTls, Storage};

    pub(crate) fn cluster() -> EtcdCluster {
        let mut cluster = EtcdCluster::new(
            "main",
            EtcdClusterSpec {
                replicas: 3,
                version: "3.6.16".into(),
                image: None,
                storage: Storage {
                    size: Quantity("8Gi".into()),
                    storage_class_name: Some("fast".into()),
                },
                resources: None,
                pod_template: None,
                tls: None,
                backup: None,
                restore_from: None,
            },
        );
        cluster.metadata.namespace = Some("db".into());
        cluster.metadata.uid = Some("1234abcd-0000".into());
        cluster
    }

    fn env_of(statefulset: &StatefulSet) -> BTreeMap<String, String> {
        statefulset
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .env
            .as_ref()
            .unwrap()
            .iter()
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .collect()
    }

    #[test]
    fn members_prefer_distinct_nodes_unless_the_user_gives_an_affinity() {
        let spread = |cluster: &EtcdCluster| {
            let statefulset = build_statefulset(cluster, 3, "cluster.local", None, false).unwrap();
            statefulset.spec.unwrap().template.spec.unwrap().affinity
        };
        let mut cluster = cluster();
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
    fn statefulset_is_owned_parallel_on_delete_and_restricted() {
        let statefulset = build_statefulset(&cluster(), 3, "cluster.local", None, false).unwrap();
        let owner = &statefulset.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("EtcdCluster", Some(true))
        );
        let spec = statefulset.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.service_name.as_deref(), Some("main-peer"));
        assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
        assert_eq!(
            spec.update_strategy.as_ref().unwrap().type_.as_deref(),
            Some("OnDelete")
        );
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.security_context.as_ref().unwrap().run_as_non_root, Some(true));
        let container = &pod.containers[0];
        assert_eq!(
            container.image.as_deref(),
            Some("gcr.io/etcd-development/etcd:v3.6.16")
        );
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(
            security.capabilities.as_ref().unwrap().drop.as_ref().unwrap(),
            &vec!["ALL".to_string()]
        );
        let retention = spec.persistent_volume_claim_retention_policy.as_ref().unwrap();
        assert_eq!(
            (
                retention.when_scaled.as_deref(),
                retention.when_deleted.as_deref()
            ),
            (Some("Delete"), Some("Retain")),
            "a removed member's volume goes with it; the StatefulSet's deletion alone keeps data"
        );
        let claim = &spec.volume_claim_templates.as_ref().unwrap()[0];
        assert_eq!(
            claim.spec.as_ref().unwrap().storage_class_name.as_deref(),
            Some("fast")
        );
    }

    #[test]
    fn members_advertise_their_stable_dns_names() {
        let env = env_of(&build_statefulset(&cluster(), 3, "cluster.local", None, false).unwrap());
        assert_eq!(env["ETCD_NAME"], "$(POD_NAME)");
        assert_eq!(
            env["ETCD_INITIAL_ADVERTISE_PEER_URLS"],
            "http://$(POD_NAME).main-peer.db.svc.cluster.local:2380"
        );
        assert_eq!(
            env["ETCD_ADVERTISE_CLIENT_URLS"],
            "http://$(POD_NAME).main-peer.db.svc.cluster.local:2379"
        );
        let resolver = MemberResolver::ClusterDns {
            cluster: "main".into(),
            namespace: "db".into(),
            cluster_domain: "cluster.local".into(),
            client_tls: false,
            peer_tls: false,
        };
        assert_eq!(
            env["ETCD_INITIAL_ADVERTISE_PEER_URLS"].replace("$(POD_NAME)", "main-1"),
            resolver.peer_url(1).unwrap(),
            "what a pod advertises is what the operator resolves"
        );
    }

    #[test]
    fn tls_switches_schemes_and_mounts_the_secrets() {
        let mut cluster = cluster();
        cluster.spec.tls = Some(EtcdTls {
            client_secret_name: Some("client-tls".into()),
            peer_secret_name: Some("peer-tls".into()),
        });
        let statefulset = build_statefulset(&cluster, 3, "cluster.local", None, false).unwrap();
        let env = env_of(&statefulset);
        assert!(env["ETCD_ADVERTISE_CLIENT_URLS"].starts_with("https://"));
        assert!(env["ETCD_INITIAL_ADVERTISE_PEER_URLS"].starts_with("https://"));
        assert_eq!(env["ETCD_PEER_TRUSTED_CA_FILE"], "/etc/etcd/tls/peer/ca.crt");
        assert_eq!(env["ETCD_CERT_FILE"], "/etc/etcd/tls/client/tls.crt");
        let volumes = statefulset.spec.unwrap().template.spec.unwrap().volumes.unwrap();
        assert_eq!(volumes.len(), 2);
    }

    #[test]
    fn probes_use_the_plain_metrics_listener_whatever_the_client_tls() {
        // With client TLS the client port requires a client certificate, which the kubelet's
        // probes do not carry: probing it would keep every member unready and restart it.
        let mut cluster = cluster();
        cluster.spec.tls = Some(EtcdTls {
            client_secret_name: Some("client-tls".into()),
            peer_secret_name: None,
        });
        let statefulset = build_statefulset(&cluster, 3, "cluster.local", None, false).unwrap();
        let env = env_of(&statefulset);
        assert_eq!(env["ETCD_CLIENT_CERT_AUTH"], "true");
        assert_eq!(env["ETCD_LISTEN_METRICS_URLS"], "http://0.0.0.0:2381");
        let container = &statefulset.spec.unwrap().template.spec.unwrap().containers[0];
        assert!(
            container
                .ports
                .as_ref()
                .unwrap()
                .iter()
                .any(|port| port.name.as_deref() == Some("metrics") && port.container_port == METRICS_PORT)
        );
        for probe in [&container.readiness_probe, &container.liveness_probe] {
            let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
            assert_eq!(get.port, IntOrString::String("metrics".into()));
            assert_eq!(get.scheme.as_deref(), Some("HTTP"));
        }
    }

    #[test]
    fn the_operator_version_does_not_appear_in_the_pod_template() {
        let template = serde_json::to_string(
            &build_statefulset(&cluster(), 3, "cluster.local", None, false)
                .unwrap()
                .spec
                .unwrap()
                .template,
        )
        .unwrap();
        assert!(!template.contains(env!("CARGO_PKG_VERSION")) || env!("CARGO_PKG_VERSION") == "3.6.16");
        assert!(!template.contains(OPERATOR_NAME), "{template}");
    }

    /// Only during a recovery's forcing phase, and then with a label that shows which pods were
    /// created so: an ordinary template is the same as before recoveries existed.
    #[test]
    fn the_force_new_cluster_flag_is_in_the_template_only_while_a_recovery_forces() {
        let label = |statefulset: &StatefulSet| {
            let template = statefulset.spec.clone().unwrap().template;
            template
                .metadata
                .unwrap()
                .labels
                .unwrap()
                .get(FORCE_NEW_CLUSTER_LABEL)
                .cloned()
        };
        let plain = build_statefulset(&cluster(), 3, "cluster.local", None, false).unwrap();
        assert!(!env_of(&plain).contains_key("ETCD_FORCE_NEW_CLUSTER"));
        assert_eq!(label(&plain), None);
        let forcing = build_statefulset(&cluster(), 3, "cluster.local", None, true).unwrap();
        assert_eq!(env_of(&forcing)["ETCD_FORCE_NEW_CLUSTER"], "true");
        assert_eq!(label(&forcing).as_deref(), Some("true"));
    }

    #[test]
    fn a_restored_cluster_restores_in_an_init_container_from_the_recorded_snapshot() {
        let restore = RestoreInit {
            image: "quorum/etcd-operator:1".into(),
            fetch: quorum_core::backup::ObjectFetch {
                location: "s3://bucket/etcd/db/main/main-20261121T000000Z.db".into(),
                sha256: "ab12".into(),
                s3_endpoint: Some("https://s3.example".into()),
                s3_region: None,
                credentials_secret_name: Some("s3-credentials".into()),
                allow_http: false,
            },
        };
        let statefulset = build_statefulset(&cluster(), 3, "cluster.local", Some(&restore), false).unwrap();
        let pod = statefulset.spec.unwrap().template.spec.unwrap();
        let init = &pod.init_containers.unwrap()[0];
        assert_eq!(init.image.as_deref(), Some("quorum/etcd-operator:1"));
        let args = init.args.clone().unwrap();
        assert_eq!(args[0], "restore-member");
        assert!(args.contains(&"--sha256=ab12".to_string()));
        assert!(args.contains(&"--initial-cluster-state=$(ETCD_INITIAL_CLUSTER_STATE)".to_string()));
        assert!(args.contains(&format!("--data-dir={DATA_DIR}")));
        let env = init.env.clone().unwrap();
        let secret = env
            .iter()
            .find(|e| e.name == "AWS_SECRET_ACCESS_KEY")
            .and_then(|e| e.value_from.clone()?.secret_key_ref)
            .unwrap();
        assert_eq!(
            (secret.name.as_str(), secret.key.as_str()),
            ("s3-credentials", "secretAccessKey")
        );
        assert!(env.iter().any(|e| e.name == "ETCD_INITIAL_ADVERTISE_PEER_URLS"));
        let config = init.env_from.clone().unwrap()[0].config_map_ref.clone().unwrap();
        assert_eq!(
            config.name, "main-config",
            "the bootstrap settings come from the ConfigMap"
        );
        // Without a restore source there is no init container.
        let plain = build_statefulset(&cluster(), 3, "cluster.local", None, false).unwrap();
        assert!(
            plain
                .spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .init_containers
                .is_none()
        );
    }

    #[test]
    fn config_map_lists_the_bootstrap_members() {
        let resolver = MemberResolver::ClusterDns {
            cluster: "main".into(),
            namespace: "db".into(),
            cluster_domain: "cluster.local".into(),
            client_tls: false,
            peer_tls: false,
        };
        let members = bootstrap_members(&cluster(), &resolver, 3);
        let config = build_config_map(&cluster(), ClusterState::New, &members, None).unwrap();
        let data = config.data.unwrap();
        assert_eq!(
            data["ETCD_INITIAL_CLUSTER"],
            "main-0=http://main-0.main-peer.db.svc.cluster.local:2380,\
             main-1=http://main-1.main-peer.db.svc.cluster.local:2380,\
             main-2=http://main-2.main-peer.db.svc.cluster.local:2380"
        );
        assert_eq!(data["ETCD_INITIAL_CLUSTER_STATE"], "new");
        assert_eq!(data["ETCD_INITIAL_CLUSTER_TOKEN"], "main-1234abcd");
    }

    #[test]
    fn a_backup_policy_becomes_an_owned_scheduled_backup() {
        use crate::crd::{BackupDestination, BackupPolicy, FilesystemDestination};
        let mut cluster = cluster();
        assert!(
            quorum_core::backup::controller::scheduled_backup::<crate::crd::EtcdBackup, _>(
                &cluster,
                cluster.spec.backup.as_ref(),
                "main-scheduled",
                labels(&cluster),
                |_| {}
            )
            .unwrap()
            .is_none()
        );
        cluster.spec.backup = Some(BackupPolicy {
            schedule: "0 */6 * * *".into(),
            destination: BackupDestination {
                s3: None,
                filesystem: Some(FilesystemDestination {
                    path: "/backups".into(),
                }),
            },
            retain: 4,
            max_age_minutes: Some(720),
            verify: false,
        });
        let backup = quorum_core::backup::controller::scheduled_backup::<crate::crd::EtcdBackup, _>(
            &cluster,
            cluster.spec.backup.as_ref(),
            "main-scheduled",
            labels(&cluster),
            |_| {},
        )
        .unwrap()
        .unwrap();
        assert_eq!(backup.spec.backup.cluster_name, "main");
        assert_eq!(backup.spec.backup.schedule.as_deref(), Some("0 */6 * * *"));
        assert_eq!(backup.spec.backup.retain, Some(4));
        assert_eq!(backup.metadata.namespace.as_deref(), Some("db"));
        assert_eq!(backup.metadata.owner_references.unwrap()[0].kind, "EtcdCluster");
    }

    #[test]
    fn services_and_budget_select_the_members() {
        let peer = build_peer_service(&cluster()).unwrap();
        let peer_spec = peer.spec.unwrap();
        assert_eq!(peer_spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(peer_spec.publish_not_ready_addresses, Some(true));
        let client = build_client_service(&cluster()).unwrap();
        assert_eq!(client.metadata.name.as_deref(), Some("main"));
        let budget = build_pod_disruption_budget(&cluster()).unwrap();
        let budget_spec = budget.spec.unwrap();
        assert_eq!(budget_spec.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(
            budget_spec.selector.unwrap().match_labels.unwrap(),
            member_selector(&cluster())
        );
        assert_eq!(
            member_selector_string(&cluster()),
            "app.kubernetes.io/component=member,app.kubernetes.io/instance=main,app.kubernetes.io/name=etcd"
        );
    }
}
