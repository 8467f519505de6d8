//! Taking a decided step through the servers' admin statements. No Kubernetes here: pod
//! labels and the StatefulSet are the reconciler's.
//!
//! Every step is safe to take again: a crash between two statements resumes, it does not
//! repeat something harmful. A new primary is made to wait for its replicas (semi-sync) before
//! it is opened for writes, so no write is ever acknowledged by it alone.

use std::time::Duration;

use quorum_core::availability::retry::{CallError, Idempotency};
use secrecy::SecretString;

use crate::{
    address::Addresses,
    admin::{AdminError, MySqlAdmin, ReplicationSource, SemiSyncRole, snapshot},
    crd::BackupMethod,
    decide::{Reason, Step},
    observe::MySqlClients,
    resources::REPLICATION_USER,
    restore::{RestoreError, StoredSnapshot, restore_snapshot},
};

/// How long a new primary may take to apply what it already received.
pub const RELAY_LOG_WAIT: Duration = Duration::from_secs(20);
/// How long a switchover waits for the target to catch up before giving the primary back.
pub const SWITCHOVER_CATCH_UP: Duration = Duration::from_secs(30);
/// One server-side wait for the switchover target, repeated until [`SWITCHOVER_CATCH_UP`].
const CATCH_UP_POLL: Duration = Duration::from_millis(500);

/// What a step needs besides the decision.
pub struct StepContext<'a> {
    pub clients: &'a MySqlClients,
    /// `namespace/name`.
    pub cluster: &'a str,
    pub addresses: &'a Addresses,
    /// The recorded primary, for steps that wire replicas.
    pub primary: Option<usize>,
    pub replication_password: &'a SecretString,
    pub tls: bool,
    /// Semi-sync acknowledgement as the spec asks: `Some(replicas to wait for)` or `None`.
    pub semi_sync_wait_for: Option<u32>,
    /// The backup a new cluster is restored from, while it has not been.
    pub restore: Option<&'a StoredSnapshot>,
}

/// How a step ended.
#[derive(Debug, PartialEq, Eq)]
pub enum StepOutcome {
    Done,
    /// Nothing harmful happened; the step is asked again next pass.
    NotYet(String),
}

/// Why a step failed; the servers are as they were, or as a retry of the step expects them.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("member {ordinal}: {source}")]
    Admin {
        ordinal: usize,
        #[source]
        source: CallError<AdminError>,
    },
    #[error("snapshot from member {from} into member {to}: {source}")]
    Seed {
        from: usize,
        to: usize,
        #[source]
        source: snapshot::SnapshotError,
    },
    #[error("restoring MySQLBackup {backup} into member {ordinal}: {source}")]
    Restore {
        backup: String,
        ordinal: usize,
        /// Boxed: the store's errors are large, and every step's result carries the room.
        #[source]
        source: Box<RestoreError>,
    },
    #[error("{0}")]
    Refused(String),
    /// A switchover given up with the old primary reopened: nothing changed, so nothing of it
    /// is to be resumed.
    #[error("{0}")]
    SwitchoverAbandoned(String),
}

/// Takes one admin step.
pub async fn execute(context: &StepContext<'_>, step: &Step) -> Result<StepOutcome, StepError> {
    match *step {
        Step::OpenPrimary { ordinal } => open_primary(context, ordinal).await,
        Step::StartReplication { ordinal } => start_replication(context, ordinal, None).await,
        Step::SeedMember { ordinal } => seed_member(context, ordinal).await,
        Step::SetSemiSync { ordinal, on } => {
            let role = match (on, Some(ordinal) == context.primary) {
                (false, _) => SemiSyncRole::Off,
                (true, true) => source_role(context),
                (true, false) => SemiSyncRole::Replica,
            };
            call(context, ordinal, "set_semi_sync", move |admin| async move {
                admin.set_semi_sync(role).await
            })
            .await?;
            Ok(StepOutcome::Done)
        }
        Step::SetBinlogExpiry { ordinal, seconds } => {
            call(context, ordinal, "set_binlog_expiry", move |admin| async move {
                admin.set_binlog_expiry(seconds).await
            })
            .await?;
            Ok(StepOutcome::Done)
        }
        Step::FenceMember { ordinal } => {
            fence(context, ordinal).await?;
            Ok(StepOutcome::Done)
        }
        Step::Failover { from, to } => failover(context, from, to).await,
        Step::Switchover { from, to } => switchover(context, from, to).await,
        Step::RemoveMember { ordinal } => {
            call(context, ordinal, "stop_replication", |admin| async move {
                admin.stop_replication().await
            })
            .await?;
            Ok(StepOutcome::Done)
        }
        Step::Restore { ordinal, resume } => restore(context, ordinal, resume).await,
        // Kubernetes steps, taken by the reconcile: the StatefulSet's size, a pod deleted.
        Step::ScalePods { .. }
        | Step::RestartMember { .. }
        | Step::WipeMember { .. }
        | Step::ClearInFlight => Ok(StepOutcome::Done),
    }
}

fn source_role(context: &StepContext<'_>) -> SemiSyncRole {
    semi_sync_source_role(context.semi_sync_wait_for)
}

/// A primary's semi-sync role: waiting for `wait_for` replicas' acknowledgement of each commit
/// (none: asynchronous).
pub fn semi_sync_source_role(wait_for: Option<u32>) -> SemiSyncRole {
    match wait_for {
        Some(wait_for) => SemiSyncRole::Source {
            wait_for,
            // No fallback to asynchronous commits: an acknowledged write is on a replica.
            timeout: Duration::from_secs(u64::from(u32::MAX) / 1000),
        },
        None => SemiSyncRole::Off,
    }
}

/// Makes `ordinal` a primary: no source, semi-sync as asked, then writable. The order matters:
/// opened first, it could acknowledge a write no replica has.
async fn open_primary(context: &StepContext<'_>, ordinal: usize) -> Result<StepOutcome, StepError> {
    call(context, ordinal, "stop_replication", |admin| async move {
        admin.stop_replication().await
    })
    .await?;
    let role = source_role(context);
    call(context, ordinal, "set_semi_sync", move |admin| async move {
        admin.set_semi_sync(role).await
    })
    .await?;
    call(context, ordinal, "set_read_only", |admin| async move {
        admin.set_read_only(false).await
    })
    .await?;
    Ok(StepOutcome::Done)
}

fn replication_source(context: &StepContext<'_>, primary: usize) -> ReplicationSource {
    ReplicationSource {
        host: context.addresses.host(primary),
        port: context.addresses.port(),
        user: REPLICATION_USER.to_string(),
        password: context.replication_password.clone(),
        tls: context.tls,
        semi_sync: context.semi_sync_wait_for.is_some(),
    }
}

async fn start_replication(
    context: &StepContext<'_>,
    ordinal: usize,
    start_at: Option<crate::admin::gtid::GtidPosition>,
) -> Result<StepOutcome, StepError> {
    let Some(primary) = context.primary else {
        return Ok(StepOutcome::NotYet("no primary yet".into()));
    };
    let source = replication_source(context, primary);
    call(context, ordinal, "configure_replica", move |admin| {
        let source = source.clone();
        let start_at = start_at.clone();
        async move { admin.configure_replica(&source, start_at.as_ref()).await }
    })
    .await?;
    Ok(StepOutcome::Done)
}

/// Streams a consistent snapshot of the primary into an empty member, then replicates from
/// the snapshot's position. A failed or truncated stream is refused by the receiving end, and
/// the member stays empty as far as the decision is concerned (no source configured).
async fn seed_member(context: &StepContext<'_>, ordinal: usize) -> Result<StepOutcome, StepError> {
    let Some(primary) = context.primary else {
        return Ok(StepOutcome::NotYet("no primary yet".into()));
    };
    let donor = admin_of(context, primary).await?;
    let receiver = admin_of(context, ordinal).await?;
    let (writer, reader) = tokio::io::duplex(1 << 20);
    let out = async move {
        let mut writer = writer;
        snapshot::snapshot_out(&donor, &["root", REPLICATION_USER], &mut writer).await
    };
    let into = async move { snapshot::snapshot_in(&receiver, tokio::io::BufReader::new(reader)).await };
    let (sent, received) = tokio::join!(out, into);
    let seed_error = |source| StepError::Seed {
        from: primary,
        to: ordinal,
        source,
    };
    sent.map_err(seed_error)?;
    let position = received.map_err(seed_error)?;
    start_replication(context, ordinal, Some(position)).await
}

/// Restores the backup into `ordinal`, which stays read-only. A member the operator was not
/// already restoring into must hold no table: the decision saw no GTID history on it, but data
/// written without one is still data.
async fn restore(context: &StepContext<'_>, ordinal: usize, resume: bool) -> Result<StepOutcome, StepError> {
    let Some(snapshot) = context.restore else {
        return Ok(StepOutcome::NotYet("the backup to restore is not known".into()));
    };
    if snapshot.method == BackupMethod::Physical {
        // The member's init container restored the copy's files before its server started
        // (the decision saw it report so): the server takes the copy's history, which its
        // binary log, not part of a copy, does not hold.
        let position = &snapshot.position;
        call(context, ordinal, "adopt_position", |admin| async move {
            admin.adopt_position(position).await
        })
        .await?;
        return Ok(StepOutcome::Done);
    }
    if !resume {
        let tables = call(context, ordinal, "user_tables", |admin| async move {
            admin.user_tables(5).await
        })
        .await?;
        if !tables.is_empty() {
            return Err(StepError::Refused(format!(
                "member {ordinal} holds tables ({}); a backup is restored only into an empty member, never over data",
                tables.join(", ")
            )));
        }
    }
    let admin = admin_of(context, ordinal).await?;
    restore_snapshot(&admin, snapshot)
        .await
        .map_err(|source| StepError::Restore {
            backup: snapshot.backup.clone(),
            ordinal,
            source: Box::new(source),
        })?;
    Ok(StepOutcome::Done)
}

/// The primary is down as its replicas testify. The reconciler has already taken it out of the
/// primary Service. Fence it where it can still be reached, let the candidate apply what it
/// received, then open the candidate.
async fn failover(context: &StepContext<'_>, from: usize, to: usize) -> Result<StepOutcome, StepError> {
    // Best effort: the old primary is usually unreachable; it restarts read-only anyway.
    let _ = call(context, from, "set_read_only", |admin| async move {
        admin.set_read_only(true).await
    })
    .await;
    let applied = call(context, to, "wait_relay_log_applied", |admin| async move {
        admin.wait_relay_log_applied(RELAY_LOG_WAIT).await
    })
    .await?;
    if !applied {
        return Ok(StepOutcome::NotYet(format!(
            "member {to} is still applying what it received from the old primary"
        )));
    }
    open_primary(context, to).await
}

/// Makes `ordinal` read-only and closes its clients' connections (not the operator's nor
/// replication's): no client commits there any more.
async fn fence(context: &StepContext<'_>, ordinal: usize) -> Result<(), StepError> {
    call(context, ordinal, "set_read_only", |admin| async move {
        admin.set_read_only(true).await
    })
    .await?;
    call(context, ordinal, "kill_client_connections", |admin| async move {
        admin.kill_client_connections(&["root", REPLICATION_USER]).await
    })
    .await?;
    Ok(())
}

/// Hands the primary role from `from` to `to` without losing an acknowledged write: `from` is
/// made read-only and its client connections closed, `to` applies everything `from` executed,
/// then `to` opens. When `to` does not catch up in time, `from` is opened again and nothing
/// else has changed.
async fn switchover(context: &StepContext<'_>, from: usize, to: usize) -> Result<StepOutcome, StepError> {
    fence(context, from).await?;
    let executed = call(
        context,
        from,
        "report",
        |admin| async move { admin.report().await },
    )
    .await?
    .executed;
    // Waited for in short server-side waits, each well within one admin call's timeout: a
    // single long wait would be cut by that timeout and leave the primary read-only for ever.
    let deadline = std::time::Instant::now() + SWITCHOVER_CATCH_UP;
    let caught_up = loop {
        let reached = call(context, to, "wait_for_executed", |admin| {
            let executed = executed.clone();
            async move { admin.wait_for_executed(&executed, CATCH_UP_POLL).await }
        })
        .await?;
        if reached || std::time::Instant::now() >= deadline {
            break reached;
        }
    };
    if !caught_up {
        call(context, from, "set_read_only", |admin| async move {
            admin.set_read_only(false).await
        })
        .await?;
        return Err(StepError::SwitchoverAbandoned(format!(
            "member {to} did not apply the primary's transactions within {}s; the primary was reopened and nothing changed",
            SWITCHOVER_CATCH_UP.as_secs()
        )));
    }
    open_primary(context, to).await
}

async fn admin_of(context: &StepContext<'_>, ordinal: usize) -> Result<MySqlAdmin, StepError> {
    call(context, ordinal, "connect", |admin| async move { Ok(admin) }).await
}

/// One statement-level call to `ordinal`, through the availability layer. Writes are not
/// retried by the layer: the next pass decides again from fresh observations.
async fn call<T, F, Fut>(
    context: &StepContext<'_>,
    ordinal: usize,
    verb: &'static str,
    verb_call: F,
) -> Result<T, StepError>
where
    F: Fn(MySqlAdmin) -> Fut,
    Fut: Future<Output = Result<T, AdminError>>,
{
    context
        .clients
        .call(
            context.cluster,
            context.addresses,
            ordinal,
            verb,
            Idempotency::Mutation,
            verb_call,
        )
        .await
        .map_err(|source| StepError::Admin { ordinal, source })
}

/// How a failed step is reported, and what of it is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepFailure {
    pub reason: Reason,
    /// The step was given up with nothing changed: its record in flight and the switchover
    /// request go, or every retry would take it again (a switchover would make the primary
    /// read-only again each time).
    pub abandoned: bool,
}

/// The report of a failed step: a switchover given up is refused and abandoned; any other
/// failure is `StepFailed`, its record kept so the step is resumed.
pub fn step_failure(error: &StepError) -> StepFailure {
    match error {
        StepError::SwitchoverAbandoned(_) => StepFailure {
            reason: Reason::SwitchoverRefused,
            abandoned: true,
        },
        StepError::Admin { .. }
        | StepError::Seed { .. }
        | StepError::Restore { .. }
        | StepError::Refused(_) => StepFailure {
            reason: Reason::StepFailed,
            abandoned: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switchover_given_up_is_refused_and_abandoned_any_other_failure_is_resumed() {
        let cases = [
            (
                StepError::SwitchoverAbandoned("member 2 did not apply the primary's transactions".into()),
                StepFailure {
                    reason: Reason::SwitchoverRefused,
                    abandoned: true,
                },
            ),
            (
                StepError::Admin {
                    ordinal: 1,
                    source: quorum_core::availability::retry::CallError::Timeout(
                        std::time::Duration::from_secs(5),
                    ),
                },
                StepFailure {
                    reason: Reason::StepFailed,
                    abandoned: false,
                },
            ),
            (
                StepError::Refused("member 0 holds tables (shop.orders)".into()),
                StepFailure {
                    reason: Reason::StepFailed,
                    abandoned: false,
                },
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(step_failure(&error), expected, "{error}");
        }
        assert!(Reason::SwitchoverRefused.ends_switchover_request());
        let others: Vec<Reason> = Reason::ALL
            .iter()
            .copied()
            .filter(|r| r.ends_switchover_request())
            .collect();
        assert_eq!(others, [Reason::SwitchoverRefused]);
    }
}
