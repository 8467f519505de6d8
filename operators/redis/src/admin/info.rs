//! `INFO replication` and `INFO server`, parsed into what the operator decides on.
//!
//! INFO is `field:value` lines under `# Section` headers; unknown fields are ignored, so newer
//! servers that add fields still parse.

use std::{collections::HashMap, net::SocketAddr};

/// What a server says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `role:master`.
    Primary,
    /// `role:slave`.
    Replica,
}

/// A replica as its primary lists it (`slaveN:ip=..,port=..,state=..,offset=..,lag=..`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectedReplica {
    pub ip: String,
    pub port: u16,
    /// `online` once the initial sync is done; `wait_bgsave`, `send_bulk` before.
    pub state: String,
    /// How far into the primary's replication stream this replica has acknowledged.
    pub offset: u64,
    /// Seconds since its last acknowledgement.
    pub lag: u64,
}

/// `INFO replication`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationInfo {
    pub role: Role,
    /// A replica's primary (`master_host`, `master_port`).
    pub primary_host: Option<String>,
    pub primary_port: Option<u16>,
    /// A replica's link to its primary is up (`master_link_status:up`).
    pub link_up: bool,
    /// Seconds since a replica last heard from its primary; `None` when never (`-1`).
    pub last_io_seconds_ago: Option<u64>,
    /// A replica is loading the primary's snapshot.
    pub sync_in_progress: bool,
    /// How far a replica has processed its primary's stream (`slave_repl_offset`).
    pub replica_offset: Option<u64>,
    /// The replicas connected to this server.
    pub replicas: Vec<ConnectedReplica>,
    /// This server's own replication offset (`master_repl_offset`).
    pub offset: u64,
    /// The replication history id (`master_replid`).
    pub replication_id: String,
}

impl ReplicationInfo {
    /// Whether this server is a replica of `primary` (by the address it was told to follow).
    pub fn follows(&self, primary: SocketAddr) -> bool {
        self.primary_address() == Some(primary)
    }

    /// For a replica, the address it replicates from, when it is an IP address.
    pub fn primary_address(&self) -> Option<SocketAddr> {
        if self.role != Role::Replica {
            return None;
        }
        let ip: std::net::IpAddr = self.primary_host.as_deref()?.parse().ok()?;
        Some(SocketAddr::new(ip, self.primary_port?))
    }

    /// The primary's entry for the replica announcing `ip`:`port`.
    pub fn replica(&self, ip: &str, port: u16) -> Option<&ConnectedReplica> {
        self.replicas.iter().find(|r| r.ip == ip && r.port == port)
    }
}

/// `INFO server`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    pub version: String,
    /// Changes on every restart: a different run id means the process restarted.
    pub run_id: String,
    pub port: u16,
    pub uptime_seconds: u64,
    /// `standalone`, `cluster` or `sentinel`.
    pub mode: String,
}

/// The `field:value` pairs of an INFO answer, all sections together.
pub fn parse_fields(text: &str) -> HashMap<&str, &str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .collect()
}

fn required<'a>(fields: &HashMap<&str, &'a str>, name: &str) -> Result<&'a str, String> {
    fields.get(name).copied().ok_or_else(|| format!("no {name}"))
}

fn number<T: std::str::FromStr>(fields: &HashMap<&str, &str>, name: &str) -> Result<T, String> {
    let text = required(fields, name)?;
    text.parse()
        .map_err(|_| format!("{name} is not a number: {text}"))
}

/// Parses `INFO replication`.
///
/// # Errors
/// Names the field that is missing or malformed.
pub fn parse_replication(text: &str) -> Result<ReplicationInfo, String> {
    let fields = parse_fields(text);
    let role = match required(&fields, "role")? {
        "master" => Role::Primary,
        "slave" => Role::Replica,
        other => return Err(format!("unknown role {other}")),
    };
    let replicas = fields
        .iter()
        .filter(|(name, _)| is_replica_field(name))
        .map(|(_, value)| parse_connected_replica(value))
        .collect::<Result<Vec<_>, _>>()?;
    let mut replicas = replicas;
    replicas.sort_by(|a, b| (&a.ip, a.port).cmp(&(&b.ip, b.port)));
    Ok(ReplicationInfo {
        role,
        primary_host: fields.get("master_host").map(|host| host.to_string()),
        primary_port: fields.get("master_port").and_then(|port| port.parse().ok()),
        link_up: fields.get("master_link_status") == Some(&"up"),
        // -1 means "never"; a negative number does not parse as u64.
        last_io_seconds_ago: fields
            .get("master_last_io_seconds_ago")
            .and_then(|seconds| seconds.parse().ok()),
        sync_in_progress: fields.get("master_sync_in_progress") == Some(&"1"),
        replica_offset: fields
            .get("slave_repl_offset")
            .and_then(|offset| offset.parse().ok()),
        replicas,
        offset: number(&fields, "master_repl_offset")?,
        replication_id: required(&fields, "master_replid")?.to_string(),
    })
}

/// `slave0`, `slave1`, ...: not `slave_repl_offset` and the like.
fn is_replica_field(name: &str) -> bool {
    name.strip_prefix("slave")
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
}

/// Parses `ip=127.0.0.1,port=7004,state=online,offset=64,lag=1`.
fn parse_connected_replica(value: &str) -> Result<ConnectedReplica, String> {
    let pairs: HashMap<&str, &str> = value.split(',').filter_map(|pair| pair.split_once('=')).collect();
    let get = |name: &str| {
        pairs
            .get(name)
            .copied()
            .ok_or_else(|| format!("replica entry {value} has no {name}"))
    };
    let parse = |name: &str| -> Result<u64, String> {
        get(name)?
            .parse()
            .map_err(|_| format!("replica entry {value}: {name} is not a number"))
    };
    Ok(ConnectedReplica {
        ip: get("ip")?.to_string(),
        port: get("port")?
            .parse()
            .map_err(|_| format!("replica entry {value}: bad port"))?,
        state: get("state")?.to_string(),
        offset: parse("offset")?,
        lag: parse("lag")?,
    })
}

/// Parses `INFO server`.
///
/// # Errors
/// Names the field that is missing or malformed.
pub fn parse_server(text: &str) -> Result<ServerInfo, String> {
    let fields = parse_fields(text);
    Ok(ServerInfo {
        version: required(&fields, "redis_version")?.to_string(),
        run_id: required(&fields, "run_id")?.to_string(),
        port: number(&fields, "tcp_port")?,
        uptime_seconds: number(&fields, "uptime_in_seconds")?,
        mode: fields.get("redis_mode").unwrap_or(&"standalone").to_string(),
    })
}

/// What keeps `replica` from being in sync with `primary` (at `primary_address`), or `None`
/// when it is: it follows that primary, its link is up, no sync is running, and it has
/// processed at least the primary's offset as read before the replica's.
pub fn sync_lag(
    primary: &ReplicationInfo,
    replica: &ReplicationInfo,
    primary_address: SocketAddr,
) -> Option<String> {
    if !replica.follows(primary_address) {
        return Some(format!(
            "it follows {:?}:{:?}, not {primary_address}",
            replica.primary_host, replica.primary_port
        ));
    }
    if !replica.link_up || replica.sync_in_progress {
        return Some("its link to the primary is not up".to_string());
    }
    match replica.replica_offset {
        Some(offset) if offset >= primary.offset => None,
        offset => Some(format!(
            "offset {offset:?} behind the primary's {}",
            primary.offset
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from redis-server 7.0.15.
    const PRIMARY: &str = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\
        slave0:ip=127.0.0.1,port=7004,state=online,offset=64,lag=1\r\n\
        master_failover_state:no-failover\r\nmaster_replid:2002ec1eca297440094d139aa40affb1fb8b2020\r\n\
        master_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:64\r\n\
        second_repl_offset:-1\r\nrepl_backlog_active:1\r\nrepl_backlog_size:1048576\r\n\
        repl_backlog_first_byte_offset:1\r\nrepl_backlog_histlen:63\r\n";

    const REPLICA_SYNCING: &str = "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\n\
        master_port:7003\r\nmaster_link_status:down\r\nmaster_last_io_seconds_ago:-1\r\n\
        master_sync_in_progress:0\r\nslave_read_repl_offset:1\r\nslave_repl_offset:1\r\n\
        master_link_down_since_seconds:-1\r\nslave_priority:100\r\nslave_read_only:1\r\n\
        replica_announced:1\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\n\
        master_replid:3438c61fbf57980b0419a5ee0d5f8c108ebd4266\r\n\
        master_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:0\r\n\
        second_repl_offset:-1\r\nrepl_backlog_active:0\r\n";

    const REPLICA_UP: &str = "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\n\
        master_port:7003\r\nmaster_link_status:up\r\nmaster_last_io_seconds_ago:4\r\n\
        master_sync_in_progress:0\r\nslave_read_repl_offset:64\r\nslave_repl_offset:64\r\n\
        slave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\nconnected_slaves:0\r\n\
        master_failover_state:no-failover\r\nmaster_replid:2002ec1eca297440094d139aa40affb1fb8b2020\r\n\
        master_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:64\r\n";

    fn primary_address() -> SocketAddr {
        "127.0.0.1:7003".parse().unwrap()
    }

    #[test]
    fn a_primary_lists_its_replicas_and_offset() {
        let info = parse_replication(PRIMARY).unwrap();
        assert_eq!(info.role, Role::Primary);
        assert_eq!(info.offset, 64);
        assert_eq!(info.replication_id, "2002ec1eca297440094d139aa40affb1fb8b2020");
        assert_eq!(
            info.replicas,
            vec![ConnectedReplica {
                ip: "127.0.0.1".into(),
                port: 7004,
                state: "online".into(),
                offset: 64,
                lag: 1
            }]
        );
        assert!(info.replica("127.0.0.1", 7004).is_some());
        assert_eq!(info.primary_host, None);
    }

    #[test]
    fn a_replica_reports_its_primary_link_and_offset() {
        let syncing = parse_replication(REPLICA_SYNCING).unwrap();
        assert_eq!(syncing.role, Role::Replica);
        assert_eq!(syncing.primary_host.as_deref(), Some("127.0.0.1"));
        assert_eq!(syncing.primary_port, Some(7003));
        assert!(!syncing.link_up);
        assert_eq!(syncing.last_io_seconds_ago, None, "-1 means never");
        assert_eq!(syncing.replica_offset, Some(1));
        assert!(syncing.replicas.is_empty(), "slave_* fields are not replicas");
        assert!(syncing.follows(primary_address()));

        let up = parse_replication(REPLICA_UP).unwrap();
        assert!(up.link_up);
        assert_eq!(up.last_io_seconds_ago, Some(4));
    }

    #[test]
    fn sync_needs_the_link_up_and_the_primary_offset_reached() {
        let primary = parse_replication(PRIMARY).unwrap();
        let syncing = parse_replication(REPLICA_SYNCING).unwrap();
        let up = parse_replication(REPLICA_UP).unwrap();
        assert!(sync_lag(&primary, &syncing, primary_address()).is_some());
        assert_eq!(sync_lag(&primary, &up, primary_address()), None);
        let mut ahead = primary.clone();
        ahead.offset = 100;
        assert!(
            sync_lag(&ahead, &up, primary_address())
                .unwrap()
                .contains("behind")
        );
        let elsewhere: SocketAddr = "127.0.0.2:7003".parse().unwrap();
        assert!(sync_lag(&primary, &up, elsewhere).unwrap().contains("follows"));
    }

    #[test]
    fn server_info_gives_version_and_run_id() {
        let text = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\nredis_mode:standalone\r\n\
            os:Linux 6.18.44-fc-v595 x86_64\r\nrun_id:8b428cc734591580623ebb6bb139ecb104b6a74b\r\n\
            tcp_port:7004\r\nserver_time_usec:1795281700774372\r\nuptime_in_seconds:1\r\n\
            executable:/tmp/rs/redis-server\r\nconfig_file:\r\n";
        let info = parse_server(text).unwrap();
        assert_eq!(info.version, "7.0.15");
        assert_eq!(info.run_id, "8b428cc734591580623ebb6bb139ecb104b6a74b");
        assert_eq!(info.port, 7004);
        assert_eq!(info.mode, "standalone");
    }

    #[test]
    fn missing_fields_are_named() {
        assert_eq!(parse_replication("# Replication\r\n").unwrap_err(), "no role");
        assert!(
            parse_server("redis_version:7.0.15\r\n")
                .unwrap_err()
                .contains("run_id")
        );
    }
}
