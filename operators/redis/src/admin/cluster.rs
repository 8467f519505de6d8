//! Cluster-mode verbs (`CLUSTER ...`, `MIGRATE`) and the parsers for `CLUSTER NODES` and
//! `CLUSTER INFO`.
//!
//! A cluster's truth is spread over its nodes: each node's `CLUSTER NODES` is its own view, and
//! the migrating / importing state of a slot is shown only in the `myself` line of the node
//! that holds it. Callers that decide on slot ownership ask the nodes involved, not any node.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    time::Duration,
};

use secrecy::ExposeSecret;

use super::{AdminError, Credentials, RedisAdmin};

/// The number of hash slots in a Redis cluster.
pub const SLOT_COUNT: u16 = 16384;

/// An inclusive range of hash slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotRange {
    pub start: u16,
    pub end: u16,
}

impl SlotRange {
    pub fn new(start: u16, end: u16) -> Self {
        Self { start, end }
    }

    pub fn single(slot: u16) -> Self {
        Self {
            start: slot,
            end: slot,
        }
    }

    pub fn contains(&self, slot: u16) -> bool {
        (self.start..=self.end).contains(&slot)
    }

    pub fn len(&self) -> usize {
        usize::from(self.end - self.start) + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn slots(&self) -> impl Iterator<Item = u16> {
        self.start..=self.end
    }
}

impl std::fmt::Display for SlotRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else {
            write!(f, "{}-{}", self.start, self.end)
        }
    }
}

/// The flags of a `CLUSTER NODES` line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFlags {
    /// The line describes the node that answered.
    pub myself: bool,
    pub primary: bool,
    pub replica: bool,
    /// `fail?`: this node cannot reach it (PFAIL), not yet agreed by a majority.
    pub possibly_failed: bool,
    /// `fail`: a majority of primaries agreed it is down.
    pub failed: bool,
    /// Being introduced by `CLUSTER MEET`; its real id is not known yet.
    pub handshake: bool,
    /// No known address.
    pub no_address: bool,
    pub no_failover: bool,
}

/// One line of `CLUSTER NODES`: one node as the answering node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    pub id: String,
    /// `None` when the node has no known address (an empty ip).
    pub address: Option<SocketAddr>,
    pub bus_port: u16,
    pub hostname: Option<String>,
    pub flags: NodeFlags,
    /// The primary a replica follows.
    pub primary_id: Option<String>,
    pub config_epoch: u64,
    /// `link-state` is `connected`.
    pub connected: bool,
    /// Slots this node serves, as ranges.
    pub slots: Vec<SlotRange>,
    /// `[slot->-target]`: slots being moved away to the target node (shown on `myself` only).
    pub migrating: Vec<(u16, String)>,
    /// `[slot-<-source]`: slots being received from the source node (shown on `myself` only).
    pub importing: Vec<(u16, String)>,
}

impl ClusterNode {
    pub fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|range| range.contains(slot))
    }

    pub fn slot_count(&self) -> usize {
        self.slots.iter().map(SlotRange::len).sum()
    }

    /// The node `slot` is being migrated to, when this node is migrating it.
    pub fn migrating_to(&self, slot: u16) -> Option<&str> {
        self.migrating
            .iter()
            .find(|(s, _)| *s == slot)
            .map(|(_, id)| id.as_str())
    }

    /// The node `slot` is being imported from, when this node is importing it.
    pub fn importing_from(&self, slot: u16) -> Option<&str> {
        self.importing
            .iter()
            .find(|(s, _)| *s == slot)
            .map(|(_, id)| id.as_str())
    }
}

/// The `myself` line of a `CLUSTER NODES` answer.
pub fn myself(nodes: &[ClusterNode]) -> Option<&ClusterNode> {
    nodes.iter().find(|node| node.flags.myself)
}

/// Two primaries of `lines` that hold the same config epoch, and that epoch.
///
/// Redis resolves such a collision by itself (the node with the lower id takes a new, highest
/// epoch at the next ping between them), and that is why a slot must not move meanwhile: a
/// source that takes a new epoch after the target took the slot claims the slot again with the
/// higher epoch, and the target, no longer importing, gives it back and deletes every key of it
/// that it holds. A cluster formed without `CLUSTER SET-CONFIG-EPOCH` starts with every primary
/// at epoch 0 and reports `cluster_state:ok` before the collisions are resolved.
pub fn shared_config_epoch<'a>(
    lines: impl IntoIterator<Item = &'a ClusterNode>,
) -> Option<(&'a str, &'a str, u64)> {
    let mut holders: BTreeMap<u64, &'a str> = BTreeMap::new();
    for line in lines.into_iter().filter(|line| line.flags.primary) {
        match holders.get(&line.config_epoch) {
            Some(first) if *first != line.id => return Some((first, &line.id, line.config_epoch)),
            _ => {
                holders.insert(line.config_epoch, &line.id);
            }
        }
    }
    None
}

/// The node that serves `slot` in this view.
pub fn owner_of(nodes: &[ClusterNode], slot: u16) -> Option<&ClusterNode> {
    nodes.iter().find(|node| node.owns(slot))
}

/// Each primary's slots in this view (primaries serving none included, nodes in handshake
/// left out): the `current` of [`super::rebalance::plan_rebalance`].
pub fn slot_ownership(nodes: &[ClusterNode]) -> std::collections::BTreeMap<String, Vec<SlotRange>> {
    nodes
        .iter()
        .filter(|node| node.flags.primary && !node.flags.handshake)
        .map(|node| (node.id.clone(), node.slots.clone()))
        .collect()
}

/// Parses a whole `CLUSTER NODES` answer.
///
/// # Errors
/// The first line that cannot be read, with why.
pub fn parse_cluster_nodes(text: &str) -> Result<Vec<ClusterNode>, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| parse_node_line(line).map_err(|why| format!("{why} in line: {line}")))
        .collect()
}

/// `<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch>
/// <link-state> <slot> <slot> ...`
fn parse_node_line(line: &str) -> Result<ClusterNode, String> {
    let fields: Vec<&str> = line.split_ascii_whitespace().collect();
    if fields.len() < 8 {
        return Err(format!("{} fields, at least 8 expected", fields.len()));
    }
    let (address, bus_port, hostname) = parse_node_address(fields[1])?;
    let flags = parse_flags(fields[2]);
    let primary_id = (fields[3] != "-").then(|| fields[3].to_string());
    let config_epoch = fields[6]
        .parse()
        .map_err(|_| format!("config epoch {} is not a number", fields[6]))?;
    let mut node = ClusterNode {
        id: fields[0].to_string(),
        address,
        bus_port,
        hostname,
        flags,
        primary_id,
        config_epoch,
        connected: fields[7] == "connected",
        slots: Vec::new(),
        migrating: Vec::new(),
        importing: Vec::new(),
    };
    for entry in &fields[8..] {
        parse_slot_entry(entry, &mut node)?;
    }
    Ok(node)
}

/// `127.0.0.1:7001@17001`, `127.0.0.1:7001@17001,host-name`, `:0@0` (no address), and IPv6
/// `::1:7001@17001` (the port is after the last colon).
fn parse_node_address(field: &str) -> Result<(Option<SocketAddr>, u16, Option<String>), String> {
    let (address, hostname) = match field.split_once(',') {
        Some((address, hostname)) if !hostname.is_empty() => (address, Some(hostname.to_string())),
        Some((address, _)) => (address, None),
        None => (field, None),
    };
    let (ip_port, bus_port) = address.split_once('@').unwrap_or((address, "0"));
    let (ip, port) = ip_port
        .rsplit_once(':')
        .ok_or_else(|| format!("address {field} has no port"))?;
    let port: u16 = port.parse().map_err(|_| format!("bad port in {field}"))?;
    let bus_port: u16 = bus_port.parse().map_err(|_| format!("bad bus port in {field}"))?;
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    let address = match ip {
        "" => None,
        ip => Some(SocketAddr::new(
            ip.parse().map_err(|_| format!("bad ip in {field}"))?,
            port,
        )),
    };
    Ok((address, bus_port, hostname))
}

fn parse_flags(field: &str) -> NodeFlags {
    let mut flags = NodeFlags::default();
    for flag in field.split(',') {
        match flag {
            "myself" => flags.myself = true,
            "master" => flags.primary = true,
            "slave" => flags.replica = true,
            "fail?" => flags.possibly_failed = true,
            "fail" => flags.failed = true,
            "handshake" => flags.handshake = true,
            "noaddr" => flags.no_address = true,
            "nofailover" => flags.no_failover = true,
            _ => {}
        }
    }
    flags
}

/// `5`, `0-5460`, `[93->-<id>]` (migrating), `[93-<-<id>]` (importing).
fn parse_slot_entry(entry: &str, node: &mut ClusterNode) -> Result<(), String> {
    let slot = |text: &str| -> Result<u16, String> {
        text.parse::<u16>()
            .ok()
            .filter(|slot| *slot < SLOT_COUNT)
            .ok_or_else(|| format!("bad slot {text}"))
    };
    if let Some(inner) = entry.strip_prefix('[').and_then(|e| e.strip_suffix(']')) {
        if let Some((from, to)) = inner.split_once("->-") {
            node.migrating.push((slot(from)?, to.to_string()));
        } else if let Some((at, from)) = inner.split_once("-<-") {
            node.importing.push((slot(at)?, from.to_string()));
        } else {
            return Err(format!("bad slot state {entry}"));
        }
        return Ok(());
    }
    let range = match entry.split_once('-') {
        Some((start, end)) => SlotRange::new(slot(start)?, slot(end)?),
        None => SlotRange::single(slot(entry)?),
    };
    node.slots.push(range);
    Ok(())
}

/// `CLUSTER INFO`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterInfo {
    /// `cluster_state:ok`: every slot is served by a reachable node.
    pub state_ok: bool,
    pub slots_assigned: u32,
    pub slots_ok: u32,
    pub slots_possibly_failed: u32,
    pub slots_failed: u32,
    pub known_nodes: u32,
    /// Primaries that serve at least one slot.
    pub size: u32,
    pub current_epoch: u64,
    pub my_epoch: u64,
}

/// Parses `CLUSTER INFO`.
///
/// # Errors
/// Names the field that is missing or malformed.
pub fn parse_cluster_info(text: &str) -> Result<ClusterInfo, String> {
    let fields = super::info::parse_fields(text);
    let number = |name: &str| -> Result<u64, String> {
        let value = fields.get(name).ok_or_else(|| format!("no {name}"))?;
        value
            .parse()
            .map_err(|_| format!("{name} is not a number: {value}"))
    };
    let small = |name: &str| -> Result<u32, String> {
        number(name)?
            .try_into()
            .map_err(|_| format!("{name} is too large"))
    };
    Ok(ClusterInfo {
        state_ok: fields.get("cluster_state") == Some(&"ok"),
        slots_assigned: small("cluster_slots_assigned")?,
        slots_ok: small("cluster_slots_ok")?,
        slots_possibly_failed: small("cluster_slots_pfail")?,
        slots_failed: small("cluster_slots_fail")?,
        known_nodes: small("cluster_known_nodes")?,
        size: small("cluster_size")?,
        current_epoch: number("cluster_current_epoch")?,
        my_epoch: number("cluster_my_epoch")?,
    })
}

/// The hash slot of `key`: CRC16 (XMODEM) of the key, or of its `{hash tag}` when it has a
/// non-empty one, modulo 16384, as the cluster specification defines.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|b| *b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|b| *b == b'}') {
            Some(length) if length > 0 => &key[open + 1..open + 1 + length],
            _ => key,
        },
        None => key,
    };
    crc16_xmodem(hashed) % SLOT_COUNT
}

fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in bytes {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// What `CLUSTER SETSLOT` sets a slot to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// On the target: accept `ASKING` requests for the slot from the source node with this id.
    Importing(String),
    /// On the source: redirect requests for missing keys with `ASK` to the node with this id.
    Migrating(String),
    /// The slot belongs to the node with this id; clears migrating and importing.
    Node(String),
    /// Clears migrating and importing, ownership unchanged.
    Stable,
}

/// How [`RedisAdmin::migrate_keys`] moves keys.
#[derive(Clone, Copy, Debug)]
pub struct MigrateOptions {
    /// How long the source waits for the target per `MIGRATE`.
    pub timeout: Duration,
    /// Overwrite a key that already exists on the target (see [`super::migrate`] for why a
    /// resumed migration needs it).
    pub replace: bool,
}

/// Cluster-mode verbs.
impl RedisAdmin {
    /// `CLUSTER MYID`: this node's id, kept across restarts in its `nodes.conf`.
    pub async fn cluster_myid(&self) -> Result<String, AdminError> {
        self.run("CLUSTER MYID", redis::cmd("CLUSTER").arg("MYID")).await
    }

    /// `CLUSTER NODES`: this node's view of the cluster.
    pub async fn cluster_nodes(&self) -> Result<Vec<ClusterNode>, AdminError> {
        let text: String = self
            .run("CLUSTER NODES", redis::cmd("CLUSTER").arg("NODES"))
            .await?;
        parse_cluster_nodes(&text).map_err(|detail| self.unexpected("CLUSTER NODES", detail))
    }

    /// This node's own line of `CLUSTER NODES`.
    pub async fn cluster_myself(&self) -> Result<ClusterNode, AdminError> {
        let nodes = self.cluster_nodes().await?;
        myself(&nodes)
            .cloned()
            .ok_or_else(|| self.unexpected("CLUSTER NODES", "no myself line"))
    }

    /// `CLUSTER INFO`.
    pub async fn cluster_info(&self) -> Result<ClusterInfo, AdminError> {
        let text: String = self
            .run("CLUSTER INFO", redis::cmd("CLUSTER").arg("INFO"))
            .await?;
        parse_cluster_info(&text).map_err(|detail| self.unexpected("CLUSTER INFO", detail))
    }

    /// `CLUSTER MEET ip port`: introduces the node at `address` (its bus at port + 10000).
    /// Answers at once; the handshake completes in the background. Meeting a known node at a
    /// new address updates that node's address once the handshake reveals its id.
    pub async fn cluster_meet(&self, address: SocketAddr) -> Result<(), AdminError> {
        self.run(
            "CLUSTER MEET",
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg(address.ip().to_string())
                .arg(address.port()),
        )
        .await
    }

    /// `CLUSTER FORGET id`: drops a node from this node's table (for 60 s it will not be
    /// re-added by gossip, so every remaining node must forget it within that time).
    pub async fn cluster_forget(&self, id: &str) -> Result<(), AdminError> {
        self.run("CLUSTER FORGET", redis::cmd("CLUSTER").arg("FORGET").arg(id))
            .await
    }

    /// `CLUSTER ADDSLOTSRANGE start end ...`: assigns unassigned slots to this node. Refused
    /// when any slot is already assigned (to any node, in this node's view).
    pub async fn cluster_add_slot_ranges(&self, ranges: &[SlotRange]) -> Result<(), AdminError> {
        let mut command = redis::cmd("CLUSTER");
        command.arg("ADDSLOTSRANGE");
        for range in ranges {
            command.arg(range.start).arg(range.end);
        }
        self.run("CLUSTER ADDSLOTSRANGE", &command).await
    }

    /// `CLUSTER ADDSLOTS slot ...`.
    pub async fn cluster_add_slots(&self, slots: &[u16]) -> Result<(), AdminError> {
        let mut command = redis::cmd("CLUSTER");
        command.arg("ADDSLOTS").arg(slots);
        self.run("CLUSTER ADDSLOTS", &command).await
    }

    /// `CLUSTER REPLICATE id`: this (empty) node becomes a replica of the primary `id`.
    pub async fn cluster_replicate(&self, primary_id: &str) -> Result<(), AdminError> {
        self.run(
            "CLUSTER REPLICATE",
            redis::cmd("CLUSTER").arg("REPLICATE").arg(primary_id),
        )
        .await
    }

    /// Makes this replica its shard's primary without losing a write its primary acknowledged,
    /// and waits until it serves as one, for at most `timeout`. `CLUSTER FAILOVER` (neither
    /// `FORCE` nor `TAKEOVER`): the primary holds its clients' writes until this replica has
    /// processed its whole stream, then the replica is elected with the other primaries' votes
    /// and the held clients are redirected to it.
    ///
    /// # Errors
    /// The server's refusal (this node is not a replica, or its primary cannot be reached), or
    /// `Unexpected` when it is still a replica after `timeout`: the primary then keeps its
    /// slots, as Redis gives up a manual failover that did not complete in time.
    pub async fn hand_over_to_me(&self, timeout: Duration) -> Result<(), AdminError> {
        self.run::<()>("CLUSTER FAILOVER", redis::cmd("CLUSTER").arg("FAILOVER"))
            .await?;
        self.until_primary(timeout).await
    }

    /// Makes this replica its shard's primary now, without its primary, which does not answer
    /// (`CLUSTER FAILOVER FORCE`: still elected with the other primaries' votes), and waits
    /// until it serves as one, for at most `timeout`. It takes what it has replicated, as
    /// Redis's own failover would once the primary is past `cluster-node-timeout`.
    ///
    /// # Errors
    /// As [`Self::hand_over_to_me`].
    pub async fn take_over_now(&self, timeout: Duration) -> Result<(), AdminError> {
        self.run::<()>(
            "CLUSTER FAILOVER",
            redis::cmd("CLUSTER").arg("FAILOVER").arg("FORCE"),
        )
        .await?;
        self.until_primary(timeout).await
    }

    async fn until_primary(&self, timeout: Duration) -> Result<(), AdminError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.cluster_myself().await?.flags.primary {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self.unexpected(
                    "CLUSTER FAILOVER",
                    format!(
                        "still a replica {} s after asking to take over",
                        timeout.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `CLUSTER SETSLOT slot IMPORTING|MIGRATING|NODE|STABLE`.
    pub async fn cluster_set_slot(&self, slot: u16, state: &SlotState) -> Result<(), AdminError> {
        let mut command = redis::cmd("CLUSTER");
        command.arg("SETSLOT").arg(slot);
        match state {
            SlotState::Importing(id) => command.arg("IMPORTING").arg(id),
            SlotState::Migrating(id) => command.arg("MIGRATING").arg(id),
            SlotState::Node(id) => command.arg("NODE").arg(id),
            SlotState::Stable => command.arg("STABLE"),
        };
        self.run("CLUSTER SETSLOT", &command).await
    }

    /// `CLUSTER COUNTKEYSINSLOT slot`: keys this node holds in `slot`.
    pub async fn count_keys_in_slot(&self, slot: u16) -> Result<u64, AdminError> {
        self.run(
            "CLUSTER COUNTKEYSINSLOT",
            redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot),
        )
        .await
    }

    /// `CLUSTER GETKEYSINSLOT slot count`: up to `count` keys this node holds in `slot`.
    pub async fn keys_in_slot(&self, slot: u16, count: usize) -> Result<Vec<Vec<u8>>, AdminError> {
        self.run(
            "CLUSTER GETKEYSINSLOT",
            redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(count),
        )
        .await
    }

    /// `MIGRATE host port "" 0 timeout [REPLACE] AUTH|AUTH2 ... KEYS k1 k2 ...`: moves `keys`
    /// from this node to the node at `target`, authenticating there with `target_credentials`.
    /// Each key is deleted here only after the target stored it. Keys missing here are skipped
    /// (`NOKEY` is not an error).
    pub async fn migrate_keys(
        &self,
        target: SocketAddr,
        target_credentials: Option<&Credentials>,
        keys: &[Vec<u8>],
        options: MigrateOptions,
    ) -> Result<(), AdminError> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut command = redis::cmd("MIGRATE");
        command
            .arg(target.ip().to_string())
            .arg(target.port())
            .arg("")
            .arg(0)
            .arg(u64::try_from(options.timeout.as_millis()).unwrap_or(u64::MAX));
        if options.replace {
            command.arg("REPLACE");
        }
        match target_credentials {
            Some(Credentials {
                username: Some(username),
                password,
            }) => command.arg("AUTH2").arg(username).arg(password.expose_secret()),
            Some(Credentials {
                username: None,
                password,
            }) => command.arg("AUTH").arg(password.expose_secret()),
            None => &mut command,
        };
        command.arg("KEYS").arg(keys);
        // "OK", or "NOKEY" when none of the keys existed any more.
        let _answer: String = self.run("MIGRATE", &command).await?;
        Ok(())
    }

    /// `CLUSTER RESET HARD|SOFT`: forgets every other node and its slots (the node must hold no
    /// keys). A hard reset also gives the node a new id and zeroes its epochs.
    pub async fn cluster_reset(&self, hard: bool) -> Result<(), AdminError> {
        let mode = if hard { "HARD" } else { "SOFT" };
        self.run("CLUSTER RESET", redis::cmd("CLUSTER").arg("RESET").arg(mode))
            .await
    }

    /// `CLUSTER BUMPEPOCH`: gives this node a new, highest config epoch, so its claims on slots
    /// win over older ones. Answers `BUMPED` or `STILL`.
    pub async fn cluster_bump_epoch(&self) -> Result<String, AdminError> {
        self.run("CLUSTER BUMPEPOCH", redis::cmd("CLUSTER").arg("BUMPEPOCH"))
            .await
    }

    /// Whether this node sees every node of `ids` and nothing else, each with a live link;
    /// the answer to "has the cluster converged after MEET / FORGET".
    pub async fn cluster_sees_exactly(&self, ids: &[String]) -> Result<bool, AdminError> {
        let nodes = self.cluster_nodes().await?;
        let seen: HashMap<&str, &ClusterNode> = nodes.iter().map(|node| (node.id.as_str(), node)).collect();
        Ok(seen.len() == ids.len()
            && ids.iter().all(|id| {
                seen.get(id.as_str())
                    .is_some_and(|node| (node.flags.myself || node.connected) && !node.flags.handshake)
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from redis-server 7.0.15, including a node being met and the local migrating /
    // importing state.
    const SOURCE_VIEW: &str = "\
d377533ea0a5cf7f19ad3a57da0ef62fb6111a9e 127.0.0.1:7002@17002 master - 0 1795281700684 0 connected 8001-16383
b007dd7ae7333ef411a6105400fcd59721d6df67 127.0.0.1:7999@17999 handshake - 0 0 0 disconnected
c78a163e753722fd1e68e830c64d85d012f8fb9e 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-8000 [100->-d377533ea0a5cf7f19ad3a57da0ef62fb6111a9e]
";
    const TARGET_VIEW: &str = "\
c78a163e753722fd1e68e830c64d85d012f8fb9e 127.0.0.1:7001@17001 master - 0 1795281698668 1 connected 0-8000
d377533ea0a5cf7f19ad3a57da0ef62fb6111a9e 127.0.0.1:7002@17002 myself,master - 0 0 0 connected 8001-16383 [100-<-c78a163e753722fd1e68e830c64d85d012f8fb9e]
";
    // From the cluster tutorial (hostnames, replicas), plus failure flags.
    const TUTORIAL: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,hostname4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002,hostname2 master,fail? - 1426238316232 1426238316232 2 disconnected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003,hostname3 master,fail - 0 1426238318243 3 connected 10923-16383
6ec23923021cf3ffec47632106199cb7f496ce01 :0@0 slave,noaddr 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 5 disconnected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001,hostname1 myself,master - 0 0 1 connected 0-5460 5461 7000-7001
";

    #[test]
    fn the_source_view_shows_its_migrating_slot_and_a_node_in_handshake() {
        let nodes = parse_cluster_nodes(SOURCE_VIEW).unwrap();
        assert_eq!(nodes.len(), 3);
        let me = myself(&nodes).unwrap();
        assert_eq!(me.id, "c78a163e753722fd1e68e830c64d85d012f8fb9e");
        assert_eq!(me.address, Some("127.0.0.1:7001".parse().unwrap()));
        assert_eq!(me.bus_port, 17001);
        assert!(me.flags.primary && !me.flags.replica);
        assert_eq!(me.slots, vec![SlotRange::new(0, 8000)]);
        assert_eq!(
            me.migrating_to(100),
            Some("d377533ea0a5cf7f19ad3a57da0ef62fb6111a9e")
        );
        assert!(me.importing.is_empty());
        assert!(me.owns(100), "a migrating slot still belongs to the source");
        assert!(nodes[1].flags.handshake && !nodes[1].connected);
        assert_eq!(owner_of(&nodes, 9000).unwrap().id, nodes[0].id);
        assert_eq!(me.slot_count(), 8001);
        let ownership = slot_ownership(&nodes);
        assert_eq!(ownership.len(), 2, "the node in handshake owns nothing yet");
        assert_eq!(ownership[&me.id], vec![SlotRange::new(0, 8000)]);
    }

    #[test]
    fn the_target_view_shows_its_importing_slot() {
        let nodes = parse_cluster_nodes(TARGET_VIEW).unwrap();
        let me = myself(&nodes).unwrap();
        assert_eq!(
            me.importing_from(100),
            Some("c78a163e753722fd1e68e830c64d85d012f8fb9e")
        );
        assert!(!me.owns(100));
        assert_eq!(
            owner_of(&nodes, 100).unwrap().id,
            "c78a163e753722fd1e68e830c64d85d012f8fb9e"
        );
    }

    #[test]
    fn replicas_hostnames_failures_and_missing_addresses_are_read() {
        let nodes = parse_cluster_nodes(TUTORIAL).unwrap();
        let replica = &nodes[0];
        assert!(replica.flags.replica);
        assert_eq!(
            replica.primary_id.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(replica.hostname.as_deref(), Some("hostname4"));
        assert!(nodes[1].flags.possibly_failed && !nodes[1].flags.failed && !nodes[1].connected);
        assert!(nodes[2].flags.failed);
        assert_eq!(nodes[3].address, None);
        assert!(nodes[3].flags.no_address);
        assert_eq!(
            nodes[4].slots,
            vec![
                SlotRange::new(0, 5460),
                SlotRange::single(5461),
                SlotRange::new(7000, 7001)
            ]
        );
        assert_eq!(nodes[4].config_epoch, 1);
    }

    #[test]
    fn only_two_distinct_primaries_share_a_config_epoch() {
        let view = parse_cluster_nodes(
            "a 127.0.0.1:7001@17001 myself,master - 0 0 3 connected 0-100\n\
             b 127.0.0.1:7002@17002 slave a 0 0 3 connected\n\
             c 127.0.0.1:7003@17003 master - 0 0 4 connected 101-200",
        )
        .unwrap();
        // A replica shows its primary's epoch, and a node listed twice is one node.
        assert_eq!(shared_config_epoch(view.iter().chain(&view[..1])), None);
        let colliding = parse_cluster_nodes("d 127.0.0.1:7004@17004 master - 0 0 4 connected").unwrap();
        assert_eq!(
            shared_config_epoch(view.iter().chain(&colliding)),
            Some(("c", "d", 4))
        );
    }

    #[test]
    fn malformed_lines_are_refused_with_the_line() {
        let error = parse_cluster_nodes("abc 127.0.0.1:7001@17001 master - 0 0 x connected").unwrap_err();
        assert!(error.contains("config epoch") && error.contains("abc"), "{error}");
        assert!(parse_cluster_nodes("abc 127.0.0.1:7001@17001 master - 0 0 1 connected 16384").is_err());
        assert!(parse_cluster_nodes("abc 127.0.0.1:7001@17001 master - 0 0 1 connected [5]").is_err());
    }

    #[test]
    fn cluster_info_is_read() {
        let text = "cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:16384\r\n\
            cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:3\r\ncluster_size:2\r\n\
            cluster_current_epoch:1\r\ncluster_my_epoch:1\r\ncluster_stats_messages_ping_sent:2\r\n";
        let info = parse_cluster_info(text).unwrap();
        assert!(info.state_ok);
        assert_eq!(info.slots_assigned, 16384);
        assert_eq!(info.known_nodes, 3);
        assert_eq!(info.size, 2);
        assert_eq!(info.current_epoch, 1);
        let failing = parse_cluster_info(&text.replace("cluster_state:ok", "cluster_state:fail")).unwrap();
        assert!(!failing.state_ok);
    }

    #[test]
    fn key_slots_match_the_specification() {
        // Values from the cluster specification and redis-cli CLUSTER KEYSLOT.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(
            key_slot(b"foo{}{bar}"),
            key_slot(b"foo{}{bar}"),
            "an empty tag hashes the whole key"
        );
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }
}
