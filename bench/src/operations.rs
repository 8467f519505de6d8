//! Operations as a user runs them: an etcd cluster grown from three members to five and shrunk
//! back to three by its spec, under a writer, with each operator in turn (Quorum's and the
//! peer). Each resize is timed from the spec change until the operator reports the cluster at
//! its new size with every member a healthy voter and nothing left to do, and every member pod
//! is ready. The writer talks to the three members that stay, straight to their pods (the same
//! for both operators: the peer's Service is headless); at the end every acknowledged write is
//! read back, and none may be lost.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams},
};
use quorum_e2e::{
    history::{History, Writer},
    real_node, wait,
};
use serde::Serialize;
use serde_json::json;

use crate::{
    contender::{Contender, Installed},
    failover::{CLUSTER, DataClient, etcd_client, etcd_read_prefix, start_writer},
};

/// The sizes the cluster is taken to, in turn, from the three members it was created with.
pub const SIZES: [usize; 2] = [5, 3];
const STARTING_SIZE: usize = 3;
const PREFIX: &str = "operations";
/// Bounds the writer in count whatever happens (a few minutes at 20 writes a second).
const MOST_WRITES: usize = 20_000;
/// Acknowledged writes that show the writer reaches the cluster before the first resize.
const WRITES_FLOWING: usize = 20;
/// How long one resize may take.
const RESIZE_TIMEOUT: Duration = Duration::from_secs(600);

/// One resize and how long it took.
#[derive(Clone, Debug, Serialize)]
pub struct Resize {
    pub from: usize,
    pub to: usize,
    /// From the spec change to the cluster settled at the new size, every member pod ready.
    pub seconds: f64,
}

/// The resize scenario's result for one operator.
#[derive(Clone, Debug, Serialize)]
pub struct Resizes {
    pub contender: Contender,
    pub resizes: Vec<Resize>,
    pub writes_acknowledged: usize,
    /// Acknowledged writes read back at the end: all of them, or the run fails.
    pub writes_checked: usize,
}

impl Resizes {
    /// The seconds the resize to `to` members took, when there was one.
    pub fn seconds_to(&self, to: usize) -> Option<f64> {
        self.resizes
            .iter()
            .find(|resize| resize.to == to)
            .map(|resize| resize.seconds)
    }
}

/// Resizes [`CLUSTER`] to each of [`SIZES`] in turn under a writer, then checks the writer's
/// history.
pub async fn measure(admin: &Client, installed: &Installed) -> anyhow::Result<Resizes> {
    let contender = installed.contender;
    let namespace = installed.clusters_namespace;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let selector = contender.member_selector(CLUSTER);
    let endpoints: Vec<String> = member_pods(&pods, &selector)
        .await?
        .iter()
        .filter_map(|pod| pod.status.as_ref()?.pod_ip.clone())
        .map(|ip| format!("http://{ip}:2379"))
        .collect();
    anyhow::ensure!(
        endpoints.len() == STARTING_SIZE,
        "{}: {CLUSTER} has {} member pods with an address, not {STARTING_SIZE}",
        contender.name(),
        endpoints.len()
    );
    let client = etcd_client(&endpoints).await?;
    let writer = start_writer(
        Arc::new(DataClient::Etcd(Box::new(client.clone()))),
        PREFIX,
        MOST_WRITES,
    );
    let resized = resize_each(admin, installed, &pods, &selector, &writer).await;
    let history = writer.stop().await;
    let resizes = resized?;
    let writes_checked = check(&client, &history).await?;
    Ok(Resizes {
        contender,
        resizes,
        writes_acknowledged: history.acknowledged().count(),
        writes_checked,
    })
}

async fn resize_each(
    admin: &Client,
    installed: &Installed,
    pods: &Api<Pod>,
    selector: &str,
    writer: &Writer,
) -> anyhow::Result<Vec<Resize>> {
    let contender = installed.contender;
    let clusters = contender.clusters(admin, installed.clusters_namespace);
    writer
        .acknowledged_within(WRITES_FLOWING, Duration::from_secs(60))
        .await
        .map_err(|failure| anyhow::anyhow!("the writer's first writes: {failure}"))?;
    let mut resizes = Vec::new();
    let mut from = STARTING_SIZE;
    for to in SIZES {
        let started = Instant::now();
        clusters
            .patch(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": contender.size_spec(to) })),
            )
            .await?;
        wait::within(
            &format!("{CLUSTER} settled at {to} members, every member pod ready"),
            RESIZE_TIMEOUT,
            || async {
                let cluster = clusters.get(CLUSTER).await.map_err(|error| error.to_string())?;
                let members = member_pods(pods, selector)
                    .await
                    .map_err(|error| error.to_string())?;
                let ready = members.iter().filter(|pod| real_node::pod_ready(pod)).count();
                let settled = contender.settled_at(&cluster, to);
                (settled && ready == to && members.len() == to)
                    .then_some(())
                    .ok_or(format!(
                        "settled at {to}: {settled}; {ready} of {} member pods ready",
                        members.len()
                    ))
            },
        )
        .await
        .map_err(anyhow::Error::msg)?;
        let seconds = started.elapsed().as_secs_f64();
        eprintln!(
            "[bench] {}: {CLUSTER} from {from} to {to} members in {seconds:.1} s",
            contender.name()
        );
        resizes.push(Resize { from, to, seconds });
        from = to;
    }
    Ok(resizes)
}

async fn member_pods(pods: &Api<Pod>, selector: &str) -> kube::Result<Vec<Pod>> {
    Ok(pods.list(&ListParams::default().labels(selector)).await?.items)
}

/// Every key the writer wrote, read back through the members that stayed, checked against its
/// history: the number of acknowledged writes checked.
async fn check(client: &etcd_client::Client, history: &History) -> anyhow::Result<usize> {
    let held = wait::within("every written key read back", Duration::from_secs(60), || {
        etcd_read_prefix(client, PREFIX)
    })
    .await
    .map_err(anyhow::Error::msg)?;
    let checked = history
        .check(&held)
        .map_err(|violations| anyhow::anyhow!("resizing: lost or invented writes: {violations:#?}"))?;
    anyhow::ensure!(checked > 0, "resizing: the writer had no write acknowledged");
    Ok(checked)
}
