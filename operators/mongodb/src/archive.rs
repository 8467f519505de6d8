//! Logical snapshots of a replica set as BSON archives: [`dump`] reads every user database
//! from one member into a stream, [`restore`] loads such a stream into an empty set. No
//! Kubernetes here: the backup controller picks the member and the store.
//!
//! # What a snapshot holds
//! Every database except `admin`, `local` and `config`, every collection of them but views and
//! `system.*`, with its creation options and index specifications, and every document exactly
//! as the server stored it (the bytes are copied, never decoded and re-encoded), in `_id` order.
//! `admin` holds the users and roles, `local` the member's own oplog and replica set
//! configuration, `config` sessions and internals: they belong to the set a snapshot is
//! restored into, which has its own administrator, so **users and roles are not carried**.
//!
//! # Consistency
//! A logical dump of a live set is consistent per document, not across documents or
//! collections (the same as `mongodump` without `--oplog`): a write made while the dump runs
//! may be in it or not. The archive records the member's operation time read before the first
//! document (its majority-committed time when the finds read at `majority`, as they do on every
//! member that supports it, else its last applied time): every write acknowledged by that time
//! is in the snapshot. A snapshot of a quiet set is that set exactly.
//!
//! # Format (version 1)
//! A stream of BSON documents, each self-delimited by its little-endian `int32` length, and one
//! four-byte terminator `ff ff ff ff` (an `int32` of -1, never a BSON length, so no document can
//! be mistaken for it) after each collection's documents. Not `mongodump`'s archive format; any
//! BSON reader can split it.
//!
//! ```text
//! archive    := header collection* trailer <end of stream>
//! header     := {format: "quorum-mongodb-archive", version: 1, clusterTime: Timestamp,
//!                readFrom: "host:port", readConcern: "majority" | "local", createdAt: Date}
//! collection := {collection: {db, name, type: "collection", options: {...}, indexes: [...]}}
//!               document*                      (as stored, in _id order)
//!               ff ff ff ff
//!               {endOfCollection: {db, name, documents: Int64}}
//! trailer    := {end: true, databases: Int64, collections: Int64, documents: Int64}
//! ```
//!
//! `options` is what `listCollections` reported and `indexes` what `listIndexes` reported
//! (every index, `_id_` included). A reader refuses a stream that ends before its trailer,
//! whose counts differ from the trailer's, or that goes on after it.

use std::{collections::BTreeSet, io, time::Duration};

use bson::{Bson, DateTime, Document, RawDocument, RawDocumentBuf, Timestamp, doc};
use futures::TryStreamExt;
use mongodb::{
    Client, Database,
    error::ErrorKind,
    options::{ReadConcern, ReadPreference, SelectionCriteria, WriteConcern},
};
use quorum_core::backup::{
    BackupError, BackupSink,
    digest::{ContentDigest, ContentFingerprint},
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};

use crate::admin::{AdminError, Credentials, MongoAdmin};

pub mod oplog;

/// The `format` of an archive's header.
pub const FORMAT: &str = "quorum-mongodb-archive";
/// The format version this code writes and reads.
pub const VERSION: i32 = 1;
/// The extension archives are stored under.
pub const EXTENSION: &str = "archive";
/// Databases a snapshot leaves out, and a restore target may hold.
pub const SYSTEM_DATABASES: [&str; 3] = ["admin", "local", "config"];

/// Ends a collection's documents: an `int32` length of -1.
const TERMINATOR: [u8; 4] = [0xff; 4];
/// Larger than any document a server stores (16 MiB) and than a collection's header with many
/// indexes: a length beyond it is corruption, refused before it is allocated.
const MAX_DOCUMENT_BYTES: usize = 48 * 1024 * 1024;
/// A restore inserts documents in batches of at most this many, and ...
const BATCH_DOCUMENTS: usize = 1000;
/// ... at most this many bytes, so a batch's memory stays small whatever the documents.
const BATCH_BYTES: usize = 8 * 1024 * 1024;
/// How long connecting to a member and selecting it may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Error codes of a member that refuses `readConcern: majority`.
const MAJORITY_READ_CONCERN_REFUSED: [i32; 3] = [
    148, // ReadConcernMajorityNotEnabled
    72,  // InvalidOptions
    9,   // FailedToParse
];

/// Why a dump or a restore failed. Each variant names what failed.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The client for a member could not be built.
    #[error("connecting to {address}: {source}")]
    Connect {
        address: String,
        #[source]
        source: AdminError,
    },
    /// A command or read the server refused, or that could not reach it.
    #[error("{operation}: {source}")]
    Server {
        operation: String,
        #[source]
        source: mongodb::error::Error,
    },
    /// The member reports no replication operation time: it is no replica set member.
    #[error("{member} reports no replication operation time; only a replica set member is dumped")]
    NoOperationTime { member: String },
    /// A collection kind a logical archive does not carry.
    #[error("{namespace} is a {kind} collection, which the archive does not carry")]
    Unsupported { namespace: String, kind: String },
    /// Writing into the sink failed.
    #[error("writing the archive after {bytes} bytes: {source}")]
    Write {
        bytes: u64,
        #[source]
        source: io::Error,
    },
    /// Reading the source failed.
    #[error("reading the archive after {bytes} bytes: {source}")]
    Read {
        bytes: u64,
        #[source]
        source: io::Error,
    },
    /// The stream ended before its trailer.
    #[error("the archive ends after {bytes} bytes, before its trailer: it is truncated")]
    Truncated { bytes: u64 },
    /// The bytes are not an archive (or an oplog piece) of this format.
    #[error("malformed at byte {offset}: {detail}")]
    Malformed { offset: u64, detail: String },
    /// A count the archive recorded differs from what the stream held.
    #[error("the archive records {recorded} {what}, the stream held {read}")]
    CountMismatch { what: String, recorded: i64, read: i64 },
    /// A restore target already holds a user database.
    #[error("the target already holds database {database}; a restore never writes over data")]
    TargetNotEmpty { database: String },
    /// Reading a stored archive back failed, or its bytes do not have the recorded SHA-256.
    #[error("fetching the archive: {0}")]
    Fetch(#[source] BackupError),
    /// The member's oplog no longer holds the position a piece of it was to continue from.
    #[error("the member's oplog begins at {oldest}, after {after}: the entries in between were purged")]
    OplogGap { after: String, oldest: String },
}

impl ArchiveError {
    /// A short, bounded label for the error counter.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ArchiveError::Connect { .. } => "connect",
            ArchiveError::Server { .. } => "server",
            ArchiveError::NoOperationTime { .. } => "no_operation_time",
            ArchiveError::Unsupported { .. } => "unsupported",
            ArchiveError::Write { .. } => "write",
            ArchiveError::Read { .. } => "read",
            ArchiveError::Truncated { .. } => "truncated",
            ArchiveError::Malformed { .. } => "malformed",
            ArchiveError::CountMismatch { .. } => "count_mismatch",
            ArchiveError::TargetNotEmpty { .. } => "target_not_empty",
            ArchiveError::Fetch(error) => error.metric_label(),
            ArchiveError::OplogGap { .. } => "oplog_gap",
        }
    }
}

/// A client connected straight to the member at `address` (`host:port`), whatever its role:
/// `directConnection=true`, so the driver never wanders to another member, with a short
/// server-selection timeout, authenticated with SCRAM-SHA-256 against `admin` when
/// `credentials` are given. No request is sent until the client is used. Needs a Tokio
/// runtime.
///
/// # Errors
/// [`ArchiveError::Connect`] for an address that does not parse.
pub fn connect_direct(address: &str, credentials: Option<&Credentials>) -> Result<Client, ArchiveError> {
    MongoAdmin::connect(address, credentials, CONNECT_TIMEOUT)
        .map(|admin| admin.client().clone())
        .map_err(|source| ArchiveError::Connect {
            address: address.to_string(),
            source,
        })
}

/// How the dump's finds read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadLevel {
    /// Only majority-committed data: what a failover cannot roll back.
    Majority,
    /// The member's latest applied data, on a member that refuses `majority`.
    Local,
}

impl ReadLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadLevel::Majority => "majority",
            ReadLevel::Local => "local",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "majority" => Some(ReadLevel::Majority),
            "local" => Some(ReadLevel::Local),
            _ => None,
        }
    }

    fn read_concern(self) -> ReadConcern {
        match self {
            ReadLevel::Majority => ReadConcern::majority(),
            ReadLevel::Local => ReadConcern::local(),
        }
    }
}

/// An archive's header: when and where it was read.
#[derive(Clone, Debug, PartialEq)]
pub struct ArchiveHeader {
    /// The member's operation time the snapshot holds every acknowledged write up to.
    pub cluster_time: Timestamp,
    /// The member read from, as it names itself (`host:port`).
    pub read_from: String,
    pub read_level: ReadLevel,
    pub created_at: DateTime,
}

impl ArchiveHeader {
    fn to_document(&self) -> Document {
        doc! {
            "format": FORMAT,
            "version": VERSION,
            "clusterTime": self.cluster_time,
            "readFrom": &self.read_from,
            "readConcern": self.read_level.as_str(),
            "createdAt": self.created_at,
        }
    }

    fn from_document(document: &Document) -> Result<Self, String> {
        match document.get_str("format") {
            Ok(FORMAT) => {}
            Ok(other) => return Err(format!("the header names format {other:?}")),
            Err(_) => return Err("the first document is no archive header".to_string()),
        }
        match document.get("version").and_then(integer) {
            Some(version) if version == i64::from(VERSION) => {}
            other => {
                return Err(format!(
                    "version {other:?}; this operator reads version {VERSION}"
                ));
            }
        }
        let read_level = document.get_str("readConcern").map_err(|e| e.to_string())?;
        Ok(Self {
            cluster_time: document.get_timestamp("clusterTime").map_err(|e| e.to_string())?,
            read_from: document
                .get_str("readFrom")
                .map_err(|e| e.to_string())?
                .to_string(),
            read_level: ReadLevel::parse(read_level).ok_or_else(|| format!("read concern {read_level:?}"))?,
            created_at: *document.get_datetime("createdAt").map_err(|e| e.to_string())?,
        })
    }
}

/// `seconds.increment`, as the backup's status shows a cluster time.
pub fn cluster_time_text(time: Timestamp) -> String {
    format!("{}.{}", time.time, time.increment)
}

/// One collection as the archive describes it, ahead of its documents.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectionHeader {
    pub database: String,
    pub name: String,
    /// Its creation options, as `listCollections` reported them.
    pub options: Document,
    /// Its index specifications, as `listIndexes` reported them (`_id_` included).
    pub indexes: Vec<Document>,
}

impl CollectionHeader {
    fn namespace(&self) -> String {
        format!("{}.{}", self.database, self.name)
    }

    fn to_document(&self) -> Document {
        doc! {
            "collection": {
                "db": &self.database,
                "name": &self.name,
                "type": "collection",
                "options": self.options.clone(),
                "indexes": self.indexes.iter().cloned().map(Bson::Document).collect::<Vec<_>>(),
            }
        }
    }

    fn from_document(collection: &Document) -> Result<Self, String> {
        let text = |key: &str| {
            collection
                .get_str(key)
                .map(str::to_string)
                .map_err(|e| format!("collection {key}: {e}"))
        };
        let indexes = collection
            .get_array("indexes")
            .map_err(|e| format!("collection indexes: {e}"))?
            .iter()
            .map(|index| match index {
                Bson::Document(index) => Ok(index.clone()),
                other => Err(format!("an index specification {other}")),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            database: text("db")?,
            name: text("name")?,
            options: collection
                .get_document("options")
                .cloned()
                .map_err(|e| format!("collection options: {e}"))?,
            indexes,
        })
    }
}

/// What an archive's trailer (and the stream) counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub databases: u64,
    pub collections: u64,
    pub documents: u64,
}

/// What [`dump`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct DumpSummary {
    pub header: ArchiveHeader,
    pub counts: Counts,
    /// Bytes written.
    pub size: u64,
    /// SHA-256 of the bytes written, lowercase hex.
    pub sha256: String,
    /// The documents written, counted and digested by collection: a dump of a member restored
    /// from this archive finds the same.
    pub content: ContentFingerprint,
}

/// What [`restore`] loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct RestoreSummary {
    pub header: ArchiveHeader,
    pub counts: Counts,
    /// Secondary indexes created (`_id_` is the server's own).
    pub indexes: u64,
}

/// Reads every user database of the member behind `client` into `sink` as an archive (see the
/// module's documentation), streaming: one document is held at a time. `client` is a direct
/// connection to the member to read from (see [`connect_direct`]); reads are sent with read
/// preference secondary-preferred, which on a direct connection reads that member whether it
/// is a secondary or (for a set of one) the primary. `sink` is flushed, not shut down.
///
/// # Errors
/// [`ArchiveError::NoOperationTime`] for a member outside a replica set;
/// [`ArchiveError::Unsupported`] for a time series collection (its buckets cannot be read
/// back as documents); [`ArchiveError::Server`] for a refused or failed read;
/// [`ArchiveError::Write`] when `sink` fails. What was written then is no archive: the reader
/// refuses a stream without its trailer.
pub async fn dump<W: AsyncWrite + Unpin>(client: &Client, sink: W) -> Result<DumpSummary, ArchiveError> {
    let admin = client.database("admin");
    let read_level = read_level(&admin).await?;
    let (read_from, cluster_time) = operation_time(&admin, read_level).await?;
    let header = ArchiveHeader {
        cluster_time,
        read_from,
        read_level,
        created_at: DateTime::now(),
    };
    let mut writer = ArchiveWriter::start(sink, &header).await?;
    let mut content = ContentDigest::default();
    for database in user_databases(client).await? {
        let database = client.database(&database);
        for collection in collections(&database).await? {
            writer.begin_collection(&collection).await?;
            let namespace = collection.namespace();
            let server = |source| ArchiveError::Server {
                operation: format!("reading {namespace}"),
                source,
            };
            let mut cursor = database
                .collection::<RawDocumentBuf>(&collection.name)
                .find(doc! {})
                .sort(doc! { "_id": 1 })
                .selection_criteria(from_this_member())
                .read_concern(read_level.read_concern())
                .await
                .map_err(server)?;
            while cursor.advance().await.map_err(server)? {
                let document = cursor.current();
                content.add_parts(&[namespace.as_bytes(), b"\n", document.as_bytes()]);
                writer.document(document).await?;
            }
            writer.end_collection().await?;
        }
    }
    let (counts, size, sha256) = writer.finish().await?;
    Ok(DumpSummary {
        header,
        counts,
        size,
        sha256,
        content: content.fingerprint(),
    })
}

/// Reads go to the member the client is connected to, a secondary or not (see [`dump`]).
fn from_this_member() -> SelectionCriteria {
    SelectionCriteria::ReadPreference(ReadPreference::secondary_preferred(None))
}

/// `majority` unless the member refuses it.
async fn read_level(admin: &Database) -> Result<ReadLevel, ArchiveError> {
    // `admin.system.version` exists on every member; an absent one answers the probe as well.
    let probe = doc! {
        "find": "system.version",
        "filter": {},
        "limit": 1,
        "singleBatch": true,
        "readConcern": { "level": "majority" },
    };
    match admin
        .run_command(probe)
        .selection_criteria(from_this_member())
        .await
    {
        Ok(_) => Ok(ReadLevel::Majority),
        Err(error) if refused_with(&error, &MAJORITY_READ_CONCERN_REFUSED) => Ok(ReadLevel::Local),
        Err(source) => Err(ArchiveError::Server {
            operation: "reading with read concern majority".to_string(),
            source,
        }),
    }
}

fn refused_with(error: &mongodb::error::Error, codes: &[i32]) -> bool {
    matches!(&*error.kind, ErrorKind::Command(command) if codes.contains(&command.code))
}

/// The member's name and the operation time a snapshot read at `level` holds everything up to:
/// from `hello`'s `lastWrite`, else `replSetGetStatus`'s `optimes`.
async fn operation_time(admin: &Database, level: ReadLevel) -> Result<(String, Timestamp), ArchiveError> {
    let server = |command: &str| {
        let operation = format!("running {command}");
        move |source| ArchiveError::Server { operation, source }
    };
    let hello = admin
        .run_command(doc! { "hello": 1 })
        .selection_criteria(from_this_member())
        .await
        .map_err(server("hello"))?;
    let member = hello.get_str("me").unwrap_or_default().to_string();
    let (last_write, applied) = match level {
        ReadLevel::Majority => ("majorityOpTime", "lastCommittedOpTime"),
        ReadLevel::Local => ("opTime", "appliedOpTime"),
    };
    let from_hello = hello
        .get_document("lastWrite")
        .and_then(|last| last.get_document(last_write))
        .and_then(|optime| optime.get_timestamp("ts"))
        .ok();
    if let Some(time) = from_hello
        && !member.is_empty()
    {
        return Ok((member, time));
    }
    let status = match admin
        .run_command(doc! { "replSetGetStatus": 1 })
        .selection_criteria(from_this_member())
        .await
    {
        Ok(status) => status,
        // NotYetInitialized, or a standalone server (NoReplicationEnabled).
        Err(error) if refused_with(&error, &[94, 76]) => {
            return Err(ArchiveError::NoOperationTime { member });
        }
        Err(error) => return Err(server("replSetGetStatus")(error)),
    };
    let time = status
        .get_document("optimes")
        .and_then(|optimes| optimes.get_document(applied))
        .and_then(|optime| optime.get_timestamp("ts"))
        .ok()
        .or(from_hello);
    let member = match member.is_empty() {
        false => member,
        true => status
            .get_array("members")
            .ok()
            .and_then(|members| {
                members.iter().find_map(|member| {
                    let member = member.as_document()?;
                    member
                        .get_bool("self")
                        .ok()?
                        .then(|| member.get_str("name").ok())?
                })
            })
            .unwrap_or_default()
            .to_string(),
    };
    match time {
        Some(time) if !member.is_empty() => Ok((member, time)),
        _ => Err(ArchiveError::NoOperationTime { member }),
    }
}

/// Drops every user database of the set behind `client`, each with a majority's
/// acknowledgement: what a restore whose replay failed leaves behind, so that the next attempt
/// starts from an empty set again.
///
/// # Errors
/// [`ArchiveError::Server`] for a listing or a drop the server refused.
pub async fn drop_user_databases(client: &Client) -> Result<(), ArchiveError> {
    for database in user_databases(client).await? {
        client
            .database(&database)
            .drop()
            .write_concern(WriteConcern::majority())
            .await
            .map_err(|source| ArchiveError::Server {
                operation: format!("dropping {database}"),
                source,
            })?;
    }
    Ok(())
}

/// The member's databases but `admin`, `local` and `config`, by name.
async fn user_databases(client: &Client) -> Result<Vec<String>, ArchiveError> {
    let listed = client
        .database("admin")
        .run_command(doc! { "listDatabases": 1, "nameOnly": true })
        .selection_criteria(from_this_member())
        .await
        .map_err(|source| ArchiveError::Server {
            operation: "listing databases".to_string(),
            source,
        })?;
    let mut names: Vec<String> = listed
        .get_array("databases")
        .map(|databases| {
            databases
                .iter()
                .filter_map(|database| database.as_document()?.get_str("name").ok())
                .filter(|name| !SYSTEM_DATABASES.contains(name))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    Ok(names)
}

/// The collections of `database` an archive carries, by name, with their options and indexes.
async fn collections(database: &Database) -> Result<Vec<CollectionHeader>, ArchiveError> {
    let server = |operation: String| move |source| ArchiveError::Server { operation, source };
    let listed: Vec<Document> = database
        .run_cursor_command(doc! { "listCollections": 1 })
        .selection_criteria(from_this_member())
        .await
        .map_err(server(format!("listing the collections of {}", database.name())))?
        .try_collect()
        .await
        .map_err(server(format!("listing the collections of {}", database.name())))?;
    let mut headers = Vec::new();
    for listed in listed {
        let name = listed.get_str("name").unwrap_or_default().to_string();
        let namespace = format!("{}.{name}", database.name());
        // `system.*` are the server's own (profile, js, views' definitions); views hold no
        // documents and their definitions may name collections the target lacks.
        if name.is_empty() || name.starts_with("system.") {
            continue;
        }
        match listed.get_str("type").unwrap_or("collection") {
            "collection" => {}
            "view" => continue,
            kind => {
                return Err(ArchiveError::Unsupported {
                    namespace,
                    kind: kind.to_string(),
                });
            }
        }
        let indexes: Vec<Document> = database
            .run_cursor_command(doc! { "listIndexes": &name })
            .selection_criteria(from_this_member())
            .await
            .map_err(server(format!("listing the indexes of {namespace}")))?
            .try_collect()
            .await
            .map_err(server(format!("listing the indexes of {namespace}")))?;
        headers.push(CollectionHeader {
            database: database.name().to_string(),
            name,
            options: listed.get_document("options").cloned().unwrap_or_default(),
            indexes,
        });
    }
    headers.sort_by(|left, right| left.name.cmp(&right.name));
    Ok(headers)
}

/// Loads the archive read from `source` into the set behind `client` (a connection to its
/// primary), and returns what it loaded. Collections are created with their options, documents
/// inserted in batches with write concern majority and document validation bypassed (they
/// were valid where they came from; a validator added later may not accept old documents),
/// then secondary indexes built.
///
/// The target must hold no user database: a restore never writes over data. A restore that
/// fails after creating something drops the databases it created, so the target is empty again
/// for the next attempt. The source's SHA-256 is the caller's to check (see
/// [`restore_stored`]); this checks the format and every count, and refuses a stream that goes
/// on after its trailer, so a caller that learns of a bad digest only at the end can still fail
/// the restore by writing anything more.
///
/// # Errors
/// [`ArchiveError::TargetNotEmpty`] naming a database found (nothing is read or written);
/// [`ArchiveError::Truncated`], [`ArchiveError::Malformed`], [`ArchiveError::CountMismatch`]
/// and [`ArchiveError::Read`] for a stream that is not a whole archive;
/// [`ArchiveError::Server`] for a refused command or insert.
pub async fn restore<R: AsyncRead + Unpin>(
    client: &Client,
    source: R,
) -> Result<RestoreSummary, ArchiveError> {
    let existing = user_databases(client).await?;
    if let Some(database) = existing.into_iter().next() {
        return Err(ArchiveError::TargetNotEmpty { database });
    }
    let mut created = BTreeSet::new();
    let result = load(client, source, &mut created).await;
    if result.is_err() {
        for database in &created {
            if let Err(error) = client
                .database(database)
                .drop()
                .write_concern(WriteConcern::majority())
                .await
            {
                tracing::warn!(database, %error, "dropping a partly restored database failed");
            }
        }
    }
    result
}

async fn load<R: AsyncRead + Unpin>(
    client: &Client,
    source: R,
    created: &mut BTreeSet<String>,
) -> Result<RestoreSummary, ArchiveError> {
    let mut reader = ArchiveReader::new(source);
    let header = reader.header().await?;
    let mut indexes = 0;
    while let Some(collection) = reader.next_collection().await? {
        let namespace = collection.namespace();
        let server = |operation: &str| {
            let operation = format!("{operation} {namespace}");
            move |source| ArchiveError::Server { operation, source }
        };
        let database = client.database(&collection.database);
        let mut create = doc! { "create": &collection.name };
        create.extend(collection.options.clone());
        create.insert("writeConcern", doc! { "w": "majority" });
        created.insert(collection.database.clone());
        database.run_command(create).await.map_err(server("creating"))?;
        let target = database.collection::<RawDocumentBuf>(&collection.name);
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        loop {
            let document = reader.next_document().await?;
            let full = batch.len() >= BATCH_DOCUMENTS || batch_bytes >= BATCH_BYTES;
            if (document.is_none() || full) && !batch.is_empty() {
                target
                    .insert_many(&batch)
                    .ordered(true)
                    .bypass_document_validation(true)
                    .write_concern(WriteConcern::majority())
                    .await
                    .map_err(server("inserting into"))?;
                batch.clear();
                batch_bytes = 0;
            }
            let Some(document) = document else { break };
            batch_bytes += document.as_bytes().len();
            batch.push(document);
        }
        let specifications = secondary_indexes(&collection.indexes);
        if !specifications.is_empty() {
            indexes += specifications.len() as u64;
            database
                .run_command(doc! {
                    "createIndexes": &collection.name,
                    "indexes": specifications,
                    "writeConcern": { "w": "majority" },
                })
                .await
                .map_err(server("creating the indexes of"))?;
        }
    }
    let counts = reader.finish().await?;
    Ok(RestoreSummary {
        header,
        counts,
        indexes,
    })
}

/// The index specifications a restore creates: all but the `_id` index and a clustered
/// collection's clustering index (the server makes those with the collection), without the
/// `ns` older servers reported (a namespace that is no longer the index's).
fn secondary_indexes(indexes: &[Document]) -> Vec<Bson> {
    indexes
        .iter()
        .filter(|index| index.get_str("name") != Ok("_id_"))
        .filter(|index| index.get_bool("clustered") != Ok(true))
        .map(|index| {
            let mut index = index.clone();
            index.remove("ns");
            Bson::Document(index)
        })
        .collect()
}

/// Restores the archive `key` of `sink` into the set behind `client` (see [`restore`]),
/// streaming it from the store, verified against `expected_sha256` (the digest the backup
/// recorded). The digest is known only once the last byte is read: when it differs, the
/// restore is made to fail before it completes, and drops what it created.
///
/// # Errors
/// [`ArchiveError::Fetch`] for a missing or unreadable object or a digest that differs; the
/// errors of [`restore`] otherwise.
pub async fn restore_stored(
    client: &Client,
    sink: &BackupSink,
    key: &str,
    expected_sha256: &str,
) -> Result<RestoreSummary, ArchiveError> {
    fetch_verified(sink, key, expected_sha256, |reader| restore(client, reader)).await
}

/// Streams the object `key` of `sink` into `consume` as it downloads, verified against
/// `expected_sha256`. A download that fails, or whose digest differs once its last byte is
/// read, ends the stream with a terminator where no whole unit may end, so `consume` fails
/// rather than taking what arrived as complete.
pub(crate) async fn fetch_verified<T, Consumed>(
    sink: &BackupSink,
    key: &str,
    expected_sha256: &str,
    consume: impl FnOnce(tokio::io::DuplexStream) -> Consumed,
) -> Result<T, ArchiveError>
where
    Consumed: std::future::Future<Output = Result<T, ArchiveError>>,
{
    let (writer, reader) = tokio::io::duplex(1 << 20);
    let fetch = async move {
        let mut writer = writer;
        let fetched = sink.download(key, &mut writer, Some(expected_sha256)).await;
        if fetched.is_err() {
            let _ = writer.write_all(&TERMINATOR).await;
        }
        fetched
    };
    let (fetched, consumed) = tokio::join!(fetch, consume(reader));
    match fetched {
        // The consumer stopped reading on its own: its error says why.
        Err(BackupError::WriteDestination { .. }) => consumed,
        Err(error) => Err(ArchiveError::Fetch(error)),
        Ok(_) => consumed,
    }
}

/// An `int32`/`int64`/whole `double` as `i64`.
fn integer(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(value) => Some(i64::from(*value)),
        Bson::Int64(value) => Some(*value),
        Bson::Double(value) if value.fract() == 0.0 => Some(*value as i64),
        _ => None,
    }
}

fn count(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Writes bytes, counting and hashing every one: the byte layer of archives and oplog pieces.
pub(crate) struct HashingWriter<W: AsyncWrite + Unpin> {
    out: BufWriter<W>,
    hasher: Sha256,
    size: u64,
}

impl<W: AsyncWrite + Unpin> HashingWriter<W> {
    pub(crate) fn new(out: W) -> Self {
        Self {
            out: BufWriter::with_capacity(64 * 1024, out),
            hasher: Sha256::new(),
            size: 0,
        }
    }

    /// The bytes written so far.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    pub(crate) async fn raw(&mut self, bytes: &[u8]) -> Result<(), ArchiveError> {
        let written = self.size;
        self.out
            .write_all(bytes)
            .await
            .map_err(|source| ArchiveError::Write {
                bytes: written,
                source,
            })?;
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        Ok(())
    }

    pub(crate) async fn document(&mut self, document: &Document) -> Result<(), ArchiveError> {
        let mut bytes = Vec::new();
        document
            .to_writer(&mut bytes)
            .map_err(|error| ArchiveError::Write {
                bytes: self.size,
                source: io::Error::new(io::ErrorKind::InvalidData, error),
            })?;
        self.raw(&bytes).await
    }

    /// Flushes; returns the size and the SHA-256 of everything written.
    pub(crate) async fn finish(mut self) -> Result<(u64, String), ArchiveError> {
        let size = self.size;
        self.out
            .flush()
            .await
            .map_err(|source| ArchiveError::Write { bytes: size, source })?;
        Ok((size, hex::encode(self.hasher.finalize())))
    }
}

/// Writes an archive, counting what it holds.
struct ArchiveWriter<W: AsyncWrite + Unpin> {
    bytes: HashingWriter<W>,
    databases: BTreeSet<String>,
    collections: u64,
    documents: u64,
    /// The collection being written and how many of its documents were.
    open: Option<(CollectionHeader, u64)>,
}

impl<W: AsyncWrite + Unpin> ArchiveWriter<W> {
    async fn start(out: W, header: &ArchiveHeader) -> Result<Self, ArchiveError> {
        let mut writer = Self {
            bytes: HashingWriter::new(out),
            databases: BTreeSet::new(),
            collections: 0,
            documents: 0,
            open: None,
        };
        writer.bytes.document(&header.to_document()).await?;
        Ok(writer)
    }

    async fn begin_collection(&mut self, collection: &CollectionHeader) -> Result<(), ArchiveError> {
        debug_assert!(self.open.is_none(), "collections do not nest");
        self.bytes.document(&collection.to_document()).await?;
        self.open = Some((collection.clone(), 0));
        Ok(())
    }

    async fn document(&mut self, document: &RawDocument) -> Result<(), ArchiveError> {
        self.bytes.raw(document.as_bytes()).await?;
        if let Some((_, documents)) = &mut self.open {
            *documents += 1;
        }
        Ok(())
    }

    async fn end_collection(&mut self) -> Result<(), ArchiveError> {
        let Some((collection, documents)) = self.open.take() else {
            return Ok(());
        };
        self.bytes.raw(&TERMINATOR).await?;
        self.bytes
            .document(&doc! {
                "endOfCollection": {
                    "db": &collection.database,
                    "name": &collection.name,
                    "documents": count(documents),
                }
            })
            .await?;
        self.databases.insert(collection.database);
        self.collections += 1;
        self.documents += documents;
        Ok(())
    }

    /// Writes the trailer and flushes; returns the counts, size and SHA-256.
    async fn finish(mut self) -> Result<(Counts, u64, String), ArchiveError> {
        self.end_collection().await?;
        let counts = Counts {
            databases: self.databases.len() as u64,
            collections: self.collections,
            documents: self.documents,
        };
        self.bytes
            .document(&doc! {
                "end": true,
                "databases": count(counts.databases),
                "collections": count(counts.collections),
                "documents": count(counts.documents),
            })
            .await?;
        let (size, sha256) = self.bytes.finish().await?;
        Ok((counts, size, sha256))
    }
}

/// One unit of an archive stream.
enum Frame {
    Document(RawDocumentBuf),
    Terminator,
    /// The source ended cleanly between two units.
    End,
}

/// Reads an archive, checking its structure and counting what it holds.
struct ArchiveReader<R: AsyncRead + Unpin> {
    source: R,
    offset: u64,
    databases: BTreeSet<String>,
    collections: u64,
    documents: u64,
    /// The collection whose documents are being read, and how many were.
    open: Option<(CollectionHeader, u64)>,
    /// The trailer, once read.
    trailer: Option<Document>,
}

impl<R: AsyncRead + Unpin> ArchiveReader<R> {
    fn new(source: R) -> Self {
        Self {
            source,
            offset: 0,
            databases: BTreeSet::new(),
            collections: 0,
            documents: 0,
            open: None,
            trailer: None,
        }
    }

    fn malformed(&self, offset: u64, detail: impl Into<String>) -> ArchiveError {
        ArchiveError::Malformed {
            offset,
            detail: detail.into(),
        }
    }

    /// Fills `buffer` unless the source ends first; returns how much was read.
    async fn fill(&mut self, buffer: &mut [u8]) -> Result<usize, ArchiveError> {
        let mut filled = 0;
        while filled < buffer.len() {
            let read =
                self.source
                    .read(&mut buffer[filled..])
                    .await
                    .map_err(|source| ArchiveError::Read {
                        bytes: self.offset,
                        source,
                    })?;
            if read == 0 {
                break;
            }
            filled += read;
            self.offset += read as u64;
        }
        Ok(filled)
    }

    async fn frame(&mut self) -> Result<Frame, ArchiveError> {
        let start = self.offset;
        let mut length = [0u8; 4];
        match self.fill(&mut length).await? {
            0 => return Ok(Frame::End),
            4 => {}
            _ => return Err(ArchiveError::Truncated { bytes: self.offset }),
        }
        if length == TERMINATOR {
            return Ok(Frame::Terminator);
        }
        let length = i32::from_le_bytes(length);
        let length = usize::try_from(length)
            .ok()
            .filter(|length| (5..=MAX_DOCUMENT_BYTES).contains(length))
            .ok_or_else(|| self.malformed(start, format!("a document length of {length}")))?;
        let mut bytes = vec![0u8; length];
        bytes[..4].copy_from_slice(&(length as i32).to_le_bytes());
        if self.fill(&mut bytes[4..]).await? < length - 4 {
            return Err(ArchiveError::Truncated { bytes: self.offset });
        }
        RawDocumentBuf::from_bytes(bytes)
            .map(Frame::Document)
            .map_err(|error| self.malformed(start, error.to_string()))
    }

    /// The next unit, which must be a document (as a `Document`: a header, not user data).
    async fn control_document(&mut self) -> Result<(u64, Document), ArchiveError> {
        let start = self.offset;
        match self.frame().await? {
            Frame::Document(raw) => raw
                .to_document()
                .map(|document| (start, document))
                .map_err(|error| self.malformed(start, error.to_string())),
            Frame::Terminator => Err(self.malformed(start, "a terminator where a header belongs")),
            Frame::End => Err(ArchiveError::Truncated { bytes: self.offset }),
        }
    }

    async fn header(&mut self) -> Result<ArchiveHeader, ArchiveError> {
        let (start, document) = self.control_document().await?;
        ArchiveHeader::from_document(&document).map_err(|detail| self.malformed(start, detail))
    }

    /// The next collection's header, or `None` at the trailer.
    async fn next_collection(&mut self) -> Result<Option<CollectionHeader>, ArchiveError> {
        debug_assert!(self.open.is_none(), "the previous collection was read to its end");
        let (start, document) = self.control_document().await?;
        if let Ok(collection) = document.get_document("collection") {
            let collection = CollectionHeader::from_document(collection)
                .map_err(|detail| self.malformed(start, detail))?;
            self.open = Some((collection.clone(), 0));
            return Ok(Some(collection));
        }
        if document.get_bool("end") == Ok(true) {
            self.trailer = Some(document);
            return Ok(None);
        }
        Err(self.malformed(start, "neither a collection nor the trailer"))
    }

    /// The open collection's next document, or `None` once its end was read and its count
    /// checked.
    async fn next_document(&mut self) -> Result<Option<RawDocumentBuf>, ArchiveError> {
        let start = self.offset;
        match self.frame().await? {
            Frame::Document(document) => {
                if let Some((_, documents)) = &mut self.open {
                    *documents += 1;
                }
                Ok(Some(document))
            }
            Frame::End => Err(ArchiveError::Truncated { bytes: self.offset }),
            Frame::Terminator => {
                let (end_start, end) = self.control_document().await?;
                let Some((collection, documents)) = self.open.take() else {
                    return Err(self.malformed(start, "a terminator outside a collection"));
                };
                let end = end
                    .get_document("endOfCollection")
                    .map_err(|_| self.malformed(end_start, "no end of collection after its terminator"))?;
                if end.get_str("db") != Ok(collection.database.as_str())
                    || end.get_str("name") != Ok(collection.name.as_str())
                {
                    return Err(self.malformed(
                        end_start,
                        format!("the end of another collection than {}", collection.namespace()),
                    ));
                }
                let recorded = end.get("documents").and_then(integer).unwrap_or(-1);
                if recorded != count(documents) {
                    return Err(ArchiveError::CountMismatch {
                        what: format!("documents in {}", collection.namespace()),
                        recorded,
                        read: count(documents),
                    });
                }
                self.databases.insert(collection.database);
                self.collections += 1;
                self.documents += documents;
                Ok(None)
            }
        }
    }

    /// Checks that nothing follows what was read.
    async fn expect_end(&mut self) -> Result<(), ArchiveError> {
        let end = self.offset;
        let mut more = [0u8; 1];
        if self.fill(&mut more).await? > 0 {
            return Err(self.malformed(end, "bytes after the trailer"));
        }
        Ok(())
    }

    /// Checks the trailer's counts against what was read and that nothing follows it.
    async fn finish(mut self) -> Result<Counts, ArchiveError> {
        let Some(trailer) = self.trailer.take() else {
            return Err(self.malformed(self.offset, "the stream was not read to its trailer"));
        };
        let counts = Counts {
            databases: self.databases.len() as u64,
            collections: self.collections,
            documents: self.documents,
        };
        for (what, read) in [
            ("databases", counts.databases),
            ("collections", counts.collections),
            ("documents", counts.documents),
        ] {
            let recorded = trailer.get(what).and_then(integer).unwrap_or(-1);
            if recorded != count(read) {
                return Err(ArchiveError::CountMismatch {
                    what: what.to_string(),
                    recorded,
                    read: count(read),
                });
            }
        }
        self.expect_end().await?;
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> ArchiveHeader {
        ArchiveHeader {
            cluster_time: Timestamp {
                time: 1_763_000_000,
                increment: 7,
            },
            read_from: "main-1.main.prod.svc:27017".to_string(),
            read_level: ReadLevel::Majority,
            created_at: DateTime::from_millis(1_763_000_001_000),
        }
    }

    fn collection(database: &str, name: &str) -> CollectionHeader {
        CollectionHeader {
            database: database.to_string(),
            name: name.to_string(),
            options: doc! { "capped": true, "size": 4096_i64 },
            indexes: vec![
                doc! { "v": 2, "key": { "_id": 1 }, "name": "_id_" },
                doc! { "v": 2, "key": { "email": 1 }, "name": "email_1", "unique": true },
            ],
        }
    }

    fn raw(document: Document) -> RawDocumentBuf {
        RawDocumentBuf::from_document(&document).unwrap()
    }

    /// Two databases, three collections (one empty), three documents.
    fn contents() -> Vec<(CollectionHeader, Vec<RawDocumentBuf>)> {
        vec![
            (
                collection("shop", "orders"),
                vec![
                    raw(doc! { "_id": 1, "total": 12.5, "at": DateTime::from_millis(5) }),
                    raw(doc! { "_id": 2, "lines": [{ "sku": "a" }], "note": Bson::Null }),
                ],
            ),
            (collection("shop", "empty"), vec![]),
            (
                collection("users", "people"),
                vec![raw(doc! { "_id": "ada", "binary": bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic, bytes: vec![0, 1, 255] } })],
            ),
        ]
    }

    async fn write(contents: &[(CollectionHeader, Vec<RawDocumentBuf>)]) -> (Vec<u8>, Counts, String) {
        let mut bytes = Vec::new();
        let mut writer = ArchiveWriter::start(&mut bytes, &header()).await.unwrap();
        for (collection, documents) in contents {
            writer.begin_collection(collection).await.unwrap();
            for document in documents {
                writer.document(document).await.unwrap();
            }
            writer.end_collection().await.unwrap();
        }
        let (counts, size, sha256) = writer.finish().await.unwrap();
        assert_eq!(size, bytes.len() as u64);
        (bytes, counts, sha256)
    }

    type Read = (
        ArchiveHeader,
        Vec<(CollectionHeader, Vec<RawDocumentBuf>)>,
        Counts,
    );

    async fn read(bytes: &[u8]) -> Result<Read, ArchiveError> {
        let mut reader = ArchiveReader::new(bytes);
        let header = reader.header().await?;
        let mut collections = Vec::new();
        while let Some(collection) = reader.next_collection().await? {
            let mut documents = Vec::new();
            while let Some(document) = reader.next_document().await? {
                documents.push(document);
            }
            collections.push((collection, documents));
        }
        Ok((header, collections, reader.finish().await?))
    }

    #[tokio::test]
    async fn an_archive_reads_back_as_written() {
        let contents = contents();
        let (bytes, counts, sha256) = write(&contents).await;
        assert_eq!(
            counts,
            Counts {
                databases: 2,
                collections: 3,
                documents: 3
            }
        );
        assert_eq!(sha256, hex::encode(Sha256::digest(&bytes)));
        let (read_header, read_contents, read_counts) = read(&bytes).await.unwrap();
        assert_eq!(read_header, header());
        assert_eq!(read_contents, contents, "documents byte for byte, headers whole");
        assert_eq!(read_counts, counts);
    }

    #[tokio::test]
    async fn the_stream_is_bson_documents_and_one_terminator_per_collection() {
        let (bytes, _, _) = write(&contents()).await;
        let mut offset = 0;
        let mut documents = Vec::new();
        let mut terminators = 0;
        while offset < bytes.len() {
            let length = i32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap());
            if length == -1 {
                terminators += 1;
                offset += 4;
                continue;
            }
            let length = length as usize;
            documents.push(Document::from_reader(&bytes[offset..offset + length]).unwrap());
            offset += length;
        }
        assert_eq!(terminators, 3);
        assert_eq!(documents[0].get_str("format"), Ok(FORMAT));
        assert_eq!(
            documents[0].get_timestamp("clusterTime"),
            Ok(header().cluster_time)
        );
        assert!(documents[1].get_document("collection").is_ok());
        let trailer = documents.last().unwrap();
        assert_eq!(trailer.get_bool("end"), Ok(true));
        assert_eq!(trailer.get_i64("documents"), Ok(3));
        assert_eq!(trailer.get_i64("collections"), Ok(3));
        assert_eq!(trailer.get_i64("databases"), Ok(2));
    }

    #[tokio::test]
    async fn a_truncated_archive_is_refused_wherever_it_is_cut() {
        let (bytes, _, _) = write(&contents()).await;
        for cut in 0..bytes.len() {
            let error = read(&bytes[..cut]).await.expect_err("truncated");
            assert!(
                matches!(error, ArchiveError::Truncated { .. }),
                "cut at {cut}: {error}"
            );
        }
    }

    #[tokio::test]
    async fn counts_that_differ_from_the_stream_are_refused() {
        let (mut bytes, _, _) = write(&contents()).await;
        // The trailer is the last document; its documents count is the last int64 before the
        // final NUL.
        let at = bytes.len() - 1 - 8;
        assert_eq!(i64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()), 3);
        bytes[at..at + 8].copy_from_slice(&4_i64.to_le_bytes());
        let error = read(&bytes).await.expect_err("mismatch");
        assert!(
            matches!(&error, ArchiveError::CountMismatch { what, recorded: 4, read: 3 } if what == "documents"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_document_missing_from_a_collection_is_refused_at_its_end() {
        let mut contents = contents();
        let (complete, _, _) = write(&contents).await;
        let dropped = contents[0].1.remove(1);
        let (shorter, _, _) = write(&contents).await;
        assert!(shorter.len() < complete.len());
        // The first collection's documents without the second, before the complete end marker.
        let position = complete
            .windows(dropped.as_bytes().len())
            .position(|window| window == dropped.as_bytes())
            .unwrap();
        let mut spliced = complete[..position].to_vec();
        spliced.extend_from_slice(&complete[position + dropped.as_bytes().len()..]);
        let error = read(&spliced).await.expect_err("a document is missing");
        assert!(
            matches!(&error, ArchiveError::CountMismatch { what, recorded: 2, read: 1 } if what == "documents in shop.orders"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn anything_after_the_trailer_is_refused() {
        let (mut bytes, _, _) = write(&contents()).await;
        bytes.extend_from_slice(&TERMINATOR);
        let error = read(&bytes).await.expect_err("trailing bytes");
        assert!(
            matches!(&error, ArchiveError::Malformed { detail, .. } if detail == "bytes after the trailer"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn other_streams_are_not_archives() {
        let foreign = bson::to_vec(&doc! { "format": "something-else", "version": 1 }).unwrap();
        assert!(matches!(
            read(&foreign).await,
            Err(ArchiveError::Malformed { offset: 0, .. })
        ));
        let newer = bson::to_vec(&doc! { "format": FORMAT, "version": 2 }).unwrap();
        let error = read(&newer).await.expect_err("a newer version");
        assert!(error.to_string().contains("version"), "{error}");
        let garbage = b"REDIS0011 not bson at all";
        assert!(matches!(read(garbage).await, Err(ArchiveError::Malformed { .. })));
        assert!(matches!(
            read(b"").await,
            Err(ArchiveError::Truncated { bytes: 0 })
        ));
    }

    #[test]
    fn restores_create_secondary_indexes_only() {
        let indexes = [
            doc! { "v": 2, "key": { "_id": 1 }, "name": "_id_", "ns": "shop.orders" },
            doc! { "v": 2, "key": { "email": 1 }, "name": "email_1", "unique": true, "ns": "shop.orders" },
            doc! { "v": 2, "key": { "_id": 1 }, "name": "clustered", "clustered": true, "unique": true },
        ];
        assert_eq!(
            secondary_indexes(&indexes),
            vec![Bson::Document(
                doc! { "v": 2, "key": { "email": 1 }, "name": "email_1", "unique": true }
            )]
        );
    }

    #[test]
    fn cluster_times_show_as_seconds_dot_increment() {
        assert_eq!(cluster_time_text(header().cluster_time), "1763000000.7");
    }
}
