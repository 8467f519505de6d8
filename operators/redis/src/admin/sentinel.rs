//! A client to one Sentinel: what it monitors, what it thinks of each primary, and the verbs
//! that tell it what to monitor.
//!
//! Sentinels keep their own state (and rewrite their own config file with it), so each is
//! asked and told separately; the operator does the same to each.

use std::{collections::HashMap, net::SocketAddr, time::Duration};

use futures::StreamExt;
use secrecy::ExposeSecret;

use super::{AdminError, Credentials, RedisAdmin};

/// A Sentinel's view of a monitored primary (`SENTINEL MASTER name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitoredPrimary {
    pub name: String,
    pub address: SocketAddr,
    pub flags: SentinelFlags,
    /// Replicas this Sentinel knows of for it.
    pub replicas: u32,
    /// Other Sentinels monitoring it that this one has heard from.
    pub other_sentinels: u32,
    pub quorum: u32,
    pub config_epoch: u64,
    pub down_after: Duration,
    pub failover_timeout: Duration,
}

/// A replica as a Sentinel knows it (`SENTINEL REPLICAS name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitoredReplica {
    pub address: SocketAddr,
    pub flags: SentinelFlags,
    /// Its link to the primary, as the replica reports it (`master-link-status:ok`).
    pub link_ok: bool,
    pub primary_address: Option<SocketAddr>,
    pub offset: u64,
}

/// The `flags` field of a Sentinel's entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SentinelFlags {
    /// Subjectively down: this Sentinel gets no valid answer within down-after.
    pub subjectively_down: bool,
    /// Objectively down: a quorum of Sentinels agree.
    pub objectively_down: bool,
    pub disconnected: bool,
    pub failover_in_progress: bool,
}

fn parse_flags(text: &str) -> SentinelFlags {
    let mut flags = SentinelFlags::default();
    for flag in text.split(',') {
        match flag {
            "s_down" => flags.subjectively_down = true,
            "o_down" => flags.objectively_down = true,
            "disconnected" => flags.disconnected = true,
            "failover_in_progress" => flags.failover_in_progress = true,
            _ => {}
        }
    }
    flags
}

/// Pairs `[field, value, field, value, ...]` as a map.
fn pairs(flat: &[String]) -> HashMap<&str, &str> {
    flat.chunks_exact(2)
        .map(|pair| (pair[0].as_str(), pair[1].as_str()))
        .collect()
}

fn field<'a>(fields: &HashMap<&str, &'a str>, name: &str) -> Result<&'a str, String> {
    fields.get(name).copied().ok_or_else(|| format!("no {name}"))
}

fn number<T: std::str::FromStr>(fields: &HashMap<&str, &str>, name: &str) -> Result<T, String> {
    let text = field(fields, name)?;
    text.parse()
        .map_err(|_| format!("{name} is not a number: {text}"))
}

fn address(fields: &HashMap<&str, &str>, ip: &str, port: &str) -> Result<SocketAddr, String> {
    let ip_text = field(fields, ip)?;
    let ip = ip_text
        .parse()
        .map_err(|_| format!("{ip} is not an IP address: {ip_text}"))?;
    Ok(SocketAddr::new(ip, number(fields, port)?))
}

/// Parses the answer of `SENTINEL MASTER name`.
///
/// # Errors
/// Names the field that is missing or malformed.
pub fn parse_monitored_primary(flat: &[String]) -> Result<MonitoredPrimary, String> {
    let fields = pairs(flat);
    Ok(MonitoredPrimary {
        name: field(&fields, "name")?.to_string(),
        address: address(&fields, "ip", "port")?,
        flags: parse_flags(field(&fields, "flags")?),
        replicas: number(&fields, "num-slaves")?,
        other_sentinels: number(&fields, "num-other-sentinels")?,
        quorum: number(&fields, "quorum")?,
        config_epoch: number(&fields, "config-epoch")?,
        down_after: Duration::from_millis(number(&fields, "down-after-milliseconds")?),
        failover_timeout: Duration::from_millis(number(&fields, "failover-timeout")?),
    })
}

/// Parses one entry of `SENTINEL REPLICAS name`.
///
/// # Errors
/// Names the field that is missing or malformed.
pub fn parse_monitored_replica(flat: &[String]) -> Result<MonitoredReplica, String> {
    let fields = pairs(flat);
    Ok(MonitoredReplica {
        address: address(&fields, "ip", "port")?,
        flags: parse_flags(field(&fields, "flags")?),
        link_ok: fields.get("master-link-status") == Some(&"ok"),
        primary_address: address(&fields, "master-host", "master-port").ok(),
        offset: number(&fields, "slave-repl-offset").unwrap_or(0),
    })
}

/// A setting of a monitored primary (`SENTINEL SET name ...`).
#[derive(Clone, Debug)]
pub enum SentinelSetting {
    /// How long without a valid answer before this Sentinel deems the primary down.
    DownAfter(Duration),
    FailoverTimeout(Duration),
    Quorum(u32),
    ParallelSyncs(u32),
    /// The credentials the Sentinel uses to reach the primary and its replicas (`auth-user`,
    /// `auth-pass`). Sentinel persists them in its own config file.
    Auth(Credentials),
}

/// Admin access to one Sentinel.
#[derive(Clone, Debug)]
pub struct SentinelAdmin {
    admin: RedisAdmin,
}

impl SentinelAdmin {
    /// Connects to the Sentinel at `address` (authenticating when it has `requirepass`).
    ///
    /// # Errors
    /// As [`RedisAdmin::connect`].
    pub async fn connect(
        address: SocketAddr,
        credentials: Option<Credentials>,
        timeout: Duration,
    ) -> Result<Self, AdminError> {
        Ok(Self {
            admin: RedisAdmin::connect(address, credentials, timeout).await?,
        })
    }

    pub fn endpoint(&self) -> &str {
        self.admin.endpoint()
    }

    fn sentinel(verb: &str) -> redis::Cmd {
        let mut command = redis::cmd("SENTINEL");
        command.arg(verb);
        command
    }

    /// `SENTINEL MONITOR name ip port quorum`: starts monitoring a primary. Refused when the
    /// name is already monitored.
    pub async fn monitor(&self, name: &str, primary: SocketAddr, quorum: u32) -> Result<(), AdminError> {
        let mut command = Self::sentinel("MONITOR");
        command
            .arg(name)
            .arg(primary.ip().to_string())
            .arg(primary.port())
            .arg(quorum);
        self.admin.run("SENTINEL MONITOR", &command).await
    }

    /// `SENTINEL SET name option value`.
    pub async fn set(&self, name: &str, setting: &SentinelSetting) -> Result<(), AdminError> {
        let mut command = Self::sentinel("SET");
        command.arg(name);
        let millis = |duration: &Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        match setting {
            SentinelSetting::DownAfter(after) => command.arg("down-after-milliseconds").arg(millis(after)),
            SentinelSetting::FailoverTimeout(timeout) => command.arg("failover-timeout").arg(millis(timeout)),
            SentinelSetting::Quorum(quorum) => command.arg("quorum").arg(*quorum),
            SentinelSetting::ParallelSyncs(count) => command.arg("parallel-syncs").arg(*count),
            SentinelSetting::Auth(credentials) => {
                if let Some(username) = &credentials.username {
                    command.arg("auth-user").arg(username);
                }
                command.arg("auth-pass").arg(credentials.password.expose_secret())
            }
        };
        self.admin.run("SENTINEL SET", &command).await
    }

    /// `SENTINEL REMOVE name`: stops monitoring. Refused when the name is not monitored.
    pub async fn remove(&self, name: &str) -> Result<(), AdminError> {
        let mut command = Self::sentinel("REMOVE");
        command.arg(name);
        self.admin.run("SENTINEL REMOVE", &command).await
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME name`: the current primary, `None` when the name is
    /// not monitored.
    pub async fn primary_address(&self, name: &str) -> Result<Option<SocketAddr>, AdminError> {
        let mut command = Self::sentinel("GET-MASTER-ADDR-BY-NAME");
        command.arg(name);
        let answer: Option<(String, u16)> = self
            .admin
            .run("SENTINEL GET-MASTER-ADDR-BY-NAME", &command)
            .await?;
        answer
            .map(|(ip, port)| {
                ip.parse()
                    .map(|ip| SocketAddr::new(ip, port))
                    .map_err(|_| self.admin.unexpected("SENTINEL GET-MASTER-ADDR-BY-NAME", ip))
            })
            .transpose()
    }

    /// `SENTINEL MASTER name`. Refused when the name is not monitored.
    pub async fn primary(&self, name: &str) -> Result<MonitoredPrimary, AdminError> {
        let mut command = Self::sentinel("MASTER");
        command.arg(name);
        let flat: Vec<String> = self.admin.run("SENTINEL MASTER", &command).await?;
        parse_monitored_primary(&flat).map_err(|detail| self.admin.unexpected("SENTINEL MASTER", detail))
    }

    /// `SENTINEL REPLICAS name`.
    pub async fn replicas(&self, name: &str) -> Result<Vec<MonitoredReplica>, AdminError> {
        let mut command = Self::sentinel("REPLICAS");
        command.arg(name);
        let entries: Vec<Vec<String>> = self.admin.run("SENTINEL REPLICAS", &command).await?;
        entries
            .iter()
            .map(|flat| parse_monitored_replica(flat))
            .collect::<Result<_, _>>()
            .map_err(|detail| self.admin.unexpected("SENTINEL REPLICAS", detail))
    }

    /// `SENTINEL RESET pattern`: forgets the replicas and Sentinels it discovered for the
    /// matching names (they are rediscovered); the number of names reset.
    pub async fn reset(&self, pattern: &str) -> Result<u64, AdminError> {
        let mut command = Self::sentinel("RESET");
        command.arg(pattern);
        self.admin.run("SENTINEL RESET", &command).await
    }

    /// `SENTINEL FAILOVER name`: asks this Sentinel to fail over now, as if the primary were
    /// down, without asking the others for agreement (a switchover on request). Refused when
    /// no replica is eligible or a failover is already in progress.
    pub async fn failover(&self, name: &str) -> Result<(), AdminError> {
        let mut command = Self::sentinel("FAILOVER");
        command.arg(name);
        let _: String = self.admin.run("SENTINEL FAILOVER", &command).await?;
        Ok(())
    }

    /// `SENTINEL CKQUORUM name`: whether enough Sentinels are reachable to reach the quorum and
    /// to authorize a failover. A refusal (`NOQUORUM ...`) is the answer "no", with why.
    pub async fn check_quorum(&self, name: &str) -> Result<String, AdminError> {
        let mut command = Self::sentinel("CKQUORUM");
        command.arg(name);
        self.admin.run("SENTINEL CKQUORUM", &command).await
    }
}

/// The channel on which a Sentinel announces that it names another primary.
pub const SWITCH_CHANNEL: &str = "+switch-master";
/// The channel on which a Sentinel announces that an instance it watches (the primary, a
/// replica, another Sentinel) has not answered for `down-after`.
pub const DOWN_CHANNEL: &str = "+sdown";

/// What a Sentinel announced on a channel the operator follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Announcement {
    Switch(PrimarySwitch),
    /// The instance a Sentinel takes for down, as it names it (`master primary 10.0.0.7 6379`,
    /// or a replica's or Sentinel's line with its primary after `@`).
    Down(String),
}

/// Parses a message of `channel`.
///
/// # Errors
/// Says what is malformed, or that the channel is none the operator subscribes to.
pub fn parse_announcement(channel: &str, payload: &str) -> Result<Announcement, String> {
    match channel {
        SWITCH_CHANNEL => parse_primary_switch(payload).map(Announcement::Switch),
        DOWN_CHANNEL => Ok(Announcement::Down(payload.trim().to_string())),
        other => Err(format!("a message on {other}, which is not subscribed to")),
    }
}

/// A Sentinel's announcement that a monitored primary moved (`+switch-master`): it now names
/// `to` where it named `from`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrimarySwitch {
    pub name: String,
    pub from: SocketAddr,
    pub to: SocketAddr,
}

/// Parses a `+switch-master` payload: `<name> <old-ip> <old-port> <new-ip> <new-port>`.
///
/// # Errors
/// Says what is malformed.
pub fn parse_primary_switch(payload: &str) -> Result<PrimarySwitch, String> {
    let words: Vec<&str> = payload.split_whitespace().collect();
    let [name, from_ip, from_port, to_ip, to_port] = words.as_slice() else {
        return Err(format!("expected five words, got {payload:?}"));
    };
    let address = |ip: &str, port: &str| -> Result<SocketAddr, String> {
        let ip = ip.parse().map_err(|_| format!("{ip} is not an IP address"))?;
        let port = port.parse().map_err(|_| format!("{port} is not a port"))?;
        Ok(SocketAddr::new(ip, port))
    };
    Ok(PrimarySwitch {
        name: (*name).to_string(),
        from: address(from_ip, from_port)?,
        to: address(to_ip, to_port)?,
    })
}

/// A subscription to one Sentinel's announcements of instances down and primaries switched, on
/// a connection of its own (a subscribed connection can carry nothing else).
pub struct SentinelSubscription {
    sink: redis::aio::PubSubSink,
    messages: redis::aio::PubSubStream,
    endpoint: String,
    timeout: Duration,
}

impl SentinelSubscription {
    /// Connects to the Sentinel at `address` and subscribes to [`SWITCH_CHANNEL`] and
    /// [`DOWN_CHANNEL`]; `timeout`
    /// bounds the connection, the subscription and every later link check.
    ///
    /// # Errors
    /// As [`RedisAdmin::connect`].
    pub async fn open(
        address: SocketAddr,
        credentials: Option<&Credentials>,
        timeout: Duration,
    ) -> Result<Self, AdminError> {
        let endpoint = address.to_string();
        let unreachable = |detail: String| AdminError::Unreachable {
            endpoint: endpoint.clone(),
            detail,
        };
        let client = redis::Client::open(super::connection_info(address, credentials))
            .map_err(|error| AdminError::from_redis(&endpoint, "connect", error))?;
        let pubsub = tokio::time::timeout(timeout, client.get_async_pubsub())
            .await
            .map_err(|_| unreachable(format!("no connection within {timeout:?}")))?
            .map_err(|error| AdminError::from_redis(&endpoint, "connect", error))?;
        let (mut sink, messages) = pubsub.split();
        tokio::time::timeout(timeout, sink.subscribe(&[SWITCH_CHANNEL, DOWN_CHANNEL]))
            .await
            .map_err(|_| unreachable(format!("no answer to SUBSCRIBE within {timeout:?}")))?
            .map_err(|error| AdminError::from_redis(&endpoint, "SUBSCRIBE", error))?;
        Ok(Self {
            sink,
            messages,
            endpoint,
            timeout,
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Waits for the Sentinel's next announcement. While none comes, the link is checked every
    /// `keepalive` with a `PING`, so a Sentinel that is gone without closing the connection (its
    /// pod deleted, the network cut) ends the wait with [`AdminError::Unreachable`] instead of
    /// leaving it waiting for ever.
    ///
    /// # Errors
    /// [`AdminError::Unreachable`] when the connection closed or a link check went unanswered;
    /// [`AdminError::Unexpected`] for a malformed payload.
    pub async fn next(&mut self, keepalive: Duration) -> Result<Announcement, AdminError> {
        let endpoint = self.endpoint.clone();
        let unreachable = |detail: &str| AdminError::Unreachable {
            endpoint: endpoint.clone(),
            detail: detail.to_string(),
        };
        loop {
            match tokio::time::timeout(keepalive, self.messages.next()).await {
                Ok(Some(message)) => {
                    let channel = message.get_channel_name();
                    let payload: String = message
                        .get_payload()
                        .map_err(|error| AdminError::from_redis(&self.endpoint, "SUBSCRIBE", error))?;
                    return parse_announcement(channel, &payload).map_err(|detail| AdminError::Unexpected {
                        endpoint: self.endpoint.clone(),
                        command: "SUBSCRIBE",
                        detail,
                    });
                }
                Ok(None) => return Err(unreachable("the subscription's connection closed")),
                Err(_) => {
                    tokio::time::timeout(self.timeout, self.sink.ping::<redis::Value>())
                        .await
                        .map_err(|_| unreachable("no answer to a PING on the subscription"))?
                        .map_err(|error| AdminError::from_redis(&self.endpoint, "PING", error))?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(text: &str) -> Vec<String> {
        text.split('|').map(str::to_string).collect()
    }

    // Captured from redis-sentinel 7.0.15.
    const PRIMARY: &str = "name|mymaster|ip|127.0.0.1|port|7101|runid|e78c1049ea17545777f62fd99a358004a823030d|\
        flags|master|link-pending-commands|0|link-refcount|1|last-ping-sent|0|last-ok-ping-reply|603|\
        last-ping-reply|603|down-after-milliseconds|1000|info-refresh|2010|role-reported|master|\
        role-reported-time|12028|config-epoch|0|num-slaves|1|num-other-sentinels|0|quorum|1|\
        failover-timeout|180000|parallel-syncs|1";
    const REPLICA: &str = "name|127.0.0.1:7102|ip|127.0.0.1|port|7102|runid|10f98a86829f9b4c434cab85a3985853eba45f7d|\
        flags|slave|link-pending-commands|0|link-refcount|1|last-ping-sent|0|last-ok-ping-reply|555|\
        last-ping-reply|555|down-after-milliseconds|1000|info-refresh|7771|role-reported|slave|\
        role-reported-time|12025|master-link-down-time|0|master-link-status|ok|master-host|127.0.0.1|\
        master-port|7101|slave-priority|100|slave-repl-offset|312|replica-announced|1";

    #[test]
    fn a_monitored_primary_is_read() {
        let primary = parse_monitored_primary(&flat(PRIMARY)).unwrap();
        assert_eq!(primary.name, "mymaster");
        assert_eq!(primary.address, "127.0.0.1:7101".parse().unwrap());
        assert_eq!(primary.flags, SentinelFlags::default());
        assert_eq!(primary.replicas, 1);
        assert_eq!(primary.other_sentinels, 0);
        assert_eq!(primary.quorum, 1);
        assert_eq!(primary.down_after, Duration::from_secs(1));
        assert_eq!(primary.failover_timeout, Duration::from_secs(180));
    }

    #[test]
    fn down_flags_are_read() {
        let down = PRIMARY.replace("flags|master|", "flags|master,s_down,o_down,disconnected|");
        let primary = parse_monitored_primary(&flat(&down)).unwrap();
        assert!(primary.flags.subjectively_down);
        assert!(primary.flags.objectively_down);
        assert!(primary.flags.disconnected);
        assert!(!primary.flags.failover_in_progress);
    }

    #[test]
    fn a_monitored_replica_is_read() {
        let replica = parse_monitored_replica(&flat(REPLICA)).unwrap();
        assert_eq!(replica.address, "127.0.0.1:7102".parse().unwrap());
        assert!(replica.link_ok);
        assert_eq!(replica.primary_address, Some("127.0.0.1:7101".parse().unwrap()));
        assert_eq!(replica.offset, 312);
    }

    #[test]
    fn missing_fields_are_named() {
        let error = parse_monitored_primary(&flat("name|x|ip|127.0.0.1|port|1")).unwrap_err();
        assert_eq!(error, "no flags");
    }

    #[test]
    fn a_primary_switch_is_read() {
        let switch = parse_primary_switch("quorum 10.244.0.7 6379 10.244.0.9 6379").unwrap();
        assert_eq!(
            switch,
            PrimarySwitch {
                name: "quorum".into(),
                from: "10.244.0.7:6379".parse().unwrap(),
                to: "10.244.0.9:6379".parse().unwrap(),
            }
        );
        assert!(parse_primary_switch("quorum 10.244.0.7 6379").is_err());
        assert_eq!(
            parse_announcement(SWITCH_CHANNEL, "quorum 10.244.0.7 6379 10.244.0.9 6379"),
            Ok(Announcement::Switch(switch.clone()))
        );
        assert_eq!(
            parse_announcement(DOWN_CHANNEL, "master quorum 10.244.0.7 6379"),
            Ok(Announcement::Down("master quorum 10.244.0.7 6379".into()))
        );
        assert!(parse_announcement("+odown", "master quorum 10.244.0.7 6379").is_err());
        assert!(parse_primary_switch("quorum host 6379 10.244.0.9 6379").is_err());
    }
}
