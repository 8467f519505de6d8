//! The MySQL/MariaDB operator's process: flags, logging, the runtime, the controllers.

use std::time::Duration;

use clap::Parser;
use mysql_operator::{
    OPERATOR_NAME,
    observe::{MySqlClients, default_policy},
    reconcile::{Settings, State},
};
use quorum_core::{
    availability::breaker::BreakerSettings,
    config::{MemberConfig, OperatorConfig},
    runner::{RunError, Runtime},
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
    quorum_core::install_crypto_provider();
    let client = quorum_core::runner::api_client(&cli.operator)
        .await
        .map_err(RunError::ApiServer)?;
    let runtime = Runtime::new(OPERATOR_NAME, cli.operator, client);
    let state = State {
        clients: MySqlClients::new(
            default_policy(),
            BreakerSettings::default(),
            runtime.metrics().admin.clone(),
        ),
        settings: Settings {
            cluster_domain: cli.members.cluster_domain,
            member_addresses: cli.members.member_addresses,
            freshness: Duration::from_secs(30),
            allow_http_backups: cli.members.allow_http_backups,
        },
    };
    let context = runtime.context(state);
    let controllers = mysql_operator::controllers(&runtime, context);
    runtime.run(controllers).await
}
