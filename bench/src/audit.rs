//! An operator's API requests, counted by verb from the API server's own audit log.
//!
//! `e2e/cluster.sh` starts the API server with a policy that records, at metadata level, only the
//! requests of the service accounts in the benchmark's two namespaces. Counting at the server
//! sees every request an operator makes, whatever its client library, and nothing of the
//! benchmark's own polling (which runs as the cluster admin).

use std::{
    collections::BTreeMap,
    io::{Read, Seek, SeekFrom},
    os::unix::fs::MetadataExt,
    path::PathBuf,
    time::Duration,
};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The verbs that change stored state.
const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];
const READS: [&str; 2] = ["get", "list"];

/// Requests by verb (`get`, `list`, `watch`, `create`, `patch`, ...), and apart from them those
/// on the operator's leader-election Lease: those are the same whatever the number of clusters,
/// so per-cluster figures leave them out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Requests {
    pub by_verb: BTreeMap<String, u64>,
    /// The writes again, by verb and what they wrote (`patch pods`, `patch mysqlclusters/status`):
    /// what a settled operator still writes, and where to look.
    pub writes_by_resource: BTreeMap<String, u64>,
    /// The single reads (GETs and LISTs) by verb and what they read (`get statefulsets`), for
    /// the same reason: a settled operator should read from its watch caches.
    pub reads_by_resource: BTreeMap<String, u64>,
    pub on_leases: u64,
}

impl Requests {
    pub fn total(&self) -> u64 {
        self.by_verb.values().sum()
    }

    pub fn writes(&self) -> u64 {
        self.count(&WRITES)
    }

    /// Reads that a watch cache would answer: single GETs and LISTs.
    pub fn reads(&self) -> u64 {
        self.count(&READS)
    }

    fn count(&self, verbs: &[&str]) -> u64 {
        verbs.iter().filter_map(|verb| self.by_verb.get(*verb)).sum()
    }

    /// `get=12 list=3 patch=1 (leader election: 30) writes: patch pods: 1`, for the report.
    pub fn describe(&self) -> String {
        let mut words: Vec<String> = self
            .by_verb
            .iter()
            .map(|(verb, count)| format!("{verb}={count}"))
            .collect();
        words.push(format!("(leader election: {})", self.on_leases));
        if !self.writes_by_resource.is_empty() {
            let writes: Vec<String> = self
                .writes_by_resource
                .iter()
                .map(|(what, count)| format!("{what}: {count}"))
                .collect();
            words.push(format!("writes: {}", writes.join(", ")));
        }
        if !self.reads_by_resource.is_empty() {
            let reads: Vec<String> = self
                .reads_by_resource
                .iter()
                .map(|(what, count)| format!("{what}: {count}"))
                .collect();
            words.push(format!("reads: {}", reads.join(", ")));
        }
        words.join(" ")
    }
}

#[derive(Deserialize)]
struct Event {
    stage: String,
    verb: String,
    user: User,
    #[serde(rename = "objectRef")]
    object: Option<ObjectRef>,
}

#[derive(Deserialize)]
struct ObjectRef {
    resource: Option<String>,
    subresource: Option<String>,
}

#[derive(Deserialize)]
struct User {
    username: String,
}

/// The requests `username` made in `lines` (the audit log's JSON lines). A watch counts once,
/// when its response starts (it completes only when it ends, maybe never in the window); every
/// other request counts when its response is complete.
pub fn count(lines: &str, username: &str) -> Requests {
    let mut requests = Requests::default();
    for event in lines
        .lines()
        .filter_map(|line| serde_json::from_str::<Event>(line).ok())
    {
        let counts = match event.stage.as_str() {
            "ResponseStarted" => event.verb == "watch",
            "ResponseComplete" => event.verb != "watch",
            _ => false,
        };
        if !counts || event.user.username != username {
            continue;
        }
        let (resource, subresource) = event
            .object
            .map(|object| (object.resource, object.subresource))
            .unwrap_or_default();
        let resource = resource.unwrap_or_default();
        if resource == "leases" {
            requests.on_leases += 1;
            continue;
        }
        let what = match subresource {
            Some(subresource) => format!("{} {resource}/{subresource}", event.verb),
            None => format!("{} {resource}", event.verb),
        };
        if WRITES.contains(&event.verb.as_str()) {
            *requests.writes_by_resource.entry(what).or_default() += 1;
        } else if READS.contains(&event.verb.as_str()) {
            *requests.reads_by_resource.entry(what).or_default() += 1;
        }
        *requests.by_verb.entry(event.verb).or_default() += 1;
    }
    requests
}

/// The audit log of the local control plane.
pub struct AuditLog {
    path: PathBuf,
}

/// A position in the audit log (an offset in one file): what was written after it is a
/// window's requests.
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    offset: u64,
    inode: u64,
}

impl AuditLog {
    /// The log `e2e/cluster.sh` configures, under `QUORUM_CLUSTER_DIR` (default: the cache's
    /// `cluster` directory).
    pub fn local() -> anyhow::Result<Self> {
        let cluster = std::env::var_os("QUORUM_CLUSTER_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| quorum_e2e::tools::cache_root().join("cluster"));
        let path = cluster.join("logs").join("audit.log");
        anyhow::ensure!(
            path.exists(),
            "no audit log at {}: the control plane predates the benchmark's audit policy; \
             restart it (e2e/cluster.sh stop && e2e/cluster.sh start)",
            path.display()
        );
        Ok(Self { path })
    }

    pub fn mark(&self) -> anyhow::Result<Mark> {
        let metadata =
            std::fs::metadata(&self.path).with_context(|| format!("reading {}", self.path.display()))?;
        Ok(Mark {
            offset: metadata.len(),
            inode: metadata.ino(),
        })
    }

    /// The requests `username` made since `mark`, and the mark the next window starts at: just
    /// after the last whole line read, so that no request falls between two windows.
    pub fn since(&self, mark: Mark, username: &str) -> anyhow::Result<(Requests, Mark)> {
        let mut file =
            std::fs::File::open(&self.path).with_context(|| format!("opening {}", self.path.display()))?;
        let metadata = file.metadata()?;
        // The log rotates at 200 MB: a window across a rotation would lose its first part.
        anyhow::ensure!(
            metadata.ino() == mark.inode && metadata.len() >= mark.offset,
            "{} rotated during the measurement: run the benchmark again",
            self.path.display()
        );
        file.seek(SeekFrom::Start(mark.offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let whole = whole_lines(&bytes);
        let text = String::from_utf8_lossy(&bytes[..whole]);
        let next = Mark {
            offset: mark.offset + whole as u64,
            inode: mark.inode,
        };
        Ok((count(&text, username), next))
    }

    /// Waits until `username` has made no request but on its Lease for `quiet` (its start-up
    /// lists and watches done), at most `timeout`.
    pub async fn wait_quiet(&self, username: &str, quiet: Duration, timeout: Duration) -> anyhow::Result<()> {
        let started = tokio::time::Instant::now();
        let mut mark = self.mark()?;
        let mut quiet_since = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (requests, next) = self.since(mark, username)?;
            mark = next;
            if requests.total() > 0 {
                quiet_since = tokio::time::Instant::now();
            } else if quiet_since.elapsed() >= quiet {
                return Ok(());
            }
            anyhow::ensure!(
                started.elapsed() < timeout,
                "{username} never stopped making requests for {quiet:?} within {timeout:?}"
            );
        }
    }
}

/// The length of the whole lines at the start of `bytes`: a line the API server is still writing
/// is left to the next read.
fn whole_lines(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|byte| *byte == b'\n')
        .map_or(0, |last| last + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(stage: &str, verb: &str, user: &str) -> String {
        on(stage, verb, user, "pods")
    }

    fn on(stage: &str, verb: &str, user: &str, resource: &str) -> String {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let mut object = serde_json::json!({"resource": resource});
        if !subresource.is_empty() {
            object["subresource"] = subresource.into();
        }
        serde_json::json!({
            "kind": "Event", "level": "Metadata", "stage": stage, "verb": verb,
            "user": {"username": user, "groups": ["system:serviceaccounts"]},
            "objectRef": object
        })
        .to_string()
    }

    #[test]
    fn a_line_still_being_written_is_left_to_the_next_window() {
        assert_eq!(whole_lines(b"{\"a\":1}\n{\"b\""), 8);
        assert_eq!(whole_lines(b"{\"a\":1}\n"), 8);
        assert_eq!(whole_lines(b"{\"a\""), 0);
        assert_eq!(whole_lines(b""), 0);
    }

    #[test]
    fn counts_each_request_of_one_account_once_by_verb() {
        let operator = "system:serviceaccount:quorum-bench:etcd";
        let log = [
            line("ResponseComplete", "get", operator),
            line("ResponseComplete", "get", operator),
            line("ResponseComplete", "patch", operator),
            on("ResponseComplete", "patch", operator, "etcdclusters/status"),
            // Leader election, apart.
            on("ResponseComplete", "get", operator, "leases"),
            on("ResponseComplete", "update", operator, "leases"),
            // A watch starts, and ends later: one request.
            line("ResponseStarted", "watch", operator),
            line("ResponseComplete", "watch", operator),
            // Another account, and a half-written last line.
            line(
                "ResponseComplete",
                "list",
                "system:serviceaccount:etcd-operator-system:manager",
            ),
            "{\"kind\":\"Event\",\"stage\":\"Resp".to_string(),
        ]
        .join("\n");
        let requests = count(&log, operator);
        assert_eq!(
            requests.by_verb,
            BTreeMap::from([("get".into(), 2), ("patch".into(), 2), ("watch".into(), 1)])
        );
        assert_eq!(requests.on_leases, 2);
        assert_eq!((requests.total(), requests.writes(), requests.reads()), (5, 2, 2));
        assert_eq!(
            requests.describe(),
            "get=2 patch=2 watch=1 (leader election: 2) writes: patch etcdclusters/status: 1, patch pods: 1 \
             reads: get pods: 2"
        );
    }
}
