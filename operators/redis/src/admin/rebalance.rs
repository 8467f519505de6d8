//! The plan of slot moves that brings a cluster's primaries to an even share of the 16384
//! slots: pure, so it is table-tested.
//!
//! Every move goes through [`super::migrate::migrate_slot`], which keeps its slot served at
//! every moment, so any order of moves keeps all slots covered; the plan only decides which
//! slots move where. It moves the fewest slots: each desired primary ends with 16384 / n slots
//! (the remainder going one each to those holding most already), a primary keeps its own
//! slots up to its share, and only the surplus moves. Primaries leaving the cluster give up
//! every slot, and are listed first, so a scale-in that stops halfway has emptied what it could.

use std::collections::{BTreeMap, BTreeSet};

use super::cluster::{SLOT_COUNT, SlotRange};

/// One step of a plan: move `slots` from primary `from` to primary `to` (node ids).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotMove {
    pub slots: SlotRange,
    pub from: String,
    pub to: String,
}

/// Why no plan can be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("no primary would remain to serve the slots")]
    NoPrimaries,
    /// The current assignment leaves slots unserved or serves some twice; assign or fix those
    /// first (`CLUSTER ADDSLOTS`), a move cannot.
    #[error("the current assignment covers {covered} of {SLOT_COUNT} slots once ({duplicated} twice)")]
    Incomplete { covered: usize, duplicated: usize },
    /// A primary cannot be removed while it serves slots.
    #[error("{node} still owns {slots} slots; move them off before removing it")]
    StillOwnsSlots { node: String, slots: usize },
}

/// Plans the moves from `current` (each primary's slots) to an even share over `desired`.
/// Primaries in `current` but not in `desired` give up all their slots; those in `desired` but
/// not in `current` start with none. Already balanced: no moves.
///
/// # Errors
/// [`PlanError::NoPrimaries`] when `desired` is empty; [`PlanError::Incomplete`] when `current`
/// does not cover each slot exactly once.
pub fn plan_rebalance(
    current: &BTreeMap<String, Vec<SlotRange>>,
    desired: &BTreeSet<String>,
) -> Result<Vec<SlotMove>, PlanError> {
    if desired.is_empty() {
        return Err(PlanError::NoPrimaries);
    }
    check_coverage(current)?;
    let owned: BTreeMap<&str, Vec<u16>> = current
        .iter()
        .map(|(id, ranges)| (id.as_str(), ranges.iter().flat_map(SlotRange::slots).collect()))
        .collect();
    let targets = target_counts(&owned, desired);

    // What each giver hands over: a leaving primary all it has, a staying one its surplus,
    // taken from the top of its slots so what it keeps stays in as few ranges as possible.
    let mut givers: Vec<(&str, Vec<u16>)> = owned
        .iter()
        .filter_map(|(id, slots)| {
            let keep = targets.get(id).copied().unwrap_or(0);
            (slots.len() > keep).then(|| (*id, slots[keep..].to_vec()))
        })
        .collect();
    givers.sort_by_key(|(id, _)| (desired.contains(*id), *id));

    let mut takers: Vec<(&str, usize)> = targets
        .iter()
        .filter_map(|(id, target)| {
            let have = owned.get(id).map_or(0, Vec::len);
            (*target > have).then(|| (*id, target - have))
        })
        .collect();

    let mut moves = Vec::new();
    for (from, slots) in givers {
        let mut slots = slots.as_slice();
        while !slots.is_empty() {
            let (to, wanted) = takers
                .iter_mut()
                .find(|(_, wanted)| *wanted > 0)
                .expect("surplus and deficit are equal");
            let count = (*wanted).min(slots.len());
            moves.extend(as_moves(&slots[..count], from, to));
            *wanted -= count;
            slots = &slots[count..];
        }
    }
    takers.retain(|(_, wanted)| *wanted > 0);
    debug_assert!(takers.is_empty());
    Ok(moves)
}

/// Refuses to remove `node` while it owns slots in `current`.
///
/// # Errors
/// [`PlanError::StillOwnsSlots`] with how many.
pub fn check_removable(current: &BTreeMap<String, Vec<SlotRange>>, node: &str) -> Result<(), PlanError> {
    let slots: usize = current
        .get(node)
        .map_or(0, |ranges| ranges.iter().map(SlotRange::len).sum());
    if slots == 0 {
        Ok(())
    } else {
        Err(PlanError::StillOwnsSlots {
            node: node.to_string(),
            slots,
        })
    }
}

fn check_coverage(current: &BTreeMap<String, Vec<SlotRange>>) -> Result<(), PlanError> {
    let mut seen = vec![0u8; usize::from(SLOT_COUNT)];
    for slot in current.values().flatten().flat_map(SlotRange::slots) {
        if let Some(count) = seen.get_mut(usize::from(slot)) {
            *count = count.saturating_add(1);
        }
    }
    let covered = seen.iter().filter(|count| **count == 1).count();
    let duplicated = seen.iter().filter(|count| **count > 1).count();
    if covered == usize::from(SLOT_COUNT) {
        Ok(())
    } else {
        Err(PlanError::Incomplete { covered, duplicated })
    }
}

/// Each desired primary's share: 16384 / n, one more for the first 16384 % n of them in order
/// of how many they hold now (most first, then by id), so the remainder stays where it is.
fn target_counts<'a>(
    owned: &BTreeMap<&str, Vec<u16>>,
    desired: &'a BTreeSet<String>,
) -> BTreeMap<&'a str, usize> {
    let total = usize::from(SLOT_COUNT);
    let share = total / desired.len();
    let remainder = total % desired.len();
    let mut by_holding: Vec<&str> = desired.iter().map(String::as_str).collect();
    by_holding.sort_by_key(|id| (std::cmp::Reverse(owned.get(id).map_or(0, Vec::len)), *id));
    by_holding
        .into_iter()
        .enumerate()
        .map(|(rank, id)| (id, share + usize::from(rank < remainder)))
        .collect()
}

/// Sorted slots as moves of contiguous ranges.
fn as_moves(slots: &[u16], from: &str, to: &str) -> Vec<SlotMove> {
    let mut moves: Vec<SlotMove> = Vec::new();
    for &slot in slots {
        match moves.last_mut() {
            Some(last) if last.slots.end + 1 == slot => last.slots.end = slot,
            _ => moves.push(SlotMove {
                slots: SlotRange::single(slot),
                from: from.to_string(),
                to: to.to_string(),
            }),
        }
    }
    moves
}

/// The even split redis-cli makes for a new cluster of `count` primaries: contiguous ranges,
/// the remainder one each to the first.
pub fn initial_ranges(count: usize) -> Vec<SlotRange> {
    let total = usize::from(SLOT_COUNT);
    let count = count.max(1);
    let mut start = 0usize;
    (0..count)
        .map(|index| {
            let size = total / count + usize::from(index < total % count);
            let range = SlotRange::new(start as u16, (start + size - 1) as u16);
            start += size;
            range
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    fn even(names: &[&str]) -> BTreeMap<String, Vec<SlotRange>> {
        names
            .iter()
            .zip(initial_ranges(names.len()))
            .map(|(name, range)| (name.to_string(), vec![range]))
            .collect()
    }

    /// Applies `moves` to `current`, asserting each moves slots its giver owns.
    fn apply(
        current: &BTreeMap<String, Vec<SlotRange>>,
        moves: &[SlotMove],
    ) -> BTreeMap<String, BTreeSet<u16>> {
        let mut slots: BTreeMap<String, BTreeSet<u16>> = current
            .iter()
            .map(|(id, ranges)| (id.clone(), ranges.iter().flat_map(SlotRange::slots).collect()))
            .collect();
        for step in moves {
            for slot in step.slots.slots() {
                assert!(
                    slots.get_mut(&step.from).unwrap().remove(&slot),
                    "{step:?} moves slot {slot} its giver does not own"
                );
                slots.entry(step.to.clone()).or_default().insert(slot);
            }
        }
        slots
    }

    fn moved(moves: &[SlotMove]) -> usize {
        moves.iter().map(|step| step.slots.len()).sum()
    }

    fn counts(after: &BTreeMap<String, BTreeSet<u16>>) -> BTreeMap<&str, usize> {
        after
            .iter()
            .map(|(id, slots)| (id.as_str(), slots.len()))
            .collect()
    }

    #[test]
    fn the_initial_split_covers_every_slot() {
        assert_eq!(
            initial_ranges(3),
            vec![
                SlotRange::new(0, 5461),
                SlotRange::new(5462, 10922),
                SlotRange::new(10923, 16383)
            ]
        );
        assert_eq!(initial_ranges(1), vec![SlotRange::new(0, 16383)]);
    }

    #[test]
    fn scaling_three_to_four_moves_a_quarter_to_the_new_primary_only() {
        let current = even(&["a", "b", "c"]);
        let moves = plan_rebalance(&current, &ids(&["a", "b", "c", "d"])).unwrap();
        assert!(moves.iter().all(|step| step.to == "d"));
        assert_eq!(moved(&moves), 4096);
        let after = apply(&current, &moves);
        assert_eq!(
            counts(&after),
            BTreeMap::from([("a", 4096), ("b", 4096), ("c", 4096), ("d", 4096)])
        );
        assert_eq!(moves.len(), 3, "one contiguous range from each giver: {moves:?}");
    }

    #[test]
    fn scaling_four_to_three_empties_the_leaving_primary_first() {
        let current = even(&["a", "b", "c", "d"]);
        let moves = plan_rebalance(&current, &ids(&["a", "b", "c"])).unwrap();
        assert!(moves.iter().all(|step| step.from == "d"), "{moves:?}");
        assert_eq!(moved(&moves), 4096);
        let after = apply(&current, &moves);
        assert_eq!(
            counts(&after),
            BTreeMap::from([("a", 5462), ("b", 5461), ("c", 5461), ("d", 0)])
        );
    }

    #[test]
    fn replacing_a_primary_moves_only_its_slots() {
        let current = even(&["a", "b", "c"]);
        let moves = plan_rebalance(&current, &ids(&["a", "b", "d"])).unwrap();
        assert_eq!(
            moves,
            vec![SlotMove {
                slots: SlotRange::new(10923, 16383),
                from: "c".into(),
                to: "d".into()
            }]
        );
    }

    #[test]
    fn an_uneven_start_moves_only_the_surplus() {
        let current = BTreeMap::from([
            ("a".to_string(), vec![SlotRange::new(0, 9999)]),
            (
                "b".to_string(),
                vec![SlotRange::new(10000, 12000), SlotRange::new(14000, 16383)],
            ),
            ("c".to_string(), vec![SlotRange::new(12001, 13999)]),
        ]);
        let moves = plan_rebalance(&current, &ids(&["a", "b", "c"])).unwrap();
        let after = apply(&current, &moves);
        assert_eq!(
            counts(&after),
            BTreeMap::from([("a", 5462), ("b", 5461), ("c", 5461)])
        );
        // a gives 4538; b has 4385 and gets 1076, c has 1999 and gets 3462.
        assert_eq!(moved(&moves), 4538);
        assert!(moves.iter().all(|step| step.from == "a"));
    }

    #[test]
    fn a_balanced_cluster_needs_no_moves() {
        for count in 1..=7 {
            let names: Vec<String> = (0..count).map(|i| format!("n{i}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            assert_eq!(
                plan_rebalance(&even(&names), &ids(&names)).unwrap(),
                vec![],
                "{count} primaries"
            );
        }
    }

    #[test]
    fn an_empty_desired_set_or_incomplete_coverage_is_refused() {
        assert_eq!(
            plan_rebalance(&even(&["a"]), &ids(&[])),
            Err(PlanError::NoPrimaries)
        );
        let gap = BTreeMap::from([("a".to_string(), vec![SlotRange::new(0, 16000)])]);
        assert_eq!(
            plan_rebalance(&gap, &ids(&["a"])),
            Err(PlanError::Incomplete {
                covered: 16001,
                duplicated: 0
            })
        );
        let twice = BTreeMap::from([
            ("a".to_string(), vec![SlotRange::new(0, 16383)]),
            ("b".to_string(), vec![SlotRange::single(5)]),
        ]);
        assert!(matches!(
            plan_rebalance(&twice, &ids(&["a", "b"])),
            Err(PlanError::Incomplete { duplicated: 1, .. })
        ));
    }

    #[test]
    fn a_primary_with_slots_is_not_removable() {
        let current = even(&["a", "b"]);
        assert_eq!(
            check_removable(&current, "b"),
            Err(PlanError::StillOwnsSlots {
                node: "b".into(),
                slots: 8192
            })
        );
        let mut emptied = current.clone();
        emptied.insert("b".into(), vec![]);
        assert_eq!(check_removable(&emptied, "b"), Ok(()));
        assert_eq!(check_removable(&current, "unknown"), Ok(()));
    }
}
