//! Where the operator (and the replicas) reach each member.

use quorum_core::naming::PodHosts;

use crate::resources::{PORT, headless_service_name, statefulset_name};

/// How member hosts are named. The same host is given to replicas as their source, so a
/// replica's `source host` maps back to an ordinal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Addresses {
    pub cluster: String,
    pub hosts: PodHosts,
}

impl Addresses {
    /// The host of member `ordinal`.
    pub fn host(&self, ordinal: usize) -> String {
        self.hosts.host(
            &statefulset_name(&self.cluster),
            &headless_service_name(&self.cluster),
            ordinal,
        )
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
        let dns = Addresses {
            cluster: "shop".into(),
            hosts: PodHosts::ClusterDns {
                namespace: "prod".into(),
                cluster_domain: "cluster.local".into(),
            },
        };
        assert_eq!(dns.host(1), "shop-1.shop.prod.svc.cluster.local");
        assert_eq!(dns.ordinal_of("shop-1.shop.prod.svc.cluster.local.", 3), Some(1));
        assert_eq!(dns.ordinal_of("other", 3), None);
        let loopback = Addresses {
            cluster: "shop".into(),
            hosts: PodHosts::Loopback {
                namespace: "prod".into(),
            },
        };
        assert_eq!(loopback.ordinal_of(&loopback.host(2), 3), Some(2));
    }
}
