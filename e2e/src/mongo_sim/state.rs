//! What a member keeps on disk: its replica-set configuration, term and vote, data and oplog.
//!
//! One BSON file in the dbpath, replaced atomically (written beside, then renamed). Users and
//! the feature compatibility version live where the server keeps them, in `admin.system.users`
//! and `admin.system.version`, so they replicate and initial-sync like any other data.

use std::{
    cmp::Ordering,
    collections::{BTreeMap, HashSet},
    path::{Path, PathBuf},
};

use bson::{Bson, DateTime, Document, Timestamp, doc};
use serde::{Deserialize, Serialize};

pub const STATE_FILE: &str = "mongo-sim.state";
pub const USERS: (&str, &str) = ("admin", "system.users");
pub const VERSION: (&str, &str) = ("admin", "system.version");
pub const FCV_ID: &str = "featureCompatibilityVersion";
/// Oplog entries kept unless `--sim-oplog-entries` says otherwise, like the server's capped
/// oplog: a member that falls further behind finds its last entry gone at its sync source and
/// is too stale to catch up.
pub const OPLOG_ENTRIES: usize = 50_000;

/// A position in the oplog. Ordered by term, then timestamp, as the server orders them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpTime {
    pub ts: Timestamp,
    pub t: i64,
}

impl OpTime {
    pub const NULL: OpTime = OpTime {
        ts: Timestamp {
            time: 0,
            increment: 0,
        },
        t: -1,
    };

    pub fn is_null(&self) -> bool {
        *self == Self::NULL
    }

    pub fn to_document(self) -> Document {
        doc! { "ts": self.ts, "t": self.t }
    }

    pub fn from_bson(value: Option<&Bson>) -> Option<Self> {
        let document = value?.as_document()?;
        let ts = match document.get("ts")? {
            Bson::Timestamp(ts) => *ts,
            _ => return None,
        };
        let t = match document.get("t")? {
            Bson::Int64(t) => *t,
            Bson::Int32(t) => *t as i64,
            _ => return None,
        };
        Some(Self { ts, t })
    }

    /// Wall-clock date of the timestamp, as `optimeDate` shows it.
    pub fn date(&self) -> DateTime {
        DateTime::from_millis(self.ts.time as i64 * 1000)
    }
}

impl Default for OpTime {
    fn default() -> Self {
        Self::NULL
    }
}

impl PartialOrd for OpTime {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OpTime {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.t, self.ts.time, self.ts.increment).cmp(&(other.t, other.ts.time, other.ts.increment))
    }
}

/// One oplog entry, shaped like the server's (`op` is `i`, `d`, `u`, `c` or `n`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OplogEntry {
    pub ts: Timestamp,
    pub t: i64,
    pub wall: DateTime,
    pub op: String,
    pub ns: String,
    pub o: Document,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub o2: Option<Document>,
    /// The retryable write this entry belongs to, so a retry on a new primary is answered
    /// from here instead of being applied twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lsid: Option<String>,
    #[serde(default, rename = "txnNumber", skip_serializing_if = "Option::is_none")]
    pub txn_number: Option<i64>,
}

impl OplogEntry {
    pub fn optime(&self) -> OpTime {
        OpTime {
            ts: self.ts,
            t: self.t,
        }
    }
}

/// A canonical key for `_id` values, numbers by value as the server's unique index has them.
pub fn id_key(id: &Bson) -> Vec<u8> {
    let canonical = match id {
        Bson::Int32(v) => Bson::Double(*v as f64),
        Bson::Int64(v) => Bson::Double(*v as f64),
        other => other.clone(),
    };
    let mut bytes = Vec::new();
    doc! { "": canonical }
        .to_writer(&mut bytes)
        .expect("serializable");
    bytes
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Collection {
    pub options: Document,
    /// Index specifications other than `_id_`, which every collection has.
    pub indexes: Vec<Document>,
    pub documents: Vec<Document>,
    #[serde(skip)]
    ids: HashSet<Vec<u8>>,
}

impl Collection {
    fn reindex(&mut self) {
        self.ids = self
            .documents
            .iter()
            .map(|d| id_key(d.get("_id").unwrap_or(&Bson::Null)))
            .collect();
    }

    pub fn contains_id(&self, id: &Bson) -> bool {
        self.ids.contains(&id_key(id))
    }

    pub fn find_id(&self, id: &Bson) -> Option<&Document> {
        if !self.contains_id(id) {
            return None;
        }
        let key = id_key(id);
        self.documents
            .iter()
            .find(|d| id_key(d.get("_id").unwrap_or(&Bson::Null)) == key)
    }

    fn insert(&mut self, document: Document) -> Result<(), String> {
        let id = document.get("_id").cloned().unwrap_or(Bson::Null);
        if !self.ids.insert(id_key(&id)) {
            return Err(format!("duplicate key: {{ _id: {id} }}"));
        }
        self.documents.push(document);
        Ok(())
    }

    fn remove(&mut self, id: &Bson) -> bool {
        let key = id_key(id);
        if !self.ids.remove(&key) {
            return false;
        }
        self.documents
            .retain(|d| id_key(d.get("_id").unwrap_or(&Bson::Null)) != key);
        true
    }

    fn size(&self) -> i64 {
        self.documents
            .iter()
            .map(|d| bson::to_vec(d).map(|b| b.len() as i64).unwrap_or(0))
            .sum()
    }
}

pub type Databases = BTreeMap<String, BTreeMap<String, Collection>>;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Vote {
    pub term: i64,
    pub candidate: String,
}

/// Everything a member persists.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Store {
    /// The installed configuration, as `replSetGetConfig` shows it.
    pub config: Option<Document>,
    pub term: i64,
    pub vote: Option<Vote>,
    /// The data belongs to the set: this member initiated it or finished an initial sync.
    pub synced: bool,
    pub databases: Databases,
    pub oplog: Vec<OplogEntry>,
    /// Retryable writes seen, by session: the last transaction number.
    pub sessions: BTreeMap<String, i64>,
}

pub fn state_path(dbpath: &Path) -> PathBuf {
    dbpath.join(STATE_FILE)
}

impl Store {
    /// The state in `dbpath`, or `None` when it holds none yet.
    pub fn load(dbpath: &Path) -> Result<Option<Self>, String> {
        let path = state_path(dbpath);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("{}: {error}", path.display())),
        };
        let mut store: Store = bson::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        store.reindex();
        Ok(Some(store))
    }

    /// Rebuilds the `_id` indexes, which are not stored.
    pub fn reindex(&mut self) {
        for collection in self.databases.values_mut().flat_map(|d| d.values_mut()) {
            collection.reindex();
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        bson::to_vec(self).expect("the state always serializes")
    }

    /// Replaces the file with `bytes` so a kill leaves either the old or the new state.
    pub fn write(dbpath: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let path = state_path(dbpath);
        let temporary = path.with_extension("state.tmp");
        std::fs::write(&temporary, bytes)?;
        std::fs::rename(&temporary, &path)
    }

    /// Appends an applied entry to the oplog, dropping the oldest beyond `kept`.
    pub fn append(&mut self, entry: OplogEntry, kept: usize) {
        self.oplog.push(entry);
        if self.oplog.len() > kept {
            let excess = self.oplog.len() - kept;
            self.oplog.drain(..excess);
        }
    }

    pub fn last_optime(&self) -> OpTime {
        self.oplog.last().map(OplogEntry::optime).unwrap_or(OpTime::NULL)
    }

    pub fn collection(&self, db: &str, name: &str) -> Option<&Collection> {
        self.databases.get(db)?.get(name)
    }

    /// Stores a document outside replication (a root user created on an empty dbpath).
    pub fn insert_local(&mut self, db: &str, name: &str, document: Document) -> Result<(), String> {
        self.databases
            .entry(db.to_string())
            .or_default()
            .entry(name.to_string())
            .or_default()
            .insert(document)
    }

    pub fn fcv(&self) -> Option<String> {
        self.collection(VERSION.0, VERSION.1)?
            .find_id(&Bson::String(FCV_ID.into()))?
            .get_str("version")
            .ok()
            .map(str::to_string)
    }

    pub fn user(&self, db: &str, name: &str) -> Option<&Document> {
        self.collection(USERS.0, USERS.1)?
            .find_id(&Bson::String(format!("{db}.{name}")))
    }

    pub fn has_users(&self) -> bool {
        self.collection(USERS.0, USERS.1)
            .is_some_and(|c| !c.documents.is_empty())
    }

    /// Applies one entry to the data (not the oplog), on the primary and on secondaries alike.
    pub fn apply(&mut self, entry: &OplogEntry) -> Result<(), String> {
        if let (Some(lsid), Some(txn)) = (&entry.lsid, entry.txn_number) {
            let last = self.sessions.entry(lsid.clone()).or_insert(txn);
            *last = (*last).max(txn);
        }
        if entry.op == "n" {
            return Ok(());
        }
        let (db, collection) = entry
            .ns
            .split_once('.')
            .ok_or_else(|| format!("namespace {} has no collection", entry.ns))?;
        match entry.op.as_str() {
            "i" => self
                .databases
                .entry(db.to_string())
                .or_default()
                .entry(collection.to_string())
                .or_default()
                .insert(entry.o.clone()),
            "d" => {
                let id = entry.o.get("_id").cloned().unwrap_or(Bson::Null);
                if let Some(found) = self.databases.get_mut(db).and_then(|d| d.get_mut(collection)) {
                    found.remove(&id);
                }
                Ok(())
            }
            "u" => {
                let id = entry
                    .o2
                    .as_ref()
                    .and_then(|o2| o2.get("_id"))
                    .cloned()
                    .unwrap_or(Bson::Null);
                let target = self
                    .databases
                    .entry(db.to_string())
                    .or_default()
                    .entry(collection.to_string())
                    .or_default();
                target.remove(&id);
                target.insert(entry.o.clone())
            }
            "c" => self.apply_command(db, &entry.o),
            other => Err(format!("unknown oplog op {other}")),
        }
    }

    fn apply_command(&mut self, db: &str, command: &Document) -> Result<(), String> {
        let (name, argument) = command.iter().next().ok_or("empty command entry")?;
        match name.as_str() {
            "create" => {
                let collection = argument.as_str().ok_or("create without a name")?;
                let mut options = command.clone();
                options.remove("create");
                let entry = self
                    .databases
                    .entry(db.to_string())
                    .or_default()
                    .entry(collection.to_string())
                    .or_default();
                entry.options = options;
            }
            "drop" => {
                let collection = argument.as_str().ok_or("drop without a name")?;
                if let Some(database) = self.databases.get_mut(db) {
                    database.remove(collection);
                    if database.is_empty() {
                        self.databases.remove(db);
                    }
                }
            }
            "dropDatabase" => {
                self.databases.remove(db);
            }
            "createIndexes" => {
                let collection = argument.as_str().ok_or("createIndexes without a name")?;
                // The server's form, the specification beside the name (a state file written
                // before the simulator logged it so holds it under `spec`).
                let spec = match command.get_document("spec") {
                    Ok(spec) => spec.clone(),
                    Err(_) => {
                        let mut spec = command.clone();
                        spec.remove("createIndexes");
                        spec
                    }
                };
                let entry = self
                    .databases
                    .entry(db.to_string())
                    .or_default()
                    .entry(collection.to_string())
                    .or_default();
                let name = spec.get_str("name").unwrap_or_default().to_string();
                entry
                    .indexes
                    .retain(|i| i.get_str("name").unwrap_or_default() != name);
                entry.indexes.push(spec);
            }
            "dropIndexes" => {
                let collection = argument.as_str().ok_or("dropIndexes without a name")?;
                let index = command.get_str("index").unwrap_or("*").to_string();
                if let Some(entry) = self.databases.get_mut(db).and_then(|d| d.get_mut(collection)) {
                    entry
                        .indexes
                        .retain(|i| index != "*" && i.get_str("name").unwrap_or_default() != index);
                }
            }
            other => return Err(format!("unknown command entry {other}")),
        }
        Ok(())
    }

    /// `(name, sizeOnDisk)` of every database holding a collection.
    pub fn database_sizes(&self) -> Vec<(String, i64)> {
        self.databases
            .iter()
            .filter(|(_, collections)| !collections.is_empty())
            .map(|(name, collections)| {
                (
                    name.clone(),
                    collections.values().map(Collection::size).sum::<i64>() + 4096,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(op: &str, ns: &str, o: Document, time: u32) -> OplogEntry {
        OplogEntry {
            ts: Timestamp { time, increment: 1 },
            t: 1,
            wall: DateTime::now(),
            op: op.into(),
            ns: ns.into(),
            o,
            o2: None,
            lsid: None,
            txn_number: None,
        }
    }

    #[test]
    fn optimes_order_by_term_first() {
        let early_high_term = OpTime {
            ts: Timestamp {
                time: 1,
                increment: 1,
            },
            t: 2,
        };
        let late_low_term = OpTime {
            ts: Timestamp {
                time: 9,
                increment: 1,
            },
            t: 1,
        };
        assert!(early_high_term > late_low_term);
        assert!(OpTime::NULL < late_low_term);
        assert_eq!(
            OpTime::from_bson(Some(&Bson::Document(late_low_term.to_document()))),
            Some(late_low_term)
        );
    }

    #[test]
    fn applies_entries_and_survives_a_round_trip_to_disk() {
        let mut store = Store::default();
        store
            .apply(&entry("i", "app.things", doc! { "_id": 1, "a": 1 }, 1))
            .unwrap();
        store
            .apply(&entry("i", "app.things", doc! { "_id": 2 }, 2))
            .unwrap();
        assert!(
            store
                .apply(&entry("i", "app.things", doc! { "_id": 1.0 }, 3))
                .is_err()
        );
        store
            .apply(&entry("d", "app.things", doc! { "_id": 1 }, 4))
            .unwrap();
        store
            .apply(&entry(
                "c",
                "app.$cmd",
                doc! { "createIndexes": "things", "name": "a_1", "key": { "a": 1 } },
                5,
            ))
            .unwrap();
        store
            .apply(&entry("c", "other.$cmd", doc! { "create": "empty" }, 6))
            .unwrap();
        let mut update = entry(
            "u",
            "admin.system.version",
            doc! { "_id": FCV_ID, "version": "6.0" },
            7,
        );
        update.o2 = Some(doc! { "_id": FCV_ID });
        store.apply(&update).unwrap();
        store.oplog.push(update);

        let directory = std::env::temp_dir().join(format!("quorum-sim-state-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        assert!(Store::load(&directory).unwrap().is_none());
        Store::write(&directory, &store.encode()).unwrap();
        let loaded = Store::load(&directory).unwrap().unwrap();
        std::fs::remove_dir_all(&directory).unwrap();

        let things = loaded.collection("app", "things").unwrap();
        assert_eq!(things.documents, vec![doc! { "_id": 2 }]);
        assert!(
            things.contains_id(&Bson::Int64(2)),
            "the id index is rebuilt on load"
        );
        assert_eq!(things.indexes.len(), 1);
        assert!(loaded.collection("other", "empty").is_some());
        assert_eq!(loaded.fcv().as_deref(), Some("6.0"));
        assert_eq!(loaded.last_optime().ts.time, 7);

        let mut dropped = loaded;
        dropped
            .apply(&entry("c", "app.$cmd", doc! { "drop": "things" }, 8))
            .unwrap();
        assert!(!dropped.databases.contains_key("app"));
    }
}
