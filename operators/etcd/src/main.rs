//! The etcd operator's process: flags, logging, the controllers; or, in a restored cluster's
//! member pod, its restore step.

use std::time::Duration;

use clap::Parser;
use etcd_operator::{
    EtcdOperator,
    leader_events::ListenSettings,
    reconcile::Settings,
    restore::{RestoreMemberArgs, restore_member},
};
use quorum_core::{
    backup::{S3Credentials, finish_restore_step, job::BackupRunArgs},
    config::{MemberConfig, OperatorConfig},
    runner::{RunError, run_backup_job, serve},
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
    RestoreMember(Box<RestoreMemberArgs>),
    /// Take one run of a backup (the process of a backup Job the operator started).
    BackupRun(BackupRunArgs),
}

#[tokio::main]
async fn main() -> Result<(), RunError> {
    let cli = Cli::parse();
    telemetry::init(cli.operator.log_format);
    quorum_core::install_crypto_provider();
    if let Some(Command::RestoreMember(args)) = &cli.command {
        finish_restore_step(&args.name, restore_member(args, S3Credentials::from_env()).await);
    }
    let settings = Settings {
        members: cli.members,
        freshness: Duration::from_secs(30),
        replace_after: Duration::from_secs(cli.member_replace_after_seconds),
        operator_image: cli.operator_image,
        leader_events: ListenSettings::default(),
    };
    if let Some(Command::BackupRun(args)) = &cli.command {
        run_backup_job::<EtcdOperator>(cli.operator, settings, args).await;
    }
    serve::<EtcdOperator>(cli.operator, settings).await
}
