//! The Redis operator's process: flags, logging, the runtime, the controllers.

use std::time::Duration;

use clap::Parser;
use quorum_core::{
    availability::breaker::BreakerSettings,
    backup::S3Credentials,
    config::{MemberConfig, OperatorConfig},
    runner::{RunError, Runtime},
    telemetry,
    wakeups::Wakeups,
};
use redis_operator::{
    OPERATOR_NAME,
    clients::{RedisClients, default_policy},
    reconcile::{Settings, State},
    restore::{RestoreNodeArgs, restore_node},
    sentinel_events::{ListenSettings, SentinelEvents},
};

/// Quorum's Redis operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorConfig,

    #[command(flatten)]
    members: MemberConfig,

    /// The operator's own image: the data pods of a cluster restored from a backup run it as
    /// their restore step.
    #[arg(long, env = "OPERATOR_IMAGE", default_value = concat!("ghcr.io/quorum-dev/redis-operator:v", env!("CARGO_PKG_VERSION")))]
    operator_image: String,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Place this data node's snapshot before its server starts (the init step of the data
    /// pods of a cluster created with `spec.restoreFrom`). S3 credentials come from
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
    RestoreNode(RestoreNodeArgs),
}

#[tokio::main]
async fn main() -> Result<(), RunError> {
    let cli = Cli::parse();
    telemetry::init(cli.operator.log_format);
    quorum_core::install_crypto_provider();
    if let Some(Command::RestoreNode(args)) = &cli.command {
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
        match restore_node(args, credentials).await {
            Ok(outcome) => {
                tracing::info!(pod = %args.pod_name, ?outcome, "restore");
                return Ok(());
            }
            Err(error) => {
                tracing::error!(pod = %args.pod_name, %error, "restore failed");
                std::process::exit(1);
            }
        }
    }
    let client = quorum_core::runner::api_client(&cli.operator)
        .await
        .map_err(RunError::ApiServer)?;
    let runtime = Runtime::new(OPERATOR_NAME, cli.operator, client);
    let wakeups = Wakeups::new();
    let state = State {
        clients: RedisClients::new(
            default_policy(),
            BreakerSettings::default(),
            runtime.metrics().admin.clone(),
        ),
        settings: Settings {
            cluster_domain: cli.members.cluster_domain,
            member_addresses: cli.members.member_addresses,
            allow_http_backups: cli.members.allow_http_backups,
            operator_image: cli.operator_image,
            settled_recheck: Duration::from_secs(30),
        },
        sentinel_events: SentinelEvents::new(wakeups.clone(), ListenSettings::default()),
    };
    let context = runtime.context(state);
    let controllers = redis_operator::controllers(&runtime, context, wakeups);
    runtime.run(controllers).await
}
