//! The server's own SQL admin interface, one verb per method, against one member at a time.
//!
//! No Kubernetes here: these verbs are tested against real MariaDB processes alone. The SQL
//! differs between MySQL and MariaDB and lives in [`dialect`] (pure, pinned by unit tests);
//! [`MySqlAdmin`] runs it over one small connection pool per member. GTID positions and their
//! comparisons are in [`gtid`]; the logical snapshot used to add a member and for backups is in
//! [`snapshot`]; the physical copy of a MariaDB member's files (`mariadb-backup`) in [`physical`].
//!
//! Passwords never reach a log or an error: they are [`SecretString`]s, statements carrying
//! them are [`dialect::SecretStatement`]s, and an error names the kind of statement (for
//! example `CHANGE MASTER TO`) and the server's code and message, with the password scrubbed
//! from the message.

pub mod binlog;
pub mod dialect;
pub mod gtid;
pub mod physical;
pub mod snapshot;

use std::future::Future;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Pool, PoolConstraints, PoolOpts, Row, Value};
use secrecy::{ExposeSecret, SecretString};

use crate::crd::Flavor;
use dialect::{Columns, Dialect, SecretStatement, ServerVersion, account, quote_literal};
use gtid::GtidPosition;

/// Where a replica replicates from, and as whom.
#[derive(Clone, Debug)]
pub struct ReplicationSource {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// Redacted in `Debug`.
    pub password: SecretString,
    /// Replicate over TLS.
    pub tls: bool,
    /// Acknowledge as a semi-synchronous replica from the first event received. A MariaDB old
    /// primary that discarded its unacknowledged tail at restart takes its own transactions back
    /// from the new primary only as a semi-synchronous replica; otherwise it skips them as its
    /// own (same server id) while its GTID position moves past them.
    pub semi_sync: bool,
}

/// The state of a replica's receiving (IO) thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoThread {
    /// Connected to the source and receiving.
    Running,
    /// Trying to (re)connect to the source.
    Connecting,
    Stopped,
}

/// What a replica says about its replication (`SHOW SLAVE STATUS` / `SHOW REPLICA STATUS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaStatus {
    pub source_host: String,
    pub source_port: u16,
    pub io_thread: IoThread,
    pub sql_running: bool,
    /// `None` when the server cannot tell (a thread is not running).
    pub seconds_behind: Option<u64>,
    pub last_io_errno: u32,
    pub last_io_error: String,
    pub last_sql_errno: u32,
    pub last_sql_error: String,
    /// What the receiving thread has received from the source (MariaDB `Gtid_IO_Pos`, MySQL
    /// `Retrieved_Gtid_Set`, which covers only what was received since the thread started).
    pub received: GtidPosition,
}

/// Client error codes that mean the replica cannot reach its source: connection refused or
/// failed (2002, 2003, 2005), lost or gone (2006, 2013), network read and write failures
/// (1158 to 1161).
const CONNECTION_ERRORS: &[u32] = &[2002, 2003, 2005, 2006, 2013, 1158, 1159, 1160, 1161];

impl ReplicaStatus {
    /// The receiving thread is connected to the source.
    pub fn source_connected(&self) -> bool {
        self.io_thread == IoThread::Running
    }

    /// The replica has lost its source: its receiving thread is not connected and its last
    /// error is a connection failure, or it is connecting with no error yet. After a silent break
    /// (a node lost) the server records no error until its reconnect attempt times out, a minute
    /// or more later, and the failover would wait for it. A refused login or any other error is
    /// not a lost source but a configuration problem.
    pub fn source_lost(&self) -> bool {
        if self.source_connected() {
            return false;
        }
        CONNECTION_ERRORS.contains(&self.last_io_errno)
            || (self.io_thread == IoThread::Connecting && self.last_io_errno == 0)
    }
}

/// One member's report on itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberReport {
    pub server_id: u32,
    pub version: String,
    /// Writes are refused as [`MySqlAdmin::set_read_only`]`(true)` leaves the server (MySQL
    /// `super_read_only`, MariaDB `read_only`).
    pub read_only: bool,
    /// Everything the server has applied or written (see
    /// [`dialect::MariaDbDialect::parse_report`] for MariaDB's composition).
    pub executed: GtidPosition,
    /// `None` when the server is not configured as a replica.
    pub replica: Option<ReplicaStatus>,
    /// The server waits for a replica's acknowledgement before a commit returns.
    pub semi_sync_source_on: bool,
    /// The server acknowledges what it receives to a semi-synchronous source.
    pub semi_sync_replica_on: bool,
    /// How long binary logs are kept; 0 for ever.
    pub binlog_expire_seconds: u32,
}

/// The account the operator administers a server as.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub user: String,
    /// Redacted in `Debug`.
    pub password: SecretString,
    /// The CA (PEM) the servers' certificates are verified against. When present every
    /// connection uses TLS: a server with `require_secure_transport` refuses any other.
    pub server_ca: Option<Vec<u8>>,
}

impl Credentials {
    /// Whether both log in as the same user with the same password and verify the servers
    /// against the same CA.
    pub fn same(&self, other: &Credentials) -> bool {
        self.user == other.user
            && self.password.expose_secret() == other.password.expose_secret()
            && self.server_ca == other.server_ca
    }
}

/// A member's part in semi-synchronous replication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SemiSyncRole {
    /// Commits wait for `wait_for` replicas' acknowledgements, up to `timeout`, after which
    /// the source falls back to asynchronous replication.
    Source {
        wait_for: u32,
        timeout: Duration,
    },
    /// Acknowledges what it receives.
    Replica,
    Off,
}

/// A failed admin call.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The server could not be reached or stopped answering: connection refused, timed out or
    /// lost, or shutting down. Says nothing about the server's state.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The server answered and refused the statement; nothing else ran after it in this call.
    #[error("{statement} refused: error {code}: {message}")]
    Refused {
        statement: &'static str,
        code: u16,
        message: String,
    },
    /// The flavor cannot do what was asked (for example MariaDB waiting for two replicas).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The server answered something this code does not understand.
    #[error("unexpected answer: {0}")]
    Unexpected(String),
}

impl AdminError {
    /// The server could not be reached: nothing can be concluded about its state.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable(_))
    }

    /// The server's error code when it refused a statement.
    pub fn refused_code(&self) -> Option<u16> {
        match self {
            Self::Refused { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The server refused for want of a privilege. A connection keeps the global privileges
    /// it logged in with, so a privilege granted since is seen only by a new connection.
    pub fn is_access_denied(&self) -> bool {
        self.refused_code()
            .is_some_and(|code| ACCESS_DENIED.contains(&code))
    }
}

/// Refusals for want of a privilege: global (1227), database (1044), table (1142), column
/// (1143), routine (1370).
const ACCESS_DENIED: &[u16] = &[1044, 1142, 1143, 1227, 1370];

/// Server error codes that mean the connection, not the statement, failed: server shutting
/// down (1053), connection killed (1927, MariaDB), too many connections (1040), and MySQL's
/// client-side codes when a server relays them.
const SERVER_CONNECTION_ERRORS: &[u16] = &[1040, 1053, 1927, 2002, 2003, 2006, 2013];

/// `KILL` of a connection that already ended.
const UNKNOWN_THREAD: u16 = 1094;

/// How long `SET GLOBAL read_only` may wait for locks held by running statements (seconds).
const LOCK_WAIT_SECONDS: u32 = 10;

/// Admin access to one member. Cheap to clone (a shared pool of at most two connections).
#[derive(Clone)]
pub struct MySqlAdmin {
    pool: Pool,
    /// For connections outside the pool: a binary log dump cannot go back to it.
    options: mysql_async::Opts,
    dialect: &'static dyn Dialect,
    endpoint: String,
    connect_timeout: Duration,
    statement_timeout: Duration,
}

impl std::fmt::Debug for MySqlAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlAdmin")
            .field("flavor", &self.dialect.flavor())
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl MySqlAdmin {
    /// Admin access to the server at `host:port` as `credentials`. Connects lazily: no I/O
    /// here. A connection attempt longer than `connect_timeout` counts as unreachable; each
    /// verb as a whole is bounded by a statement timeout (30 s, see
    /// [`MySqlAdmin::with_statement_timeout`]).
    pub fn new(
        flavor: Flavor,
        host: &str,
        port: u16,
        credentials: &Credentials,
        connect_timeout: Duration,
    ) -> Self {
        let constraints = PoolConstraints::new(0, 2).expect("0 <= 2");
        let pool_options = PoolOpts::new()
            .with_constraints(constraints)
            .with_inactive_connection_ttl(Duration::from_secs(30));
        let options = OptsBuilder::default()
            .ip_or_hostname(host)
            .tcp_port(port)
            .user(Some(credentials.user.clone()))
            .pass(Some(credentials.password.expose_secret().to_string()))
            // TCP only, even to a loopback address: the server's socket may not be ours.
            .prefer_socket(false)
            .ssl_opts(
                credentials
                    .server_ca
                    .clone()
                    .map(|ca| mysql_async::SslOpts::default().with_root_certs(vec![ca.into()])),
            )
            .pool_opts(pool_options)
            // Literals are escaped with backslashes (dialect::quote_literal); make sure the
            // session honours them whatever the server's default sql_mode.
            .setup(vec![
                "SET SESSION sql_mode = TRIM(BOTH ',' FROM REPLACE(CONCAT(',', @@SESSION.sql_mode, ','), \
                 ',NO_BACKSLASH_ESCAPES,', ','))"
                    .to_string(),
            ]);
        let options = mysql_async::Opts::from(options);
        Self {
            pool: Pool::new(options.clone()),
            options,
            dialect: dialect::dialect(flavor),
            endpoint: format!("{host}:{port}"),
            connect_timeout,
            statement_timeout: Duration::from_secs(30),
        }
    }

    /// The same, with each verb bounded by `timeout` instead (waits add their own timeout).
    pub fn with_statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = timeout;
        self
    }

    pub fn flavor(&self) -> Flavor {
        self.dialect.flavor()
    }

    pub fn dialect(&self) -> &'static dyn Dialect {
        self.dialect
    }

    /// `host:port`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The member's state: identity, read-only, executed GTIDs, replication and semi-sync.
    ///
    /// # Errors
    /// [`AdminError::Unreachable`] when the server does not answer; `Refused` when the account
    /// lacks the privileges to read replica status.
    pub async fn report(&self) -> Result<MemberReport, AdminError> {
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            self.report_on(&mut conn).await
        })
        .await
    }

    /// Makes the member a replica of `source`, by GTID, and starts replication: stops
    /// replication (already stopped is fine), sets where to start, points at the source and
    /// starts. With `start_at` (the position of a snapshot just restored into it), the member
    /// replicates from there, its own GTID history replaced; without, from what it executed
    /// itself (so a former primary does not fetch its own transactions again).
    ///
    /// Idempotent, but it restarts replication: call it when the report shows another source,
    /// or replication stopped. Check for errant transactions first: they would be taken as
    /// already replicated.
    ///
    /// # Errors
    /// `Refused` for the first statement refused (the ones before it stay done: replication may
    /// be left stopped); `Unexpected` for a `start_at` of the other flavor.
    pub async fn configure_replica(
        &self,
        source: &ReplicationSource,
        start_at: Option<&GtidPosition>,
    ) -> Result<(), AdminError> {
        if let Some(position) = start_at
            && position.flavor() != self.flavor()
        {
            return Err(AdminError::Unexpected(format!(
                "a {:?} start position for a {:?} server",
                position.flavor(),
                self.flavor()
            )));
        }
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            self.stop_replica_on(&mut conn).await?;
            let statements = match start_at {
                Some(position) => {
                    let version = self.state_on(&mut conn).await?.version;
                    let version = ServerVersion::parse(&version)
                        .ok_or_else(|| AdminError::Unexpected(format!("server version {version:?}")))?;
                    self.dialect.set_start_position(position, &version)
                }
                None => {
                    let executed = self.state_on(&mut conn).await?.executed;
                    self.dialect.resume_position(&executed)
                }
            };
            for statement in &statements {
                run(&mut conn, statement, "set GTID start position").await?;
            }
            let change = self.dialect.change_source(source);
            run_secret(&mut conn, &change, self.change_source_kind(), &source.password).await?;
            if source.semi_sync {
                let statements = self
                    .dialect
                    .semi_sync(&SemiSyncRole::Replica)
                    .map_err(AdminError::Unexpected)?;
                for statement in &statements {
                    run(&mut conn, statement, "acknowledge as a semi-synchronous replica").await?;
                }
            }
            let start = self.dialect.start_replica();
            run(&mut conn, start, start).await
        })
        .await
    }

    /// Stops replication and forgets the source (removing a member, or before promoting it).
    /// Succeeds on a member that is not a replica.
    pub async fn stop_replication(&self) -> Result<(), AdminError> {
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            self.stop_and_reset_on(&mut conn).await
        })
        .await
    }

    /// Makes `position` the member's own GTID history (see
    /// [`dialect::Dialect::adopt_position`]): after a backup was restored into a member that is
    /// to become the first primary of a new cluster. Replication must not be configured on it.
    /// Its read-only state is left as it was.
    ///
    /// # Errors
    /// `Refused` for the first statement refused: the history may then be reset to empty, and
    /// calling again sets it; `Unexpected` for a position of the other flavor.
    pub async fn adopt_position(&self, position: &GtidPosition) -> Result<(), AdminError> {
        if position.flavor() != self.flavor() {
            return Err(AdminError::Unexpected(format!(
                "a {:?} position for a {:?} server",
                position.flavor(),
                self.flavor()
            )));
        }
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            let state = self.state_on(&mut conn).await?;
            let version = ServerVersion::parse(&state.version)
                .ok_or_else(|| AdminError::Unexpected(format!("server version {:?}", state.version)))?;
            // Resetting the history writes the server's own GTID table, which MySQL's
            // `super_read_only` refuses even to the admin account: lifted as for the restore.
            for statement in self.dialect.restore_begin() {
                run(&mut conn, statement, "restore begin").await?;
            }
            let mut adopted = Ok(());
            for statement in self.dialect.adopt_position(position, &version) {
                adopted = run(&mut conn, &statement, "set the GTID history").await;
                if adopted.is_err() {
                    break;
                }
            }
            for statement in self.dialect.restore_end(state.read_only) {
                run(&mut conn, statement, "restore end").await?;
            }
            adopted
        })
        .await
    }

    /// Up to `limit` tables outside the server's own schemas, as `database.table`: empty for a
    /// member that holds no data.
    pub async fn user_tables(&self, limit: u32) -> Result<Vec<String>, AdminError> {
        let query = format!(
            "SELECT CONCAT(TABLE_SCHEMA, '.', TABLE_NAME) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA NOT IN ({}) ORDER BY TABLE_SCHEMA, TABLE_NAME LIMIT {limit}",
            snapshot::SYSTEM_DATABASES
        );
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            conn.query(&query)
                .await
                .map_err(|e| classify(e, "list tables", None))
        })
        .await
    }

    /// Closes (`true`) or opens the server to writes. Closing waits up to ten seconds for
    /// statements holding locks; see [`dialect::Dialect::read_only`] for who can still write.
    pub async fn set_read_only(&self, on: bool) -> Result<(), AdminError> {
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            self.set_read_only_on(&mut conn, on).await
        })
        .await
    }

    /// Waits up to `timeout` until the member has executed every transaction of `position`.
    /// `Ok(false)` when it did not in time.
    pub async fn wait_for_executed(
        &self,
        position: &GtidPosition,
        timeout: Duration,
    ) -> Result<bool, AdminError> {
        self.bounded(self.statement_timeout + timeout, async {
            let mut conn = self.connection().await?;
            self.wait_for_executed_on(&mut conn, position, timeout).await
        })
        .await
    }

    /// Waits up to `timeout` until what the receiving thread got from the source is executed
    /// (before promoting a replica whose source is gone). `Ok(true)` at once for a member that
    /// is not a replica. A transaction the source sent only in part is never executed, so this
    /// then times out.
    pub async fn wait_relay_log_applied(&self, timeout: Duration) -> Result<bool, AdminError> {
        self.bounded(self.statement_timeout + timeout, async {
            let mut conn = self.connection().await?;
            match self.replica_on(&mut conn).await? {
                Some(replica) => {
                    self.wait_for_executed_on(&mut conn, &replica.received, timeout)
                        .await
                }
                None => Ok(true),
            }
        })
        .await
    }

    /// Makes the member a writable primary: stops and forgets replication, then opens it to
    /// writes. The caller first waits for the relay log to be applied and fences the old
    /// primary.
    pub async fn promote(&self) -> Result<(), AdminError> {
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            self.stop_and_reset_on(&mut conn).await?;
            self.set_read_only_on(&mut conn, false).await
        })
        .await
    }

    /// Makes the member play `role` in semi-synchronous replication. When the replica side
    /// changes on a configured replica, its receiving thread is restarted, which is when the
    /// change takes effect.
    ///
    /// # Errors
    /// [`AdminError::Unsupported`] for a role the flavor cannot express.
    pub async fn set_semi_sync(&self, role: SemiSyncRole) -> Result<(), AdminError> {
        let statements = self.dialect.semi_sync(&role).map_err(AdminError::Unsupported)?;
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            let (_, replica_was_on) = self.semi_sync_on(&mut conn).await?;
            for statement in &statements {
                run(&mut conn, statement, "SET GLOBAL rpl_semi_sync").await?;
            }
            let replica_on = role == SemiSyncRole::Replica;
            let io_active = self
                .replica_on(&mut conn)
                .await?
                .is_some_and(|r| r.io_thread != IoThread::Stopped);
            if replica_on != replica_was_on && io_active {
                let (stop, start) = (self.dialect.stop_io_thread(), self.dialect.start_io_thread());
                run(&mut conn, stop, stop).await?;
                run(&mut conn, start, start).await?;
            }
            Ok(())
        })
        .await
    }

    /// Keeps binary logs for `seconds` (0: for ever). Takes effect at the next log rotation.
    pub async fn set_binlog_expiry(&self, seconds: u32) -> Result<(), AdminError> {
        let statement = self.dialect.binlog_expiry(seconds);
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            run(&mut conn, &statement, "SET GLOBAL binlog_expire_logs_seconds").await
        })
        .await
    }

    /// Creates the database `name` if missing (written to the binary log: call it on the
    /// primary).
    pub async fn ensure_database(&self, name: &str) -> Result<(), AdminError> {
        let statement = format!(
            "CREATE DATABASE IF NOT EXISTS {}",
            dialect::quote_identifier(name)
        );
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            run(&mut conn, &statement, "CREATE DATABASE").await
        })
        .await
    }

    /// Creates the account `user@host` if missing, sets its password, and grants it each of
    /// `grants` (trusted SQL from the operator, such as `REPLICATION SLAVE ON *.*`). Every call
    /// writes to the binary log, so call it on the primary only, and only when the account may
    /// be missing or its password changed.
    pub async fn ensure_user(
        &self,
        user: &str,
        host: &str,
        password: &SecretString,
        grants: &[String],
    ) -> Result<(), AdminError> {
        let name = account(user, host);
        let identified = format!("{name} IDENTIFIED BY {}", quote_literal(password.expose_secret()));
        let create = SecretStatement::new(format!("CREATE USER IF NOT EXISTS {identified}"));
        let alter = SecretStatement::new(format!("ALTER USER {identified}"));
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            run_secret(&mut conn, &create, "CREATE USER", password).await?;
            run_secret(&mut conn, &alter, "ALTER USER", password).await?;
            for grant in grants {
                run(&mut conn, &format!("GRANT {grant} TO {name}"), "GRANT").await?;
            }
            Ok(())
        })
        .await
    }

    /// Ends every client connection except this one, those of `except_users`, the server's own
    /// threads and replicas' binary log readers (which may still fetch what is left), so that
    /// transactions left open on a fenced primary can never commit. Returns how many ended.
    pub async fn kill_client_connections(&self, except_users: &[&str]) -> Result<u32, AdminError> {
        self.bounded(self.statement_timeout, async {
            let mut conn = self.connection().await?;
            let query = self.dialect.processlist_query();
            let mut killed = 0;
            for row in rows(&mut conn, query, "SELECT FROM PROCESSLIST").await? {
                let field = |name: &str| row.get(name).cloned().flatten().unwrap_or_default();
                if is_server_or_excepted(&field("USER"), &field("COMMAND"), except_users) {
                    continue;
                }
                let id = field("ID");
                let id: u64 = id
                    .parse()
                    .map_err(|_| AdminError::Unexpected(format!("PROCESSLIST ID {id:?}")))?;
                match run(&mut conn, &self.dialect.kill_connection(id), "KILL CONNECTION").await {
                    Ok(()) => killed += 1,
                    Err(error) if error.refused_code() == Some(UNKNOWN_THREAD) => {}
                    Err(error) => return Err(error),
                }
            }
            Ok(killed)
        })
        .await
    }

    /// A connection of its own, for work that spans statements (snapshots).
    pub(crate) async fn connection(&self) -> Result<Conn, AdminError> {
        // A pooled connection may have died with a restarted server: one that does not answer
        // a ping is dropped (the pool discards broken connections) and a new one made.
        for _ in 0..3 {
            let mut conn = self.connect_within(self.pool.get_conn()).await?;
            if let Ok(Ok(())) = tokio::time::timeout(self.connect_timeout, conn.ping()).await {
                return Ok(conn);
            }
        }
        Err(AdminError::Unreachable(format!(
            "{}: connections fail right after they are made",
            self.endpoint
        )))
    }

    /// A connection outside the pool, closed when dropped: for a binary log dump, after which a
    /// connection is no use for anything else.
    pub(crate) async fn dedicated_connection(&self) -> Result<Conn, AdminError> {
        self.connect_within(Conn::new(self.options.clone())).await
    }

    /// A connection `connect` makes within the connect timeout, else unreachable.
    async fn connect_within(
        &self,
        connect: impl Future<Output = Result<Conn, mysql_async::Error>>,
    ) -> Result<Conn, AdminError> {
        tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| {
                AdminError::Unreachable(format!(
                    "{}: no connection within {:?}",
                    self.endpoint, self.connect_timeout
                ))
            })?
            .map_err(|e| self.at_endpoint(classify(e, "connect", None)))
    }

    /// Runs `work`, counting it as unreachable after `limit`.
    async fn bounded<T>(
        &self,
        limit: Duration,
        work: impl Future<Output = Result<T, AdminError>>,
    ) -> Result<T, AdminError> {
        tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
            Err(AdminError::Unreachable(format!(
                "{}: no answer within {limit:?}",
                self.endpoint
            )))
        })
    }

    fn at_endpoint(&self, error: AdminError) -> AdminError {
        match error {
            AdminError::Unreachable(detail) => {
                AdminError::Unreachable(format!("{}: {detail}", self.endpoint))
            }
            other => other,
        }
    }

    fn change_source_kind(&self) -> &'static str {
        match self.flavor() {
            Flavor::MariaDB => "CHANGE MASTER TO",
            Flavor::MySQL => "CHANGE REPLICATION SOURCE TO",
        }
    }

    async fn report_on(&self, conn: &mut Conn) -> Result<MemberReport, AdminError> {
        let state = self.state_on(conn).await?;
        let replica = self.replica_on(conn).await?;
        let (semi_sync_source_on, semi_sync_replica_on) = self.semi_sync_on(conn).await?;
        Ok(MemberReport {
            server_id: state.server_id,
            version: state.version,
            read_only: state.read_only,
            executed: state.executed,
            replica,
            semi_sync_source_on,
            semi_sync_replica_on,
            binlog_expire_seconds: state.binlog_expire_seconds,
        })
    }

    async fn state_on(&self, conn: &mut Conn) -> Result<dialect::ServerState, AdminError> {
        let query = self.dialect.report_query();
        let row = rows(conn, query, "SELECT server state")
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| AdminError::Unexpected("no row of server state".to_string()))?;
        self.dialect.parse_report(&row).map_err(AdminError::Unexpected)
    }

    async fn replica_on(&self, conn: &mut Conn) -> Result<Option<ReplicaStatus>, AdminError> {
        let query = self.dialect.replica_status_query();
        match rows(conn, query, query).await?.first() {
            Some(row) => self
                .dialect
                .parse_replica_status(row)
                .map(Some)
                .map_err(|e| AdminError::Unexpected(format!("{query}: {e}"))),
            None => Ok(None),
        }
    }

    /// (source side on, replica side on); a variable the server lacks (MySQL without the
    /// plugin) reads as off.
    async fn semi_sync_on(&self, conn: &mut Conn) -> Result<(bool, bool), AdminError> {
        let query = self.dialect.semi_sync_variables_query();
        let mut source_on = false;
        let mut replica_on = false;
        for row in rows(conn, query, "SHOW GLOBAL VARIABLES").await? {
            let name = row.get("Variable_name").cloned().flatten().unwrap_or_default();
            let on = dialect::is_on(&row.get("Value").cloned().flatten().unwrap_or_default());
            if name.eq_ignore_ascii_case(self.dialect.semi_sync_source_variable()) {
                source_on = on;
            } else if name.eq_ignore_ascii_case(self.dialect.semi_sync_replica_variable()) {
                replica_on = on;
            }
        }
        Ok((source_on, replica_on))
    }

    /// Stops replication; not running or not configured is already done.
    async fn stop_replica_on(&self, conn: &mut Conn) -> Result<(), AdminError> {
        let stop = self.dialect.stop_replica();
        match run(conn, stop, stop).await {
            Err(error)
                if error
                    .refused_code()
                    .is_some_and(|code| self.dialect.already_stopped_codes().contains(&code)) =>
            {
                Ok(())
            }
            other => other,
        }
    }

    async fn stop_and_reset_on(&self, conn: &mut Conn) -> Result<(), AdminError> {
        self.stop_replica_on(conn).await?;
        let reset = self.dialect.reset_replica_all();
        run(conn, reset, reset).await
    }

    async fn set_read_only_on(&self, conn: &mut Conn, on: bool) -> Result<(), AdminError> {
        let lock_wait = format!("SET SESSION lock_wait_timeout = {LOCK_WAIT_SECONDS}");
        run(conn, &lock_wait, "SET SESSION lock_wait_timeout").await?;
        for statement in self.dialect.read_only(on) {
            run(conn, statement, statement).await?;
        }
        Ok(())
    }

    async fn wait_for_executed_on(
        &self,
        conn: &mut Conn,
        position: &GtidPosition,
        timeout: Duration,
    ) -> Result<bool, AdminError> {
        // The server's wait functions look at what replication applied; a position the server
        // reached otherwise (its own writes, a restored snapshot) is recognised here first.
        if self.state_on(conn).await?.executed.includes(position) {
            return Ok(true);
        }
        let query = self.dialect.wait_for_executed(position, timeout);
        let answer = rows(conn, &query, "wait for executed GTIDs").await?;
        let value = answer
            .first()
            .and_then(|row| row.values().next().cloned().flatten())
            .ok_or_else(|| AdminError::Unexpected(format!("{query}: no answer")))?;
        value
            .parse()
            .ok()
            .and_then(|answer| self.dialect.wait_reached(answer))
            .ok_or_else(|| AdminError::Unexpected(format!("{query}: answered {value:?}")))
    }
}

/// The server's own threads, the excepted accounts, and replicas reading the binary log.
fn is_server_or_excepted(user: &str, command: &str, except_users: &[&str]) -> bool {
    let server_threads = ["system user", "event_scheduler", ""];
    server_threads.contains(&user)
        || except_users.contains(&user)
        || command.starts_with("Binlog Dump")
        || command == "Daemon"
        || command.starts_with("Slave_")
}

/// Runs one statement that returns no rows.
async fn run(conn: &mut Conn, statement: &str, kind: &'static str) -> Result<(), AdminError> {
    conn.query_drop(statement)
        .await
        .map_err(|e| classify(e, kind, None))
}

/// Runs one statement carrying `secret`; an error never contains the statement or the secret.
async fn run_secret(
    conn: &mut Conn,
    statement: &SecretStatement,
    kind: &'static str,
    secret: &SecretString,
) -> Result<(), AdminError> {
    conn.query_drop(statement.expose())
        .await
        .map_err(|e| classify(e, kind, Some(secret.expose_secret())))
}

/// Runs a query and returns its rows as column maps.
async fn rows(conn: &mut Conn, query: &str, kind: &'static str) -> Result<Vec<Columns>, AdminError> {
    let rows: Vec<Row> = conn.query(query).await.map_err(|e| classify(e, kind, None))?;
    Ok(rows.into_iter().map(columns).collect())
}

/// A row as column name to text (NULL as `None`).
pub(crate) fn columns(row: Row) -> Columns {
    let names: Vec<String> = row
        .columns_ref()
        .iter()
        .map(|c| c.name_str().into_owned())
        .collect();
    names
        .into_iter()
        .zip(row.unwrap().into_iter().map(value_text))
        .collect()
}

/// A value as text, as the server would print it; `None` for NULL.
pub(crate) fn value_text(value: Value) -> Option<String> {
    match value {
        Value::NULL => None,
        Value::Bytes(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Value::Int(number) => Some(number.to_string()),
        Value::UInt(number) => Some(number.to_string()),
        other => Some(other.as_sql(false).trim_matches('\'').to_string()),
    }
}

/// An [`AdminError`] for a failed statement of kind `kind`. With `secret`, the server's
/// message is scrubbed of it and of any syntax-error excerpt of the statement.
pub(crate) fn classify(error: mysql_async::Error, kind: &'static str, secret: Option<&str>) -> AdminError {
    use mysql_async::{DriverError, Error};
    match error {
        Error::Io(io) => AdminError::Unreachable(format!("{kind}: {io}")),
        Error::Driver(DriverError::ConnectionClosed | DriverError::PoolDisconnected) => {
            AdminError::Unreachable(format!("{kind}: connection closed"))
        }
        Error::Server(server) if SERVER_CONNECTION_ERRORS.contains(&server.code) => {
            AdminError::Unreachable(format!("{kind}: error {}: {}", server.code, server.message))
        }
        Error::Server(server) => AdminError::Refused {
            statement: kind,
            code: server.code,
            message: match secret {
                Some(secret) => scrub(&server.message, secret),
                None => server.message,
            },
        },
        other => AdminError::Unexpected(format!("{kind}: {other}")),
    }
}

/// The server's message without `secret` (raw or as quoted) and without the excerpt of the
/// statement a syntax error quotes (`near '…'`), which could hold part of the secret.
fn scrub(message: &str, secret: &str) -> String {
    let mut clean = match message.find(" near '") {
        Some(at) => format!("{} near <statement withheld>", &message[..at]),
        None => message.to_string(),
    };
    if !secret.is_empty() {
        let quoted = quote_literal(secret);
        clean = clean.replace(&quoted[1..quoted.len() - 1], "<redacted>");
        clean = clean.replace(secret, "<redacted>");
    }
    clean
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(io_thread: IoThread, errno: u32) -> ReplicaStatus {
        ReplicaStatus {
            source_host: "h".to_string(),
            source_port: 3306,
            io_thread,
            sql_running: true,
            seconds_behind: None,
            last_io_errno: errno,
            last_io_error: String::new(),
            last_sql_errno: 0,
            last_sql_error: String::new(),
            received: GtidPosition::empty(Flavor::MariaDB),
        }
    }

    #[test]
    fn a_lost_source_is_a_connection_failure_not_a_refusal() {
        assert!(!status(IoThread::Running, 2003).source_lost(), "running wins");
        assert!(status(IoThread::Connecting, 2003).source_lost());
        assert!(status(IoThread::Connecting, 0).source_lost(), "first connection");
        assert!(status(IoThread::Stopped, 2013).source_lost());
        assert!(!status(IoThread::Connecting, 1045).source_lost(), "access denied");
        assert!(!status(IoThread::Stopped, 0).source_lost(), "stopped on purpose");
        assert!(
            !status(IoThread::Stopped, 1236).source_lost(),
            "binlog position error"
        );
    }

    #[test]
    fn debug_of_secrets_is_redacted() {
        let source = ReplicationSource {
            host: "h".to_string(),
            port: 3306,
            user: "u".to_string(),
            password: SecretString::from("hunter2"),
            tls: false,
            semi_sync: false,
        };
        let credentials = Credentials {
            server_ca: None,
            user: "root".to_string(),
            password: SecretString::from("hunter3"),
        };
        let printed = format!("{source:?} {credentials:?}");
        assert!(!printed.contains("hunter"), "{printed}");
        assert!(printed.contains("REDACTED"), "{printed}");
    }

    #[test]
    fn refusals_of_secret_statements_never_carry_the_secret() {
        let error = mysql_async::Error::Server(mysql_async::ServerError {
            code: 1064,
            message:
                "You have an error in your SQL syntax; check the manual near 'MASTER_PASSWORD='s3cr''et', \
                      BOGUS=1' at line 1"
                    .to_string(),
            state: "42000".to_string(),
        });
        let refused = classify(error, "CHANGE MASTER TO", Some("s3cr'et"));
        let text = refused.to_string();
        assert!(!text.contains("s3cr"), "{text}");
        assert!(text.starts_with("CHANGE MASTER TO refused: error 1064"), "{text}");
        assert_eq!(
            scrub("bad password hunter2 here", "hunter2"),
            "bad password <redacted> here"
        );
        assert_eq!(scrub("quoted it''s", "it's"), "quoted <redacted>");
    }

    #[test]
    fn connection_failures_are_unreachable() {
        let io = mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert!(classify(io, "connect", None).is_unreachable());
        let shutdown = mysql_async::Error::Server(mysql_async::ServerError {
            code: 1053,
            message: "Server shutdown in progress".to_string(),
            state: "08S01".to_string(),
        });
        assert!(classify(shutdown, "SHOW SLAVE STATUS", None).is_unreachable());
        let denied = mysql_async::Error::Server(mysql_async::ServerError {
            code: 1227,
            message: "Access denied; you need the SUPER privilege".to_string(),
            state: "42000".to_string(),
        });
        let denied = classify(denied, "STOP SLAVE", None);
        assert_eq!(denied.refused_code(), Some(1227));
        assert!(denied.is_access_denied());
        let duplicate = mysql_async::Error::Server(mysql_async::ServerError {
            code: 1062,
            message: "Duplicate entry".to_string(),
            state: "23000".to_string(),
        });
        assert!(!classify(duplicate, "INSERT", None).is_access_denied());
    }

    #[test]
    fn server_threads_and_replicas_readers_survive_fencing() {
        assert!(is_server_or_excepted("system user", "Slave_SQL", &[]));
        assert!(is_server_or_excepted("event_scheduler", "Daemon", &[]));
        assert!(is_server_or_excepted("quorum_repl", "Binlog Dump", &[]));
        assert!(is_server_or_excepted("root", "Query", &["root"]));
        assert!(!is_server_or_excepted("app", "Sleep", &["root"]));
    }
}
