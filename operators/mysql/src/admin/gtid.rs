//! GTID positions: what a server has executed, in each flavor's own notation, and the
//! comparisons failover and errant-transaction detection rest on.
//!
//! - MariaDB: `domain-server-sequence` per replication domain (`0-1-42,1-2-7`), one entry per
//!   domain. Within a domain, sequence numbers only grow (the servers run with
//!   `gtid_strict_mode`), so a position with a higher sequence in a domain has executed
//!   everything a lower one has. Two positions with the same sequence in a domain but different
//!   originating servers have diverged: two servers each wrote their own transaction with it.
//! - MySQL: sets of `uuid:interval[:interval…]`, optionally tagged (`uuid:tag:interval`, 8.4).
//!   Sets are compared exactly, transaction by transaction.
//!
//! Positions of different flavors never include one another.

use std::collections::BTreeMap;
use std::fmt;

use crate::crd::Flavor;

/// What a server has executed (or received), in its flavor's GTID notation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GtidPosition {
    /// Per replication domain, the last transaction's originating server and sequence.
    MariaDb(BTreeMap<u32, MariaDbGtid>),
    /// Per source (uuid and optional tag), the executed transaction numbers as sorted,
    /// disjoint, non-adjacent closed intervals.
    MySql(BTreeMap<SourceId, Vec<(u64, u64)>>),
}

/// Transaction numbers as closed intervals `(first, last)`.
type Intervals = Vec<(u64, u64)>;

/// The last transaction of one MariaDB replication domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MariaDbGtid {
    pub server_id: u32,
    pub sequence: u64,
}

/// The source of MySQL transactions: the originating server's uuid (lower case) and, since
/// MySQL 8.3, an optional tag (lower case).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceId {
    pub uuid: String,
    pub tag: Option<String>,
}

/// Text that is not a GTID position of the flavor it was parsed as.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a {flavor:?} GTID position ({reason}): {text:?}")]
pub struct GtidParseError {
    pub flavor: Flavor,
    pub reason: &'static str,
    pub text: String,
}

/// Why [`most_advanced`] found no candidate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MostAdvancedError {
    #[error("no candidates")]
    NoCandidates,
    /// Candidates `left` and `right` each executed transactions the other did not: neither can
    /// be promoted without losing the other's.
    #[error("GTID positions diverged: candidates {left} and {right} each have transactions the other lacks")]
    Diverged { left: usize, right: usize },
}

impl GtidPosition {
    /// The position of a server that has executed nothing.
    pub fn empty(flavor: Flavor) -> Self {
        match flavor {
            Flavor::MariaDB => Self::MariaDb(BTreeMap::new()),
            Flavor::MySQL => Self::MySql(BTreeMap::new()),
        }
    }

    /// Parses the server's text (`@@gtid_binlog_pos`, `@@gtid_executed`, …). Whitespace and
    /// line breaks between entries are ignored; uuids and tags are case-insensitive.
    pub fn parse(flavor: Flavor, text: &str) -> Result<Self, GtidParseError> {
        let error = |reason| GtidParseError {
            flavor,
            reason,
            text: text.to_string(),
        };
        let entries = text
            .split(',')
            .map(|entry| entry.split_whitespace().collect::<String>())
            .filter(|entry| !entry.is_empty());
        match flavor {
            Flavor::MariaDB => {
                let mut domains = BTreeMap::new();
                for entry in entries {
                    let (domain, gtid) = parse_mariadb_entry(&entry).ok_or_else(|| error("bad entry"))?;
                    if domains.insert(domain, gtid).is_some() {
                        return Err(error("a domain appears twice"));
                    }
                }
                Ok(Self::MariaDb(domains))
            }
            Flavor::MySQL => {
                let mut sources: BTreeMap<SourceId, Vec<(u64, u64)>> = BTreeMap::new();
                for entry in entries {
                    for (source, intervals) in parse_mysql_entry(&entry).map_err(error)? {
                        sources.entry(source).or_default().extend(intervals);
                    }
                }
                for intervals in sources.values_mut() {
                    normalize(intervals);
                }
                sources.retain(|_, intervals| !intervals.is_empty());
                Ok(Self::MySql(sources))
            }
        }
    }

    pub fn flavor(&self) -> Flavor {
        match self {
            Self::MariaDb(_) => Flavor::MariaDB,
            Self::MySql(_) => Flavor::MySQL,
        }
    }

    /// True when no transaction is recorded.
    pub fn is_empty(&self) -> bool {
        match self {
            Self::MariaDb(domains) => domains.is_empty(),
            Self::MySql(sources) => sources.is_empty(),
        }
    }

    /// True when every transaction of `other` is in this position.
    ///
    /// MariaDB: every domain of `other` is present here with a higher sequence, or the same
    /// sequence from the same server. MySQL: `other` is a subset of this set. Positions of
    /// different flavors never include one another.
    pub fn includes(&self, other: &GtidPosition) -> bool {
        match (self, other) {
            (Self::MariaDb(mine), Self::MariaDb(theirs)) => theirs
                .iter()
                .all(|(domain, gtid)| mine.get(domain).is_some_and(|own| mariadb_covers(own, gtid))),
            (Self::MySql(mine), Self::MySql(theirs)) => theirs.iter().all(|(source, intervals)| {
                let own = mine.get(source).map(Vec::as_slice).unwrap_or_default();
                intervals.iter().all(|interval| covered(own, *interval))
            }),
            _ => false,
        }
    }

    /// How many transactions of `source` this position lacks: what a replica still has to apply
    /// to hold everything its source had. MariaDB: per domain, the sequences between this
    /// position's and `source`'s (all of a domain absent here); MySQL: the size of the set
    /// difference. Positions of different flavors lack all of `source`'s as far as anyone can
    /// tell: `u64::MAX`.
    pub fn transactions_behind(&self, source: &GtidPosition) -> u64 {
        match (self, source) {
            (Self::MariaDb(mine), Self::MariaDb(theirs)) => theirs
                .iter()
                .map(|(domain, gtid)| match mine.get(domain) {
                    Some(own) if mariadb_covers(own, gtid) => 0,
                    Some(own) => gtid.sequence.saturating_sub(own.sequence).max(1),
                    None => gtid.sequence.max(1),
                })
                .fold(0, u64::saturating_add),
            (Self::MySql(mine), Self::MySql(theirs)) => theirs
                .iter()
                .flat_map(|(source, intervals)| {
                    subtract(intervals, mine.get(source).map(Vec::as_slice).unwrap_or_default())
                })
                .map(|(start, end)| end - start + 1)
                .fold(0, u64::saturating_add),
            _ => u64::MAX,
        }
    }

    /// The transactions of this position that `primary` lacks (errant transactions when this
    /// is a replica of `primary`), or `None` when `primary` includes this position.
    ///
    /// MariaDB: the entries of domains absent from `primary`, or whose sequence is beyond
    /// (or equal to but from another server than) `primary`'s. MySQL: the set difference.
    /// For positions of different flavors, all of this position.
    pub fn errant_against(&self, primary: &GtidPosition) -> Option<GtidPosition> {
        let errant = match (self, primary) {
            (Self::MariaDb(mine), Self::MariaDb(theirs)) => Self::MariaDb(
                mine.iter()
                    .filter(|(domain, gtid)| !theirs.get(domain).is_some_and(|t| mariadb_covers(t, gtid)))
                    .map(|(domain, gtid)| (*domain, *gtid))
                    .collect(),
            ),
            (Self::MySql(mine), Self::MySql(theirs)) => Self::MySql(
                mine.iter()
                    .map(|(source, intervals)| {
                        let other = theirs.get(source).map(Vec::as_slice).unwrap_or_default();
                        (source.clone(), subtract(intervals, other))
                    })
                    .filter(|(_, rest)| !rest.is_empty())
                    .collect(),
            ),
            _ => self.clone(),
        };
        (!errant.is_empty()).then_some(errant)
    }

    /// Every transaction of either position: MariaDB, per domain the later entry; MySQL, the
    /// union of the sets. What a replica holds is what it executed together with what its
    /// relay log received. Mixed flavors: `self` unchanged.
    pub fn union(&self, other: &GtidPosition) -> GtidPosition {
        match (self, other) {
            (Self::MySql(mine), Self::MySql(theirs)) => {
                let mut merged = mine.clone();
                for (source, intervals) in theirs {
                    let entry = merged.entry(source.clone()).or_default();
                    entry.extend(intervals.iter().copied());
                    normalize(entry);
                }
                Self::MySql(merged)
            }
            _ => self.latest_per_domain(other),
        }
    }

    /// MariaDB only: per domain, the later of the two entries (the higher sequence). Used to
    /// combine `gtid_binlog_pos` and `gtid_slave_pos` into everything a server has executed.
    /// For MySQL positions, or mixed flavors, `self` unchanged.
    pub(crate) fn latest_per_domain(&self, other: &GtidPosition) -> GtidPosition {
        match (self, other) {
            (Self::MariaDb(mine), Self::MariaDb(theirs)) => {
                let mut merged = mine.clone();
                for (domain, gtid) in theirs {
                    let entry = merged.entry(*domain).or_insert(*gtid);
                    if gtid.sequence > entry.sequence {
                        *entry = *gtid;
                    }
                }
                Self::MariaDb(merged)
            }
            _ => self.clone(),
        }
    }
}

/// The index of the candidate whose position includes every other candidate's (the first such
/// one when several are equal): the member that can be promoted without losing a transaction
/// any other member has.
///
/// # Errors
/// [`MostAdvancedError::NoCandidates`] for an empty list; [`MostAdvancedError::Diverged`] when
/// no candidate includes all others, naming two candidates that diverged.
pub fn most_advanced(candidates: &[GtidPosition]) -> Result<usize, MostAdvancedError> {
    if candidates.is_empty() {
        return Err(MostAdvancedError::NoCandidates);
    }
    if let Some(best) =
        (0..candidates.len()).find(|&i| candidates.iter().all(|other| candidates[i].includes(other)))
    {
        return Ok(best);
    }
    // Some pair is incomparable: otherwise "includes" is a total order and a maximum exists.
    for left in 0..candidates.len() {
        for right in left + 1..candidates.len() {
            let (a, b) = (&candidates[left], &candidates[right]);
            if !a.includes(b) && !b.includes(a) {
                return Err(MostAdvancedError::Diverged { left, right });
            }
        }
    }
    // Not reached for MariaDB or MySQL positions of one flavor; kept total for safety.
    Err(MostAdvancedError::Diverged { left: 0, right: 0 })
}

impl fmt::Display for GtidPosition {
    /// The canonical text the servers accept: sorted, one entry per domain (MariaDB) or per
    /// uuid with merged intervals (MySQL), comma-separated without spaces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MariaDb(domains) => {
                let entries: Vec<String> = domains
                    .iter()
                    .map(|(domain, gtid)| format!("{domain}-{}-{}", gtid.server_id, gtid.sequence))
                    .collect();
                f.write_str(&entries.join(","))
            }
            Self::MySql(sources) => f.write_str(&render_mysql(sources)),
        }
    }
}

/// `own` has executed `other`'s transaction in the same domain.
fn mariadb_covers(own: &MariaDbGtid, other: &MariaDbGtid) -> bool {
    own.sequence > other.sequence || (own.sequence == other.sequence && own.server_id == other.server_id)
}

fn parse_mariadb_entry(entry: &str) -> Option<(u32, MariaDbGtid)> {
    let mut parts = entry.split('-');
    let domain = parts.next()?.parse().ok()?;
    let server_id = parts.next()?.parse().ok()?;
    let sequence = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some((domain, MariaDbGtid { server_id, sequence }))
}

/// One `uuid[:interval…][:tag:interval…]` entry, as (source, intervals) pairs.
fn parse_mysql_entry(entry: &str) -> Result<Vec<(SourceId, Intervals)>, &'static str> {
    let mut parts = entry.split(':');
    let uuid = parts.next().unwrap_or_default().to_ascii_lowercase();
    if !is_uuid(&uuid) {
        return Err("bad uuid");
    }
    let mut groups = vec![(
        SourceId {
            uuid: uuid.clone(),
            tag: None,
        },
        Vec::new(),
    )];
    for part in parts {
        if part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            let tag = part.to_ascii_lowercase();
            if tag.len() > 32 || !tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err("bad tag");
            }
            groups.push((
                SourceId {
                    uuid: uuid.clone(),
                    tag: Some(tag),
                },
                Vec::new(),
            ));
        } else {
            let interval = parse_interval(part).ok_or("bad interval")?;
            groups.last_mut().expect("one group at least").1.push(interval);
        }
    }
    // `uuid:tag:1-2` has no untagged transactions; a tag, or a lone uuid, needs some.
    if groups.len() > 1 && groups[0].1.is_empty() {
        groups.remove(0);
    }
    if groups.iter().any(|(_, intervals)| intervals.is_empty()) {
        return Err("a uuid or tag without transactions");
    }
    Ok(groups)
}

fn parse_interval(text: &str) -> Option<(u64, u64)> {
    let (start, end) = match text.split_once('-') {
        Some((start, end)) => (start.parse().ok()?, end.parse().ok()?),
        None => {
            let single = text.parse().ok()?;
            (single, single)
        }
    };
    // Transaction numbers start at 1.
    (start >= 1 && start <= end).then_some((start, end))
}

fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Sorts and merges overlapping or adjacent intervals.
fn normalize(intervals: &mut Vec<(u64, u64)>) {
    intervals.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
    for &(start, end) in intervals.iter() {
        match merged.last_mut() {
            Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    *intervals = merged;
}

/// `interval` lies within one interval of the normalized `set`.
fn covered(set: &[(u64, u64)], (start, end): (u64, u64)) -> bool {
    set.iter().any(|&(s, e)| s <= start && end <= e)
}

/// The parts of the normalized `set` not in the normalized `remove`.
fn subtract(set: &[(u64, u64)], remove: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut rest = Vec::new();
    for &(start, end) in set {
        // The first number of this interval not yet known to be removed; None once all are.
        let mut next = Some(start);
        for &(r_start, r_end) in remove {
            let Some(from) = next else { break };
            if r_end < from {
                continue;
            }
            if r_start > end {
                break;
            }
            if r_start > from {
                rest.push((from, r_start - 1));
            }
            next = r_end.checked_add(1).filter(|&n| n <= end);
        }
        if let Some(from) = next {
            rest.push((from, end));
        }
    }
    rest
}

fn render_mysql(sources: &BTreeMap<SourceId, Vec<(u64, u64)>>) -> String {
    let intervals = |list: &[(u64, u64)]| {
        list.iter()
            .map(|&(s, e)| if s == e { s.to_string() } else { format!("{s}-{e}") })
            .collect::<Vec<_>>()
            .join(":")
    };
    // BTreeMap order puts a uuid's untagged intervals (tag None) before its tags.
    let mut entries: Vec<String> = Vec::new();
    let mut current_uuid: Option<&str> = None;
    for (source, list) in sources {
        let piece = match &source.tag {
            Some(tag) => format!("{tag}:{}", intervals(list)),
            None => intervals(list),
        };
        if current_uuid == Some(source.uuid.as_str()) {
            let last = entries.last_mut().expect("an entry for this uuid");
            last.push(':');
            last.push_str(&piece);
        } else {
            entries.push(format!("{}:{piece}", source.uuid));
            current_uuid = Some(&source.uuid);
        }
    }
    entries.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const B: &str = "8a94f357-aab4-11df-86ab-c80aa9429563";

    fn maria(text: &str) -> GtidPosition {
        GtidPosition::parse(Flavor::MariaDB, text).unwrap()
    }

    fn mysql(text: &str) -> GtidPosition {
        GtidPosition::parse(Flavor::MySQL, text).unwrap()
    }

    #[test]
    fn transactions_behind_counts_what_the_source_has_and_this_position_lacks() {
        let (uuid, other) = (A, B);
        let cases = [
            (maria("0-1-100"), maria("0-1-100"), 0),
            (maria("0-1-120"), maria("0-1-100"), 0),
            (maria("0-1-40"), maria("0-1-100"), 60),
            (maria("0-1-40"), maria("0-1-100,1-2-7"), 67),
            (maria("0-2-100"), maria("0-1-100"), 1),
            (maria(""), maria("0-1-5"), 5),
            (
                mysql(&format!("{uuid}:1-100")),
                mysql(&format!("{uuid}:1-100")),
                0,
            ),
            (
                mysql(&format!("{uuid}:1-40")),
                mysql(&format!("{uuid}:1-100")),
                60,
            ),
            (
                mysql(&format!("{uuid}:1-40:50-60")),
                mysql(&format!("{uuid}:1-100,{other}:1-3")),
                52,
            ),
            (mysql(""), mysql(&format!("{uuid}:1-9")), 9),
            (maria("0-1-100"), mysql(&format!("{uuid}:1-9")), u64::MAX),
        ];
        for (replica, source, behind) in cases {
            assert_eq!(
                replica.transactions_behind(&source),
                behind,
                "{replica:?} behind {source:?}"
            );
        }
    }

    #[test]
    fn a_union_holds_every_transaction_of_both() {
        let executed = mysql(&format!("{A}:1-5,{B}:1-2"));
        let received = mysql(&format!("{A}:6-9:12"));
        let held = executed.union(&received);
        assert_eq!(held, mysql(&format!("{A}:1-9:12,{B}:1-2")));
        assert!(held.includes(&executed) && held.includes(&received));
        assert_eq!(
            maria("0-1-7,1-2-3").union(&maria("0-1-12")),
            maria("0-1-12,1-2-3")
        );
    }

    #[test]
    fn mariadb_parses_and_renders_canonically() {
        let position = maria(" 1-2-7,\n0-1-42 ");
        assert_eq!(position.to_string(), "0-1-42,1-2-7");
        assert!(maria("").is_empty());
        assert!(maria(" \n").is_empty());
        assert_eq!(maria("0-1-0").to_string(), "0-1-0");
        assert_eq!(position.flavor(), Flavor::MariaDB);
    }

    #[test]
    fn mariadb_rejects_malformed_text() {
        for bad in ["0-1", "0-1-2-3", "a-1-2", "0-1-x", "-1-2", "0-1-2,0-2-3", "0--2"] {
            let error = GtidPosition::parse(Flavor::MariaDB, bad).unwrap_err();
            assert_eq!(error.text, bad);
        }
    }

    #[test]
    fn mariadb_includes_compares_per_domain() {
        let primary = maria("0-1-10,1-2-5");
        assert!(primary.includes(&maria("0-1-9")));
        assert!(
            primary.includes(&maria("0-3-9,1-2-5")),
            "lower sequence from any server"
        );
        assert!(primary.includes(&primary));
        assert!(primary.includes(&maria("")));
        assert!(!primary.includes(&maria("0-1-11")));
        assert!(!primary.includes(&maria("2-1-1")), "a domain the primary lacks");
        assert!(
            !primary.includes(&maria("0-3-10")),
            "same sequence, another server: diverged"
        );
        assert!(!maria("").includes(&primary));
    }

    #[test]
    fn mariadb_errant_transactions_are_domains_or_sequences_beyond_the_primary() {
        let primary = maria("0-1-10");
        assert_eq!(maria("0-1-10").errant_against(&primary), None);
        assert_eq!(
            maria("0-1-8").errant_against(&primary),
            None,
            "behind is not errant"
        );
        assert_eq!(maria("0-2-11").errant_against(&primary), Some(maria("0-2-11")));
        assert_eq!(
            maria("0-1-9,5-2-1").errant_against(&primary),
            Some(maria("5-2-1"))
        );
        assert_eq!(maria("0-2-10").errant_against(&primary), Some(maria("0-2-10")));
        assert_eq!(maria("").errant_against(&primary), None);
    }

    #[test]
    fn mariadb_latest_per_domain_takes_the_higher_sequence() {
        let binlog = maria("0-1-5,1-1-3");
        let slave = maria("0-2-7,2-2-1");
        assert_eq!(binlog.latest_per_domain(&slave), maria("0-2-7,1-1-3,2-2-1"));
        assert_eq!(slave.latest_per_domain(&maria("")), slave);
    }

    #[test]
    fn mysql_parses_merges_and_renders_canonically() {
        let text = format!("{},\n {}:1-5:7-9:6", B.to_uppercase(), A.to_uppercase());
        let error = GtidPosition::parse(Flavor::MySQL, &text).unwrap_err();
        assert_eq!(error.reason, "a uuid or tag without transactions");
        let position = mysql(&format!("{B}:3:1-2,\n {}:1-5:7-9:6", A.to_uppercase()));
        assert_eq!(position.to_string(), format!("{A}:1-9,{B}:1-3"));
        assert!(mysql("").is_empty());
        assert_eq!(mysql(&format!("{A}:1-3,{A}:4-6")).to_string(), format!("{A}:1-6"));
        assert_eq!(mysql(&format!("{A}:1-3:5")).to_string(), format!("{A}:1-3:5"));
    }

    #[test]
    fn mysql_tagged_gtids_are_their_own_sources() {
        let position = mysql(&format!("{A}:1-3:Domain_1:1-2:7,{A}:5"));
        assert_eq!(position.to_string(), format!("{A}:1-3:5:domain_1:1-2:7"));
        assert!(position.includes(&mysql(&format!("{A}:domain_1:2"))));
        assert!(!position.includes(&mysql(&format!("{A}:other:2"))));
        assert!(
            GtidPosition::parse(Flavor::MySQL, &format!("{A}:1:tag")).is_err(),
            "an empty tag"
        );
    }

    #[test]
    fn mysql_rejects_malformed_text() {
        for bad in [
            "nope:1-2",
            "3e11fa47-71ca-11e1-9e33-c80aa942956:1",
            &format!("{A}:0"),
            &format!("{A}:5-3"),
            &format!("{A}:1-"),
            &format!("{A}:x-1"),
            &format!("{A}:1:bad-tag:1"),
        ] {
            assert!(GtidPosition::parse(Flavor::MySQL, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mysql_includes_is_subset() {
        let primary = mysql(&format!("{A}:1-10:20-30,{B}:1-5"));
        assert!(primary.includes(&mysql(&format!("{A}:3-7:25"))));
        assert!(primary.includes(&mysql(&format!("{B}:1-5,{A}:1-10"))));
        assert!(
            !primary.includes(&mysql(&format!("{A}:10-20"))),
            "a gap in the primary"
        );
        assert!(!primary.includes(&mysql(&format!("{A}:31"))));
        assert!(!primary.includes(&mysql("9a94f357-aab4-11df-86ab-c80aa9429563:1")));
        assert!(primary.includes(&mysql("")));
    }

    #[test]
    fn mysql_errant_transactions_are_the_set_difference() {
        let primary = mysql(&format!("{A}:1-10:20-30"));
        assert_eq!(mysql(&format!("{A}:1-5")).errant_against(&primary), None);
        assert_eq!(
            mysql(&format!("{A}:1-35,{B}:1")).errant_against(&primary),
            Some(mysql(&format!("{A}:11-19:31-35,{B}:1")))
        );
        assert_eq!(
            mysql(&format!("{A}:5-25")).errant_against(&primary),
            Some(mysql(&format!("{A}:11-19")))
        );
        assert_eq!(
            mysql(&format!("{A}:1-40")).errant_against(&mysql(&format!("{A}:2-3:5:7-39"))),
            Some(mysql(&format!("{A}:1:4:6:40")))
        );
    }

    #[test]
    fn flavors_never_include_each_other() {
        let m = maria("0-1-1");
        let s = mysql(&format!("{A}:1"));
        assert!(!m.includes(&s));
        assert!(!s.includes(&m));
        assert_eq!(m.errant_against(&s), Some(m.clone()));
        assert!(!GtidPosition::empty(Flavor::MariaDB).includes(&GtidPosition::empty(Flavor::MySQL)));
    }

    #[test]
    fn most_advanced_picks_the_candidate_including_all_others() {
        let candidates = [maria("0-1-5"), maria("0-1-9"), maria("0-1-7")];
        assert_eq!(most_advanced(&candidates), Ok(1));
        let equal = [maria("0-1-9"), maria("0-1-9")];
        assert_eq!(most_advanced(&equal), Ok(0));
        let with_empty = [maria(""), mysql("").clone()];
        assert!(most_advanced(&with_empty).is_err(), "mixed flavors");
        assert_eq!(most_advanced(&[]), Err(MostAdvancedError::NoCandidates));
        let sets = [
            mysql(&format!("{A}:1-5")),
            mysql(&format!("{A}:1-5,{B}:1")),
            mysql(""),
        ];
        assert_eq!(most_advanced(&sets), Ok(1));
    }

    #[test]
    fn most_advanced_refuses_diverged_positions() {
        let diverged = [maria("0-1-5"), maria("0-1-9"), maria("0-2-9")];
        assert_eq!(
            most_advanced(&diverged),
            Err(MostAdvancedError::Diverged { left: 1, right: 2 })
        );
        let domains = [maria("0-1-5,1-1-1"), maria("0-1-6")];
        assert_eq!(
            most_advanced(&domains),
            Err(MostAdvancedError::Diverged { left: 0, right: 1 })
        );
        let sets = [mysql(&format!("{A}:1-5")), mysql(&format!("{A}:1-4,{B}:1"))];
        assert_eq!(
            most_advanced(&sets),
            Err(MostAdvancedError::Diverged { left: 0, right: 1 })
        );
    }
}
