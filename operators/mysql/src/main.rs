//! The MySQL/MariaDB operator's process: flags, logging, the controllers.

use std::time::Duration;

use clap::Parser;
use mysql_operator::{
    MySqlOperator,
    reconcile::Settings,
    restore::{RestorePhysicalArgs, restore_physical},
};
use quorum_core::{
    backup::{
        S3Credentials, finish_restore_step,
        job::{BESIDE_BINARY, BackupRunArgs, InstallBinaryArgs, TERMINATION_LOG, install_binary},
    },
    config::{MemberConfig, OperatorConfig},
    runner::{RunError, run_backup_job, serve},
    telemetry,
};

/// Quorum's MySQL/MariaDB operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorConfig,

    #[command(flatten)]
    members: MemberConfig,

    /// The operator's own image: backup Jobs run it.
    #[arg(long, env = "OPERATOR_IMAGE", default_value = concat!("ghcr.io/quorum-dev/mysql-operator:v", env!("CARGO_PKG_VERSION")))]
    operator_image: String,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Take one run of a backup (the process of a backup Job the operator started).
    BackupRun(BackupRunArgs),
    /// Copy this binary into a directory (the init container of a backup Job that runs beside
    /// a member, in the member's image).
    InstallBinary(InstallBinaryArgs),
    /// Restore a physical copy into the first member's empty data directory (an init container
    /// of the members of a cluster restored from one). S3 credentials come from
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
    RestorePhysical(Box<RestorePhysicalArgs>),
}

#[tokio::main]
async fn main() -> Result<(), RunError> {
    let cli = Cli::parse();
    telemetry::init(cli.operator.log_format);
    let settings = Settings {
        members: cli.members,
        freshness: Duration::from_secs(30),
        operator_image: cli.operator_image,
    };
    match &cli.command {
        Some(Command::BackupRun(args)) => run_backup_job::<MySqlOperator>(cli.operator, settings, args).await,
        Some(Command::InstallBinary(args)) => match install_binary(&args.to, BESIDE_BINARY) {
            Ok(path) => {
                println!("{}", path.display());
                std::process::exit(0)
            }
            Err(error) => {
                eprintln!("{error}");
                std::process::exit(1)
            }
        },
        Some(Command::RestorePhysical(args)) => {
            quorum_core::install_crypto_provider();
            let outcome = restore_physical(args, S3Credentials::from_env()).await;
            let message = match &outcome {
                Ok(report) => serde_json::to_string(report).expect("a report is JSON"),
                Err(error) => error.to_string(),
            };
            if let Err(error) = std::fs::write(TERMINATION_LOG, &message) {
                tracing::warn!(%error, "the termination message could not be written");
            }
            finish_restore_step(&args.pod, outcome)
        }
        None => {}
    }
    serve::<MySqlOperator>(cli.operator, settings).await
}
