//! Moving one hash slot from one primary to another without losing keys or availability, as
//! `redis-cli --cluster reshard` does (cluster specification, "Live resharding"):
//!
//! 1. the target: `CLUSTER SETSLOT slot IMPORTING source`;
//! 2. the source: `CLUSTER SETSLOT slot MIGRATING target`; from now on the source answers `ASK`
//!    for keys of the slot it no longer has, so clients write new keys to the target;
//! 3. the source: `GETKEYSINSLOT` and `MIGRATE ... KEYS` in batches until it holds none;
//! 4. `CLUSTER SETSLOT slot NODE target` on the target first (it bumps its config epoch, so its
//!    claim wins in gossip), then on the source, then, best effort, on every other primary.
//!
//! [`migrate_slot`] is resumable: it first reads the slot's state from both nodes' own views and
//! takes only the steps not yet taken, so calling it again after a crash at any point completes
//! the move. `MIGRATE` runs with `REPLACE`: a batch whose reply was lost may have been stored on
//! the target but not yet deleted on the source, and while the source still holds a key, every
//! client write to it went to the source, so the source's copy is the one to keep.

use std::time::Duration;

use super::{
    AdminError, RedisAdmin,
    cluster::{MigrateOptions, SlotRange, SlotState, myself},
};

/// How a slot's keys are moved.
#[derive(Clone, Copy, Debug)]
pub struct MigrationSettings {
    /// Keys per `MIGRATE`.
    pub batch_size: usize,
    /// How long the source waits for the target per `MIGRATE`.
    pub migrate_timeout: Duration,
}

impl Default for MigrationSettings {
    fn default() -> Self {
        Self {
            batch_size: 100,
            migrate_timeout: Duration::from_secs(5),
        }
    }
}

/// Why a slot could not be moved.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// Neither node owns the slot in its own view: moving it could take it from a third node
    /// or from nobody, so nothing is done.
    #[error("slot {slot} is owned by neither {source_node} nor {target_node}")]
    NotOwned {
        slot: u16,
        source_node: String,
        target_node: String,
    },
    /// The source does not know the target's address, so it cannot `MIGRATE` to it.
    #[error("{source_node} has no address for {target_node}; CLUSTER MEET it first")]
    TargetUnknown {
        source_node: String,
        target_node: String,
    },
}

/// What [`migrate_slot`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MigrationReport {
    /// Keys moved by this call (a resumed call counts only its own).
    pub keys_moved: u64,
    /// The slot was already the target's when the call started; only the other nodes' views
    /// were brought up to date.
    pub already_done: bool,
}

/// Moves `slot` from `source` to `target` (both primaries of one cluster), then tells `others`
/// (the remaining primaries) its new owner, best effort: gossip tells them anyway.
///
/// # Errors
/// [`MigrationError::NotOwned`] when neither node owns the slot; the first refused or failed
/// call otherwise. Every error leaves a state this function resumes from.
pub async fn migrate_slot(
    source: &RedisAdmin,
    target: &RedisAdmin,
    slot: u16,
    others: &[RedisAdmin],
    settings: MigrationSettings,
) -> Result<MigrationReport, MigrationError> {
    resume_slot(source, target, slot, others, settings)
        .await
        .map(|(report, _)| report)
}

/// The two nodes of a move as the source knows them, learned by [`resume_slot`].
struct Pair {
    source_id: String,
    target_id: String,
    target_address: std::net::SocketAddr,
}

/// [`migrate_slot`], which also returns the pair it learned (`None` when the slot was the
/// target's already and the source knows no address for it).
async fn resume_slot(
    source: &RedisAdmin,
    target: &RedisAdmin,
    slot: u16,
    others: &[RedisAdmin],
    settings: MigrationSettings,
) -> Result<(MigrationReport, Option<Pair>), MigrationError> {
    let source_view = source.cluster_nodes().await?;
    let target_me = target.cluster_myself().await?;
    let source_me = myself(&source_view)
        .cloned()
        .ok_or_else(|| source.unexpected("CLUSTER NODES", "no myself line"))?;
    let target_id = target_me.id.clone();
    // The address the source knows the target by: the one it can reach.
    let target_address = source_view
        .iter()
        .find(|node| node.id == target_id)
        .and_then(|node| node.address);
    let pair = target_address.map(|target_address| Pair {
        source_id: source_me.id.clone(),
        target_id: target_id.clone(),
        target_address,
    });

    if target_me.owns(slot) && target_me.importing_from(slot).is_none() {
        // Step 4 began: the target has taken the slot. Finish telling the others.
        announce_owner(source, others, slot, &target_id).await?;
        let report = MigrationReport {
            keys_moved: 0,
            already_done: true,
        };
        return Ok((report, pair));
    }
    if !source_me.owns(slot) {
        return Err(MigrationError::NotOwned {
            slot,
            source_node: source_me.id,
            target_node: target_id,
        });
    }
    if target_me.importing_from(slot) != Some(source_me.id.as_str()) {
        target
            .cluster_set_slot(slot, &SlotState::Importing(source_me.id.clone()))
            .await?;
    }
    if source_me.migrating_to(slot) != Some(target_id.as_str()) {
        source
            .cluster_set_slot(slot, &SlotState::Migrating(target_id.clone()))
            .await?;
    }
    let Some(pair) = pair else {
        return Err(MigrationError::TargetUnknown {
            source_node: source_me.id,
            target_node: target_id,
        });
    };
    let keys_moved = move_keys(source, target, pair.target_address, slot, settings).await?;
    target
        .cluster_set_slot(slot, &SlotState::Node(target_id.clone()))
        .await?;
    announce_owner(source, others, slot, &target_id).await?;
    let report = MigrationReport {
        keys_moved,
        already_done: false,
    };
    Ok((report, Some(pair)))
}

/// How many untouched slots [`migrate_untouched_slots`] moves together.
const UNTOUCHED_BATCH: usize = 128;

/// Moves slots that nothing has begun to move: those after one this pair just moved. The same
/// steps as [`migrate_slot`], each taken for every slot of the batch at once (the commands of
/// a step pipelined on each node's connection, the steps one after another), without first
/// reading both nodes' views: should a slot not be as assumed, a node refuses a step, the
/// error is returned, and [`migrate_slot`] resumes each slot from whatever state that left.
async fn migrate_untouched_slots(
    source: &RedisAdmin,
    target: &RedisAdmin,
    pair: &Pair,
    slots: &[u16],
    others: &[RedisAdmin],
    settings: MigrationSettings,
) -> Result<MigrationReport, MigrationError> {
    set_slots(target, slots, &SlotState::Importing(pair.source_id.clone())).await?;
    set_slots(source, slots, &SlotState::Migrating(pair.target_id.clone())).await?;
    let mut keys_moved = 0;
    for slot in slots {
        keys_moved += move_keys(source, target, pair.target_address, *slot, settings).await?;
    }
    let owner = SlotState::Node(pair.target_id.clone());
    set_slots(target, slots, &owner).await?;
    let released =
        futures::future::join_all(slots.iter().map(|slot| release_on_source(source, *slot, &owner))).await;
    released.into_iter().collect::<Result<(), AdminError>>()?;
    let told = others.iter().map(|other| set_slots(other, slots, &owner));
    for (other, told) in others.iter().zip(futures::future::join_all(told).await) {
        if let Err(error) = told {
            tracing::debug!(%error, node = other.endpoint(), "telling a primary the new slot owners");
        }
    }
    Ok(MigrationReport {
        keys_moved,
        already_done: false,
    })
}

/// Step 4 on the source: `CLUSTER SETSLOT slot NODE target` (`owner`).
async fn release_on_source(source: &RedisAdmin, slot: u16, owner: &SlotState) -> Result<(), AdminError> {
    if let Err(error) = source.cluster_set_slot(slot, owner).await {
        // Gossip can tell the source first. A source that so lost its last slot turns itself
        // into a replica of the target (cluster-allow-replica-migration) and refuses SETSLOT:
        // the move is complete when it neither owns nor migrates the slot any more.
        let source_me = source.cluster_myself().await?;
        if source_me.owns(slot) || source_me.migrating_to(slot).is_some() {
            return Err(error);
        }
    }
    Ok(())
}

/// `CLUSTER SETSLOT slot state` on `node` for every slot of `slots`, sent at once (pipelined
/// on its connection); the first refusal, after every answer.
async fn set_slots(node: &RedisAdmin, slots: &[u16], state: &SlotState) -> Result<(), AdminError> {
    let answers =
        futures::future::join_all(slots.iter().map(|slot| node.cluster_set_slot(*slot, state))).await;
    answers.into_iter().collect()
}

/// Moves every slot of `slots`, in order, until `deadline` (if any) has passed: the first
/// with [`migrate_slot`], which resumes whatever an earlier call left, the next ones in
/// batches without reading the nodes' views again (only the slots just moved were touched). The sum of their
/// reports and the number of slots moved.
///
/// # Errors
/// The first slot's error; the slots before it are moved, and calling again resumes.
pub async fn migrate_slots_until(
    source: &RedisAdmin,
    target: &RedisAdmin,
    slots: SlotRange,
    others: &[RedisAdmin],
    settings: MigrationSettings,
    deadline: Option<std::time::Instant>,
) -> Result<(MigrationReport, usize), MigrationError> {
    let mut total = MigrationReport {
        keys_moved: 0,
        already_done: true,
    };
    let mut moved = 0;
    let mut pair: Option<Pair> = None;
    let slots: Vec<u16> = slots.slots().collect();
    while moved < slots.len() {
        if deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline) {
            break;
        }
        let (report, count) = match &pair {
            Some(known) => {
                let batch = &slots[moved..(moved + UNTOUCHED_BATCH).min(slots.len())];
                let report = migrate_untouched_slots(source, target, known, batch, others, settings).await?;
                (report, batch.len())
            }
            None => {
                let (report, learned) = resume_slot(source, target, slots[moved], others, settings).await?;
                // A slot found moved already says nothing of the next one: read again.
                pair = learned.filter(|_| !report.already_done);
                (report, 1)
            }
        };
        total.keys_moved += report.keys_moved;
        total.already_done &= report.already_done;
        moved += count;
    }
    Ok((total, moved))
}

/// Moves every slot of `slots` with [`migrate_slots_until`], with no deadline.
///
/// # Errors
/// The first slot's error; the slots before it are moved, and calling again resumes.
pub async fn migrate_slots(
    source: &RedisAdmin,
    target: &RedisAdmin,
    slots: SlotRange,
    others: &[RedisAdmin],
    settings: MigrationSettings,
) -> Result<MigrationReport, MigrationError> {
    migrate_slots_until(source, target, slots, others, settings, None)
        .await
        .map(|(report, _)| report)
}

/// Step 3: `MIGRATE` batches until the source holds no key of `slot`.
async fn move_keys(
    source: &RedisAdmin,
    target: &RedisAdmin,
    target_address: std::net::SocketAddr,
    slot: u16,
    settings: MigrationSettings,
) -> Result<u64, AdminError> {
    let options = MigrateOptions {
        timeout: settings.migrate_timeout,
        replace: true,
    };
    let mut moved = 0u64;
    loop {
        let keys = source.keys_in_slot(slot, settings.batch_size.max(1)).await?;
        if keys.is_empty() {
            // GETKEYSINSLOT and COUNTKEYSINSLOT read the same index; asking both guards
            // against a short answer being read as "done".
            if source.count_keys_in_slot(slot).await? == 0 {
                return Ok(moved);
            }
            continue;
        }
        source
            .migrate_keys(target_address, target.credentials(), &keys, options)
            .await?;
        moved += keys.len() as u64;
    }
}

/// Step 4 after the target: the source must learn at once (it would otherwise keep answering
/// `ASK` for a slot it no longer serves); the others learn by gossip anyway, so their refusals
/// or absence are not errors.
async fn announce_owner(
    source: &RedisAdmin,
    others: &[RedisAdmin],
    slot: u16,
    target_id: &str,
) -> Result<(), AdminError> {
    let state = SlotState::Node(target_id.to_string());
    release_on_source(source, slot, &state).await?;
    let told = others.iter().map(|other| async {
        if let Err(error) = other.cluster_set_slot(slot, &state).await {
            tracing::debug!(%error, node = other.endpoint(), slot, "telling a primary the new slot owner");
        }
    });
    futures::future::join_all(told).await;
    Ok(())
}
