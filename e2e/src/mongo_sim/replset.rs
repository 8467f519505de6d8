//! One member at run time: its role, what it knows of the others, and the tasks that keep the
//! set alive: heartbeats, elections, the oplog fetcher (pull replication and initial sync), the
//! state writer, and the `replSet*` commands.
//!
//! Internal commands, sent member to member and refused to anyone without the cluster key when
//! a key file is configured: `simHeartbeat` (status, term, optimes and configuration both
//! ways; a newer configuration is adopted from either side), `simRequestVote` (dry run and
//! real), `simOplogFetch` (entries after an optime, long-polled; carries the fetcher's
//! progress, which is how the primary learns what is durable where) and `simInitialSync` (a
//! snapshot of all data and the last oplog entry).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use bson::{Bson, DateTime, Document, Timestamp, doc, oid::ObjectId};
use futures::{StreamExt, stream::FuturesUnordered};
use tokio::{
    net::TcpListener,
    sync::{Notify, watch},
};

use super::{
    Binary, CmdError, Options,
    config::{self, ReplConfig, Timing},
    log,
    peer::{CallError, Peers},
    rules::{self, VoteRequest, VoterView},
    state::{Databases, FCV_ID, OpTime, OplogEntry, Store, USERS, VERSION},
};

/// A member's own state, as `replSetGetStatus` numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Startup,
    Primary,
    Secondary,
    /// Alive, not serving: here only a member whose oplog no sync source still covers
    /// (`error RS102 too stale to catch up`); it leaves this state only by an initial sync.
    Recovering,
    Startup2,
    Arbiter,
    Rollback,
    Removed,
}

impl Role {
    pub fn code(self) -> i32 {
        match self {
            Role::Startup => 0,
            Role::Primary => 1,
            Role::Secondary => 2,
            Role::Recovering => 3,
            Role::Startup2 => 5,
            Role::Arbiter => 7,
            Role::Rollback => 9,
            Role::Removed => 10,
        }
    }
}

pub fn state_name(code: i32) -> &'static str {
    match code {
        0 => "STARTUP",
        1 => "PRIMARY",
        2 => "SECONDARY",
        3 => "RECOVERING",
        5 => "STARTUP2",
        6 => "UNKNOWN",
        7 => "ARBITER",
        8 => "(not reachable/healthy)",
        9 => "ROLLBACK",
        10 => "REMOVED",
        _ => "UNKNOWN",
    }
}

/// What a member too stale to catch up says of itself, as the server does.
pub const TOO_STALE: &str = "error RS102 too stale to catch up";

/// What this member knows of another, from heartbeats and oplog fetches.
#[derive(Clone, Debug, Default)]
pub struct PeerStatus {
    pub state: Option<i32>,
    pub failures: u32,
    pub last_ok: Option<Instant>,
    pub last_heartbeat: Option<DateTime>,
    pub last_heartbeat_recv: Option<DateTime>,
    pub ping_ms: i64,
    pub applied: OpTime,
    pub durable: OpTime,
    pub config_version: i32,
    pub config_term: i64,
    pub term: i64,
    pub sync_source: String,
    pub binary: Option<String>,
    pub up_since: Option<Instant>,
    pub in_flight: bool,
    pub message: String,
}

impl PeerStatus {
    /// Answered the last heartbeats: fewer than two consecutive failures since an answer.
    pub fn healthy(&self) -> bool {
        self.last_ok.is_some() && self.failures < 2
    }

    /// The state `replSetGetStatus` shows for it.
    pub fn shown_state(&self) -> i32 {
        if self.failures >= 2 {
            8
        } else {
            match (self.last_ok, self.state) {
                (Some(_), Some(state)) => state,
                _ => 6,
            }
        }
    }
}

/// The `failCommand` fail point, as `configureFailPoint` set it.
#[derive(Clone, Debug, Default)]
pub struct FailCommand {
    /// `None`: always on; `Some(n)`: n more times.
    pub remaining: Option<u64>,
    pub commands: Vec<String>,
    pub code: Option<i32>,
    pub message: Option<String>,
    pub close_connection: bool,
    pub block: Option<Duration>,
    pub app_name: Option<String>,
    pub labels: Vec<String>,
    pub write_concern_error: Option<Document>,
}

pub struct Cursor {
    pub ns: String,
    pub documents: VecDeque<Document>,
}

/// Everything behind the member's lock. Never held across an await.
pub struct Inner {
    pub store: Store,
    pub config: Option<ReplConfig>,
    pub role: Role,
    pub primary: Option<String>,
    pub last_primary_contact: Instant,
    jitter: Duration,
    pub peers: HashMap<String, PeerStatus>,
    pub commit_point: OpTime,
    pub durable: OpTime,
    pub frozen_until: Option<Instant>,
    election_running: bool,
    pub election_date: Option<DateTime>,
    last_majority_contact: Instant,
    takeover_since: Option<Instant>,
    pub step_up_requested: bool,
    pub cursors: HashMap<i64, Cursor>,
    pub partitioned: HashSet<String>,
    pub fail_command: Option<FailCommand>,
    pub stop_replication: bool,
    pub sync_source: Option<String>,
    /// Sync sources whose oplog no longer reaches this member's last applied entry.
    too_stale_for: HashSet<String>,
    /// What this member says of itself in heartbeats and `replSetGetStatus` (`infoMessage`).
    pub heartbeat_message: String,
    last_ts: Timestamp,
    pub reconfig_running: bool,
    dirty: bool,
    changed: bool,
    heartbeat_now: bool,
    /// Oplog entries kept (`--sim-oplog-entries`).
    oplog_entries: usize,
}

impl Inner {
    pub fn applied(&self) -> OpTime {
        self.store.last_optime()
    }

    pub fn peer(&mut self, host: &str) -> &mut PeerStatus {
        self.peers.entry(host.to_ascii_lowercase()).or_default()
    }

    pub fn peer_view(&self, host: &str) -> Option<&PeerStatus> {
        self.peers.get(&host.to_ascii_lowercase())
    }

    pub fn mark_dirty(&mut self) {
        self.dirty = true;
        self.changed = true;
    }

    pub fn timing(&self, defaults: Timing) -> Timing {
        self.config.as_ref().map(ReplConfig::timing).unwrap_or(defaults)
    }

    /// A timestamp after every one issued or in the oplog: this second's next increment.
    fn next_timestamp(&mut self) -> Timestamp {
        let now = (DateTime::now().timestamp_millis() / 1000) as u32;
        let logged = self.store.last_optime().ts;
        let last = if (logged.time, logged.increment) > (self.last_ts.time, self.last_ts.increment) {
            logged
        } else {
            self.last_ts
        };
        let next = if now > last.time {
            Timestamp {
                time: now,
                increment: 1,
            }
        } else {
            Timestamp {
                time: last.time,
                increment: last.increment + 1,
            }
        };
        self.last_ts = next;
        next
    }

    /// Writes one entry on the primary: applied to the data, appended to the oplog.
    pub fn write(
        &mut self,
        op: &str,
        ns: &str,
        o: Document,
        o2: Option<Document>,
        session: Option<(String, i64)>,
    ) -> Result<OpTime, String> {
        let ts = self.next_timestamp();
        let (lsid, txn_number) = session.map_or((None, None), |(l, t)| (Some(l), Some(t)));
        let entry = OplogEntry {
            ts,
            t: self.store.term,
            wall: DateTime::now(),
            op: op.to_string(),
            ns: ns.to_string(),
            o,
            o2,
            lsid,
            txn_number,
        };
        self.store.apply(&entry)?;
        let optime = entry.optime();
        self.store.append(entry, self.oplog_entries);
        self.mark_dirty();
        Ok(optime)
    }
}

/// How long a primary's oplog stays without an entry before it writes a no-op: the server's
/// default `periodicNoopIntervalSecs`.
pub const PERIODIC_NOOP: Duration = Duration::from_secs(10);

/// One simulated member.
pub struct Node {
    pub options: Options,
    pub me: String,
    pub binary: Binary,
    /// Digest of the key file's contents: what internal commands must carry.
    pub key: Option<String>,
    inner: Mutex<Inner>,
    pub changes: watch::Sender<u64>,
    persist_wake: Notify,
    flushing: tokio::sync::Mutex<()>,
    heartbeat_wake: Notify,
    election_wake: Notify,
    shutdown: Notify,
    exit_code: AtomicI64,
    pub stopping: AtomicBool,
    pub peers_client: Peers,
    pub started: Instant,
    pub connection_ids: AtomicI64,
    pub connections: AtomicUsize,
    pub total_connections: AtomicUsize,
    me_cache: Mutex<HashMap<String, bool>>,
}

/// The digest of a key file's contents, whitespace removed as the server reads key files.
pub fn key_digest(contents: &str) -> String {
    let key: String = contents.chars().filter(|c| !c.is_whitespace()).collect();
    hex::encode(super::scram::sha256(key.as_bytes()))
}

/// `electionId` as the server derives it from the term.
pub fn election_id(term: i64) -> ObjectId {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
    bytes[4..].copy_from_slice(&term.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

impl Node {
    /// Loads the dbpath, binds the address and serves until shut down; returns the exit code.
    pub async fn start(options: Options) -> Result<i32, String> {
        let binary = Binary::for_release(&options.release)?;
        std::fs::create_dir_all(&options.dbpath).map_err(|e| format!("{}: {e}", options.dbpath.display()))?;
        let key = match &options.key_file {
            Some(path) => {
                let contents = std::fs::read_to_string(path)
                    .map_err(|e| format!("--keyFile {}: {e}", path.display()))?;
                if contents.trim().len() < 6 {
                    return Err(format!("--keyFile {}: key file too short", path.display()));
                }
                Some(key_digest(&contents))
            }
            None => None,
        };
        let me = options.host();
        let (store, fresh) = match Store::load(&options.dbpath)? {
            Some(store) => (store, false),
            None => (fresh_store(&binary, &options)?, true),
        };
        if let Some(fcv) = store.fcv() {
            let accepted = rules::version_pair(&fcv)
                .zip(rules::version_pair(&binary.release))
                .is_some_and(|(fcv, binary)| rules::binary_accepts_fcv(binary, fcv));
            if !accepted {
                log(
                    &me,
                    format!(
                        "UPGRADE PROBLEM: the data files' feature compatibility version is {fcv}, which binary version {} cannot run",
                        binary.version
                    ),
                );
                // The server's exit code for an incompatible data version.
                return Ok(62);
            }
        }
        let defaults = Timing {
            election_timeout: options.election_timeout,
            heartbeat_interval: options.heartbeat_interval,
        };
        let config = match &store.config {
            Some(document) => {
                Some(ReplConfig::parse(document, defaults).map_err(|e| format!("stored config: {e}"))?)
            }
            None => None,
        };
        let listener = TcpListener::bind((options.bind_ip.as_str(), options.port))
            .await
            .map_err(|e| format!("bind {me}: {e}"))?;
        let durable = store.last_optime();
        let now = Instant::now();
        let inner = Inner {
            store,
            config,
            role: Role::Startup,
            primary: None,
            last_primary_contact: now,
            jitter: Duration::ZERO,
            peers: HashMap::new(),
            commit_point: OpTime::NULL,
            durable,
            frozen_until: None,
            election_running: false,
            election_date: None,
            last_majority_contact: now,
            takeover_since: None,
            step_up_requested: false,
            cursors: HashMap::new(),
            partitioned: HashSet::new(),
            fail_command: None,
            stop_replication: false,
            sync_source: None,
            too_stale_for: HashSet::new(),
            heartbeat_message: String::new(),
            last_ts: Timestamp {
                time: 0,
                increment: 0,
            },
            reconfig_running: false,
            dirty: fresh,
            changed: false,
            heartbeat_now: false,
            oplog_entries: options.oplog_entries,
        };
        let node = Arc::new(Node {
            key: key.clone(),
            peers_client: Peers::new(key),
            me: me.clone(),
            binary,
            options,
            inner: Mutex::new(inner),
            changes: watch::channel(0).0,
            persist_wake: Notify::new(),
            flushing: tokio::sync::Mutex::new(()),
            heartbeat_wake: Notify::new(),
            election_wake: Notify::new(),
            shutdown: Notify::new(),
            exit_code: AtomicI64::new(0),
            stopping: AtomicBool::new(false),
            started: now,
            connection_ids: AtomicI64::new(1),
            connections: AtomicUsize::new(0),
            total_connections: AtomicUsize::new(0),
            me_cache: Mutex::new(HashMap::new()),
        });
        node.with(|inner| {
            inner.role = node.role_for_config(inner);
            node.reset_election_timer(inner);
        });
        log(
            &me,
            format!(
                "mongo-sim {} (simulating MongoDB {}) listening; replSet {}, state {}",
                env!("CARGO_PKG_VERSION"),
                node.binary.version,
                node.options.repl_set,
                state_name(node.with(|i| i.role.code()))
            ),
        );
        tokio::spawn(node.clone().writer_loop());
        tokio::spawn(node.clone().heartbeat_loop());
        tokio::spawn(node.clone().election_loop());
        tokio::spawn(node.clone().replication_loop());
        tokio::spawn(node.clone().noop_loop());
        if fresh {
            node.persist_wake.notify_one();
        }
        let serve = {
            let node = node.clone();
            async move {
                loop {
                    match listener.accept().await {
                        Ok((stream, address)) => {
                            tokio::spawn(super::commands::serve_connection(node.clone(), stream, address));
                        }
                        Err(error) => {
                            log(&node.me, format!("accept: {error}"));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
            }
        };
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| e.to_string())?;
        tokio::select! {
            _ = serve => {}
            _ = terminate.recv() => log(&node.me, "SIGTERM: shutting down"),
            _ = tokio::signal::ctrl_c() => log(&node.me, "SIGINT: shutting down"),
            _ = node.shutdown.notified() => log(&node.me, "shutdown command: shutting down"),
        }
        node.stopping.store(true, Ordering::SeqCst);
        node.flush().await;
        Ok(node.exit_code.load(Ordering::SeqCst) as i32)
    }

    /// Runs `f` under the lock, then wakes the writer and waiters for what it changed.
    pub fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut inner = self.inner.lock().expect("member state");
        let result = f(&mut inner);
        let dirty = std::mem::take(&mut inner.dirty);
        let changed = std::mem::take(&mut inner.changed);
        let heartbeat = std::mem::take(&mut inner.heartbeat_now);
        drop(inner);
        if dirty {
            self.persist_wake.notify_one();
        }
        if changed {
            self.changes.send_modify(|v| *v += 1);
        }
        if heartbeat {
            self.heartbeat_wake.notify_one();
        }
        result
    }

    pub fn defaults(&self) -> Timing {
        Timing {
            election_timeout: self.options.election_timeout,
            heartbeat_interval: self.options.heartbeat_interval,
        }
    }

    pub fn timing(&self) -> Timing {
        self.with(|i| i.timing(self.defaults()))
    }

    /// Asks the process to exit with `code` once its state is written.
    pub fn request_shutdown(&self, code: i32) {
        self.exit_code.store(code as i64, Ordering::SeqCst);
        self.shutdown.notify_one();
    }

    /// Whether `host` names this member: its `bind_ip:port`, or a name resolving to it.
    pub fn is_me(&self, host: &str) -> bool {
        let host = config::normalize_host(host);
        if host.eq_ignore_ascii_case(&self.me) {
            return true;
        }
        if let Some(known) = self.me_cache.lock().expect("host cache").get(&host) {
            return *known;
        }
        let Some((name, port)) = host.rsplit_once(':') else {
            return false;
        };
        if port.parse::<u16>().ok() != Some(self.options.port) || name.parse::<std::net::IpAddr>().is_ok() {
            return false;
        }
        use std::net::ToSocketAddrs;
        let wanted: Option<std::net::IpAddr> = self.options.bind_ip.parse().ok();
        // A name that does not resolve yet (a pod's DNS record is published after it starts)
        // is asked again next time, not remembered as someone else.
        let Ok(mut addresses) = (name, self.options.port).to_socket_addrs() else {
            return false;
        };
        let mine = addresses.any(|a| Some(a.ip()) == wanted);
        self.me_cache.lock().expect("host cache").insert(host, mine);
        mine
    }

    pub fn my_member<'a>(&self, config: &'a ReplConfig) -> Option<&'a config::Member> {
        config.members.iter().find(|m| self.is_me(&m.host))
    }

    /// The name this member has in its configuration (its `bind_ip:port` before it has one).
    pub fn my_host(&self, inner: &Inner) -> String {
        inner
            .config
            .as_ref()
            .and_then(|c| self.my_member(c))
            .map(|m| m.host.clone())
            .unwrap_or_else(|| self.me.clone())
    }

    fn role_for_config(&self, inner: &Inner) -> Role {
        match &inner.config {
            None => Role::Startup,
            Some(config) => match self.my_member(config) {
                None => Role::Removed,
                Some(member) if member.arbiter_only => Role::Arbiter,
                Some(_) if !inner.store.synced => Role::Startup2,
                Some(_) => Role::Secondary,
            },
        }
    }

    fn reset_election_timer(&self, inner: &mut Inner) {
        inner.last_primary_contact = Instant::now();
        let timeout = inner.timing(self.defaults()).election_timeout;
        inner.jitter = timeout.mul_f64(rand::random_range(0.0..0.15));
    }

    /// Installs a configuration (already checked) and takes the role it gives this member.
    pub fn install_config(&self, inner: &mut Inner, config: ReplConfig, why: &str) {
        log(
            &self.me,
            format!(
                "installing config version {} term {} ({why}): {}",
                config.version,
                config.term,
                config
                    .members
                    .iter()
                    .map(|m| format!(
                        "{}#{}{}",
                        m.host,
                        m.id,
                        if m.votes > 0 { "" } else { " non-voting" }
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        inner.store.config = Some(config.to_document());
        let was_initialized = inner.config.is_some();
        inner.config = Some(config);
        inner.mark_dirty();
        inner.heartbeat_now = true;
        let wanted = self.role_for_config(inner);
        let new_role = match (inner.role, wanted) {
            (Role::Primary, Role::Secondary) => {
                let electable = inner
                    .config
                    .as_ref()
                    .and_then(|c| self.my_member(c))
                    .is_some_and(|m| m.is_electable());
                if electable { Role::Primary } else { Role::Secondary }
            }
            (Role::Rollback, Role::Secondary | Role::Startup2) => Role::Rollback,
            (Role::Recovering, Role::Secondary) => Role::Recovering,
            (_, wanted) => wanted,
        };
        if new_role == Role::Arbiter && inner.role != Role::Arbiter {
            // An arbiter replicates nothing and votes with no optime. What its dbpath held
            // before (the root user its first start created) stays, as on the server, where
            // clients therefore do not authenticate to arbiters.
            inner.store.oplog.clear();
            inner.store.synced = false;
        }
        if !was_initialized {
            self.reset_election_timer(inner);
        }
        self.set_role(inner, new_role, "new config");
    }

    pub fn set_role(&self, inner: &mut Inner, role: Role, why: &str) {
        if inner.role == role {
            return;
        }
        log(
            &self.me,
            format!(
                "transition {} -> {} ({why})",
                state_name(inner.role.code()),
                state_name(role.code())
            ),
        );
        if inner.role == Role::Primary {
            inner.primary = None;
            inner.election_date = None;
            self.reset_election_timer(inner);
        }
        inner.role = role;
        inner.changed = true;
        inner.heartbeat_now = true;
    }

    /// Adopts a higher term seen anywhere; a primary that sees one steps down.
    pub fn observe_term(&self, inner: &mut Inner, term: i64, from: &str) {
        if term > inner.store.term {
            inner.store.term = term;
            inner.mark_dirty();
            if inner.role == Role::Primary {
                self.set_role(inner, Role::Secondary, &format!("saw term {term} from {from}"));
            }
        }
    }

    pub fn step_down(&self, inner: &mut Inner, why: &str) {
        if inner.role == Role::Primary {
            self.set_role(inner, Role::Secondary, why);
        }
    }

    /// Recomputes the commit point: on the primary from the members' durable optimes (only
    /// entries of its own term commit, and those before them with them); elsewhere it is what
    /// the primary said, capped at what this member has applied.
    pub fn advance_commit_point(&self, inner: &mut Inner, learned: Option<OpTime>) {
        let candidate = if inner.role == Role::Primary {
            let Some(config) = inner.config.as_ref() else {
                return;
            };
            let majority = rules::majority_optime(config, |member| {
                if self.is_me(&member.host) {
                    Some(inner.durable)
                } else {
                    inner.peer_view(&member.host).map(|p| p.durable)
                }
            });
            (majority.t == inner.store.term).then_some(majority)
        } else {
            // Only what this member holds of the committed history: the primary's commit
            // point, or this member's last entry when that is of the same term (the same
            // primary wrote both). An entry of an older term may be one that is rolled back.
            let applied = inner.applied();
            learned.and_then(|learned| {
                if learned <= applied {
                    let oplog = &inner.store.oplog;
                    oplog
                        .binary_search_by(|e| e.optime().cmp(&learned))
                        .is_ok()
                        .then_some(learned)
                } else {
                    (learned.t == applied.t).then_some(applied)
                }
            })
        };
        if let Some(candidate) = candidate
            && candidate > inner.commit_point
        {
            inner.commit_point = candidate;
            inner.changed = true;
        }
    }

    /// A snapshot of this member's status for heartbeats.
    fn status_fields(&self, inner: &Inner) -> Document {
        let mut fields = doc! {
            "setName": &self.options.repl_set,
            "from": self.my_host(inner),
            "term": inner.store.term,
            "state": inner.role.code(),
            "appliedOpTime": inner.applied().to_document(),
            "durableOpTime": inner.durable.to_document(),
            "commitPoint": inner.commit_point.to_document(),
            "binaryVersion": &self.binary.release,
            "syncSource": inner.sync_source.clone().unwrap_or_default(),
            "initialized": inner.config.is_some(),
            "hbmsg": &inner.heartbeat_message,
        };
        if let Some(config) = &inner.config {
            fields.insert("configVersion", config.version);
            fields.insert("configTerm", config.term);
        }
        fields
    }

    /// Takes in what another member said of itself, in a heartbeat either way.
    fn absorb(&self, inner: &mut Inner, from: &str, info: &Document) {
        let term = info.get_i64("term").unwrap_or(0);
        let state = info.get_i32("state").ok();
        let applied = OpTime::from_bson(info.get("appliedOpTime")).unwrap_or(OpTime::NULL);
        let durable = OpTime::from_bson(info.get("durableOpTime")).unwrap_or(OpTime::NULL);
        let seen = |inner: &Inner| {
            inner.peer_view(from).map(|p| {
                (
                    p.state,
                    p.applied,
                    p.durable,
                    p.config_version,
                    p.config_term,
                    p.term,
                )
            })
        };
        let before = seen(inner);
        {
            let peer = inner.peer(from);
            peer.state = state;
            peer.term = term;
            peer.applied = applied;
            peer.durable = durable;
            peer.config_version = info.get_i32("configVersion").unwrap_or(-2);
            peer.config_term = info.get_i64("configTerm").unwrap_or(-1);
            if let Ok(message) = info.get_str("hbmsg") {
                peer.message = message.to_string();
            }
            peer.binary = info.get_str("binaryVersion").ok().map(str::to_string);
            peer.sync_source = info.get_str("syncSource").unwrap_or_default().to_string();
        }
        if seen(inner) != before {
            inner.changed = true;
        }
        self.observe_term(inner, term, from);
        // Only a configuration that could supersede this member's is worth parsing.
        let offered_version = (
            info.get_i32("configVersion").unwrap_or(-2),
            info.get_i64("configTerm").unwrap_or(-1),
        );
        let maybe_newer = inner
            .config
            .as_ref()
            .is_none_or(|c| config_order_newer(offered_version, (c.version, c.term)));
        if maybe_newer
            && let Ok(document) = info.get_document("config")
            && let Ok(offered) = ReplConfig::parse(document, self.defaults())
            && offered.name == self.options.repl_set
        {
            let adopt = match &inner.config {
                None => self.my_member(&offered).is_some(),
                Some(current) => offered.is_newer_than(current),
            };
            if adopt {
                self.install_config(inner, offered, &format!("learned from {from}"));
            }
        }
        if state == Some(Role::Primary.code()) && term >= inner.store.term && inner.role != Role::Primary {
            if inner.primary.as_deref() != Some(from) {
                log(&self.me, format!("{from} is primary in term {term}"));
                inner.changed = true;
            }
            inner.primary = Some(from.to_string());
            self.reset_election_timer(inner);
            let commit = OpTime::from_bson(info.get("commitPoint"));
            self.advance_commit_point(inner, commit);
        } else if inner.primary.as_deref() == Some(from) && state != Some(Role::Primary.code()) {
            inner.primary = None;
            inner.changed = true;
        }
        if inner.role == Role::Primary {
            self.advance_commit_point(inner, None);
        }
    }

    fn config_hosts(&self, inner: &Inner) -> Vec<String> {
        inner
            .config
            .as_ref()
            .map(|c| {
                c.members
                    .iter()
                    .filter(|m| !self.is_me(&m.host))
                    .map(|m| m.host.clone())
                    .filter(|h| !inner.partitioned.contains(&h.to_ascii_lowercase()))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn is_partitioned(&self, host: &str) -> bool {
        self.with(|i| i.partitioned.contains(&host.to_ascii_lowercase()))
    }

    fn heartbeat_timeout(timing: Timing) -> Duration {
        (timing.heartbeat_interval * 2).max(Duration::from_millis(500))
    }
}

fn fresh_store(binary: &Binary, options: &Options) -> Result<Store, String> {
    let mut store = Store::default();
    store.insert_local(
        VERSION.0,
        VERSION.1,
        doc! { "_id": FCV_ID, "version": &binary.release },
    )?;
    let username = std::env::var("MONGO_INITDB_ROOT_USERNAME").unwrap_or_default();
    let password = std::env::var("MONGO_INITDB_ROOT_PASSWORD").unwrap_or_default();
    if !username.is_empty() && !password.is_empty() {
        // Every member started from the same environment gets the same salt, so a client
        // derives the salted password once for the set, not once per member.
        let seed = format!("mongo-sim root user of {}: {username}", options.repl_set);
        let salt = super::scram::sha256(seed.as_bytes())[..28].to_vec();
        let credential = super::scram::Credential::new(&password, salt, options.scram_iterations)?;
        let user = super::commands::user_document(
            "admin",
            &username,
            &credential,
            vec![Bson::Document(doc! { "role": "root", "db": "admin" })],
        );
        store.insert_local(USERS.0, USERS.1, user)?;
    }
    Ok(store)
}

/// Whether configuration `(version, term)` `a` supersedes `b` (see [`ReplConfig::is_newer_than`]).
fn config_order_newer(a: (i32, i64), b: (i32, i64)) -> bool {
    if a.1 == -1 || b.1 == -1 {
        a.0 > b.0
    } else {
        (a.1, a.0) > (b.1, b.0)
    }
}

/// The state writer, heartbeats and elections.
impl Node {
    /// Writes the state after changes, coalescing bursts; what is written is durable.
    async fn writer_loop(self: Arc<Self>) {
        loop {
            self.persist_wake.notified().await;
            // A short pause lets a burst of writes share one file write.
            tokio::time::sleep(Duration::from_millis(2)).await;
            self.flush().await;
        }
    }

    /// Writes the state now and records the optime it covers as durable.
    pub async fn flush(&self) {
        // One write at a time: two would share the temporary file, and an older snapshot
        // renamed last would undo a newer one already reported durable.
        let _writing = self.flushing.lock().await;
        let (bytes, optime) = self.with(|i| (i.store.encode(), i.applied()));
        let dbpath: PathBuf = self.options.dbpath.clone();
        let written = tokio::task::spawn_blocking(move || Store::write(&dbpath, &bytes)).await;
        match written {
            Ok(Ok(())) => self.with(|inner| {
                if inner.durable != optime {
                    inner.durable = optime;
                    inner.changed = true;
                    self.advance_commit_point(inner, None);
                }
            }),
            Ok(Err(error)) => log(&self.me, format!("writing state: {error}")),
            Err(error) => log(&self.me, format!("writing state: {error}")),
        }
    }

    /// A primary with nothing written for [`PERIODIC_NOOP`] writes a no-op entry, as the server
    /// does (`periodicNoopIntervalSecs`): an idle set's optimes, commit point and oplog keep up
    /// with the clock, so a reader of its oplog (a point-in-time archive) sees time pass.
    async fn noop_loop(self: Arc<Self>) {
        loop {
            // Looked at every second, so the no-ops come every interval, not up to two.
            tokio::time::sleep(Duration::from_secs(1)).await;
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            self.with(|inner| {
                let now = (DateTime::now().timestamp_millis() / 1000) as u32;
                let idle_since = inner.applied().ts.time;
                if inner.role != Role::Primary || now < idle_since + PERIODIC_NOOP.as_secs() as u32 {
                    return;
                }
                if let Err(error) = inner.write("n", "", doc! { "msg": "periodic noop" }, None, None) {
                    log(&self.me, format!("writing a periodic no-op: {error}"));
                }
            });
        }
    }

    async fn heartbeat_loop(self: Arc<Self>) {
        loop {
            let timing = self.timing();
            let _ = tokio::time::timeout(timing.heartbeat_interval, self.heartbeat_wake.notified()).await;
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            let targets = self.with(|inner| {
                // Partitioned members get no heartbeats, and count as not answering them.
                let cut: Vec<String> = inner.partitioned.iter().cloned().collect();
                for host in cut {
                    let known = inner.config.as_ref().is_some_and(|c| c.member(&host).is_some());
                    if known {
                        let peer = inner.peer(&host);
                        peer.failures += 1;
                        peer.message = "partitioned".into();
                        if peer.failures >= 2 {
                            peer.up_since = None;
                            if inner
                                .primary
                                .as_deref()
                                .is_some_and(|p| p.eq_ignore_ascii_case(&host))
                            {
                                inner.primary = None;
                            }
                        }
                    }
                }
                let hosts = self.config_hosts(inner);
                hosts
                    .into_iter()
                    .filter(|host| {
                        let peer = inner.peer(host);
                        !std::mem::replace(&mut peer.in_flight, true)
                    })
                    .collect::<Vec<_>>()
            });
            for host in targets {
                tokio::spawn(self.clone().heartbeat(host, timing));
            }
        }
    }

    async fn heartbeat(self: Arc<Self>, host: String, timing: Timing) {
        let request = self.with(|inner| {
            let mut request = doc! { "simHeartbeat": &self.options.repl_set };
            request.extend(self.status_fields(inner));
            if let Some(config) = &inner.config {
                // Sent until the member is known to hold it: a new member learns it this way.
                let held = inner.peer_view(&host).is_some_and(|p| {
                    p.healthy() && (p.config_version, p.config_term) == (config.version, config.term)
                });
                if !held {
                    request.insert("config", config.to_document());
                }
            }
            request
        });
        let sent = Instant::now();
        let result = self
            .peers_client
            .call(&host, request, Self::heartbeat_timeout(timing))
            .await;
        self.with(|inner| {
            if inner.partitioned.contains(&host.to_ascii_lowercase()) {
                inner.peer(&host).in_flight = false;
                return;
            }
            match result {
                Ok(reply) => {
                    {
                        let peer = inner.peer(&host);
                        peer.in_flight = false;
                        peer.failures = 0;
                        peer.last_ok = Some(Instant::now());
                        peer.last_heartbeat = Some(DateTime::now());
                        peer.ping_ms = sent.elapsed().as_millis() as i64;
                        peer.up_since.get_or_insert_with(Instant::now);
                        peer.message.clear();
                    }
                    self.absorb(inner, &host, &reply);
                }
                Err(error) => {
                    let peer = inner.peer(&host);
                    peer.in_flight = false;
                    peer.failures += 1;
                    peer.message = error.to_string();
                    let down = peer.failures >= 2;
                    if down && peer.up_since.take().is_some() {
                        log(&self.me, format!("member {host} is now in state DOWN: {error}"));
                    }
                    if peer.failures == 2 {
                        inner.changed = true;
                    }
                    if down && inner.primary.as_deref() == Some(host.as_str()) {
                        inner.primary = None;
                    }
                }
            }
        });
    }

    /// Answers a `simHeartbeat`.
    pub fn on_heartbeat(&self, request: &Document) -> Result<Document, CmdError> {
        let from = request.get_str("from").unwrap_or_default().to_string();
        if request.get_str("simHeartbeat").unwrap_or_default() != self.options.repl_set {
            return Err(CmdError::new(
                93,
                format!(
                    "Our set name did not match: ours is {}, the heartbeat's is {}",
                    self.options.repl_set,
                    request.get_str("simHeartbeat").unwrap_or_default()
                ),
            ));
        }
        let probe = request.get_bool("probe").unwrap_or(false);
        Ok(self.with(|inner| {
            if !probe {
                inner.peer(&from).last_heartbeat_recv = Some(DateTime::now());
                self.absorb(inner, &from, request);
            }
            let mut reply = self.status_fields(inner);
            let requester = (
                request.get_i32("configVersion").ok(),
                request.get_i64("configTerm").unwrap_or(-1),
            );
            if let Some(config) = &inner.config {
                let newer = match requester {
                    (None, _) => true,
                    (Some(version), term) => {
                        config_order_newer((config.version, config.term), (version, term))
                    }
                };
                if newer {
                    reply.insert("config", config.to_document());
                }
            }
            if let Some(primary) = &inner.primary {
                reply.insert("primary", primary.clone());
            }
            reply.insert("ok", 1.0);
            reply
        }))
    }

    async fn election_loop(self: Arc<Self>) {
        loop {
            let timing = self.timing();
            let tick =
                (timing.heartbeat_interval / 2).clamp(Duration::from_millis(10), Duration::from_millis(100));
            let _ = tokio::time::timeout(tick, self.election_wake.notified()).await;
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            let start = self.with(|inner| self.election_check(inner, timing));
            if let Some(skip_dry_run) = start {
                tokio::spawn(self.clone().run_election(skip_dry_run));
            }
        }
    }

    /// Decides on one tick: a primary that lost its majority steps down; an electable secondary
    /// without a primary (or a higher-priority one behind a lower-priority primary) stands.
    /// Returns `Some(skip_dry_run)` to start an election.
    fn election_check(&self, inner: &mut Inner, timing: Timing) -> Option<bool> {
        let config = inner.config.clone()?;
        let now = Instant::now();
        if inner.role == Role::Primary {
            let reachable = config
                .voters()
                .filter(|m| {
                    self.is_me(&m.host)
                        || (!inner.partitioned.contains(&m.host.to_ascii_lowercase())
                            && inner
                                .peer_view(&m.host)
                                .and_then(|p| p.last_ok)
                                .is_some_and(|t| now.duration_since(t) < timing.election_timeout))
                })
                .count();
            if reachable >= config.majority() {
                inner.last_majority_contact = now;
            } else if now.duration_since(inner.last_majority_contact) > timing.election_timeout {
                self.step_down(inner, "cannot see a majority of voting members");
            }
            return None;
        }
        if inner.role != Role::Secondary || inner.election_running {
            inner.step_up_requested = false;
            return None;
        }
        let me = self.my_member(&config)?.clone();
        if !me.is_electable() {
            inner.step_up_requested = false;
            return None;
        }
        if std::mem::take(&mut inner.step_up_requested) {
            inner.election_running = true;
            return Some(true);
        }
        if inner.frozen_until.is_some_and(|until| now < until) {
            return None;
        }
        // Higher-priority members that look alive get a head start.
        let ahead = config
            .members
            .iter()
            .filter(|m| m.is_electable() && m.priority > me.priority && !self.is_me(&m.host))
            .filter(|m| inner.peer_view(&m.host).is_some_and(PeerStatus::healthy))
            .count() as u32;
        let deadline = inner.last_primary_contact
            + timing.election_timeout
            + inner.jitter
            + timing.election_timeout / 2 * ahead;
        if now >= deadline {
            inner.election_running = true;
            return Some(false);
        }
        // Priority takeover: a caught-up member of higher priority than the primary replaces it.
        let takeover = inner.primary.clone().and_then(|primary| {
            let theirs = config.member(&primary)?.priority;
            let peer = inner.peer_view(&primary)?;
            (me.priority > theirs && inner.applied() >= peer.applied).then_some(())
        });
        match (takeover, inner.takeover_since) {
            (Some(()), None) => inner.takeover_since = Some(now),
            (Some(()), Some(since)) if now.duration_since(since) >= timing.election_timeout => {
                inner.takeover_since = None;
                inner.election_running = true;
                log(
                    &self.me,
                    "priority takeover: standing against a lower-priority primary",
                );
                return Some(false);
            }
            (None, _) => inner.takeover_since = None,
            _ => {}
        }
        None
    }

    /// Asks every other voter for its vote in `term`; returns the hosts that granted it.
    async fn request_votes(&self, term: i64, dry_run: bool, timing: Timing) -> (ReplConfig, Vec<String>) {
        let (config, request, voters) = self.with(|inner| {
            let config = inner.config.clone().expect("elections need a config");
            let request = doc! {
                "simRequestVote": &self.options.repl_set,
                "from": self.my_host(inner),
                "term": term,
                "candidate": self.my_host(inner),
                "configVersion": config.version,
                "configTerm": config.term,
                "lastAppliedOpTime": inner.applied().to_document(),
                "dryRun": dry_run,
            };
            let voters: Vec<String> = config
                .voters()
                .filter(|m| !self.is_me(&m.host))
                .filter(|m| !inner.partitioned.contains(&m.host.to_ascii_lowercase()))
                .map(|m| m.host.clone())
                .collect();
            (config, request, voters)
        });
        let mut granted = vec![request.get_str("candidate").unwrap_or_default().to_string()];
        let timeout = (timing.election_timeout / 2).max(Duration::from_millis(300));
        let mut pending: FuturesUnordered<_> = voters
            .iter()
            .map(|host| {
                let request = request.clone();
                async move { (host.clone(), self.peers_client.call(host, request, timeout).await) }
            })
            .collect();
        while let Some((host, result)) = pending.next().await {
            match result {
                Ok(reply) => {
                    let their_term = reply.get_i64("term").unwrap_or(0);
                    if reply.get_bool("voteGranted").unwrap_or(false) {
                        granted.push(host);
                    } else {
                        log(
                            &self.me,
                            format!(
                                "{} vote denied by {host}: {}",
                                if dry_run { "dry-run" } else { "election" },
                                reply.get_str("reason").unwrap_or_default()
                            ),
                        );
                        if their_term > term {
                            self.with(|inner| self.observe_term(inner, their_term, &host));
                        }
                    }
                }
                Err(error) => log(&self.me, format!("no vote from {host}: {error}")),
            }
            if rules::has_majority(&config, granted.iter().map(String::as_str)) {
                break;
            }
        }
        (config, granted)
    }

    async fn run_election(self: Arc<Self>, skip_dry_run: bool) {
        let timing = self.timing();
        let term = self.with(|i| i.store.term);
        let eligible = || {
            self.with(|inner| {
                inner.role == Role::Secondary && inner.store.term == term && inner.config.is_some()
            })
        };
        if !skip_dry_run {
            let (config, granted) = self.request_votes(term + 1, true, timing).await;
            if !rules::has_majority(&config, granted.iter().map(String::as_str)) || !eligible() {
                self.with(|inner| {
                    inner.election_running = false;
                    self.reset_election_timer(inner);
                });
                return;
            }
        }
        let new_term = self.with(|inner| {
            if inner.role != Role::Secondary || inner.store.term != term {
                return None;
            }
            inner.store.term = term + 1;
            inner.store.vote = Some(super::state::Vote {
                term: term + 1,
                candidate: self.my_host(inner),
            });
            inner.mark_dirty();
            Some(term + 1)
        });
        let Some(new_term) = new_term else {
            self.with(|inner| inner.election_running = false);
            return;
        };
        log(&self.me, format!("standing for election in term {new_term}"));
        // A vote cast must survive a crash before anyone hears of it.
        self.flush().await;
        let (config, granted) = self.request_votes(new_term, false, timing).await;
        self.with(|inner| {
            inner.election_running = false;
            let won = rules::has_majority(&config, granted.iter().map(String::as_str));
            if won && inner.role == Role::Secondary && inner.store.term == new_term {
                self.become_primary(inner, &granted);
            } else {
                log(
                    &self.me,
                    format!(
                        "lost the election in term {new_term} (votes from {})",
                        granted.join(", ")
                    ),
                );
                self.reset_election_timer(inner);
            }
        });
    }

    fn become_primary(&self, inner: &mut Inner, voters: &[String]) {
        let term = inner.store.term;
        self.set_role(
            inner,
            Role::Primary,
            &format!(
                "won the election in term {term} with votes from {}",
                voters.join(", ")
            ),
        );
        inner.primary = Some(self.my_host(inner));
        inner.election_date = Some(DateTime::now());
        inner.last_majority_contact = Instant::now();
        inner.sync_source = None;
        inner.takeover_since = None;
        // The new primary writes its term into the configuration, as the server does on step-up.
        if let Some(mut config) = inner.config.clone() {
            config.term = term;
            inner.store.config = Some(config.to_document());
            inner.config = Some(config);
        }
        if let Err(error) = inner.write("n", "", doc! { "msg": "new primary" }, None, None) {
            log(&self.me, format!("writing the new-primary entry: {error}"));
        }
        inner.heartbeat_now = true;
    }

    /// Answers a `simRequestVote`.
    pub async fn on_request_vote(&self, request: &Document) -> Result<Document, CmdError> {
        let vote = VoteRequest {
            term: request.get_i64("term").unwrap_or(0),
            candidate: request.get_str("candidate").unwrap_or_default().to_string(),
            config_version: request.get_i32("configVersion").unwrap_or(0),
            config_term: request.get_i64("configTerm").unwrap_or(-1),
            last_applied: OpTime::from_bson(request.get("lastAppliedOpTime")).unwrap_or(OpTime::NULL),
            dry_run: request.get_bool("dryRun").unwrap_or(false),
        };
        let (reply, must_flush) = self.with(|inner| {
            if !vote.dry_run {
                self.observe_term(inner, vote.term, &vote.candidate);
            }
            let voter = VoterView {
                term: inner.store.term,
                vote: inner.store.vote.as_ref().map(|v| (v.term, v.candidate.clone())),
                config: inner.config.as_ref().map(|c| (c.version, c.term)),
                last_applied: inner.applied(),
            };
            let me_voting = inner
                .config
                .as_ref()
                .and_then(|c| self.my_member(c))
                .is_some_and(|m| m.is_voter());
            let decision = if me_voting {
                rules::decide_vote(&voter, &vote)
            } else {
                Err("I am not a voting member".to_string())
            };
            // A primary does not vote for another candidate while it is alive and in its term.
            let decision = match decision {
                Ok(()) if inner.role == Role::Primary && vote.term <= inner.store.term => {
                    Err("I am the primary in this term".to_string())
                }
                other => other,
            };
            let mut flush = false;
            if decision.is_ok() && !vote.dry_run {
                inner.store.vote = Some(super::state::Vote {
                    term: vote.term,
                    candidate: vote.candidate.clone(),
                });
                inner.mark_dirty();
                // Granting a vote restarts the wait for a primary, as hearing from one would.
                self.reset_election_timer(inner);
                flush = true;
            }
            let mut reply = doc! { "term": inner.store.term, "voteGranted": decision.is_ok(), "ok": 1.0 };
            match &decision {
                Ok(()) => reply.insert("reason", ""),
                Err(reason) => reply.insert("reason", reason.clone()),
            };
            (reply, flush)
        });
        if must_flush {
            self.flush().await;
        }
        Ok(reply)
    }
}

/// Replication: the oplog fetcher and initial sync, and their server side.
impl Node {
    async fn replication_loop(self: Arc<Self>) {
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            let timing = self.timing();
            let (role, stopped) = self.with(|i| (i.role, i.stop_replication));
            let worked = match role {
                Role::Startup2 | Role::Rollback => self.initial_sync(timing).await,
                Role::Secondary | Role::Recovering if !stopped => self.fetch_once(timing).await,
                _ => false,
            };
            if !worked {
                tokio::time::sleep(timing.heartbeat_interval.min(Duration::from_millis(200))).await;
            }
        }
    }

    /// A member to copy from: the primary when reachable, else the most advanced healthy
    /// member ahead of `after` that holds data.
    fn choose_source(&self, inner: &Inner, after: Option<OpTime>) -> Option<String> {
        let config = inner.config.as_ref()?;
        let usable = |host: &str| {
            !self.is_me(host)
                && !inner.too_stale_for.contains(&host.to_ascii_lowercase())
                && !inner.partitioned.contains(&host.to_ascii_lowercase())
                && inner.peer_view(host).is_some_and(PeerStatus::healthy)
        };
        if let Some(primary) = &inner.primary
            && usable(primary)
        {
            return Some(primary.clone());
        }
        config
            .members
            .iter()
            .filter(|m| !m.arbiter_only && usable(&m.host))
            .filter_map(|m| {
                let peer = inner.peer_view(&m.host)?;
                let data = matches!(peer.state, Some(1) | Some(2));
                let ahead = after.is_none_or(|after| peer.applied > after);
                (data && ahead).then(|| (peer.applied, m.host.clone()))
            })
            .max()
            .map(|(_, host)| host)
    }

    async fn initial_sync(&self, timing: Timing) -> bool {
        let Some(source) = self.with(|i| self.choose_source(i, None)) else {
            return false;
        };
        log(&self.me, format!("initial sync from {source}"));
        let request =
            doc! { "simInitialSync": &self.options.repl_set, "from": self.with(|i| self.my_host(i)) };
        let reply = match self
            .peers_client
            .call(
                &source,
                request,
                Duration::from_secs(60).max(timing.election_timeout),
            )
            .await
        {
            Ok(reply) => reply,
            Err(error) => {
                log(&self.me, format!("initial sync from {source} failed: {error}"));
                return false;
            }
        };
        let databases: Result<Databases, String> = reply
            .get_document("databases")
            .map_err(|e| e.to_string())
            .and_then(|d| bson::from_document(d.clone()).map_err(|e| e.to_string()));
        let last: Option<OplogEntry> = reply
            .get_document("lastEntry")
            .ok()
            .and_then(|d| bson::from_document(d.clone()).ok());
        let sessions: std::collections::BTreeMap<String, i64> = reply
            .get_document("sessions")
            .ok()
            .and_then(|d| bson::from_document(d.clone()).ok())
            .unwrap_or_default();
        let (databases, Some(last)) = (databases, last) else {
            log(
                &self.me,
                format!("initial sync from {source}: no oplog to start from"),
            );
            return false;
        };
        let Ok(databases) = databases else {
            log(&self.me, format!("initial sync from {source}: unreadable data"));
            return false;
        };
        let size = databases.values().map(|d| d.len()).sum::<usize>();
        let fcv = databases
            .get(VERSION.0)
            .and_then(|d| d.get(VERSION.1))
            .and_then(|c| c.documents.iter().find(|d| d.get_str("_id") == Ok(FCV_ID)))
            .and_then(|d| d.get_str("version").ok().map(str::to_string));
        if let Some(fcv) = fcv {
            let accepted = rules::version_pair(&fcv)
                .zip(rules::version_pair(&self.binary.release))
                .is_some_and(|(fcv, binary)| rules::binary_accepts_fcv(binary, fcv));
            if !accepted {
                // As the server does, a binary that cannot run the set's data version stops.
                log(
                    &self.me,
                    format!(
                        "initial sync from {source}: the set's feature compatibility version is {fcv}, which binary version {} cannot run",
                        self.binary.version
                    ),
                );
                self.request_shutdown(62);
                return false;
            }
        }
        self.with(|inner| {
            if !matches!(inner.role, Role::Startup2 | Role::Rollback) {
                return;
            }
            inner.store.databases = databases;
            inner.store.reindex();
            inner.store.oplog = vec![last];
            inner.store.sessions = sessions;
            inner.store.synced = true;
            inner.sync_source = Some(source.clone());
            inner.mark_dirty();
            // The copy holds the source's history up to its last entry, commit point included.
            if let Some(commit) = OpTime::from_bson(reply.get("commitPoint")) {
                inner.commit_point = commit.min(inner.applied());
                inner.changed = true;
            }
            self.set_role(
                inner,
                Role::Secondary,
                &format!("initial sync from {source} done, {size} collections"),
            );
        });
        true
    }

    /// One fetch from the sync source and the application of what it returned.
    async fn fetch_once(&self, timing: Timing) -> bool {
        let (source, request, after) = match self.with(|inner| {
            let after = inner.applied();
            let Some(source) = self.choose_source(inner, Some(after)) else {
                self.no_source_covers_me(inner);
                return None;
            };
            // Long-polled: new entries answer at once, so the wait only bounds idle polling.
            let wait =
                (timing.election_timeout / 2).clamp(Duration::from_millis(100), Duration::from_secs(2));
            let request = doc! {
                "simOplogFetch": &self.options.repl_set,
                "from": self.my_host(inner),
                "after": after.to_document(),
                "appliedOpTime": after.to_document(),
                "durableOpTime": inner.durable.to_document(),
                "term": inner.store.term,
                "maxWaitMS": wait.as_millis() as i64,
            };
            Some((source, request, after))
        }) {
            Some(plan) => plan,
            None => return false,
        };
        let timeout = Duration::from_millis(request.get_i64("maxWaitMS").unwrap_or(500) as u64)
            + Self::heartbeat_timeout(timing);
        let reply = match self.peers_client.call(&source, request, timeout).await {
            Ok(reply) => reply,
            Err(CallError::Command { message, .. }) => {
                self.with(|i| i.sync_source = None);
                log(
                    &self.me,
                    format!("sync source {source} refused the fetch: {message}"),
                );
                return false;
            }
            Err(CallError::Network(_)) => return false,
        };
        if reply.get_bool("tooStale").unwrap_or(false) {
            self.with(|inner| {
                inner.sync_source = None;
                if inner.too_stale_for.insert(source.to_ascii_lowercase()) {
                    log(
                        &self.me,
                        format!("too stale to sync from {source}: its oplog starts after my last applied {after:?}"),
                    );
                }
            });
            return true;
        }
        if reply.get_bool("divergent").unwrap_or(false) {
            self.with(|inner| {
                if inner.role == Role::Secondary && inner.applied() == after {
                    self.set_role(
                        inner,
                        Role::Rollback,
                        &format!("my oplog diverged from {source}'s after {after:?}: resyncing"),
                    );
                }
            });
            return true;
        }
        let entries: Vec<OplogEntry> = reply
            .get_array("entries")
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.as_document().and_then(|d| bson::from_document(d.clone()).ok()))
                    .collect()
            })
            .unwrap_or_default();
        let applied = self.with(|inner| {
            inner.peer(&source).term = reply.get_i64("term").unwrap_or(0);
            self.observe_term(inner, reply.get_i64("term").unwrap_or(0), &source);
            // A fetch that was in flight when replication was stopped is dropped unapplied.
            if !matches!(inner.role, Role::Secondary | Role::Recovering)
                || inner.applied() != after
                || inner.stop_replication
            {
                return None;
            }
            inner.sync_source = Some(source.clone());
            if inner.role == Role::Recovering {
                inner.heartbeat_message.clear();
                self.set_role(
                    inner,
                    Role::Secondary,
                    &format!("{source}'s oplog covers mine again"),
                );
            }
            if reply.get_i32("state").ok() == Some(Role::Primary.code()) {
                self.reset_election_timer(inner);
            }
            for entry in &entries {
                if let Err(error) = inner.store.apply(entry) {
                    log(
                        &self.me,
                        format!("applying {:?} from {source}: {error}", entry.optime()),
                    );
                }
                inner.store.append(entry.clone(), inner.oplog_entries);
            }
            if !entries.is_empty() {
                inner.mark_dirty();
            }
            self.advance_commit_point(inner, OpTime::from_bson(reply.get("commitPoint")));
            inner.changed = true;
            Some(inner.applied())
        });
        if let Some(applied) = applied
            && !entries.is_empty()
        {
            // Report progress only once it is durable: the next fetch carries it.
            self.wait_for(Duration::from_secs(1), |i| i.durable >= applied)
                .await;
        }
        true
    }

    /// Waits until `condition` holds or `timeout` passes; returns whether it held.
    pub async fn wait_for(&self, timeout: Duration, condition: impl Fn(&Inner) -> bool) -> bool {
        let mut changes = self.changes.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.with(|inner| condition(inner)) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return self.with(|inner| condition(inner)),
            }
        }
    }

    /// Answers a `simOplogFetch`: entries after the fetcher's last, long-polled.
    pub async fn on_oplog_fetch(&self, request: &Document) -> Result<Document, CmdError> {
        let from = request.get_str("from").unwrap_or_default().to_string();
        let after = OpTime::from_bson(request.get("after")).unwrap_or(OpTime::NULL);
        let wait = Duration::from_millis(request.get_i64("maxWaitMS").unwrap_or(0).clamp(0, 5000) as u64);
        self.with(|inner| {
            self.observe_term(inner, request.get_i64("term").unwrap_or(0), &from);
            let peer = inner.peer(&from);
            let before = (peer.applied, peer.durable);
            if let Some(applied) = OpTime::from_bson(request.get("appliedOpTime")) {
                peer.applied = applied;
            }
            if let Some(durable) = OpTime::from_bson(request.get("durableOpTime")) {
                peer.durable = durable;
            }
            if (peer.applied, peer.durable) != before {
                inner.changed = true;
            }
            self.advance_commit_point(inner, None);
        });
        let deadline = tokio::time::Instant::now() + wait;
        let mut changes = self.changes.subscribe();
        loop {
            let answer = self.with(|inner| -> Result<Option<Document>, CmdError> {
                if !matches!(inner.role, Role::Primary | Role::Secondary) {
                    return Err(CmdError::new(
                        13436,
                        "not a sync source: not primary or secondary",
                    ));
                }
                let oplog = &inner.store.oplog;
                let mut reply = doc! {
                    "ok": 1.0,
                    "term": inner.store.term,
                    "state": inner.role.code(),
                    "commitPoint": inner.commit_point.to_document(),
                };
                let position = if after.is_null() {
                    Err(0)
                } else {
                    oplog.binary_search_by(|e| e.optime().cmp(&after))
                };
                match position {
                    Ok(index) if index + 1 < oplog.len() => {
                        let entries: Vec<Bson> = oplog[index + 1..]
                            .iter()
                            .take(1000)
                            .filter_map(|e| bson::to_document(e).ok().map(Bson::Document))
                            .collect();
                        reply.insert("entries", entries);
                        Ok(Some(reply))
                    }
                    Ok(_) => Ok(None),
                    Err(_) if after > inner.applied() => {
                        Err(CmdError::new(13436, "sync source is behind the fetcher"))
                    }
                    // The fetcher's last entry is older than the first one kept here: this oplog
                    // no longer reaches it.
                    Err(0) if !after.is_null() && !oplog.is_empty() => {
                        reply.insert("tooStale", true);
                        Ok(Some(reply))
                    }
                    Err(_) => {
                        reply.insert("divergent", true);
                        Ok(Some(reply))
                    }
                }
            })?;
            if let Some(reply) = answer {
                return Ok(reply);
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                let mut reply = doc! { "ok": 1.0, "entries": [] };
                self.with(|inner| {
                    reply.insert("term", inner.store.term);
                    reply.insert("state", inner.role.code());
                    reply.insert("commitPoint", inner.commit_point.to_document());
                });
                return Ok(reply);
            }
        }
    }

    /// No sync source is usable. When that is because every one's oplog starts after this
    /// member's last applied entry, it is too stale to catch up: RECOVERING, as the server, until
    /// an initial sync on an empty volume. Meanwhile it keeps asking, in case a source that still
    /// covers it comes back.
    fn no_source_covers_me(&self, inner: &mut Inner) {
        if inner.too_stale_for.is_empty() {
            return;
        }
        if inner.role == Role::Secondary {
            inner.heartbeat_message = TOO_STALE.to_string();
            self.set_role(inner, Role::Recovering, TOO_STALE);
        }
        inner.too_stale_for.clear();
    }

    /// Answers a `simInitialSync`: all data and the oplog entry it is consistent with.
    pub fn on_initial_sync(&self) -> Result<Document, CmdError> {
        self.with(|inner| {
            if !matches!(inner.role, Role::Primary | Role::Secondary) || !inner.store.synced {
                return Err(CmdError::new(
                    13436,
                    "not a sync source: not primary or secondary",
                ));
            }
            let databases =
                bson::to_document(&inner.store.databases).map_err(|e| CmdError::new(1, e.to_string()))?;
            let sessions =
                bson::to_document(&inner.store.sessions).map_err(|e| CmdError::new(1, e.to_string()))?;
            let last = inner
                .store
                .oplog
                .last()
                .and_then(|e| bson::to_document(e).ok())
                .ok_or_else(|| CmdError::new(13436, "no oplog yet"))?;
            Ok(doc! {
                "ok": 1.0,
                "databases": databases,
                "sessions": sessions,
                "lastEntry": last,
                "commitPoint": inner.commit_point.to_document(),
            })
        })
    }
}

/// The `replSet*` commands.
impl Node {
    fn require_config(inner: &Inner) -> Result<&ReplConfig, CmdError> {
        inner
            .config
            .as_ref()
            .ok_or_else(|| CmdError::new(94, "no replset config has been received"))
    }

    /// Heartbeats `hosts` as a quorum check; returns the failures (host, why).
    async fn probe(&self, hosts: &[String], initiate: bool) -> Vec<(String, String)> {
        let timing = self.timing();
        let mut request = doc! { "simHeartbeat": &self.options.repl_set, "probe": true };
        request.extend(self.with(|inner| self.status_fields(inner)));
        let checks: FuturesUnordered<_> = hosts
            .iter()
            .map(|host| {
                let request = request.clone();
                async move {
                    let partitioned = self.is_partitioned(host);
                    let result = if partitioned {
                        Err(CallError::Network("partitioned".into()))
                    } else {
                        self.peers_client
                            .call(
                                host,
                                request,
                                Self::heartbeat_timeout(timing).max(Duration::from_secs(2)),
                            )
                            .await
                    };
                    (host.clone(), result)
                }
            })
            .collect();
        checks
            .filter_map(|(host, result)| async move {
                match result {
                    Err(error) => Some((host, error.to_string())),
                    Ok(reply) if initiate && reply.get_bool("initialized").unwrap_or(false) => {
                        Some((host, "already initialized".to_string()))
                    }
                    Ok(_) => None,
                }
            })
            .collect()
            .await
    }

    pub async fn repl_set_initiate(&self, command: &Document) -> Result<Document, CmdError> {
        self.with(|inner| {
            if inner.config.is_some() {
                return Err(CmdError::new(23, "already initialized"));
            }
            Ok(())
        })?;
        let document = match command.get("replSetInitiate") {
            Some(Bson::Document(document)) => document.clone(),
            _ => {
                // An empty initiate makes a one-member set of this node, as the server does.
                doc! { "_id": &self.options.repl_set, "version": 1, "members": [{ "_id": 0, "host": &self.me }] }
            }
        };
        let mut config = ReplConfig::parse(&document, self.defaults())?;
        config::check_initiate(&config, &self.options.repl_set, |h| self.is_me(h))?;
        let others: Vec<String> = config
            .members
            .iter()
            .filter(|m| !self.is_me(&m.host))
            .map(|m| m.host.clone())
            .collect();
        let failures = self.probe(&others, true).await;
        if !failures.is_empty() {
            return Err(CmdError::new(
                74,
                format!(
                    "replSetInitiate quorum check failed because not all proposed set members responded affirmatively: {}",
                    failures
                        .iter()
                        .map(|(h, e)| format!("{h} failed with {e}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        config.term = 0;
        self.with(|inner| {
            if inner.config.is_some() {
                return Err(CmdError::new(23, "already initialized"));
            }
            inner.store.synced = true;
            self.install_config(inner, config, "replSetInitiate");
            inner
                .write("n", "", doc! { "msg": "initiating set" }, None, None)
                .map_err(|e| CmdError::new(1, e))?;
            // Stand as soon as the others have heard of the set.
            inner.last_primary_contact = Instant::now();
            let timing = inner.timing(self.defaults());
            inner.jitter = Duration::ZERO;
            inner.last_primary_contact -= timing
                .election_timeout
                .saturating_sub(timing.heartbeat_interval * 3);
            Ok(())
        })?;
        Ok(doc! { "ok": 1.0 })
    }

    pub fn repl_set_get_config(&self) -> Result<Document, CmdError> {
        self.with(|inner| {
            let config = Self::require_config(inner)?;
            Ok(doc! { "config": config.to_document(), "ok": 1.0 })
        })
    }

    pub async fn repl_set_reconfig(&self, command: &Document) -> Result<Document, CmdError> {
        let document = command
            .get_document("replSetReconfig")
            .map_err(|_| CmdError::new(2, "replSetReconfig needs a config object"))?
            .clone();
        let force = command.get_bool("force").unwrap_or(false);
        let (current, mut new) = self.with(|inner| {
            let current = Self::require_config(inner)?.clone();
            if !force && inner.role != Role::Primary {
                return Err(CmdError::new(
                    10107,
                    format!(
                        "replSetReconfig should only be run on a writable PRIMARY. Current state {};",
                        state_name(inner.role.code())
                    ),
                ));
            }
            if inner.reconfig_running {
                return Err(CmdError::new(
                    109,
                    "Cannot run replSetReconfig because the node is currently updating its configuration",
                ));
            }
            let new = ReplConfig::parse(&document, self.defaults())?;
            config::check_reconfig(&current, &new, force)?;
            if !force {
                config::check_self_in_new_config(&new, &self.me).or_else(|error| {
                    // A host that resolves to this member counts as this member.
                    match self.my_member(&new) {
                        Some(member) if member.is_electable() => Ok(()),
                        _ => Err(error),
                    }
                })?;
                self.check_config_committed(inner, &current)?;
            }
            inner.reconfig_running = true;
            Ok((current, new))
        })?;
        let result = self.finish_reconfig(&current, &mut new, force).await;
        self.with(|inner| inner.reconfig_running = false);
        result
    }

    /// The previous reconfiguration must have reached a majority, and this primary's own first
    /// entry must be committed, before another may start.
    fn check_config_committed(&self, inner: &Inner, current: &ReplConfig) -> Result<(), CmdError> {
        let holding = current
            .voters()
            .filter(|m| {
                self.is_me(&m.host)
                    || inner.peer_view(&m.host).is_some_and(|p| {
                        p.healthy()
                            && p.config_version == current.version
                            && (p.config_term == current.term || current.term == -1)
                    })
            })
            .count();
        if holding < current.majority() {
            return Err(CmdError::new(
                109,
                format!(
                    "Cannot run replSetReconfig because the current config: {{version: {}, term: {}}} is not yet committed: only {holding} of the {} voting members that make a majority have it",
                    current.version,
                    current.term,
                    current.majority()
                ),
            ));
        }
        if inner.commit_point.t != inner.store.term {
            return Err(CmdError::new(
                109,
                "Cannot run replSetReconfig because the primary has not yet committed an oplog entry in its current term",
            ));
        }
        Ok(())
    }

    async fn finish_reconfig(
        &self,
        current: &ReplConfig,
        new: &mut ReplConfig,
        force: bool,
    ) -> Result<Document, CmdError> {
        if !force {
            let voters: Vec<String> = new
                .voters()
                .filter(|m| !self.is_me(&m.host))
                .map(|m| m.host.clone())
                .collect();
            let failures = self.probe(&voters, false).await;
            let answering = new.voters().count() - failures.len();
            if answering < new.majority() {
                return Err(CmdError::new(
                    74,
                    format!(
                        "Quorum check failed because not enough voting nodes responded; required {} but only the following {answering} voting nodes responded; the failures: {}",
                        new.majority(),
                        failures
                            .iter()
                            .map(|(h, e)| format!("{h} failed with {e}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        let installed = self.with(|inner| {
            if force {
                // A forced configuration jumps ahead so it supersedes any other, as on the server.
                new.version = new.version.max(current.version + 1) + rand::random_range(10_000..100_000);
                new.term = -1;
            } else {
                if inner.role != Role::Primary {
                    return Err(CmdError::not_primary());
                }
                new.term = inner.store.term;
            }
            self.install_config(
                inner,
                new.clone(),
                if force {
                    "forced replSetReconfig"
                } else {
                    "replSetReconfig"
                },
            );
            Ok((new.version, new.term))
        })?;
        if !force {
            // As the server does, return once a majority of the new voters have the new config.
            let timing = self.timing();
            let wait = (timing.election_timeout * 2).max(Duration::from_secs(5));
            let new = new.clone();
            self.wait_for(wait, |inner| {
                new.voters()
                    .filter(|m| {
                        self.is_me(&m.host)
                            || inner.peer_view(&m.host).is_some_and(|p| {
                                p.config_version == installed.0 && p.config_term == installed.1
                            })
                    })
                    .count()
                    >= new.majority()
            })
            .await;
        }
        Ok(doc! { "ok": 1.0 })
    }

    pub async fn repl_set_step_down(&self, command: &Document) -> Result<Document, CmdError> {
        let number = |name: &str| -> Option<f64> {
            match command.get(name)? {
                Bson::Int32(v) => Some(*v as f64),
                Bson::Int64(v) => Some(*v as f64),
                Bson::Double(v) => Some(*v),
                _ => None,
            }
        };
        let step_down_secs = number("replSetStepDown").unwrap_or(60.0);
        let catch_up_secs = number("secondaryCatchUpPeriodSecs")
            .or_else(|| number("secondsToCatchUp"))
            .unwrap_or(10.0);
        let force = command.get_bool("force").unwrap_or(false);
        if step_down_secs <= 0.0 || catch_up_secs < 0.0 {
            return Err(CmdError::new(
                2,
                "stepdown period must be a positive number of seconds",
            ));
        }
        if catch_up_secs > step_down_secs {
            return Err(CmdError::new(
                2,
                "stepdown period must be longer than secondaryCatchUpPeriodSecs",
            ));
        }
        self.with(|inner| {
            Self::require_config(inner)?;
            if inner.role != Role::Primary {
                return Err(CmdError::new(10107, "not primary so can't step down"));
            }
            Ok(())
        })?;
        let caught_up = |inner: &Inner| -> Option<String> {
            let config = inner.config.as_ref()?;
            let mine = inner.applied();
            config
                .members
                .iter()
                .filter(|m| m.is_electable() && !self.is_me(&m.host))
                .filter(|m| !inner.partitioned.contains(&m.host.to_ascii_lowercase()))
                .filter_map(|m| {
                    let peer = inner.peer_view(&m.host)?;
                    (peer.healthy() && peer.applied >= mine).then(|| (m.priority as i64, m.host.clone()))
                })
                .max()
                .map(|(_, host)| host)
        };
        let found = self
            .wait_for(Duration::from_secs_f64(catch_up_secs), |inner| {
                inner.role != Role::Primary || caught_up(inner).is_some()
            })
            .await;
        let handoff = self.with(|inner| {
            if inner.role != Role::Primary {
                return Err(CmdError::new(10107, "not primary so can't step down"));
            }
            let target = if found { caught_up(inner) } else { None };
            if target.is_none() && !force {
                return Err(CmdError::new(
                    262,
                    format!(
                        "No electable secondaries caught up as of {}. Please use the replSetStepDown command with the argument {{force: true}} to force node to step down.",
                        DateTime::now().try_to_rfc3339_string().unwrap_or_default()
                    ),
                ));
            }
            self.step_down(inner, "replSetStepDown");
            inner.frozen_until = Some(Instant::now() + Duration::from_secs_f64(step_down_secs));
            Ok(target)
        })?;
        if let Some(target) = handoff {
            // Election handoff: the caught-up secondary stands at once instead of waiting out
            // its election timeout.
            let request =
                doc! { "simStepUp": &self.options.repl_set, "from": self.with(|i| self.my_host(i)) };
            if let Err(error) = self
                .peers_client
                .call(&target, request, Duration::from_secs(2))
                .await
            {
                log(&self.me, format!("election handoff to {target}: {error}"));
            }
        }
        Ok(doc! { "ok": 1.0 })
    }

    pub fn repl_set_step_up(&self) -> Result<Document, CmdError> {
        self.with(|inner| {
            let config = Self::require_config(inner)?;
            if inner.role == Role::Primary {
                return Ok(doc! { "ok": 1.0 });
            }
            let electable = self.my_member(config).is_some_and(|m| m.is_electable());
            if inner.role != Role::Secondary || !electable {
                return Err(CmdError::new(
                    95,
                    format!(
                        "This node is not electable in state {}",
                        state_name(inner.role.code())
                    ),
                ));
            }
            inner.step_up_requested = true;
            Ok(doc! { "ok": 1.0 })
        })
        .inspect(|_| self.election_wake.notify_one())
    }

    pub fn repl_set_freeze(&self, command: &Document) -> Result<Document, CmdError> {
        let seconds = match command.get("replSetFreeze") {
            Some(Bson::Int32(v)) => *v as f64,
            Some(Bson::Int64(v)) => *v as f64,
            Some(Bson::Double(v)) => *v,
            _ => return Err(CmdError::new(2, "replSetFreeze needs a number of seconds")),
        };
        self.with(|inner| {
            Self::require_config(inner)?;
            if inner.role == Role::Primary {
                return Err(CmdError::new(
                    95,
                    "cannot freeze node when primary or running for election. state: Primary",
                ));
            }
            inner.frozen_until = (seconds > 0.0).then(|| Instant::now() + Duration::from_secs_f64(seconds));
            Ok(doc! { "ok": 1.0 })
        })
    }

    pub fn repl_set_get_status(&self) -> Result<Document, CmdError> {
        let uptime = self.started.elapsed().as_secs() as i32;
        self.with(|inner| {
            let config = Self::require_config(inner)?.clone();
            if inner.role == Role::Removed {
                return Err(CmdError::new(
                    93,
                    "Our replica set config is invalid or we are not a member of it",
                ));
            }
            let timing = config.timing();
            let now = Instant::now();
            let mut members = Vec::new();
            for member in &config.members {
                let mut entry = doc! { "_id": member.id, "name": &member.host };
                if self.is_me(&member.host) {
                    let applied = inner.applied();
                    entry.extend(doc! {
                        "health": 1.0,
                        "state": inner.role.code(),
                        "stateStr": state_name(inner.role.code()),
                        "uptime": uptime,
                        "optime": applied.to_document(),
                        "optimeDate": applied.date(),
                        "lastAppliedWallTime": applied.date(),
                        "lastDurableWallTime": inner.durable.date(),
                        "syncSourceHost": inner.sync_source.clone().unwrap_or_default(),
                        "syncSourceId": inner.sync_source.as_deref().and_then(|s| config.member(s)).map_or(-1, |m| m.id),
                        "infoMessage": &inner.heartbeat_message,
                        "configVersion": config.version,
                        "configTerm": config.term,
                        "self": true,
                        "lastHeartbeatMessage": "",
                    });
                    if let Some(date) = inner.election_date {
                        entry.insert("electionTime", inner.store.oplog.iter().rev().find(|e| e.t == inner.store.term).map(|e| e.ts).unwrap_or(Timestamp { time: 0, increment: 0 }));
                        entry.insert("electionDate", date);
                    }
                } else {
                    let peer = inner.peer_view(&member.host).cloned().unwrap_or_default();
                    let state = peer.shown_state();
                    let healthy = peer.healthy();
                    let (applied, durable) = if healthy {
                        (peer.applied, peer.durable)
                    } else {
                        (OpTime::NULL, OpTime::NULL)
                    };
                    entry.extend(doc! {
                        "health": if healthy { 1.0 } else { 0.0 },
                        "state": state,
                        "stateStr": state_name(state),
                        "uptime": peer.up_since.map_or(0, |t| now.duration_since(t).as_secs() as i32),
                        "optime": applied.to_document(),
                        "optimeDurable": durable.to_document(),
                        "optimeDate": applied.date(),
                        "optimeDurableDate": durable.date(),
                        "lastAppliedWallTime": applied.date(),
                        "lastDurableWallTime": durable.date(),
                        "lastHeartbeat": peer.last_heartbeat.unwrap_or(DateTime::from_millis(0)),
                        "lastHeartbeatRecv": peer.last_heartbeat_recv.unwrap_or(DateTime::from_millis(0)),
                        "pingMs": peer.ping_ms,
                        "lastHeartbeatMessage": &peer.message,
                        "syncSourceHost": &peer.sync_source,
                        "syncSourceId": config.member(&peer.sync_source).map_or(-1, |m| m.id),
                        "infoMessage": "",
                        "configVersion": peer.config_version,
                        "configTerm": peer.config_term,
                    });
                }
                members.push(Bson::Document(entry));
            }
            let applied = inner.applied();
            let voters = config.voters().count() as i32;
            Ok(doc! {
                "set": &config.name,
                "date": DateTime::now(),
                "myState": inner.role.code(),
                "term": inner.store.term,
                "syncSourceHost": inner.sync_source.clone().unwrap_or_default(),
                "syncSourceId": inner.sync_source.as_deref().and_then(|s| config.member(s)).map_or(-1, |m| m.id),
                "heartbeatIntervalMillis": timing.heartbeat_interval.as_millis() as i64,
                "majorityVoteCount": config.majority() as i32,
                "writeMajorityCount": config.write_majority() as i32,
                "votingMembersCount": voters,
                "writableVotingMembersCount": config.voters().filter(|m| !m.arbiter_only).count() as i32,
                "optimes": {
                    "lastCommittedOpTime": inner.commit_point.to_document(),
                    "lastCommittedWallTime": inner.commit_point.date(),
                    "readConcernMajorityOpTime": inner.commit_point.to_document(),
                    "appliedOpTime": applied.to_document(),
                    "durableOpTime": inner.durable.to_document(),
                    "lastAppliedWallTime": applied.date(),
                    "lastDurableWallTime": inner.durable.date(),
                },
                "members": members,
                "ok": 1.0,
            })
        })
    }
}
