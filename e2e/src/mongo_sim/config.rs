//! Replica-set configurations and the server's rules for accepting one: the shape
//! `replSetInitiate` and `replSetReconfig` check, and the compatibility of a new configuration
//! with the current one. Pure functions: the node applies them, the tests pin them.

use std::time::Duration;

use bson::{Bson, Document, doc};

use super::CmdError;

pub const MAX_MEMBERS: usize = 50;
pub const MAX_VOTING_MEMBERS: usize = 7;

/// Defaults that a configuration's `settings` may override.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub election_timeout: Duration,
    pub heartbeat_interval: Duration,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub id: i32,
    pub host: String,
    pub arbiter_only: bool,
    pub build_indexes: bool,
    pub hidden: bool,
    pub priority: f64,
    pub tags: Document,
    pub secondary_delay_secs: i64,
    pub votes: i32,
}

impl Member {
    pub fn is_voter(&self) -> bool {
        self.votes > 0
    }

    /// May stand for election.
    pub fn is_electable(&self) -> bool {
        self.priority > 0.0 && self.votes > 0 && !self.arbiter_only
    }

    pub fn to_document(&self) -> Document {
        doc! {
            "_id": self.id,
            "host": &self.host,
            "arbiterOnly": self.arbiter_only,
            "buildIndexes": self.build_indexes,
            "hidden": self.hidden,
            "priority": self.priority,
            "tags": self.tags.clone(),
            "secondaryDelaySecs": self.secondary_delay_secs,
            "votes": self.votes,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReplConfig {
    pub name: String,
    pub version: i32,
    /// The term of the primary that wrote it; -1 after a forced reconfig.
    pub term: i64,
    pub members: Vec<Member>,
    /// As given, for `replSetGetConfig`; timing is read from it.
    pub settings: Document,
    timing: Timing,
}

fn invalid(message: impl Into<String>) -> CmdError {
    CmdError::new(93, message)
}

fn number(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(v) => Some(*v as f64),
        Bson::Int64(v) => Some(*v as f64),
        Bson::Double(v) => Some(*v),
        _ => None,
    }
}

fn integer(value: &Bson, field: &str) -> Result<i64, CmdError> {
    number(value)
        .filter(|n| n.fract() == 0.0)
        .map(|n| n as i64)
        .ok_or_else(|| invalid(format!("{field} field must be a number")))
}

fn boolean(value: &Bson, field: &str) -> Result<bool, CmdError> {
    match value {
        Bson::Boolean(b) => Ok(*b),
        other => number(other)
            .map(|n| n != 0.0)
            .ok_or_else(|| invalid(format!("{field} field must be a boolean"))),
    }
}

/// `host:port`, with the default port when none is given, as the server normalizes it.
pub fn normalize_host(host: &str) -> String {
    let has_port = host
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()));
    if has_port {
        host.to_string()
    } else {
        format!("{host}:27017")
    }
}

fn parse_member(document: &Document, index: usize) -> Result<Member, CmdError> {
    const FIELDS: [&str; 9] = [
        "_id",
        "host",
        "arbiterOnly",
        "buildIndexes",
        "hidden",
        "priority",
        "tags",
        "secondaryDelaySecs",
        "votes",
    ];
    if let Some(field) = document.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(invalid(format!(
            "Unexpected field {field} in replica set member configuration"
        )));
    }
    let id = document
        .get("_id")
        .ok_or_else(|| invalid(format!("members.{index} is missing the _id field")))
        .and_then(|v| integer(v, "_id"))?;
    if !(0..=i32::MAX as i64).contains(&id) {
        return Err(invalid(format!("_id field value of {id} is out of range")));
    }
    let host = match document.get("host") {
        Some(Bson::String(host)) if !host.is_empty() => normalize_host(host),
        _ => return Err(invalid(format!("members.{index} is missing a host string"))),
    };
    let flag = |name: &str, default: bool| -> Result<bool, CmdError> {
        document.get(name).map_or(Ok(default), |v| boolean(v, name))
    };
    let arbiter_only = flag("arbiterOnly", false)?;
    let build_indexes = flag("buildIndexes", true)?;
    let hidden = flag("hidden", false)?;
    let votes = match document.get("votes") {
        None => 1,
        Some(value) => match integer(value, "votes")? {
            votes @ (0 | 1) => votes as i32,
            other => {
                return Err(invalid(format!(
                    "votes field value is {other} but must be 0 or 1"
                )));
            }
        },
    };
    let priority = match document.get("priority") {
        None if arbiter_only || votes == 0 => 0.0,
        None => 1.0,
        Some(value) => number(value).ok_or_else(|| invalid("priority field must be a number"))?,
    };
    if !(0.0..=1000.0).contains(&priority) {
        return Err(invalid(format!(
            "priority field value of {priority} is out of range"
        )));
    }
    let secondary_delay_secs = match document.get("secondaryDelaySecs") {
        None => 0,
        Some(value) => integer(value, "secondaryDelaySecs")?,
    };
    let tags = match document.get("tags") {
        None => Document::new(),
        Some(Bson::Document(tags)) => {
            if tags.values().any(|v| !matches!(v, Bson::String(_))) {
                return Err(invalid("tags values must be strings"));
            }
            tags.clone()
        }
        Some(_) => return Err(invalid("tags field must be an object")),
    };
    let member = Member {
        id: id as i32,
        host,
        arbiter_only,
        build_indexes,
        hidden,
        priority,
        tags,
        secondary_delay_secs,
        votes,
    };
    if member.arbiter_only && member.votes == 0 {
        return Err(invalid("arbiter must vote (cannot have 0 votes)"));
    }
    if member.priority > 0.0 {
        let reason = if member.arbiter_only {
            Some("arbiterOnly=true")
        } else if member.votes == 0 {
            Some("non-voting (votes:0)")
        } else if member.hidden {
            Some("hidden=true")
        } else if member.secondary_delay_secs > 0 {
            Some("secondaryDelaySecs is used")
        } else if !member.build_indexes {
            Some("buildIndexes=false")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(invalid(format!("priority must be 0 when {reason}")));
        }
    }
    Ok(member)
}

impl ReplConfig {
    /// Parses and checks a configuration document as the server does before anything else.
    pub fn parse(document: &Document, defaults: Timing) -> Result<Self, CmdError> {
        const FIELDS: [&str; 8] = [
            "_id",
            "version",
            "term",
            "members",
            "settings",
            "protocolVersion",
            "writeConcernMajorityJournalDefault",
            "configsvr",
        ];
        if let Some(field) = document.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(invalid(format!(
                "Unexpected field {field} in replica set configuration"
            )));
        }
        let name = match document.get("_id") {
            Some(Bson::String(name)) if !name.is_empty() => name.clone(),
            _ => return Err(invalid("Missing expected field \"_id\"")),
        };
        let version = match document.get("version") {
            None => 1,
            Some(value) => integer(value, "version")?,
        };
        if !(1..=i32::MAX as i64).contains(&version) {
            return Err(invalid(format!(
                "version field value of {version} is out of range"
            )));
        }
        let term = match document.get("term") {
            None => -1,
            Some(value) => integer(value, "term")?,
        };
        if let Some(protocol) = document.get("protocolVersion")
            && integer(protocol, "protocolVersion")? != 1
        {
            return Err(invalid("Only protocolVersion 1 is supported"));
        }
        if let Some(configsvr) = document.get("configsvr")
            && boolean(configsvr, "configsvr")?
        {
            return Err(invalid("This node was not started with --configsvr"));
        }
        let members = match document.get("members") {
            Some(Bson::Array(members)) => members,
            _ => return Err(invalid("Missing expected field \"members\"")),
        };
        if members.is_empty() {
            return Err(invalid(
                "Replica set configuration must contain at least one member",
            ));
        }
        let members = members
            .iter()
            .enumerate()
            .map(|(index, member)| match member {
                Bson::Document(member) => parse_member(member, index),
                _ => Err(invalid(format!("members.{index} must be an object"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let settings = match document.get("settings") {
            None => Document::new(),
            Some(Bson::Document(settings)) => settings.clone(),
            Some(_) => return Err(invalid("settings field must be an object")),
        };
        let millis = |field: &str, default: Duration| -> Result<Duration, CmdError> {
            match settings.get(field) {
                None => Ok(default),
                Some(value) => match integer(value, field)? {
                    ms if ms > 0 => Ok(Duration::from_millis(ms as u64)),
                    ms => Err(invalid(format!("{field} field value must be positive, not {ms}"))),
                },
            }
        };
        let timing = Timing {
            election_timeout: millis("electionTimeoutMillis", defaults.election_timeout)?,
            heartbeat_interval: millis("heartbeatIntervalMillis", defaults.heartbeat_interval)?,
        };
        let config = Self {
            name,
            version: version as i32,
            term,
            members,
            settings,
            timing,
        };
        config.check_members()?;
        Ok(config)
    }

    fn check_members(&self) -> Result<(), CmdError> {
        if self.members.len() > MAX_MEMBERS {
            return Err(invalid(format!(
                "Replica set configuration contains {} members, but must have no more than {MAX_MEMBERS}",
                self.members.len()
            )));
        }
        for (i, a) in self.members.iter().enumerate() {
            for (j, b) in self.members.iter().enumerate().skip(i + 1) {
                if a.id == b.id {
                    return Err(invalid(format!(
                        "Found two member configurations with same _id field, members.{i}._id == members.{j}._id == {}",
                        a.id
                    )));
                }
                if a.host.eq_ignore_ascii_case(&b.host) {
                    return Err(invalid(format!(
                        "Found two member configurations with same host field, members.{i}.host == members.{j}.host == {}",
                        a.host
                    )));
                }
            }
        }
        let voters = self.voters().count();
        if voters == 0 || voters > MAX_VOTING_MEMBERS {
            return Err(invalid(format!(
                "Replica set configuration contains {voters} voting members, but must be at least 1 and no more than {MAX_VOTING_MEMBERS}"
            )));
        }
        Ok(())
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    pub fn voters(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.is_voter())
    }

    /// Votes needed to win an election.
    pub fn majority(&self) -> usize {
        majority(self.voters().count())
    }

    /// Data-bearing voters that must hold a write for it to be majority-committed: a majority of
    /// the voters, but never more than the voters that hold data (arbiters hold none).
    pub fn write_majority(&self) -> usize {
        let data_voters = self.voters().filter(|m| !m.arbiter_only).count();
        self.majority().min(data_voters)
    }

    pub fn member(&self, host: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.host.eq_ignore_ascii_case(host))
    }

    /// Whether this configuration supersedes `other`: by term then version, by version alone
    /// when either was forced (term -1).
    pub fn is_newer_than(&self, other: &ReplConfig) -> bool {
        if self.term == -1 || other.term == -1 {
            self.version > other.version
        } else {
            (self.term, self.version) > (other.term, other.version)
        }
    }

    pub fn same_version(&self, version: i32, term: i64) -> bool {
        self.version == version && (self.term == term || self.term == -1 || term == -1)
    }

    /// The document `replSetGetConfig` shows: every member field and setting filled in.
    pub fn to_document(&self) -> Document {
        let mut settings = doc! {
            "chainingAllowed": true,
            "heartbeatIntervalMillis": self.timing.heartbeat_interval.as_millis() as i32,
            "heartbeatTimeoutSecs": 10,
            "electionTimeoutMillis": self.timing.election_timeout.as_millis() as i32,
            "catchUpTimeoutMillis": -1,
            "catchUpTakeoverDelayMillis": 30000,
            "getLastErrorModes": {},
            "getLastErrorDefaults": { "w": 1, "wtimeout": 0 },
        };
        for (key, value) in &self.settings {
            if !matches!(key.as_str(), "heartbeatIntervalMillis" | "electionTimeoutMillis") {
                settings.insert(key.clone(), value.clone());
            }
        }
        doc! {
            "_id": &self.name,
            "version": self.version,
            "term": self.term,
            "members": self.members.iter().map(|m| Bson::Document(m.to_document())).collect::<Vec<_>>(),
            "protocolVersion": 1i64,
            "writeConcernMajorityJournalDefault": true,
            "settings": settings,
        }
    }
}

pub fn majority(voters: usize) -> usize {
    voters / 2 + 1
}

/// The checks `replSetInitiate` makes of its configuration on the node it runs on.
pub fn check_initiate(
    config: &ReplConfig,
    set_name: &str,
    is_me: impl Fn(&str) -> bool,
) -> Result<(), CmdError> {
    if config.name != set_name {
        return Err(invalid(format!(
            "Attempting to initiate a replica set with name {} but command line reports {set_name}; rejecting",
            config.name
        )));
    }
    if config.version != 1 {
        return Err(invalid(format!(
            "Attempting to initiate a replica set with version {}, but only version 1 is allowed",
            config.version
        )));
    }
    let Some(me) = config.members.iter().find(|m| is_me(&m.host)) else {
        return Err(invalid(format!(
            "No host described in new configuration with {{version: 1, term: 0}} for replica set {set_name} maps to this node"
        )));
    };
    if !me.is_electable() {
        return Err(invalid(format!(
            "This node, {}, with _id {} is not electable under the new configuration with {{version: 1, term: 0}} for replica set {set_name}",
            me.host, me.id
        )));
    }
    Ok(())
}

fn incompatible(message: impl Into<String>) -> CmdError {
    CmdError::new(103, message)
}

/// Whether `new` may replace `old` (both already parsed), as `replSetReconfig` decides before
/// it asks anyone: same set, a later version, members keep their `_id` and arbiter role, and
/// without `force` at most one voter added, removed or changing its vote.
pub fn check_reconfig(old: &ReplConfig, new: &ReplConfig, force: bool) -> Result<(), CmdError> {
    if old.name != new.name {
        return Err(incompatible(format!(
            "New and old configurations differ in replica set name; old was {}, and new is {}",
            old.name, new.name
        )));
    }
    if new.version <= old.version && !force {
        return Err(incompatible(format!(
            "BadValue: version field value of {} is out of date; current config version is {}",
            new.version, old.version
        )));
    }
    for member in &new.members {
        if let Some(previous) = old.member(&member.host)
            && previous.id != member.id
        {
            return Err(incompatible(format!(
                "New and old configurations both have members with host of {} but in the new configuration the _id field is {} and in the old configuration it is {} for replica set {}",
                member.host, member.id, previous.id, new.name
            )));
        }
        if let Some(previous) = old.members.iter().find(|m| m.id == member.id)
            && previous.arbiter_only != member.arbiter_only
        {
            return Err(incompatible(format!(
                "New and old configurations differ in the setting of the arbiterOnly field for member {}; to make this change, remove then re-add the member",
                member.host
            )));
        }
    }
    if !force {
        let changed = voting_changes(old, new);
        if changed > 1 {
            return Err(incompatible(
                "Non force replica set reconfig can only add or remove at most 1 voting member.",
            ));
        }
    }
    Ok(())
}

/// Members (by `_id`) that vote in one configuration and not in the other.
pub fn voting_changes(old: &ReplConfig, new: &ReplConfig) -> usize {
    let votes = |config: &ReplConfig, id: i32| config.members.iter().any(|m| m.id == id && m.is_voter());
    let ids: std::collections::BTreeSet<i32> = old.members.iter().chain(&new.members).map(|m| m.id).collect();
    ids.into_iter()
        .filter(|id| votes(old, *id) != votes(new, *id))
        .count()
}

/// A primary must stay electable in the configuration it installs.
pub fn check_self_in_new_config(new: &ReplConfig, me: &str) -> Result<(), CmdError> {
    match new.member(me) {
        None => Err(incompatible(format!(
            "No host described in new configuration with {{version: {}}} for replica set {} maps to this node; the primary cannot remove itself",
            new.version, new.name
        ))),
        Some(member) if !member.is_electable() => Err(incompatible(format!(
            "This node, {}, with _id {} is not electable under the new configuration with {{version: {}}} for replica set {}",
            member.host, member.id, new.version, new.name
        ))),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMING: Timing = Timing {
        election_timeout: Duration::from_secs(10),
        heartbeat_interval: Duration::from_secs(2),
    };

    fn config(version: i32, members: Vec<Document>) -> ReplConfig {
        ReplConfig::parse(
            &doc! { "_id": "rs0", "version": version, "members": members },
            TIMING,
        )
        .unwrap()
    }

    fn voter(id: i32) -> Document {
        doc! { "_id": id, "host": format!("10.0.0.{id}:27017") }
    }

    fn passive(id: i32) -> Document {
        doc! { "_id": id, "host": format!("10.0.0.{id}:27017"), "votes": 0, "priority": 0 }
    }

    fn code(result: Result<impl std::fmt::Debug, CmdError>) -> i32 {
        result.unwrap_err().code
    }

    #[test]
    fn member_defaults_and_normalized_hosts() {
        let parsed = ReplConfig::parse(
            &doc! { "_id": "rs0", "members": [{ "_id": 0, "host": "a" }, { "_id": 1, "host": "b:1", "arbiterOnly": true }],
                    "settings": { "electionTimeoutMillis": 1000 } },
            TIMING,
        )
        .unwrap();
        assert_eq!(parsed.version, 1);
        assert_eq!(parsed.members[0].host, "a:27017");
        assert_eq!((parsed.members[0].priority, parsed.members[0].votes), (1.0, 1));
        assert_eq!(parsed.members[1].priority, 0.0, "arbiters default to priority 0");
        assert_eq!(parsed.timing().election_timeout, Duration::from_millis(1000));
        assert_eq!(parsed.timing().heartbeat_interval, TIMING.heartbeat_interval);
        assert_eq!(parsed.majority(), 2);
        assert_eq!(parsed.write_majority(), 1, "one data-bearing voter");
        let shown = parsed.to_document();
        assert_eq!(
            shown
                .get_document("settings")
                .unwrap()
                .get_i32("electionTimeoutMillis")
                .unwrap(),
            1000
        );
        assert_eq!(ReplConfig::parse(&shown, TIMING).unwrap().members, parsed.members);
    }

    #[test]
    fn shape_rules() {
        let parse = |d: Document| ReplConfig::parse(&d, TIMING);
        assert_eq!(code(parse(doc! { "_id": "rs0", "members": [] })), 93);
        assert_eq!(
            code(parse(doc! { "_id": "rs0", "members": [voter(0), voter(0)] })),
            93
        );
        assert_eq!(
            code(parse(
                doc! { "_id": "rs0", "members": [voter(0), { "_id": 1, "host": "10.0.0.0:27017" }] }
            )),
            93
        );
        let eight: Vec<Document> = (0..8).map(voter).collect();
        assert_eq!(code(parse(doc! { "_id": "rs0", "members": eight })), 93);
        let seven_and_passives: Vec<Document> = (0..7).map(voter).chain((7..50).map(passive)).collect();
        assert!(parse(doc! { "_id": "rs0", "members": seven_and_passives }).is_ok());
        let fifty_one: Vec<Document> = (0..7).map(voter).chain((7..51).map(passive)).collect();
        assert_eq!(code(parse(doc! { "_id": "rs0", "members": fifty_one })), 93);
        assert_eq!(
            code(parse(doc! { "_id": "rs0", "members": [passive(0)] })),
            93,
            "no voter"
        );
        for bad in [
            doc! { "_id": 1, "host": "h:1", "votes": 0, "priority": 1 },
            doc! { "_id": 1, "host": "h:1", "hidden": true, "priority": 1 },
            doc! { "_id": 1, "host": "h:1", "votes": 2 },
            doc! { "_id": 1, "host": "h:1", "arbiterOnly": true, "votes": 0 },
            doc! { "_id": 1, "host": "h:1", "slaveDelay": 5 },
        ] {
            assert_eq!(
                code(parse(doc! { "_id": "rs0", "members": [voter(0), bad.clone()] })),
                93,
                "{bad}"
            );
        }
    }

    #[test]
    fn initiate_rules() {
        let me = |host: &str| host == "10.0.0.0:27017";
        let good = config(1, vec![voter(0), voter(1)]);
        assert!(check_initiate(&good, "rs0", me).is_ok());
        assert_eq!(code(check_initiate(&good, "other", me)), 93);
        assert_eq!(code(check_initiate(&config(1, vec![voter(1)]), "rs0", me)), 93);
        assert_eq!(
            code(check_initiate(&config(1, vec![passive(0), voter(1)]), "rs0", me)),
            93
        );
    }

    #[test]
    fn reconfig_rules() {
        let old = config(3, vec![voter(0), passive(1)]);
        // Promote the passive member: one voter more.
        assert!(check_reconfig(&old, &config(4, vec![voter(0), voter(1)]), false).is_ok());
        // Add two voters at once.
        let error = check_reconfig(&old, &config(4, vec![voter(0), voter(1), voter(2)]), false).unwrap_err();
        assert_eq!(error.code, 103);
        assert!(
            error.message.contains("at most 1 voting member"),
            "{}",
            error.message
        );
        assert!(check_reconfig(&old, &config(4, vec![voter(0), voter(1), voter(2)]), true).is_ok());
        // Stale version.
        let error =
            check_reconfig(&old, &config(3, vec![voter(0), passive(1), passive(2)]), false).unwrap_err();
        assert_eq!(error.code, 103);
        assert!(
            error
                .message
                .contains("version field value of 3 is out of date; current config version is 3")
        );
        // A host keeps its _id.
        let moved = config(
            4,
            vec![
                voter(0),
                doc! { "_id": 5, "host": "10.0.0.1:27017", "votes": 0, "priority": 0 },
            ],
        );
        assert_eq!(code(check_reconfig(&old, &moved, false)), 103);
        // Renamed set.
        let renamed = ReplConfig::parse(
            &doc! { "_id": "rs1", "version": 4, "members": [voter(0)] },
            TIMING,
        )
        .unwrap();
        assert_eq!(code(check_reconfig(&old, &renamed, true)), 103);
        // Remove one voter, add one non-voter: one change.
        let three = config(5, vec![voter(0), voter(1), voter(2)]);
        assert!(check_reconfig(&three, &config(6, vec![voter(0), voter(1), passive(3)]), false).is_ok());
        assert_eq!(voting_changes(&three, &config(6, vec![voter(0)])), 2);
    }

    #[test]
    fn primary_stays_electable_member() {
        let new = config(2, vec![voter(0), passive(1)]);
        assert!(check_self_in_new_config(&new, "10.0.0.0:27017").is_ok());
        assert_eq!(code(check_self_in_new_config(&new, "10.0.0.1:27017")), 103);
        assert_eq!(code(check_self_in_new_config(&new, "10.0.0.9:27017")), 103);
    }

    #[test]
    fn ordering_by_term_then_version_and_forced_by_version() {
        let mut a = config(5, vec![voter(0)]);
        let mut b = config(4, vec![voter(0)]);
        a.term = 1;
        b.term = 2;
        assert!(b.is_newer_than(&a));
        b.term = -1;
        assert!(a.is_newer_than(&b));
    }
}
