//! The MySQL/MariaDB operator's process: flags, logging, the controllers.

use std::time::Duration;

use clap::Parser;
use mysql_operator::{MySqlOperator, reconcile::Settings};
use quorum_core::{
    config::{MemberConfig, OperatorConfig},
    runner::{RunError, serve},
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
}

#[tokio::main]
async fn main() -> Result<(), RunError> {
    let cli = Cli::parse();
    telemetry::init(cli.operator.log_format);
    let settings = Settings {
        members: cli.members,
        freshness: Duration::from_secs(30),
    };
    serve::<MySqlOperator>(cli.operator, settings).await
}
