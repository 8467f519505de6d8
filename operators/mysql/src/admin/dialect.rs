//! The SQL each flavor speaks for the admin verbs, and the parsing of what it answers.
//!
//! Pure text in, text out: no connection here, so every statement is pinned by a unit test.
//! [`MariaDbDialect`] targets MariaDB 10.11 and 11.x; [`MySqlDialect`] targets MySQL 8.0.23 or
//! newer (the first with `CHANGE REPLICATION SOURCE TO`) and 8.4 LTS, where the few statements
//! that changed between 8.0 and 8.4 depend on the server's [`ServerVersion`].

use std::collections::HashMap;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::gtid::GtidPosition;
use super::{IoThread, ReplicaStatus, ReplicationSource, SemiSyncRole};
use crate::crd::Flavor;

/// One result row as column name to value (`None` for SQL NULL), so parsing needs no server.
pub type Columns = HashMap<String, Option<String>>;

/// The SQL dialect of one flavor.
pub fn dialect(flavor: Flavor) -> &'static dyn Dialect {
    match flavor {
        Flavor::MariaDB => &MariaDbDialect,
        Flavor::MySQL => &MySqlDialect,
    }
}

/// SQL text that carries a password. It has neither `Debug` nor `Display`, so it cannot end up
/// in a log or an error message by accident; only the executor reads it, to send it.
pub struct SecretStatement(SecretString);

impl SecretStatement {
    pub(crate) fn new(text: String) -> Self {
        Self(SecretString::from(text))
    }

    /// The statement text, to send to the server and nowhere else.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

/// A server's version as `@@version` reports it (`8.4.2`, `10.11.6-MariaDB-0+deb12u1-log`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl ServerVersion {
    /// The leading `major.minor.patch` of `@@version`; `None` when it does not start so.
    pub fn parse(version: &str) -> Option<Self> {
        let numeric: String = version
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let mut parts = numeric.split('.').map(str::parse::<u32>);
        let major = parts.next()?.ok()?;
        let minor = parts.next()?.ok()?;
        let patch = parts.next().and_then(Result::ok).unwrap_or(0);
        Some(Self { major, minor, patch })
    }

    fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

/// What `SELECT` of the server's own state ([`Dialect::report_query`]) says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerState {
    pub server_id: u32,
    pub version: String,
    /// The server refuses writes as [`Dialect::read_only`]`(true)` leaves it.
    pub read_only: bool,
    pub executed: GtidPosition,
    /// `binlog_expire_logs_seconds`: 0 keeps binary logs for ever.
    pub binlog_expire_seconds: u32,
}

/// How to open a snapshot transaction and learn the GTID position consistent with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotStart {
    /// Run in order on the snapshot's connection.
    pub open: &'static [&'static str],
    /// One row, one column: the position, as text.
    pub position_query: &'static str,
    /// Run once the position has been read (releases what `open` locked).
    pub release: &'static [&'static str],
}

/// The SQL of one flavor. Statements that carry a password come back as [`SecretStatement`].
pub trait Dialect: Send + Sync {
    fn flavor(&self) -> Flavor;

    /// Points replication at `source`, by GTID. Options not named keep their values, so TLS is
    /// always stated explicitly.
    fn change_source(&self, source: &ReplicationSource) -> SecretStatement;
    fn start_replica(&self) -> &'static str;
    fn stop_replica(&self) -> &'static str;
    /// Forgets the source and the replication settings (the member is no longer a replica).
    fn reset_replica_all(&self) -> &'static str;
    fn start_io_thread(&self) -> &'static str;
    fn stop_io_thread(&self) -> &'static str;

    /// Server error codes that `STOP` of a replica that is not running or not configured gives:
    /// stopping is then already done.
    fn already_stopped_codes(&self) -> &'static [u16] {
        // ER_SLAVE_NOT_RUNNING (MySQL), ER_BAD_SLAVE; 1255 is a note in MariaDB, not an error.
        &[1199, 1200, 1255, 3085]
    }

    fn replica_status_query(&self) -> &'static str;
    /// Parses one row of [`Dialect::replica_status_query`].
    fn parse_replica_status(&self, columns: &Columns) -> Result<ReplicaStatus, String>;

    fn report_query(&self) -> &'static str;

    /// The `ALTER EVENT` clause that keeps an event from running on replicas.
    fn event_disabled_on_replicas(&self) -> &'static str;

    /// How long binary logs are kept (both flavors name it alike).
    fn binlog_expiry(&self, seconds: u32) -> String {
        format!("SET GLOBAL binlog_expire_logs_seconds = {seconds}")
    }
    fn parse_report(&self, columns: &Columns) -> Result<ServerState, String>;

    /// Statements that close (`on`) or open the server to writes.
    fn read_only(&self, on: bool) -> &'static [&'static str];

    /// A one-value query waiting up to `timeout` until `position` is executed.
    fn wait_for_executed(&self, position: &GtidPosition, timeout: Duration) -> String;
    /// What [`Dialect::wait_for_executed`] answered: `Some(true)` reached, `Some(false)`
    /// timed out, `None` for anything else.
    fn wait_reached(&self, answer: i64) -> Option<bool>;

    /// Statements that make the member play `role` in semi-synchronous replication.
    ///
    /// # Errors
    /// A role the flavor cannot express, with the reason.
    fn semi_sync(&self, role: &SemiSyncRole) -> Result<Vec<String>, String>;
    /// The variable that is ON when the member waits for replicas' acknowledgements.
    fn semi_sync_source_variable(&self) -> &'static str;
    /// The variable that is ON when the member acknowledges what it receives.
    fn semi_sync_replica_variable(&self) -> &'static str;
    fn semi_sync_variables_query(&self) -> &'static str {
        "SHOW GLOBAL VARIABLES LIKE 'rpl\\_semi\\_sync\\_%'"
    }

    /// Statements, run while replication is stopped, that make the member replicate from just
    /// after `position` (the position of a restored snapshot), forgetting its own GTID history.
    fn set_start_position(&self, position: &GtidPosition, version: &ServerVersion) -> Vec<String>;
    /// Statements, run while replication is stopped, that make the member resume from what it
    /// has `executed` itself. MySQL's auto-positioning does this alone; MariaDB replicates from
    /// `gtid_slave_pos`, which lacks what a former primary wrote itself.
    fn resume_position(&self, executed: &GtidPosition) -> Vec<String>;
    /// Statements that make `position` the member's own GTID history, as if it had written
    /// those transactions itself: after a backup was restored into it (without binary logging),
    /// so that the transactions it writes as a primary continue the backup's history and its
    /// replicas start from there. The binary log is reset first, so only for a member nothing
    /// replicates from yet.
    fn adopt_position(&self, position: &GtidPosition, version: &ServerVersion) -> Vec<String>;

    fn snapshot_start(&self) -> SnapshotStart;
    /// Session settings for reading accounts in a snapshot.
    fn snapshot_session(&self) -> &'static [&'static str];
    /// Accounts (`User`, `Host` columns), roles excluded.
    fn accounts_query(&self) -> &'static str;
    /// Accounts the server itself owns, never copied.
    fn system_accounts(&self) -> &'static [&'static str];
    /// Statements around a restore on the admin account, and after it.
    fn restore_begin(&self) -> &'static [&'static str];
    fn restore_end(&self, read_only_was_on: bool) -> &'static [&'static str];

    /// Client connections to end when fencing (`ID`, `USER`, `COMMAND` columns).
    fn processlist_query(&self) -> &'static str {
        "SELECT ID, USER, COMMAND FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID()"
    }
    fn kill_connection(&self, id: u64) -> String {
        format!("KILL CONNECTION {id}")
    }
}

/// MariaDB 10.11 and 11.x.
pub struct MariaDbDialect;

/// MySQL 8.0.23 and newer, 8.4 LTS.
pub struct MySqlDialect;

impl Dialect for MariaDbDialect {
    fn flavor(&self) -> Flavor {
        Flavor::MariaDB
    }

    fn change_source(&self, source: &ReplicationSource) -> SecretStatement {
        SecretStatement::new(format!(
            "CHANGE MASTER TO MASTER_HOST={}, MASTER_PORT={}, MASTER_USER={}, MASTER_PASSWORD={}, \
             MASTER_SSL={}, MASTER_USE_GTID=slave_pos",
            quote_literal(&source.host),
            source.port,
            quote_literal(&source.user),
            quote_literal(source.password.expose_secret()),
            u8::from(source.tls),
        ))
    }

    fn start_replica(&self) -> &'static str {
        "START SLAVE"
    }

    fn stop_replica(&self) -> &'static str {
        "STOP SLAVE"
    }

    fn reset_replica_all(&self) -> &'static str {
        "RESET SLAVE ALL"
    }

    fn start_io_thread(&self) -> &'static str {
        "START SLAVE IO_THREAD"
    }

    fn stop_io_thread(&self) -> &'static str {
        "STOP SLAVE IO_THREAD"
    }

    fn replica_status_query(&self) -> &'static str {
        "SHOW SLAVE STATUS"
    }

    fn parse_replica_status(&self, columns: &Columns) -> Result<ReplicaStatus, String> {
        parse_replica_status(
            columns,
            &ReplicaColumns {
                io_running: "Slave_IO_Running",
                sql_running: "Slave_SQL_Running",
                seconds_behind: "Seconds_Behind_Master",
                host: "Master_Host",
                port: "Master_Port",
                received: "Gtid_IO_Pos",
            },
            Flavor::MariaDB,
        )
    }

    fn event_disabled_on_replicas(&self) -> &'static str {
        "DISABLE ON SLAVE"
    }

    fn report_query(&self) -> &'static str {
        "SELECT @@GLOBAL.server_id AS server_id, @@GLOBAL.version AS version, \
         @@GLOBAL.read_only AS read_only, @@GLOBAL.gtid_binlog_pos AS gtid_binlog_pos, \
         @@GLOBAL.gtid_slave_pos AS gtid_slave_pos, \
         @@GLOBAL.binlog_expire_logs_seconds AS binlog_expire_logs_seconds"
    }

    /// What the server executed is, per domain, the later of `gtid_binlog_pos` (everything it
    /// wrote to its binary log: its own transactions, and with `log_slave_updates` what it
    /// replicated) and `gtid_slave_pos` (what replication applied, or the position a restored
    /// snapshot was set to, neither of which need be in the binary log). `gtid_current_pos`
    /// is close but takes the binary log's entry only for transactions this server
    /// originated, so it can hide a later replicated one.
    fn parse_report(&self, columns: &Columns) -> Result<ServerState, String> {
        let binlog = parse_position(Flavor::MariaDB, columns, "gtid_binlog_pos")?;
        let slave = parse_position(Flavor::MariaDB, columns, "gtid_slave_pos")?;
        Ok(ServerState {
            server_id: number(columns, "server_id")?,
            version: text(columns, "version")?,
            read_only: switch(columns, "read_only")?,
            executed: binlog.latest_per_domain(&slave),
            binlog_expire_seconds: number(columns, "binlog_expire_logs_seconds")?,
        })
    }

    /// MariaDB has no `super_read_only`. With `read_only` ON, accounts with `READ ONLY ADMIN`
    /// (which `SUPER` and `ALL PRIVILEGES` include in 10.11) can still write; application
    /// accounts cannot.
    fn read_only(&self, on: bool) -> &'static [&'static str] {
        if on {
            &["SET GLOBAL read_only = ON"]
        } else {
            &["SET GLOBAL read_only = OFF"]
        }
    }

    /// `MASTER_GTID_WAIT` takes fractional seconds.
    fn wait_for_executed(&self, position: &GtidPosition, timeout: Duration) -> String {
        format!(
            "SELECT MASTER_GTID_WAIT({}, {:.3})",
            quote_literal(&position.to_string()),
            timeout.as_secs_f64()
        )
    }

    fn wait_reached(&self, answer: i64) -> Option<bool> {
        match answer {
            0 => Some(true),
            -1 => Some(false),
            _ => None,
        }
    }

    /// Built into the server. MariaDB waits for one replica's acknowledgement: it has no
    /// setting for more, so a source role asking for more is refused rather than weakened.
    fn semi_sync(&self, role: &SemiSyncRole) -> Result<Vec<String>, String> {
        Ok(match role {
            SemiSyncRole::Source { wait_for, timeout } => {
                if *wait_for != 1 {
                    return Err(format!(
                        "MariaDB waits for exactly one replica's acknowledgement, not {wait_for}"
                    ));
                }
                vec![
                    "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC".to_string(),
                    format!(
                        "SET GLOBAL rpl_semi_sync_master_timeout = {}",
                        timeout.as_millis()
                    ),
                    "SET GLOBAL rpl_semi_sync_slave_enabled = OFF".to_string(),
                    "SET GLOBAL rpl_semi_sync_master_enabled = ON".to_string(),
                ]
            }
            SemiSyncRole::Replica => vec![
                "SET GLOBAL rpl_semi_sync_master_enabled = OFF".to_string(),
                "SET GLOBAL rpl_semi_sync_slave_enabled = ON".to_string(),
            ],
            SemiSyncRole::Off => vec![
                "SET GLOBAL rpl_semi_sync_master_enabled = OFF".to_string(),
                "SET GLOBAL rpl_semi_sync_slave_enabled = OFF".to_string(),
            ],
        })
    }

    fn semi_sync_source_variable(&self) -> &'static str {
        "rpl_semi_sync_master_enabled"
    }

    fn semi_sync_replica_variable(&self) -> &'static str {
        "rpl_semi_sync_slave_enabled"
    }

    fn set_start_position(&self, position: &GtidPosition, _version: &ServerVersion) -> Vec<String> {
        vec![format!(
            "SET GLOBAL gtid_slave_pos = {}",
            quote_literal(&position.to_string())
        )]
    }

    fn resume_position(&self, executed: &GtidPosition) -> Vec<String> {
        vec![format!(
            "SET GLOBAL gtid_slave_pos = {}",
            quote_literal(&executed.to_string())
        )]
    }

    /// `gtid_binlog_state` can be set only over an empty binary log, hence `RESET MASTER`
    /// first. It decides the sequence numbers of the member's next transactions; the same
    /// position in `gtid_slave_pos` keeps what the member reports as executed consistent should
    /// it later replicate.
    fn adopt_position(&self, position: &GtidPosition, _version: &ServerVersion) -> Vec<String> {
        let position = quote_literal(&position.to_string());
        vec![
            "RESET MASTER".to_string(),
            format!("SET GLOBAL gtid_binlog_state = {position}"),
            format!("SET GLOBAL gtid_slave_pos = {position}"),
        ]
    }

    /// MariaDB reports the binary log coordinates of a consistent snapshot
    /// (`binlog_snapshot_file` and `binlog_snapshot_position`, session status) without any
    /// lock; `BINLOG_GTID_POS` turns them into the GTID position.
    fn snapshot_start(&self) -> SnapshotStart {
        SnapshotStart {
            open: &[
                "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                "START TRANSACTION WITH CONSISTENT SNAPSHOT",
            ],
            position_query: "SELECT BINLOG_GTID_POS(\
                 (SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS \
                 WHERE VARIABLE_NAME = 'BINLOG_SNAPSHOT_FILE'), \
                 (SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS \
                 WHERE VARIABLE_NAME = 'BINLOG_SNAPSHOT_POSITION'))",
            release: &[],
        }
    }

    fn snapshot_session(&self) -> &'static [&'static str] {
        &[]
    }

    fn accounts_query(&self) -> &'static str {
        "SELECT User, Host FROM mysql.user WHERE is_role = 'N'"
    }

    fn system_accounts(&self) -> &'static [&'static str] {
        &["mariadb.sys", "mysql"]
    }

    fn restore_begin(&self) -> &'static [&'static str] {
        &[]
    }

    fn restore_end(&self, _read_only_was_on: bool) -> &'static [&'static str] {
        &[]
    }
}

impl Dialect for MySqlDialect {
    fn flavor(&self) -> Flavor {
        Flavor::MySQL
    }

    /// `GET_SOURCE_PUBLIC_KEY=1` lets `caching_sha2_password` (the default authentication)
    /// work over a connection without TLS.
    fn change_source(&self, source: &ReplicationSource) -> SecretStatement {
        SecretStatement::new(format!(
            "CHANGE REPLICATION SOURCE TO SOURCE_HOST={}, SOURCE_PORT={}, SOURCE_USER={}, \
             SOURCE_PASSWORD={}, SOURCE_SSL={}, SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1",
            quote_literal(&source.host),
            source.port,
            quote_literal(&source.user),
            quote_literal(source.password.expose_secret()),
            u8::from(source.tls),
        ))
    }

    fn start_replica(&self) -> &'static str {
        "START REPLICA"
    }

    fn stop_replica(&self) -> &'static str {
        "STOP REPLICA"
    }

    fn reset_replica_all(&self) -> &'static str {
        "RESET REPLICA ALL"
    }

    fn start_io_thread(&self) -> &'static str {
        "START REPLICA IO_THREAD"
    }

    fn stop_io_thread(&self) -> &'static str {
        "STOP REPLICA IO_THREAD"
    }

    fn replica_status_query(&self) -> &'static str {
        "SHOW REPLICA STATUS"
    }

    fn parse_replica_status(&self, columns: &Columns) -> Result<ReplicaStatus, String> {
        parse_replica_status(
            columns,
            &ReplicaColumns {
                io_running: "Replica_IO_Running",
                sql_running: "Replica_SQL_Running",
                seconds_behind: "Seconds_Behind_Source",
                host: "Source_Host",
                port: "Source_Port",
                received: "Retrieved_Gtid_Set",
            },
            Flavor::MySQL,
        )
    }

    /// `DISABLE ON SLAVE` is deprecated from 8.0.22.
    fn event_disabled_on_replicas(&self) -> &'static str {
        "DISABLE ON REPLICA"
    }

    fn report_query(&self) -> &'static str {
        "SELECT @@GLOBAL.server_id AS server_id, @@GLOBAL.version AS version, \
         @@GLOBAL.super_read_only AS read_only, @@GLOBAL.gtid_executed AS gtid_executed, \
         @@GLOBAL.binlog_expire_logs_seconds AS binlog_expire_logs_seconds"
    }

    fn parse_report(&self, columns: &Columns) -> Result<ServerState, String> {
        Ok(ServerState {
            server_id: number(columns, "server_id")?,
            version: text(columns, "version")?,
            read_only: switch(columns, "read_only")?,
            executed: parse_position(Flavor::MySQL, columns, "gtid_executed")?,
            binlog_expire_seconds: number(columns, "binlog_expire_logs_seconds")?,
        })
    }

    /// `super_read_only` ON also sets `read_only` ON and refuses writes from every account.
    /// Opening turns both off (`super_read_only` first: `read_only` cannot go OFF under it).
    fn read_only(&self, on: bool) -> &'static [&'static str] {
        if on {
            &["SET GLOBAL super_read_only = ON"]
        } else {
            &["SET GLOBAL super_read_only = OFF", "SET GLOBAL read_only = OFF"]
        }
    }

    /// `WAIT_FOR_EXECUTED_GTID_SET` takes whole seconds here (rounded up, at least one).
    fn wait_for_executed(&self, position: &GtidPosition, timeout: Duration) -> String {
        let seconds = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
        format!(
            "SELECT WAIT_FOR_EXECUTED_GTID_SET({}, {})",
            quote_literal(&position.to_string()),
            seconds.max(1)
        )
    }

    fn wait_reached(&self, answer: i64) -> Option<bool> {
        match answer {
            0 => Some(true),
            1 => Some(false),
            _ => None,
        }
    }

    /// The `rpl_semi_sync_source` and `rpl_semi_sync_replica` plugins (8.0.26+, 8.4) must be
    /// loaded by the server's configuration; without them the variables are unknown and the
    /// statements are refused.
    fn semi_sync(&self, role: &SemiSyncRole) -> Result<Vec<String>, String> {
        Ok(match role {
            SemiSyncRole::Source { wait_for, timeout } => {
                if *wait_for == 0 {
                    return Err("a semi-synchronous source waits for one replica at least".to_string());
                }
                vec![
                    "SET GLOBAL rpl_semi_sync_source_wait_point = AFTER_SYNC".to_string(),
                    format!("SET GLOBAL rpl_semi_sync_source_wait_for_replica_count = {wait_for}"),
                    format!(
                        "SET GLOBAL rpl_semi_sync_source_timeout = {}",
                        timeout.as_millis()
                    ),
                    "SET GLOBAL rpl_semi_sync_replica_enabled = OFF".to_string(),
                    "SET GLOBAL rpl_semi_sync_source_enabled = ON".to_string(),
                ]
            }
            SemiSyncRole::Replica => vec![
                "SET GLOBAL rpl_semi_sync_source_enabled = OFF".to_string(),
                "SET GLOBAL rpl_semi_sync_replica_enabled = ON".to_string(),
            ],
            SemiSyncRole::Off => vec![
                "SET GLOBAL rpl_semi_sync_source_enabled = OFF".to_string(),
                "SET GLOBAL rpl_semi_sync_replica_enabled = OFF".to_string(),
            ],
        })
    }

    fn semi_sync_source_variable(&self) -> &'static str {
        "rpl_semi_sync_source_enabled"
    }

    fn semi_sync_replica_variable(&self) -> &'static str {
        "rpl_semi_sync_replica_enabled"
    }

    /// `gtid_purged` can only be set over an empty `gtid_executed`: the binary logs and GTID
    /// history are reset first (`RESET MASTER` before 8.2, `RESET BINARY LOGS AND GTIDS` since).
    fn set_start_position(&self, position: &GtidPosition, version: &ServerVersion) -> Vec<String> {
        let reset = if version.at_least(8, 2) {
            "RESET BINARY LOGS AND GTIDS"
        } else {
            "RESET MASTER"
        };
        vec![
            reset.to_string(),
            format!(
                "SET GLOBAL gtid_purged = {}",
                quote_literal(&position.to_string())
            ),
        ]
    }

    fn resume_position(&self, _executed: &GtidPosition) -> Vec<String> {
        Vec::new()
    }

    /// `gtid_executed` is what the member executed and `gtid_purged` the part of it no longer
    /// in its binary log: setting the purged set over a reset history is exactly a replica's
    /// start position.
    fn adopt_position(&self, position: &GtidPosition, version: &ServerVersion) -> Vec<String> {
        self.set_start_position(position, version)
    }

    /// MySQL has no lock-free snapshot position: as `mysqldump --single-transaction` does, a
    /// global read lock is held only while the snapshot opens and `gtid_executed` is read, so
    /// no transaction commits in between. Needs the `RELOAD` privilege.
    fn snapshot_start(&self) -> SnapshotStart {
        SnapshotStart {
            open: &[
                "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                "FLUSH TABLES WITH READ LOCK",
                "START TRANSACTION WITH CONSISTENT SNAPSHOT",
            ],
            position_query: "SELECT @@GLOBAL.gtid_executed",
            release: &["UNLOCK TABLES"],
        }
    }

    /// Password hashes of `caching_sha2_password` are binary; as hex they survive as text.
    fn snapshot_session(&self) -> &'static [&'static str] {
        &["SET SESSION print_identified_with_as_hex = ON"]
    }

    fn accounts_query(&self) -> &'static str {
        "SELECT User, Host FROM mysql.user"
    }

    fn system_accounts(&self) -> &'static [&'static str] {
        &["mysql.sys", "mysql.session", "mysql.infoschema"]
    }

    /// `super_read_only` refuses even the admin account's writes; `read_only` alone (left ON)
    /// still refuses application accounts while the restore runs.
    fn restore_begin(&self) -> &'static [&'static str] {
        &["SET GLOBAL super_read_only = OFF"]
    }

    fn restore_end(&self, read_only_was_on: bool) -> &'static [&'static str] {
        if read_only_was_on {
            &["SET GLOBAL super_read_only = ON"]
        } else {
            &[]
        }
    }
}

/// A SQL string literal for `value`, safe against injection whatever the session's
/// `sql_mode`: quotes are doubled (which `NO_BACKSLASH_ESCAPES` also honours), backslashes and
/// control characters escaped (exact when backslash escapes are on, which the admin sessions
/// ensure).
pub fn quote_literal(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('\'');
    for c in value.chars() {
        match c {
            '\'' => quoted.push_str("''"),
            '\\' => quoted.push_str("\\\\"),
            '\0' => quoted.push_str("\\0"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\x1a' => quoted.push_str("\\Z"),
            other => quoted.push(other),
        }
    }
    quoted.push('\'');
    quoted
}

/// A quoted identifier (database, table, column): backticks doubled.
pub fn quote_identifier(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// An account name, `'user'@'host'`.
pub fn account(user: &str, host: &str) -> String {
    format!("{}@{}", quote_literal(user), quote_literal(host))
}

struct ReplicaColumns {
    io_running: &'static str,
    sql_running: &'static str,
    seconds_behind: &'static str,
    host: &'static str,
    port: &'static str,
    received: &'static str,
}

fn parse_replica_status(
    columns: &Columns,
    names: &ReplicaColumns,
    flavor: Flavor,
) -> Result<ReplicaStatus, String> {
    let io_thread = match text(columns, names.io_running)?.as_str() {
        "Yes" => IoThread::Running,
        "Connecting" | "Preparing" => IoThread::Connecting,
        _ => IoThread::Stopped,
    };
    let seconds_behind = match columns.get(names.seconds_behind) {
        Some(Some(value)) => Some(
            value
                .parse()
                .map_err(|_| format!("{}: not a number: {value:?}", names.seconds_behind))?,
        ),
        Some(None) => None,
        None => return Err(format!("no column {}", names.seconds_behind)),
    };
    Ok(ReplicaStatus {
        source_host: text(columns, names.host)?,
        source_port: number(columns, names.port)?,
        io_thread,
        sql_running: text(columns, names.sql_running)? == "Yes",
        seconds_behind,
        last_io_errno: number(columns, "Last_IO_Errno")?,
        last_io_error: text(columns, "Last_IO_Error")?,
        last_sql_errno: number(columns, "Last_SQL_Errno")?,
        last_sql_error: text(columns, "Last_SQL_Error")?,
        received: parse_position(flavor, columns, names.received)?,
    })
}

/// A column's text; NULL reads as empty.
fn text(columns: &Columns, name: &str) -> Result<String, String> {
    match columns.get(name) {
        Some(value) => Ok(value.clone().unwrap_or_default()),
        None => Err(format!("no column {name}")),
    }
}

fn number<T: std::str::FromStr>(columns: &Columns, name: &str) -> Result<T, String> {
    let value = text(columns, name)?;
    value
        .trim()
        .parse()
        .map_err(|_| format!("{name}: not a number: {value:?}"))
}

/// A boolean variable as the server prints it (`1`/`0`, `ON`/`OFF`).
fn switch(columns: &Columns, name: &str) -> Result<bool, String> {
    let value = text(columns, name)?;
    match value.to_ascii_uppercase().as_str() {
        "1" | "ON" | "YES" | "TRUE" => Ok(true),
        "0" | "OFF" | "NO" | "FALSE" => Ok(false),
        _ => Err(format!("{name}: not a switch: {value:?}")),
    }
}

fn parse_position(flavor: Flavor, columns: &Columns, name: &str) -> Result<GtidPosition, String> {
    GtidPosition::parse(flavor, &text(columns, name)?).map_err(|e| format!("{name}: {e}"))
}

/// Whether a variable's value (from `SHOW VARIABLES`) is on.
pub(crate) fn is_on(value: &str) -> bool {
    matches!(value.to_ascii_uppercase().as_str(), "ON" | "1" | "YES" | "TRUE")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(tls: bool) -> ReplicationSource {
        ReplicationSource {
            host: "m-0.db".to_string(),
            port: 3306,
            user: "quorum_repl".to_string(),
            password: SecretString::from("p'w\\d"),
            tls,
            semi_sync: false,
        }
    }

    fn columns(pairs: &[(&str, Option<&str>)]) -> Columns {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect()
    }

    const MARIADB: &MariaDbDialect = &MariaDbDialect;
    const MYSQL: &MySqlDialect = &MySqlDialect;
    const UUID: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

    #[test]
    fn quote_literal_escapes_quotes_backslashes_and_control_characters() {
        assert_eq!(quote_literal("plain"), "'plain'");
        assert_eq!(quote_literal(""), "''");
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("a\\b"), "'a\\\\b'");
        assert_eq!(quote_literal("a\0b\nc\rd\x1ae"), "'a\\0b\\nc\\rd\\Ze'");
        assert_eq!(quote_literal("\"double\""), "'\"double\"'");
        assert_eq!(quote_literal("ünïcödé"), "'ünïcödé'");
    }

    #[test]
    fn quote_literal_resists_injection() {
        // Every quote in the output is doubled or is one of the two delimiters, and a backslash
        // is always followed by its escaped character, so the literal cannot end early.
        for attack in [
            "x', MASTER_HOST='evil",
            "x\\', MASTER_HOST='evil",
            "x\\\\'; DROP TABLE t; -- ",
            "'; SET GLOBAL read_only=OFF; #",
            "\\",
            "'",
            "\\'",
        ] {
            let quoted = quote_literal(attack);
            let inner = &quoted[1..quoted.len() - 1];
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => assert!(chars.next().is_some(), "dangling backslash in {quoted}"),
                    '\'' => assert_eq!(chars.next(), Some('\''), "lone quote in {quoted}"),
                    _ => {}
                }
            }
            assert!(quoted.starts_with('\'') && quoted.ends_with('\''));
        }
        assert_eq!(
            quote_literal("x\\', MASTER_HOST='evil"),
            "'x\\\\'', MASTER_HOST=''evil'"
        );
    }

    #[test]
    fn quote_identifier_doubles_backticks() {
        assert_eq!(quote_identifier("app"), "`app`");
        assert_eq!(quote_identifier("we`ird"), "`we``ird`");
        assert_eq!(account("app", "%"), "'app'@'%'");
    }

    #[test]
    fn server_versions_parse_from_either_flavor() {
        let v = |major, minor, patch| Some(ServerVersion { major, minor, patch });
        assert_eq!(ServerVersion::parse("8.4.2"), v(8, 4, 2));
        assert_eq!(ServerVersion::parse("8.0.36-commercial"), v(8, 0, 36));
        assert_eq!(
            ServerVersion::parse("10.11.6-MariaDB-0+deb12u1-log"),
            v(10, 11, 6)
        );
        assert_eq!(ServerVersion::parse("11.4"), v(11, 4, 0));
        assert_eq!(ServerVersion::parse("MariaDB"), None);
    }

    #[test]
    fn change_source_statements() {
        assert_eq!(
            MARIADB.change_source(&source(false)).expose(),
            "CHANGE MASTER TO MASTER_HOST='m-0.db', MASTER_PORT=3306, MASTER_USER='quorum_repl', \
             MASTER_PASSWORD='p''w\\\\d', MASTER_SSL=0, MASTER_USE_GTID=slave_pos"
        );
        assert_eq!(
            MARIADB.change_source(&source(true)).expose(),
            "CHANGE MASTER TO MASTER_HOST='m-0.db', MASTER_PORT=3306, MASTER_USER='quorum_repl', \
             MASTER_PASSWORD='p''w\\\\d', MASTER_SSL=1, MASTER_USE_GTID=slave_pos"
        );
        assert_eq!(
            MYSQL.change_source(&source(false)).expose(),
            "CHANGE REPLICATION SOURCE TO SOURCE_HOST='m-0.db', SOURCE_PORT=3306, \
             SOURCE_USER='quorum_repl', SOURCE_PASSWORD='p''w\\\\d', SOURCE_SSL=0, \
             SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1"
        );
        assert_eq!(
            MYSQL.change_source(&source(true)).expose(),
            "CHANGE REPLICATION SOURCE TO SOURCE_HOST='m-0.db', SOURCE_PORT=3306, \
             SOURCE_USER='quorum_repl', SOURCE_PASSWORD='p''w\\\\d', SOURCE_SSL=1, \
             SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1"
        );
    }

    #[test]
    fn replication_control_statements() {
        let pairs = |d: &dyn Dialect| {
            [
                d.start_replica(),
                d.stop_replica(),
                d.reset_replica_all(),
                d.start_io_thread(),
                d.stop_io_thread(),
                d.replica_status_query(),
            ]
        };
        assert_eq!(
            pairs(MARIADB),
            [
                "START SLAVE",
                "STOP SLAVE",
                "RESET SLAVE ALL",
                "START SLAVE IO_THREAD",
                "STOP SLAVE IO_THREAD",
                "SHOW SLAVE STATUS"
            ]
        );
        assert_eq!(
            pairs(MYSQL),
            [
                "START REPLICA",
                "STOP REPLICA",
                "RESET REPLICA ALL",
                "START REPLICA IO_THREAD",
                "STOP REPLICA IO_THREAD",
                "SHOW REPLICA STATUS"
            ]
        );
    }

    #[test]
    fn mariadb_replica_status_parses() {
        let row = columns(&[
            ("Slave_IO_Running", Some("Yes")),
            ("Slave_SQL_Running", Some("Yes")),
            ("Seconds_Behind_Master", Some("3")),
            ("Master_Host", Some("10.0.0.1")),
            ("Master_Port", Some("3306")),
            ("Last_IO_Errno", Some("0")),
            ("Last_IO_Error", Some("")),
            ("Last_SQL_Errno", Some("0")),
            ("Last_SQL_Error", Some("")),
            ("Gtid_IO_Pos", Some("0-1-42")),
        ]);
        let status = MARIADB.parse_replica_status(&row).unwrap();
        assert_eq!(status.io_thread, IoThread::Running);
        assert!(status.sql_running && status.source_connected() && !status.source_lost());
        assert_eq!(status.seconds_behind, Some(3));
        assert_eq!(
            (status.source_host.as_str(), status.source_port),
            ("10.0.0.1", 3306)
        );
        assert_eq!(status.received.to_string(), "0-1-42");
    }

    #[test]
    fn mariadb_replica_status_of_a_lost_source() {
        let row = columns(&[
            ("Slave_IO_Running", Some("Connecting")),
            ("Slave_SQL_Running", Some("Yes")),
            ("Seconds_Behind_Master", None),
            ("Master_Host", Some("10.0.0.1")),
            ("Master_Port", Some("3306")),
            ("Last_IO_Errno", Some("2003")),
            ("Last_IO_Error", Some("error reconnecting to master")),
            ("Last_SQL_Errno", Some("0")),
            ("Last_SQL_Error", Some("")),
            ("Gtid_IO_Pos", Some("")),
        ]);
        let status = MARIADB.parse_replica_status(&row).unwrap();
        assert_eq!(status.io_thread, IoThread::Connecting);
        assert_eq!(status.seconds_behind, None);
        assert!(!status.source_connected() && status.source_lost());
        assert_eq!(status.last_io_errno, 2003);
        assert!(status.received.is_empty());
    }

    #[test]
    fn replica_status_errors_name_the_column() {
        let row = columns(&[("Slave_IO_Running", Some("Yes"))]);
        assert!(
            MARIADB
                .parse_replica_status(&row)
                .unwrap_err()
                .contains("Seconds_Behind_Master")
        );
    }

    #[test]
    fn mysql_replica_status_parses() {
        let row = columns(&[
            ("Replica_IO_Running", Some("No")),
            ("Replica_SQL_Running", Some("No")),
            ("Seconds_Behind_Source", None),
            ("Source_Host", Some("m-0")),
            ("Source_Port", Some("3306")),
            ("Last_IO_Errno", Some("1045")),
            ("Last_IO_Error", Some("Access denied")),
            ("Last_SQL_Errno", Some("0")),
            ("Last_SQL_Error", Some("")),
            (
                "Retrieved_Gtid_Set",
                Some(&format!("{}:1-5,\n", UUID.to_uppercase())),
            ),
            ("Executed_Gtid_Set", Some(&format!("{UUID}:1-5"))),
        ]);
        let status = MYSQL.parse_replica_status(&row).unwrap();
        assert_eq!(status.io_thread, IoThread::Stopped);
        assert!(!status.sql_running);
        assert!(
            !status.source_lost(),
            "an authentication failure is not a lost source"
        );
        assert_eq!(status.received.to_string(), format!("{UUID}:1-5"));
    }

    #[test]
    fn reports_parse() {
        let maria = MARIADB
            .parse_report(&columns(&[
                ("server_id", Some("2")),
                ("version", Some("10.11.6-MariaDB-log")),
                ("read_only", Some("1")),
                ("gtid_binlog_pos", Some("0-2-9,1-1-3")),
                ("gtid_slave_pos", Some("0-1-12")),
                ("binlog_expire_logs_seconds", Some("604800")),
            ]))
            .unwrap();
        assert_eq!(maria.binlog_expire_seconds, 604_800);
        assert_eq!(maria.server_id, 2);
        assert!(maria.read_only);
        assert_eq!(maria.executed.to_string(), "0-1-12,1-1-3");
        let mysql = MYSQL
            .parse_report(&columns(&[
                ("server_id", Some("7")),
                ("version", Some("8.4.2")),
                ("read_only", Some("0")),
                ("gtid_executed", Some(&format!("{UUID}:1-3"))),
                ("binlog_expire_logs_seconds", Some("0")),
            ]))
            .unwrap();
        assert!(!mysql.read_only);
        assert_eq!(mysql.executed.to_string(), format!("{UUID}:1-3"));
        assert_eq!(
            MYSQL.report_query(),
            "SELECT @@GLOBAL.server_id AS server_id, @@GLOBAL.version AS version, \
             @@GLOBAL.super_read_only AS read_only, @@GLOBAL.gtid_executed AS gtid_executed, \
             @@GLOBAL.binlog_expire_logs_seconds AS binlog_expire_logs_seconds"
        );
    }

    #[test]
    fn read_only_statements() {
        assert_eq!(MARIADB.read_only(true), ["SET GLOBAL read_only = ON"]);
        assert_eq!(MARIADB.read_only(false), ["SET GLOBAL read_only = OFF"]);
        assert_eq!(MYSQL.read_only(true), ["SET GLOBAL super_read_only = ON"]);
        assert_eq!(
            MYSQL.read_only(false),
            ["SET GLOBAL super_read_only = OFF", "SET GLOBAL read_only = OFF"]
        );
    }

    #[test]
    fn wait_for_executed_statements() {
        let maria = GtidPosition::parse(Flavor::MariaDB, "0-1-5").unwrap();
        assert_eq!(
            MARIADB.wait_for_executed(&maria, Duration::from_millis(2500)),
            "SELECT MASTER_GTID_WAIT('0-1-5', 2.500)"
        );
        assert_eq!(MARIADB.wait_reached(0), Some(true));
        assert_eq!(MARIADB.wait_reached(-1), Some(false));
        assert_eq!(MARIADB.wait_reached(1), None);
        let set = GtidPosition::parse(Flavor::MySQL, &format!("{UUID}:1-5")).unwrap();
        assert_eq!(
            MYSQL.wait_for_executed(&set, Duration::from_millis(2500)),
            format!("SELECT WAIT_FOR_EXECUTED_GTID_SET('{UUID}:1-5', 3)")
        );
        assert_eq!(
            MYSQL.wait_for_executed(&set, Duration::ZERO),
            format!("SELECT WAIT_FOR_EXECUTED_GTID_SET('{UUID}:1-5', 1)")
        );
        assert_eq!(MYSQL.wait_reached(0), Some(true));
        assert_eq!(MYSQL.wait_reached(1), Some(false));
        assert_eq!(MYSQL.wait_reached(-1), None);
    }

    #[test]
    fn semi_sync_statements() {
        let source = SemiSyncRole::Source {
            wait_for: 1,
            timeout: Duration::from_secs(10),
        };
        assert_eq!(
            MARIADB.semi_sync(&source).unwrap(),
            [
                "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC",
                "SET GLOBAL rpl_semi_sync_master_timeout = 10000",
                "SET GLOBAL rpl_semi_sync_slave_enabled = OFF",
                "SET GLOBAL rpl_semi_sync_master_enabled = ON",
            ]
        );
        assert_eq!(
            MARIADB.semi_sync(&SemiSyncRole::Replica).unwrap(),
            [
                "SET GLOBAL rpl_semi_sync_master_enabled = OFF",
                "SET GLOBAL rpl_semi_sync_slave_enabled = ON",
            ]
        );
        assert_eq!(
            MARIADB.semi_sync(&SemiSyncRole::Off).unwrap(),
            [
                "SET GLOBAL rpl_semi_sync_master_enabled = OFF",
                "SET GLOBAL rpl_semi_sync_slave_enabled = OFF",
            ]
        );
        let two = SemiSyncRole::Source {
            wait_for: 2,
            timeout: Duration::from_secs(1),
        };
        assert!(MARIADB.semi_sync(&two).is_err(), "MariaDB cannot wait for two");
        assert_eq!(
            MYSQL.semi_sync(&two).unwrap(),
            [
                "SET GLOBAL rpl_semi_sync_source_wait_point = AFTER_SYNC",
                "SET GLOBAL rpl_semi_sync_source_wait_for_replica_count = 2",
                "SET GLOBAL rpl_semi_sync_source_timeout = 1000",
                "SET GLOBAL rpl_semi_sync_replica_enabled = OFF",
                "SET GLOBAL rpl_semi_sync_source_enabled = ON",
            ]
        );
        assert_eq!(
            MYSQL.semi_sync(&SemiSyncRole::Replica).unwrap(),
            [
                "SET GLOBAL rpl_semi_sync_source_enabled = OFF",
                "SET GLOBAL rpl_semi_sync_replica_enabled = ON",
            ]
        );
        assert_eq!(
            MYSQL.semi_sync(&SemiSyncRole::Off).unwrap(),
            [
                "SET GLOBAL rpl_semi_sync_source_enabled = OFF",
                "SET GLOBAL rpl_semi_sync_replica_enabled = OFF",
            ]
        );
        let zero = SemiSyncRole::Source {
            wait_for: 0,
            timeout: Duration::from_secs(1),
        };
        assert!(MYSQL.semi_sync(&zero).is_err());
    }

    #[test]
    fn start_position_statements_depend_on_flavor_and_version() {
        let maria = GtidPosition::parse(Flavor::MariaDB, "0-1-5,1-2-3").unwrap();
        let any = ServerVersion::parse("10.11.6").unwrap();
        assert_eq!(
            MARIADB.set_start_position(&maria, &any),
            ["SET GLOBAL gtid_slave_pos = '0-1-5,1-2-3'"]
        );
        assert_eq!(
            MARIADB.resume_position(&maria),
            ["SET GLOBAL gtid_slave_pos = '0-1-5,1-2-3'"]
        );
        let set = GtidPosition::parse(Flavor::MySQL, &format!("{UUID}:1-5")).unwrap();
        assert_eq!(
            MYSQL.set_start_position(&set, &ServerVersion::parse("8.0.36").unwrap()),
            [
                "RESET MASTER".to_string(),
                format!("SET GLOBAL gtid_purged = '{UUID}:1-5'")
            ]
        );
        assert_eq!(
            MYSQL.set_start_position(&set, &ServerVersion::parse("8.4.2").unwrap()),
            [
                "RESET BINARY LOGS AND GTIDS".to_string(),
                format!("SET GLOBAL gtid_purged = '{UUID}:1-5'")
            ]
        );
        assert!(MYSQL.resume_position(&set).is_empty(), "auto-positioning");
    }

    #[test]
    fn adopting_a_restored_position_resets_the_history_to_it() {
        let maria = GtidPosition::parse(Flavor::MariaDB, "0-1-5,1-2-3").unwrap();
        assert_eq!(
            MARIADB.adopt_position(&maria, &ServerVersion::parse("10.11.6").unwrap()),
            [
                "RESET MASTER",
                "SET GLOBAL gtid_binlog_state = '0-1-5,1-2-3'",
                "SET GLOBAL gtid_slave_pos = '0-1-5,1-2-3'",
            ]
        );
        let empty = GtidPosition::empty(Flavor::MariaDB);
        assert_eq!(
            MARIADB.adopt_position(&empty, &ServerVersion::parse("11.4.2").unwrap()),
            [
                "RESET MASTER",
                "SET GLOBAL gtid_binlog_state = ''",
                "SET GLOBAL gtid_slave_pos = ''",
            ]
        );
        let set = GtidPosition::parse(Flavor::MySQL, &format!("{UUID}:1-5")).unwrap();
        assert_eq!(
            MYSQL.adopt_position(&set, &ServerVersion::parse("8.0.36").unwrap()),
            [
                "RESET MASTER".to_string(),
                format!("SET GLOBAL gtid_purged = '{UUID}:1-5'")
            ]
        );
        assert_eq!(
            MYSQL.adopt_position(&set, &ServerVersion::parse("8.4.2").unwrap()),
            [
                "RESET BINARY LOGS AND GTIDS".to_string(),
                format!("SET GLOBAL gtid_purged = '{UUID}:1-5'")
            ]
        );
    }

    #[test]
    fn snapshot_statements() {
        let maria = MARIADB.snapshot_start();
        assert_eq!(
            maria.open,
            [
                "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                "START TRANSACTION WITH CONSISTENT SNAPSHOT"
            ]
        );
        assert!(maria.position_query.starts_with("SELECT BINLOG_GTID_POS("));
        assert!(maria.release.is_empty(), "no lock taken");
        let mysql = MYSQL.snapshot_start();
        assert_eq!(
            mysql.open,
            [
                "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                "FLUSH TABLES WITH READ LOCK",
                "START TRANSACTION WITH CONSISTENT SNAPSHOT"
            ]
        );
        assert_eq!(mysql.position_query, "SELECT @@GLOBAL.gtid_executed");
        assert_eq!(mysql.release, ["UNLOCK TABLES"]);
        assert_eq!(MYSQL.restore_begin(), ["SET GLOBAL super_read_only = OFF"]);
        assert_eq!(MYSQL.restore_end(true), ["SET GLOBAL super_read_only = ON"]);
        assert!(MYSQL.restore_end(false).is_empty());
        assert!(MARIADB.restore_begin().is_empty());
    }

    #[test]
    fn dialect_follows_flavor() {
        assert_eq!(dialect(Flavor::MariaDB).flavor(), Flavor::MariaDB);
        assert_eq!(dialect(Flavor::MySQL).flavor(), Flavor::MySQL);
        assert_eq!(MARIADB.kill_connection(42), "KILL CONNECTION 42");
    }
}
