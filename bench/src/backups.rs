//! Backups: how fast Quorum's operator stores a backup of a cluster in an S3-compatible store
//! in the cluster, against the engine's own tool reading the same member, and what the operator's
//! memory does meanwhile.
//!
//! One cluster per engine is loaded with incompressible data through its client Service, then
//! backed up in alternating rounds: a backup resource (timed from its creation until its status
//! says `Succeeded`), then the engine's own tool inside the member the backup read
//! (`etcdctl snapshot save`, `mariadb-dump`, `redis-cli --rdb`; timed around `kubectl exec`).
//! The tool writes next to the server (to a file on the member's volume, or to `/dev/null` for
//! `mariadb-dump`) while Quorum's backup runs in a Job of its own (its service account, Role and
//! pod made first, all counted in its time) and crosses the pod network twice, from the member
//! to the Job's pod and from there to the store: the comparison is the tool's best case. MongoDB
//! is left out: its simulator has no `mongodump` to compare with.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{FutureExt, StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams},
};
use quorum_core::crd::{BackupPhase, BackupRunStatus, BackupSpec};
use quorum_e2e::{
    real_node,
    real_pods::{InClusterS3, deploy_s3_store},
    wait,
};
use serde::Serialize;
use serde_json::json;

use crate::{
    contender::{Engine, Installed},
    failover::{DataClient, generated_password, server_container},
    process, report,
    seeding::{self, Seed},
};

/// The cluster backed up: made for this scenario, with room for the data.
pub const CLUSTER: &str = "bench-backup";
/// Where the backups go in the store.
const STORE_PREFIX: &str = "bench-backups";
/// One value: large enough that the data, not the per-key overhead, is what is copied.
const VALUE_BYTES: usize = 64 * 1024;
/// Values written at once while loading.
const LOAD_BATCH: usize = 16;
/// How long one batch may take to be written.
const LOAD_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one backup (either way) may take before the run fails.
const BACKUP_TIMEOUT: Duration = Duration::from_secs(900);

/// One round: Quorum's backup, then the engine's tool, of the same data from the same member.
#[derive(Clone, Debug, Serialize)]
pub struct Round {
    pub quorum_seconds: f64,
    /// What Quorum's backup stored.
    pub stored_bytes: u64,
    /// Where Quorum's time went; `None` when its Job's pod was never seen ended (the operator
    /// deletes the Job once it has recorded the run).
    pub quorum_phases: Option<Phases>,
    pub tool_seconds: f64,
    /// The store taking as many bytes as Quorum's backup stored, uploaded by the same sink code
    /// from the bench's process (a debug build), nothing read from a database.
    pub store_seconds: f64,
}

/// Where one backup's time went, in whole seconds (the resolution of the timestamps: the API
/// server's for creations, the kubelet's for the container, the operator's for the record),
/// each phase from the end of the one before.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Phases {
    /// From the backup's creation until its Job's pod was created: the operator noticing it,
    /// recording the run, making the run's service account, Role and Job, and the Job
    /// controller making the pod.
    pub until_pod: i64,
    /// From the pod's creation until its container started: scheduling and starting it.
    pub pod_start: i64,
    /// The container's run: connecting, streaming the snapshot to the store, checking it.
    pub run: i64,
    /// From the container's end until the operator began recording the run (`completedAt`).
    pub recorded: i64,
}

impl Phases {
    /// The phases between the four instants, `None` when any is missing.
    fn between(
        created: Option<Timestamp>,
        pod_created: Option<Timestamp>,
        container: Option<(Timestamp, Timestamp)>,
        completed: Option<Timestamp>,
    ) -> Option<Phases> {
        let seconds = |from: Timestamp, to: Timestamp| to.as_second() - from.as_second();
        let (started, finished) = container?;
        let pod_created = pod_created?;
        Some(Phases {
            until_pod: seconds(created?, pod_created),
            pod_start: seconds(pod_created, started),
            run: seconds(started, finished),
            recorded: seconds(finished, completed?),
        })
    }
}

/// The backup scenario's result for one engine.
#[derive(Clone, Debug, Serialize)]
pub struct Backups {
    pub engine: Engine,
    /// The data loaded (values only): both figures are this over the time taken.
    pub data_bytes: u64,
    /// The member both read from.
    pub member: String,
    pub rounds: Vec<Round>,
    /// The operator's resident memory before the first backup, and its peak over all of them.
    pub operator_rss_before_bytes: u64,
    pub operator_peak_rss_bytes: u64,
    /// MySQL: a fourth member seeded from the same data, after the backups.
    pub seed: Option<Seed>,
}

impl Backups {
    /// The data over the median time Quorum's backups took, in MiB/s.
    pub fn quorum_mib_per_second(&self) -> f64 {
        self.mib_per_second(self.rounds.iter().map(|round| round.quorum_seconds))
    }

    /// The data over the median time the engine's tool took, in MiB/s.
    pub fn tool_mib_per_second(&self) -> f64 {
        self.mib_per_second(self.rounds.iter().map(|round| round.tool_seconds))
    }

    /// The data over the median time the store took the same bytes from the bench, in MiB/s.
    pub fn store_mib_per_second(&self) -> f64 {
        self.mib_per_second(self.rounds.iter().map(|round| round.store_seconds))
    }

    /// How much the operator's memory grew while it backed up, in MiB.
    pub fn operator_rss_growth_mib(&self) -> f64 {
        report::growth_mib(self.operator_rss_before_bytes, self.operator_peak_rss_bytes)
    }

    fn mib_per_second(&self, seconds: impl Iterator<Item = f64>) -> f64 {
        report::mib_per_second(self.data_bytes, median(seconds.collect()))
    }
}

/// The median (the lower middle of an even count); 0 with no value.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        count => values[(count - 1) / 2],
    }
}

/// Loads `data_mib` MiB into a cluster of its own and backs it up `rounds` times each way.
/// The cluster and the store are removed with the namespace when the operator is.
pub async fn measure(
    admin: &Client,
    installed: &Installed,
    engine: Engine,
    data_mib: usize,
    rounds: usize,
    ticks_per_second: u64,
) -> anyhow::Result<Backups> {
    let namespace = installed.clusters_namespace;
    // Test support asserts (it panics) on what it deploys: a panic is this deployment failing.
    let store = std::panic::AssertUnwindSafe(deploy_s3_store(admin, namespace))
        .catch_unwind()
        .await
        .map_err(|_| anyhow::anyhow!("deploying the S3-compatible store failed (its message is above)"))?;
    let clusters = installed.contender.clusters(admin, namespace);
    clusters
        .create(
            &PostParams::default(),
            &backup_cluster(installed, engine, data_mib)?,
        )
        .await
        .with_context(|| format!("creating {CLUSTER}"))?;
    wait::within(
        &format!("{CLUSTER} ready and settled"),
        Duration::from_secs(600),
        || async {
            let cluster = clusters.get(CLUSTER).await.map_err(|error| error.to_string())?;
            installed
                .contender
                .is_settled(&cluster)
                .then_some(())
                .ok_or_else(|| format!("{:?}", cluster.data["status"]["conditions"]))
        },
    )
    .await
    .map_err(anyhow::Error::msg)?;

    let client = DataClient::connect(admin, namespace, engine, CLUSTER, LOAD_TIMEOUT).await?;
    let data_bytes = load(&client, data_mib).await?;
    eprintln!("[bench] {}: {data_mib} MiB loaded into {CLUSTER}", engine.name());

    let pid = real_node::container_pid(&installed.pod, installed.container);
    let before = process::read(pid, ticks_per_second)?;
    process::reset_peak(pid)?;
    let mut measured = Vec::with_capacity(rounds);
    let mut member = String::new();
    for round in 0..rounds {
        let (quorum_seconds, status, quorum_phases) =
            quorum_backup(admin, namespace, engine, &store, round).await?;
        member = status
            .member
            .clone()
            .context("a backup that succeeded names no member")?;
        let stored_bytes = status
            .last_snapshot
            .as_ref()
            .map_or(0, |snapshot| snapshot.size_bytes.max(0) as u64);
        let tool_seconds = engine_tool(admin, namespace, engine, &member).await?;
        let store_seconds = store_intake(&store, stored_bytes).await?;
        eprintln!(
            "[bench] {}: round {round}: Quorum {quorum_seconds:.1} s ({stored_bytes} bytes stored; \
             {quorum_phases:?}), the engine's tool {tool_seconds:.1} s, from {member}; the store took \
             as many bytes in {store_seconds:.1} s",
            engine.name()
        );
        measured.push(Round {
            quorum_seconds,
            stored_bytes,
            quorum_phases,
            tool_seconds,
            store_seconds,
        });
    }
    let after = process::read(pid, ticks_per_second)?;
    anyhow::ensure!(
        after.started_ticks == before.started_ticks,
        "{}'s process restarted during the backups",
        installed.contender.name()
    );
    let seed = if engine == Engine::Mysql {
        eprintln!("[bench] mysql: a fourth member seeded from the {data_mib} MiB");
        Some(seeding::measure(admin, installed, CLUSTER, data_bytes, ticks_per_second).await?)
    } else {
        None
    };
    clusters
        .delete(CLUSTER, &DeleteParams::background())
        .await
        .with_context(|| format!("deleting {CLUSTER}"))?;
    Ok(Backups {
        engine,
        data_bytes,
        member,
        rounds: measured,
        operator_rss_before_bytes: before.rss_bytes,
        operator_peak_rss_bytes: after.peak_rss_bytes,
        seed,
    })
}

/// The benchmark's cluster of `engine`, with volumes for the data and memory for it where the
/// engine keeps it all in memory (Redis).
fn backup_cluster(installed: &Installed, engine: Engine, data_mib: usize) -> anyhow::Result<DynamicObject> {
    let mut cluster = installed.contender.cluster(CLUSTER)?;
    // Room for the data, its snapshots or binary logs, and the engine's own files.
    cluster.data["spec"]["storage"]["size"] = json!(format!("{}Mi", 3 * data_mib + 1024));
    if engine == Engine::Redis {
        cluster.data["spec"]["config"] = json!({
            "maxmemory": format!("{}mb", 2 * data_mib + 64),
            "maxmemory-policy": "noeviction",
        });
    }
    Ok(cluster)
}

/// Writes `data_mib` MiB of incompressible printable values through the cluster's client
/// Service; returns the bytes of values written.
async fn load(client: &DataClient, data_mib: usize) -> anyhow::Result<u64> {
    let values = (data_mib * 1024 * 1024).div_ceil(VALUE_BYTES);
    // Made as they are written, a few batches at a time: never the whole data set in memory.
    let mut noise = Noise::new(0x5eed);
    let mut batches = (0..values).step_by(LOAD_BATCH).map(|first| {
        (first..values.min(first + LOAD_BATCH))
            .map(|index| (format!("bench-data-{index:08}"), noise.text(VALUE_BYTES)))
            .collect::<Vec<_>>()
    });
    client.prepare_bulk().await?;
    // A cluster that just settled may not be behind its client Service yet (endpoints, the
    // node's packet rules): the first batch is retried until it lands, the rest are not.
    if let Some(first) = batches.next() {
        wait::within(
            "the first values written through the client Service",
            Duration::from_secs(60),
            || async {
                client
                    .write_batch(first.clone())
                    .await
                    .map_err(|error| error.to_string())
            },
        )
        .await
        .map_err(anyhow::Error::msg)?;
    }
    futures::stream::iter(batches)
        .map(|batch| client.write_batch(batch))
        .buffer_unordered(4)
        .try_collect::<()>()
        .await?;
    Ok((values * VALUE_BYTES) as u64)
}

/// Printable characters no compressor shrinks much (xorshift over 64 symbols).
struct Noise(u64);

impl Noise {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn text(&mut self, bytes: usize) -> String {
        const SYMBOLS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        (0..bytes)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                SYMBOLS[(self.0 & 63) as usize] as char
            })
            .collect()
    }
}

/// One backup resource, created and waited for until it succeeded; how long that took, its
/// status, and where the time went. The resource and what it stored are deleted after.
async fn quorum_backup(
    admin: &Client,
    namespace: &str,
    engine: Engine,
    store: &InClusterS3,
    round: usize,
) -> anyhow::Result<(f64, BackupRunStatus, Option<Phases>)> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        &format!("{}.quorum.dev", engine.name()),
        "v1alpha1",
        backup_kind(engine),
    ));
    let backups: Api<DynamicObject> = Api::namespaced_with(admin.clone(), namespace, &resource);
    let name = format!("{CLUSTER}-{round}");
    let mut backup = DynamicObject::new(&name, &resource);
    backup.data = json!({
        "spec": BackupSpec {
            cluster_name: CLUSTER.into(),
            destination: store.destination(STORE_PREFIX),
            schedule: None,
            retain: None,
            verify: false,
        }
    });
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    // The operator deletes the Job once it has recorded the run: its pod is read while the bench
    // waits, until it is seen ended.
    let job_pod: std::sync::Mutex<Option<Pod>> = std::sync::Mutex::new(None);
    let read_job_pod = |job: Option<String>| {
        let (pods, job_pod) = (&pods, &job_pod);
        async move {
            let seen_ended = job_pod
                .lock()
                .expect("not poisoned")
                .as_ref()
                .is_some_and(|pod| container_run(pod).is_some());
            let Some(job) = job.filter(|_| !seen_ended) else {
                return;
            };
            let selector = format!("batch.kubernetes.io/job-name={job}");
            if let Ok(listed) = pods.list(&ListParams::default().labels(&selector)).await
                && let Some(pod) = listed.items.into_iter().next()
            {
                *job_pod.lock().expect("not poisoned") = Some(pod);
            }
        }
    };
    let started = Instant::now();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .with_context(|| format!("creating the backup {name}"))?;
    let (status, created) = wait::within(
        &format!("the backup {name} to succeed"),
        BACKUP_TIMEOUT,
        || async {
            let backup = backups.get(&name).await.map_err(|error| error.to_string())?;
            let status: BackupRunStatus =
                serde_json::from_value(backup.data["status"].clone()).unwrap_or_default();
            read_job_pod(status.job.clone()).await;
            let created = backup.metadata.creation_timestamp.map(|time| time.0);
            match status.phase {
                Some(BackupPhase::Succeeded) => Ok(Ok((status, created))),
                Some(BackupPhase::Failed) => Ok(Err(status.message.unwrap_or_default())),
                phase => Err(format!("{phase:?}")),
            }
        },
    )
    .await
    .map_err(anyhow::Error::msg)?
    .map_err(|why| anyhow::anyhow!("the backup {name} failed: {why}"))?;
    let seconds = started.elapsed().as_secs_f64();
    // The run may have ended and been recorded between two reads: the Job is deleted only after
    // its run is recorded, so its pod is usually still there.
    read_job_pod(status.job.clone()).await;
    let phases = job_pod.into_inner().expect("not poisoned").and_then(|pod| {
        Phases::between(
            created,
            pod.metadata.creation_timestamp.as_ref().map(|time| time.0),
            container_run(&pod),
            status.completed_at.as_ref().map(|time| time.0),
        )
    });
    backups
        .delete(&name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting the backup {name}"))?;
    store.delete_all(STORE_PREFIX).await;
    Ok((seconds, status, phases))
}

/// When the Job pod's container started and ended, once it has.
fn container_run(pod: &Pod) -> Option<(Timestamp, Timestamp)> {
    let ended = quorum_core::backup::job::terminated_container(pod)?;
    Some((ended.started_at.as_ref()?.0, ended.finished_at.as_ref()?.0))
}

/// Uploads `bytes` of generated data to the store through the operators' sink, from the
/// bench's process; how long that took. What it stored is deleted after.
async fn store_intake(store: &InClusterS3, bytes: u64) -> anyhow::Result<f64> {
    const PREFIX: &str = "bench-intake";
    let sink = store.host_sink(PREFIX);
    let started = Instant::now();
    let stored = sink
        .upload("intake", Generated::new(bytes))
        .await
        .context("uploading generated data to the store")?;
    let seconds = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        stored.size == bytes,
        "the store took {} of {bytes} bytes",
        stored.size
    );
    store.delete_all(PREFIX).await;
    Ok(seconds)
}

/// `left` bytes read as one block of xorshift output over and over: the store neither
/// compresses nor deduplicates, and copying a block keeps making the data out of the figure.
struct Generated {
    left: u64,
    block: Vec<u8>,
    offset: usize,
}

impl Generated {
    const BLOCK: usize = 1024 * 1024;

    fn new(bytes: u64) -> Self {
        let mut state: u64 = 0x5eed;
        let block = (0..Self::BLOCK / 8)
            .flat_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()
            })
            .collect();
        Self {
            left: bytes,
            block,
            offset: 0,
        }
    }
}

impl tokio::io::AsyncRead for Generated {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buffer: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        let room = buffer
            .remaining()
            .min(this.block.len() - this.offset)
            .min(usize::try_from(this.left).unwrap_or(usize::MAX));
        buffer.put_slice(&this.block[this.offset..this.offset + room]);
        this.offset = (this.offset + room) % this.block.len();
        this.left -= room as u64;
        std::task::Poll::Ready(Ok(()))
    }
}

fn backup_kind(engine: Engine) -> &'static str {
    match engine {
        Engine::Etcd => "EtcdBackup",
        Engine::Mysql => "MySQLBackup",
        Engine::Redis => "RedisBackup",
        Engine::Mongodb => "MongoDBBackup",
    }
}

/// The engine's own tool inside `member`'s server container, reading the server there; how
/// long it took.
async fn engine_tool(admin: &Client, namespace: &str, engine: Engine, member: &str) -> anyhow::Result<f64> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let pod = pods.get(member).await?;
    let container = server_container(&pod)?;
    // Each server listens on its pod's address (etcd on every address).
    let address = pod
        .status
        .as_ref()
        .and_then(|status| status.pod_ip.clone())
        .context("a member pod without an address")?;
    let command: Vec<String> = match engine {
        // No shell in etcd's image: the file is overwritten by the next round and goes with the
        // volume.
        Engine::Etcd => [
            "etcdctl",
            &format!("--endpoints=http://{address}:2379"),
            "snapshot",
            "save",
            "/var/lib/etcd/bench-tool.db",
        ]
        .map(String::from)
        .to_vec(),
        Engine::Mysql => {
            let password = generated_password(admin, namespace, engine, CLUSTER).await?;
            vec![
                "sh".into(),
                "-c".into(),
                format!(
                    "MYSQL_PWD='{password}' mariadb-dump -uroot -h{address} --single-transaction \
                     --databases {} > /dev/null",
                    crate::failover::MYSQL_DATABASE
                ),
            ]
        }
        Engine::Redis => {
            let password = generated_password(admin, namespace, engine, CLUSTER).await?;
            vec![
                "sh".into(),
                "-c".into(),
                format!(
                    "REDISCLI_AUTH='{password}' redis-cli -h {address} --rdb /data/bench-tool.rdb > /dev/null \
                     && rm -f /data/bench-tool.rdb"
                ),
            ]
        }
        Engine::Mongodb => anyhow::bail!("no tool to compare MongoDB's simulator with"),
    };
    let namespace = namespace.to_string();
    let member = member.to_string();
    let started = Instant::now();
    let done = tokio::time::timeout(
        BACKUP_TIMEOUT,
        tokio::task::spawn_blocking(move || {
            let command: Vec<&str> = command.iter().map(String::as_str).collect();
            let mut args = vec!["exec", "-n", &namespace, &member, "-c", &container, "--"];
            args.extend(command);
            real_node::kubectl(&args)
        }),
    )
    .await
    .context("the engine's tool took too long")??;
    let seconds = started.elapsed().as_secs_f64();
    let (command, output) = done;
    anyhow::ensure!(
        output.status.success(),
        "{command}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_lower_middle_and_zero_without_values() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![3.0]), 3.0);
        assert_eq!(median(vec![5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.0);
    }

    #[test]
    fn throughput_is_the_data_over_the_median_time_and_growth_never_negative() {
        let backups = Backups {
            engine: Engine::Redis,
            data_bytes: 64 * 1024 * 1024,
            member: "bench-backup-1".into(),
            rounds: vec![
                Round {
                    quorum_seconds: 2.0,
                    stored_bytes: 1,
                    quorum_phases: None,
                    tool_seconds: 1.0,
                    store_seconds: 0.5,
                },
                Round {
                    quorum_seconds: 8.0,
                    stored_bytes: 1,
                    quorum_phases: None,
                    tool_seconds: 4.0,
                    store_seconds: 2.0,
                },
                Round {
                    quorum_seconds: 4.0,
                    stored_bytes: 1,
                    quorum_phases: None,
                    tool_seconds: 2.0,
                    store_seconds: 1.0,
                },
            ],
            operator_rss_before_bytes: 30 * 1024 * 1024,
            operator_peak_rss_bytes: 28 * 1024 * 1024,
            seed: None,
        };
        assert_eq!(backups.quorum_mib_per_second(), 16.0);
        assert_eq!(backups.tool_mib_per_second(), 32.0);
        assert_eq!(backups.store_mib_per_second(), 64.0);
        assert_eq!(backups.operator_rss_growth_mib(), 0.0);
    }

    #[test]
    fn phases_run_from_each_instant_to_the_next_and_need_all_of_them() {
        let at = |second: i64| Timestamp::from_second(second).unwrap();
        let instants = (
            Some(at(100)),
            Some(at(103)),
            Some((at(105), at(114))),
            Some(at(116)),
        );
        assert_eq!(
            Phases::between(instants.0, instants.1, instants.2, instants.3),
            Some(Phases {
                until_pod: 3,
                pod_start: 2,
                run: 9,
                recorded: 2,
            })
        );
        assert_eq!(Phases::between(instants.0, instants.1, None, instants.3), None);
        assert_eq!(Phases::between(None, instants.1, instants.2, instants.3), None);
    }

    #[tokio::test]
    async fn generated_data_is_exactly_as_long_as_asked_and_repeats_only_its_block() {
        use tokio::io::AsyncReadExt;
        let length = 2 * Generated::BLOCK + 12_345;
        let mut read = Vec::new();
        Generated::new(length as u64)
            .read_to_end(&mut read)
            .await
            .unwrap();
        assert_eq!(read.len(), length);
        let block = &read[..Generated::BLOCK];
        let distinct: std::collections::BTreeSet<&[u8]> = block.chunks(8).collect();
        assert_eq!(
            distinct.len(),
            Generated::BLOCK / 8,
            "8-byte words repeat within the block"
        );
        assert_eq!(&read[Generated::BLOCK..2 * Generated::BLOCK], block);
        assert_eq!(&read[2 * Generated::BLOCK..], &block[..12_345]);
    }

    #[test]
    fn noise_is_printable_and_hardly_repeats() {
        let text = Noise::new(1).text(4096);
        assert_eq!(text.len(), 4096);
        assert!(
            text.bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        );
        let distinct: std::collections::BTreeSet<&[u8]> = text.as_bytes().chunks(8).collect();
        assert_eq!(distinct.len(), 512, "8-byte chunks repeat");
    }
}
