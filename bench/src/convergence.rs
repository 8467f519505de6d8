//! Convergence and settled cost: N three-member clusters created at once under one operator,
//! timed until every one is ready, then left settled for a window; the operator's API requests
//! (from the audit log), memory and CPU (from the kernel) over both.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::future::try_join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use quorum_e2e::real_node;
use serde::Serialize;

use crate::{
    audit::{AuditLog, Requests},
    contender::{Contender, Installed},
    process::{self, Reading},
};

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Settings {
    pub clusters: usize,
    pub idle: Duration,
    /// How long all clusters may take to be ready before the run fails.
    pub ready_timeout: Duration,
}

/// What one operator did, as measured.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub contender: Contender,
    pub clusters: usize,
    /// The operator's process with no cluster yet, once it had made no request for a few
    /// seconds (started, caches filled).
    pub base: Reading,
    /// Resident memory when every cluster was ready.
    pub converged_rss_bytes: u64,
    pub convergence_seconds: f64,
    pub convergence_requests: Requests,
    pub convergence_cpu_seconds: f64,
    /// The highest resident memory until every cluster was ready.
    pub convergence_peak_rss_bytes: u64,
    pub idle_seconds: f64,
    pub idle_requests: Requests,
    pub idle_cpu_seconds: f64,
    /// Resident memory at the end of the settled window.
    pub idle_rss_bytes: u64,
    /// Its anonymous part ([`crate::process::Reading::anonymous_bytes`]).
    pub idle_anonymous_bytes: u64,
}

/// Creates the clusters under `installed`, times them until ready and settled, and leaves them
/// settled for the window (they stay for the next scenario).
pub async fn measure(
    admin: &Client,
    audit: &AuditLog,
    installed: &Installed,
    settings: Settings,
    ticks_per_second: u64,
) -> anyhow::Result<Run> {
    let contender = installed.contender;
    let pid = real_node::container_pid(&installed.pod, installed.container);
    let clusters = contender.clusters(admin, installed.clusters_namespace);
    let names: Vec<String> = (0..settings.clusters)
        .map(|index| format!("bench-{index:03}"))
        .collect();

    audit
        .wait_quiet(
            &installed.username,
            Duration::from_secs(5),
            Duration::from_secs(120),
        )
        .await?;
    let base = process::read(pid, ticks_per_second)?;
    // Every later reading must be of the same process: a PID reused after a restart is not.
    let read = || -> anyhow::Result<Reading> {
        let reading = process::read(pid, ticks_per_second)?;
        anyhow::ensure!(
            reading.started_ticks == base.started_ticks,
            "{}'s process {pid} is not the one first read: its container restarted",
            contender.name()
        );
        Ok(reading)
    };
    process::reset_peak(pid)?;
    let mark = audit.mark()?;
    let started = Instant::now();
    try_join_all(names.iter().map(|name| {
        let clusters = clusters.clone();
        async move {
            clusters
                .create(&PostParams::default(), &contender.cluster(name)?)
                .await
                .with_context(|| format!("creating {name}"))
        }
    }))
    .await?;
    all_ready(admin, installed, &clusters, settings).await?;
    let convergence_seconds = started.elapsed().as_secs_f64();
    // Ready is not done: an operator may still take steps (binary log expiry after the replicas
    // joined). Those are convergence, and the settled window starts after the last of them.
    all_settled(installed, &clusters, settings).await?;
    let converged = read()?;
    let (convergence_requests, mark) = audit.since(mark, &installed.username)?;

    let settled = Instant::now();
    // A measurement window, not a wait for a condition: the operator is left alone for it.
    tokio::time::sleep(settings.idle).await;
    let idle_seconds = settled.elapsed().as_secs_f64();
    let idle = read()?;
    let (idle_requests, _) = audit.since(mark, &installed.username)?;
    still_ready(admin, installed, &clusters, settings.clusters).await?;
    not_restarted(admin, installed).await?;

    Ok(Run {
        contender,
        clusters: settings.clusters,
        base,
        convergence_seconds,
        convergence_requests,
        convergence_cpu_seconds: converged.cpu_seconds - base.cpu_seconds,
        convergence_peak_rss_bytes: converged.peak_rss_bytes,
        converged_rss_bytes: converged.rss_bytes,
        idle_seconds,
        idle_requests,
        idle_cpu_seconds: idle.cpu_seconds - converged.cpu_seconds,
        idle_rss_bytes: idle.rss_bytes,
        idle_anonymous_bytes: idle.anonymous_bytes,
    })
}

/// Clusters the operator reports ready, of those listed, and whether every pod in their
/// namespace (the operator's aside) is ready by its own probes, at least three per cluster.
async fn ready_count(
    admin: &Client,
    installed: &Installed,
    clusters: &Api<kube::api::DynamicObject>,
) -> anyhow::Result<(usize, usize, bool)> {
    let listed = clusters.list(&ListParams::default()).await?.items;
    let ready = listed
        .iter()
        .filter(|cluster| installed.contender.is_ready(cluster))
        .count();
    let pods = Api::<Pod>::namespaced(admin.clone(), installed.clusters_namespace)
        .list(&ListParams::default())
        .await?
        .items;
    let members: Vec<&Pod> = pods
        .iter()
        .filter(|pod| pod.metadata.uid != installed.pod.metadata.uid)
        .collect();
    let pods_ready = members.len() >= 3 * listed.len() && members.iter().all(|pod| real_node::pod_ready(pod));
    Ok((ready, listed.len(), pods_ready))
}

async fn all_ready(
    admin: &Client,
    installed: &Installed,
    clusters: &Api<kube::api::DynamicObject>,
    settings: Settings,
) -> anyhow::Result<()> {
    let name = installed.contender.name();
    let started = Instant::now();
    let mut reported = Instant::now();
    loop {
        let (ready, listed, pods_ready) = ready_count(admin, installed, clusters).await?;
        if ready == settings.clusters && pods_ready {
            return Ok(());
        }
        if started.elapsed() >= settings.ready_timeout {
            bail!(
                "{name}: {ready} of {listed} clusters ready (every member pod ready: {pods_ready}) after {:?}",
                settings.ready_timeout
            );
        }
        if reported.elapsed() >= Duration::from_secs(15) {
            eprintln!(
                "[bench] {name}: {ready} of {} clusters ready after {:.0} s",
                settings.clusters,
                started.elapsed().as_secs_f64()
            );
            reported = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the operator says every cluster is settled ([`Contender::is_settled`]).
async fn all_settled(
    installed: &Installed,
    clusters: &Api<kube::api::DynamicObject>,
    settings: Settings,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let listed = clusters.list(&ListParams::default()).await?.items;
        let settled = listed
            .iter()
            .filter(|cluster| installed.contender.is_settled(cluster))
            .count();
        if settled == settings.clusters {
            return Ok(());
        }
        if started.elapsed() >= settings.ready_timeout {
            bail!(
                "{}: {settled} of {} clusters settled after {:?}",
                installed.contender.name(),
                listed.len(),
                settings.ready_timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The settled window counts only if every cluster is still ready at its end (a check at the
/// end, not through it: a cluster that dropped and came back within the window passes).
async fn still_ready(
    admin: &Client,
    installed: &Installed,
    clusters: &Api<kube::api::DynamicObject>,
    expected: usize,
) -> anyhow::Result<()> {
    let (ready, listed, pods_ready) = ready_count(admin, installed, clusters).await?;
    anyhow::ensure!(
        ready == expected && pods_ready,
        "{}: {ready} of {listed} clusters ready (every member pod ready: {pods_ready}) at the end of the settled window",
        installed.contender.name()
    );
    Ok(())
}

/// The process read is the operator's only if its container never restarted.
async fn not_restarted(admin: &Client, installed: &Installed) -> anyhow::Result<()> {
    let namespace = installed.pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = installed.pod.metadata.name.as_deref().unwrap_or_default();
    let pod = Api::<Pod>::namespaced(admin.clone(), namespace).get(name).await?;
    let restarts = real_node::restart_count(&pod, installed.container);
    anyhow::ensure!(
        restarts == real_node::restart_count(&installed.pod, installed.container),
        "{}'s container restarted during the run ({restarts} restarts): its figures are not one process's",
        installed.contender.name()
    );
    Ok(())
}
