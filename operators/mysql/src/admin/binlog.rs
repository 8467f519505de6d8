//! The binary log, archived and replayed: point-in-time recovery (MariaDB).
//!
//! **Archive.** [`archive_binlog`] reads a member's binary log from just after a GTID position
//! to its current end, as a replica does (MariaDB's GTID dump, non-blocking: it ends where the
//! log ends, always on a transaction boundary), checks every event's CRC32, and writes it as a
//! binary log file: the four magic bytes, then each event as the server wrote it. `mariadb-binlog
//! FILE` reads it. What it holds is summed up in an [`ArchivedBinlog`]: the positions it
//! continues from and reaches, its transactions, and the times of its first and last.
//!
//! **Replay.** [`replay_binlog`] applies such a file to a member through its SQL interface, the
//! way `mariadb-binlog | mariadb` would: row changes as `BINLOG` statements (the server applies
//! the events themselves), statements (DDL) with the session settings they were logged with,
//! each transaction under its own GTID and time, so the member's history continues exactly as
//! the source's did. It skips the transactions the member already holds and stops before the
//! first transaction past a [`ReplayStop`]: a time (the transaction's GTID event was written
//! after it) or a GTID position (the transaction is not in it).
//!
//! Anything it cannot replay exactly is refused, never skipped: statement-based events
//! (`INTVAR`, `RAND`, `USER_VAR`: the servers log rows), XA transactions, an incident, an
//! encrypted log, a session setting it does not know.

use std::collections::BTreeMap;

use base64::Engine;
use futures::StreamExt;
use jiff::Timestamp;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStreamRequest, Conn};
use mysql_common::binlog::consts::{BinlogChecksumAlg, BinlogVersion};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::dialect::{quote_identifier, quote_literal};
use super::gtid::{GtidPosition, MariaDbGtid};
use super::{AdminError, MySqlAdmin, classify};

/// The first four bytes of every binary log file.
pub const MAGIC: [u8; 4] = [0xfe, b'b', b'i', b'n'];
const HEADER_LEN: usize = 19;
const CHECKSUM_LEN: usize = 4;
/// An event the server made up for the stream (the rotate to the first file), not in the log.
const ARTIFICIAL: u16 = 0x20;

/// Event type codes (MySQL's and MariaDB's `Log_event_type`).
mod event {
    pub const QUERY: u8 = 2;
    pub const STOP: u8 = 3;
    pub const ROTATE: u8 = 4;
    pub const INTVAR: u8 = 5;
    pub const RAND: u8 = 13;
    pub const USER_VAR: u8 = 14;
    pub const FORMAT_DESCRIPTION: u8 = 15;
    pub const XID: u8 = 16;
    pub const TABLE_MAP: u8 = 19;
    pub const WRITE_ROWS_V1: u8 = 23;
    pub const DELETE_ROWS_V1: u8 = 25;
    pub const INCIDENT: u8 = 26;
    pub const HEARTBEAT: u8 = 27;
    pub const WRITE_ROWS: u8 = 30;
    pub const DELETE_ROWS: u8 = 32;
    pub const ANNOTATE_ROWS: u8 = 160;
    pub const BINLOG_CHECKPOINT: u8 = 161;
    pub const GTID: u8 = 162;
    pub const GTID_LIST: u8 = 163;
    pub const START_ENCRYPTION: u8 = 164;
    pub const QUERY_COMPRESSED: u8 = 165;
    pub const WRITE_ROWS_COMPRESSED_V1: u8 = 169;
    pub const DELETE_ROWS_COMPRESSED_V1: u8 = 171;
}

/// What an archived piece of the binary log holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivedBinlog {
    /// The position it continues from: it holds only transactions after it.
    pub after: GtidPosition,
    /// `after` with every transaction it holds: where the next piece continues from.
    pub through: GtidPosition,
    pub transactions: u64,
    /// When its first and last transactions were written (their GTID events), to the second.
    pub first_time: Option<Timestamp>,
    pub last_time: Option<Timestamp>,
    /// Bytes written, and their SHA-256 (hex).
    pub bytes: u64,
    pub sha256: String,
}

/// Where a replay stops: before the first transaction past it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayStop {
    /// Transactions whose GTID event was written at or before this time are applied.
    Time(Timestamp),
    /// Transactions in this position are applied.
    Position(GtidPosition),
}

/// What a replay applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replayed {
    /// Transactions applied (those the member already held are not counted).
    pub applied: u64,
    /// The member's position after the replay, as the replay tracked it.
    pub through: GtidPosition,
    /// A transaction past the stop was read: the stop lies inside what was replayed, so the
    /// member now holds exactly the transactions up to it.
    pub reached_stop: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum BinlogError {
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// The member's binary log no longer holds the position to continue from (purged, or the
    /// member is not the one the position came from): the archive has a gap from there.
    #[error("the binary log no longer holds GTID position {after}: {message}")]
    Gap { after: String, message: String },
    /// Bytes that are not the binary log they claim to be.
    #[error("not a usable binary log: {0}")]
    Corrupt(String),
    /// Something this archive or replay does not handle exactly; nothing after it was applied.
    #[error("not supported: {0}")]
    Unsupported(String),
    #[error("writing the archive: {0}")]
    Write(#[source] std::io::Error),
    #[error("reading the archive: {0}")]
    Read(#[source] std::io::Error),
    /// The member refused transaction `gtid`; it was rolled back, those before it are applied.
    #[error("replaying transaction {gtid}: {source}")]
    Replay {
        gtid: String,
        #[source]
        source: AdminError,
    },
}

/// A server id for the archive's dump connection: the server drops an older connection with
/// the same id, so it must be no member's (they number from 1) and no other archive's.
fn dump_server_id() -> u32 {
    rand::random_range(0x4000_0000..u32::MAX)
}

/// Writes the member's binary log after `after` up to its current end to `writer`.
///
/// # Errors
/// [`BinlogError::Gap`] when the log no longer holds `after`; `Corrupt` for an event whose
/// checksum does not match; `Admin` when the member is unreachable or refuses (the account
/// needs `REPLICATION SLAVE`); `Unsupported` for a MySQL member. What was written is then
/// incomplete.
pub async fn archive_binlog(
    admin: &MySqlAdmin,
    after: &GtidPosition,
    writer: impl AsyncWrite + Unpin,
) -> Result<ArchivedBinlog, BinlogError> {
    let GtidPosition::MariaDb(start) = after else {
        return Err(BinlogError::Unsupported(
            "binary log archiving is MariaDB's only".to_string(),
        ));
    };
    let mut conn = admin.dedicated_connection().await?;
    for statement in [
        "SET @mariadb_slave_capability = 4".to_string(),
        format!("SET @slave_connect_state = {}", quote_literal(&after.to_string())),
        "SET @slave_gtid_strict_mode = 1".to_string(),
    ] {
        conn.query_drop(statement)
            .await
            .map_err(|e| classify(e, "binary log dump session", None))?;
    }
    let request = BinlogStreamRequest::new(dump_server_id()).with_non_blocking();
    let mut stream = conn
        .get_binlog_stream(request)
        .await
        .map_err(|e| classify(e, "binary log dump", None))?;
    let mut out = Hashed::new(writer);
    out.write(&MAGIC).await?;
    let mut through = start.clone();
    let (mut transactions, mut first_time, mut last_time) = (0u64, None, None);
    loop {
        let next = tokio::time::timeout(admin.statement_timeout, stream.next())
            .await
            .map_err(|_| {
                AdminError::Unreachable(format!(
                    "{}: the binary log dump sent nothing for {:?}",
                    admin.endpoint, admin.statement_timeout
                ))
            })?;
        let Some(event) = next else { break };
        let event = event.map_err(|error| match error {
            mysql_async::Error::Server(server) if server.code == 1236 => BinlogError::Gap {
                after: after.to_string(),
                message: server.message,
            },
            other => classify(other, "binary log dump", None).into(),
        })?;
        let header = event.header();
        if header.flags_raw() & ARTIFICIAL != 0 || header.event_type_raw() == event::HEARTBEAT {
            continue;
        }
        let mut raw = Vec::with_capacity(header.event_size() as usize);
        event
            .write(BinlogVersion::Version4, &mut raw)
            .map_err(BinlogError::Write)?;
        // `write` computes the checksum again: the server's must be the same.
        if let (Some(sent), Ok(Some(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32))) =
            (event.checksum(), event.footer().get_checksum_alg())
            && raw[raw.len() - CHECKSUM_LEN..] != sent
        {
            return Err(BinlogError::Corrupt(format!(
                "event at {} of type {}: checksum differs",
                header.log_pos(),
                header.event_type_raw()
            )));
        }
        if header.event_type_raw() == event::GTID {
            let gtid = Gtid::parse(event.data(), header.server_id()).map_err(BinlogError::Corrupt)?;
            through.insert(gtid.domain, gtid.id());
            transactions += 1;
            let time = Timestamp::from_second(i64::from(header.timestamp())).ok();
            first_time = first_time.or(time);
            last_time = time;
        }
        out.write(&raw).await?;
    }
    let _ = stream.close().await;
    let (bytes, sha256) = out.finish().await?;
    Ok(ArchivedBinlog {
        after: after.clone(),
        through: GtidPosition::MariaDb(through),
        transactions,
        first_time,
        last_time,
        bytes,
        sha256,
    })
}

/// Applies the binary log file read from `reader` to the member, skipping the transactions in
/// `held` (what the member already executed) and stopping before the first past `stop`.
///
/// # Errors
/// [`BinlogError::Corrupt`] for a file that is not a complete binary log (a checksum that
/// differs, a transaction cut short); `Unsupported` for events it cannot apply exactly;
/// `Replay` for a transaction the member refused (rolled back). The transactions before the
/// failing one are applied.
pub async fn replay_binlog(
    admin: &MySqlAdmin,
    mut reader: impl AsyncRead + Unpin,
    held: &GtidPosition,
    stop: &ReplayStop,
) -> Result<Replayed, BinlogError> {
    let GtidPosition::MariaDb(held_domains) = held else {
        return Err(BinlogError::Unsupported(
            "binary log replay is MariaDB's only".to_string(),
        ));
    };
    let mut magic = [0u8; 4];
    reader.read_exact(&mut magic).await.map_err(BinlogError::Read)?;
    if magic != MAGIC {
        return Err(BinlogError::Corrupt("no binary log magic".to_string()));
    }
    let mut conn = admin.dedicated_connection().await?;
    let mut replay = Replay {
        through: held_domains.clone(),
        ..Replay::default()
    };
    let mut checksums = false;
    while let Some(raw) = read_event(&mut reader).await? {
        let kind = raw[4];
        if kind == event::FORMAT_DESCRIPTION {
            checksums = fde_has_crc32(&raw)?;
        }
        verify_checksum(&raw, kind == event::FORMAT_DESCRIPTION || checksums)?;
        let body = &raw[HEADER_LEN..raw.len() - if checksums { CHECKSUM_LEN } else { 0 }];
        let step = replay.step(&raw, body, held, stop)?;
        if let Err(source) = run_all(&mut conn, &step.statements).await {
            let gtid = replay.current.map(|gtid| gtid.to_string()).unwrap_or_default();
            let _ = conn.query_drop("ROLLBACK").await;
            return Err(BinlogError::Replay { gtid, source });
        }
        if step.stopped {
            replay.reached_stop = true;
            break;
        }
    }
    if let Some(gtid) = replay.current.filter(|_| replay.open) {
        let _ = conn.query_drop("ROLLBACK").await;
        return Err(BinlogError::Corrupt(format!("transaction {gtid} is cut short")));
    }
    let _ = conn.query_drop("SET TIMESTAMP = DEFAULT").await;
    Ok(Replayed {
        applied: replay.applied,
        through: GtidPosition::MariaDb(replay.through),
        reached_stop: replay.reached_stop,
    })
}

async fn run_all(conn: &mut Conn, statements: &[String]) -> Result<(), AdminError> {
    for statement in statements {
        // The statement is not quoted in the error: it holds the data.
        conn.query_drop(statement.as_str())
            .await
            .map_err(|e| classify(e, "replayed statement", Some("")))?;
    }
    Ok(())
}

/// One event's bytes (header, body, checksum), or `None` at the end of the file.
async fn read_event(reader: &mut (impl AsyncRead + Unpin)) -> Result<Option<Vec<u8>>, BinlogError> {
    let mut header = [0u8; HEADER_LEN];
    let mut filled = 0;
    while filled < HEADER_LEN {
        let read = reader
            .read(&mut header[filled..])
            .await
            .map_err(BinlogError::Read)?;
        if read == 0 {
            return match filled {
                0 => Ok(None),
                _ => Err(BinlogError::Corrupt("the last event is cut short".to_string())),
            };
        }
        filled += read;
    }
    let size = u32::from_le_bytes(header[9..13].try_into().expect("4 bytes")) as usize;
    if size < HEADER_LEN {
        return Err(BinlogError::Corrupt(format!("an event of {size} bytes")));
    }
    let mut raw = vec![0u8; size];
    raw[..HEADER_LEN].copy_from_slice(&header);
    reader
        .read_exact(&mut raw[HEADER_LEN..])
        .await
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                BinlogError::Corrupt("the last event is cut short".to_string())
            }
            _ => BinlogError::Read(error),
        })?;
    Ok(Some(raw))
}

/// Whether the events after this format description carry a CRC32: its body ends with the
/// algorithm's byte and its own checksum.
fn fde_has_crc32(raw: &[u8]) -> Result<bool, BinlogError> {
    let algorithm = raw
        .len()
        .checked_sub(CHECKSUM_LEN + 1)
        .filter(|at| *at >= HEADER_LEN)
        .map(|at| raw[at])
        .ok_or_else(|| BinlogError::Corrupt("a format description cut short".to_string()))?;
    match algorithm {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(BinlogError::Unsupported(format!("checksum algorithm {other}"))),
    }
}

fn verify_checksum(raw: &[u8], has_checksum: bool) -> Result<(), BinlogError> {
    if !has_checksum {
        return Ok(());
    }
    let (covered, stored) = raw.split_at(raw.len() - CHECKSUM_LEN);
    if crc32fast::hash(covered).to_le_bytes() != stored {
        return Err(BinlogError::Corrupt(format!(
            "event at {} of type {}: checksum differs",
            u32::from_le_bytes(raw[13..17].try_into().expect("4 bytes")),
            raw[4]
        )));
    }
    Ok(())
}

/// A MariaDB GTID event: which transaction begins, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Gtid {
    domain: u32,
    server_id: u32,
    sequence: u64,
    flags: u8,
}

impl Gtid {
    /// The transaction is one statement, not wrapped in `BEGIN`/`COMMIT` (DDL).
    const STANDALONE: u8 = 0x01;
    const PREPARED_XA: u8 = 0x40;
    const COMPLETED_XA: u8 = 0x80;

    fn parse(body: &[u8], server_id: u32) -> Result<Self, String> {
        if body.len() < 13 {
            return Err("a GTID event cut short".to_string());
        }
        Ok(Self {
            sequence: u64::from_le_bytes(body[0..8].try_into().expect("8 bytes")),
            domain: u32::from_le_bytes(body[8..12].try_into().expect("4 bytes")),
            server_id,
            flags: body[12],
        })
    }

    fn id(self) -> MariaDbGtid {
        MariaDbGtid {
            server_id: self.server_id,
            sequence: self.sequence,
        }
    }

    fn position(self) -> GtidPosition {
        GtidPosition::MariaDb(BTreeMap::from([(self.domain, self.id())]))
    }
}

impl std::fmt::Display for Gtid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server_id, self.sequence)
    }
}

/// The replay's state between events: the pure part of [`replay_binlog`].
#[derive(Default)]
struct Replay {
    /// The transaction being read, and whether it is applied (not already held).
    current: Option<Gtid>,
    applying: bool,
    /// A `BEGIN` was sent and no `COMMIT` yet.
    open: bool,
    /// Row events of the statement being read, sent together as one `BINLOG`.
    rows: Vec<u8>,
    time: u32,
    applied: u64,
    through: BTreeMap<u32, MariaDbGtid>,
    reached_stop: bool,
}

/// What one event asks of the member.
#[derive(Debug, Default, PartialEq, Eq)]
struct Step {
    statements: Vec<String>,
    /// The event is the first transaction past the stop: nothing more is applied.
    stopped: bool,
}

/// Rows events are sent when their statement ends, or at this size (the server's packet limit
/// is 16 MiB by default; base64 adds a third).
const ROWS_BATCH_BYTES: usize = 4 << 20;

impl Replay {
    fn step(
        &mut self,
        raw: &[u8],
        body: &[u8],
        held: &GtidPosition,
        stop: &ReplayStop,
    ) -> Result<Step, BinlogError> {
        let kind = raw[4];
        let timestamp = u32::from_le_bytes(raw[0..4].try_into().expect("4 bytes"));
        let server_id = u32::from_le_bytes(raw[5..9].try_into().expect("4 bytes"));
        let mut step = Step::default();
        match kind {
            event::FORMAT_DESCRIPTION => step.statements.push(binlog_statement(raw)),
            event::GTID => {
                if self.open {
                    return Err(BinlogError::Corrupt(format!(
                        "transaction {} has no end",
                        self.current.map(|gtid| gtid.to_string()).unwrap_or_default()
                    )));
                }
                let gtid = Gtid::parse(body, server_id).map_err(BinlogError::Corrupt)?;
                let past = match stop {
                    ReplayStop::Time(time) => i64::from(timestamp) > time.as_second(),
                    ReplayStop::Position(position) => !position.includes(&gtid.position()),
                };
                if past && !held.includes(&gtid.position()) {
                    step.stopped = true;
                    return Ok(step);
                }
                self.current = Some(gtid);
                self.applying = !held.includes(&gtid.position());
                if !self.applying {
                    return Ok(step);
                }
                if gtid.flags & (Gtid::PREPARED_XA | Gtid::COMPLETED_XA) != 0 {
                    return Err(BinlogError::Unsupported(format!("XA transaction {gtid}")));
                }
                self.time = timestamp;
                step.statements.extend([
                    format!("SET TIMESTAMP = {timestamp}"),
                    format!("SET @@session.gtid_domain_id = {}", gtid.domain),
                    format!("SET @@session.server_id = {}", gtid.server_id),
                    format!("SET @@session.gtid_seq_no = {}", gtid.sequence),
                ]);
                if gtid.flags & Gtid::STANDALONE == 0 {
                    step.statements.push("BEGIN".to_string());
                    self.open = true;
                }
            }
            _ if !self.applying => {}
            event::QUERY => {
                let query = QueryEvent::parse(body).map_err(BinlogError::Corrupt)?;
                match query.query.as_str() {
                    "BEGIN" => {}
                    "COMMIT" | "ROLLBACK" => {
                        step.statements.push(query.query.clone());
                        self.end_transaction();
                    }
                    _ => {
                        step.statements.extend(query.statements(self.time)?);
                        if !self.open {
                            self.end_transaction();
                        }
                    }
                }
            }
            event::XID => {
                step.statements.push("COMMIT".to_string());
                self.end_transaction();
            }
            event::TABLE_MAP => self.rows.extend_from_slice(raw),
            event::WRITE_ROWS_V1..=event::DELETE_ROWS_V1
            | event::WRITE_ROWS..=event::DELETE_ROWS
            | event::WRITE_ROWS_COMPRESSED_V1..=event::DELETE_ROWS_COMPRESSED_V1 => {
                self.rows.extend_from_slice(raw);
                if rows_end_statement(body) || self.rows.len() >= ROWS_BATCH_BYTES {
                    step.statements
                        .push(binlog_statement(&std::mem::take(&mut self.rows)));
                }
            }
            event::ANNOTATE_ROWS
            | event::ROTATE
            | event::STOP
            | event::BINLOG_CHECKPOINT
            | event::GTID_LIST
            | event::HEARTBEAT => {}
            event::INTVAR | event::RAND | event::USER_VAR => {
                return Err(BinlogError::Unsupported(format!(
                    "statement-based event (type {kind}) in transaction {}: the servers log rows",
                    self.current.map(|gtid| gtid.to_string()).unwrap_or_default()
                )));
            }
            event::INCIDENT => {
                return Err(BinlogError::Unsupported(
                    "an incident event: the source's log has a gap here".to_string(),
                ));
            }
            event::START_ENCRYPTION => {
                return Err(BinlogError::Unsupported("an encrypted binary log".to_string()));
            }
            event::QUERY_COMPRESSED => {
                return Err(BinlogError::Unsupported("a compressed statement".to_string()));
            }
            other => {
                return Err(BinlogError::Unsupported(format!("event type {other}")));
            }
        }
        Ok(step)
    }

    fn end_transaction(&mut self) {
        if let Some(gtid) = self.current {
            self.through.insert(gtid.domain, gtid.id());
            self.applied += 1;
        }
        self.open = false;
        self.applying = false;
    }
}

/// A `BINLOG` statement carrying `events` (a format description, or a statement's table maps
/// and row events): the server applies them as a replica would.
fn binlog_statement(events: &[u8]) -> String {
    format!(
        "BINLOG '{}'",
        base64::engine::general_purpose::STANDARD.encode(events)
    )
}

/// The row event closes its statement (`STMT_END_F`): its flags follow the 6-byte table id.
fn rows_end_statement(body: &[u8]) -> bool {
    body.get(6..8)
        .map(|flags| u16::from_le_bytes([flags[0], flags[1]]) & 0x0001 != 0)
        .unwrap_or(true)
}

/// A statement as the binary log holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct QueryEvent {
    database: String,
    query: String,
    error_code: u16,
    /// Session settings the statement ran under, as `SET` statements.
    session: Vec<String>,
    microseconds: Option<u32>,
}

impl QueryEvent {
    /// Parses a query event's body (without header and checksum).
    fn parse(body: &[u8]) -> Result<Self, String> {
        const POST_HEADER: usize = 13;
        let cut = || "a query event cut short".to_string();
        if body.len() < POST_HEADER {
            return Err(cut());
        }
        let database_len = body[8] as usize;
        let error_code = u16::from_le_bytes([body[9], body[10]]);
        let status_len = u16::from_le_bytes([body[11], body[12]]) as usize;
        let status = body.get(POST_HEADER..POST_HEADER + status_len).ok_or_else(cut)?;
        let (session, microseconds) = session_settings(status)?;
        let database_at = POST_HEADER + status_len;
        let database = body
            .get(database_at..database_at + database_len)
            .ok_or_else(cut)?;
        // The database's name ends with a NUL, then the statement runs to the end.
        let query = body.get(database_at + database_len + 1..).ok_or_else(cut)?;
        Ok(Self {
            database: String::from_utf8_lossy(database).into_owned(),
            query: String::from_utf8(query.to_vec())
                .map_err(|_| "a statement that is not UTF-8".to_string())?,
            error_code,
            session,
            microseconds,
        })
    }

    /// The statements that run it as logged: its time, database and session, then itself.
    fn statements(&self, time: u32) -> Result<Vec<String>, BinlogError> {
        if self.error_code != 0 {
            return Err(BinlogError::Unsupported(format!(
                "a statement logged with error {} on its source",
                self.error_code
            )));
        }
        let mut statements = vec![match self.microseconds {
            Some(micros) => format!("SET TIMESTAMP = {time}.{micros:06}"),
            None => format!("SET TIMESTAMP = {time}"),
        }];
        statements.extend(self.session.iter().cloned());
        if !self.database.is_empty() {
            statements.push(format!("USE {}", quote_identifier(&self.database)));
        }
        statements.push(self.query.clone());
        Ok(statements)
    }
}

/// The query event's status variables as `SET` statements, and its microseconds. Codes and
/// sizes are the servers' (`Q_FLAGS2_CODE` …); one it does not know cannot be skipped (its size
/// is not known), so it is refused.
fn session_settings(mut status: &[u8]) -> Result<(Vec<String>, Option<u32>), String> {
    const AUTO_IS_NULL: u32 = 1 << 14;
    const NO_FOREIGN_KEY_CHECKS: u32 = 1 << 26;
    const RELAXED_UNIQUE_CHECKS: u32 = 1 << 27;
    let mut settings = Vec::new();
    let mut microseconds = None;
    let take = |status: &mut &[u8], n: usize| -> Result<Vec<u8>, String> {
        if status.len() < n {
            return Err("query status variables cut short".to_string());
        }
        let (head, rest) = status.split_at(n);
        *status = rest;
        Ok(head.to_vec())
    };
    let u16_at = |bytes: &[u8], at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let u24 = |bytes: &[u8]| u32::from_le_bytes([bytes[0], bytes[1], bytes[2], 0]);
    while let Some((&code, rest)) = status.split_first() {
        status = rest;
        match code {
            // Q_FLAGS2_CODE
            0 => {
                let bytes = take(&mut status, 4)?;
                let flags = u32::from_le_bytes(bytes.try_into().expect("4 bytes"));
                let on = |flag: u32| u8::from(flags & flag != 0);
                settings.push(format!(
                    "SET @@session.foreign_key_checks = {}, @@session.sql_auto_is_null = {}, \
                     @@session.unique_checks = {}",
                    1 - on(NO_FOREIGN_KEY_CHECKS),
                    on(AUTO_IS_NULL),
                    1 - on(RELAXED_UNIQUE_CHECKS)
                ));
            }
            // Q_SQL_MODE_CODE
            1 => {
                let bytes = take(&mut status, 8)?;
                let mode = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
                settings.push(format!("SET @@session.sql_mode = {mode}"));
            }
            // Q_CATALOG_CODE (length, name, NUL)
            2 => {
                let len = take(&mut status, 1)?[0] as usize;
                take(&mut status, len + 1)?;
            }
            // Q_AUTO_INCREMENT
            3 => {
                let bytes = take(&mut status, 4)?;
                settings.push(format!(
                    "SET @@session.auto_increment_increment = {}, @@session.auto_increment_offset = {}",
                    u16_at(&bytes, 0),
                    u16_at(&bytes, 2)
                ));
            }
            // Q_CHARSET_CODE
            4 => {
                let bytes = take(&mut status, 6)?;
                settings.push(format!(
                    "SET @@session.character_set_client = {}, @@session.collation_connection = {}, \
                     @@session.collation_server = {}",
                    u16_at(&bytes, 0),
                    u16_at(&bytes, 2),
                    u16_at(&bytes, 4)
                ));
            }
            // Q_TIME_ZONE_CODE
            5 => {
                let len = take(&mut status, 1)?[0] as usize;
                let zone = take(&mut status, len)?;
                settings.push(format!(
                    "SET @@session.time_zone = {}",
                    quote_literal(&String::from_utf8_lossy(&zone))
                ));
            }
            // Q_CATALOG_NZ_CODE
            6 => {
                let len = take(&mut status, 1)?[0] as usize;
                take(&mut status, len)?;
            }
            // Q_LC_TIME_NAMES_CODE
            7 => {
                let bytes = take(&mut status, 2)?;
                settings.push(format!("SET @@session.lc_time_names = {}", u16_at(&bytes, 0)));
            }
            // Q_CHARSET_DATABASE_CODE
            8 => {
                let bytes = take(&mut status, 2)?;
                settings.push(format!(
                    "SET @@session.collation_database = {}",
                    u16_at(&bytes, 0)
                ));
            }
            // Q_TABLE_MAP_FOR_UPDATE_CODE, Q_XID (MariaDB): nothing to set
            9 | 129 => {
                take(&mut status, 8)?;
            }
            // Q_MASTER_DATA_WRITTEN_CODE
            10 => {
                take(&mut status, 4)?;
            }
            // Q_INVOKER: user and host, each with its length
            11 => {
                let len = take(&mut status, 1)?[0] as usize;
                take(&mut status, len)?;
                let len = take(&mut status, 1)?[0] as usize;
                take(&mut status, len)?;
            }
            // Q_UPDATED_DB_NAMES: a count (254: too many to list), then NUL-terminated names
            12 => {
                let count = take(&mut status, 1)?[0];
                if count != 254 {
                    for _ in 0..count {
                        let end = status
                            .iter()
                            .position(|byte| *byte == 0)
                            .ok_or_else(|| "query status variables cut short".to_string())?;
                        take(&mut status, end + 1)?;
                    }
                }
            }
            // Q_MICROSECONDS, Q_HRNOW (MariaDB)
            13 | 128 => microseconds = Some(u24(&take(&mut status, 3)?)),
            // Q_GTID_FLAGS3 (MariaDB)
            130 => {
                take(&mut status, 1)?;
            }
            other => return Err(format!("query status variable {other} is not known")),
        }
    }
    Ok((settings, microseconds))
}

/// A writer that counts and digests what it writes.
struct Hashed<W> {
    writer: W,
    bytes: u64,
    digest: Sha256,
}

impl<W: AsyncWrite + Unpin> Hashed<W> {
    fn new(writer: W) -> Self {
        Self {
            writer,
            bytes: 0,
            digest: Sha256::new(),
        }
    }

    async fn write(&mut self, data: &[u8]) -> Result<(), BinlogError> {
        self.writer.write_all(data).await.map_err(BinlogError::Write)?;
        self.digest.update(data);
        self.bytes += data.len() as u64;
        Ok(())
    }

    async fn finish(mut self) -> Result<(u64, String), BinlogError> {
        self.writer.flush().await.map_err(BinlogError::Write)?;
        self.writer.shutdown().await.map_err(BinlogError::Write)?;
        Ok((self.bytes, hex::encode(self.digest.finalize())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Flavor;

    fn position(text: &str) -> GtidPosition {
        GtidPosition::parse(Flavor::MariaDB, text).unwrap()
    }

    fn event(kind: u8, timestamp: u32, server_id: u32, body: &[u8]) -> Vec<u8> {
        let size = (HEADER_LEN + body.len()) as u32;
        let mut raw = Vec::new();
        raw.extend(timestamp.to_le_bytes());
        raw.push(kind);
        raw.extend(server_id.to_le_bytes());
        raw.extend(size.to_le_bytes());
        raw.extend(0u32.to_le_bytes());
        raw.extend(0u16.to_le_bytes());
        raw.extend(body);
        raw
    }

    fn gtid_body(sequence: u64, domain: u32, flags: u8) -> Vec<u8> {
        let mut body = sequence.to_le_bytes().to_vec();
        body.extend(domain.to_le_bytes());
        body.push(flags);
        body
    }

    fn query_body(database: &str, status: &[u8], query: &str) -> Vec<u8> {
        let mut body = vec![0u8; 8];
        body.push(database.len() as u8);
        body.extend(0u16.to_le_bytes());
        body.extend((status.len() as u16).to_le_bytes());
        body.extend(status);
        body.extend(database.as_bytes());
        body.push(0);
        body.extend(query.as_bytes());
        body
    }

    fn step(replay: &mut Replay, raw: &[u8], held: &GtidPosition, stop: &ReplayStop) -> Step {
        replay.step(raw, &raw[HEADER_LEN..], held, stop).unwrap()
    }

    #[test]
    fn a_query_event_runs_with_the_session_it_was_logged_with() {
        let mut status = vec![0u8];
        status.extend((1u32 << 26).to_le_bytes());
        status.push(1);
        status.extend(1_411_383_296u64.to_le_bytes());
        status.push(4);
        status.extend([33, 0, 45, 0, 8, 0]);
        status.push(5);
        status.push(6);
        status.extend(b"+00:00");
        status.push(128);
        status.extend([0x3f, 0x42, 0x0f]);
        let body = query_body("shop", &status, "CREATE TABLE t (id INT)");
        let query = QueryEvent::parse(&body).unwrap();
        assert_eq!(
            query.statements(1_700_000_000).unwrap(),
            vec![
                "SET TIMESTAMP = 1700000000.999999".to_string(),
                "SET @@session.foreign_key_checks = 0, @@session.sql_auto_is_null = 0, @@session.unique_checks = 1"
                    .to_string(),
                "SET @@session.sql_mode = 1411383296".to_string(),
                "SET @@session.character_set_client = 33, @@session.collation_connection = 45, \
                 @@session.collation_server = 8"
                    .to_string(),
                "SET @@session.time_zone = '+00:00'".to_string(),
                "USE `shop`".to_string(),
                "CREATE TABLE t (id INT)".to_string(),
            ]
        );
    }

    #[test]
    fn an_unknown_session_setting_or_a_failed_statement_is_refused_not_skipped() {
        let body = query_body("shop", &[200, 1, 2], "DROP TABLE t");
        assert_eq!(
            QueryEvent::parse(&body).unwrap_err(),
            "query status variable 200 is not known"
        );
        let mut body = query_body("shop", &[], "DROP TABLE t");
        body[9] = 1;
        let query = QueryEvent::parse(&body).unwrap();
        assert!(matches!(query.statements(0), Err(BinlogError::Unsupported(_))));
    }

    #[test]
    fn a_replay_skips_what_the_member_holds_and_stops_before_the_first_transaction_past_the_time() {
        let held = position("0-1-5");
        let stop = ReplayStop::Time(Timestamp::from_second(1_000).unwrap());
        let mut replay = Replay {
            through: BTreeMap::from([(
                0,
                MariaDbGtid {
                    server_id: 1,
                    sequence: 5,
                },
            )]),
            ..Replay::default()
        };
        // Already held: nothing sent for it, even at a time past the stop.
        let skipped = step(
            &mut replay,
            &event(event::GTID, 2_000, 1, &gtid_body(5, 0, 0)),
            &held,
            &stop,
        );
        assert_eq!(skipped, Step::default());
        assert_eq!(
            step(&mut replay, &event(event::XID, 2_000, 1, &[0; 8]), &held, &stop),
            Step::default()
        );

        let begin = step(
            &mut replay,
            &event(event::GTID, 1_000, 1, &gtid_body(6, 0, 0)),
            &held,
            &stop,
        );
        assert_eq!(begin.statements.last().map(String::as_str), Some("BEGIN"));
        assert!(
            begin
                .statements
                .contains(&"SET @@session.gtid_seq_no = 6".to_string())
        );
        let map = event(event::TABLE_MAP, 1_000, 1, &[1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(step(&mut replay, &map, &held, &stop), Step::default());
        // The statement's last row event (STMT_END_F) sends the table map and rows together.
        let rows = event(event::WRITE_ROWS_V1, 1_000, 1, &[1, 0, 0, 0, 0, 0, 1, 0, 9]);
        let sent = step(&mut replay, &rows, &held, &stop);
        let encoded = base64::engine::general_purpose::STANDARD.encode([map.clone(), rows.clone()].concat());
        assert_eq!(sent.statements, vec![format!("BINLOG '{encoded}'")]);
        let commit = step(&mut replay, &event(event::XID, 1_000, 1, &[0; 8]), &held, &stop);
        assert_eq!(commit.statements, vec!["COMMIT".to_string()]);

        let past = step(
            &mut replay,
            &event(event::GTID, 1_001, 1, &gtid_body(7, 0, 0)),
            &held,
            &stop,
        );
        assert!(past.stopped);
        assert!(past.statements.is_empty());
        assert_eq!(replay.applied, 1);
        assert_eq!(GtidPosition::MariaDb(replay.through.clone()), position("0-1-6"));
    }

    #[test]
    fn a_replay_to_a_position_applies_that_transaction_and_stops_before_the_next() {
        let held = position("0-1-5");
        let stop = ReplayStop::Position(position("0-1-6"));
        let mut replay = Replay::default();
        let ddl = step(
            &mut replay,
            &event(event::GTID, 10, 1, &gtid_body(6, 0, Gtid::STANDALONE)),
            &held,
            &stop,
        );
        assert!(!ddl.statements.contains(&"BEGIN".to_string()));
        let create = step(
            &mut replay,
            &event(
                event::QUERY,
                10,
                1,
                &query_body("shop", &[], "CREATE TABLE t (id INT)"),
            ),
            &held,
            &stop,
        );
        assert_eq!(
            create.statements.last().map(String::as_str),
            Some("CREATE TABLE t (id INT)")
        );
        assert_eq!(replay.applied, 1);
        let next = step(
            &mut replay,
            &event(event::GTID, 10, 1, &gtid_body(7, 0, 0)),
            &held,
            &stop,
        );
        assert!(next.stopped);
    }

    #[test]
    fn statement_based_and_unknown_events_are_refused() {
        let held = position("0-1-5");
        let stop = ReplayStop::Time(Timestamp::from_second(1_000).unwrap());
        let mut replay = Replay::default();
        step(
            &mut replay,
            &event(event::GTID, 10, 1, &gtid_body(6, 0, 0)),
            &held,
            &stop,
        );
        for kind in [event::INTVAR, event::RAND, event::USER_VAR, event::INCIDENT, 99] {
            let raw = event(kind, 10, 1, &[0; 9]);
            assert!(
                matches!(
                    replay.step(&raw, &raw[HEADER_LEN..], &held, &stop),
                    Err(BinlogError::Unsupported(_))
                ),
                "event type {kind}"
            );
        }
    }

    #[tokio::test]
    async fn a_file_with_a_changed_byte_or_cut_short_is_refused() {
        let mut fde_body = vec![0u8; 90];
        fde_body.push(1);
        let mut fde = event(event::FORMAT_DESCRIPTION, 1, 1, &[fde_body, vec![0; 4]].concat());
        let len = fde.len();
        let crc = crc32fast::hash(&fde[..len - 4]);
        fde[len - 4..].copy_from_slice(&crc.to_le_bytes());
        let mut file = MAGIC.to_vec();
        file.extend(&fde);
        assert!(fde_has_crc32(&fde).unwrap());
        let mut reader = &file[4..];
        let read = read_event(&mut reader).await.unwrap().unwrap();
        verify_checksum(&read, true).unwrap();
        assert!(read_event(&mut reader).await.unwrap().is_none());

        let mut changed = fde.clone();
        changed[30] ^= 1;
        assert!(matches!(
            verify_checksum(&changed, true),
            Err(BinlogError::Corrupt(_))
        ));
        let mut cut = &fde[..fde.len() - 1];
        assert!(matches!(read_event(&mut cut).await, Err(BinlogError::Corrupt(_))));
    }
}
