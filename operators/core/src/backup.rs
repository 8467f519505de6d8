//! Backup sinks: where operators stream database backups to, and where restores read them from.
//!
//! A [`BackupSink`] stores opaque backup objects under one prefix of an S3-compatible bucket, or in
//! one local directory, through the `object_store` crate. Its guarantees:
//!
//! - **Bounded memory.** [`BackupSink::upload`] streams its source into a multipart upload of
//!   [`PART_SIZE`] parts with at most [`PARTS_IN_FLIGHT`] parts being sent at once, so an upload holds
//!   roughly `(PARTS_IN_FLIGHT + 1) * PART_SIZE` bytes however large the backup is.
//! - **All or nothing.** An object becomes visible only when every byte was read and stored. A source
//!   that fails midway, an empty source, or a failed part aborts the multipart upload, so no truncated
//!   object is left that would look like a good backup.
//! - **Checksummed.** Size and SHA-256 are computed while streaming, returned in [`StoredBackup`], and
//!   checked again by [`BackupSink::download`] when the caller passes the expected digest.
//! - **Retention by age, of one policy's own objects.** [`BackupSink::apply_retention`] keeps the
//!   newest objects under one [`Retention::prefix`] (the objects one backup resource made, since
//!   [`Retention::made_since`]) and deletes the rest, never an object named in
//!   [`Retention::protected`]; the choice is the pure
//!   function [`choose_expired_runs`], which counts complete runs, not objects.
//!
//! The prefix (or directory) belongs to the sink: every object under it counts as a backup.
//!
//! Around the sink, what every operator's backup controller needs besides its engine's own
//! backup verb:
//!
//! - destinations: [`credentials`] reads a destination's S3 credentials Secret,
//!   [`backup_target`] maps a [`BackupDestination`](crate::crd::BackupDestination) to a
//!   [`BackupTarget`], [`scoped_target`] narrows it to one cluster, and [`object_name`] names
//!   each backup by cluster and time;
//! - schedules: [`next_due`] reads a five-field cron schedule (UTC), [`due_at`] says when a
//!   backup resource runs next, and [`is_stale`] decides a cluster's `BackupStale` condition;
//! - streaming: [`pipe`] runs the engine's producer (a snapshot or dump written into a
//!   [`PipeWriter`]) and the sink's upload concurrently, so that a stream the producer failed,
//!   or that stalled, is never stored;
//! - a controller's run and a restore's fetch: [`due`] says whether a backup resource runs on
//!   this pass, [`cluster_sink`] builds the sink of one cluster's backups from a destination,
//!   and [`locate`] turns a recorded location back into a store and a key.

use std::{
    fmt,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::TryStreamExt;
use object_store::{
    ObjectStore, ObjectStoreExt, WriteMultipart, aws::AmazonS3Builder, local::LocalFileSystem,
    path::Path as ObjectPath, prefix::PrefixStore,
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub mod controller;
mod destination;
pub mod digest;
pub mod drill;
pub mod job;
mod pipe;
pub mod progress;
pub mod recovery;
pub mod restore_retry;
mod run;
mod schedule;

pub use destination::{
    ACCESS_KEY_ID_KEY, CredentialsError, DestinationError, S3Credentials, SECRET_ACCESS_KEY_KEY,
    backup_target, credentials, object_name, object_prefix, scoped_target,
};
pub use pipe::{PIPE_CAPACITY, PipeError, PipeReader, PipeWriter, Produce, pipe, producer};
pub use run::{
    Due, LocateError, ObjectFetch, SinkSetupError, StoreSettings, cluster_sink, due, locate,
    s3_credentials_env, until,
};
pub use schedule::{
    BACKUP_STALE, ScheduleError, due_at, is_stale, longest_interval, next_due, set_backup_stale,
};

/// Size of one multipart part. S3 requires at least 5 MiB for every part but the last and allows
/// 10 000 parts, so 8 MiB parts admit backups up to about 78 GiB.
pub const PART_SIZE: usize = 8 * 1024 * 1024;

/// How many parts of one upload are sent concurrently; reading the source pauses beyond that, which
/// bounds the memory an upload holds.
pub const PARTS_IN_FLIGHT: usize = 2;

/// How much is read from the source at a time.
const READ_BUFFER_SIZE: usize = 64 * 1024;

/// An S3-compatible bucket (AWS S3, MinIO, Ceph RGW, ...) addressed in path style.
///
/// `Debug` never prints the secret access key.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Target {
    /// The bucket; it must already exist.
    pub bucket: String,
    /// Objects are stored under `prefix/`; `None` or an empty prefix stores them at the bucket root.
    pub prefix: Option<String>,
    /// The service URL (for example `https://minio.example:9000`); `None` means AWS S3 itself.
    pub endpoint: Option<String>,
    /// The signing region; `None` means `us-east-1`, which most S3-compatible servers accept.
    pub region: Option<String>,
    /// The access key id requests are signed with.
    pub access_key_id: String,
    /// The secret that signs requests; never logged.
    pub secret_access_key: String,
    /// Allows an `http://` endpoint. Off in production: credentials and data would cross the
    /// network in clear text. Tests against a local server turn it on.
    pub allow_http: bool,
}

impl fmt::Debug for S3Target {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("S3Target")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

/// Where a [`BackupSink`] keeps its objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackupTarget {
    /// A prefix in an S3-compatible bucket.
    S3(S3Target),
    /// A local directory (for example a mounted volume); created when missing.
    Filesystem { directory: PathBuf },
}

/// A backup that [`BackupSink::upload`] stored completely.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBackup {
    /// The object's name relative to the sink's prefix: what `download` and `list` use.
    pub key: String,
    /// Where the object is, for status and events: `s3://bucket/prefix/key` or an absolute path.
    pub location: String,
    /// Bytes stored.
    pub size: u64,
    /// SHA-256 of the stored bytes, lowercase hex.
    pub sha256: String,
    /// Time from the first read of the source until the object was complete.
    pub duration: Duration,
}

impl StoredBackup {
    /// Whether the store holds exactly what the producer wrote (`size` bytes hashing to
    /// `sha256`); the error says both, naming the producer (`the server`, `the dump`).
    ///
    /// # Errors
    /// A message naming both sizes and digests when they differ.
    pub fn verify(&self, producer: &str, size: u64, sha256: &str) -> Result<(), String> {
        if self.size == size && self.sha256 == sha256 {
            return Ok(());
        }
        Err(format!(
            "the stored object ({} bytes, sha256 {}) is not what {producer} wrote ({size} bytes, sha256 {sha256})",
            self.size, self.sha256
        ))
    }
}

/// What [`BackupSink::download`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DownloadedBackup {
    /// Bytes written to the destination.
    pub size: u64,
    /// SHA-256 of those bytes, lowercase hex.
    pub sha256: String,
}

/// One object under the sink's prefix, as [`BackupSink::list`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupObject {
    /// The object's name relative to the sink's prefix.
    pub key: String,
    /// The object's size in bytes.
    pub size: u64,
    /// When the object was last written, as the store reports it (S3 has one-second or millisecond
    /// precision).
    pub last_modified: jiff::Timestamp,
}

/// A failed backup-sink call. Each variant names the call that failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The target description cannot work (an `http://` endpoint without `allow_http`, an empty
    /// bucket name, an invalid prefix). Permanent until the description changes.
    #[error("invalid backup target: {reason}")]
    InvalidTarget { reason: String },
    /// Creating the object-store client (or the local directory) failed.
    #[error("building the backup store client: {source}")]
    BuildStore {
        #[source]
        source: object_store::Error,
    },
    /// A backup name is empty or uses characters outside `[A-Za-z0-9._-]` and `/` separators.
    #[error("invalid backup name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    /// An expected SHA-256 is not 64 hexadecimal digits.
    #[error("invalid expected sha256 {expected:?}: not 64 hexadecimal digits")]
    InvalidExpectedChecksum { expected: String },
    /// Starting the multipart upload was refused.
    #[error("starting the upload of {key}: {source}")]
    StartUpload {
        key: String,
        #[source]
        source: object_store::Error,
    },
    /// Reading the backup's source failed; the upload was aborted.
    #[error("reading the source of {key} after {bytes_read} bytes: {source}")]
    ReadSource {
        key: String,
        bytes_read: u64,
        #[source]
        source: std::io::Error,
    },
    /// The source ended before its first byte; the upload was aborted, since an empty object would
    /// look like a backup.
    #[error("the source of {key} was empty")]
    EmptySource { key: String },
    /// Sending a part, or completing the upload, failed; the upload was aborted.
    #[error("uploading {key}: {source}")]
    Upload {
        key: String,
        #[source]
        source: object_store::Error,
    },
    /// No object has this key.
    #[error("backup {key} not found")]
    NotFound { key: String },
    /// Reading the object from the store failed.
    #[error("downloading {key}: {source}")]
    Download {
        key: String,
        #[source]
        source: object_store::Error,
    },
    /// Writing the downloaded bytes to the caller's destination failed.
    #[error("writing {key} to its destination: {source}")]
    WriteDestination {
        key: String,
        #[source]
        source: std::io::Error,
    },
    /// The downloaded bytes do not have the expected SHA-256.
    #[error("checksum mismatch for {key}: expected sha256 {expected}, got {actual}")]
    ChecksumMismatch {
        key: String,
        expected: String,
        actual: String,
    },
    /// Listing the objects under the prefix failed.
    #[error("listing backups: {source}")]
    List {
        #[source]
        source: object_store::Error,
    },
    /// Deleting an object failed.
    #[error("deleting backup {key}: {source}")]
    Delete {
        key: String,
        #[source]
        source: object_store::Error,
    },
    /// A retention that keeps no backup was asked for.
    #[error("retention must keep at least one backup")]
    InvalidRetention,
}

impl BackupError {
    /// A short, bounded label for the error counter.
    pub fn metric_label(&self) -> &'static str {
        match self {
            BackupError::InvalidTarget { .. } => "invalid_target",
            BackupError::BuildStore { .. } => "build_store",
            BackupError::InvalidName { .. } => "invalid_name",
            BackupError::InvalidExpectedChecksum { .. } => "invalid_expected_checksum",
            BackupError::StartUpload { .. } => "start_upload",
            BackupError::ReadSource { .. } => "read_source",
            BackupError::EmptySource { .. } => "empty_source",
            BackupError::Upload { .. } => "upload",
            BackupError::NotFound { .. } => "not_found",
            BackupError::Download { .. } => "download",
            BackupError::WriteDestination { .. } => "write_destination",
            BackupError::ChecksumMismatch { .. } => "checksum_mismatch",
            BackupError::List { .. } => "list",
            BackupError::Delete { .. } => "delete",
            BackupError::InvalidRetention => "invalid_retention",
        }
    }
}

/// Streams backups into an S3-compatible bucket or a local directory and back.
///
/// Cheap to clone; clones share one connection pool.
#[derive(Clone, Debug)]
pub struct BackupSink {
    store: Arc<dyn ObjectStore>,
    /// `location` of a key is this followed by the key.
    location_base: String,
    /// Bytes read from sources and handed to the store by every upload of this sink and its
    /// clones: how far a run has got ([`BackupSink::bytes_sent`]).
    sent: Arc<AtomicU64>,
}

impl BackupSink {
    /// Builds a sink for `target`. No request is sent: a wrong bucket or wrong credentials show up
    /// in the first call that reaches the store.
    ///
    /// # Errors
    /// [`BackupError::InvalidTarget`] for a description that cannot work, [`BackupError::BuildStore`]
    /// when the client or the local directory cannot be created.
    pub fn new(target: BackupTarget) -> Result<BackupSink, BackupError> {
        match target {
            BackupTarget::S3(s3) => Self::new_s3(s3),
            BackupTarget::Filesystem { directory } => Self::new_filesystem(directory),
        }
    }

    fn new_s3(target: S3Target) -> Result<BackupSink, BackupError> {
        if target.bucket.is_empty() {
            return Err(BackupError::InvalidTarget {
                reason: "the bucket name is empty".to_string(),
            });
        }
        if let Some(endpoint) = &target.endpoint
            && endpoint.starts_with("http://")
            && !target.allow_http
        {
            return Err(BackupError::InvalidTarget {
                reason: format!("endpoint {endpoint} is plain HTTP and allow_http is off"),
            });
        }
        let prefix = normalize_prefix(target.prefix.as_deref())?;
        // `new()` rather than `from_env()`: the description alone decides where backups go, never
        // whatever AWS_* variables the operator's pod happens to carry.
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&target.bucket)
            .with_access_key_id(&target.access_key_id)
            .with_secret_access_key(&target.secret_access_key)
            .with_region(target.region.as_deref().unwrap_or("us-east-1"))
            .with_virtual_hosted_style_request(false)
            .with_allow_http(target.allow_http);
        if let Some(endpoint) = &target.endpoint {
            builder = builder.with_endpoint(endpoint.trim_end_matches('/'));
        }
        let store = builder
            .build()
            .map_err(|source| BackupError::BuildStore { source })?;
        let location_base = match &prefix {
            Some(prefix) => format!("s3://{}/{prefix}/", target.bucket),
            None => format!("s3://{}/", target.bucket),
        };
        let store: Arc<dyn ObjectStore> = match prefix {
            Some(prefix) => Arc::new(PrefixStore::new(store, prefix)),
            None => Arc::new(store),
        };
        Ok(BackupSink {
            store,
            location_base,
            sent: Arc::default(),
        })
    }

    fn new_filesystem(directory: PathBuf) -> Result<BackupSink, BackupError> {
        std::fs::create_dir_all(&directory).map_err(|source| BackupError::BuildStore {
            source: object_store::Error::Generic {
                store: "LocalFileSystem",
                source: Box::new(source),
            },
        })?;
        // fsync: a backup reported as stored must survive a node crash right after.
        let store = LocalFileSystem::new_with_prefix(&directory)
            .map_err(|source| BackupError::BuildStore { source })?
            .with_fsync(true)
            .with_automatic_cleanup(true);
        let canonical = std::fs::canonicalize(&directory).unwrap_or(directory);
        Ok(BackupSink {
            store: Arc::new(store),
            location_base: format!("{}/", canonical.display().to_string().trim_end_matches('/')),
            sent: Arc::default(),
        })
    }

    /// Bytes every upload through this sink (and its clones) has read from its source so far,
    /// counted as they are handed to the store: a run's progress.
    pub fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Where the object `key` is (or would be): `s3://bucket/prefix/key` or an absolute path.
    pub fn location(&self, key: &str) -> String {
        format!("{}{key}", self.location_base)
    }

    /// Streams `source` to the object `name` until the source ends, computing size and SHA-256 on
    /// the way. An existing object of that name is replaced only when the upload completes.
    ///
    /// Memory stays bounded (see [`PARTS_IN_FLIGHT`]). When the future is dropped midway, no object
    /// appears; S3 keeps the parts already sent until the bucket's lifecycle rule for incomplete
    /// multipart uploads removes them.
    ///
    /// # Errors
    /// [`BackupError::InvalidName`]; [`BackupError::StartUpload`]; [`BackupError::ReadSource`],
    /// [`BackupError::EmptySource`] and [`BackupError::Upload`], after each of which the upload
    /// was aborted and no object of that name was created.
    pub async fn upload(
        &self,
        name: &str,
        mut source: impl AsyncRead + Unpin,
    ) -> Result<StoredBackup, BackupError> {
        let path = parse_name(name)?;
        let key = name.to_string();
        let started = Instant::now();
        let upload = self
            .store
            .put_multipart(&path)
            .await
            .map_err(|source| BackupError::StartUpload {
                key: key.clone(),
                source,
            })?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut hasher = Sha256::new();
        let mut size: u64 = 0;
        let mut buffer = vec![0_u8; READ_BUFFER_SIZE];
        loop {
            if let Err(source) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                abort_upload(writer, &key).await;
                return Err(BackupError::Upload { key, source });
            }
            let read = match source.read(&mut buffer).await {
                Ok(0) => break,
                Ok(read) => read,
                Err(source) => {
                    abort_upload(writer, &key).await;
                    return Err(BackupError::ReadSource {
                        key,
                        bytes_read: size,
                        source,
                    });
                }
            };
            hasher.update(&buffer[..read]);
            size += read as u64;
            writer.write(&buffer[..read]);
            self.sent.fetch_add(read as u64, Ordering::Relaxed);
        }
        if size == 0 {
            abort_upload(writer, &key).await;
            return Err(BackupError::EmptySource { key });
        }
        // `finish` aborts the upload itself when a part or the completion fails.
        writer.finish().await.map_err(|source| BackupError::Upload {
            key: key.clone(),
            source,
        })?;
        Ok(StoredBackup {
            location: self.location(&key),
            key,
            size,
            sha256: hex::encode(hasher.finalize()),
            duration: started.elapsed(),
        })
    }

    /// Streams the object `key` into `destination` and flushes it, computing size and SHA-256 on
    /// the way; when `expected_sha256` is given (hex, either case), the digest must match it.
    ///
    /// The bytes are written before the digest is known: on a mismatch the destination holds
    /// them anyway, so write to a scratch file and move it into place only on success.
    ///
    /// # Errors
    /// [`BackupError::InvalidName`] and [`BackupError::InvalidExpectedChecksum`] before anything is
    /// read; [`BackupError::NotFound`]; [`BackupError::Download`]; [`BackupError::WriteDestination`];
    /// [`BackupError::ChecksumMismatch`].
    pub async fn download(
        &self,
        key: &str,
        mut destination: impl AsyncWrite + Unpin,
        expected_sha256: Option<&str>,
    ) -> Result<DownloadedBackup, BackupError> {
        let path = parse_name(key)?;
        if let Some(expected) = expected_sha256
            && (expected.len() != 64 || !expected.bytes().all(|byte| byte.is_ascii_hexdigit()))
        {
            return Err(BackupError::InvalidExpectedChecksum {
                expected: expected.to_string(),
            });
        }
        let download_error = |source| match source {
            object_store::Error::NotFound { .. } => BackupError::NotFound { key: key.to_string() },
            source => BackupError::Download {
                key: key.to_string(),
                source,
            },
        };
        let mut chunks = self.store.get(&path).await.map_err(download_error)?.into_stream();
        let write_error = |source| BackupError::WriteDestination {
            key: key.to_string(),
            source,
        };
        let mut hasher = Sha256::new();
        let mut size: u64 = 0;
        while let Some(chunk) = chunks.try_next().await.map_err(download_error)? {
            hasher.update(&chunk);
            size += chunk.len() as u64;
            destination.write_all(&chunk).await.map_err(write_error)?;
        }
        destination.flush().await.map_err(write_error)?;
        let sha256 = hex::encode(hasher.finalize());
        if let Some(expected) = expected_sha256
            && !expected.eq_ignore_ascii_case(&sha256)
        {
            return Err(BackupError::ChecksumMismatch {
                key: key.to_string(),
                expected: expected.to_ascii_lowercase(),
                actual: sha256,
            });
        }
        Ok(DownloadedBackup { size, sha256 })
    }

    /// Every object under the prefix, oldest first (by `last_modified`, then key). Unfinished
    /// uploads are not objects and are not listed.
    ///
    /// # Errors
    /// [`BackupError::List`].
    pub async fn list(&self) -> Result<Vec<BackupObject>, BackupError> {
        self.list_under(None).await
    }

    async fn list_under(&self, prefix: Option<&str>) -> Result<Vec<BackupObject>, BackupError> {
        let prefix = prefix.map(ObjectPath::from);
        let mut objects: Vec<BackupObject> = self
            .store
            .list(prefix.as_ref())
            .map_ok(|meta| BackupObject {
                key: meta.location.to_string(),
                size: meta.size,
                last_modified: to_timestamp(
                    meta.last_modified.timestamp(),
                    meta.last_modified.timestamp_subsec_nanos(),
                ),
            })
            .try_collect()
            .await
            .map_err(|source| BackupError::List { source })?;
        objects.sort_by(age_order);
        Ok(objects)
    }

    /// Keeps the newest `retention.keep` complete runs under `retention.prefix` and deletes the
    /// others that are not protected (see [`choose_expired_runs`]), returning the keys it deleted,
    /// oldest first. An object that vanished meanwhile counts as deleted.
    ///
    /// # Errors
    /// [`BackupError::InvalidRetention`] when `keep` is 0: deleting every backup is never a
    /// retention policy. [`BackupError::List`]; [`BackupError::Delete`] for the first object that
    /// could not be deleted (the older ones are gone by then; calling again resumes).
    pub async fn apply_retention(&self, retention: &Retention) -> Result<Vec<String>, BackupError> {
        if retention.keep == 0 {
            return Err(BackupError::InvalidRetention);
        }
        let mut objects = self.list_under(retention.prefix.as_deref()).await?;
        objects.retain(|object| retention.made(&object.key));
        let protected = |object: &BackupObject| retention.protected.contains(&self.location(&object.key));
        let mut deleted = Vec::new();
        for object in choose_expired_runs(&objects, retention.keep, retention.run_objects, protected) {
            let path = ObjectPath::from(object.key.as_str());
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted.push(object.key.clone()),
                Err(source) => {
                    return Err(BackupError::Delete {
                        key: object.key.clone(),
                        source,
                    });
                }
            }
        }
        Ok(deleted)
    }
}

/// What a retention keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Only objects whose key starts with this are considered (`None`: every object of the
    /// sink); a backup resource's objects share the prefix of its name.
    pub prefix: Option<String>,
    /// How many of the newest complete runs are kept.
    pub keep: usize,
    /// How many objects a complete run stores (one per source, and its companions); 0 or 1:
    /// every object is a run of its own. A run is the objects named with one run's start
    /// ([`destination::object_name`]); one with fewer objects (a run that failed part way, or
    /// is still uploading) does not count towards `keep`.
    pub run_objects: usize,
    /// Locations (as [`BackupSink::location`] writes them) that are never deleted, however old:
    /// the objects a backup's status or a cluster's restore still points at.
    pub protected: std::collections::BTreeSet<String>,
    /// When the policy was created (`None`: every object under the prefix is its own). A
    /// backup resource deleted and created again under its name (a cluster's scheduled backup,
    /// when the cluster was deleted by mistake and applied again) finds its predecessor's runs
    /// under its prefix, and those may be the only copy of the data the deleted cluster held:
    /// only runs that started since are its own, and an object whose name carries no run's
    /// start is never one of them.
    pub made_since: Option<jiff::Timestamp>,
}

impl Retention {
    /// Whether the object `key` is one this policy made (see [`Retention::made_since`]).
    pub fn made(&self, key: &str) -> bool {
        let Some(since) = self.made_since else {
            return true;
        };
        run_started(key).is_some_and(|started| started >= since)
    }
}

/// The objects a retention of the `keep` newest complete runs deletes, oldest first: every run
/// older than the `keep`-th newest run holding `run_objects` objects, except the `protected`
/// objects. A run is the objects whose names carry one run's start (`<cluster>-<start>.<ext>`);
/// an object whose name carries none is a run of its own. An incomplete run (one that failed
/// part way, or one still uploading) is kept while it is newer than that, and never counts: the
/// leftovers of failed runs do not push good runs out.
pub fn choose_expired_runs(
    objects: &[BackupObject],
    keep: usize,
    run_objects: usize,
    protected: impl Fn(&BackupObject) -> bool,
) -> Vec<&BackupObject> {
    let mut runs: Vec<Vec<&BackupObject>> = Vec::new();
    let mut by_run: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for object in objects {
        match run_of(&object.key) {
            Some(run) => match by_run.get(run) {
                Some(&index) => runs[index].push(object),
                None => {
                    by_run.insert(run, runs.len());
                    runs.push(vec![object]);
                }
            },
            None => runs.push(vec![object]),
        }
    }
    // Each run by its newest object, newest run first (a run is never empty).
    let mut runs: Vec<(&BackupObject, Vec<&BackupObject>)> = runs
        .into_iter()
        .filter_map(|run| Some((run.iter().copied().max_by(|l, r| age_order(l, r))?, run)))
        .collect();
    runs.sort_by(|(left, _), (right, _)| age_order(right, left));
    let mut complete = 0;
    let mut expired: Vec<&BackupObject> = Vec::new();
    for (_, run) in runs {
        if complete < keep {
            if run.len() >= run_objects.max(1) {
                complete += 1;
            }
        } else {
            expired.extend(run.into_iter().filter(|object| !protected(object)));
        }
    }
    expired.sort_by(|left, right| age_order(left, right));
    expired
}

/// The run an object belongs to: its key up to the end of the run's start in its name
/// (`…/main-20261121T153000.750Z` of `…/main-20261121T153000.750Z.shard-0.rdb`).
fn run_of(key: &str) -> Option<&str> {
    let bytes = key.as_bytes();
    // `YYYYMMDDTHHMMSS.mmmZ`: 8 digits, T, 6 digits, '.', 3 digits, Z.
    const LENGTH: usize = 20;
    (0..bytes.len().saturating_sub(LENGTH - 1))
        .rev()
        .find_map(|start| {
            let candidate = &bytes[start..start + LENGTH];
            let digits = |range: std::ops::Range<usize>| candidate[range].iter().all(u8::is_ascii_digit);
            (digits(0..8)
                && candidate[8] == b'T'
                && digits(9..15)
                && candidate[15] == b'.'
                && digits(16..19)
                && candidate[19] == b'Z')
                .then(|| &key[..start + LENGTH])
        })
}

/// When the run that stored the object `key` started, from its name.
fn run_started(key: &str) -> Option<jiff::Timestamp> {
    let stamp = run_of(key)?;
    let stamp = &stamp[stamp.len() - 20..];
    jiff::civil::DateTime::strptime("%Y%m%dT%H%M%S%.fZ", stamp)
        .ok()?
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()
        .map(|zoned| zoned.timestamp())
}

fn age_order(left: &BackupObject, right: &BackupObject) -> std::cmp::Ordering {
    left.last_modified
        .cmp(&right.last_modified)
        .then_with(|| left.key.cmp(&right.key))
}

/// Aborts an upload that cannot complete. A failed abort is only logged: the error that caused it
/// matters more to the caller, and an unfinished upload is invisible anyway.
async fn abort_upload(writer: WriteMultipart, key: &str) {
    if let Err(error) = writer.abort().await {
        tracing::warn!(key, %error, "aborting an unfinished backup upload failed");
    }
}

/// Checks a backup name: non-empty `/`-separated segments of `[A-Za-z0-9._-]`, none of them `.`
/// or `..`. Narrower than what S3 allows, so that every name means the same object on S3 and on
/// a filesystem (`#` is reserved by the filesystem store for unfinished uploads).
fn parse_name(name: &str) -> Result<ObjectPath, BackupError> {
    let invalid = |reason| BackupError::InvalidName {
        name: name.to_string(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("empty"));
    }
    if name.len() > 512 {
        return Err(invalid("longer than 512 bytes"));
    }
    for segment in name.split('/') {
        if segment.is_empty() {
            return Err(invalid("empty path segment"));
        }
        if segment == "." || segment == ".." {
            return Err(invalid("`.` or `..` segment"));
        }
        if !segment
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
        {
            return Err(invalid("characters other than A-Z a-z 0-9 . _ - and /"));
        }
    }
    ObjectPath::parse(name).map_err(|_| invalid("not a valid object path"))
}

/// A prefix without surrounding slashes, validated like a name; `None` for no prefix.
fn normalize_prefix(prefix: Option<&str>) -> Result<Option<String>, BackupError> {
    let Some(prefix) = prefix.map(|prefix| prefix.trim_matches('/')) else {
        return Ok(None);
    };
    if prefix.is_empty() {
        return Ok(None);
    }
    parse_name(prefix).map_err(|error| BackupError::InvalidTarget {
        reason: format!("prefix: {error}"),
    })?;
    Ok(Some(prefix.to_string()))
}

/// Converts the store's time (chrono, which this crate does not name) to a [`jiff::Timestamp`]. A
/// time outside jiff's range (years beyond ±9999) cannot come from a real store; it becomes the
/// epoch, which only makes that object the first to expire.
fn to_timestamp(seconds: i64, subsecond_nanoseconds: u32) -> jiff::Timestamp {
    let nanoseconds = i32::try_from(subsecond_nanoseconds).unwrap_or(0);
    jiff::Timestamp::new(seconds, nanoseconds).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// Ends the process of a restore step (a restored member's init container): exit status 0 with
/// `outcome` logged, or 1 with the error, so the member's server starts only on restored data.
pub fn finish_restore_step<T: std::fmt::Debug, E: std::fmt::Display>(
    member: &str,
    outcome: Result<T, E>,
) -> ! {
    match outcome {
        Ok(outcome) => {
            tracing::info!(%member, ?outcome, "restore");
            std::process::exit(0)
        }
        Err(error) => {
            tracing::error!(%member, %error, "restore failed");
            std::process::exit(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(key: &str, second: i64) -> BackupObject {
        BackupObject {
            key: key.to_string(),
            size: 1,
            last_modified: jiff::Timestamp::from_second(second).expect("valid second"),
        }
    }

    fn keys(objects: Vec<&BackupObject>) -> Vec<&str> {
        objects.into_iter().map(|object| object.key.as_str()).collect()
    }

    #[test]
    fn retention_expires_all_but_the_newest() {
        let objects = vec![
            object("c", 300),
            object("a", 100),
            object("d", 400),
            object("b", 200),
        ];
        assert_eq!(keys(choose_expired_runs(&objects, 2, 1, |_| false)), ["a", "b"]);
        assert_eq!(
            keys(choose_expired_runs(&objects, 1, 1, |_| false)),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn retention_breaks_equal_times_by_key() {
        let objects = vec![
            object("snapshot-3", 100),
            object("snapshot-1", 100),
            object("snapshot-2", 100),
        ];
        assert_eq!(
            keys(choose_expired_runs(&objects, 1, 1, |_| false)),
            ["snapshot-1", "snapshot-2"]
        );
    }

    #[test]
    fn retention_prefers_time_over_key() {
        let objects = vec![object("z-old", 100), object("a-new", 200)];
        assert_eq!(keys(choose_expired_runs(&objects, 1, 1, |_| false)), ["z-old"]);
    }

    #[test]
    fn retention_keeping_at_least_all_expires_nothing() {
        let objects = vec![object("a", 100), object("b", 200)];
        assert!(choose_expired_runs(&objects, 2, 1, |_| false).is_empty());
        assert!(choose_expired_runs(&objects, 10, 1, |_| false).is_empty());
        assert!(choose_expired_runs(&[], 3, 1, |_| false).is_empty());
    }

    #[test]
    fn retention_never_expires_a_protected_object_and_keeps_the_newest_as_asked() {
        let objects = vec![
            object("a", 100),
            object("b", 200),
            object("c", 300),
            object("d", 400),
        ];
        let protected = |object: &BackupObject| object.key == "a";
        assert_eq!(keys(choose_expired_runs(&objects, 2, 1, protected)), ["b"]);
        assert_eq!(keys(choose_expired_runs(&objects, 1, 1, protected)), ["b", "c"]);
    }

    /// Redis with three shards, keeping two runs: a run that failed after its first shard
    /// (R3) and one still uploading (R5) neither count nor push a good run out; R1, older than
    /// the two newest complete runs, goes.
    #[test]
    fn retention_counts_complete_runs_not_objects() {
        let run = |start: &str, shards: &[usize], second: i64| -> Vec<BackupObject> {
            shards
                .iter()
                .map(|shard| {
                    object(
                        &format!("redisbackup/nightly/cache-{start}.shard-{shard}.rdb"),
                        second,
                    )
                })
                .collect()
        };
        let objects: Vec<BackupObject> = [
            run("20261201T010000.000Z", &[0, 1, 2], 100),
            run("20261201T020000.000Z", &[0, 1, 2], 200),
            run("20261201T030000.000Z", &[0], 300),
            run("20261201T040000.000Z", &[0, 1, 2], 400),
            run("20261201T050000.000Z", &[0], 500),
        ]
        .concat();
        let expired = keys(choose_expired_runs(&objects, 2, 3, |_| false));
        assert_eq!(
            expired,
            [
                "redisbackup/nightly/cache-20261201T010000.000Z.shard-0.rdb",
                "redisbackup/nightly/cache-20261201T010000.000Z.shard-1.rdb",
                "redisbackup/nightly/cache-20261201T010000.000Z.shard-2.rdb",
            ]
        );
        // A snapshot and its archived log make one run; one object per run keeps the old count.
        assert_eq!(
            run_of("mysqlbackup/pitr/shop-20261201T010000.000Z.binlog"),
            run_of("mysqlbackup/pitr/shop-20261201T010000.000Z.sql")
        );
        assert_eq!(run_of("nightly/main-1.db"), None);
        let singles = vec![object("a", 100), object("b", 200), object("c", 300)];
        assert_eq!(keys(choose_expired_runs(&singles, 2, 1, |_| false)), ["a"]);
        let protected = |object: &BackupObject| object.key.contains("T010000");
        assert!(choose_expired_runs(&objects, 2, 3, protected).is_empty());
    }

    /// A scheduled backup created again under its name (with its cluster, after a mistaken
    /// delete) never counts its predecessor's runs as its own: they are neither kept in place of
    /// its own runs nor pruned.
    #[test]
    fn a_policy_owns_only_the_runs_started_since_it_was_created() {
        let created: jiff::Timestamp = "2026-12-01T03:00:00Z".parse().expect("timestamp");
        let retention = Retention {
            made_since: Some(created),
            ..Retention::default()
        };
        for (key, made) in [
            ("etcdbackup/main-scheduled/main-20261201T030000.000Z.db", true),
            ("etcdbackup/main-scheduled/main-20261201T030000.001Z.db", true),
            ("mysqlbackup/pitr/shop-20261202T010000.000Z.binlog", true),
            ("redisbackup/nightly/cache-20261201T040000.000Z.shard-2.rdb", true),
            ("etcdbackup/main-scheduled/main-20261201T025959.999Z.db", false),
            ("etcdbackup/main-scheduled/main-20261130T030000.000Z.db", false),
            ("nightly/main-1.db", false),
            ("etcdbackup/main-scheduled/main-20261399T030000.000Z.db", false),
        ] {
            assert_eq!(retention.made(key), made, "{key}");
        }
        assert!(
            Retention::default().made("nightly/main-1.db"),
            "no creation time: every object"
        );
        assert_eq!(
            run_started("redisbackup/nightly/cache-20261201T040000.250Z.shard-2.rdb"),
            Some("2026-12-01T04:00:00.25Z".parse().expect("timestamp"))
        );
    }

    #[test]
    fn retention_keeping_none_expires_everything() {
        let objects = vec![object("b", 200), object("a", 100)];
        assert_eq!(keys(choose_expired_runs(&objects, 0, 1, |_| false)), ["a", "b"]);
    }

    #[test]
    fn names_are_portable_paths() {
        for valid in ["snapshot-20250101T000000Z.db", "cluster-a/snapshot_1", "a.b-c_d"] {
            assert!(parse_name(valid).is_ok(), "{valid} should be valid");
        }
        for invalid in [
            "",
            "/leading",
            "trailing/",
            "double//slash",
            "../escape",
            "a/./b",
            "space here",
            "hash#1",
            "ümlaut",
            "back\\slash",
        ] {
            assert!(
                matches!(parse_name(invalid), Err(BackupError::InvalidName { .. })),
                "{invalid:?} should be refused"
            );
        }
    }

    #[test]
    fn prefixes_lose_surrounding_slashes() {
        assert_eq!(normalize_prefix(None).expect("valid"), None);
        assert_eq!(normalize_prefix(Some("")).expect("valid"), None);
        assert_eq!(normalize_prefix(Some("/")).expect("valid"), None);
        assert_eq!(
            normalize_prefix(Some("/etcd/cluster-a/")).expect("valid"),
            Some("etcd/cluster-a".to_string())
        );
        assert!(matches!(
            normalize_prefix(Some("a//b")),
            Err(BackupError::InvalidTarget { .. })
        ));
    }

    fn s3_target(endpoint: &str, allow_http: bool) -> BackupTarget {
        BackupTarget::S3(S3Target {
            bucket: "backups".to_string(),
            prefix: Some("etcd".to_string()),
            endpoint: Some(endpoint.to_string()),
            region: None,
            access_key_id: "access".to_string(),
            secret_access_key: "very-secret".to_string(),
            allow_http,
        })
    }

    #[test]
    fn plain_http_needs_to_be_allowed() {
        assert!(matches!(
            BackupSink::new(s3_target("http://127.0.0.1:9000", false)),
            Err(BackupError::InvalidTarget { .. })
        ));
        let sink = BackupSink::new(s3_target("http://127.0.0.1:9000", true)).expect("sink");
        assert_eq!(sink.location("snapshot-1"), "s3://backups/etcd/snapshot-1");
        assert!(BackupSink::new(s3_target("https://s3.example", false)).is_ok());
    }

    #[test]
    fn debug_output_hides_the_secret() {
        let BackupTarget::S3(target) = s3_target("https://s3.example", false) else {
            unreachable!("built as S3");
        };
        let printed = format!("{target:?}");
        assert!(!printed.contains("very-secret"), "{printed}");
        assert!(printed.contains("<redacted>"), "{printed}");
    }

    #[test]
    fn metric_labels_are_snake_case() {
        let error = BackupError::ChecksumMismatch {
            key: "k".to_string(),
            expected: "a".to_string(),
            actual: "b".to_string(),
        };
        assert_eq!(error.metric_label(), "checksum_mismatch");
        assert_eq!(BackupError::InvalidRetention.metric_label(), "invalid_retention");
    }
}
