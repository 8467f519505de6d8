//! etcd's admin API, one verb per method, against one member at a time.
//!
//! No Kubernetes here: these verbs are tested against real etcd processes alone. Each
//! [`EtcdAdmin`] talks to a single member's client URL (no load balancing), so what it reports
//! is that member's own view. Timeouts, retries and circuit breaking are the caller's, through
//! `quorum_core::availability`.

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, MemberAddOptions, TlsOptions};
use quorum_core::backup::digest::ContentDigest;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// A failed admin call, naming the verb and the member's endpoint.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{verb} on {endpoint}: {source}")]
    Etcd {
        verb: &'static str,
        endpoint: String,
        #[source]
        source: etcd_client::Error,
    },
    #[error("reading metrics of {endpoint}: {source}")]
    Metrics {
        endpoint: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("TLS settings for {endpoint}: {what} cannot be used: {source}")]
    Tls {
        endpoint: String,
        what: &'static str,
        #[source]
        source: reqwest::Error,
    },
    #[error("snapshot from {endpoint} is corrupt: {detail}")]
    CorruptSnapshot { endpoint: String, detail: String },
    #[error("writing snapshot from {endpoint}: {source}")]
    Write {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{verb} on {endpoint}: the answer lacks {what}")]
    Incomplete {
        verb: &'static str,
        endpoint: String,
        what: &'static str,
    },
}

/// A member as the membership list records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    pub id: u64,
    /// Empty until the member has started and published its name.
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub learner: bool,
}

/// One member's report on itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberReport {
    pub member_id: u64,
    pub cluster_id: u64,
    /// The leader this member follows; 0 when it knows none.
    pub leader_id: u64,
    pub version: String,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    /// Errors the member reports about itself (alarms such as NOSPACE or CORRUPT).
    pub errors: Vec<String>,
    pub learner: bool,
    pub db_size: i64,
    /// The newest revision of the member's key-value store when it answered.
    pub revision: i64,
}

/// A member's connection to one of its peers, as its metrics report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerLink {
    pub local: u64,
    pub remote: u64,
    pub active: bool,
}

/// What a snapshot was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub size: u64,
    /// SHA-256 of the whole stream as written, hex.
    pub sha256: String,
}

/// The PEM material to reach members that serve clients over TLS with client-certificate
/// authentication: the CA that signed their serving certificates, and the certificate and key
/// the operator presents as its own identity.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsMaterial {
    pub ca_pem: Vec<u8>,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key: this ends up in logs.
        f.debug_struct("TlsMaterial")
            .field("ca_pem", &format_args!("{} bytes", self.ca_pem.len()))
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .field("key_pem", &format_args!("<redacted>"))
            .finish()
    }
}

/// Admin access to one member.
#[derive(Clone)]
pub struct EtcdAdmin {
    client: Client,
    endpoint: String,
    http: reqwest::Client,
    /// Shared: an admin handle is cloned for every call.
    tls: Option<std::sync::Arc<TlsMaterial>>,
}

impl EtcdAdmin {
    /// A client for the member at `endpoint` (its client URL), with a connection and a
    /// `/metrics` client of its own: for a single use. The operator shares the connection with
    /// the member's leader watch and the `/metrics` client between members
    /// ([`EtcdAdmin::connect_sharing`]).
    ///
    /// # Errors
    /// As [`EtcdAdmin::connect_sharing`], and [`AdminError::Tls`] when the PEM material cannot
    /// be used for `/metrics`.
    pub async fn connect(
        endpoint: &str,
        timeout: std::time::Duration,
        tls: Option<&TlsMaterial>,
    ) -> Result<Self, AdminError> {
        let channel = member_channel(endpoint, timeout, timeout, tls)?;
        let metrics = metrics_client(endpoint, timeout, tls)?;
        Self::connect_sharing(endpoint, channel, tls.cloned().map(std::sync::Arc::new), metrics).await
    }

    /// A client for the member at `endpoint` (its client URL) over `channel`
    /// ([`member_channel`]), reading `/metrics` with `metrics` ([`metrics_client`]), both
    /// possibly shared. Connection is lazy: an unreachable member fails the first call, not this
    /// one.
    ///
    /// For an `https://` endpoint, `tls` is the material `channel` and `metrics` were built
    /// with: the CA to trust (and nothing else) and the client identity to present. Without it,
    /// calls to an `https://` member fail (the client trusts no CA, and a member requiring client
    /// certificates refuses a client without one): the member is unreachable, never asked
    /// insecurely. For an `http://` endpoint `tls` is not used.
    ///
    /// # Errors
    /// [`AdminError::Etcd`] when etcd-client refuses the channel.
    pub async fn connect_sharing(
        endpoint: &str,
        channel: etcd_client::Channel,
        tls: Option<std::sync::Arc<TlsMaterial>>,
        metrics: reqwest::Client,
    ) -> Result<Self, AdminError> {
        let client = Client::from_channel(channel, None)
            .await
            .map_err(|source| AdminError::Etcd {
                verb: "connect",
                endpoint: endpoint.to_string(),
                source,
            })?;
        Ok(Self {
            client,
            endpoint: endpoint.to_string(),
            http: metrics,
            tls,
        })
    }

    /// The TLS material this client was given (used only when its endpoint is `https://`).
    pub fn tls(&self) -> Option<&TlsMaterial> {
        self.tls.as_deref()
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn etcd_error(&self, verb: &'static str) -> impl FnOnce(etcd_client::Error) -> AdminError + '_ {
        move |source| AdminError::Etcd {
            verb,
            endpoint: self.endpoint.clone(),
            source,
        }
    }

    /// The membership list, as this member knows it.
    pub async fn members(&self) -> Result<Vec<MemberInfo>, AdminError> {
        let response = self
            .client
            .clone()
            .member_list()
            .await
            .map_err(self.etcd_error("member_list"))?;
        Ok(response
            .members()
            .iter()
            .map(|m| MemberInfo {
                id: m.id(),
                name: m.name().to_string(),
                peer_urls: m.peer_urls().to_vec(),
                client_urls: m.client_urls().to_vec(),
                learner: m.is_learner(),
            })
            .collect())
    }

    /// This member's report on itself.
    pub async fn status(&self) -> Result<MemberReport, AdminError> {
        let status = self
            .client
            .clone()
            .status()
            .await
            .map_err(self.etcd_error("status"))?;
        let header = status.header().ok_or(AdminError::Incomplete {
            verb: "status",
            endpoint: self.endpoint.clone(),
            what: "a response header",
        })?;
        Ok(MemberReport {
            member_id: header.member_id(),
            cluster_id: header.cluster_id(),
            leader_id: status.leader(),
            version: status.version().to_string(),
            raft_index: status.raft_index(),
            raft_applied_index: status.raft_applied_index(),
            errors: status.errors().to_vec(),
            learner: status.is_learner(),
            db_size: status.db_size(),
            revision: header.revision(),
        })
    }

    /// Adds a learner (a non-voting member) that will listen on `peer_url`. The new member's
    /// process must start afterwards with `--initial-cluster-state=existing`.
    pub async fn add_learner(&self, peer_url: &str) -> Result<MemberInfo, AdminError> {
        let response = self
            .client
            .clone()
            .member_add([peer_url], Some(MemberAddOptions::new().with_is_learner()))
            .await
            .map_err(self.etcd_error("member_add"))?;
        let member = response.member().ok_or(AdminError::Incomplete {
            verb: "member_add",
            endpoint: self.endpoint.clone(),
            what: "the added member",
        })?;
        Ok(MemberInfo {
            id: member.id(),
            name: member.name().to_string(),
            peer_urls: member.peer_urls().to_vec(),
            client_urls: member.client_urls().to_vec(),
            learner: member.is_learner(),
        })
    }

    /// Promotes a learner to a voting member. etcd refuses while the learner lags the leader.
    pub async fn promote(&self, id: u64) -> Result<(), AdminError> {
        self.client
            .clone()
            .member_promote(id)
            .await
            .map_err(self.etcd_error("member_promote"))?;
        Ok(())
    }

    /// Removes a member from the membership.
    pub async fn remove_member(&self, id: u64) -> Result<(), AdminError> {
        self.client
            .clone()
            .member_remove(id)
            .await
            .map_err(self.etcd_error("member_remove"))?;
        Ok(())
    }

    /// Hands leadership to `to`. Must be sent to the current leader.
    pub async fn move_leader(&self, to: u64) -> Result<(), AdminError> {
        self.client
            .clone()
            .move_leader(to)
            .await
            .map_err(self.etcd_error("move_leader"))?;
        Ok(())
    }

    /// This member's connections to its peers, from `etcd_network_active_peers` on its
    /// `/metrics`: the peers' own testimony that a member is (or is not) connected.
    pub async fn peer_links(&self) -> Result<Vec<PeerLink>, AdminError> {
        let metrics_error = |source| AdminError::Metrics {
            endpoint: self.endpoint.clone(),
            source,
        };
        let text = self
            .http
            .get(format!("{}/metrics", self.endpoint.trim_end_matches('/')))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(metrics_error)?
            .text()
            .await
            .map_err(metrics_error)?;
        Ok(parse_peer_links(&text))
    }

    /// Every key and its value as of `revision`, counted and digested (a digest that does not
    /// depend on the order they are read in): what a snapshot taken after `revision` holds at
    /// it, and what a member restored from that snapshot must hold at it too. Read a page of
    /// keys at a time, so a large keyspace never sits in memory whole.
    ///
    /// # Errors
    /// [`AdminError::Etcd`] when the member refuses a read, `revision` compacted included.
    pub async fn content_at(&self, revision: i64) -> Result<ContentDigest, AdminError> {
        let mut digest = ContentDigest::default();
        let mut kv = self
            .client
            .kv_client()
            .max_decoding_message_size(content_page::LARGEST_ANSWER);
        // Every key sorts after the single zero byte (the empty key is not a key).
        let mut from = vec![0u8];
        let mut limit = content_page::FIRST_KEYS;
        loop {
            let options = GetOptions::new()
                .with_from_key()
                .with_revision(revision)
                .with_limit(limit);
            let page = match kv.get(from.clone(), Some(options)).await {
                Ok(page) => page,
                // More than one answer may carry: the same keys again, fewer at a time.
                Err(etcd_client::Error::GRpcStatus(status))
                    if status.code() == tonic::Code::OutOfRange && limit > 1 =>
                {
                    limit = content_page::after_refusal(limit);
                    continue;
                }
                Err(error) => return Err(self.etcd_error("range")(error)),
            };
            let mut bytes = 0;
            for pair in page.kvs() {
                let length = (pair.key().len() as u64).to_be_bytes();
                digest.add_parts(&[&length, pair.key(), pair.value()]);
                bytes += pair.key().len() + pair.value().len();
            }
            match page.kvs().last() {
                Some(last) if page.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                    limit = content_page::next_keys(page.kvs().len(), bytes);
                }
                _ => return Ok(digest),
            }
        }
    }

    /// Streams a snapshot of this member's whole keyspace into `out`.
    ///
    /// etcd ends the stream with the SHA-256 of the database that precedes it; the stream is
    /// refused as corrupt when that does not match, so a truncated or damaged snapshot is never
    /// recorded as a good backup.
    pub async fn snapshot<W: AsyncWrite + Unpin>(&self, out: &mut W) -> Result<SnapshotInfo, AdminError> {
        let mut stream = self
            .client
            .clone()
            .snapshot()
            .await
            .map_err(self.etcd_error("snapshot"))?;
        let mut whole = Sha256::new();
        let mut integrity = TrailingChecksum::default();
        let mut size = 0u64;
        while let Some(message) = stream.message().await.map_err(self.etcd_error("snapshot"))? {
            let blob = message.blob();
            whole.update(blob);
            integrity.update(blob);
            size += blob.len() as u64;
            out.write_all(blob).await.map_err(|source| AdminError::Write {
                endpoint: self.endpoint.clone(),
                source,
            })?;
        }
        out.flush().await.map_err(|source| AdminError::Write {
            endpoint: self.endpoint.clone(),
            source,
        })?;
        integrity.verify().map_err(|detail| AdminError::CorruptSnapshot {
            endpoint: self.endpoint.clone(),
            detail,
        })?;
        Ok(SnapshotInfo {
            size,
            sha256: hex::encode(whole.finalize()),
        })
    }
}

/// The least time between two pings of a member's connection: twice etcd's least interval (its
/// `--grpc-keepalive-min-time`, five seconds), so that a timer firing a little early is never
/// taken for abuse. A member closes a connection pinged more often, and with it the leader watch
/// it carries.
pub const LEAST_LINK_CHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// One gRPC connection to the member at `endpoint`, for its admin client and its leader watch
/// alike: dialled within `timeout`, each request answered (a stream opened) within `timeout`,
/// and, while a stream (the leader watch) is open, the link checked every `link_check` (at least
/// [`LEAST_LINK_CHECK`]) and given `timeout` to answer, so that a member that stopped without
/// closing the connection (a pod gone, a node cut off) ends its leader watch. Never pinged while
/// idle: etcd takes a ping without a stream for abuse. Dialled lazily, and again (the name
/// resolved again) whenever the connection breaks. For an `https://` endpoint, `tls` gives the
/// CA to trust (and nothing else) and the identity to present; without it no CA is trusted.
///
/// # Errors
/// [`AdminError::Etcd`] when `endpoint` is not a URL or the TLS material cannot be used.
pub fn member_channel(
    endpoint: &str,
    timeout: std::time::Duration,
    link_check: std::time::Duration,
    tls: Option<&TlsMaterial>,
) -> Result<etcd_client::Channel, AdminError> {
    let refused = |source| AdminError::Etcd {
        verb: "connect",
        endpoint: endpoint.to_string(),
        source,
    };
    let mut dial = tonic::transport::Endpoint::from_shared(endpoint.to_string())
        .map_err(|error| refused(etcd_client::Error::TransportError(error)))?
        .connect_timeout(timeout)
        .timeout(timeout)
        .http2_keep_alive_interval(link_check.max(LEAST_LINK_CHECK))
        .keep_alive_timeout(timeout)
        .keep_alive_while_idle(false);
    if is_https(endpoint) {
        let config = match tls {
            Some(material) => TlsOptions::new()
                .ca_certificate(Certificate::from_pem(&material.ca_pem))
                .identity(Identity::from_pem(&material.cert_pem, &material.key_pem)),
            None => TlsOptions::new(),
        };
        dial = dial
            .tls_config(config)
            .map_err(|error| refused(etcd_client::Error::TransportError(error)))?;
    }
    Ok(etcd_client::Channel::Tonic(dial.connect_lazy()))
}

/// The HTTP client that reads `/metrics` of members at `endpoint` and any other member reached
/// with the same `tls` (used only for an `https://` endpoint): the CA to trust (and nothing
/// else) and the identity to present. Meant to be shared by those members (each client carries
/// its own TLS configuration and session cache), and it keeps no idle connection: a member is
/// read once a pass, and a connection kept between passes holds a read buffer grown to the size
/// of etcd's metrics page.
///
/// # Errors
/// [`AdminError::Tls`] when the PEM material cannot be used.
pub fn metrics_client(
    endpoint: &str,
    timeout: std::time::Duration,
    tls: Option<&TlsMaterial>,
) -> Result<reqwest::Client, AdminError> {
    let mut http = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .pool_max_idle_per_host(0);
    if let Some(material) = tls.filter(|_| is_https(endpoint)) {
        let tls_error = |what: &'static str| {
            move |source| AdminError::Tls {
                endpoint: endpoint.to_string(),
                what,
                source,
            }
        };
        let ca = reqwest::Certificate::from_pem(&material.ca_pem).map_err(tls_error("the CA certificate"))?;
        let mut identity_pem = material.cert_pem.clone();
        if !identity_pem.ends_with(b"\n") {
            identity_pem.push(b'\n');
        }
        identity_pem.extend_from_slice(&material.key_pem);
        let identity = reqwest::Identity::from_pem(&identity_pem)
            .map_err(tls_error("the client certificate and key"))?;
        http = http
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .identity(identity);
    }
    http.build().map_err(|source| AdminError::Tls {
        endpoint: endpoint.to_string(),
        what: "the metrics client",
        source,
    })
}

/// The key a [`LeaderWatch`] watches. Nothing writes it: the watch is only there for the member
/// to end when it loses its leader.
pub const LEADER_WATCH_KEY: &str = "\u{0}quorum-operator/leader-watch";

/// A watch that one member ends when it has no leader, and that breaks when the member stops:
/// etcd's own signal that its view of the leader is gone (`hasleader` on the stream, checked by
/// the member at the stream's start and while it lasts).
pub struct LeaderWatch {
    stream: etcd_client::WatchStream,
    endpoint: String,
}

impl LeaderWatch {
    /// Opens the watch on the member at `endpoint` over `channel` ([`member_channel`], which
    /// checks the link), giving it `timeout` to confirm; no time limit on the watch itself.
    ///
    /// # Errors
    /// [`AdminError::Etcd`] when the member cannot be reached, has no leader, or refuses the
    /// watch; [`AdminError::Incomplete`] when it does not confirm the watch within `timeout`.
    pub async fn open(
        endpoint: &str,
        channel: etcd_client::Channel,
        timeout: std::time::Duration,
    ) -> Result<Self, AdminError> {
        let error = |verb| {
            move |source| AdminError::Etcd {
                verb,
                endpoint: endpoint.to_string(),
                source,
            }
        };
        let incomplete = |what| AdminError::Incomplete {
            verb: "watch",
            endpoint: endpoint.to_string(),
            what,
        };
        // `hasleader` on every request of this client: the member refuses the watch, or ends
        // it, when it has no leader.
        let mut client = Client::from_channel(channel, Some(ConnectOptions::new().with_require_leader(true)))
            .await
            .map_err(error("connect"))?;
        let mut stream = tokio::time::timeout(timeout, client.watch(LEADER_WATCH_KEY, None))
            .await
            .map_err(|_| incomplete("an answer in time"))?
            .map_err(error("watch"))?;
        let created = tokio::time::timeout(timeout, stream.message())
            .await
            .map_err(|_| incomplete("the watch's confirmation in time"))?
            .map_err(error("watch"))?;
        match created {
            Some(response) if response.created() && !response.canceled() => Ok(Self {
                stream,
                endpoint: endpoint.to_string(),
            }),
            _ => Err(incomplete("the watch's confirmation")),
        }
    }

    /// Waits until the watch ends, and says why: the member lost its leader, stopped, or the
    /// link to it broke. Events on the key (nothing should write it) are passed over.
    pub async fn ended(&mut self) -> String {
        loop {
            match self.stream.message().await {
                Ok(Some(response)) if response.canceled() => {
                    return format!("{} ended the watch: {}", self.endpoint, response.cancel_reason());
                }
                Ok(Some(_)) => continue,
                Ok(None) => return format!("{} closed the watch", self.endpoint),
                Err(error) => return format!("watch on {}: {error}", self.endpoint),
            }
        }
    }
}

/// As etcd-client tells them apart: only `https://` URLs are dialled with TLS.
pub fn is_https(endpoint: &str) -> bool {
    endpoint.starts_with("https://")
}

/// Parses `etcd_network_active_peers{Local="..",Remote=".."} 0|1` lines (ids in hex).
pub fn parse_peer_links(metrics: &str) -> Vec<PeerLink> {
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix("etcd_network_active_peers{"))
        .filter_map(|rest| {
            let (labels, value) = rest.split_once('}')?;
            let label = |name: &str| {
                labels.split(',').find_map(|pair| {
                    let (key, value) = pair.split_once('=')?;
                    (key.trim() == name).then(|| value.trim().trim_matches('"').to_string())
                })
            };
            Some(PeerLink {
                local: u64::from_str_radix(&label("Local")?, 16).ok()?,
                remote: u64::from_str_radix(&label("Remote")?, 16).ok()?,
                active: value.trim().parse::<f64>().ok()? > 0.0,
            })
        })
        .collect()
}

/// Hashes everything but the last 32 bytes seen, to compare with those 32 bytes at the end.
#[derive(Default)]
struct TrailingChecksum {
    hasher: Sha256,
    tail: Vec<u8>,
}

impl TrailingChecksum {
    fn update(&mut self, bytes: &[u8]) {
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 32 {
            let spill = self.tail.len() - 32;
            self.hasher.update(&self.tail[..spill]);
            self.tail.drain(..spill);
        }
    }

    fn verify(self) -> Result<(), String> {
        if self.tail.len() < 32 {
            return Err(format!(
                "only {} bytes, shorter than its checksum",
                self.tail.len()
            ));
        }
        let computed = self.hasher.finalize();
        if computed.as_slice() == self.tail.as_slice() {
            Ok(())
        } else {
            Err(format!(
                "trailing SHA-256 {} does not match the content's {}",
                hex::encode(&self.tail),
                hex::encode(computed)
            ))
        }
    }
}

/// How many keys a page of [`EtcdAdmin::content_at`] asks for: pages of about
/// [`content_page::TARGET_BYTES`], sized from the page before, since etcd limits a range by
/// its count of keys only and a value may be anything up to the member's request limit.
pub mod content_page {
    /// The size a page aims at.
    pub const TARGET_BYTES: usize = 2 * 1024 * 1024;
    /// The largest answer read: a page of one key whose value is as large as etcd takes with
    /// `--max-request-bytes` far above its 1.5 MiB default.
    pub const LARGEST_ANSWER: usize = 64 * 1024 * 1024;
    /// The most keys a page asks for, however small they are.
    pub const MOST_KEYS: i64 = 1000;
    /// The keys the first page asks for, before any size is known.
    pub const FIRST_KEYS: i64 = 64;

    /// The next page's keys after a page of `keys` keys and `bytes` bytes.
    pub fn next_keys(keys: usize, bytes: usize) -> i64 {
        let average = (bytes / keys.max(1)).max(1);
        i64::try_from(TARGET_BYTES / average)
            .unwrap_or(MOST_KEYS)
            .clamp(1, MOST_KEYS)
    }

    /// The keys asked for again after an answer of `keys` keys was too large to carry.
    pub fn after_refusal(keys: i64) -> i64 {
        (keys / 8).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_pages_aim_at_a_size_not_a_count() {
        use content_page::{MOST_KEYS, TARGET_BYTES, after_refusal, next_keys};
        for (case, keys, bytes, next) in [
            ("small values: the most keys", 64, 64 * 100, MOST_KEYS),
            ("64 KiB values: 32 keys", 64, 64 * 64 * 1024, 32),
            ("values larger than a page: one key", 1, 3 * TARGET_BYTES, 1),
            ("an empty page does not divide by zero", 0, 0, MOST_KEYS),
        ] {
            assert_eq!(next_keys(keys, bytes), next, "{case}");
        }
        assert_eq!(after_refusal(64), 8);
        assert_eq!(after_refusal(2), 1);
    }

    #[test]
    fn peer_links_are_read_from_metrics_text() {
        let text = "# HELP etcd_network_active_peers The current number of active peer connections.\n\
            # TYPE etcd_network_active_peers gauge\n\
            etcd_network_active_peers{Local=\"8e9e05c52164694d\",Remote=\"91bc3c398fb3c146\"} 1\n\
            etcd_network_active_peers{Local=\"8e9e05c52164694d\",Remote=\"fd422379fda50e48\"} 0\n\
            etcd_network_peer_sent_bytes_total{To=\"91bc3c398fb3c146\"} 100\n";
        assert_eq!(
            parse_peer_links(text),
            vec![
                PeerLink {
                    local: 0x8e9e05c52164694d,
                    remote: 0x91bc3c398fb3c146,
                    active: true
                },
                PeerLink {
                    local: 0x8e9e05c52164694d,
                    remote: 0xfd422379fda50e48,
                    active: false
                },
            ]
        );
    }

    #[test]
    fn tls_material_debug_never_shows_the_key() {
        let material = TlsMaterial {
            ca_pem: b"-----BEGIN CERTIFICATE-----ca".to_vec(),
            cert_pem: b"-----BEGIN CERTIFICATE-----cert".to_vec(),
            key_pem: b"-----BEGIN PRIVATE KEY-----secret-key-bytes".to_vec(),
        };
        let shown = format!("{material:?}");
        assert!(!shown.contains("secret-key-bytes"), "{shown}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[tokio::test]
    async fn plain_http_ignores_tls_material_and_https_without_it_still_connects_lazily() {
        let material = TlsMaterial {
            ca_pem: Vec::new(),
            cert_pem: Vec::new(),
            key_pem: Vec::new(),
        };
        let timeout = std::time::Duration::from_millis(200);
        // An http:// member is reached in clear whatever material is set for its cluster.
        let plain = EtcdAdmin::connect("http://127.0.0.1:1", timeout, Some(&material))
            .await
            .expect("plain http connects lazily");
        assert_eq!(plain.tls(), Some(&material));
        // An https:// member without material: connecting is lazy, calls fail (unverifiable).
        EtcdAdmin::connect("https://127.0.0.1:1", timeout, None)
            .await
            .expect("https without material connects lazily");
    }

    #[test]
    fn trailing_checksum_accepts_intact_and_refuses_damaged_streams() {
        let content = b"bbolt database bytes".repeat(100);
        let mut stream = content.clone();
        stream.extend_from_slice(&Sha256::digest(&content));

        let mut intact = TrailingChecksum::default();
        for chunk in stream.chunks(7) {
            intact.update(chunk);
        }
        assert!(intact.verify().is_ok());

        let mut damaged_stream = stream.clone();
        damaged_stream[10] ^= 1;
        let mut damaged = TrailingChecksum::default();
        damaged.update(&damaged_stream);
        assert!(damaged.verify().is_err());

        let mut truncated = TrailingChecksum::default();
        truncated.update(&stream[..stream.len() - 5]);
        assert!(truncated.verify().is_err());
    }
}
