//! The MongoDB operator's process: flags, logging, the controllers.

use clap::Parser;
use mongodb_operator::{MongoDbOperator, reconcile::Settings};
use quorum_core::{
    config::{MemberConfig, OperatorConfig},
    runner::{RunError, serve},
    telemetry,
};

/// Quorum's MongoDB operator.
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
    let settings = Settings { members: cli.members };
    serve::<MongoDbOperator>(cli.operator, settings).await
}
