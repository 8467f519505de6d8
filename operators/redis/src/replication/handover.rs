//! The primary hands its role to a replica without losing an acknowledged write, through the
//! admin clients only (no Kubernetes).
//!
//! A Sentinel failover on its own promotes a replica while the old primary may still take
//! writes until the Sentinels reconfigure it, which they do only after seeing it as a primary
//! for a while; writes it acknowledges meanwhile are lost when it resynchronises. Redis's own
//! `FAILOVER` command holds writes while a replica catches up, but a Sentinel that watches the
//! primary undoes it. So the operator holds the writes itself:
//!
//! 1. `CLIENT PAUSE WRITE` on the primary: writes wait, the replication offset stops moving;
//!    and a write fence no replica count can meet (`min-replicas-to-write`), so the primary
//!    refuses writes by itself should the pause end before it is a replica;
//! 2. every replica reaches the primary's offset (whichever the Sentinel picks has everything);
//! 3. `SENTINEL FAILOVER`, and the Sentinel names a replica as the new primary;
//! 4. the old primary follows the new one (`REPLICAOF`), as the Sentinels would later;
//! 5. `CLIENT UNPAUSE`: the writes it held are answered `READONLY` (or `NOREPLICAS`), never
//!    acknowledged. Its fence is set back to the spec's by the passes that follow.
//!
//! Every wait counts against one deadline inside the pause, and the failover is asked for only
//! with time left for it. When a step fails, the writes are released only where it is safe: if
//! the Sentinel names a replica now, once the old primary follows it; if it still names the old
//! primary and no failover is under way, with the fence set back. Otherwise the pause ends by
//! itself and the fence keeps the old primary from acknowledging writes a promoted replica
//! lacks, until a later pass sees who the Sentinels agree on.

use std::{net::SocketAddr, time::Duration};

use quorum_core::availability::retry::{CallError, Idempotency};
use tokio::time::Instant;

use crate::{
    address::Addresses,
    admin::{AdminError, ReplicationInfo, Role, WriteFence, info::sync_lag},
    clients::{CallFailure, RedisClients},
    resources::SENTINEL_PRIMARY_NAME,
};

/// How long the primary's writes are held at most: the server resumes them by itself after
/// this, whatever becomes of the operator.
pub const WRITE_PAUSE: Duration = Duration::from_secs(15);
/// Every step of a handover is done this long before the pause ends.
const MARGIN: Duration = Duration::from_secs(3);
/// How long the replicas have to reach the held primary's offset: short, as the Sentinels'
/// own messages to a held primary wait too.
const CATCH_UP: Duration = Duration::from_secs(3);
/// The time left inside the pause for the Sentinel to name a new primary, below which the
/// failover is not asked for.
const PROMOTION: Duration = Duration::from_secs(6);
const POLL: Duration = Duration::from_millis(100);

/// The nodes of one handover.
pub struct Handover<'a> {
    pub clients: &'a RedisClients,
    pub cluster: &'a str,
    pub addresses: &'a Addresses,
    pub primary: usize,
    /// The address the servers know the primary by (the one its replicas follow).
    pub primary_address: SocketAddr,
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
    /// again only where that is safe (see the module's documentation).
    pub async fn run(&self) -> Result<usize, CallFailure> {
        let from = self.sentinel_primary_address().await?;
        let fence = self
            .node(
                self.primary,
                "write_fence",
                Idempotency::Read,
                |admin| async move { admin.write_fence().await },
            )
            .await?;
        let deadline = Instant::now() + WRITE_PAUSE - MARGIN;
        self.node(
            self.primary,
            "client_pause_write",
            Idempotency::Mutation,
            |admin| async move { admin.pause_writes(WRITE_PAUSE).await },
        )
        .await?;
        let unmeetable = WriteFence {
            min_replicas: u32::try_from(self.replicas.len() + 1).unwrap_or(u32::MAX),
            max_lag_seconds: fence.max_lag_seconds,
        };
        let outcome = async {
            self.node(
                self.primary,
                "set_write_fence",
                Idempotency::Mutation,
                |admin| async move { admin.set_write_fence(unmeetable).await },
            )
            .await?;
            self.promote(from, deadline).await
        }
        .await;
        match outcome {
            Ok((promoted, address)) => {
                self.follow(address, deadline).await?;
                self.release().await;
                Ok(promoted)
            }
            Err(error) => {
                self.recover(from, fence, deadline).await;
                Err(error)
            }
        }
    }

    /// Steps 2 and 3: the replicas catch up, the Sentinel promotes one.
    async fn promote(
        &self,
        from: Option<SocketAddr>,
        deadline: Instant,
    ) -> Result<(usize, SocketAddr), CallFailure> {
        self.caught_up((Instant::now() + CATCH_UP).min(deadline)).await?;
        if deadline.saturating_duration_since(Instant::now()) < PROMOTION {
            return Err(self.ran_out("no time left inside the pause for a failover".into()));
        }
        self.sentinel_call("sentinel_failover", Idempotency::Mutation, |admin| async move {
            admin.failover(SENTINEL_PRIMARY_NAME).await
        })
        .await?;
        loop {
            if let Some((ordinal, address)) = self.promoted(from).await?
                && self.role(ordinal).await? == Role::Primary
            {
                return Ok((ordinal, address));
            }
            if Instant::now() >= deadline {
                return Err(self.ran_out("the Sentinel named no replica as the new primary in time".into()));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The replica the Sentinel names as the primary now, if it names one other than `from`.
    async fn promoted(&self, from: Option<SocketAddr>) -> Result<Option<(usize, SocketAddr)>, CallFailure> {
        let named = self.sentinel_primary_address().await?;
        Ok(named
            .filter(|address| Some(*address) != from)
            .and_then(|address| self.replicas.iter().copied().find(|(_, a)| *a == address)))
    }

    /// Step 2: every replica follows the primary, is not loading a snapshot, and has
    /// processed its whole stream.
    async fn caught_up(&self, deadline: Instant) -> Result<(), CallFailure> {
        loop {
            let held = self.replication_info(self.primary).await?;
            let mut behind = Vec::new();
            for &(ordinal, _) in &self.replicas {
                let info = self.replication_info(ordinal).await?;
                if let Some(missing) = sync_lag(&held, &info, self.primary_address) {
                    behind.push(format!("node {ordinal}: {missing}"));
                }
            }
            if behind.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.ran_out(format!(
                    "the replicas did not reach the primary's offset {} in time: {}",
                    held.offset,
                    behind.join(", ")
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Step 4: the old primary follows the new one, tried again until the deadline.
    async fn follow(&self, primary: SocketAddr, deadline: Instant) -> Result<(), CallFailure> {
        loop {
            let followed = self
                .node(
                    self.primary,
                    "replicaof",
                    Idempotency::Mutation,
                    |admin| async move { admin.ensure_replica_of(primary).await },
                )
                .await;
            match followed {
                Ok(()) => return Ok(()),
                Err(error) if Instant::now() >= deadline => return Err(error),
                Err(_) => tokio::time::sleep(POLL).await,
            }
        }
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

    /// After a failed step: if the Sentinel names a replica now, the old primary follows it
    /// before its writes are released; if it still names the old primary and no failover is
    /// under way, the fence is set back and the writes released. Otherwise they stay held until
    /// the pause ends, and fenced after.
    async fn recover(&self, from: Option<SocketAddr>, fence: WriteFence, deadline: Instant) {
        if let Ok(Some((_, address))) = self.promoted(from).await {
            if self.follow(address, deadline).await.is_ok() {
                self.release().await;
            }
            return;
        }
        let watched = self
            .sentinel_call("sentinel_master", Idempotency::Read, |admin| async move {
                admin.primary(SENTINEL_PRIMARY_NAME).await
            })
            .await;
        let unchanged =
            watched.is_ok_and(|primary| Some(primary.address) == from && !primary.flags.failover_in_progress);
        if !unchanged {
            return;
        }
        let fenced_back = self
            .node(
                self.primary,
                "set_write_fence",
                Idempotency::Mutation,
                |admin| async move { admin.set_write_fence(fence).await },
            )
            .await;
        if fenced_back.is_ok() {
            self.release().await;
        }
    }

    async fn role(&self, ordinal: usize) -> Result<Role, CallFailure> {
        Ok(self.replication_info(ordinal).await?.role)
    }

    async fn replication_info(&self, ordinal: usize) -> Result<ReplicationInfo, CallFailure> {
        self.node(
            ordinal,
            "replication_info",
            Idempotency::Read,
            |admin| async move { admin.replication_info().await },
        )
        .await
    }

    /// The address the Sentinel names the primary at.
    async fn sentinel_primary_address(&self) -> Result<Option<SocketAddr>, CallFailure> {
        self.sentinel_call("sentinel_get_primary", Idempotency::Read, |admin| async move {
            admin.primary_address(SENTINEL_PRIMARY_NAME).await
        })
        .await
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
