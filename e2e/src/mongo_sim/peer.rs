//! The member-to-member client: internal commands over the same OP_MSG framing clients use,
//! on pooled connections, each call bounded by a timeout so a blackholed member costs a
//! timeout, never a stuck task.

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicI32, Ordering},
    },
    time::Duration,
};

use bson::{Bson, Document};
use tokio::net::TcpStream;

use super::wire;

#[derive(Clone, Debug, PartialEq)]
pub enum CallError {
    /// No answer: refused, reset, closed or timed out.
    Network(String),
    /// The member answered `ok: 0`.
    Command { code: i32, message: String },
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Network(message) => write!(f, "no answer: {message}"),
            CallError::Command { code, message } => write!(f, "refused ({code}): {message}"),
        }
    }
}

/// Connections to other members, and the cluster key every internal command carries.
pub struct Peers {
    idle: Mutex<HashMap<String, Vec<TcpStream>>>,
    key: Option<String>,
    request_ids: AtomicI32,
}

/// How many idle connections to keep per member: heartbeats, votes and the oplog fetcher each
/// hold one at a time.
const IDLE_PER_MEMBER: usize = 4;

impl Peers {
    /// `key` is the digest of the key file's contents, or `None` without one.
    pub fn new(key: Option<String>) -> Self {
        Self {
            idle: Mutex::new(HashMap::new()),
            key,
            request_ids: AtomicI32::new(1),
        }
    }

    /// Sends `command` to `host` and returns its reply when `ok: 1`.
    pub async fn call(
        &self,
        host: &str,
        mut command: Document,
        timeout: Duration,
    ) -> Result<Document, CallError> {
        command.insert("$db", "admin");
        if let Some(key) = &self.key {
            command.insert("key", key.clone());
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pooled = self
            .idle
            .lock()
            .expect("peer pool")
            .get_mut(host)
            .and_then(Vec::pop);
        let (stream, reply) = loop {
            let reused = pooled.is_some();
            let exchange = async {
                let mut stream = match pooled.take() {
                    Some(stream) => stream,
                    None => {
                        let stream = TcpStream::connect(host).await.map_err(|e| e.to_string())?;
                        let _ = stream.set_nodelay(true);
                        stream
                    }
                };
                let request_id = self.request_ids.fetch_add(1, Ordering::Relaxed);
                wire::write_message(&mut stream, request_id, 0, &command)
                    .await
                    .map_err(|e| e.to_string())?;
                let reply = wire::read_reply(&mut stream, request_id)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>((stream, reply))
            };
            match tokio::time::timeout_at(deadline, exchange).await {
                Ok(Ok(answer)) => break answer,
                // An idle connection the member closed meanwhile (it restarted): try a fresh one.
                Ok(Err(_)) if reused => continue,
                Ok(Err(error)) => return Err(CallError::Network(error)),
                Err(_) => return Err(CallError::Network(format!("no reply within {timeout:?}"))),
            }
        };
        {
            let mut idle = self.idle.lock().expect("peer pool");
            let connections = idle.entry(host.to_string()).or_default();
            if connections.len() < IDLE_PER_MEMBER {
                connections.push(stream);
            }
        }
        let ok = match reply.get("ok") {
            Some(Bson::Double(ok)) => *ok == 1.0,
            Some(Bson::Int32(ok)) => *ok == 1,
            Some(Bson::Int64(ok)) => *ok == 1,
            _ => false,
        };
        if ok {
            Ok(reply)
        } else {
            Err(CallError::Command {
                code: reply.get_i32("code").unwrap_or(0),
                message: reply.get_str("errmsg").unwrap_or_default().to_string(),
            })
        }
    }

    /// Drops idle connections to `host`, after a partition or a failure.
    pub fn forget(&self, host: &str) {
        self.idle.lock().expect("peer pool").remove(host);
    }
}
