//! Prometheus metrics shared by every controller in a process.
//!
//! Label values are bounded: the controller name and a fixed set of error reasons. Per-cluster
//! series, where an operator adds them, are removed when the cluster is deleted.

use std::time::Duration;

use crate::availability::metrics::AdminMetrics;
use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
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

fn duration_histogram() -> Histogram {
    // 5 ms to ~80 s: a reconcile that waits on an admin call can take seconds.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// The process's metric registry and the reconcile metrics every controller reports.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    durations: Family<ControllerLabels, Histogram, fn() -> Histogram>,
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
        let admin = AdminMetrics::default();
        admin.register(&mut registry);
        Self {
            registry,
            reconciles,
            errors,
            durations,
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
}
