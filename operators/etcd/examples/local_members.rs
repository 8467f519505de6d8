//! Local members for the demo: one real etcd process per member pod of every cluster the etcd
//! operator manages, on the loopback addresses its `--member-addresses loopback` resolver uses.
//! See `quorum_e2e::local_members`.
//!
//! `cargo run -p etcd-operator --example local_members -- --etcd <path to etcd> --state <dir>`

use std::{collections::BTreeMap, path::PathBuf};

use quorum_e2e::local_members::{EtcdLauncher, LocalMembers};

fn argument(name: &str) -> Option<String> {
    let mut args = std::env::args();
    args.find(|a| a == name).and_then(|_| args.next())
}

#[tokio::main]
async fn main() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    quorum_core::install_crypto_provider();
    let etcd = PathBuf::from(argument("--etcd").expect("--etcd <path to the etcd binary>"));
    let state = PathBuf::from(argument("--state").expect("--state <directory for member data>"));
    let client = kube::Client::try_default().await.expect("a kubeconfig");
    let launcher = EtcdLauncher::new(BTreeMap::from([(String::new(), etcd)]));
    let _members = LocalMembers::start(client, launcher, state, None);
    let _ = tokio::signal::ctrl_c().await;
}
