//! Local members: plays the kubelet for etcd member pods on a machine without a container
//! runtime, so the demo's clusters are real etcd clusters.
//!
//! For every StatefulSet the etcd operator manages, it runs one real `etcd` process per pod
//! the StatefulSet asks for, on the loopback address the operator's `--member-addresses
//! loopback` resolver expects, configured from the cluster's ConfigMap exactly as the pod's
//! environment would be. A pod that is deleted and recreated (an upgrade, a wipe) gets its
//! process restarted; a claim that is deleted takes the data directory with it.
//!
//! `cargo run -p etcd-operator --example local_members -- --etcd <path to etcd> --state <dir>`

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use etcd_operator::{OPERATOR_NAME, resolver::loopback_ip};
use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{ConfigMap, PersistentVolumeClaim, Pod},
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use tokio::process::{Child, Command};

struct Member {
    child: Child,
    pod_uid: String,
}

fn argument(name: &str) -> Option<String> {
    let mut args = std::env::args();
    args.find(|a| a == name).and_then(|_| args.next())
}

#[tokio::main]
async fn main() {
    quorum_core::install_crypto_provider();
    let etcd = PathBuf::from(argument("--etcd").expect("--etcd <path to the etcd binary>"));
    let state = PathBuf::from(argument("--state").expect("--state <directory for member data>"));
    let client = Client::try_default().await.expect("a kubeconfig");
    let mut members: BTreeMap<(String, String), Member> = BTreeMap::new();
    loop {
        if let Err(error) = pass(&client, &etcd, &state, &mut members).await {
            eprintln!("local members: {error}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn pass(
    client: &Client,
    etcd: &Path,
    state: &Path,
    members: &mut BTreeMap<(String, String), Member>,
) -> Result<(), kube::Error> {
    let managed = ListParams::default().labels(&format!("app.kubernetes.io/managed-by={OPERATOR_NAME}"));
    let mut wanted = BTreeMap::new();
    for statefulset in Api::<StatefulSet>::all(client.clone()).list(&managed).await? {
        let namespace = statefulset.namespace().unwrap_or_default();
        let cluster = statefulset.name_any();
        let config: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        let Some(config) = config.get_opt(&format!("{cluster}-config")).await? else {
            continue;
        };
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
        let replicas = statefulset.spec.and_then(|s| s.replicas).unwrap_or(0).max(0) as usize;
        for ordinal in 0..replicas {
            let name = format!("{cluster}-{ordinal}");
            let Some(pod) = pods.get_opt(&name).await? else {
                continue;
            };
            let key = (namespace.clone(), name.clone());
            wanted.insert(key.clone(), ());
            let pod_uid = pod.uid().unwrap_or_default();
            let running = members
                .get_mut(&key)
                .is_some_and(|m| matches!(m.child.try_wait(), Ok(None)));
            if running && members[&key].pod_uid == pod_uid {
                continue;
            }
            if let Some(mut old) = members.remove(&key) {
                let _ = old.child.kill().await;
            }
            let data_dir = state.join(&namespace).join(&name);
            // A new claim means a new, empty volume.
            let claim_uid = claims
                .get_opt(&format!("data-{name}"))
                .await?
                .and_then(|c| c.uid())
                .unwrap_or_default();
            let claim_marker = state.join(&namespace).join(format!("{name}.claim"));
            if std::fs::read_to_string(&claim_marker).ok().as_deref() != Some(claim_uid.as_str()) {
                let _ = std::fs::remove_dir_all(&data_dir);
                let _ = std::fs::create_dir_all(state.join(&namespace));
                let _ = std::fs::write(&claim_marker, &claim_uid);
            }
            let ip = loopback_ip(&namespace, &cluster, ordinal);
            let log =
                std::fs::File::create(state.join(&namespace).join(format!("{name}.log"))).expect("log file");
            let mut command = Command::new(etcd);
            command
                .env_clear()
                .env("ETCD_NAME", &name)
                .env("ETCD_DATA_DIR", &data_dir)
                .env("ETCD_LISTEN_CLIENT_URLS", format!("http://{ip}:2379"))
                .env("ETCD_ADVERTISE_CLIENT_URLS", format!("http://{ip}:2379"))
                .env("ETCD_LISTEN_PEER_URLS", format!("http://{ip}:2380"))
                .env("ETCD_INITIAL_ADVERTISE_PEER_URLS", format!("http://{ip}:2380"))
                .env("ETCD_STRICT_RECONFIG_CHECK", "true")
                .env("ETCD_UNSAFE_NO_FSYNC", "true")
                .env("ETCD_LOG_LEVEL", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .kill_on_drop(true);
            for (key, value) in config.data.clone().unwrap_or_default() {
                command.env(key, value);
            }
            match command.spawn() {
                Ok(child) => {
                    println!("started {namespace}/{name} on {ip}");
                    members.insert(key, Member { child, pod_uid });
                }
                Err(error) => eprintln!("could not start {name}: {error}"),
            }
        }
    }
    let gone: Vec<_> = members
        .keys()
        .filter(|k| !wanted.contains_key(*k))
        .cloned()
        .collect();
    for key in gone {
        if let Some(mut member) = members.remove(&key) {
            let _ = member.child.kill().await;
            println!("stopped {}/{}", key.0, key.1);
        }
    }
    Ok(())
}
