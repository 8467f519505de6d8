//! Local members for the demo: one real `redis-server` (from Debian's packages) per data or Sentinel pod of
//! every deployment the Redis operator manages, started through the pod's own `start.sh`, on the
//! loopback addresses its `--member-addresses loopback` resolver uses. See
//! `quorum_e2e::local_members`.
//!
//! `cargo run -p redis-operator --example redis_local_members -- --state <dir>`

use std::path::PathBuf;

use quorum_e2e::local_members::{LocalMembers, RedisLauncher};

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
    let members = LocalMembers::start(client, RedisLauncher, state, None);
    // SIGINT or SIGTERM (what `make demo-stop` sends): dropping the members stops the servers and Sentinels.
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    drop(members);
}
