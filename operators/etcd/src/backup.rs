//! Backups and restore, engine level: no Kubernetes API calls here.
//!
//! - Taking a backup: [`choose_snapshot_member`] picks the member to ask, [`snapshot_to_sink`]
//!   streams etcd's snapshot of it into a [`BackupSink`] under a name, through
//!   [`quorum_core::backup::pipe`]. Destinations, credentials and schedules are the shared
//!   ones of [`quorum_core::backup`].
//! - Restoring: [`restore_plan`] lays out the new cluster's membership, and
//!   [`restore_data_dir`] turns a downloaded snapshot into one member's data directory by
//!   running `etcdutl snapshot restore`, as the member pod's init container does.
//!
//! The guarantee that matters most: a snapshot is stored only when etcd's trailing SHA-256
//! verified it and the sink stored every byte; otherwise the upload is aborted and no object
//! that looks like a good backup appears.

use std::{
    collections::BTreeSet,
    ffi::OsString,
    io,
    path::{Path, PathBuf},
    time::Duration,
};

use quorum_core::{
    availability::{
        clients::MemberKey,
        health::Health,
        retry::{CallError, Idempotency},
    },
    backup::{BackupError, BackupSink, PipeError, PipeReader, StoredBackup, pipe, producer},
};

use crate::{
    admin::AdminError,
    crd::EtcdContent,
    observe::{ClusterView, EtcdClients, self_health},
    resolver::MemberResolver,
};

// ---------------------------------------------------------------------------------------------
// Taking a snapshot
// ---------------------------------------------------------------------------------------------

/// The member to ask for a snapshot: a started, Healthy voting member, a follower when there
/// is one (a snapshot reads the whole database, which the leader should not have to do on top
/// of leading), the lowest ordinal among equals. `None` when no member qualifies: an Unknown
/// or Unhealthy member is never asked, since its data may be behind.
pub fn choose_snapshot_member(view: &ClusterView) -> Option<usize> {
    view.members
        .iter()
        .filter(|member| !member.learner && member.started && member.observation.health.is_healthy())
        .min_by_key(|member| (member.leader, member.ordinal))
        .map(|member| member.ordinal)
}

/// How long a member may send nothing, while the sink is waiting for it, before the snapshot
/// is given up. Generous: etcd sends its first bytes as soon as it opened a read transaction,
/// and keeps sending; a member that stops that long is stuck or cut off. (A dead connection is
/// usually noticed sooner by the client's HTTP/2 keep-alive, which uses the call policy's
/// timeout.)
pub const SNAPSHOT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a snapshot was not stored. Whatever the variant, no object was created under the name.
#[derive(Debug, thiserror::Error)]
pub enum BackupStepError {
    /// The resolver knows no client URL for the member.
    #[error("no address for member {0}")]
    NoAddress(usize),
    /// The member did not answer the status call made before the snapshot (timeout, open
    /// circuit, or an error answer). Nothing was uploaded.
    #[error("member {ordinal} could not be asked for a snapshot: {source}")]
    Unreachable {
        ordinal: usize,
        #[source]
        source: CallError<AdminError>,
    },
    /// The member answered but reports itself unhealthy (no leader, alarms); its data may be
    /// behind or damaged, so it is not asked.
    #[error("member {ordinal} is not healthy: {reason}")]
    MemberUnhealthy { ordinal: usize, reason: String },
    /// etcd's snapshot stream failed, or its trailing checksum did not verify
    /// ([`AdminError::CorruptSnapshot`]). The upload was aborted.
    #[error("snapshot from member {ordinal}: {source}")]
    Snapshot {
        ordinal: usize,
        #[source]
        source: AdminError,
    },
    /// The member sent nothing for this long while the sink was waiting for data. The upload
    /// was aborted.
    #[error("snapshot from member {ordinal} stalled: nothing received for {stalled_for:?}")]
    Stalled { ordinal: usize, stalled_for: Duration },
    /// The sink refused or failed the upload (invalid name, unreachable store, ...).
    #[error("storing the snapshot: {source}")]
    Sink {
        #[source]
        source: BackupError,
    },
    /// The cluster's client TLS material (`spec.tls.clientSecretName`) could not be read, so
    /// its members cannot be reached. Nothing was asked.
    #[error("the client TLS material: {0}")]
    ClientTls(String),
}

impl BackupStepError {
    /// A short, bounded label for the error counter.
    pub fn metric_label(&self) -> &'static str {
        match self {
            BackupStepError::NoAddress(_) => "no_address",
            BackupStepError::Unreachable { .. } => "unreachable",
            BackupStepError::MemberUnhealthy { .. } => "member_unhealthy",
            BackupStepError::Snapshot {
                source: AdminError::CorruptSnapshot { .. },
                ..
            } => "corrupt_snapshot",
            BackupStepError::Snapshot { .. } => "snapshot",
            BackupStepError::Stalled { .. } => "stalled",
            BackupStepError::Sink { .. } => "sink",
            BackupStepError::ClientTls(_) => "client_tls",
        }
    }
}

/// Streams a snapshot of member `ordinal` into `sink` as `object_name`, returning what was
/// stored (size and SHA-256 of the stored bytes, which are etcd's snapshot with its trailing
/// checksum: what `etcdutl snapshot restore` expects).
///
/// The snapshot and the upload run concurrently through a small in-memory [`pipe`]
/// ([`PIPE_CAPACITY`](quorum_core::backup::PIPE_CAPACITY)), so memory stays bounded by the
/// sink's part buffers however large the database is.
///
/// Timeouts, and why the snapshot itself does not go through [`EtcdClients::call`]: `call`
/// bounds a whole attempt by the call policy's timeout (seconds), and retries reads; a
/// snapshot of a large database legitimately takes minutes, and a retry would restart a
/// stream the sink has already consumed part of. So the member is first asked for its status
/// through `call` (breaker, timeout and read retries apply: an unreachable member fails here
/// within the policy's bounds, before any upload starts), and the client that answered then
/// streams the snapshot, watched for progress instead of bounded in total: the snapshot fails
/// with [`BackupStepError::Stalled`] when the member sends nothing for
/// [`SNAPSHOT_STALL_TIMEOUT`] while the sink waits for data. (Time the sink spends on its own
/// requests is bounded by the sink's HTTP client, not by this.) The snapshot's own failures do
/// not count against the member's circuit breaker.
///
/// With `record_content` (a backup with restore drills), what the snapshot holds is recorded
/// too: every key and value at the revision the member reported just before the snapshot
/// began, read from the same member once the snapshot is stored
/// ([`EtcdAdmin::content_at`](crate::admin::EtcdAdmin::content_at)); it reads the whole
/// keyspace a second time, which a backup nobody drills does without. A member restored from
/// the snapshot holds the same at that revision. When that read fails the backup still
/// succeeds, with no content recorded (its drill then says so).
///
/// # Errors
/// [`BackupStepError::NoAddress`], [`BackupStepError::Unreachable`] and
/// [`BackupStepError::MemberUnhealthy`] before anything is uploaded;
/// [`BackupStepError::Snapshot`] (including a corrupt snapshot) and
/// [`BackupStepError::Stalled`] after which the upload was aborted;
/// [`BackupStepError::Sink`]. In every case no object named `object_name` was created.
pub async fn snapshot_to_sink(
    clients: &EtcdClients,
    cluster_key: &str,
    resolver: &MemberResolver,
    ordinal: usize,
    sink: &BackupSink,
    object_name: &str,
    record_content: bool,
) -> Result<(StoredBackup, Option<EtcdContent>), BackupStepError> {
    let endpoint = resolver
        .client_url(ordinal)
        .ok_or(BackupStepError::NoAddress(ordinal))?;
    let key = MemberKey::new(cluster_key, ordinal.to_string());
    let (admin, report) = clients
        .call(&key, &endpoint, "status", Idempotency::Read, |admin| async move {
            let report = admin.status().await?;
            Ok((admin, report))
        })
        .await
        .map_err(|source| BackupStepError::Unreachable { ordinal, source })?;
    if let Health::Unhealthy(reason) | Health::Unknown(reason) = self_health(&report) {
        return Err(BackupStepError::MemberUnhealthy { ordinal, reason });
    }
    let reader = admin.clone();
    let produce = producer(move |writer| Box::pin(async move { admin.snapshot(writer).await }));
    let upload = |reader: PipeReader| async move { sink.upload(object_name, reader).await };
    match pipe(produce, upload, SNAPSHOT_STALL_TIMEOUT).await {
        Ok((stored, _info)) if !record_content => Ok((stored, None)),
        Ok((stored, _info)) => {
            let content = match reader.content_at(report.revision).await {
                Ok(digest) => Some(EtcdContent {
                    revision: report.revision,
                    fingerprint: digest.fingerprint(),
                }),
                Err(error) => {
                    tracing::warn!(%error, object_name, "the snapshot's content could not be read: no drill can verify it");
                    None
                }
            };
            Ok((stored, content))
        }
        Err(PipeError::Producer(source)) => Err(BackupStepError::Snapshot { ordinal, source }),
        Err(PipeError::Stalled(stalled_for)) => Err(BackupStepError::Stalled { ordinal, stalled_for }),
        Err(PipeError::Consumer(source)) => Err(BackupStepError::Sink { source }),
    }
}

// ---------------------------------------------------------------------------------------------
// Restore
// ---------------------------------------------------------------------------------------------

/// One member of a cluster being restored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreMember {
    pub name: String,
    pub peer_url: String,
}

/// The membership a restored cluster starts with: every member restores the same snapshot
/// with the same `initial_cluster` and `token`, and its own name and peer URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestorePlan {
    /// `name=peer_url,...` in the order given: etcd's `--initial-cluster`.
    pub initial_cluster: String,
    /// The new cluster's token: it makes the cluster id differ from the original's, so a
    /// member of the old cluster can never join the restored one by mistake.
    pub token: String,
    pub members: Vec<RestoreMember>,
}

/// Why a restore plan cannot be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RestorePlanError {
    #[error("a restored cluster needs at least one member")]
    NoMembers,
    #[error("the cluster token is empty")]
    EmptyToken,
    #[error("member name {0:?} is empty or contains `=`, `,` or whitespace")]
    InvalidName(String),
    #[error("peer URL {0:?} of member {1} is not an http:// or https:// URL")]
    InvalidPeerUrl(String, String),
    #[error("member name {0} appears twice")]
    DuplicateName(String),
    #[error("peer URL {0} appears twice")]
    DuplicatePeerUrl(String),
}

/// The plan for restoring a snapshot into a new cluster of `members` (name, peer URL).
///
/// # Errors
/// [`RestorePlanError`] for an empty membership or token, a name or URL etcd would refuse or
/// misparse in `--initial-cluster`, or a duplicate.
pub fn restore_plan(members: &[(String, String)], token: &str) -> Result<RestorePlan, RestorePlanError> {
    if members.is_empty() {
        return Err(RestorePlanError::NoMembers);
    }
    if token.trim().is_empty() {
        return Err(RestorePlanError::EmptyToken);
    }
    let mut names = BTreeSet::new();
    let mut urls = BTreeSet::new();
    for (name, peer_url) in members {
        if name.is_empty() || name.contains(['=', ',']) || name.contains(char::is_whitespace) {
            return Err(RestorePlanError::InvalidName(name.clone()));
        }
        let valid_url = ["http://", "https://"].iter().any(|scheme| {
            peer_url.strip_prefix(scheme).is_some_and(|rest| {
                !rest.is_empty() && !rest.contains([',', '=']) && !rest.contains(char::is_whitespace)
            })
        });
        if !valid_url {
            return Err(RestorePlanError::InvalidPeerUrl(peer_url.clone(), name.clone()));
        }
        if !names.insert(name.as_str()) {
            return Err(RestorePlanError::DuplicateName(name.clone()));
        }
        if !urls.insert(peer_url.as_str()) {
            return Err(RestorePlanError::DuplicatePeerUrl(peer_url.clone()));
        }
    }
    Ok(RestorePlan {
        initial_cluster: members
            .iter()
            .map(|(name, peer_url)| format!("{name}={peer_url}"))
            .collect::<Vec<_>>()
            .join(","),
        token: token.to_string(),
        members: members
            .iter()
            .map(|(name, peer_url)| RestoreMember {
                name: name.clone(),
                peer_url: peer_url.clone(),
            })
            .collect(),
    })
}

/// Why a data directory could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The data directory has no parent to hold the staging directory next to it.
    #[error("data directory {0} has no parent directory")]
    NoParent(PathBuf),
    /// Preparing or moving the directories failed.
    #[error("{action} {path}: {source}")]
    Filesystem {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// `etcdutl` could not be started.
    #[error("starting {etcdutl}: {source}")]
    Spawn {
        etcdutl: PathBuf,
        #[source]
        source: io::Error,
    },
    /// `etcdutl snapshot restore` failed (a corrupt snapshot fails its hash check here).
    #[error("etcdutl snapshot restore exited with {status}: {stderr}")]
    Etcdutl {
        status: std::process::ExitStatus,
        stderr: String,
    },
}

/// The arguments of `etcdutl snapshot restore` for one member (without the program). Pure;
/// what an init container's command line is built from.
pub fn restore_arguments(
    snapshot: &Path,
    name: &str,
    initial_cluster: &str,
    token: &str,
    peer_url: &str,
    data_dir: &Path,
) -> Vec<OsString> {
    let mut arguments: Vec<OsString> = vec!["snapshot".into(), "restore".into(), snapshot.into()];
    for (flag, value) in [
        ("--name", name),
        ("--initial-cluster", initial_cluster),
        ("--initial-cluster-token", token),
        ("--initial-advertise-peer-urls", peer_url),
    ] {
        arguments.push(flag.into());
        arguments.push(value.into());
    }
    arguments.push("--data-dir".into());
    arguments.push(data_dir.into());
    arguments
}

/// Turns `snapshot` (a file holding etcd's snapshot with its trailing checksum, as
/// [`snapshot_to_sink`] stores it) into the data directory of member `name` of a new cluster,
/// by running `etcdutl snapshot restore`. `etcdutl` verifies the snapshot's checksum and
/// refuses a damaged one.
///
/// A function of plain arguments and no Kubernetes, because it is what the restoring member's
/// init container runs (the operator binary invoked with the member's own values); tests run
/// it directly.
///
/// Idempotent and crash-safe: it restores into `<data_dir>.restoring` next to `data_dir`
/// (removing a leftover from an interrupted attempt) and renames that into place only when
/// `etcdutl` succeeded, so a `data_dir` that exists is complete. When `data_dir` already
/// exists and is not empty, nothing is done: the member was restored before (and may have run
/// since); restoring again would throw its progress away.
///
/// # Errors
/// [`RestoreError::NoParent`], [`RestoreError::Filesystem`], [`RestoreError::Spawn`],
/// [`RestoreError::Etcdutl`] with the tail of its standard error. `data_dir` is untouched.
pub async fn restore_data_dir(
    etcdutl: &Path,
    snapshot: &Path,
    name: &str,
    initial_cluster: &str,
    token: &str,
    peer_url: &str,
    data_dir: &Path,
) -> Result<(), RestoreError> {
    let filesystem = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| RestoreError::Filesystem { action, path, source }
    };
    if directory_has_entries(data_dir)
        .await
        .map_err(filesystem("reading", data_dir))?
    {
        tracing::info!(data_dir = %data_dir.display(), "data directory exists; not restoring again");
        return Ok(());
    }
    let parent = data_dir
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .ok_or_else(|| RestoreError::NoParent(data_dir.to_path_buf()))?;
    tokio::fs::create_dir_all(parent)
        .await
        .map_err(filesystem("creating", parent))?;
    let mut staging_name = data_dir.file_name().map(OsString::from).unwrap_or_default();
    staging_name.push(".restoring");
    let staging = parent.join(staging_name);
    match tokio::fs::remove_dir_all(&staging).await {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(filesystem("removing", &staging)(error)),
    }
    let output = tokio::process::Command::new(etcdutl)
        .args(restore_arguments(
            snapshot,
            name,
            initial_cluster,
            token,
            peer_url,
            &staging,
        ))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| RestoreError::Spawn {
            etcdutl: etcdutl.to_path_buf(),
            source,
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: String = stderr
            .chars()
            .rev()
            .take(2000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return Err(RestoreError::Etcdutl {
            status: output.status,
            stderr: tail.trim().to_string(),
        });
    }
    // An empty directory at `data_dir` (a fresh mount point) would make the rename fail.
    match tokio::fs::remove_dir(data_dir).await {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(filesystem("removing the empty", data_dir)(error)),
    }
    tokio::fs::rename(&staging, data_dir)
        .await
        .map_err(filesystem("moving the restored directory to", data_dir))?;
    Ok(())
}

/// Whether `directory` exists and holds anything.
async fn directory_has_entries(directory: &Path) -> io::Result<bool> {
    match tokio::fs::read_dir(directory).await {
        Ok(mut entries) => Ok(entries.next_entry().await?.is_some()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{admin::MemberReport, decide::MemberFact};
    use quorum_core::availability::health::Observation;

    // -- member choice -------------------------------------------------------------------

    fn member(ordinal: usize, health: Health, leader: bool, learner: bool) -> MemberFact {
        MemberFact {
            ordinal,
            id: ordinal as u64 + 100,
            learner,
            started: true,
            leader,
            version: Some("3.6.16".to_string()),
            raft_index: Some(10),
            observation: Observation::new(format!("demo-{ordinal}"), health, !learner),
            unhealthy_for: None,
        }
    }

    fn view(members: Vec<MemberFact>) -> ClusterView {
        ClusterView {
            membership: Some(Vec::new()),
            reports: BTreeMap::new(),
            members,
            heard_failing_at: BTreeMap::new(),
        }
    }

    #[test]
    fn a_healthy_follower_serves_the_snapshot() {
        let chosen = choose_snapshot_member(&view(vec![
            member(0, Health::Healthy, true, false),
            member(1, Health::Healthy, false, false),
            member(2, Health::Healthy, false, false),
        ]));
        assert_eq!(chosen, Some(1), "the lowest-ordinal follower, not the leader");
    }

    #[test]
    fn the_leader_serves_when_no_follower_is_healthy() {
        let chosen = choose_snapshot_member(&view(vec![
            member(0, Health::Unknown("unreachable".into()), false, false),
            member(1, Health::Healthy, true, false),
            member(2, Health::Unhealthy("no leader".into()), false, false),
        ]));
        assert_eq!(chosen, Some(1));
    }

    #[test]
    fn learners_unstarted_and_not_healthy_members_never_serve() {
        let mut unstarted = member(2, Health::Healthy, false, false);
        unstarted.started = false;
        let chosen = choose_snapshot_member(&view(vec![
            member(0, Health::Unknown("unreachable".into()), true, false),
            member(1, Health::Healthy, false, true),
            unstarted,
            member(3, Health::Unhealthy("alarm".into()), false, false),
        ]));
        assert_eq!(chosen, None);
        assert_eq!(choose_snapshot_member(&view(Vec::new())), None);
    }

    // -- restore -------------------------------------------------------------------------

    fn members(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(name, url)| (name.to_string(), url.to_string()))
            .collect()
    }

    #[test]
    fn a_restore_plan_lists_every_member_in_order() {
        let plan = restore_plan(
            &members(&[
                ("main-0", "http://main-0.main-peer.db.svc:2380"),
                ("main-1", "http://main-1.main-peer.db.svc:2380"),
                ("main-2", "https://main-2.main-peer.db.svc:2380"),
            ]),
            "main-restore-1",
        )
        .expect("plan");
        assert_eq!(
            plan.initial_cluster,
            "main-0=http://main-0.main-peer.db.svc:2380,main-1=http://main-1.main-peer.db.svc:2380,\
             main-2=https://main-2.main-peer.db.svc:2380"
        );
        assert_eq!(plan.token, "main-restore-1");
        assert_eq!(plan.members.len(), 3);
        assert_eq!(plan.members[2].name, "main-2");
        assert_eq!(plan.members[2].peer_url, "https://main-2.main-peer.db.svc:2380");
    }

    #[test]
    fn a_restore_plan_refuses_what_etcd_would_misread() {
        let url = "http://10.0.0.1:2380";
        assert_eq!(restore_plan(&[], "t"), Err(RestorePlanError::NoMembers));
        assert_eq!(
            restore_plan(&members(&[("a", url)]), " "),
            Err(RestorePlanError::EmptyToken)
        );
        for name in ["", "a=b", "a,b", "a b"] {
            assert_eq!(
                restore_plan(&members(&[(name, url)]), "t"),
                Err(RestorePlanError::InvalidName(name.to_string()))
            );
        }
        for bad_url in ["10.0.0.1:2380", "http://", "ftp://x:2380", "http://a,b"] {
            assert!(matches!(
                restore_plan(&members(&[("a", bad_url)]), "t"),
                Err(RestorePlanError::InvalidPeerUrl(..))
            ));
        }
        assert_eq!(
            restore_plan(&members(&[("a", url), ("a", "http://10.0.0.2:2380")]), "t"),
            Err(RestorePlanError::DuplicateName("a".to_string()))
        );
        assert_eq!(
            restore_plan(&members(&[("a", url), ("b", url)]), "t"),
            Err(RestorePlanError::DuplicatePeerUrl(url.to_string()))
        );
    }

    #[test]
    fn restore_arguments_are_etcdutl_snapshot_restore() {
        let arguments = restore_arguments(
            Path::new("/restore/snapshot.db"),
            "main-1",
            "main-0=http://a:2380,main-1=http://b:2380",
            "token",
            "http://b:2380",
            Path::new("/var/lib/etcd/data"),
        );
        let arguments: Vec<&str> = arguments.iter().map(|a| a.to_str().expect("utf-8")).collect();
        assert_eq!(
            arguments,
            [
                "snapshot",
                "restore",
                "/restore/snapshot.db",
                "--name",
                "main-1",
                "--initial-cluster",
                "main-0=http://a:2380,main-1=http://b:2380",
                "--initial-cluster-token",
                "token",
                "--initial-advertise-peer-urls",
                "http://b:2380",
                "--data-dir",
                "/var/lib/etcd/data",
            ]
        );
    }

    fn scratch(label: &str) -> PathBuf {
        let directory = std::env::temp_dir().join(format!(
            "quorum-backup-unit-{label}-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&directory).expect("scratch directory");
        directory
    }

    fn rand_suffix() -> u64 {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(std::time::SystemTime::now())
    }

    #[tokio::test]
    async fn an_existing_data_directory_is_left_alone() {
        let directory = scratch("existing");
        let data_dir = directory.join("data");
        std::fs::create_dir_all(data_dir.join("member")).expect("member dir");
        // The program does not exist: reaching it would fail.
        restore_data_dir(
            Path::new("/nonexistent/etcdutl"),
            Path::new("/nonexistent/snapshot.db"),
            "a",
            "a=http://127.0.0.1:2380",
            "t",
            "http://127.0.0.1:2380",
            &data_dir,
        )
        .await
        .expect("an existing member is not restored again");
        assert!(data_dir.join("member").exists());
        std::fs::remove_dir_all(&directory).ok();
    }

    #[tokio::test]
    async fn a_failed_restore_leaves_no_data_directory() {
        let directory = scratch("failed");
        let data_dir = directory.join("data");
        let error = restore_data_dir(
            Path::new("/bin/false"),
            Path::new("/nonexistent/snapshot.db"),
            "a",
            "a=http://127.0.0.1:2380",
            "t",
            "http://127.0.0.1:2380",
            &data_dir,
        )
        .await
        .expect_err("false fails");
        assert!(matches!(error, RestoreError::Etcdutl { .. }), "{error}");
        assert!(!data_dir.exists());
        std::fs::remove_dir_all(&directory).ok();
    }

    #[test]
    fn self_reports_with_errors_are_not_healthy() {
        // `snapshot_to_sink` refuses members whose own report is not healthy.
        let report = MemberReport {
            member_id: 1,
            cluster_id: 2,
            leader_id: 1,
            version: "3.6.16".to_string(),
            raft_index: 10,
            raft_applied_index: 10,
            errors: vec!["NOSPACE".to_string()],
            learner: false,
            db_size: 1,
            revision: 5,
        };
        assert!(!self_health(&report).is_healthy());
    }
}
