//! Where each member listens. The one place member names become addresses.
//!
//! In a cluster, member `<cluster>-<ordinal>` is reached through the headless peer Service's
//! DNS name. Tests that back members with real processes on loopback use a fixed table
//! instead; nothing else in the operator knows the difference.

use std::collections::BTreeMap;

/// Addresses of one cluster's members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberResolver {
    /// `<scheme>://<cluster>-<ordinal>.<cluster>-peer.<namespace>.svc.<domain>:<port>`, where
    /// the client URL's scheme follows client TLS and the peer URL's follows peer TLS.
    ClusterDns {
        cluster: String,
        namespace: String,
        cluster_domain: String,
        client_tls: bool,
        peer_tls: bool,
    },
    /// Fixed client and peer URLs by ordinal.
    Fixed(BTreeMap<usize, FixedAddresses>),
    /// Members as processes on this machine, each on its own loopback address derived from
    /// the cluster's namespace and name (see [`loopback_ip`]): for local demos and tests.
    Loopback { namespace: String, cluster: String },
}

pub use quorum_core::naming::loopback_ip;

/// A member's URLs in a [`MemberResolver::Fixed`] table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedAddresses {
    pub client_url: String,
    pub peer_url: String,
}

#[derive(Clone, Copy)]
enum Listener {
    Client,
    Peer,
}

/// The name of the member at `ordinal`: the pod's name.
pub fn member_name(cluster: &str, ordinal: usize) -> String {
    format!("{cluster}-{ordinal}")
}

/// The ordinal in a member name `<cluster>-<ordinal>`.
pub fn ordinal_of(cluster: &str, member: &str) -> Option<usize> {
    member.strip_prefix(cluster)?.strip_prefix('-')?.parse().ok()
}

/// The headless Service that gives members stable DNS names.
pub fn peer_service_name(cluster: &str) -> String {
    quorum_core::naming::child_name(cluster, "peer")
}

impl MemberResolver {
    fn dns_host(cluster: &str, namespace: &str, domain: &str, ordinal: usize) -> String {
        format!(
            "{}.{}.{namespace}.svc.{domain}",
            member_name(cluster, ordinal),
            peer_service_name(cluster)
        )
    }

    /// The client URL of the member at `ordinal`.
    pub fn client_url(&self, ordinal: usize) -> Option<String> {
        self.url(ordinal, Listener::Client)
    }

    /// The peer URL the member at `ordinal` advertises.
    pub fn peer_url(&self, ordinal: usize) -> Option<String> {
        self.url(ordinal, Listener::Peer)
    }

    fn url(&self, ordinal: usize, listener: Listener) -> Option<String> {
        let port = match listener {
            Listener::Client => 2379,
            Listener::Peer => 2380,
        };
        match self {
            MemberResolver::ClusterDns {
                cluster,
                namespace,
                cluster_domain,
                client_tls,
                peer_tls,
            } => {
                let tls = match listener {
                    Listener::Client => *client_tls,
                    Listener::Peer => *peer_tls,
                };
                Some(format!(
                    "{}://{}:{port}",
                    if tls { "https" } else { "http" },
                    Self::dns_host(cluster, namespace, cluster_domain, ordinal)
                ))
            }
            MemberResolver::Fixed(table) => table.get(&ordinal).map(|addresses| match listener {
                Listener::Client => addresses.client_url.clone(),
                Listener::Peer => addresses.peer_url.clone(),
            }),
            MemberResolver::Loopback { namespace, cluster } => Some(format!(
                "http://{}:{port}",
                loopback_ip(namespace, cluster, ordinal)
            )),
        }
    }

    /// The ordinal whose peer URL is `url`: how a learner that has not started yet (and so
    /// has no name in the member list) is matched to its pod.
    pub fn ordinal_of_peer_url(&self, url: &str) -> Option<usize> {
        match self {
            MemberResolver::ClusterDns { cluster, .. } => {
                let host = url.split("://").nth(1)?.split(['.', ':']).next()?;
                ordinal_of(cluster, host)
            }
            MemberResolver::Fixed(table) => table
                .iter()
                .find_map(|(ordinal, addresses)| (addresses.peer_url == url).then_some(*ordinal)),
            MemberResolver::Loopback { namespace, cluster } => {
                let host = url.split("://").nth(1)?.split(':').next()?;
                let ip: std::net::Ipv4Addr = host.parse().ok()?;
                let ordinal = usize::from(ip.octets()[3]).checked_sub(1)?;
                (loopback_ip(namespace, cluster, ordinal) == ip).then_some(ordinal)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_dns_names_round_trip_through_peer_urls() {
        let resolver = MemberResolver::ClusterDns {
            cluster: "main".into(),
            namespace: "db".into(),
            cluster_domain: "cluster.local".into(),
            client_tls: false,
            peer_tls: false,
        };
        assert_eq!(
            resolver.client_url(2).unwrap(),
            "http://main-2.main-peer.db.svc.cluster.local:2379"
        );
        let peer = resolver.peer_url(4).unwrap();
        assert_eq!(peer, "http://main-4.main-peer.db.svc.cluster.local:2380");
        assert_eq!(resolver.ordinal_of_peer_url(&peer), Some(4));
        assert_eq!(resolver.ordinal_of_peer_url("http://other-4.x:2380"), None);
    }

    #[test]
    fn client_and_peer_schemes_follow_their_own_tls_settings() {
        let resolver = |client_tls, peer_tls| MemberResolver::ClusterDns {
            cluster: "main".into(),
            namespace: "db".into(),
            cluster_domain: "cluster.local".into(),
            client_tls,
            peer_tls,
        };
        let host = "main-0.main-peer.db.svc.cluster.local";
        for (client_tls, peer_tls, client, peer) in [
            (false, false, "http", "http"),
            (true, false, "https", "http"),
            (false, true, "http", "https"),
            (true, true, "https", "https"),
        ] {
            let resolver = resolver(client_tls, peer_tls);
            assert_eq!(resolver.client_url(0).unwrap(), format!("{client}://{host}:2379"));
            assert_eq!(resolver.peer_url(0).unwrap(), format!("{peer}://{host}:2380"));
            assert_eq!(
                resolver.ordinal_of_peer_url(&resolver.peer_url(0).unwrap()),
                Some(0)
            );
        }
    }

    #[test]
    fn loopback_addresses_are_stable_distinct_and_round_trip() {
        let resolver = MemberResolver::Loopback {
            namespace: "demo".into(),
            cluster: "main".into(),
        };
        let peer = resolver.peer_url(2).unwrap();
        assert_eq!(peer, format!("http://{}:2380", loopback_ip("demo", "main", 2)));
        assert_eq!(resolver.ordinal_of_peer_url(&peer), Some(2));
        assert_ne!(loopback_ip("demo", "main", 0), loopback_ip("demo", "other", 0));
        assert_eq!(loopback_ip("demo", "main", 0).octets()[0], 127);
    }

    #[test]
    fn member_names_carry_the_ordinal() {
        assert_eq!(member_name("main", 3), "main-3");
        assert_eq!(ordinal_of("main", "main-3"), Some(3));
        assert_eq!(ordinal_of("main", "mainx-3"), None);
        assert_eq!(ordinal_of("main-a", "main-a-10"), Some(10));
    }
}
