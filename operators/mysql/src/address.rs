//! Where the operator (and the replicas) reach each member.

use quorum_core::naming::loopback_ip;

use crate::resources::{PORT, headless_service_name, member_name};

/// How member hosts are named. The same host is given to replicas as their source, so a
/// replica's `source host` maps back to an ordinal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addresses {
    /// `<pod>.<headless service>.<namespace>.svc.<domain>`, in a Kubernetes cluster.
    ClusterDns {
        cluster: String,
        namespace: String,
        cluster_domain: String,
    },
    /// Processes on this machine's loopback addresses (local demos and tests).
    Loopback { namespace: String, cluster: String },
}

impl Addresses {
    /// The host of member `ordinal`.
    pub fn host(&self, ordinal: usize) -> String {
        match self {
            Addresses::ClusterDns {
                cluster,
                namespace,
                cluster_domain,
            } => format!(
                "{}.{}.{namespace}.svc.{cluster_domain}",
                member_name(cluster, ordinal),
                headless_service_name(cluster)
            ),
            Addresses::Loopback { namespace, cluster } => {
                loopback_ip(namespace, cluster, ordinal).to_string()
            }
        }
    }

    pub fn port(&self) -> u16 {
        PORT as u16
    }

    /// The ordinal whose host is `host`, among the first `members`.
    pub fn ordinal_of(&self, host: &str, members: usize) -> Option<usize> {
        let host = host.trim_end_matches('.');
        (0..members).find(|ordinal| self.host(*ordinal) == host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_map_back_to_ordinals() {
        let dns = Addresses::ClusterDns {
            cluster: "shop".into(),
            namespace: "prod".into(),
            cluster_domain: "cluster.local".into(),
        };
        assert_eq!(dns.host(1), "shop-1.shop.prod.svc.cluster.local");
        assert_eq!(dns.ordinal_of("shop-1.shop.prod.svc.cluster.local.", 3), Some(1));
        assert_eq!(dns.ordinal_of("other", 3), None);
        let loopback = Addresses::Loopback {
            namespace: "prod".into(),
            cluster: "shop".into(),
        };
        assert_eq!(loopback.ordinal_of(&loopback.host(2), 3), Some(2));
    }
}
