//! A MySQL replica seeded from a loaded primary: the cluster the backup scenario loaded is
//! scaled from three members to four by its spec, timed until the operator reports the new
//! member a healthy replica and the cluster settled. The operator streams a consistent snapshot
//! of the primary into the new member through its own process, so its memory is read across the
//! seeding: it must stay flat however large the data. At the end the new member's rows are
//! counted against the primary's.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use mysql_async::prelude::Queryable;
use quorum_e2e::{real_node, wait};
use serde::Serialize;
use serde_json::json;

use crate::{
    contender::{self, Engine, Installed},
    failover::{MYSQL_DATABASE, generated_password},
    process, report,
};

const MEMBERS_BEFORE: usize = 3;
const MEMBERS_AFTER: usize = 4;
/// How long the seeding may take.
const SEED_TIMEOUT: Duration = Duration::from_secs(1_800);

/// The seeding's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Seed {
    /// The data loaded (values only).
    pub data_bytes: u64,
    /// From the spec change to the new member a healthy replica, the cluster settled.
    pub seconds: f64,
    /// Rows of the loaded table on the new member, the same as on the primary.
    pub rows: u64,
    pub operator_rss_before_bytes: u64,
    pub operator_peak_rss_bytes: u64,
}

impl Seed {
    pub fn mib_per_second(&self) -> f64 {
        report::mib_per_second(self.data_bytes, self.seconds)
    }

    pub fn operator_rss_growth_mib(&self) -> f64 {
        report::growth_mib(self.operator_rss_before_bytes, self.operator_peak_rss_bytes)
    }
}

/// Adds a fourth member to `cluster`, which holds `data_bytes` of loaded rows, and waits until
/// it is seeded and replicating.
pub async fn measure(
    admin: &Client,
    installed: &Installed,
    cluster: &str,
    data_bytes: u64,
    ticks_per_second: u64,
) -> anyhow::Result<Seed> {
    let namespace = installed.clusters_namespace;
    let contender = installed.contender;
    let clusters = contender.clusters(admin, namespace);
    let members = contender::members(&clusters.get(cluster).await?.data["status"]).len();
    anyhow::ensure!(
        members == MEMBERS_BEFORE,
        "{cluster} has {members} members before the seeding, not {MEMBERS_BEFORE}"
    );
    let pid = real_node::container_pid(&installed.pod, installed.container);
    let before = process::read(pid, ticks_per_second)?;
    process::reset_peak(pid)?;
    let started = Instant::now();
    clusters
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": MEMBERS_AFTER}})),
        )
        .await
        .with_context(|| format!("scaling {cluster} to {MEMBERS_AFTER}"))?;
    wait::within(
        &format!("{cluster} settled with {MEMBERS_AFTER} members, every replica healthy"),
        SEED_TIMEOUT,
        || async {
            let cluster = clusters.get(cluster).await.map_err(|error| error.to_string())?;
            let members = contender::members(&cluster.data["status"]);
            let replicas = members
                .iter()
                .filter(|member| member["role"] == "Replica" && member["health"] == "Healthy")
                .count();
            (contender.is_settled(&cluster)
                && members.len() == MEMBERS_AFTER
                && replicas == MEMBERS_AFTER - 1)
                .then_some(())
                .ok_or(format!(
                    "{replicas} healthy replicas of {} members",
                    members.len()
                ))
        },
    )
    .await
    .map_err(anyhow::Error::msg)?;
    let seconds = started.elapsed().as_secs_f64();
    let after = process::read(pid, ticks_per_second)?;
    anyhow::ensure!(
        after.started_ticks == before.started_ticks,
        "{}'s process restarted while it seeded",
        contender.name()
    );

    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let password = generated_password(admin, namespace, Engine::Mysql, cluster).await?;
    let rows_on = |member: String| {
        let pods = pods.clone();
        let password = password.clone();
        async move {
            let ip = pods
                .get(&member)
                .await?
                .status
                .and_then(|status| status.pod_ip)
                .with_context(|| format!("{member} has no address"))?;
            let options = mysql_async::OptsBuilder::default()
                .ip_or_hostname(ip)
                .tcp_port(3306)
                .user(Some("root"))
                .pass(Some(password))
                .prefer_socket(false);
            let mut connection = mysql_async::Conn::new(options).await?;
            let rows: Option<u64> = connection
                .query_first(format!("SELECT COUNT(*) FROM {MYSQL_DATABASE}.data"))
                .await?;
            connection.disconnect().await?;
            anyhow::Ok(rows.unwrap_or(0))
        }
    };
    let primary = clusters.get(cluster).await?.data["status"]["primary"]
        .as_str()
        .context("no primary in status")?
        .to_string();
    let new_member = mysql_operator::resources::member_name(cluster, MEMBERS_AFTER - 1);
    let (on_primary, on_new) = (rows_on(primary).await?, rows_on(new_member.clone()).await?);
    anyhow::ensure!(
        on_primary > 0 && on_new == on_primary,
        "{new_member} holds {on_new} rows after seeding, the primary {on_primary}"
    );
    Ok(Seed {
        data_bytes,
        seconds,
        rows: on_new,
        operator_rss_before_bytes: before.rss_bytes,
        operator_peak_rss_bytes: after.peak_rss_bytes,
    })
}
