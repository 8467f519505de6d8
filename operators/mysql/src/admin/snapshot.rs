//! A consistent logical snapshot of a member, streamed out as SQL and restored into another
//! member (adding a MariaDB member; backups).
//!
//! The stream is text: a header line, one SQL statement per line, and a trailer.
//!
//! ```text
//! -- quorum-mysql-snapshot v1 flavor=mariadb position=0-1-42
//! DROP DATABASE IF EXISTS `app`
//! CREATE DATABASE `app` /*!40100 DEFAULT CHARACTER SET utf8mb4 */
//! …
//! -- end statements=17
//! ```
//!
//! Within a line, `\` is written `\\` and line breaks `\n` and `\r`, so a value or a table
//! definition with line breaks cannot split a statement. A stream without its trailer, or with a
//! different statement count, is truncated and refused.
//!
//! What is in it: every database but the server's own (`mysql`, `information_schema`,
//! `performance_schema`, `sys`), each base table's definition and rows (generated columns are
//! left to the server to compute); then every view, in an order where a view comes after the
//! views it reads; then stored procedures and functions, triggers (after the rows, so restoring
//! fires none of them) and events, each created under the `sql_mode` (and, for events, the time
//! zone) it was defined with; last the accounts other than the server's own and those the caller
//! excludes, with their grants (which may name the views and routines). A restored event is
//! disabled on replicas, as replication leaves one: it runs on the primary only. What is not in
//! it, and is listed in [`SnapshotInfo::skipped`] instead: sequences, system-versioned tables,
//! packages, roles and grants of roles. Definitions are read as they are when the dump reaches
//! them, not as of the snapshot: DDL while a snapshot runs can make it fail (MariaDB and MySQL
//! refuse to read a table changed after the snapshot began).
//!
//! The position in the header is the GTID position consistent with the rows: MariaDB gives it
//! without locking (see [`super::dialect::MariaDbDialect::snapshot_start`]); MySQL holds a
//! global read lock only while the snapshot opens.

use quorum_core::backup::digest::{ContentDigest, ContentFingerprint};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::dialect::{Dialect, account, quote_identifier, quote_literal};
use super::gtid::GtidPosition;
use super::{AdminError, MySqlAdmin, classify, rows};
use crate::crd::Flavor;

const MAGIC: &str = "-- quorum-mysql-snapshot v1";
const TRAILER: &str = "-- end statements=";
/// An INSERT is sent once its text passes this size (servers accept 16 MiB by default).
const INSERT_BATCH_BYTES: usize = 256 * 1024;
/// The server's own schemas, as an SQL list: never dumped, and not data of the member's.
pub(crate) const SYSTEM_DATABASES: &str = "'mysql', 'information_schema', 'performance_schema', 'sys'";
/// The restore session's `sql_mode`, put back after each object created under its own.
const RESTORE_SQL_MODE: &str = "NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION";

/// What a snapshot was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The GTID position consistent with the rows: a replica restored from the snapshot
    /// replicates from just after it.
    pub position: GtidPosition,
    /// Bytes written.
    pub bytes: u64,
    /// SHA-256 of the whole stream as written, hex.
    pub sha256: String,
    pub statements: u64,
    /// The rows written, counted and digested by table: a snapshot of a member restored from
    /// this one finds the same.
    pub content: ContentFingerprint,
    /// Objects present on the server but not in the snapshot (`view app.v`, `trigger app.t`…).
    pub skipped: Vec<String>,
}

/// A failed snapshot or restore.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error("writing the snapshot: {0}")]
    Write(#[source] std::io::Error),
    #[error("reading the snapshot: {0}")]
    Read(#[source] std::io::Error),
    /// The stream is not a complete snapshot this server can take.
    #[error("not a usable snapshot: {0}")]
    Format(String),
    /// Statement number `statement` of the stream failed (its text is not repeated: it may
    /// hold account credentials or data).
    #[error("restoring statement {statement}: {source}")]
    Restore {
        statement: u64,
        #[source]
        source: AdminError,
    },
}

/// Streams a consistent snapshot of the member to `writer`, leaving out the accounts named in
/// `exclude_users` (the operator's own: root, the replication account), on any host.
///
/// # Errors
/// [`SnapshotError::Admin`] when the server is unreachable or refuses (the account needs
/// `RELOAD` on MySQL, and must read every table and account); `Write` when `writer` fails.
/// What was written is then incomplete and has no trailer.
pub async fn snapshot_out(
    admin: &MySqlAdmin,
    exclude_users: &[&str],
    writer: impl AsyncWrite + Unpin,
) -> Result<SnapshotInfo, SnapshotError> {
    let mut conn = admin.connection().await?;
    let dialect = admin.dialect();
    for statement in ["SET NAMES utf8mb4", "SET SESSION time_zone = '+00:00'"]
        .iter()
        .chain(dialect.snapshot_session())
    {
        run(&mut conn, statement, "snapshot session").await?;
    }
    let position = open_snapshot(admin, &mut conn).await?;
    let mut out = Output::new(writer);
    out.line(&format!(
        "{MAGIC} flavor={} position={position}",
        flavor_name(admin.flavor())
    ))
    .await?;
    let mut skipped = Vec::new();
    let databases = list(&mut conn, &databases_query()).await?;
    for database in &databases {
        dump_database(&mut conn, database, &mut out, &mut skipped).await?;
    }
    dump_views(&mut conn, &mut out).await?;
    for database in &databases {
        dump_programs(&mut conn, dialect, database, &mut out, &mut skipped).await?;
    }
    dump_accounts(admin, &mut conn, exclude_users, &mut out, &mut skipped).await?;
    run(&mut conn, "COMMIT", "COMMIT").await?;
    let statements = out.statements;
    let content = out.content.fingerprint();
    out.line(&format!("{TRAILER}{statements}")).await?;
    let (bytes, sha256) = out.finish().await?;
    Ok(SnapshotInfo {
        position,
        bytes,
        sha256,
        statements,
        content,
        skipped,
    })
}

/// Restores a snapshot from `reader` into the member and returns its position. Nothing of the
/// restore is written to the member's binary log (it would be errant transactions); the caller
/// then makes the member replicate from the returned position
/// ([`MySqlAdmin::configure_replica`] with `start_at`).
///
/// Databases in the snapshot replace those of the same name. On MySQL the admin account's
/// writes need `super_read_only` off while the restore runs (`read_only` stays as it was, so
/// application accounts still cannot write); it is put back afterwards.
///
/// # Errors
/// [`SnapshotError::Format`] for another flavor's snapshot, a missing header or trailer, or a
/// statement count that does not match; `Restore` naming the statement that failed. The member
/// then holds part of the snapshot and must be emptied before another attempt.
pub async fn snapshot_in(
    admin: &MySqlAdmin,
    mut reader: impl AsyncBufRead + Unpin,
) -> Result<GtidPosition, SnapshotError> {
    let header = read_line(&mut reader)
        .await?
        .ok_or_else(|| SnapshotError::Format("empty stream".to_string()))?;
    let position = parse_header(&header, admin.flavor())?;
    let mut conn = admin.connection().await?;
    let dialect = admin.dialect();
    for statement in [
        "SET SESSION sql_log_bin = 0",
        "SET NAMES utf8mb4",
        "SET SESSION time_zone = '+00:00'",
        "SET SESSION foreign_key_checks = 0",
        "SET SESSION unique_checks = 0",
    ] {
        run(&mut conn, statement, "restore session").await?;
    }
    run(
        &mut conn,
        &format!("SET SESSION sql_mode = {}", quote_literal(RESTORE_SQL_MODE)),
        "restore session",
    )
    .await?;
    let read_only_was_on = admin.state_on(&mut conn).await?.read_only;
    for statement in dialect.restore_begin() {
        run(&mut conn, statement, "restore begin").await?;
    }
    let restored = restore_statements(&mut conn, &mut reader).await;
    for statement in dialect.restore_end(read_only_was_on) {
        run(&mut conn, statement, "restore end").await?;
    }
    restored?;
    Ok(position)
}

/// Runs every statement line up to the trailer, and checks the count.
async fn restore_statements(
    conn: &mut Conn,
    reader: &mut (impl AsyncBufRead + Unpin),
) -> Result<(), SnapshotError> {
    let mut executed = 0u64;
    loop {
        let Some(line) = read_line(reader).await? else {
            return Err(SnapshotError::Format(format!(
                "truncated: no trailer after {executed} statements"
            )));
        };
        if let Some(count) = line.strip_prefix(TRAILER) {
            if count != executed.to_string() {
                return Err(SnapshotError::Format(format!(
                    "the trailer counts {count} statements, the stream had {executed}"
                )));
            }
            if read_line(reader).await?.is_some() {
                return Err(SnapshotError::Format("data after the trailer".to_string()));
            }
            return Ok(());
        }
        executed += 1;
        let statement = decode_line(&line).map_err(SnapshotError::Format)?;
        conn.query_drop(statement)
            .await
            .map_err(|error| SnapshotError::Restore {
                statement: executed,
                // Withholds the statement excerpt a syntax error would quote.
                source: classify(error, "snapshot statement", Some("")),
            })?;
    }
}

/// Opens the snapshot transaction and returns the position consistent with it.
async fn open_snapshot(admin: &MySqlAdmin, conn: &mut Conn) -> Result<GtidPosition, SnapshotError> {
    let start = admin.dialect().snapshot_start();
    for statement in start.open {
        run(conn, statement, "open snapshot").await?;
    }
    let answer = rows(conn, start.position_query, "read snapshot position").await?;
    for statement in start.release {
        run(conn, statement, "release snapshot lock").await?;
    }
    let text = answer
        .first()
        .and_then(|row| row.values().next().cloned().flatten())
        .ok_or_else(|| AdminError::Unexpected("no snapshot position (is the binary log on?)".to_string()))?;
    GtidPosition::parse(admin.flavor(), &text)
        .map_err(|e| SnapshotError::Admin(AdminError::Unexpected(e.to_string())))
}

fn databases_query() -> String {
    format!(
        "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA \
         WHERE SCHEMA_NAME NOT IN ({SYSTEM_DATABASES}) ORDER BY SCHEMA_NAME"
    )
}

async fn dump_database(
    conn: &mut Conn,
    database: &str,
    out: &mut Output<impl AsyncWrite + Unpin>,
    skipped: &mut Vec<String>,
) -> Result<(), SnapshotError> {
    let db = quote_identifier(database);
    let create = second_column(conn, &format!("SHOW CREATE DATABASE {db}")).await?;
    out.statement(&format!("DROP DATABASE IF EXISTS {db}")).await?;
    out.statement(&create).await?;
    out.statement(&format!("USE {db}")).await?;
    let tables: Vec<(String, String)> = conn
        .exec(
            "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME",
            (database,),
        )
        .await
        .map_err(|e| classify(e, "list tables", None))?;
    for (table, kind) in tables {
        match kind.as_str() {
            "BASE TABLE" => dump_table(conn, database, &table, out).await?,
            // Dumped once every database's tables are (`dump_views`).
            "VIEW" => {}
            _ => skipped.push(format!("{} {database}.{table}", kind.to_lowercase())),
        }
    }
    Ok(())
}

/// A view and its definition as `SHOW CREATE VIEW` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct View {
    database: String,
    name: String,
    create: String,
}

impl View {
    /// How the server writes a reference to this view in another view's definition.
    fn reference(&self) -> String {
        format!(
            "{}.{}",
            quote_identifier(&self.database),
            quote_identifier(&self.name)
        )
    }
}

/// `views` in an order where each comes after every other view its definition names (the
/// server writes references qualified and quoted), so each can be created in turn.
fn in_dependency_order(mut views: Vec<View>) -> Vec<View> {
    let mut ordered: Vec<View> = Vec::with_capacity(views.len());
    while !views.is_empty() {
        let ready = views.iter().position(|view| {
            views
                .iter()
                .filter(|other| *other != view)
                .all(|other| !view.create.contains(&other.reference()))
        });
        // A cycle cannot be created; should one be read, the rest keep their order.
        let next = views.remove(ready.unwrap_or(0));
        ordered.push(next);
    }
    ordered
}

/// Every view of every database but the server's own, after all tables.
async fn dump_views(conn: &mut Conn, out: &mut Output<impl AsyncWrite + Unpin>) -> Result<(), SnapshotError> {
    let names: Vec<(String, String)> = conn
        .query(format!(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.VIEWS \
             WHERE TABLE_SCHEMA NOT IN ({SYSTEM_DATABASES}) ORDER BY TABLE_SCHEMA, TABLE_NAME"
        ))
        .await
        .map_err(|e| classify(e, "list views", None))?;
    let mut views = Vec::new();
    for (database, name) in names {
        let query = format!(
            "SHOW CREATE VIEW {}.{}",
            quote_identifier(&database),
            quote_identifier(&name)
        );
        let create = second_column(conn, &query).await?;
        views.push(View {
            database,
            name,
            create,
        });
    }
    for view in in_dependency_order(views) {
        out.statement(&format!("USE {}", quote_identifier(&view.database)))
            .await?;
        out.statement(&view.create).await?;
    }
    Ok(())
}

/// The database's procedures, functions, triggers and events.
async fn dump_programs(
    conn: &mut Conn,
    dialect: &dyn Dialect,
    database: &str,
    out: &mut Output<impl AsyncWrite + Unpin>,
    skipped: &mut Vec<String>,
) -> Result<(), SnapshotError> {
    let named = |name: &str| format!("{}.{}", quote_identifier(database), quote_identifier(name));
    let routines: Vec<(String, String)> = conn
        .exec(
            "SELECT ROUTINE_NAME, ROUTINE_TYPE FROM information_schema.ROUTINES \
             WHERE ROUTINE_SCHEMA = ? ORDER BY ROUTINE_TYPE, ROUTINE_NAME",
            (database,),
        )
        .await
        .map_err(|e| classify(e, "list routines", None))?;
    for (name, kind) in routines {
        if kind == "PROCEDURE" || kind == "FUNCTION" {
            let show = format!("SHOW CREATE {kind} {}", named(&name));
            dump_program(conn, database, &show, 2, None, out).await?;
        } else {
            skipped.push(format!("{} {database}.{name}", kind.to_lowercase()));
        }
    }
    let triggers: Vec<String> = conn
        .exec(
            "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS \
             WHERE TRIGGER_SCHEMA = ? ORDER BY EVENT_OBJECT_TABLE, ACTION_ORDER",
            (database,),
        )
        .await
        .map_err(|e| classify(e, "list triggers", None))?;
    for name in triggers {
        let show = format!("SHOW CREATE TRIGGER {}", named(&name));
        dump_program(conn, database, &show, 2, None, out).await?;
    }
    let events: Vec<String> = conn
        .exec(
            "SELECT EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA = ? ORDER BY EVENT_NAME",
            (database,),
        )
        .await
        .map_err(|e| classify(e, "list events", None))?;
    for name in events {
        let show = format!("SHOW CREATE EVENT {}", named(&name));
        dump_program(conn, database, &show, 3, Some(2), out).await?;
        out.statement(&format!(
            "ALTER EVENT {} {}",
            named(&name),
            dialect.event_disabled_on_replicas()
        ))
        .await?;
    }
    Ok(())
}

/// One stored program from its `SHOW CREATE …` row: its statement (column `create`), created in
/// its database under its own `sql_mode` (column 1) and, for events, time zone (column
/// `time_zone`), the restore session's put back after.
async fn dump_program(
    conn: &mut Conn,
    database: &str,
    show: &str,
    create: usize,
    time_zone: Option<usize>,
    out: &mut Output<impl AsyncWrite + Unpin>,
) -> Result<(), SnapshotError> {
    let row: Option<mysql_async::Row> = conn
        .query_first(show)
        .await
        .map_err(|e| classify(e, "SHOW CREATE", None))?;
    let missing = || {
        SnapshotError::Admin(AdminError::Unexpected(format!(
            "{show}: no definition (missing privileges?)"
        )))
    };
    let mut row = row.ok_or_else(missing)?;
    let column = |row: &mut mysql_async::Row, index: usize| row.take::<Option<String>, _>(index).flatten();
    let sql_mode = column(&mut row, 1).unwrap_or_default();
    let zone = time_zone.and_then(|index| column(&mut row, index));
    let statement = column(&mut row, create).ok_or_else(missing)?;
    out.statement(&format!("USE {}", quote_identifier(database)))
        .await?;
    out.statement(&format!("SET SESSION sql_mode = {}", quote_literal(&sql_mode)))
        .await?;
    if let Some(zone) = &zone {
        out.statement(&format!("SET SESSION time_zone = {}", quote_literal(zone)))
            .await?;
    }
    out.statement(&statement).await?;
    out.statement(&format!(
        "SET SESSION sql_mode = {}",
        quote_literal(RESTORE_SQL_MODE)
    ))
    .await?;
    if zone.is_some() {
        out.statement("SET SESSION time_zone = '+00:00'").await?;
    }
    Ok(())
}

/// The table's definition, then its rows as INSERTs of at most [`INSERT_BATCH_BYTES`].
async fn dump_table(
    conn: &mut Conn,
    database: &str,
    table: &str,
    out: &mut Output<impl AsyncWrite + Unpin>,
) -> Result<(), SnapshotError> {
    let qualified = format!("{}.{}", quote_identifier(database), quote_identifier(table));
    out.statement(&second_column(conn, &format!("SHOW CREATE TABLE {qualified}")).await?)
        .await?;
    // Generated columns are computed by the server and cannot be inserted.
    let columns: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             AND (GENERATION_EXPRESSION IS NULL OR GENERATION_EXPRESSION = '') \
             ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        .await
        .map_err(|e| classify(e, "list columns", None))?;
    if columns.is_empty() {
        return Ok(());
    }
    let column_list = columns
        .iter()
        .map(|c| quote_identifier(c))
        .collect::<Vec<_>>()
        .join(", ");
    let prefix = format!("INSERT INTO {} ({column_list}) VALUES ", quote_identifier(table));
    // The binary protocol gives typed values (exact floats, dates) that render as literals.
    let select = format!("SELECT {column_list} FROM {qualified}");
    let mut result = conn
        .exec_iter(select, ())
        .await
        .map_err(|e| classify(e, "read table", None))?;
    let mut batch = String::new();
    while let Some(row) = result.next().await.map_err(|e| classify(e, "read table", None))? {
        let values = row.unwrap().iter().map(literal).collect::<Vec<_>>().join(",");
        out.content
            .add_parts(&[qualified.as_bytes(), b"\n", values.as_bytes()]);
        batch.push_str(if batch.is_empty() { &prefix } else { "," });
        batch.push('(');
        batch.push_str(&values);
        batch.push(')');
        if batch.len() >= INSERT_BATCH_BYTES {
            out.statement(&batch).await?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        out.statement(&batch).await?;
    }
    Ok(())
}

/// A value as an SQL literal. Floating-point numbers are written in exponent notation, shortest
/// exact form: `Value::as_sql` writes them as plain decimals, which the server reads as DECIMAL
/// and clips to 65 digits (1e300 would come back as 1e65). Strings rely on backslash escapes,
/// which the admin sessions keep on.
fn literal(value: &mysql_async::Value) -> String {
    match value {
        mysql_async::Value::Float(number) => format!("{number:e}"),
        mysql_async::Value::Double(number) => format!("{number:e}"),
        other => other.as_sql(false),
    }
}

/// Accounts and their grants, each account dropped first so a restore replaces it.
async fn dump_accounts(
    admin: &MySqlAdmin,
    conn: &mut Conn,
    exclude_users: &[&str],
    out: &mut Output<impl AsyncWrite + Unpin>,
    skipped: &mut Vec<String>,
) -> Result<(), SnapshotError> {
    let dialect = admin.dialect();
    let accounts = rows(conn, dialect.accounts_query(), "list accounts").await?;
    for row in accounts {
        let field = |name: &str| row.get(name).cloned().flatten().unwrap_or_default();
        let (user, host) = (field("User"), field("Host"));
        // Anonymous accounts are installation leftovers, not someone's data.
        if user.is_empty()
            || exclude_users.contains(&user.as_str())
            || dialect.system_accounts().contains(&user.as_str())
        {
            continue;
        }
        let name = account(&user, &host);
        let create = single_column(conn, &format!("SHOW CREATE USER {name}")).await?;
        out.statement(&format!("DROP USER IF EXISTS {name}")).await?;
        for create in create {
            out.statement(&create).await?;
        }
        for grant in single_column(conn, &format!("SHOW GRANTS FOR {name}")).await? {
            // A grant of a role (`GRANT role TO user`) needs the role, which is not dumped.
            if grant.contains(" ON ") {
                out.statement(&grant).await?;
            } else {
                skipped.push(format!("role grant to {user}@{host}"));
            }
        }
    }
    Ok(())
}

/// The second column of a one-row `SHOW CREATE …`.
async fn second_column(conn: &mut Conn, query: &str) -> Result<String, SnapshotError> {
    let row: Option<mysql_async::Row> = conn
        .query_first(query)
        .await
        .map_err(|e| classify(e, "SHOW CREATE", None))?;
    row.and_then(|mut row| row.take::<Option<String>, _>(1).flatten())
        .ok_or_else(|| SnapshotError::Admin(AdminError::Unexpected(format!("{query}: no answer"))))
}

/// The first column of every row.
async fn single_column(conn: &mut Conn, query: &str) -> Result<Vec<String>, SnapshotError> {
    conn.query(query)
        .await
        .map_err(|e| SnapshotError::Admin(classify(e, "SHOW accounts", None)))
}

async fn list(conn: &mut Conn, query: &str) -> Result<Vec<String>, SnapshotError> {
    conn.query(query)
        .await
        .map_err(|e| SnapshotError::Admin(classify(e, "list databases", None)))
}

async fn run(conn: &mut Conn, statement: &str, kind: &'static str) -> Result<(), SnapshotError> {
    conn.query_drop(statement)
        .await
        .map_err(|e| SnapshotError::Admin(classify(e, kind, None)))
}

fn flavor_name(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::MariaDB => "mariadb",
        Flavor::MySQL => "mysql",
    }
}

/// The position in a header line, after checking the format and flavor.
fn parse_header(line: &str, flavor: Flavor) -> Result<GtidPosition, SnapshotError> {
    let format = |reason: String| SnapshotError::Format(reason);
    let rest = line
        .strip_prefix(MAGIC)
        .ok_or_else(|| format(format!("no snapshot header: {:?}", truncate(line))))?;
    let mut snapshot_flavor = None;
    let mut position = None;
    for field in rest.split(' ').filter(|f| !f.is_empty()) {
        match field.split_once('=') {
            Some(("flavor", value)) => snapshot_flavor = Some(value),
            Some(("position", value)) => position = Some(value),
            _ => return Err(format(format!("unknown header field {field:?}"))),
        }
    }
    let snapshot_flavor = snapshot_flavor.ok_or_else(|| format("no flavor in the header".to_string()))?;
    if snapshot_flavor != flavor_name(flavor) {
        return Err(format(format!(
            "a {snapshot_flavor} snapshot cannot be restored into a {} server",
            flavor_name(flavor)
        )));
    }
    let position = position.ok_or_else(|| format("no position in the header".to_string()))?;
    GtidPosition::parse(flavor, position).map_err(|e| format(e.to_string()))
}

fn truncate(text: &str) -> &str {
    match text.char_indices().nth(80) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// One statement as one line: `\`, line feed and carriage return escaped.
fn encode_line(statement: &str) -> String {
    let mut line = String::with_capacity(statement.len() + 1);
    for c in statement.chars() {
        match c {
            '\\' => line.push_str("\\\\"),
            '\n' => line.push_str("\\n"),
            '\r' => line.push_str("\\r"),
            other => line.push(other),
        }
    }
    line
}

fn decode_line(line: &str) -> Result<String, String> {
    let mut statement = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            statement.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => statement.push('\\'),
            Some('n') => statement.push('\n'),
            Some('r') => statement.push('\r'),
            other => {
                return Err(format!(
                    "bad escape \\{}",
                    other.map(String::from).unwrap_or_default()
                ));
            }
        }
    }
    Ok(statement)
}

/// The next line without its line feed; `None` at the end of the stream.
async fn read_line(reader: &mut (impl AsyncBufRead + Unpin)) -> Result<Option<String>, SnapshotError> {
    let mut line = String::new();
    let read = reader.read_line(&mut line).await.map_err(SnapshotError::Read)?;
    if read == 0 {
        return Ok(None);
    }
    if line.pop() != Some('\n') {
        return Err(SnapshotError::Format(
            "truncated: the last line is incomplete".to_string(),
        ));
    }
    Ok(Some(line))
}

/// The stream being written: counts bytes and statements, hashes everything.
struct Output<W> {
    writer: W,
    hash: Sha256,
    bytes: u64,
    statements: u64,
    /// Every row written, by table: what a dump of a member restored from it must find again.
    content: ContentDigest,
}

impl<W: AsyncWrite + Unpin> Output<W> {
    fn new(writer: W) -> Self {
        Self {
            writer,
            hash: Sha256::new(),
            bytes: 0,
            statements: 0,
            content: ContentDigest::default(),
        }
    }

    async fn statement(&mut self, statement: &str) -> Result<(), SnapshotError> {
        self.statements += 1;
        self.line(&encode_line(statement)).await
    }

    async fn line(&mut self, line: &str) -> Result<(), SnapshotError> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.writer
            .write_all(&bytes)
            .await
            .map_err(SnapshotError::Write)?;
        self.hash.update(&bytes);
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    async fn finish(mut self) -> Result<(u64, String), SnapshotError> {
        self.writer.flush().await.map_err(SnapshotError::Write)?;
        Ok((self.bytes, hex::encode(self.hash.finalize())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_come_after_the_views_they_read() {
        let view = |name: &str, create: &str| View {
            database: "app".into(),
            name: name.into(),
            create: create.into(),
        };
        let ordered = in_dependency_order(vec![
            view(
                "a_top",
                "CREATE VIEW `a_top` AS select `app`.`m_middle`.`id` AS `id` from `app`.`m_middle`",
            ),
            view(
                "m_middle",
                "CREATE VIEW `m_middle` AS select `app`.`z_base`.`id` AS `id` from `app`.`z_base`",
            ),
            view(
                "z_base",
                "CREATE VIEW `z_base` AS select `app`.`t`.`id` AS `id` from `app`.`t`",
            ),
            view("alone", "CREATE VIEW `alone` AS select 1 AS `one`"),
        ]);
        let names: Vec<&str> = ordered.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["z_base", "m_middle", "a_top", "alone"]);
    }

    #[test]
    fn lines_round_trip_statements_with_line_breaks_and_backslashes() {
        for statement in [
            "CREATE TABLE `t` (\n  `a` int\n) ENGINE=InnoDB",
            "INSERT INTO `t` VALUES ('a\\nb','c\\\\d')",
            "weird \r\n \\n \\\\ end\\",
            "",
        ] {
            let line = encode_line(statement);
            assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
            assert_eq!(decode_line(&line).unwrap(), statement);
        }
        assert!(decode_line("dangling \\").is_err());
        assert!(decode_line("unknown \\t").is_err());
    }

    #[test]
    fn headers_check_format_and_flavor() {
        let position = parse_header(
            &format!("{MAGIC} flavor=mariadb position=0-1-5,1-2-3"),
            Flavor::MariaDB,
        );
        assert_eq!(position.unwrap().to_string(), "0-1-5,1-2-3");
        let empty = parse_header(&format!("{MAGIC} flavor=mariadb position="), Flavor::MariaDB);
        assert!(empty.unwrap().is_empty());
        let other = parse_header(&format!("{MAGIC} flavor=mysql position="), Flavor::MariaDB);
        assert!(
            other
                .unwrap_err()
                .to_string()
                .contains("a mysql snapshot cannot be restored")
        );
        assert!(parse_header("CREATE DATABASE x", Flavor::MariaDB).is_err());
        assert!(parse_header(&format!("{MAGIC} position=0-1-5"), Flavor::MariaDB).is_err());
        assert!(parse_header(&format!("{MAGIC} flavor=mariadb"), Flavor::MariaDB).is_err());
        assert!(
            parse_header(
                "-- quorum-mysql-snapshot v2 flavor=mariadb position=",
                Flavor::MariaDB
            )
            .is_err()
        );
    }

    #[test]
    fn literals_keep_floats_exact_and_escape_strings() {
        use mysql_async::Value;
        assert_eq!(literal(&Value::Double(1e300)), "1e300");
        assert_eq!(literal(&Value::Double(0.1)), "1e-1");
        assert_eq!(literal(&Value::Double(-3.25)), "-3.25e0");
        assert_eq!(literal(&Value::Float(1.5)), "1.5e0");
        assert_eq!(
            literal(&Value::Double(f64::MIN_POSITIVE)).parse::<f64>(),
            Ok(f64::MIN_POSITIVE)
        );
        assert_eq!(literal(&Value::Bytes(b"it's\\\n".to_vec())), "'it\\'s\\\\\\n'");
        assert_eq!(literal(&Value::Bytes(vec![0xff, 0x00])), "0xFF00");
        assert_eq!(literal(&Value::NULL), "NULL");
        assert_eq!(literal(&Value::Int(-7)), "-7");
        assert_eq!(
            literal(&Value::Date(2024, 2, 29, 23, 59, 59, 5)),
            "'2024-02-29 23:59:59.000005'"
        );
    }

    #[tokio::test]
    async fn output_counts_and_hashes_what_it_writes() {
        let mut written = Vec::new();
        let mut out = Output::new(&mut written);
        out.line("-- header").await.unwrap();
        out.statement("SELECT\n1").await.unwrap();
        assert_eq!(out.statements, 1);
        let (bytes, sha256) = out.finish().await.unwrap();
        assert_eq!(written, b"-- header\nSELECT\\n1\n");
        assert_eq!(bytes, written.len() as u64);
        assert_eq!(sha256, hex::encode(Sha256::digest(&written)));
    }

    #[tokio::test]
    async fn read_line_refuses_an_incomplete_last_line() {
        let mut reader: &[u8] = b"one\ntwo";
        assert_eq!(read_line(&mut reader).await.unwrap().as_deref(), Some("one"));
        assert!(matches!(
            read_line(&mut reader).await,
            Err(SnapshotError::Format(_))
        ));
        let mut empty: &[u8] = b"";
        assert!(read_line(&mut empty).await.unwrap().is_none());
    }
}
