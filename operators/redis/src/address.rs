//! Where the operator reaches each data node and Sentinel.
//!
//! Redis and Sentinel speak of one another by IP address (`INFO replication`, `SENTINEL
//! GET-MASTER-ADDR-BY-NAME`, `CLUSTER NODES`), so the operator resolves each pod's stable name
//! to the address it has now and maps the addresses the servers report back to pods.

use std::net::{IpAddr, SocketAddr};

use quorum_core::naming::PodHosts;

use crate::resources::{DataNodes, PORT, SENTINEL_PORT, sentinel_statefulset_name, statefulset_name};

/// How pod hosts are named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Addresses {
    /// Which StatefulSet and pod each data node is.
    pub nodes: DataNodes,
    pub hosts: PodHosts,
}

/// Which kind of pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Node,
    Sentinel,
}

impl Addresses {
    /// The host name (or loopback IP) of pod `ordinal` of `kind`.
    pub fn host(&self, kind: Kind, ordinal: usize) -> String {
        // The data nodes' headless Service is `<cluster>` whatever StatefulSet they are in; the
        // Sentinels' has their StatefulSet's name.
        let cluster = self.nodes.cluster();
        match kind {
            Kind::Node => {
                let (statefulset, ordinal) = self.nodes.place(ordinal);
                self.hosts.host(&statefulset, &statefulset_name(cluster), ordinal)
            }
            Kind::Sentinel => {
                let statefulset = sentinel_statefulset_name(cluster);
                self.hosts.host(&statefulset, &statefulset, ordinal)
            }
        }
    }

    pub fn port(kind: Kind) -> u16 {
        match kind {
            Kind::Node => PORT as u16,
            Kind::Sentinel => SENTINEL_PORT as u16,
        }
    }

    /// The address pod `ordinal` of `kind` has now; `None` while its name does not resolve
    /// (a pod not yet scheduled, or without an IP).
    pub async fn resolve(&self, kind: Kind, ordinal: usize) -> Option<SocketAddr> {
        let host = self.host(kind, ordinal);
        let port = Self::port(kind);
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Some(SocketAddr::new(ip, port));
        }
        tokio::net::lookup_host((host.as_str(), port)).await.ok()?.next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_follow_the_headless_services() {
        let hosts = PodHosts::ClusterDns {
            namespace: "prod".into(),
            cluster_domain: "cluster.local".into(),
        };
        let dns = Addresses {
            nodes: DataNodes::one_statefulset("cache"),
            hosts: hosts.clone(),
        };
        assert_eq!(dns.host(Kind::Node, 1), "cache-1.cache.prod.svc.cluster.local");
        assert_eq!(
            dns.host(Kind::Sentinel, 2),
            "cache-sentinel-2.cache-sentinel.prod.svc.cluster.local"
        );
        let sharded = Addresses {
            nodes: DataNodes::per_shard("cache", 2),
            hosts,
        };
        assert_eq!(
            sharded.host(Kind::Node, 3),
            "cache-shard-1-1.cache.prod.svc.cluster.local",
            "every shard's pods are named through the data nodes' one headless Service"
        );
        let loopback = Addresses {
            nodes: DataNodes::one_statefulset("cache"),
            hosts: PodHosts::Loopback {
                namespace: "prod".into(),
            },
        };
        assert_ne!(loopback.host(Kind::Node, 0), loopback.host(Kind::Sentinel, 0));
    }

    #[tokio::test]
    async fn loopback_addresses_resolve_without_dns() {
        let loopback = Addresses {
            nodes: DataNodes::one_statefulset("cache"),
            hosts: PodHosts::Loopback {
                namespace: "prod".into(),
            },
        };
        let address = loopback.resolve(Kind::Sentinel, 1).await.unwrap();
        assert_eq!(address.port(), 26379);
        assert_eq!(address.ip().to_string(), loopback.host(Kind::Sentinel, 1));
    }
}
