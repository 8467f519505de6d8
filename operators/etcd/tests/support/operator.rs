//! The etcd operator, run in the test process as its binary would run it, on one namespace.

use std::time::Duration;

use etcd_operator::{
    EtcdOperator,
    leader_events::ListenSettings,
    reconcile::{MemberAddresses, MemberConfig, Settings, State},
};
use quorum_e2e::operator;

/// A running operator; [`Running::stop`] shuts it down as SIGTERM would.
pub type Running = operator::Running<State>;

/// Starts the operator watching `namespace`, finding members as `addresses` says.
pub fn start(client: kube::Client, namespace: &str, addresses: MemberAddresses) -> Running {
    start_with(client, namespace, addresses, false)
}

/// As [`start`], with leader election on a Lease in `namespace` when `leader_elect`.
pub fn start_with(
    client: kube::Client,
    namespace: &str,
    addresses: MemberAddresses,
    leader_elect: bool,
) -> Running {
    start_configured(
        client,
        namespace,
        addresses,
        leader_elect,
        Duration::from_secs(300),
    )
}

/// As [`start`], replacing a member once it has been Unhealthy for `replace_after`.
pub fn start_replacing_after(
    client: kube::Client,
    namespace: &str,
    addresses: MemberAddresses,
    replace_after: Duration,
) -> Running {
    start_configured(client, namespace, addresses, false, replace_after)
}

fn start_configured(
    client: kube::Client,
    namespace: &str,
    addresses: MemberAddresses,
    leader_elect: bool,
    replace_after: Duration,
) -> Running {
    let settings = Settings {
        members: MemberConfig {
            cluster_domain: "cluster.local".into(),
            member_addresses: addresses,
            allow_http_backups: true,
            backup_runner: quorum_core::config::BackupRunner::Operator,
        },
        freshness: Duration::from_secs(30),
        replace_after,
        operator_image: "quorum/etcd-operator:test".into(),
        leader_events: ListenSettings {
            timeout: Duration::from_millis(1500),
            keepalive: Duration::from_secs(5),
            max_retry_delay: Duration::from_secs(2),
            ..ListenSettings::default()
        },
    };
    operator::start::<EtcdOperator>(
        client,
        namespace,
        leader_elect,
        settings,
        Duration::from_millis(800),
    )
}
