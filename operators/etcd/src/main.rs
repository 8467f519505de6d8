//! The etcd operator's process: flags, logging, the runtime, one controller.

use std::time::Duration;

use clap::Parser;
use etcd_operator::{
    OPERATOR_NAME,
    observe::{EtcdClients, default_policy},
    reconcile::{Settings, State},
    restore::{RestoreMemberArgs, restore_member},
};
use quorum_core::{
    availability::breaker::BreakerSettings,
    backup::S3Credentials,
    config::{MemberConfig, OperatorConfig},
    runner::{RunError, Runtime},
    telemetry,
};

/// Quorum's etcd operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorConfig,

    #[command(flatten)]
    members: MemberConfig,

    /// Seconds a member must stay Unhealthy (its peers report it down) before it is replaced.
    #[arg(long, env = "MEMBER_REPLACE_AFTER_SECONDS", default_value_t = 300)]
    member_replace_after_seconds: u64,

    /// The operator's own image: the init container of restored members runs it.
    #[arg(long, env = "OPERATOR_IMAGE", default_value = concat!("ghcr.io/quorum-dev/etcd-operator:v", env!("CARGO_PKG_VERSION")))]
    operator_image: String,

    #[command(subcommand)]
    command: Option<Command>,
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
    let client = quorum_core::runner::api_client(&cli.operator)
        .await
        .map_err(RunError::ApiServer)?;
    let runtime = Runtime::new(OPERATOR_NAME, cli.operator, client);
    let state = State {
        clients: EtcdClients::new(
            default_policy(),
            BreakerSettings::default(),
            runtime.metrics().admin.clone(),
        ),
        settings: Settings {
            cluster_domain: cli.members.cluster_domain,
            member_addresses: cli.members.member_addresses,
            freshness: Duration::from_secs(30),
            replace_after: Duration::from_secs(cli.member_replace_after_seconds),
            allow_http_backups: cli.members.allow_http_backups,
            operator_image: cli.operator_image,
        },
    };
    let context = runtime.context(state);
    let controllers = etcd_operator::controllers(&runtime, context);
    runtime.run(controllers).await
}
