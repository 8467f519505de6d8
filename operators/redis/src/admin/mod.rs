//! Redis's own admin commands, one verb per method, against one server at a time.
//!
//! No Kubernetes here: these verbs are tested against real `redis-server` and `redis-sentinel`
//! processes alone. Each [`RedisAdmin`] talks to a single server over one multiplexed
//! connection, so what it reports is that server's own view. Timeouts on each call, retries and
//! circuit breaking are the caller's, through `quorum_core::availability`.
//!
//! Errors tell "cannot reach" from "said no": [`AdminError::Unreachable`] when no answer came
//! (connection refused, timeout, broken connection) and [`AdminError::Refused`] when the server
//! answered with an error. The availability layer must never read the first as the second.
//!
//! Passwords travel only inside connections (the `AUTH` of the handshake, `CONFIG SET
//! masterauth`, `MIGRATE ... AUTH`), never on a command line, and never appear in an error or
//! in `Debug` output.
//!
//! - [`info`]: `INFO replication` and `INFO server`.
//! - [`cluster`]: cluster-mode verbs and the `CLUSTER NODES` / `CLUSTER INFO` parsers.
//! - [`migrate`]: the resumable slot migration.
//! - [`rebalance`]: the pure plan of slot moves for a desired set of primaries.
//! - [`sentinel`]: a client to one Sentinel.
//! - [`snapshot`]: RDB snapshots over the replication protocol, and placing one for a restore.

pub mod cluster;
pub mod info;
pub mod migrate;
pub mod rdb;
pub mod rebalance;
pub mod sentinel;
pub mod snapshot;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    RedisConnectionInfo, RedisError,
};
use secrecy::{ExposeSecret, SecretString};

pub use info::{ConnectedReplica, ReplicationInfo, Role, ServerInfo};

/// How many replicas must have acknowledged a primary's stream, and how recently, for it to
/// accept writes (`min-replicas-to-write`, `min-replicas-max-lag`). A primary cut off from its
/// replicas then refuses writes instead of acknowledging ones a failover would discard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteFence {
    pub min_replicas: u32,
    pub max_lag_seconds: u32,
}

/// A failed admin call, naming the server and (when it answered) the command it refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No answer: connection refused or reset, a timeout, a broken connection.
    #[error("cannot reach {endpoint}: {detail}")]
    Unreachable { endpoint: String, detail: String },
    /// The server answered with an error (`-ERR ...`, `-NOAUTH`, `-WRONGPASS`, `-BUSYKEY`, ...).
    #[error("{command} refused by {endpoint}: {message}")]
    Refused {
        endpoint: String,
        command: &'static str,
        message: String,
    },
    /// The server answered something this client cannot read as the command's answer.
    #[error("{command} on {endpoint}: unexpected answer: {detail}")]
    Unexpected {
        endpoint: String,
        command: &'static str,
        detail: String,
    },
    #[error("writing snapshot from {endpoint}: {source}")]
    Write {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    #[error("snapshot from {endpoint} is corrupt: {detail}")]
    CorruptSnapshot { endpoint: String, detail: String },
}

impl AdminError {
    /// Whether the server could not be reached at all, as opposed to answering with a refusal.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, AdminError::Unreachable { .. })
    }

    /// The server's error message when it refused, e.g. `ERR I'm not the owner of hash slot 7`.
    pub fn refusal(&self) -> Option<&str> {
        match self {
            AdminError::Refused { message, .. } => Some(message),
            _ => None,
        }
    }

    /// Classifies a client error: an answer from the server is a refusal, a broken or missing
    /// connection is unreachability, anything else an unexpected answer.
    fn from_redis(endpoint: &str, command: &'static str, error: RedisError) -> Self {
        // The error text of the redis crate carries the server's code and message, never the
        // arguments sent, so it cannot leak a password given to AUTH or MIGRATE.
        let endpoint = endpoint.to_string();
        match error.kind() {
            ErrorKind::Server(_) | ErrorKind::Extension | ErrorKind::AuthenticationFailed => {
                AdminError::Refused {
                    endpoint,
                    command,
                    message: error.to_string(),
                }
            }
            ErrorKind::Io => AdminError::Unreachable {
                endpoint,
                detail: error.to_string(),
            },
            _ => AdminError::Unexpected {
                endpoint,
                command,
                detail: error.to_string(),
            },
        }
    }
}

/// What a server is authenticated with: `AUTH password` (the default user, `requirepass`) or
/// `AUTH username password` (an ACL user).
#[derive(Clone, Debug)]
pub struct Credentials {
    pub username: Option<String>,
    /// `Debug` shows it redacted.
    pub password: SecretString,
}

impl Credentials {
    /// The default user's password (`requirepass`).
    pub fn password(password: impl Into<String>) -> Self {
        Self {
            username: None,
            password: SecretString::from(password.into()),
        }
    }

    /// Whether both log in as the same user with the same password.
    pub fn same(&self, other: &Credentials) -> bool {
        self.username == other.username && self.password.expose_secret() == other.password.expose_secret()
    }
}

/// Admin access to one Redis server.
///
/// A connection that breaks (the server restarted, Sentinel killed its clients during a
/// failover, `CLIENT KILL`) is reopened by the next call; the call that found it broken fails
/// as [`AdminError::Unreachable`] and is not repeated, as it may have been applied.
#[derive(Clone)]
pub struct RedisAdmin {
    /// Shared by clones; `None` after a connection broke, until the next call reopens it.
    connection: Arc<tokio::sync::Mutex<Option<redis::aio::MultiplexedConnection>>>,
    timeout: Duration,
    address: SocketAddr,
    endpoint: String,
    credentials: Option<Credentials>,
}

impl std::fmt::Debug for RedisAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisAdmin")
            .field("endpoint", &self.endpoint)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

/// The redis crate's connection settings for `address`, authenticating with `credentials`.
fn connection_info(address: SocketAddr, credentials: Option<&Credentials>) -> ConnectionInfo {
    let mut settings = RedisConnectionInfo::default().set_skip_set_lib_name();
    if let Some(credentials) = credentials {
        settings = settings.set_password(credentials.password.expose_secret());
        if let Some(username) = &credentials.username {
            settings = settings.set_username(username);
        }
    }
    // Built from the address, not from a URL, which would carry the password as text.
    ConnectionAddr::Tcp(address.ip().to_string(), address.port())
        .into_connection_info()
        .expect("a TCP address is always valid connection info")
        .set_redis_settings(settings)
}

/// Opens a multiplexed connection, authenticated during the handshake; `endpoint` names the
/// server in errors.
async fn open_connection(
    address: SocketAddr,
    credentials: Option<&Credentials>,
    timeout: Duration,
) -> Result<redis::aio::MultiplexedConnection, AdminError> {
    let endpoint = address.to_string();
    let client = redis::Client::open(connection_info(address, credentials))
        .map_err(|error| AdminError::from_redis(&endpoint, "connect", error))?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|error| AdminError::from_redis(&endpoint, "connect", error))
}

impl RedisAdmin {
    /// Connects to the server at `address`, authenticating with `credentials` when given.
    /// `timeout` bounds the connection and every later answer.
    ///
    /// # Errors
    /// [`AdminError::Unreachable`] when no connection could be made in time;
    /// [`AdminError::Refused`] when the server refused the credentials.
    pub async fn connect(
        address: SocketAddr,
        credentials: Option<Credentials>,
        timeout: Duration,
    ) -> Result<Self, AdminError> {
        let connection = open_connection(address, credentials.as_ref(), timeout).await?;
        Ok(Self {
            connection: Arc::new(tokio::sync::Mutex::new(Some(connection))),
            timeout,
            address,
            endpoint: address.to_string(),
            credentials,
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The credentials this client authenticates with; also what `MIGRATE` presents when this
    /// server is a migration's target.
    pub fn credentials(&self) -> Option<&Credentials> {
        self.credentials.as_ref()
    }

    /// Sends `command` and reads its answer as `T`; `name` names the command in errors (never
    /// the arguments, which may hold a password).
    async fn run<T: redis::FromRedisValue>(
        &self,
        name: &'static str,
        command: &redis::Cmd,
    ) -> Result<T, AdminError> {
        let mut connection = self.open().await?;
        let result = command.query_async(&mut connection).await;
        result.map_err(|error| {
            let error = AdminError::from_redis(&self.endpoint, name, error);
            if error.is_unreachable() {
                self.forget_connection();
            }
            error
        })
    }

    /// The current connection, reopened when an earlier call found it broken.
    async fn open(&self) -> Result<redis::aio::MultiplexedConnection, AdminError> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let connection = open_connection(self.address, self.credentials.as_ref(), self.timeout).await?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    fn forget_connection(&self) {
        // Never waits: a call holding the lock is reconnecting, which is what is wanted.
        if let Ok(mut slot) = self.connection.try_lock() {
            *slot = None;
        }
    }

    fn unexpected(&self, command: &'static str, detail: impl Into<String>) -> AdminError {
        AdminError::Unexpected {
            endpoint: self.endpoint.clone(),
            command,
            detail: detail.into(),
        }
    }

    /// `PING`: the server answers commands.
    pub async fn ping(&self) -> Result<(), AdminError> {
        let answer: String = self.run("PING", &redis::cmd("PING")).await?;
        if answer == "PONG" {
            Ok(())
        } else {
            Err(self.unexpected("PING", answer))
        }
    }

    /// `INFO replication`: this server's role, its primary and link, its replicas and offsets.
    pub async fn replication_info(&self) -> Result<ReplicationInfo, AdminError> {
        let text: String = self.run("INFO", redis::cmd("INFO").arg("replication")).await?;
        info::parse_replication(&text).map_err(|detail| self.unexpected("INFO", detail))
    }

    /// `INFO server`: version and run id.
    pub async fn server_info(&self) -> Result<ServerInfo, AdminError> {
        let text: String = self.run("INFO", redis::cmd("INFO").arg("server")).await?;
        info::parse_server(&text).map_err(|detail| self.unexpected("INFO", detail))
    }

    /// `DBSIZE`: the number of keys in the current database.
    pub async fn key_count(&self) -> Result<u64, AdminError> {
        self.run("DBSIZE", &redis::cmd("DBSIZE")).await
    }
}

/// Replication between standalone servers (Sentinel mode).
impl RedisAdmin {
    /// `CONFIG SET masterauth` (and `masteruser` for an ACL user): the credentials this server
    /// presents to its primary. Sent over the connection, so the password is never on a command
    /// line; not persisted to the config file (the operator renders that).
    pub async fn set_primary_credentials(&self, credentials: &Credentials) -> Result<(), AdminError> {
        if let Some(username) = &credentials.username {
            self.run::<()>(
                "CONFIG SET",
                redis::cmd("CONFIG").arg("SET").arg("masteruser").arg(username),
            )
            .await?;
        }
        self.run(
            "CONFIG SET",
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("masterauth")
                .arg(credentials.password.expose_secret()),
        )
        .await
    }

    /// `REPLICAOF host port`: this server drops its data and follows `primary`. Redis answers
    /// at once; syncing happens afterwards (see [`RedisAdmin::wait_for_sync`]).
    pub async fn replicate_from(&self, primary: SocketAddr) -> Result<(), AdminError> {
        self.run(
            "REPLICAOF",
            redis::cmd("REPLICAOF")
                .arg(primary.ip().to_string())
                .arg(primary.port()),
        )
        .await
    }

    /// `CONFIG GET min-replicas-*`: the write fence this server runs with now.
    pub async fn write_fence(&self) -> Result<WriteFence, AdminError> {
        let pairs: Vec<String> = self
            .run(
                "CONFIG GET",
                redis::cmd("CONFIG").arg("GET").arg("min-replicas-*"),
            )
            .await?;
        let value = |name: &str| {
            pairs
                .chunks(2)
                .find(|pair| pair[0] == name)
                .and_then(|pair| pair.get(1)?.parse::<u32>().ok())
                .ok_or_else(|| self.unexpected("CONFIG GET", format!("no {name} in {pairs:?}")))
        };
        Ok(WriteFence {
            min_replicas: value("min-replicas-to-write")?,
            max_lag_seconds: value("min-replicas-max-lag")?,
        })
    }

    /// `CONFIG SET min-replicas-to-write N min-replicas-max-lag S`: this server refuses writes
    /// unless N replicas acknowledged its stream within S seconds.
    pub async fn set_write_fence(&self, fence: WriteFence) -> Result<(), AdminError> {
        self.run(
            "CONFIG SET",
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("min-replicas-to-write")
                .arg(fence.min_replicas)
                .arg("min-replicas-max-lag")
                .arg(fence.max_lag_seconds),
        )
        .await
    }

    /// `CLIENT PAUSE <duration> WRITE`: holds every write command (and key expiry and eviction)
    /// for up to `duration`, so the replication offset stops moving; reads go on. A held client
    /// gets its answer once the pause ends: a replica's `READONLY` if this server was demoted
    /// meanwhile, never an acknowledgement of a write the new primary lacks.
    pub async fn pause_writes(&self, duration: Duration) -> Result<(), AdminError> {
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        self.run(
            "CLIENT PAUSE",
            redis::cmd("CLIENT").arg("PAUSE").arg(millis).arg("WRITE"),
        )
        .await
    }

    /// `CLIENT UNPAUSE`: releases the writes [`Self::pause_writes`] held.
    pub async fn unpause_writes(&self) -> Result<(), AdminError> {
        self.run("CLIENT UNPAUSE", redis::cmd("CLIENT").arg("UNPAUSE"))
            .await
    }

    /// `REPLICAOF NO ONE`: this server stops following and becomes a primary, keeping its data.
    pub async fn promote(&self) -> Result<(), AdminError> {
        self.run("REPLICAOF", redis::cmd("REPLICAOF").arg("NO").arg("ONE"))
            .await
    }

    /// Makes this server a replica of `primary` unless it already is one (the same `REPLICAOF`
    /// again would restart its sync needlessly).
    pub async fn ensure_replica_of(&self, primary: SocketAddr) -> Result<(), AdminError> {
        let current = self.replication_info().await?;
        if current.follows(primary) {
            return Ok(());
        }
        self.replicate_from(primary).await
    }

    /// Polls until this replica's link to `primary_admin` is up and it has caught up with the
    /// primary's replication offset as it was at the start of each round.
    ///
    /// # Errors
    /// The last call's error, or [`AdminError::Unexpected`] naming what was still missing when
    /// `timeout` elapsed.
    pub async fn wait_for_sync(
        &self,
        primary_admin: &RedisAdmin,
        timeout: Duration,
    ) -> Result<(), AdminError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // The primary's offset first: the replica must reach at least that.
            let primary = primary_admin.replication_info().await?;
            let replica = self.replication_info().await?;
            let lag = info::sync_lag(&primary, &replica, primary_admin.address());
            match lag {
                None => return Ok(()),
                Some(missing) if tokio::time::Instant::now() >= deadline => {
                    return Err(self.unexpected("INFO", format!("not in sync after {timeout:?}: {missing}")));
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}
