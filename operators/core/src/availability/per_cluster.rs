//! What an operator's clients keep per cluster beside the cached clients themselves: the
//! credentials and TLS material they are built with, where members are dialled, fingerprints
//! of what was applied. Keyed by the cluster key (`namespace/name`) the [`ClientCache`] uses,
//! and forgotten with the cluster, so a deleted cluster leaves nothing behind.
//!
//! [`ClientCache`]: super::clients::ClientCache

use std::{collections::HashMap, hash::Hash, sync::Mutex};

/// One value per cluster.
pub struct PerCluster<V> {
    values: Mutex<HashMap<String, V>>,
}

impl<V> Default for PerCluster<V> {
    fn default() -> Self {
        Self {
            values: Mutex::new(HashMap::new()),
        }
    }
}

impl<V: Clone> PerCluster<V> {
    pub fn get(&self, cluster: &str) -> Option<V> {
        self.lock().get(cluster).cloned()
    }

    pub fn set(&self, cluster: &str, value: V) {
        self.lock().insert(cluster.to_string(), value);
    }

    /// Stores `value` unless `same` says the stored one equals it; `true` when it changed, so
    /// the caller drops the clients built with the old one.
    pub fn replace(&self, cluster: &str, value: V, same: impl FnOnce(&V, &V) -> bool) -> bool {
        let mut values = self.lock();
        if values.get(cluster).is_some_and(|current| same(current, &value)) {
            return false;
        }
        values.insert(cluster.to_string(), value);
        true
    }

    /// Removes the cluster's value and returns it.
    pub fn forget(&self, cluster: &str) -> Option<V> {
        self.lock().remove(cluster)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, V>> {
        // A panic while holding the lock leaves a consistent map (every write is one insert or
        // remove), so a poisoned lock is still used.
        self.values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Where the operator dials a member when that is not the member's own address (the operator
/// outside the pod network, behind a proxy or a tunnel), by cluster and member.
pub struct Routes<M, A> {
    by_member: PerCluster<HashMap<M, A>>,
}

impl<M, A> Default for Routes<M, A> {
    fn default() -> Self {
        Self {
            by_member: PerCluster::default(),
        }
    }
}

impl<M: Eq + Hash + Clone, A: Clone> Routes<M, A> {
    pub fn set(&self, cluster: &str, member: M, address: A) {
        self.by_member
            .lock()
            .entry(cluster.to_string())
            .or_default()
            .insert(member, address);
    }

    pub fn get(&self, cluster: &str, member: &M) -> Option<A> {
        self.by_member
            .lock()
            .get(cluster)
            .and_then(|routes| routes.get(member))
            .cloned()
    }

    pub fn forget(&self, cluster: &str) {
        self.by_member.forget(cluster);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_replaced_only_when_it_changed_and_forgotten_with_its_cluster() {
        let passwords = PerCluster::default();
        assert!(passwords.replace("ns/a", "one".to_string(), |a, b| a == b));
        assert!(!passwords.replace("ns/a", "one".to_string(), |a, b| a == b));
        assert!(passwords.replace("ns/a", "two".to_string(), |a, b| a == b));
        passwords.set("ns/b", "three".to_string());
        assert_eq!(passwords.forget("ns/a").as_deref(), Some("two"));
        assert_eq!(passwords.get("ns/a"), None);
        assert_eq!(passwords.get("ns/b").as_deref(), Some("three"));
    }

    #[test]
    fn routes_are_per_member_and_forgotten_with_their_cluster() {
        let routes = Routes::default();
        routes.set("ns/a", 0_usize, "127.0.0.1:1");
        routes.set("ns/a", 1, "127.0.0.1:2");
        routes.set("ns/b", 0, "127.0.0.1:3");
        assert_eq!(routes.get("ns/a", &1), Some("127.0.0.1:2"));
        routes.forget("ns/a");
        assert_eq!(routes.get("ns/a", &0), None);
        assert_eq!(routes.get("ns/b", &0), Some("127.0.0.1:3"));
    }
}
