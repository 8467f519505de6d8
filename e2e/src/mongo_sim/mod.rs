//! A MongoDB replica-set **simulator**: one process per member, speaking the real wire protocol
//! (OP_MSG) well enough that the unmodified `mongodb` driver, its server discovery included,
//! works against it. MongoDB's server cannot be installed on the test machines; this stands in
//! for it so the operator's admin layer meets the replica set's real rules: elections by term
//! and majority vote, heartbeats, pull replication with an oplog, majority commit, the
//! `replSetInitiate`/`replSetReconfig`/`replSetStepDown` checks, SCRAM-SHA-256 users, and the
//! `failCommand` fail point. Members talk to each other over TCP, so killing a process or
//! putting a proxy in front of one behaves as it would with real servers.
//!
//! The command line is a subset of `mongod`'s, so a launcher can run a real `mongod` with the
//! same arguments; the state (configuration, term, vote, data, oplog, users, feature
//! compatibility version) is one BSON file in the dbpath, replaced atomically.
//!
//! Where it differs from a real `mongod`:
//! - It is not a database: filters are equality and `$eq $ne $gt $gte $lt $lte $in $nin
//!   $exists $and $or $nor`; updates are replacements, `$set`, `$unset` and `$inc`;
//!   aggregation is `$match $sort $skip $limit $project $group($sum) $count`; indexes other
//!   than `_id` are recorded, not used or enforced; read concerns are accepted and ignored.
//!   No transactions, change streams, TLS, compression, sharding or OP_QUERY.
//! - Roles are recorded, not enforced: any authenticated user may run anything. Users have
//!   SCRAM-SHA-256 credentials only. Without a key file, members accept each other's internal
//!   commands unauthenticated; test commands (`configureFailPoint`) need no
//!   `enableTestCommands`. Fail points: `failCommand` (`times`/`alwaysOn`/`off`, `errorCode`,
//!   `errorMessage`, `errorLabels`, `closeConnection`, `blockConnection`, `appName`,
//!   `writeConcernError`) and `stopReplProducer`; `simPartition` is the simulator's own.
//! - A member whose oplog diverged copies all data again (state ROLLBACK, then SECONDARY)
//!   instead of rolling back entries. One that fell further behind than any sync source's kept
//!   oplog (50,000 entries, or `--sim-oplog-entries`, whatever `--oplogSize` says) is too stale
//!   to catch up, as on the server: RECOVERING, `error RS102 too stale to catch up`, until it is
//!   wiped and syncs anew.
//! - A new primary has no catch-up phase, `secondaryDelaySecs` does not delay, `buildIndexes`
//!   changes nothing, write concerns take `majority` or a number (no tag sets), and
//!   `replSetReconfig` returns once a majority of the new voters hold the configuration or
//!   after a bounded wait. Primaries do not close client connections on step-down.

pub mod commands;
pub mod config;
pub mod peer;
pub mod query;
pub mod replset;
pub mod rules;
pub mod scram;
pub mod state;
pub mod wire;

use std::{path::PathBuf, time::Duration};

use bson::{Document, doc};

/// Writes one line to stderr, prefixed with the time and the member's address.
pub fn log(me: &str, message: impl std::fmt::Display) {
    let now = bson::DateTime::now().try_to_rfc3339_string().unwrap_or_default();
    eprintln!("{now} [{me}] {message}");
}

/// A command's failure, as the server reports it: `{ok: 0, errmsg, code, codeName}`.
#[derive(Clone, Debug, PartialEq)]
pub struct CmdError {
    pub code: i32,
    pub message: String,
    pub labels: Vec<String>,
}

impl CmdError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            labels: Vec::new(),
        }
    }

    pub fn not_primary() -> Self {
        Self::new(10107, "not primary")
    }

    pub fn to_document(&self) -> Document {
        let mut document = doc! { "ok": 0.0, "errmsg": &self.message, "code": self.code };
        if let Some(name) = code_name(self.code) {
            document.insert("codeName", name);
        }
        if !self.labels.is_empty() {
            document.insert("errorLabels", self.labels.clone());
        }
        document
    }
}

impl std::fmt::Display for CmdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            code_name(self.code).unwrap_or("Error"),
            self.code,
            self.message
        )
    }
}

pub fn code_name(code: i32) -> Option<&'static str> {
    Some(match code {
        2 => "BadValue",
        6 => "HostUnreachable",
        11 => "UserNotFound",
        13 => "Unauthorized",
        17 => "ProtocolError",
        18 => "AuthenticationFailed",
        20 => "IllegalOperation",
        23 => "AlreadyInitialized",
        26 => "NamespaceNotFound",
        43 => "CursorNotFound",
        48 => "NamespaceExists",
        50 => "MaxTimeMSExpired",
        59 => "CommandNotFound",
        64 => "WriteConcernFailed",
        72 => "InvalidOptions",
        74 => "NodeNotFound",
        76 => "NoReplicationEnabled",
        91 => "ShutdownInProgress",
        93 => "InvalidReplicaSetConfig",
        94 => "NotYetInitialized",
        95 => "NotSecondary",
        103 => "NewReplicaSetConfigurationIncompatible",
        109 => "ConfigurationInProgress",
        189 => "PrimarySteppedDown",
        262 => "ExceededTimeLimit",
        334 => "MechanismUnavailable",
        10107 => "NotWritablePrimary",
        11000 => "DuplicateKey",
        11602 => "InterruptedDueToReplStateChange",
        13435 => "NotPrimaryNoSecondaryOk",
        13436 => "NotPrimaryOrSecondary",
        51003 => "Location51003",
        _ => return None,
    })
}

/// Codes after which the driver may retry a write, which the server marks with the
/// `RetryableWriteError` label.
pub fn is_retryable_code(code: i32) -> bool {
    matches!(
        code,
        6 | 7 | 89 | 91 | 134 | 189 | 262 | 9001 | 10107 | 11600 | 11602 | 13435 | 13436 | 63 | 150
    )
}

/// What a simulated binary reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binary {
    /// `major.minor`, e.g. `7.0`: the release, and the default feature compatibility version.
    pub release: String,
    /// `buildInfo.version`, e.g. `7.0.14`.
    pub version: String,
    pub max_wire_version: i32,
}

impl Binary {
    /// A release (`7.0`) or a full version (`7.0.12`, reported as given).
    pub fn for_release(requested: &str) -> Result<Self, String> {
        let mut parts = requested.splitn(3, '.');
        let release = format!(
            "{}.{}",
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default()
        );
        let patch = parts
            .next()
            .filter(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
        let (default_patch, wire) = match release.as_str() {
            "4.4" => ("29", 9),
            "5.0" => ("30", 13),
            "6.0" => ("19", 17),
            "7.0" => ("14", 21),
            "8.0" => ("4", 25),
            _ => {
                return Err(format!(
                    "--sim-version {requested}: one of 4.4, 5.0, 6.0, 7.0, 8.0"
                ));
            }
        };
        Ok(Self {
            version: format!("{release}.{}", patch.unwrap_or(default_patch)),
            release,
            max_wire_version: wire,
        })
    }

    pub fn version_array(&self) -> Vec<i32> {
        let mut parts: Vec<i32> = self.version.split('.').filter_map(|p| p.parse().ok()).collect();
        parts.push(0);
        parts
    }
}

/// The command line: `mongod`'s flags that a launcher passes, and the simulator's own.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub repl_set: String,
    pub bind_ip: String,
    pub port: u16,
    pub dbpath: PathBuf,
    pub key_file: Option<PathBuf>,
    pub release: String,
    pub election_timeout: Duration,
    pub heartbeat_interval: Duration,
    /// `--setParameter scramSHA256IterationCount=N`: PBKDF2 rounds of new credentials.
    pub scram_iterations: u32,
    /// `--sim-oplog-entries`: how many oplog entries a member keeps.
    pub oplog_entries: usize,
    pub argv: Vec<String>,
}

pub const USAGE: &str = "mongo-sim --replSet <name> --bind_ip <ip> --port <port> --dbpath <dir> \
     [--keyFile <file>] [--sim-version 7.0] [--sim-election-timeout-ms 2000] [--sim-heartbeat-ms 200] \
     [--sim-oplog-entries 50000] [--setParameter k=v]";

impl Options {
    /// Parses `mongod`-style arguments (`--flag value` or `--flag=value`).
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut repl_set = None;
        let mut bind_ip = None;
        let mut port = 27017u16;
        let mut dbpath = None;
        let mut key_file = None;
        let mut release = "7.0".to_string();
        let mut election_ms = 2000u64;
        let mut heartbeat_ms = 200u64;
        let mut oplog_entries = state::OPLOG_ENTRIES;
        let mut scram_iterations = scram::DEFAULT_ITERATIONS;
        let mut rest = args.iter().cloned();
        while let Some(arg) = rest.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag.to_string(), Some(value.to_string())),
                _ => (arg.clone(), None),
            };
            // Flags a mongod launcher may pass that change nothing here.
            if matches!(flag.as_str(), "--auth" | "--quiet" | "--ipv6" | "--nounixsocket") {
                continue;
            }
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| rest.next())
                    .ok_or_else(|| format!("{flag} needs a value"))
            };
            match flag.as_str() {
                "--replSet" => repl_set = Some(value()?),
                "--bind_ip" => bind_ip = Some(value()?),
                "--port" => port = value()?.parse().map_err(|e| format!("--port: {e}"))?,
                "--dbpath" => dbpath = Some(PathBuf::from(value()?)),
                "--keyFile" => key_file = Some(PathBuf::from(value()?)),
                "--sim-version" => release = value()?,
                "--sim-election-timeout-ms" => {
                    election_ms = value()?.parse().map_err(|e| format!("{flag}: {e}"))?
                }
                "--sim-heartbeat-ms" => {
                    heartbeat_ms = value()?.parse().map_err(|e| format!("{flag}: {e}"))?
                }
                "--sim-oplog-entries" => {
                    oplog_entries = value()?
                        .parse()
                        .ok()
                        .filter(|entries| *entries > 0)
                        .ok_or_else(|| format!("{flag}: must be a number of at least 1"))?
                }
                "--setParameter" => {
                    let setting = value()?;
                    let Some((name, parameter)) = setting.split_once('=') else {
                        return Err(format!("--setParameter {setting}: expected name=value"));
                    };
                    if name == "scramSHA256IterationCount" {
                        scram_iterations = parameter
                            .parse()
                            .ok()
                            .filter(|n| *n >= scram::MIN_ITERATIONS)
                            .ok_or_else(|| {
                                format!(
                                    "{setting}: must be a number of at least {}",
                                    scram::MIN_ITERATIONS
                                )
                            })?;
                    }
                }
                "--oplogSize" | "--wiredTigerCacheSizeGB" | "--logpath" | "--clusterAuthMode" => {
                    value()?;
                }
                other => return Err(format!("unknown option {other}\nusage: {USAGE}")),
            }
        }
        Binary::for_release(&release)?;
        let bind_ip = bind_ip.ok_or("--bind_ip is required")?;
        let bind_ip = bind_ip.split(',').next().unwrap_or_default().trim().to_string();
        Ok(Self {
            repl_set: repl_set.ok_or("--replSet is required: the simulator only runs replica-set members")?,
            bind_ip,
            port,
            dbpath: dbpath.ok_or("--dbpath is required")?,
            key_file,
            release,
            election_timeout: Duration::from_millis(election_ms.max(1)),
            heartbeat_interval: Duration::from_millis(heartbeat_ms.max(1)),
            scram_iterations,
            oplog_entries,
            argv: args.to_vec(),
        })
    }

    /// `bind_ip:port`: the name this member answers to in a configuration.
    pub fn host(&self) -> String {
        format!("{}:{}", self.bind_ip, self.port)
    }
}

/// Runs a member until it is shut down. Returns the process exit code.
pub async fn run(options: Options) -> i32 {
    match replset::Node::start(options).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("mongo-sim: {error}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn parses_the_mongod_subset() {
        let options = Options::parse(&args(
            "--replSet rs0 --bind_ip 127.0.0.5,::1 --port=27018 --dbpath /d --keyFile /k \
             --setParameter enableTestCommands=1 --sim-version 6.0 --sim-heartbeat-ms 100 \
             --setParameter scramSHA256IterationCount=5000 --sim-oplog-entries 2000",
        ))
        .unwrap();
        assert_eq!(options.oplog_entries, 2000);
        assert_eq!(options.host(), "127.0.0.5:27018");
        assert_eq!(options.key_file, Some(PathBuf::from("/k")));
        assert_eq!(options.release, "6.0");
        assert_eq!(options.heartbeat_interval, Duration::from_millis(100));
        assert_eq!(options.election_timeout, Duration::from_millis(2000));
        assert_eq!(options.scram_iterations, 5000);
        assert!(
            Options::parse(&args(
                "--replSet a --bind_ip 1.2.3.4 --dbpath /d --setParameter scramSHA256IterationCount=100"
            ))
            .is_err()
        );
        assert!(
            Options::parse(&args("--bind_ip 1.2.3.4 --dbpath /d")).is_err(),
            "no --replSet"
        );
        assert!(Options::parse(&args("--replSet a --bind_ip 1.2.3.4 --dbpath /d --fork")).is_err());
        assert_eq!(
            Options::parse(&args("--replSet a --bind_ip 1.2.3.4 --dbpath /d"))
                .unwrap()
                .oplog_entries,
            state::OPLOG_ENTRIES
        );
        assert!(
            Options::parse(&args(
                "--replSet a --bind_ip 1.2.3.4 --dbpath /d --sim-oplog-entries 0"
            ))
            .is_err()
        );
        assert!(
            Options::parse(&args(
                "--replSet a --bind_ip 1.2.3.4 --dbpath /d --sim-version 3.6"
            ))
            .is_err()
        );
    }

    #[test]
    fn binaries_report_their_wire_version() {
        let binary = Binary::for_release("8.0").unwrap();
        assert_eq!(binary.max_wire_version, 25);
        assert_eq!(binary.version_array(), vec![8, 0, 4, 0]);
        let patched = Binary::for_release("6.0.12").unwrap();
        assert_eq!(
            (patched.release.as_str(), patched.version.as_str()),
            ("6.0", "6.0.12")
        );
        assert!(Binary::for_release("7.1").is_err());
    }

    #[test]
    fn errors_carry_code_names_and_labels() {
        let mut error = CmdError::not_primary();
        error.labels.push("RetryableWriteError".into());
        let document = error.to_document();
        assert_eq!(document.get_f64("ok").unwrap(), 0.0);
        assert_eq!(document.get_str("codeName").unwrap(), "NotWritablePrimary");
        assert_eq!(document.get_array("errorLabels").unwrap().len(), 1);
    }
}
