//! Metrics of the admin layer: every call by engine, verb and outcome, its duration, retries,
//! circuit breakers, and changes of primary (failovers and switchovers). Labels are bounded: engines and verbs are fixed sets in code.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    engine: String,
    verb: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    engine: String,
    verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EngineLabels {
    engine: String,
}

fn call_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// How one admin call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Error,
    Timeout,
    CircuitOpen,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
            Outcome::CircuitOpen => "circuit_open",
        }
    }
}

/// The admin layer's metric families.
#[derive(Clone)]
pub struct AdminMetrics {
    calls: Family<CallLabels, Counter>,
    durations: Family<VerbLabels, Histogram, fn() -> Histogram>,
    retries: Family<VerbLabels, Counter>,
    breaker_trips: Family<EngineLabels, Counter>,
    breakers_open: Family<EngineLabels, Gauge>,
    primary_changes: Family<VerbLabels, Counter>,
    primary_change_durations: Family<VerbLabels, Histogram, fn() -> Histogram>,
    failovers_from_loss: Family<EngineLabels, Histogram, fn() -> Histogram>,
}

impl Default for AdminMetrics {
    fn default() -> Self {
        Self {
            calls: Family::default(),
            durations: Family::new_with_constructor(call_histogram),
            retries: Family::default(),
            breaker_trips: Family::default(),
            breakers_open: Family::default(),
            primary_changes: Family::default(),
            primary_change_durations: Family::new_with_constructor(call_histogram),
            failovers_from_loss: Family::new_with_constructor(call_histogram),
        }
    }
}

impl AdminMetrics {
    /// Registers the families under `registry` (which carries the `quorum_` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "admin_calls",
            "Database admin calls by outcome",
            self.calls.clone(),
        );
        registry.register(
            "admin_call_duration_seconds",
            "Duration of database admin calls",
            self.durations.clone(),
        );
        registry.register(
            "admin_retries",
            "Retries of idempotent admin reads",
            self.retries.clone(),
        );
        registry.register(
            "admin_circuit_trips",
            "Circuit breakers that opened",
            self.breaker_trips.clone(),
        );
        registry.register(
            "admin_circuits_open",
            "Circuit breakers open now",
            self.breakers_open.clone(),
        );
        registry.register(
            "primary_changes",
            "Changes of primary by kind (verb: Failover or Switchover)",
            self.primary_changes.clone(),
        );
        registry.register(
            "primary_change_duration_seconds",
            "From the decision to change primary to the new primary accepting writes",
            self.primary_change_durations.clone(),
        );
        registry.register(
            "failover_from_loss_seconds",
            "From the old primary's loss (the operator's first failed observation of it, or the database's last contact with it) to the new primary accepting writes, or to the operator's first sight of it where the database does not say",
            self.failovers_from_loss.clone(),
        );
    }

    /// Records how long a failover's clients were without a writable primary, as the operator
    /// saw it: from its first failed observation of the old primary.
    pub fn observe_failover_from_loss(&self, engine: &str, seconds: f64) {
        self.failovers_from_loss
            .get_or_create(&EngineLabels {
                engine: engine.into(),
            })
            .observe(seconds);
    }

    /// Records a completed change of primary of `kind` (`Failover`, `Switchover`) the operator
    /// made, `seconds` from its decision.
    pub fn observe_primary_change(&self, engine: &str, kind: &str, seconds: f64) {
        let labels = VerbLabels {
            engine: engine.into(),
            verb: kind.into(),
        };
        self.primary_changes.get_or_create(&labels).inc();
        self.primary_change_durations
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// Records a change of primary the database made by itself: counted as a `Failover`, its
    /// time from loss observed when the operator saw the old primary fail first (no decision of
    /// the operator's to time it from).
    pub fn observe_observed_failover(&self, engine: &str, failover: &crate::crd::ObservedFailover) {
        let labels = VerbLabels {
            engine: engine.into(),
            verb: "Failover".into(),
        };
        self.primary_changes.get_or_create(&labels).inc();
        if let Some(seconds) = failover.from_loss_seconds() {
            self.observe_failover_from_loss(engine, seconds);
        }
    }

    pub fn observe_call(&self, engine: &str, verb: &str, outcome: Outcome, seconds: f64) {
        self.calls
            .get_or_create(&CallLabels {
                engine: engine.into(),
                verb: verb.into(),
                outcome: outcome.as_str().into(),
            })
            .inc();
        if outcome != Outcome::CircuitOpen {
            self.durations
                .get_or_create(&VerbLabels {
                    engine: engine.into(),
                    verb: verb.into(),
                })
                .observe(seconds);
        }
    }

    pub fn observe_retry(&self, engine: &str, verb: &str) {
        self.retries
            .get_or_create(&VerbLabels {
                engine: engine.into(),
                verb: verb.into(),
            })
            .inc();
    }

    pub fn breaker_opened(&self, engine: &str) {
        let labels = EngineLabels {
            engine: engine.into(),
        };
        self.breaker_trips.get_or_create(&labels).inc();
        self.breakers_open.get_or_create(&labels).inc();
    }

    /// How many breakers of `engine` are open now, as the gauge says.
    pub fn open_circuits(&self, engine: &str) -> i64 {
        self.breakers_open
            .get_or_create(&EngineLabels {
                engine: engine.into(),
            })
            .get()
    }

    pub fn breaker_closed(&self, engine: &str) {
        self.breakers_open
            .get_or_create(&EngineLabels {
                engine: engine.into(),
            })
            .dec();
    }
}
