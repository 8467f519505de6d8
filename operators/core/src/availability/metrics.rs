//! Metrics of the admin layer: every call by engine, verb and outcome, its duration, retries,
//! and circuit breakers. Labels are bounded: engines and verbs are fixed sets in code.

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
}

impl Default for AdminMetrics {
    fn default() -> Self {
        Self {
            calls: Family::default(),
            durations: Family::new_with_constructor(call_histogram),
            retries: Family::default(),
            breaker_trips: Family::default(),
            breakers_open: Family::default(),
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

    pub fn breaker_closed(&self, engine: &str) {
        self.breakers_open
            .get_or_create(&EngineLabels {
                engine: engine.into(),
            })
            .dec();
    }
}
