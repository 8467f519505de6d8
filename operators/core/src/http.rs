//! The operator's HTTP endpoint: `/metrics` for Prometheus, `/healthz` for liveness and
//! `/readyz` for readiness.
//!
//! Both follow the process's [`Phase`], which each answer names in its body. Readiness means
//! the process has reached the API server and is either running its controllers or standing
//! by for the leader lease: a standby must count as ready, or a one-replica Deployment's
//! rolling update would wait for ever (the new pod cannot lead before the old one, which holds
//! the lease, is stopped, and the old one is stopped only once the new one is ready).
//! Liveness means the process is doing its job; it fails once the controllers stopped without
//! a shutdown request (the process then also exits), so the kubelet restarts a process that
//! would otherwise answer probes and reconcile nothing.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU8, Ordering},
    },
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Where the process is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Reaching the API server.
    Starting = 0,
    /// Waiting for the leader lease.
    Standby = 1,
    /// Leading (or alone) with its controllers running.
    Running = 2,
    /// Shutting down as asked.
    Stopping = 3,
    /// The controllers stopped without being asked to.
    Failed = 4,
}

impl Phase {
    fn from_u8(value: u8) -> Self {
        match value {
            0 => Self::Starting,
            1 => Self::Standby,
            2 => Self::Running,
            3 => Self::Stopping,
            _ => Self::Failed,
        }
    }

    /// `/readyz`: running its controllers, or ready to take over.
    pub fn ready(self) -> bool {
        matches!(self, Self::Standby | Self::Running)
    }

    /// `/healthz`: everything but controllers that stopped by themselves.
    pub fn live(self) -> bool {
        self != Self::Failed
    }
}

/// The process's phase, shared between the runner and the HTTP endpoint.
#[derive(Clone)]
pub struct Readiness(Arc<AtomicU8>);

impl Default for Readiness {
    fn default() -> Self {
        Self(Arc::new(AtomicU8::new(Phase::Starting as u8)))
    }
}

impl Readiness {
    pub fn set(&self, phase: Phase) {
        self.0.store(phase as u8, Ordering::SeqCst);
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.0.load(Ordering::SeqCst))
    }
}

#[derive(Clone)]
struct Endpoints {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

/// The router with `/metrics`, `/healthz` and `/readyz`.
pub fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(live))
        .route("/readyz", get(ready))
        .with_state(Endpoints { metrics, readiness })
}

async fn render_metrics(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        endpoints.metrics.render(),
    )
}

async fn ready(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    answer(endpoints.readiness.phase(), Phase::ready)
}

async fn live(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    answer(endpoints.readiness.phase(), Phase::live)
}

fn answer(phase: Phase, passes: fn(Phase) -> bool) -> (StatusCode, String) {
    let status = if passes(phase) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, format!("{phase:?}"))
}

/// Binds `address` and returns the bound address with the server future to spawn.
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Readiness,
) -> std::io::Result<(SocketAddr, impl Future<Output = std::io::Result<()>>)> {
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let app = router(metrics, readiness);
    Ok((bound, async move { axum::serve(listener, app).await }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_answers_the_probes_as_documented() {
        let table = [
            (Phase::Starting, false, true),
            (Phase::Standby, true, true),
            (Phase::Running, true, true),
            (Phase::Stopping, false, true),
            (Phase::Failed, false, false),
        ];
        let readiness = Readiness::default();
        for (phase, ready, live) in table {
            readiness.set(phase);
            assert_eq!(readiness.phase(), phase);
            assert_eq!((phase.ready(), phase.live()), (ready, live), "{phase:?}");
        }
    }
}
