//! Prometheus metrics shared by every controller in a process.
//!
//! Label values are bounded: the controller name and a fixed set of error reasons. Per-cluster
//! series, where an operator adds them, are removed when the cluster is deleted.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use crate::availability::metrics::AdminMetrics;
use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: String,
    reason: String,
}

/// One cluster's backup series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackupLabels {
    engine: String,
    namespace: String,
    cluster: String,
}

/// One cluster's members of one health.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    engine: String,
    namespace: String,
    cluster: String,
    health: String,
}

/// One operator process.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperatorLabels {
    operator: String,
}

/// The health values a member is counted under: the availability layer's tri-state.
pub const MEMBER_HEALTHS: [&str; 3] = ["Healthy", "Unhealthy", "Unknown"];

fn duration_histogram() -> Histogram {
    // 5 ms to ~80 s: a reconcile that waits on an admin call can take seconds.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// How many of `healths` are of each of [`MEMBER_HEALTHS`]; anything else counts as `Unknown`.
fn count_by_health<'a>(healths: impl IntoIterator<Item = &'a str>) -> [i64; 3] {
    let mut counts = [0i64; 3];
    for health in healths {
        let index = MEMBER_HEALTHS.iter().position(|h| *h == health).unwrap_or(2);
        counts[index] += 1;
    }
    counts
}

/// The process's metric registry and the reconcile metrics every controller reports.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    durations: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    backup_last_success: Family<BackupLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    backup_failures: Family<BackupLabels, Counter>,
    /// The backup series of each cluster (`namespace/name`), removed when it is deleted.
    backup_series: Mutex<HashMap<String, BackupLabels>>,
    members: Family<MemberLabels, Gauge>,
    voters: Family<MemberLabels, Gauge>,
    /// The member and voter series of each cluster (`namespace/name`), removed when it is deleted.
    member_series: Mutex<HashMap<String, Vec<MemberLabels>>>,
    leader: Family<OperatorLabels, Gauge>,
    /// The admin layer's call, retry and circuit-breaker metrics.
    pub admin: AdminMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with the reconcile metrics under the `quorum_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("quorum");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let durations = Family::<ControllerLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        registry.register("reconcile", "Reconciliations started", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciliations that failed, by error reason",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconciliation",
            durations.clone(),
        );
        let backup_last_success = Family::<BackupLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        let backup_failures = Family::<BackupLabels, Counter>::default();
        registry.register(
            "backup_last_success_timestamp_seconds",
            "When the newest successful backup of a cluster completed (Unix time)",
            backup_last_success.clone(),
        );
        registry.register(
            "backup_failures",
            "Backup runs of a cluster that failed",
            backup_failures.clone(),
        );
        let members = Family::<MemberLabels, Gauge>::default();
        registry.register(
            "members",
            "A cluster's members by health (Healthy, Unhealthy, Unknown), as its last pass saw them",
            members.clone(),
        );
        let voters = Family::<MemberLabels, Gauge>::default();
        registry.register(
            "voters",
            "A cluster's voters by health: the members whose majority it needs to elect a leader or fail over \
(etcd's voting members, MongoDB's members with a vote, the Sentinels of Redis replication, one per shard for its \
primary in Redis cluster mode, every MySQL member), as its last pass saw them",
            voters.clone(),
        );
        let leader = Family::<OperatorLabels, Gauge>::default();
        registry.register(
            "leader",
            "1 while this operator process runs its controllers (it holds the leader lease, or runs without election), 0 while it stands by",
            leader.clone(),
        );
        let admin = AdminMetrics::default();
        admin.register(&mut registry);
        Self {
            registry,
            reconciles,
            errors,
            durations,
            backup_last_success,
            backup_failures,
            backup_series: Mutex::new(HashMap::new()),
            members,
            voters,
            member_series: Mutex::new(HashMap::new()),
            leader,
            admin,
        }
    }

    /// The registry, for components that add metrics of their own at start-up.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Records one finished reconciliation of `controller` that took `elapsed`.
    pub fn observe_reconcile(&self, controller: &str, elapsed: Duration) {
        let labels = ControllerLabels {
            controller: controller.to_string(),
        };
        self.reconciles.get_or_create(&labels).inc();
        self.durations
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Records one failed reconciliation of `controller` with the error's metric label.
    pub fn observe_error(&self, controller: &str, reason: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                controller: controller.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Records that a backup of `namespace/cluster` completed at `completed_at` (Unix seconds);
    /// the series keeps the newest of the times it is given.
    pub fn observe_backup_success(&self, engine: &str, namespace: &str, cluster: &str, completed_at: f64) {
        let gauge = self
            .backup_last_success
            .get_or_create(&self.backup_labels(engine, namespace, cluster));
        if completed_at > gauge.get() {
            gauge.set(completed_at);
        }
    }

    /// Counts a failed backup run of `namespace/cluster`.
    pub fn observe_backup_failure(&self, engine: &str, namespace: &str, cluster: &str) {
        self.backup_failures
            .get_or_create(&self.backup_labels(engine, namespace, cluster))
            .inc();
    }

    /// Sets how many of `namespace/cluster`'s members are of each health in `healths` (one
    /// entry per member: `Healthy`, `Unhealthy` or `Unknown`; anything else counts as `Unknown`),
    /// and how many of its voters are, in `voters` (see the `voters` metric).
    pub fn observe_members<'a>(
        &self,
        engine: &str,
        namespace: &str,
        cluster: &str,
        healths: impl IntoIterator<Item = &'a str>,
        voters: impl IntoIterator<Item = &'a str>,
    ) {
        let members = count_by_health(healths);
        let voting = count_by_health(voters);
        let series: Vec<MemberLabels> = MEMBER_HEALTHS
            .iter()
            .map(|health| MemberLabels {
                engine: engine.to_string(),
                namespace: namespace.to_string(),
                cluster: cluster.to_string(),
                health: (*health).to_string(),
            })
            .collect();
        for ((labels, members), voting) in series.iter().zip(members).zip(voting) {
            self.members.get_or_create(labels).set(members);
            self.voters.get_or_create(labels).set(voting);
        }
        self.member_series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(format!("{namespace}/{cluster}"), series);
    }

    /// [`Self::observe_members`] for the cluster object `cluster`.
    pub fn observe_members_of<'a>(
        &self,
        engine: &str,
        cluster: &impl kube::ResourceExt,
        healths: impl IntoIterator<Item = &'a str>,
        voters: impl IntoIterator<Item = &'a str>,
    ) {
        self.observe_members(
            engine,
            &cluster.namespace().unwrap_or_default(),
            &cluster.name_any(),
            healths,
            voters,
        );
    }

    /// Records whether this process of `operator` runs its controllers now.
    pub fn set_leading(&self, operator: &str, leading: bool) {
        self.leader
            .get_or_create(&OperatorLabels {
                operator: operator.to_string(),
            })
            .set(i64::from(leading));
    }

    /// Removes the per-cluster series of a deleted cluster (`namespace/name`).
    pub fn forget_cluster(&self, key: &str) {
        let members = self
            .member_series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
        for labels in members.into_iter().flatten() {
            self.members.remove(&labels);
            self.voters.remove(&labels);
        }
        let labels = self
            .backup_series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
        if let Some(labels) = labels {
            self.backup_last_success.remove(&labels);
            self.backup_failures.remove(&labels);
        }
    }

    fn backup_labels(&self, engine: &str, namespace: &str, cluster: &str) -> BackupLabels {
        let labels = BackupLabels {
            engine: engine.to_string(),
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
        };
        self.backup_series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(format!("{namespace}/{cluster}"), labels.clone());
        labels
    }

    /// The registry in Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_counted_by_health_and_go_with_the_cluster() {
        let metrics = Metrics::new();
        metrics.observe_members(
            "etcd",
            "prod",
            "main",
            ["Healthy", "Unknown", "Healthy", "Unhealthy"],
            ["Healthy", "Unknown", "Healthy"],
        );
        metrics.set_leading("quorum-etcd-operator", true);
        let text = metrics.render();
        let series = |metric: &str, health: &str, count: i64| {
            format!(
                r#"quorum_{metric}{{engine="etcd",namespace="prod",cluster="main",health="{health}"}} {count}"#
            )
        };
        for (metric, health, count) in [
            ("members", "Healthy", 2),
            ("members", "Unhealthy", 1),
            ("members", "Unknown", 1),
            ("voters", "Healthy", 2),
            ("voters", "Unhealthy", 0),
            ("voters", "Unknown", 1),
        ] {
            assert!(
                text.contains(&series(metric, health, count)),
                "{metric} {health} {count} in {text}"
            );
        }
        assert!(
            text.contains(r#"quorum_leader{operator="quorum-etcd-operator"} 1"#),
            "{text}"
        );
        metrics.observe_members("etcd", "prod", "main", ["Healthy"; 3], ["Healthy"; 3]);
        assert!(metrics.render().contains(&series("members", "Unknown", 0)));
        assert!(metrics.render().contains(&series("voters", "Unknown", 0)));
        metrics.forget_cluster("prod/main");
        assert!(!metrics.render().contains("quorum_members{"));
        assert!(!metrics.render().contains("quorum_voters{"));
    }

    #[test]
    fn renders_reconcile_count_duration_and_errors() {
        let metrics = Metrics::new();
        metrics.observe_reconcile("etcdcluster", Duration::from_millis(20));
        metrics.observe_reconcile("etcdcluster", Duration::from_millis(30));
        metrics.observe_error("etcdcluster", "apply");
        let text = metrics.render();
        assert!(
            text.contains(r#"quorum_reconcile_total{controller="etcdcluster"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"quorum_reconcile_errors_total{controller="etcdcluster",reason="apply"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"quorum_reconcile_duration_seconds_count{controller="etcdcluster"} 2"#),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn backup_series_keep_the_newest_success_count_failures_and_go_with_the_cluster() {
        let metrics = Metrics::new();
        metrics.observe_backup_success("redis", "prod", "cache", 1_700_000_100.0);
        metrics.observe_backup_success("redis", "prod", "cache", 1_700_000_000.0);
        metrics.observe_backup_failure("redis", "prod", "cache");
        let series = r#"{engine="redis",namespace="prod",cluster="cache"}"#;
        let text = metrics.render();
        assert!(
            text.contains(&format!(
                "quorum_backup_last_success_timestamp_seconds{series} 1700000100.0"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("quorum_backup_failures_total{series} 1")),
            "{text}"
        );
        metrics.forget_cluster("prod/cache");
        let text = metrics.render();
        assert!(!text.contains(series), "{text}");
    }
}
