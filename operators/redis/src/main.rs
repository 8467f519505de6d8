//! The Redis operator's process: flags, logging, the runtime, the controllers.

use clap::Parser;
use quorum_core::{
    availability::breaker::BreakerSettings,
    config::OperatorConfig,
    runner::{RunError, Runtime},
    telemetry,
};
use redis_operator::{
    OPERATOR_NAME,
    clients::{RedisClients, default_policy},
    crd::RedisCluster,
    reconcile::{MemberAddresses, Settings, State, reconcile},
};

/// Quorum's Redis operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorConfig,

    /// The cluster's DNS domain, for pod addresses.
    #[arg(long, env = "CLUSTER_DOMAIN", default_value = "cluster.local")]
    cluster_domain: String,

    /// How pod addresses are found: in-cluster DNS, or loopback processes for local demos.
    #[arg(long, env = "MEMBER_ADDRESSES", value_enum, default_value_t = MemberAddresses::Dns)]
    member_addresses: MemberAddresses,

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
        clients: RedisClients::new(
            default_policy(),
            BreakerSettings::default(),
            runtime.metrics().admin.clone(),
        ),
        settings: Settings {
            cluster_domain: cli.cluster_domain,
            member_addresses: cli.member_addresses,
            allow_http_backups: cli.allow_http_backups,
        },
    };
    let context = runtime.context(state);
    let clusters = runtime.controller::<RedisCluster, _, _, _, _>(context, reconcile);
    runtime.run(vec![clusters]).await
}
