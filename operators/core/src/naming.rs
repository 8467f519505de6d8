//! Deterministic names and the standard labels every child object carries.
//!
//! Names are a pure function of the owning resource's name and a role suffix, so a reconcile
//! that crashed half-way finds the same objects on its next pass.

use std::collections::BTreeMap;

/// Value of `app.kubernetes.io/part-of` on every object Quorum manages.
pub const PART_OF: &str = "quorum";

/// Kubernetes' limit for names that must also be DNS labels (Services, StatefulSet pods).
pub const MAX_DNS_LABEL: usize = 63;

/// The longest StatefulSet name whose pods get their `controller-revision-hash` label: the
/// label's value is the StatefulSet's name, a dash and a hash of up to ten characters, and a
/// label value holds at most 63.
pub const MAX_STATEFULSET_NAME: usize = MAX_DNS_LABEL - 11;

/// The longest name a cluster may have when its longest-named StatefulSet is
/// `<cluster>-<suffix>` (or `<cluster>` for an empty suffix): longer names would make the
/// StatefulSet controller fail to create pods, so admission refuses them.
pub const fn max_cluster_name(longest_statefulset_suffix: &str) -> usize {
    match longest_statefulset_suffix.len() {
        0 => MAX_STATEFULSET_NAME,
        suffix => MAX_STATEFULSET_NAME - suffix - 1,
    }
}

/// The admission rule (at the custom resource's root) that refuses names longer than `max`,
/// or that are not a DNS-1035 label (lowercase letters, digits and `-`, starting with a letter):
/// the members' Services must be named so, and their pods' host names must be DNS labels. The
/// message names `metadata.name` and the limit.
pub fn cluster_name_rule(max: usize) -> kube::core::Rule {
    kube::core::Rule::new(format!(
        "size(self.metadata.name) <= {max} && self.metadata.name.matches('{}')",
        crate::crd::validation::DNS_1035_LABEL
    ))
    .message(kube::core::Message::Message(format!(
        "metadata.name must be at most {max} characters of lowercase letters, digits and '-', starting with a \
         letter and ending with a letter or digit: the members' StatefulSet, Services, pod names and labels are \
         made from it"
    )))
}

/// The name of a child object: `<instance>-<suffix>`, or `<instance>` when the suffix is empty.
///
/// Names longer than a DNS label are shortened deterministically: the tail is replaced by a
/// short hash of the full name, so two different long names never collide by truncation.
pub fn child_name(instance: &str, suffix: &str) -> String {
    let full = if suffix.is_empty() {
        instance.to_string()
    } else {
        format!("{instance}-{suffix}")
    };
    shorten(&full, MAX_DNS_LABEL)
}

/// Shortens `name` to at most `max` characters, keeping it unique with a hash of the whole.
pub fn shorten(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let hash = format!("{:08x}", fnv1a(name.as_bytes()) as u32);
    let keep = max - hash.len() - 1;
    let head = name[..keep].trim_end_matches('-');
    format!("{head}-{hash}")
}

/// The loopback address of member `ordinal` of the cluster `namespace/cluster`, for members
/// run as processes on one machine (local demos and tests): `127.A.B.<ordinal + 1>`, with A and
/// B from a hash of the name, so clusters get distinct blocks and members distinct addresses.
pub fn loopback_ip(namespace: &str, cluster: &str, ordinal: usize) -> std::net::Ipv4Addr {
    let hash = fnv1a(format!("{namespace}/{cluster}").as_bytes());
    let octet = |shift: u32| ((hash >> shift) % 250) as u8 + 1;
    std::net::Ipv4Addr::new(127, octet(0), octet(8), (ordinal + 1) as u8)
}

pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x100000001b3)
    })
}

/// Labels that select one component of one instance: stable for the life of the instance,
/// so they are safe in immutable selectors (StatefulSet, PodDisruptionBudget, Service).
pub fn selector_labels(app: &str, instance: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), app.to_string()),
        ("app.kubernetes.io/instance".to_string(), instance.to_string()),
        ("app.kubernetes.io/component".to_string(), component.to_string()),
    ])
}

/// `labels` as a label selector string (`k=v,k=v`), as list calls and the scale subresource's
/// `labelSelectorPath` take it.
pub fn label_selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The full standard label set: the selector labels plus `managed-by` and `part-of`.
pub fn standard_labels(
    app: &str,
    instance: &str,
    component: &str,
    managed_by: &str,
) -> BTreeMap<String, String> {
    let mut labels = selector_labels(app, instance, component);
    labels.insert("app.kubernetes.io/managed-by".to_string(), managed_by.to_string());
    labels.insert("app.kubernetes.io/part-of".to_string(), PART_OF.to_string());
    labels
}

/// Where the operator reaches a cluster's pods: by DNS name through their headless Service,
/// or (local demos and tests) at a loopback address of their own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodHosts {
    /// `<pod>.<headless service>.<namespace>.svc.<domain>`, in a Kubernetes cluster.
    ClusterDns {
        namespace: String,
        cluster_domain: String,
    },
    /// Processes on this machine's loopback addresses ([`loopback_ip`]).
    Loopback { namespace: String },
}

impl PodHosts {
    /// As the operator's `--member-addresses` and `--cluster-domain` say, for the pods of
    /// `cluster` (in its namespace).
    pub fn new<K: kube::Resource>(members: &crate::config::MemberConfig, cluster: &K) -> Self {
        let namespace = cluster.meta().namespace.clone().unwrap_or_default();
        match members.member_addresses {
            crate::config::MemberAddresses::Dns => PodHosts::ClusterDns {
                namespace,
                cluster_domain: members.cluster_domain.clone(),
            },
            crate::config::MemberAddresses::Loopback => PodHosts::Loopback { namespace },
        }
    }

    /// The host of pod `ordinal` of StatefulSet `statefulset`, whose pods the headless Service
    /// `service` names.
    pub fn host(&self, statefulset: &str, service: &str, ordinal: usize) -> String {
        match self {
            PodHosts::ClusterDns {
                namespace,
                cluster_domain,
            } => format!("{statefulset}-{ordinal}.{service}.{namespace}.svc.{cluster_domain}"),
            PodHosts::Loopback { namespace } => loopback_ip(namespace, statefulset, ordinal).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_allowed_cluster_name_gives_the_longest_statefulset_name_pods_can_have() {
        for suffix in ["", "sentinel", "arbiter"] {
            let cluster = "c".repeat(max_cluster_name(suffix));
            let statefulset = child_name(&cluster, suffix);
            assert_eq!(statefulset.len(), MAX_STATEFULSET_NAME, "{suffix}");
            // The revision label: `<statefulset>-<hash of up to ten characters>`.
            assert!(format!("{statefulset}-{}", "h".repeat(10)).len() <= MAX_DNS_LABEL);
            let longer = child_name(&format!("{cluster}c"), suffix);
            assert!(longer.len() > MAX_STATEFULSET_NAME, "{suffix}");
        }
    }

    #[test]
    fn label_selector_joins_the_labels_in_key_order() {
        assert_eq!(
            label_selector(&selector_labels("etcd", "main", "member")),
            "app.kubernetes.io/component=member,app.kubernetes.io/instance=main,app.kubernetes.io/name=etcd"
        );
        assert_eq!(label_selector(&BTreeMap::new()), "");
    }

    #[test]
    fn short_names_are_joined_unchanged() {
        assert_eq!(child_name("main", "client"), "main-client");
        assert_eq!(child_name("main", ""), "main");
    }

    #[test]
    fn long_names_are_shortened_deterministically_and_stay_distinct() {
        let a = child_name(&"a".repeat(70), "client");
        let b = child_name(&"a".repeat(71), "client");
        assert_eq!(a.len(), MAX_DNS_LABEL);
        assert_eq!(a, child_name(&"a".repeat(70), "client"));
        assert_ne!(a, b);
        assert!(!a.contains("--"));
    }

    #[test]
    fn loopback_blocks_differ_per_cluster_and_addresses_per_member() {
        let a0 = loopback_ip("demo", "main", 0);
        assert_eq!(a0.octets()[0], 127);
        assert_eq!(a0.octets()[3], 1);
        assert_eq!(loopback_ip("demo", "main", 4).octets()[..3], a0.octets()[..3]);
        assert_ne!(loopback_ip("demo", "other", 0), a0);
        assert_ne!(loopback_ip("other", "main", 0), a0);
    }

    #[test]
    fn standard_labels_extend_selector_labels() {
        let labels = standard_labels("etcd", "main", "member", "etcd-operator");
        for (key, value) in selector_labels("etcd", "main", "member") {
            assert_eq!(labels.get(&key), Some(&value));
        }
        assert_eq!(labels["app.kubernetes.io/managed-by"], "etcd-operator");
        assert_eq!(labels["app.kubernetes.io/part-of"], "quorum");
    }
}
