//! Backups and restore, engine level: no Kubernetes API calls here.
//!
//! - Taking a backup: [`choose_snapshot_member`] picks the member to ask, [`snapshot_to_sink`]
//!   streams etcd's snapshot of it into a [`BackupSink`] under [`object_name`]. The reconciler
//!   reads the destination's credentials Secret and maps the destination with
//!   [`backup_target`].
//! - Scheduling: [`next_due`] reads a five-field cron schedule (UTC); [`is_stale`] decides the
//!   cluster's `BackupStale` condition.
//! - Restoring: [`restore_plan`] lays out the new cluster's membership, and
//!   [`restore_data_dir`] turns a downloaded snapshot into one member's data directory by
//!   running `etcdutl snapshot restore`, as the member pod's init container does.
//!
//! The guarantee that matters most: a snapshot is stored only when etcd's trailing SHA-256
//! verified it and the sink stored every byte; otherwise the upload is aborted and no object
//! that looks like a good backup appears.

use std::{
    collections::{BTreeMap, BTreeSet},
    ffi::OsString,
    fmt,
    future::Future,
    io,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use jiff::{Timestamp, tz::TimeZone};
use k8s_openapi::ByteString;
use quorum_core::{
    availability::{
        clients::MemberKey,
        health::Health,
        retry::{CallError, Idempotency},
    },
    backup::{BackupError, BackupSink, BackupTarget, S3Target, StoredBackup},
};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

use crate::{
    admin::{AdminError, SnapshotInfo},
    crd::BackupDestination,
    observe::{ClusterView, EtcdClients, self_health},
    resolver::MemberResolver,
};

// ---------------------------------------------------------------------------------------------
// Destination
// ---------------------------------------------------------------------------------------------

/// The key of the access key id in an S3 credentials Secret.
pub const ACCESS_KEY_ID_KEY: &str = "accessKeyId";
/// The key of the secret access key in an S3 credentials Secret.
pub const SECRET_ACCESS_KEY_KEY: &str = "secretAccessKey";

/// S3 credentials, as read from the destination's Secret. `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl fmt::Debug for S3Credentials {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

impl S3Credentials {
    /// Reads `accessKeyId` and `secretAccessKey` from a Secret's `data`. Surrounding whitespace
    /// (a trailing newline from `kubectl create secret --from-file`) is trimmed.
    ///
    /// # Errors
    /// [`DestinationError::InvalidCredentials`] naming `secret_name` when a key is missing,
    /// empty or not UTF-8. The message never contains the secret's value.
    pub fn from_secret_data(
        secret_name: &str,
        data: &BTreeMap<String, ByteString>,
    ) -> Result<Self, DestinationError> {
        let read = |key: &'static str| {
            let invalid = |reason: &'static str| DestinationError::InvalidCredentials {
                secret: secret_name.to_string(),
                key,
                reason,
            };
            let bytes = data.get(key).ok_or_else(|| invalid("missing"))?;
            let text = std::str::from_utf8(&bytes.0).map_err(|_| invalid("not UTF-8"))?;
            let text = text.trim();
            if text.is_empty() {
                return Err(invalid("empty"));
            }
            Ok(text.to_string())
        };
        Ok(Self {
            access_key_id: read(ACCESS_KEY_ID_KEY)?,
            secret_access_key: read(SECRET_ACCESS_KEY_KEY)?,
        })
    }
}

/// Why a [`BackupDestination`] cannot become a sink target. Permanent until the resource (or
/// its Secret) changes: the reconciler reports it and waits rather than retrying.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DestinationError {
    #[error("the destination names neither s3 nor filesystem")]
    NoDestination,
    #[error("the destination names both s3 and filesystem; choose one")]
    BothDestinations,
    #[error("the s3 destination needs the credentials of Secret {secret}, and none were given")]
    MissingCredentials { secret: String },
    #[error("Secret {secret}: {key} is {reason}")]
    InvalidCredentials {
        secret: String,
        key: &'static str,
        reason: &'static str,
    },
}

/// Maps a resource's [`BackupDestination`] to a sink target. Pure: the reconciler reads the
/// Secret named by `s3.credentialsSecretName` (see [`S3Credentials::from_secret_data`]) and
/// passes the result; a filesystem destination ignores `credentials`.
///
/// `allow_http` is the operator's setting, not the resource's: whether an `http://` S3
/// endpoint may be used (credentials and data would cross the network in clear text). The sink
/// refuses such an endpoint when it is off.
///
/// # Errors
/// [`DestinationError::NoDestination`], [`DestinationError::BothDestinations`],
/// [`DestinationError::MissingCredentials`] for an S3 destination without credentials.
pub fn backup_target(
    destination: &BackupDestination,
    credentials: Option<S3Credentials>,
    allow_http: bool,
) -> Result<BackupTarget, DestinationError> {
    match (&destination.s3, &destination.filesystem) {
        (None, None) => Err(DestinationError::NoDestination),
        (Some(_), Some(_)) => Err(DestinationError::BothDestinations),
        (None, Some(filesystem)) => Ok(BackupTarget::Filesystem {
            directory: PathBuf::from(&filesystem.path),
        }),
        (Some(s3), None) => {
            let credentials = credentials.ok_or_else(|| DestinationError::MissingCredentials {
                secret: s3.credentials_secret_name.clone(),
            })?;
            Ok(BackupTarget::S3(S3Target {
                bucket: s3.bucket.clone(),
                prefix: s3.prefix.clone(),
                endpoint: s3.endpoint.clone(),
                region: s3.region.clone(),
                access_key_id: credentials.access_key_id,
                secret_access_key: credentials.secret_access_key,
                allow_http,
            }))
        }
    }
}

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

/// How much of the snapshot may sit between etcd and the sink. Small: the sink buffers its own
/// multipart parts, this only decouples the two.
const PIPE_CAPACITY: usize = 256 * 1024;

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
        }
    }
}

/// Streams a snapshot of member `ordinal` into `sink` as `object_name`, returning what was
/// stored (size and SHA-256 of the stored bytes, which are etcd's snapshot with its trailing
/// checksum: what `etcdutl snapshot restore` expects).
///
/// The snapshot and the upload run concurrently through a small in-memory pipe (256 KiB), so
/// memory stays bounded by the sink's part buffers however large the database is.
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
) -> Result<StoredBackup, BackupStepError> {
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
    let produce = producer(move |writer| Box::pin(async move { admin.snapshot(writer).await }));
    let upload = |reader: PipeReader| async move { sink.upload(object_name, reader).await };
    match pipe(produce, upload, SNAPSHOT_STALL_TIMEOUT).await {
        Ok((stored, _info)) => Ok(stored),
        Err(PipeError::Producer(source)) => Err(BackupStepError::Snapshot { ordinal, source }),
        Err(PipeError::Stalled(stalled_for)) => Err(BackupStepError::Stalled { ordinal, stalled_for }),
        Err(PipeError::Consumer(source)) => Err(BackupStepError::Sink { source }),
    }
}

/// The name of a snapshot of `cluster` taken at `at`: `<cluster>/<cluster>-YYYYMMDDTHHMMSSZ.db`
/// (UTC, whole seconds). Deterministic, and names of one cluster sort by time. Two snapshots
/// within one second share a name; the later replaces the earlier.
pub fn object_name(cluster: &str, at: Timestamp) -> String {
    format!("{cluster}/{cluster}-{}.db", at.strftime("%Y%m%dT%H%M%SZ"))
}

/// The snapshot producer's future: it writes into the pipe it was lent.
type Produce<'w> = Pin<Box<dyn Future<Output = Result<SnapshotInfo, AdminError>> + Send + 'w>>;

/// Gives a producer closure the higher-ranked signature [`pipe`] needs (closure signatures
/// are only inferred that way where the bound is in sight).
fn producer<F>(produce: F) -> F
where
    F: for<'w> FnOnce(&'w mut PipeWriter) -> Produce<'w>,
{
    produce
}

/// How the pipe between a producer and a consumer failed.
#[derive(Debug)]
enum PipeError<E> {
    /// The producer failed (its bytes, if any, were refused by the consumer at the end).
    Producer(AdminError),
    /// The producer wrote nothing for this long while not blocked by the consumer.
    Stalled(Duration),
    /// The consumer failed on its own.
    Consumer(E),
}

/// Runs `produce` (writing into a pipe) and `consume` (reading it) concurrently.
///
/// The consumer sees the end of the stream only after the producer succeeded; when the
/// producer fails or stalls, the consumer's next read past the buffered bytes is an error, so
/// a consumer that stores what it reads (a sink upload) aborts instead of storing a partial or
/// unverified stream. When the consumer fails first, the producer is dropped.
async fn pipe<P, C, CFut, T, E>(
    produce: P,
    consume: C,
    stall_timeout: Duration,
) -> Result<(T, SnapshotInfo), PipeError<E>>
where
    P: for<'w> FnOnce(&'w mut PipeWriter) -> Produce<'w>,
    C: FnOnce(PipeReader) -> CFut,
    CFut: Future<Output = Result<T, E>>,
{
    let (write_half, read_half) = tokio::io::duplex(PIPE_CAPACITY);
    let state = Arc::new(PipeState::default());
    let mut writer = PipeWriter {
        inner: write_half,
        state: state.clone(),
    };
    let reader = PipeReader {
        inner: read_half,
        state: state.clone(),
    };
    let producing = async {
        let result = tokio::select! {
            result = produce(&mut writer) => result.map_err(ProducerFailure::Admin),
            stalled_for = watch_progress(&state, stall_timeout) => Err(ProducerFailure::Stalled(stalled_for)),
        };
        // The outcome must be known before the reader can see the end of the stream: set it,
        // then close the pipe. Both happen in this poll, so the reader cannot run between.
        state.conclude(result.is_ok());
        drop(writer);
        result
    };
    let consuming = consume(reader);
    tokio::pin!(producing, consuming);
    let mut produced = None;
    let consumed = loop {
        tokio::select! {
            result = &mut producing, if produced.is_none() => produced = Some(result),
            result = &mut consuming => break result,
        }
    };
    let (produced, consumed) = match (produced, consumed) {
        (Some(produced), consumed) => (produced, consumed),
        // The consumer failed first: its error is the cause, and the producer (which would
        // only fail writing into a closed pipe, or wait on the member) is dropped.
        (None, Err(error)) => return Err(PipeError::Consumer(error)),
        // A consumer only sees a clean end after the producer concluded, so this is ready.
        (None, Ok(value)) => (producing.await, Ok(value)),
    };
    match (produced, consumed) {
        (Ok(info), Ok(value)) => Ok((value, info)),
        // The producer's failure explains the consumer's (which saw a failed stream).
        (Err(ProducerFailure::Admin(error)), _) => Err(PipeError::Producer(error)),
        (Err(ProducerFailure::Stalled(stalled_for)), _) => Err(PipeError::Stalled(stalled_for)),
        (Ok(_), Err(error)) => Err(PipeError::Consumer(error)),
    }
}

enum ProducerFailure {
    Admin(AdminError),
    Stalled(Duration),
}

/// What the two ends of the pipe share.
#[derive(Default)]
struct PipeState {
    /// Bytes the producer has written.
    written: AtomicU64,
    /// The producer's last write found the pipe full: it waits for the consumer, not the
    /// consumer for it.
    writer_blocked: AtomicBool,
    /// 0 while the producer runs, then [`OUTCOME_SUCCEEDED`] or [`OUTCOME_FAILED`].
    outcome: AtomicU8,
}

const OUTCOME_SUCCEEDED: u8 = 1;
const OUTCOME_FAILED: u8 = 2;

impl PipeState {
    fn conclude(&self, succeeded: bool) {
        let outcome = if succeeded {
            OUTCOME_SUCCEEDED
        } else {
            OUTCOME_FAILED
        };
        self.outcome.store(outcome, Ordering::SeqCst);
    }
}

/// Resolves when the producer has written nothing for `stall_timeout` while not blocked on a
/// full pipe, with how long it was silent. Checked four times per timeout, so it fires within
/// 1.25 times the timeout.
async fn watch_progress(state: &PipeState, stall_timeout: Duration) -> Duration {
    let tick = (stall_timeout / 4).max(Duration::from_millis(1));
    let mut last_written = state.written.load(Ordering::SeqCst);
    let mut last_active = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(tick).await;
        let written = state.written.load(Ordering::SeqCst);
        if written != last_written || state.writer_blocked.load(Ordering::SeqCst) {
            last_written = written;
            last_active = tokio::time::Instant::now();
        } else if last_active.elapsed() >= stall_timeout {
            return last_active.elapsed();
        }
    }
}

/// The producer's end of the pipe: counts progress for the stall watch.
struct PipeWriter {
    inner: DuplexStream,
    state: Arc<PipeState>,
}

impl AsyncWrite for PipeWriter {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(context, bytes);
        match &poll {
            Poll::Ready(Ok(written)) => {
                this.state.written.fetch_add(*written as u64, Ordering::SeqCst);
                this.state.writer_blocked.store(false, Ordering::SeqCst);
            }
            Poll::Ready(Err(_)) => this.state.writer_blocked.store(false, Ordering::SeqCst),
            Poll::Pending => this.state.writer_blocked.store(true, Ordering::SeqCst),
        }
        poll
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(context)
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(context)
    }
}

/// The consumer's end of the pipe: the end of the stream is an error unless the producer
/// succeeded.
struct PipeReader {
    inner: DuplexStream,
    state: Arc<PipeState>,
}

impl AsyncRead for PipeReader {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buffer.filled().len();
        match Pin::new(&mut this.inner).poll_read(context, buffer) {
            Poll::Ready(Ok(())) if buffer.filled().len() == before && buffer.remaining() > 0 => {
                match this.state.outcome.load(Ordering::SeqCst) {
                    OUTCOME_SUCCEEDED => Poll::Ready(Ok(())),
                    OUTCOME_FAILED => Poll::Ready(Err(io::Error::other(
                        "the snapshot failed; its bytes must not be stored",
                    ))),
                    _ => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the snapshot ended without a verdict",
                    ))),
                }
            }
            other => other,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Schedule
// ---------------------------------------------------------------------------------------------

/// A schedule that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    /// Not a five-field cron expression croner accepts.
    #[error("invalid schedule {schedule:?}: {reason}")]
    Invalid { schedule: String, reason: String },
    /// A valid expression that never fires after the given time (`0 0 30 2 *`).
    #[error("schedule {schedule:?} never fires after {after}")]
    NeverFires { schedule: String, after: Timestamp },
}

/// The first time strictly after `after` that the five-field cron `schedule` (minute hour
/// day-of-month month day-of-week, UTC) fires. Vixie-cron semantics: when both day fields are
/// restricted, either matching suffices. Names (`MON`, `JAN`) and `L`, `W`, `#` are accepted;
/// seconds, years and `@` nicknames are not, matching the CRD's five-field rule.
///
/// # Errors
/// [`ScheduleError::Invalid`] for anything but five valid fields; [`ScheduleError::NeverFires`]
/// for a schedule with no occurrence (croner gives up after searching years ahead).
pub fn next_due(schedule: &str, after: Timestamp) -> Result<Timestamp, ScheduleError> {
    let invalid = |reason: String| ScheduleError::Invalid {
        schedule: schedule.to_string(),
        reason,
    };
    let fields = schedule.split_whitespace().count();
    if fields != 5 {
        return Err(invalid(format!("{fields} fields, expected 5")));
    }
    if schedule.contains('@') {
        return Err(invalid("nicknames such as @daily are not accepted".to_string()));
    }
    let cron = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(schedule)
        .map_err(|error| invalid(error.to_string()))?;
    let start = after.to_zoned(TimeZone::UTC);
    cron.find_next_occurrence(&start, false)
        .map(|next| next.timestamp())
        .map_err(|_| ScheduleError::NeverFires {
            schedule: schedule.to_string(),
            after,
        })
}

/// Whether the newest good backup is older than `max_age_minutes` at `now`: the cluster's
/// `BackupStale` condition. No backup at all (`None`) is stale: the cluster is not protected. A
/// reconciler that wants a grace period for a new cluster passes its creation time instead of
/// `None`. A completion time in the future (clock skew) is not stale.
pub fn is_stale(last_completed: Option<Timestamp>, max_age_minutes: u32, now: Timestamp) -> bool {
    let Some(last_completed) = last_completed else {
        return true;
    };
    let max_age = jiff::SignedDuration::from_mins(i64::from(max_age_minutes));
    now.duration_since(last_completed) > max_age
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
    use super::*;
    use crate::{
        admin::MemberReport,
        crd::{FilesystemDestination, S3Destination},
        decide::MemberFact,
    };
    use quorum_core::availability::health::Observation;

    // -- destination ---------------------------------------------------------------------

    fn s3_destination() -> BackupDestination {
        BackupDestination {
            s3: Some(S3Destination {
                bucket: "backups".to_string(),
                prefix: Some("etcd/prod".to_string()),
                endpoint: Some("https://minio.example:9000".to_string()),
                region: Some("eu-west-1".to_string()),
                credentials_secret_name: "backup-credentials".to_string(),
            }),
            filesystem: None,
        }
    }

    fn credentials() -> S3Credentials {
        S3Credentials {
            access_key_id: "AKIA".to_string(),
            secret_access_key: "very-secret".to_string(),
        }
    }

    #[test]
    fn an_s3_destination_maps_every_field_and_the_credentials() {
        let target = backup_target(&s3_destination(), Some(credentials()), false).expect("target");
        assert_eq!(
            target,
            BackupTarget::S3(S3Target {
                bucket: "backups".to_string(),
                prefix: Some("etcd/prod".to_string()),
                endpoint: Some("https://minio.example:9000".to_string()),
                region: Some("eu-west-1".to_string()),
                access_key_id: "AKIA".to_string(),
                secret_access_key: "very-secret".to_string(),
                allow_http: false,
            })
        );
        let BackupTarget::S3(allowed) =
            backup_target(&s3_destination(), Some(credentials()), true).expect("target")
        else {
            panic!("an S3 destination maps to an S3 target");
        };
        assert!(allowed.allow_http, "plain HTTP is the operator's setting");
    }

    #[test]
    fn an_s3_destination_without_credentials_names_the_secret() {
        assert_eq!(
            backup_target(&s3_destination(), None, false),
            Err(DestinationError::MissingCredentials {
                secret: "backup-credentials".to_string()
            })
        );
    }

    #[test]
    fn a_filesystem_destination_is_a_directory_and_needs_no_credentials() {
        let destination = BackupDestination {
            s3: None,
            filesystem: Some(FilesystemDestination {
                path: "/backups/etcd".to_string(),
            }),
        };
        assert_eq!(
            backup_target(&destination, None, false),
            Ok(BackupTarget::Filesystem {
                directory: PathBuf::from("/backups/etcd")
            })
        );
    }

    #[test]
    fn a_destination_names_exactly_one_store() {
        let neither = BackupDestination {
            s3: None,
            filesystem: None,
        };
        assert_eq!(
            backup_target(&neither, Some(credentials()), false),
            Err(DestinationError::NoDestination)
        );
        let both = BackupDestination {
            filesystem: Some(FilesystemDestination {
                path: "/backups".to_string(),
            }),
            ..s3_destination()
        };
        assert_eq!(
            backup_target(&both, Some(credentials()), false),
            Err(DestinationError::BothDestinations)
        );
    }

    #[test]
    fn credentials_come_from_secret_data_and_never_print_the_secret() {
        let data: BTreeMap<String, ByteString> = [
            (ACCESS_KEY_ID_KEY.to_string(), ByteString(b"AKIA\n".to_vec())),
            (
                SECRET_ACCESS_KEY_KEY.to_string(),
                ByteString(b"very-secret".to_vec()),
            ),
        ]
        .into();
        let read = S3Credentials::from_secret_data("creds", &data).expect("credentials");
        assert_eq!(read, credentials());
        let printed = format!("{read:?}");
        assert!(!printed.contains("very-secret"), "{printed}");

        let mut missing = data.clone();
        missing.remove(SECRET_ACCESS_KEY_KEY);
        assert_eq!(
            S3Credentials::from_secret_data("creds", &missing),
            Err(DestinationError::InvalidCredentials {
                secret: "creds".to_string(),
                key: SECRET_ACCESS_KEY_KEY,
                reason: "missing"
            })
        );
        let mut empty = data;
        empty.insert(ACCESS_KEY_ID_KEY.to_string(), ByteString(b" \n".to_vec()));
        let error = S3Credentials::from_secret_data("creds", &empty).expect_err("empty key id");
        assert!(!error.to_string().contains("very-secret"));
    }

    // -- member choice -------------------------------------------------------------------

    fn member(ordinal: usize, health: Health, leader: bool, learner: bool) -> MemberFact {
        MemberFact {
            ordinal,
            id: ordinal as u64 + 100,
            learner,
            started: true,
            leader,
            version: Some("3.6.16".to_string()),
            observation: Observation::new(format!("demo-{ordinal}"), health, !learner),
            unhealthy_for: None,
        }
    }

    fn view(members: Vec<MemberFact>) -> ClusterView {
        ClusterView {
            membership: Some(Vec::new()),
            reports: BTreeMap::new(),
            members,
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

    // -- naming --------------------------------------------------------------------------

    #[test]
    fn object_names_are_per_cluster_and_sort_by_time() {
        let at: Timestamp = "2026-11-21T15:30:00.75Z".parse().expect("timestamp");
        assert_eq!(object_name("main", at), "main/main-20261121T153000Z.db");
        let later: Timestamp = "2026-11-21T15:30:01Z".parse().expect("timestamp");
        let next_year: Timestamp = "2027-01-01T00:00:00Z".parse().expect("timestamp");
        let mut names = vec![
            object_name("main", next_year),
            object_name("main", at),
            object_name("main", later),
        ];
        names.sort();
        assert_eq!(
            names,
            [
                object_name("main", at),
                object_name("main", later),
                object_name("main", next_year)
            ]
        );
    }

    // -- schedule ------------------------------------------------------------------------

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    #[test]
    fn next_due_is_strictly_after_and_in_utc() {
        assert_eq!(
            next_due("0 */6 * * *", at("2026-11-21T15:30:00Z")),
            Ok(at("2026-11-21T18:00:00Z"))
        );
        assert_eq!(
            next_due("0 */6 * * *", at("2026-11-21T18:00:00Z")),
            Ok(at("2026-11-22T00:00:00Z")),
            "a time that matches is not due again"
        );
        assert_eq!(
            next_due("* * * * *", at("2026-11-21T15:30:00.500Z")),
            Ok(at("2026-11-21T15:31:00Z"))
        );
        assert_eq!(
            next_due("30 2 * * MON", at("2026-11-21T15:30:00Z")),
            Ok(at("2026-11-23T02:30:00Z")),
            "2026-11-21 is a Saturday"
        );
        assert_eq!(
            next_due("0 0 1 1 *", at("2026-12-31T23:59:59Z")),
            Ok(at("2027-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn both_day_fields_restricted_means_either_matches() {
        // The 1st of the month or a Monday, whichever is first.
        assert_eq!(
            next_due("0 0 1 * MON", at("2026-11-24T00:00:00Z")),
            Ok(at("2026-11-30T00:00:00Z"))
        );
    }

    #[test]
    fn only_five_valid_fields_are_a_schedule() {
        for invalid in [
            "",
            "* * * *",
            "0 * * * * *",
            "@daily",
            "61 * * * *",
            "* 24 * * *",
            "every day",
            "a b c d e",
        ] {
            assert!(
                matches!(
                    next_due(invalid, at("2026-11-21T00:00:00Z")),
                    Err(ScheduleError::Invalid { .. })
                ),
                "{invalid:?} should be refused"
            );
        }
    }

    #[test]
    fn a_schedule_that_never_fires_is_an_error() {
        assert!(matches!(
            next_due("0 0 30 2 *", at("2026-11-21T00:00:00Z")),
            Err(ScheduleError::NeverFires { .. })
        ));
    }

    #[test]
    fn staleness_compares_the_newest_backup_with_the_maximum_age() {
        let now = at("2026-11-21T12:00:00Z");
        assert!(is_stale(None, 60, now), "no backup at all is stale");
        assert!(!is_stale(Some(at("2026-11-21T11:30:00Z")), 60, now));
        assert!(
            !is_stale(Some(at("2026-11-21T11:00:00Z")), 60, now),
            "exactly the maximum age"
        );
        assert!(is_stale(Some(at("2026-11-21T10:59:59Z")), 60, now));
        assert!(!is_stale(Some(at("2026-11-21T13:00:00Z")), 60, now), "clock skew");
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

    // -- the pipe ------------------------------------------------------------------------

    fn filesystem_sink(label: &str) -> (BackupSink, PathBuf) {
        let directory = scratch(label);
        let sink = BackupSink::new(BackupTarget::Filesystem {
            directory: directory.clone(),
        })
        .expect("sink");
        (sink, directory)
    }

    fn info(bytes: &[u8]) -> SnapshotInfo {
        use sha2::{Digest, Sha256};
        SnapshotInfo {
            size: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(bytes)),
        }
    }

    async fn write_in_chunks(writer: &mut PipeWriter, bytes: &[u8]) -> Result<(), AdminError> {
        use tokio::io::AsyncWriteExt;
        for chunk in bytes.chunks(4096) {
            writer
                .write_all(chunk)
                .await
                .map_err(|source| AdminError::Write {
                    endpoint: "test".to_string(),
                    source,
                })?;
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_verified_stream_is_stored_whole() {
        let (sink, directory) = filesystem_sink("whole");
        let content: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
        let expected = info(&content);
        let produce = producer(|writer| {
            let content = content.clone();
            Box::pin(async move {
                write_in_chunks(writer, &content).await?;
                Ok(info(&content))
            })
        });
        let upload = |reader: PipeReader| {
            let sink = sink.clone();
            async move { sink.upload("main/main-1.db", reader).await }
        };
        let (stored, produced) = pipe(produce, upload, Duration::from_secs(5))
            .await
            .expect("stored");
        assert_eq!(produced, expected);
        assert_eq!(
            (stored.size, stored.sha256.as_str()),
            (expected.size, expected.sha256.as_str())
        );
        assert_eq!(
            std::fs::read(directory.join("main/main-1.db")).expect("stored file"),
            content
        );
        std::fs::remove_dir_all(&directory).ok();
    }

    #[tokio::test]
    async fn a_corrupt_snapshot_is_not_stored() {
        let (sink, directory) = filesystem_sink("corrupt");
        // All bytes arrive, then the trailing checksum fails: the verdict comes last.
        let produce = producer(|writer| {
            Box::pin(async move {
                write_in_chunks(writer, &[7u8; 300_000]).await?;
                Err(AdminError::CorruptSnapshot {
                    endpoint: "test".to_string(),
                    detail: "trailing SHA-256 does not match".to_string(),
                })
            })
        });
        let upload = |reader: PipeReader| {
            let sink = sink.clone();
            async move { sink.upload("main/main-1.db", reader).await }
        };
        let error = pipe(produce, upload, Duration::from_secs(5))
            .await
            .expect_err("corrupt");
        assert!(
            matches!(error, PipeError::Producer(AdminError::CorruptSnapshot { .. })),
            "{error:?}"
        );
        assert!(sink.list().await.expect("list").is_empty(), "no object stored");
        std::fs::remove_dir_all(&directory).ok();
    }

    #[tokio::test]
    async fn a_member_that_stops_sending_is_given_up_and_nothing_is_stored() {
        let (sink, directory) = filesystem_sink("stalled");
        let produce = producer(|writer| {
            Box::pin(async move {
                write_in_chunks(writer, &[1u8; 10_000]).await?;
                std::future::pending::<()>().await;
                Ok(info(&[]))
            })
        });
        let upload = |reader: PipeReader| {
            let sink = sink.clone();
            async move { sink.upload("main/main-1.db", reader).await }
        };
        let started = std::time::Instant::now();
        let error = pipe(produce, upload, Duration::from_millis(200))
            .await
            .expect_err("stalled");
        assert!(matches!(error, PipeError::Stalled(_)), "{error:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(sink.list().await.expect("list").is_empty(), "no object stored");
        std::fs::remove_dir_all(&directory).ok();
    }

    #[tokio::test]
    async fn a_slow_consumer_is_not_a_stalled_member() {
        let content = vec![3u8; 4 * PIPE_CAPACITY];
        let produce = producer(|writer| {
            let content = content.clone();
            Box::pin(async move {
                write_in_chunks(writer, &content).await?;
                Ok(info(&content))
            })
        });
        // Reads nothing for 4 stall timeouts: the producer is blocked on a full pipe meanwhile.
        let consume = |mut reader: PipeReader| async move {
            use tokio::io::AsyncReadExt;
            tokio::time::sleep(Duration::from_millis(400)).await;
            let mut read = Vec::new();
            reader.read_to_end(&mut read).await.map(|_| read.len())
        };
        let (read, _) = pipe(produce, consume, Duration::from_millis(100))
            .await
            .expect("a waiting producer is not stalled");
        assert_eq!(read, content.len());
    }

    #[tokio::test]
    async fn a_failing_sink_ends_the_snapshot() {
        let (sink, directory) = filesystem_sink("invalid-name");
        let produce = producer(|_writer| {
            // A member that would never answer: the sink's failure must not wait for it.
            Box::pin(std::future::pending())
        });
        let upload = |reader: PipeReader| {
            let sink = sink.clone();
            async move { sink.upload("../escape", reader).await }
        };
        let error = tokio::time::timeout(
            Duration::from_secs(5),
            pipe(produce, upload, Duration::from_secs(60)),
        )
        .await
        .expect("does not wait for the producer")
        .expect_err("invalid name");
        assert!(
            matches!(error, PipeError::Consumer(BackupError::InvalidName { .. })),
            "{error:?}"
        );
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
        };
        assert!(!self_health(&report).is_healthy());
    }
}
