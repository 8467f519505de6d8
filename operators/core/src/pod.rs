//! Small pieces of pod specs every operator's builders use: environment from the downward
//! API, volume mounts, memory volumes, the data volume claim and its retention, the members'
//! security contexts, generated passwords.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::{StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec},
        core::v1::{
            Affinity, Capabilities, ConfigMap, EmptyDirVolumeSource, EnvVar, EnvVarSource,
            ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodAffinityTerm,
            PodAntiAffinity, PodSecurityContext, PodSpec, PodTemplateSpec, SeccompProfile, SecurityContext,
            TopologySpreadConstraint, Volume, VolumeMount, VolumeResourceRequirements,
            WeightedPodAffinityTerm,
        },
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
};

use crate::crd::{PodOverrides, Storage};

/// The pods' affinity: the user's, when `spec.podTemplate.affinity` is given; otherwise a
/// preference (not a requirement, so a one-node cluster still schedules every member) to put
/// each member selected by `members` on a different node, so one node lost takes at most one
/// member, and a primary and its replicas do not share a node unless the user says so.
pub fn affinity_or_spread(user: Option<Affinity>, members: &BTreeMap<String, String>) -> Affinity {
    user.unwrap_or_else(|| Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![WeightedPodAffinityTerm {
                weight: 100,
                pod_affinity_term: PodAffinityTerm {
                    label_selector: Some(LabelSelector {
                        match_labels: Some(members.clone()),
                        ..LabelSelector::default()
                    }),
                    topology_key: HOSTNAME_TOPOLOGY.into(),
                    ..PodAffinityTerm::default()
                },
            }]),
            ..PodAntiAffinity::default()
        }),
        ..Affinity::default()
    })
}

/// Adds to `pod` the requirement that no two of the `count` pods `apart` selects run on one node:
/// for pods that must survive the loss of any one node together (a shard's primary and its
/// replicas). Unlike [`affinity_or_spread`]'s preference, a pod that cannot be placed so waits
/// unscheduled.
///
/// It is a topology spread constraint (at most one more on any node than on the emptiest of at
/// least `count` nodes), not a required pod anti-affinity: the scheduler holds a constraint
/// against the pod being placed only, never against pods already running, so a new template
/// that lifts it (a user allowing sharing on a small cluster) rolls; the running pods' required
/// anti-affinity would keep each new pod off their node for ever.
pub fn keep_apart(pod: &mut PodSpec, apart: &BTreeMap<String, String>, count: i32) {
    pod.topology_spread_constraints
        .get_or_insert_with(Vec::new)
        .push(TopologySpreadConstraint {
            label_selector: Some(LabelSelector {
                match_labels: Some(apart.clone()),
                ..LabelSelector::default()
            }),
            max_skew: 1,
            min_domains: Some(count),
            node_taints_policy: Some("Honor".into()),
            topology_key: HOSTNAME_TOPOLOGY.into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            ..TopologySpreadConstraint::default()
        });
}

/// The node label that tells nodes apart.
const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";

/// An environment variable from the pod's own fields (`status.podIP`, `metadata.name`...).
pub fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// A plain environment variable.
pub fn value_env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

pub fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// A volume in memory: for files holding secrets, which must not reach a disk.
pub fn memory_volume(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The name of the members' data volume claim template.
pub const DATA_CLAIM: &str = "data";

/// Whether the kubelet reports every container of `pod` passed its readiness probe.
pub fn is_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

/// The claim the StatefulSet made for pod `pod` from the [`DATA_CLAIM`] template.
pub fn data_claim_name(pod: &str) -> String {
    format!("{DATA_CLAIM}-{pod}")
}

/// The `data` volume claim template of a StatefulSet.
pub fn data_claim(storage: &Storage) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(DATA_CLAIM.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_string(), storage.size.clone())])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// The claim retention of a StatefulSet whose members the operator scales: the volume of a member
/// removed by a scale-down is deleted with its pod, so a member added again under the same name
/// starts empty instead of on data its cluster has already removed it from. Deleting the
/// StatefulSet alone keeps every volume, so a StatefulSet re-created by the operator finds its
/// members' data.
pub fn claim_retention() -> StatefulSetPersistentVolumeClaimRetentionPolicy {
    StatefulSetPersistentVolumeClaimRetentionPolicy {
        when_scaled: Some("Delete".into()),
        when_deleted: Some("Retain".into()),
    }
}

/// The members' pod security context: every container runs as the database's account `uid`
/// (group `uid`, which also owns the volumes), never as root, under the runtime's default seccomp
/// profile. The official database images are configured to start as root and switch users in an
/// entry point the operators do not run, so the pod must say whom to run as.
pub fn member_pod_security(uid: i64) -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        run_as_non_root: Some(true),
        fs_group: Some(uid),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// The members' container security context: no privilege escalation, no capabilities, and a
/// read-only root file system when the server writes only to its volumes.
pub fn member_container_security(read_only_root: bool) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(read_only_root),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

/// What an engine says of its member pods: the user's `spec.podTemplate`, the operator's own
/// labels, the account the database runs as, and the pod as the engine builds it (containers,
/// volumes, grace period).
pub struct MemberPods<'a> {
    pub overrides: Option<&'a PodOverrides>,
    pub labels: BTreeMap<String, String>,
    pub uid: i64,
    pub spec: PodSpec,
    /// The ConfigMap whose files the members read only as they start (`my.cnf`,
    /// `redis.conf`, start scripts), if any: its digest goes on the template
    /// ([`CONFIG_DIGEST_ANNOTATION`]).
    pub config: Option<&'a ConfigMap>,
}

/// The pod-template annotation carrying a digest of the files the members read only as they
/// start. A change of those files (a changed `spec.config`, or a new operator release that
/// writes them differently) changes the template with it, so the managed roll restarts each
/// member onto them one at a time; without it a member would read them only whenever it
/// happened to restart, and members would run different settings unannounced.
pub const CONFIG_DIGEST_ANNOTATION: &str = "quorum.dev/config-digest";

/// The SHA-256 of `config_map`'s data, keys and values in key order, hex-encoded.
pub fn config_digest(config_map: &ConfigMap) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for (key, value) in config_map.data.iter().flatten() {
        for part in [key, value] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
    }
    hex::encode(hasher.finalize())
}

/// The members' pod template: `pods.spec` run as `pods.uid` under [`member_pod_security`], with
/// the user's overrides applied: their labels beside the operator's (the operator's win, since
/// its selectors and rolls read them), their annotations, node selector, tolerations and
/// priority class, and their affinity or else [`affinity_or_spread`] over the pods `members`
/// selects.
pub fn member_template(pods: MemberPods<'_>, members: &BTreeMap<String, String>) -> PodTemplateSpec {
    let MemberPods {
        overrides,
        labels,
        uid,
        spec: pod,
        config,
    } = pods;
    let overrides = overrides.cloned().unwrap_or_default();
    let mut pod_labels = overrides.labels;
    pod_labels.extend(labels);
    let mut annotations = overrides.annotations;
    if let Some(config) = config {
        annotations.insert(CONFIG_DIGEST_ANNOTATION.into(), config_digest(config));
    }
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(pod_labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            node_selector: (!overrides.node_selector.is_empty()).then_some(overrides.node_selector),
            tolerations: (!overrides.tolerations.is_empty()).then_some(overrides.tolerations),
            affinity: Some(affinity_or_spread(overrides.affinity, members)),
            priority_class_name: overrides.priority_class_name,
            security_context: Some(member_pod_security(uid)),
            ..pod
        }),
    }
}

/// The StatefulSet `name` of `owner`'s members: `replicas` pods of [`member_template`], selected
/// by `selector` (immutable once created, and the set the pods spread over), named through the
/// headless Service `service` and started all at once. With `operator_rolls`, a new template
/// restarts no pod by itself (`OnDelete`): the operator rolls them one at a time
/// ([`crate::rollout`]). With `storage`, each pod has a data volume, deleted with a member a
/// scale-down removes: a member added again starts empty and syncs, instead of starting from the
/// history of one the cluster has forgotten.
///
/// # Errors
/// As [`crate::apply::child_metadata`].
#[allow(clippy::too_many_arguments)]
pub fn member_statefulset<K: kube::Resource<DynamicType = ()>>(
    owner: &K,
    name: String,
    labels: BTreeMap<String, String>,
    service: String,
    replicas: i32,
    selector: BTreeMap<String, String>,
    pods: MemberPods<'_>,
    operator_rolls: bool,
    storage: Option<&Storage>,
) -> Result<StatefulSet, crate::Error> {
    let template = member_template(pods, &selector);
    Ok(StatefulSet {
        metadata: crate::apply::child_metadata(owner, name, labels)?,
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(service),
            pod_management_policy: Some("Parallel".into()),
            update_strategy: operator_rolls.then(crate::rollout::operator_managed_updates),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            },
            template,
            volume_claim_templates: storage.map(|storage| vec![data_claim(storage)]),
            persistent_volume_claim_retention_policy: storage.map(|_| claim_retention()),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    })
}

/// A random password of 32 letters and digits.
pub fn generate_password() -> String {
    use rand::{Rng, distr::Alphanumeric};
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_template_applies_the_users_overrides_once_and_keeps_the_operators_labels() {
        let members = BTreeMap::from([("app.kubernetes.io/instance".to_string(), "demo".to_string())]);
        let overrides = PodOverrides {
            labels: BTreeMap::from([
                ("team".to_string(), "payments".to_string()),
                ("app.kubernetes.io/instance".to_string(), "hijacked".to_string()),
            ]),
            annotations: BTreeMap::from([("note".to_string(), "x".to_string())]),
            node_selector: BTreeMap::from([("disk".to_string(), "ssd".to_string())]),
            priority_class_name: Some("critical".into()),
            ..PodOverrides::default()
        };
        let pod = PodSpec {
            termination_grace_period_seconds: Some(60),
            ..PodSpec::default()
        };
        let pods = MemberPods {
            overrides: Some(&overrides),
            labels: members.clone(),
            uid: 999,
            spec: pod,
            config: None,
        };
        let template = member_template(pods, &members);
        let labels = template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        assert_eq!(labels["team"], "payments");
        assert_eq!(
            labels["app.kubernetes.io/instance"], "demo",
            "the operator's selector label wins"
        );
        let spec = template.spec.unwrap();
        assert_eq!(
            spec.termination_grace_period_seconds,
            Some(60),
            "the engine's pod is kept"
        );
        assert_eq!(spec.node_selector.unwrap()["disk"], "ssd");
        assert_eq!(spec.priority_class_name.as_deref(), Some("critical"));
        assert_eq!(spec.affinity, Some(affinity_or_spread(None, &members)));
        let security = spec.security_context.unwrap();
        assert_eq!(
            (security.run_as_user, security.run_as_non_root),
            (Some(999), Some(true))
        );

        let pods = MemberPods {
            overrides: None,
            labels: members.clone(),
            uid: 999,
            spec: PodSpec::default(),
            config: None,
        };
        let plain = member_template(pods, &members);
        assert_eq!(plain.metadata.unwrap().annotations, None);
        assert_eq!(plain.spec.unwrap().tolerations, None);
    }

    #[test]
    fn the_config_digest_follows_the_files_and_the_operator_s_annotation_wins() {
        let config = |files: &[(&str, &str)]| ConfigMap {
            data: Some(
                files
                    .iter()
                    .map(|(key, value)| (key.to_string(), value.to_string()))
                    .collect(),
            ),
            ..ConfigMap::default()
        };
        let base = config(&[("my.cnf", "a = 1\n"), ("start.sh", "exec x\n")]);
        assert_eq!(config_digest(&base), config_digest(&base.clone()));
        for changed in [
            config(&[("my.cnf", "a = 2\n"), ("start.sh", "exec x\n")]),
            config(&[("my.cnf", "a = 1\n"), ("start.sh", "exec y\n")]),
            config(&[("my.cnf", "a = 1\nstart.sh"), ("", "exec x\n")]),
            config(&[("my.cnf", "a = 1\n")]),
        ] {
            assert_ne!(config_digest(&base), config_digest(&changed), "{changed:?}");
        }
        let members = BTreeMap::from([("app".to_string(), "demo".to_string())]);
        let overrides = PodOverrides {
            annotations: BTreeMap::from([
                (CONFIG_DIGEST_ANNOTATION.to_string(), "mine".to_string()),
                ("note".to_string(), "x".to_string()),
            ]),
            ..PodOverrides::default()
        };
        let template = member_template(
            MemberPods {
                overrides: Some(&overrides),
                labels: members.clone(),
                uid: 999,
                spec: PodSpec::default(),
                config: Some(&base),
            },
            &members,
        );
        let annotations = template.metadata.unwrap().annotations.unwrap();
        assert_eq!(annotations[CONFIG_DIGEST_ANNOTATION], config_digest(&base));
        assert_eq!(annotations["note"], "x");
    }

    #[test]
    fn members_prefer_distinct_hosts_and_a_users_affinity_wins() {
        let members = BTreeMap::from([("app.kubernetes.io/instance".to_string(), "demo".to_string())]);
        let spread = affinity_or_spread(None, &members);
        let term = &spread
            .pod_anti_affinity
            .as_ref()
            .and_then(|anti| anti.preferred_during_scheduling_ignored_during_execution.as_ref())
            .expect("a preferred anti-affinity")[0];
        assert_eq!(term.pod_affinity_term.topology_key, "kubernetes.io/hostname");
        assert_eq!(
            term.pod_affinity_term
                .label_selector
                .as_ref()
                .and_then(|selector| selector.match_labels.as_ref()),
            Some(&members)
        );
        assert!(
            spread
                .pod_anti_affinity
                .as_ref()
                .is_some_and(|anti| anti.required_during_scheduling_ignored_during_execution.is_none()),
            "a requirement would leave members of a one-node cluster unscheduled"
        );
        let users = Affinity {
            node_affinity: Some(Default::default()),
            ..Affinity::default()
        };
        assert_eq!(affinity_or_spread(Some(users.clone()), &members), users);
    }

    #[test]
    fn generated_passwords_are_long_and_differ() {
        let (one, two) = (generate_password(), generate_password());
        assert_eq!(one.len(), 32);
        assert!(one.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(one, two);
    }
}
