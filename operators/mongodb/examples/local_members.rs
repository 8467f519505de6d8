//! Local members for the demo: one member process per data or arbiter pod of every replica set
//! the MongoDB operator manages, on the loopback addresses its `--member-addresses loopback`
//! setting uses. The process is the replica-set simulator (`mongo-sim`, which speaks the real
//! wire protocol), or a real `mongod` when `QUORUM_MONGOD` names one. See
//! `quorum_e2e::local_members`.
//!
//! `cargo run -p mongodb-operator --example mongodb_local_members -- --state <dir>`

use std::path::PathBuf;

use quorum_e2e::local_members::{LocalMembers, MongoLauncher};

fn argument(name: &str) -> Option<String> {
    let mut args = std::env::args();
    args.find(|a| a == name).and_then(|_| args.next())
}

#[tokio::main]
async fn main() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    quorum_core::install_crypto_provider();
    let state = PathBuf::from(argument("--state").expect("--state <directory for pod data>"));
    let client = kube::Client::try_default().await.expect("a kubeconfig");
    let members = LocalMembers::start(client, MongoLauncher, state, None);
    // SIGINT or SIGTERM (what `make demo-stop` sends): dropping the members stops their processes.
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    drop(members);
}
