//! The primary hands its role to a replica without losing an acknowledged write, through the
//! admin clients only (no Kubernetes).
//!
//! A Sentinel failover on its own promotes a replica while the old primary may still take
//! writes until the Sentinels reconfigure it, which they do only after seeing it as a primary
//! for a while; writes it acknowledges meanwhile are lost when it resynchronises. Redis's own `FAILOVER` command holds writes while a replica catches up, but a Sentinel
//! that watches the primary undoes it. So the operator holds the writes itself:
//!
//! 1. `CLIENT PAUSE WRITE` on the primary: writes wait, the replication offset stops moving;
//! 2. every replica reaches the primary's offset (whichever the Sentinel picks has everything);
//! 3. `SENTINEL FAILOVER`, and the Sentinel names a replica as the new primary;
//! 4. the old primary follows the new one (`REPLICAOF`), as the Sentinels would later;
//! 5. `CLIENT UNPAUSE`: the writes it held are answered `READONLY`, never acknowledged.
//!
//! Every wait is bounded well inside the pause, which the server ends by itself: an operator
//! that stops halfway leaves writes held for at most [`WRITE_PAUSE`]. When a step fails, the
//! writes are released only if no replica was promoted; if one was, the old primary follows it
//! first.

use std::{net::SocketAddr, time::Duration};

use quorum_core::availability::retry::{CallError, Idempotency};
use tokio::time::Instant;

use crate::{
    address::Addresses,
    admin::{AdminError, Role},
    clients::{CallFailure, RedisClients},
    resources::SENTINEL_PRIMARY_NAME,
};

/// How long the primary's writes are held at most: the server resumes them by itself after
/// this, whatever becomes of the operator.
pub const WRITE_PAUSE: Duration = Duration::from_secs(15);
/// How long the replicas have to reach the held primary's offset.
const CATCH_UP: Duration = Duration::from_secs(5);
/// How long the Sentinel has to name a new primary.
const PROMOTION: Duration = Duration::from_secs(8);
const POLL: Duration = Duration::from_millis(100);

/// The nodes of one handover.
pub struct Handover<'a> {
    pub clients: &'a RedisClients,
    pub cluster: &'a str,
    pub addresses: &'a Addresses,
    pub primary: usize,
    /// Every replica, with the address the servers know it by.
    pub replicas: Vec<(usize, SocketAddr)>,
    /// The Sentinel asked to fail over.
    pub sentinel: usize,
}

impl Handover<'_> {
    /// Runs the handover; returns the node that is the primary now.
    ///
    /// # Errors
    /// The first call that failed, or a wait that ran out; the old primary then takes writes
    /// again only if no replica was promoted.
    pub async fn run(&self) -> Result<usize, CallFailure> {
        self.node(
            self.primary,
            "client_pause_write",
            Idempotency::Mutation,
            |admin| async move { admin.pause_writes(WRITE_PAUSE).await },
        )
        .await?;
        match self.promote().await {
            Ok((promoted, address)) => {
                self.follow(address).await?;
                self.release().await;
                Ok(promoted)
            }
            Err(error) => {
                self.recover().await;
                Err(error)
            }
        }
    }

    /// Steps 2 and 3: the replicas catch up, the Sentinel promotes one.
    async fn promote(&self) -> Result<(usize, SocketAddr), CallFailure> {
        self.caught_up().await?;
        let from = self
            .sentinel_call("sentinel_get_primary", Idempotency::Read, |admin| async move {
                admin.primary_address(SENTINEL_PRIMARY_NAME).await
            })
            .await?;
        self.sentinel_call("sentinel_failover", Idempotency::Mutation, |admin| async move {
            admin.failover(SENTINEL_PRIMARY_NAME).await
        })
        .await?;
        let deadline = Instant::now() + PROMOTION;
        loop {
            let named = self
                .sentinel_call("sentinel_get_primary", Idempotency::Read, |admin| async move {
                    admin.primary_address(SENTINEL_PRIMARY_NAME).await
                })
                .await?;
            if let Some(address) = named.filter(|address| Some(*address) != from)
                && let Some(&(ordinal, _)) = self.replicas.iter().find(|(_, a)| *a == address)
                && self.role(ordinal).await? == Role::Primary
            {
                return Ok((ordinal, address));
            }
            if Instant::now() >= deadline {
                return Err(self.ran_out(format!(
                    "the Sentinel named no replica as the new primary within {PROMOTION:?}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Step 2: every replica's link is up and it has processed the primary's whole stream.
    async fn caught_up(&self) -> Result<(), CallFailure> {
        let deadline = Instant::now() + CATCH_UP;
        loop {
            let held = self
                .node(
                    self.primary,
                    "replication_info",
                    Idempotency::Read,
                    |admin| async move { admin.replication_info().await },
                )
                .await?
                .offset;
            let mut behind = Vec::new();
            for &(ordinal, _) in &self.replicas {
                let info = self
                    .node(
                        ordinal,
                        "replication_info",
                        Idempotency::Read,
                        |admin| async move { admin.replication_info().await },
                    )
                    .await?;
                let processed = info.replica_offset.unwrap_or(0);
                if !info.link_up || processed < held {
                    behind.push(format!("node {ordinal} at {processed}"));
                }
            }
            if behind.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.ran_out(format!(
                    "the replicas did not reach the primary's offset {held} within {CATCH_UP:?}: {}",
                    behind.join(", ")
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Step 4: the old primary follows the new one.
    async fn follow(&self, primary: SocketAddr) -> Result<(), CallFailure> {
        self.node(
            self.primary,
            "replicaof",
            Idempotency::Mutation,
            |admin| async move { admin.ensure_replica_of(primary).await },
        )
        .await
    }

    /// Step 5. A release that fails changes nothing: the pause ends by itself.
    async fn release(&self) {
        let released = self
            .node(
                self.primary,
                "client_unpause",
                Idempotency::Mutation,
                |admin| async move { admin.unpause_writes().await },
            )
            .await;
        if let Err(error) = released {
            tracing::warn!(cluster = self.cluster, node = self.primary, %error, "releasing held writes; they resume when the pause ends");
        }
    }

    /// After a failed step: if a replica was promoted, the old primary follows it before its
    /// writes are released; if none was and none may still be (no failover under way), the
    /// writes are released now. Otherwise they stay held until the pause ends.
    async fn recover(&self) {
        for &(ordinal, address) in &self.replicas {
            if matches!(self.role(ordinal).await, Ok(Role::Primary)) {
                if self.follow(address).await.is_ok() {
                    self.release().await;
                }
                return;
            }
        }
        let failing_over = self
            .sentinel_call("sentinel_master", Idempotency::Read, |admin| async move {
                admin.primary(SENTINEL_PRIMARY_NAME).await
            })
            .await
            .map(|primary| primary.flags.failover_in_progress);
        if matches!(failing_over, Ok(false)) {
            self.release().await;
        }
    }

    async fn role(&self, ordinal: usize) -> Result<Role, CallFailure> {
        self.node(
            ordinal,
            "replication_info",
            Idempotency::Read,
            |admin| async move { admin.replication_info().await },
        )
        .await
        .map(|info| info.role)
    }

    fn ran_out(&self, detail: String) -> CallFailure {
        CallError::Failed(AdminError::Unexpected {
            endpoint: format!("{}/{}", self.cluster, self.primary),
            command: "handover",
            detail,
        })
    }

    async fn node<T, F, Fut>(
        &self,
        ordinal: usize,
        verb: &'static str,
        idempotency: Idempotency,
        call: F,
    ) -> Result<T, CallFailure>
    where
        F: Fn(crate::admin::RedisAdmin) -> Fut,
        Fut: Future<Output = Result<T, AdminError>>,
    {
        self.clients
            .node(self.cluster, self.addresses, ordinal, verb, idempotency, call)
            .await
    }

    async fn sentinel_call<T, F, Fut>(
        &self,
        verb: &'static str,
        idempotency: Idempotency,
        call: F,
    ) -> Result<T, CallFailure>
    where
        F: Fn(crate::admin::sentinel::SentinelAdmin) -> Fut,
        Fut: Future<Output = Result<T, AdminError>>,
    {
        self.clients
            .sentinel(
                self.cluster,
                self.addresses,
                self.sentinel,
                verb,
                idempotency,
                call,
            )
            .await
    }
}
