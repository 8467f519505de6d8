//! The etcd operator's process: flags, logging, the runtime, one controller.

use std::time::Duration;

use clap::Parser;
use etcd_operator::{
    OPERATOR_NAME,
    backup_controller::reconcile_backup,
    crd::{EtcdBackup, EtcdCluster},
    observe::{EtcdClients, default_policy},
    reconcile::{MemberAddresses, Settings, State, reconcile},
};
use quorum_core::{
    availability::breaker::BreakerSettings,
    config::OperatorConfig,
    runner::{RunError, Runtime},
    telemetry,
};

/// Quorum's etcd operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorConfig,

    /// The cluster's DNS domain, for member addresses.
    #[arg(long, env = "CLUSTER_DOMAIN", default_value = "cluster.local")]
    cluster_domain: String,

    /// How member addresses are found: in-cluster DNS, or loopback processes for local demos.
    #[arg(long, env = "MEMBER_ADDRESSES", value_enum, default_value_t = MemberAddresses::Dns)]
    member_addresses: MemberAddresses,

    /// Seconds a member must stay Unhealthy (its peers report it down) before it is replaced.
    #[arg(long, env = "MEMBER_REPLACE_AFTER_SECONDS", default_value_t = 300)]
    member_replace_after_seconds: u64,

    /// Allow backups to plain-HTTP S3 endpoints (credentials and data cross the network in
    /// clear text; for local test stores only).
    #[arg(long, env = "ALLOW_HTTP_BACKUPS", default_value_t = false, action = clap::ArgAction::Set)]
    allow_http_backups: bool,
}

#[tokio::main]
async fn main() -> Result<(), RunError> {
    let cli = Cli::parse();
    telemetry::init(cli.operator.log_format);
    quorum_core::install_crypto_provider();
    let client = kube::Client::try_default().await.map_err(RunError::ApiServer)?;
    let runtime = Runtime::new(OPERATOR_NAME, cli.operator, client);
    let state = State {
        clients: EtcdClients::new(
            default_policy(),
            BreakerSettings::default(),
            runtime.metrics().admin.clone(),
        ),
        settings: Settings {
            cluster_domain: cli.cluster_domain,
            member_addresses: cli.member_addresses,
            freshness: Duration::from_secs(30),
            replace_after: Duration::from_secs(cli.member_replace_after_seconds),
            allow_http_backups: cli.allow_http_backups,
        },
    };
    let context = runtime.context(state);
    let clusters = runtime.controller::<EtcdCluster, _, _, _, _>(context.clone(), reconcile);
    let backups = runtime.controller::<EtcdBackup, _, _, _, _>(context, reconcile_backup);
    runtime.run(vec![clusters, backups]).await
}
