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
//! A restore replays the entries after the snapshot's cluster time (the snapshot holds every
//! entry up to it). Oplog entries are idempotent as the server applies them (an insert of a
//! document that exists replaces it, an update carries what to set), so the entries a fuzzy
//! snapshot also holds apply again harmlessly. [`replay_actions`] says what each entry takes:
//! changes to user databases, those inside a committed transaction included; `admin`, `local`
//! and `config` are left out as the snapshot leaves them out.
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
use quorum_core::backup::BackupSink;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{
    ArchiveError, ArchiveReader, BATCH_BYTES, BATCH_DOCUMENTS, Frame, HashingWriter, ReadLevel,
    SYSTEM_DATABASES, TERMINATOR, count, fetch_verified, from_this_member, integer, operation_time,
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
    match oldest_entry(&oplog).await? {
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
    let mut out = HashingWriter::new(sink);
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
                    offset: out.size(),
                    detail: format!(
                        "{FORMAT}: an oplog entry out of order after {}",
                        position_text(previous)
                    ),
                })?;
            previous = ts;
            out.raw(entry.as_bytes()).await?;
            entries += 1;
        }
        // Entries purged while they were read, or a commit point the member no longer holds,
        // would leave a piece short of what it claims.
        let oldest_after = oldest_entry(&oplog).await?;
        if previous != through || oldest_after.is_none_or(|oldest| key(oldest) > key(after)) {
            return Err(ArchiveError::OplogGap {
                after: position_text(after),
                oldest: format!(
                    "{} (the read ended at {}, short of the commit point {})",
                    oldest_after.map_or_else(|| "none".to_string(), position_text),
                    position_text(previous),
                    position_text(through)
                ),
            });
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

/// The position of the oldest entry the member's oplog holds.
async fn oldest_entry(
    oplog: &mongodb::Collection<RawDocumentBuf>,
) -> Result<Option<Timestamp>, ArchiveError> {
    Ok(oplog
        .find_one(doc! {})
        .selection_criteria(from_this_member())
        .await
        .map_err(|source| ArchiveError::Server {
            operation: "reading the oldest oplog entry".to_string(),
            source,
        })?
        .and_then(|entry| entry.get_timestamp("ts").ok()))
}

/// The member's majority commit point: a snapshot read before it returns holds nothing later.
///
/// # Errors
/// As [`archive_oplog`]'s reads.
pub async fn committed_position(client: &Client) -> Result<Timestamp, ArchiveError> {
    operation_time(&client.database("admin"), ReadLevel::Majority)
        .await
        .map(|(_, time)| time)
}

/// Applies the entries of the piece `source` after `start` (the snapshot's cluster time: it
/// holds every entry up to it) and at or before `stop_second` (whole seconds since the epoch) to
/// the replica set behind `client` (its primary), in batches, each committed by a majority
/// before the next (see the module's documentation and [`replay_actions`]). Reads the piece to
/// its trailer whether or not it stops early, so a truncated or altered piece is an error.
///
/// # Errors
/// [`ArchiveError::Truncated`], [`ArchiveError::Malformed`], [`ArchiveError::CountMismatch`]
/// and [`ArchiveError::Read`] for a stream that is not a whole piece; [`ArchiveError::Server`]
/// for a refused `applyOps`. Entries applied before an error stay applied.
pub async fn replay_oplog<R: AsyncRead + Unpin>(
    client: &Client,
    source: R,
    start: Timestamp,
    stop_second: u32,
) -> Result<ReplaySummary, ArchiveError> {
    let mut reader = ArchiveReader::new(source);
    let (header_offset, header) = reader.control_document().await?;
    if header.get_str("format") != Ok(FORMAT)
        || header.get("version").and_then(integer) != Some(i64::from(VERSION))
    {
        return Err(ArchiveError::Malformed {
            offset: header_offset,
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
        if key(ts) <= key(start) {
            continue;
        }
        let entry = entry
            .to_document()
            .map_err(|error| malformed(error.to_string()))?;
        for action in replay_actions(&entry).map_err(|detail| malformed(format!("{FORMAT}: {detail}")))? {
            match action {
                Replay::Apply(entry) => {
                    batch_bytes += entry_size(&entry);
                    batch.push(entry);
                    if batch.len() >= BATCH_DOCUMENTS || batch_bytes >= BATCH_BYTES {
                        summary.applied += apply(client, &mut batch).await?;
                        batch_bytes = 0;
                    }
                }
                Replay::Command { database, command } => {
                    // In order: what was batched before it first.
                    summary.applied += apply(client, &mut batch).await?;
                    batch_bytes = 0;
                    run_command(client, &database, command).await?;
                    summary.applied += 1;
                }
            }
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

/// What replaying one stored entry does.
#[derive(Clone, Debug, PartialEq)]
pub enum Replay {
    /// An entry for `applyOps`.
    Apply(Document),
    /// A command `applyOps` does not take (an index build), run on `database` in its place.
    Command { database: String, command: Document },
}

/// What replaying `entry` takes, in order (pure): nothing for no-ops and for `admin`, `local`
/// and `config` (they belong to the new set); each change of a committed transaction (logged
/// as one `applyOps` command on `admin`) as its own entry; an index build's commit as
/// `createIndexes` (the server refuses index builds in `applyOps`), its start and abort as
/// nothing; any other change as the entry without `ui`, the source collection's UUID, which the
/// restored collection does not have (as `mongorestore --oplogReplay` does).
///
/// # Errors
/// An entry a replay cannot apply exactly: a prepared transaction, or part of a transaction too
/// large for one entry (`partialTxn`), which is refused rather than skipped.
pub fn replay_actions(entry: &Document) -> Result<Vec<Replay>, String> {
    let op = entry.get_str("op").unwrap_or_default();
    let namespace = entry.get_str("ns").unwrap_or_default();
    let (database, collection) = namespace.split_once('.').unwrap_or((namespace, ""));
    let object = entry.get_document("o").ok();
    let transaction = entry.get_bool("partialTxn") == Ok(true)
        || object.is_some_and(|o| o.get_bool("partialTxn") == Ok(true) || o.get_bool("prepare") == Ok(true))
        || object.is_some_and(|o| o.contains_key("commitTransaction") || o.contains_key("abortTransaction"));
    if transaction {
        return Err(format!(
            "a prepared or multi-entry transaction at {}; this replay applies transactions committed in one entry only",
            entry
                .get_timestamp("ts")
                .map_or_else(|_| "?".to_string(), position_text)
        ));
    }
    if op == "n" || database.is_empty() {
        return Ok(Vec::new());
    }
    if op == "c" && database == "admin" && collection == "$cmd" {
        let Some(Ok(inner)) = object.map(|o| o.get_array("applyOps")) else {
            return Ok(Vec::new());
        };
        let mut actions = Vec::new();
        for nested in inner {
            let nested = nested
                .as_document()
                .ok_or("a transaction's applyOps holds something other than entries")?;
            actions.extend(replay_actions(nested)?);
        }
        return Ok(actions);
    }
    if SYSTEM_DATABASES.contains(&database) {
        return Ok(Vec::new());
    }
    if op == "c"
        && let Some(object) = object
    {
        if object.contains_key("startIndexBuild") || object.contains_key("abortIndexBuild") {
            return Ok(Vec::new());
        }
        let build = object
            .get_str("commitIndexBuild")
            .ok()
            .or_else(|| object.get_str("createIndexes").ok());
        if let Some(target) = build {
            let indexes = match object.get_array("indexes") {
                Ok(indexes) => indexes.clone(),
                // createIndexes logs one index, its specification beside the name.
                Err(_) => {
                    let mut spec = object.clone();
                    spec.remove("createIndexes");
                    vec![Bson::Document(spec)]
                }
            };
            return Ok(vec![Replay::Command {
                database: database.to_string(),
                command: doc! { "createIndexes": target, "indexes": indexes },
            }]);
        }
    }
    let mut entry = entry.clone();
    entry.remove("ui");
    Ok(vec![Replay::Apply(entry)])
}

async fn run_command(client: &Client, database: &str, mut command: Document) -> Result<(), ArchiveError> {
    let name = command.keys().next().cloned().unwrap_or_default();
    command.insert("writeConcern", doc! { "w": "majority" });
    client
        .database(database)
        .run_command(command)
        .await
        .map(|_| ())
        .map_err(|source| ArchiveError::Server {
            operation: format!("replaying {name} on {database}"),
            source,
        })
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
    start: Timestamp,
    stop_second: u32,
) -> Result<ReplaySummary, ArchiveError> {
    fetch_verified(sink, key, expected_sha256, |reader| {
        replay_oplog(client, reader, start, stop_second)
    })
    .await
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
    fn a_replay_applies_user_changes_unwraps_transactions_builds_indexes_and_refuses_what_it_cannot() {
        let uuid = bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: vec![7; 16],
        };
        let insert = doc! { "op": "i", "ns": "shop.orders", "ui": uuid.clone(), "o": { "_id": 1 }, "ts": Timestamp { time: 5, increment: 1 } };
        let without_ui = doc! { "op": "i", "ns": "shop.orders", "o": { "_id": 1 }, "ts": Timestamp { time: 5, increment: 1 } };
        let cases: Vec<(Document, Result<Vec<Replay>, &str>)> = vec![
            (insert.clone(), Ok(vec![Replay::Apply(without_ui.clone())])),
            (
                doc! { "op": "n", "ns": "", "o": { "msg": "periodic noop" } },
                Ok(vec![]),
            ),
            (
                doc! { "op": "i", "ns": "admin.system.users", "o": { "_id": "x" } },
                Ok(vec![]),
            ),
            (
                doc! { "op": "i", "ns": "config.system.sessions", "o": { "_id": "x" } },
                Ok(vec![]),
            ),
            (
                doc! { "op": "u", "ns": "local.system.replset", "o": {} },
                Ok(vec![]),
            ),
            // A committed transaction: its user changes, each its own entry.
            (
                doc! { "op": "c", "ns": "admin.$cmd", "o": { "applyOps": [
                    insert.clone(),
                    { "op": "i", "ns": "config.transactions", "o": { "_id": 2 } },
                ] } },
                Ok(vec![Replay::Apply(without_ui)]),
            ),
            (
                doc! { "op": "c", "ns": "shop.$cmd", "o": { "commitIndexBuild": "orders", "indexBuildUUID": uuid.clone(),
                "indexes": [{ "v": 2, "key": { "item": 1 }, "name": "item_1" }] } },
                Ok(vec![Replay::Command {
                    database: "shop".into(),
                    command: doc! { "createIndexes": "orders", "indexes": [{ "v": 2, "key": { "item": 1 }, "name": "item_1" }] },
                }]),
            ),
            (
                doc! { "op": "c", "ns": "shop.$cmd", "o": { "startIndexBuild": "orders" } },
                Ok(vec![]),
            ),
            (
                doc! { "op": "c", "ns": "shop.$cmd", "ui": uuid.clone(), "o": { "create": "late" } },
                Ok(vec![Replay::Apply(
                    doc! { "op": "c", "ns": "shop.$cmd", "o": { "create": "late" } },
                )]),
            ),
            (
                doc! { "op": "c", "ns": "admin.$cmd", "o": { "applyOps": [], "partialTxn": true } },
                Err("a prepared or multi-entry transaction"),
            ),
            (
                doc! { "op": "c", "ns": "admin.$cmd", "o": { "applyOps": [], "prepare": true } },
                Err("a prepared or multi-entry transaction"),
            ),
            (
                doc! { "op": "c", "ns": "admin.$cmd", "o": { "commitTransaction": 1 } },
                Err("a prepared or multi-entry transaction"),
            ),
        ];
        for (entry, expected) in cases {
            match (replay_actions(&entry), expected) {
                (Ok(actions), Ok(expected)) => assert_eq!(actions, expected, "{entry}"),
                (Err(message), Err(start)) => assert!(message.starts_with(start), "{entry}: {message}"),
                (actions, expected) => panic!("{entry}: {actions:?}, expected {expected:?}"),
            }
        }
    }
}
