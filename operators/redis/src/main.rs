//! The Redis operator's process: flags, logging, the controllers; or, in a restored cluster's
//! data pod, its restore step.

use std::time::Duration;

use clap::Parser;
use quorum_core::{
    backup::{S3Credentials, finish_restore_step, job::BackupRunArgs},
    config::{MemberConfig, OperatorConfig},
    runner::{RunError, run_backup_job, serve},
    telemetry,
};
use redis_operator::{
    RedisOperator,
    reconcile::Settings,
    restore::{RestoreNodeArgs, restore_node},
    sentinel_events::ListenSettings,
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
    /// Take one run of a backup (the process of a backup Job the operator started).
    BackupRun(BackupRunArgs),
}

#[tokio::main]
async fn main() -> Result<(), RunError> {
    let cli = Cli::parse();
    telemetry::init(cli.operator.log_format);
    quorum_core::install_crypto_provider();
    if let Some(Command::RestoreNode(args)) = &cli.command {
        finish_restore_step(
            &args.pod_name,
            restore_node(args, S3Credentials::from_env()).await,
        );
    }
    let settings = Settings {
        members: cli.members,
        operator_image: cli.operator_image,
        settled_recheck: Duration::from_secs(30),
        sentinel_events: ListenSettings::default(),
    };
    if let Some(Command::BackupRun(args)) = &cli.command {
        run_backup_job::<RedisOperator>(cli.operator, settings, args).await;
    }
    serve::<RedisOperator>(cli.operator, settings).await
}
