//! The etcd operator's process: flags, logging, the runtime, one controller.

use std::time::Duration;

use clap::Parser;
use etcd_operator::{
    OPERATOR_NAME,
    backup_controller::reconcile_backup,
    crd::{EtcdBackup, EtcdCluster},
    observe::{EtcdClients, default_policy},
    reconcile::{MemberAddresses, Settings, State, reconcile},
    restore::{RestoreMemberArgs, restore_member},
};
use quorum_core::{
    availability::breaker::BreakerSettings,
    backup::S3Credentials,
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

    /// The operator's own image: the init container of restored members runs it.
    #[arg(long, env = "OPERATOR_IMAGE", default_value = concat!("ghcr.io/quorum-dev/etcd-operator:", env!("CARGO_PKG_VERSION")))]
    operator_image: String,

    #[command(subcommand)]
    command: Option<Command>,

    /// Allow backups to plain-HTTP S3 endpoints (credentials and data cross the network in
    /// clear text; for local test stores only).
    #[arg(long, env = "ALLOW_HTTP_BACKUPS", default_value_t = false, action = clap::ArgAction::Set)]
    allow_http_backups: bool,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Restore this member's data directory from a snapshot (the init container of members of
    /// a cluster created with `spec.restoreFrom`). S3 credentials come from AWS_ACCESS_KEY_ID
    /// and AWS_SECRET_ACCESS_KEY.
    RestoreMember(RestoreMemberArgs),
}

#[tokio::main]
async fn main() -> Result<(), RunError> {
    let cli = Cli::parse();
    telemetry::init(cli.operator.log_format);
    quorum_core::install_crypto_provider();
    if let Some(Command::RestoreMember(args)) = &cli.command {
        let credentials = match (
            std::env::var("AWS_ACCESS_KEY_ID"),
            std::env::var("AWS_SECRET_ACCESS_KEY"),
        ) {
            (Ok(access_key_id), Ok(secret_access_key)) => Some(S3Credentials {
                access_key_id,
                secret_access_key,
            }),
            _ => None,
        };
        match restore_member(args, credentials).await {
            Ok(outcome) => {
                tracing::info!(member = %args.name, ?outcome, "restore");
                return Ok(());
            }
            Err(error) => {
                tracing::error!(member = %args.name, %error, "restore failed");
                std::process::exit(1);
            }
        }
    }
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
            operator_image: cli.operator_image,
        },
    };
    let context = runtime.context(state);
    let clusters = runtime.controller::<EtcdCluster, _, _, _, _>(context.clone(), reconcile);
    let backups = runtime.controller::<EtcdBackup, _, _, _, _>(context, reconcile_backup);
    runtime.run(vec![clusters, backups]).await
}
