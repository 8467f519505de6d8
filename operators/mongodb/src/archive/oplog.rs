//! The oplog archived for point-in-time recovery: [`archive_oplog`] reads a member's
//! majority-committed oplog entries after a position into a stream, [`replay_oplog`] applies
//! such a stream's entries up to a time to a replica set with `applyOps`, as `mongorestore
//! --oplogReplay` does. No Kubernetes here: the backup controller picks the member and the
//! store, the restore the pieces.
//!
//! # What a piece holds
//! Every entry of the member's oplog after `after` up to `through`, the member's majority
//! commit point when the read began, as the server stored it (the bytes are copied), in the
//! oplog's order. Only committed entries: a failover cannot roll back what a piece holds. A
//! piece whose `after` the member's oplog no longer holds would miss what was purged in
//! between: [`archive_oplog`] refuses it ([`ArchiveError::OplogGap`]) before writing anything.
//!
//! # Replay
//! Oplog entries are idempotent as the server applies them (an insert of a document that exists
//! replaces it, an update carries what to set), so entries a fuzzy snapshot already holds can be
//! applied again: a restore replays from the snapshot's cluster time. Entries on `admin`,
//! `local` and `config` and no-op entries are skipped, as the snapshot leaves those databases
//! out.
//!
//! # Format (version 1)
//! The archive's framing (each BSON document self-delimited, `ff ff ff ff` ending the entries):
//!
//! ```text
//! piece   := {format: "quorum-mongodb-oplog", version: 1, after: Timestamp,
//!             readFrom: "host:port", createdAt: Date}
//!            entry*                        (as stored, in oplog order)
//!            ff ff ff ff
//!            {end: true, entries: Int64, through: Timestamp}
//! ```

use bson::{Bson, DateTime, Document, RawDocumentBuf, Timestamp, doc};
use mongodb::Client;
use quorum_core::backup::{BackupError, BackupSink};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};

use super::{
    ArchiveError, ArchiveReader, BATCH_BYTES, BATCH_DOCUMENTS, Frame, ReadLevel, SYSTEM_DATABASES,
    TERMINATOR, count, from_this_member, integer, operation_time,
};

/// The `format` of a piece's header.
pub const FORMAT: &str = "quorum-mongodb-oplog";
/// The format version this code writes and reads.
pub const VERSION: i32 = 1;
/// The extension pieces are stored under.
pub const EXTENSION: &str = "oplog";

/// What [`archive_oplog`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct ArchivedOplog {
    pub after: Timestamp,
    /// Every committed entry up to this one is in the piece (or, when it equals `after`, there
    /// was none after it).
    pub through: Timestamp,
    pub entries: u64,
    /// Bytes written and their SHA-256, lowercase hex.
    pub size: u64,
    pub sha256: String,
}

/// What [`replay_oplog`] read and applied.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplaySummary {
    /// Entries applied (user databases, at or before the stop).
    pub applied: u64,
    /// The newest entry at or before the stop, applied or skipped: where the set now is.
    pub reached: Option<Timestamp>,
    /// The piece held an entry past the stop: the restore ends with this piece.
    pub stopped: bool,
}

/// `seconds.increment`, as statuses show an oplog position.
pub fn position_text(time: Timestamp) -> String {
    super::cluster_time_text(time)
}

/// Reads `seconds.increment`.
pub fn parse_position(text: &str) -> Option<Timestamp> {
    let (time, increment) = text.split_once('.')?;
    Some(Timestamp {
        time: time.parse().ok()?,
        increment: increment.parse().ok()?,
    })
}

/// Orders timestamps as the oplog does.
fn key(time: Timestamp) -> (u32, u32) {
    (time.time, time.increment)
}

/// Writes the committed oplog entries of the member behind `client` after `after` into `sink`
/// (see the module's documentation). `client` is a direct connection to the member.
///
/// # Errors
/// [`ArchiveError::OplogGap`] when the member's oplog no longer holds `after` (nothing is
/// written); [`ArchiveError::Server`] for a refused read; [`ArchiveError::Write`] when `sink`
/// fails (what was written then has no trailer and is refused by a reader).
pub async fn archive_oplog<W: AsyncWrite + Unpin>(
    client: &Client,
    after: Timestamp,
    sink: W,
) -> Result<ArchivedOplog, ArchiveError> {
    let admin = client.database("admin");
    let (read_from, committed) = operation_time(&admin, ReadLevel::Majority).await?;
    let oplog = client.database("local").collection::<RawDocumentBuf>("oplog.rs");
    let server = |operation: &'static str| {
        move |source| ArchiveError::Server {
            operation: operation.to_string(),
            source,
        }
    };
    // The oldest entry still held must be at or before `after`, or entries were purged.
    let oldest = oplog
        .find_one(doc! {})
        .selection_criteria(from_this_member())
        .await
        .map_err(server("reading the oldest oplog entry"))?
        .and_then(|entry| entry.get_timestamp("ts").ok());
    match oldest {
        Some(oldest) if key(oldest) <= key(after) => {}
        oldest => {
            return Err(ArchiveError::OplogGap {
                after: position_text(after),
                oldest: oldest.map_or_else(|| "none".to_string(), position_text),
            });
        }
    }
    let through = if key(committed) > key(after) {
        committed
    } else {
        after
    };
    let mut out = PieceWriter::new(sink);
    out.document(&doc! {
        "format": FORMAT,
        "version": VERSION,
        "after": after,
        "readFrom": &read_from,
        "createdAt": DateTime::now(),
    })
    .await?;
    let mut entries = 0u64;
    if key(through) > key(after) {
        let mut cursor = oplog
            .find(doc! { "ts": { "$gt": after, "$lte": through } })
            .selection_criteria(from_this_member())
            .await
            .map_err(server("reading the oplog"))?;
        let mut previous = after;
        while cursor.advance().await.map_err(server("reading the oplog"))? {
            let entry = cursor.current();
            let ts = entry
                .get_timestamp("ts")
                .ok()
                .filter(|ts| key(*ts) > key(previous))
                .ok_or_else(|| ArchiveError::Malformed {
                    offset: out.size,
                    detail: format!(
                        "{FORMAT}: an oplog entry out of order after {}",
                        position_text(previous)
                    ),
                })?;
            previous = ts;
            out.raw(entry.as_bytes()).await?;
            entries += 1;
        }
    }
    out.raw(&TERMINATOR).await?;
    out.document(&doc! { "end": true, "entries": count(entries), "through": through })
        .await?;
    let (size, sha256) = out.finish().await?;
    Ok(ArchivedOplog {
        after,
        through,
        entries,
        size,
        sha256,
    })
}

/// Applies the entries of the piece `source` at or before `stop_second` (whole seconds since
/// the epoch) to the replica set behind `client` (its primary), in batches, each committed by a
/// majority before the next (see the module's documentation). Reads the piece to its trailer
/// whether or not it stops early, so a truncated or altered piece is an error.
///
/// # Errors
/// [`ArchiveError::Truncated`], [`ArchiveError::Malformed`], [`ArchiveError::CountMismatch`]
/// and [`ArchiveError::Read`] for a stream that is not a whole piece; [`ArchiveError::Server`]
/// for a refused `applyOps`. Entries applied before an error stay applied.
pub async fn replay_oplog<R: AsyncRead + Unpin>(
    client: &Client,
    source: R,
    stop_second: u32,
) -> Result<ReplaySummary, ArchiveError> {
    let mut reader = ArchiveReader::new(source);
    let (start, header) = reader.control_document().await?;
    if header.get_str("format") != Ok(FORMAT)
        || header.get("version").and_then(integer) != Some(i64::from(VERSION))
    {
        return Err(ArchiveError::Malformed {
            offset: start,
            detail: format!("the header is not a {FORMAT} version {VERSION} header"),
        });
    }
    let mut summary = ReplaySummary {
        applied: 0,
        reached: None,
        stopped: false,
    };
    let mut read = 0u64;
    let mut batch: Vec<Document> = Vec::new();
    let mut batch_bytes = 0;
    loop {
        let offset = reader.offset;
        let entry = match reader.frame().await? {
            Frame::Document(entry) => entry,
            Frame::Terminator => break,
            Frame::End => return Err(ArchiveError::Truncated { bytes: reader.offset }),
        };
        read += 1;
        let malformed = |detail: String| ArchiveError::Malformed { offset, detail };
        let ts = entry
            .get_timestamp("ts")
            .ok()
            .ok_or_else(|| malformed(format!("{FORMAT}: an entry without a timestamp")))?;
        if ts.time > stop_second {
            summary.stopped = true;
            continue;
        }
        summary.reached = Some(ts);
        let entry = entry
            .to_document()
            .map_err(|error| malformed(error.to_string()))?;
        if !replayed(&entry) {
            continue;
        }
        batch_bytes += entry_size(&entry);
        batch.push(entry);
        if batch.len() >= BATCH_DOCUMENTS || batch_bytes >= BATCH_BYTES {
            summary.applied += apply(client, &mut batch).await?;
            batch_bytes = 0;
        }
    }
    let (trailer_start, trailer) = reader.control_document().await?;
    if trailer.get_bool("end") != Ok(true) {
        return Err(ArchiveError::Malformed {
            offset: trailer_start,
            detail: format!("{FORMAT}: no trailer after the entries"),
        });
    }
    let recorded = trailer.get("entries").and_then(integer).unwrap_or(-1);
    if recorded != count(read) {
        return Err(ArchiveError::CountMismatch {
            what: "oplog entries".to_string(),
            recorded,
            read: count(read),
        });
    }
    reader.expect_end().await?;
    summary.applied += apply(client, &mut batch).await?;
    Ok(summary)
}

/// Whether replay applies `entry`: a change to a user database.
fn replayed(entry: &Document) -> bool {
    let namespace = entry.get_str("ns").unwrap_or_default();
    let database = namespace
        .split_once('.')
        .map_or(namespace, |(database, _)| database);
    entry.get_str("op") != Ok("n") && !database.is_empty() && !SYSTEM_DATABASES.contains(&database)
}

fn entry_size(entry: &Document) -> usize {
    bson::to_vec(entry).map_or(0, |bytes| bytes.len())
}

/// Applies and empties `batch`; returns how many entries it held.
async fn apply(client: &Client, batch: &mut Vec<Document>) -> Result<u64, ArchiveError> {
    if batch.is_empty() {
        return Ok(0);
    }
    let entries: Vec<Bson> = batch.drain(..).map(Bson::Document).collect();
    let applied = entries.len() as u64;
    client
        .database("admin")
        .run_command(doc! {
            "applyOps": entries,
            "writeConcern": { "w": "majority" },
        })
        .await
        .map_err(|source| ArchiveError::Server {
            operation: "applying oplog entries (applyOps)".to_string(),
            source,
        })?;
    Ok(applied)
}

/// Replays the piece `key` of `sink` (see [`replay_oplog`]), streamed from the store and
/// verified against `expected_sha256`: a piece whose bytes differ is an error once its last
/// byte is read (the entries before it were applied).
///
/// # Errors
/// [`ArchiveError::Fetch`] for a missing or unreadable object or a digest that differs; the
/// errors of [`replay_oplog`] otherwise.
pub async fn replay_stored(
    client: &Client,
    sink: &BackupSink,
    key: &str,
    expected_sha256: &str,
    stop_second: u32,
) -> Result<ReplaySummary, ArchiveError> {
    let (writer, reader) = tokio::io::duplex(1 << 20);
    let fetch = async move {
        let mut writer = writer;
        let fetched = sink.download(key, &mut writer, Some(expected_sha256)).await;
        if fetched.is_err() {
            let _ = writer.write_all(&TERMINATOR).await;
        }
        fetched
    };
    let (fetched, replayed) = tokio::join!(fetch, replay_oplog(client, reader, stop_second));
    match fetched {
        Err(BackupError::WriteDestination { .. }) => replayed,
        Err(error) => Err(ArchiveError::Fetch(error)),
        Ok(_) => replayed,
    }
}

/// Writes a piece, counting and hashing every byte.
struct PieceWriter<W: AsyncWrite + Unpin> {
    out: BufWriter<W>,
    hasher: Sha256,
    size: u64,
}

impl<W: AsyncWrite + Unpin> PieceWriter<W> {
    fn new(out: W) -> Self {
        Self {
            out: BufWriter::with_capacity(64 * 1024, out),
            hasher: Sha256::new(),
            size: 0,
        }
    }

    async fn raw(&mut self, bytes: &[u8]) -> Result<(), ArchiveError> {
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

    async fn document(&mut self, document: &Document) -> Result<(), ArchiveError> {
        let bytes = bson::to_vec(document).map_err(|error| ArchiveError::Write {
            bytes: self.size,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, error),
        })?;
        self.raw(&bytes).await
    }

    async fn finish(mut self) -> Result<(u64, String), ArchiveError> {
        let size = self.size;
        self.out
            .flush()
            .await
            .map_err(|source| ArchiveError::Write { bytes: size, source })?;
        Ok((size, hex::encode(self.hasher.finalize())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_read_back_as_written_and_order_by_seconds_then_increment() {
        let time = Timestamp {
            time: 1_700_000_000,
            increment: 7,
        };
        assert_eq!(parse_position(&position_text(time)), Some(time));
        assert_eq!(parse_position("17"), None);
        assert_eq!(parse_position("a.b"), None);
        assert!(
            key(Timestamp {
                time: 5,
                increment: 9
            }) < key(Timestamp {
                time: 6,
                increment: 1
            })
        );
    }

    #[test]
    fn only_changes_to_user_databases_are_replayed() {
        let entry = |op: &str, ns: &str| doc! { "op": op, "ns": ns, "o": {} };
        assert!(replayed(&entry("i", "shop.orders")));
        assert!(replayed(&entry("c", "shop.$cmd")));
        assert!(!replayed(&entry("n", "")));
        assert!(!replayed(&entry("i", "admin.system.users")));
        assert!(!replayed(&entry("i", "config.system.sessions")));
        assert!(!replayed(&entry("u", "local.system.replset")));
    }
}
