//! The operator's HTTP endpoint: `/metrics` for Prometheus, `/healthz` for liveness and
//! `/readyz` for readiness.
//!
//! Liveness answers as long as the process serves HTTP. Readiness turns on once the operator
//! has reached the API server and started its controllers (or is a standby waiting for the
//! leader lease), and off again when it shuts down.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Shared readiness flag.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
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
        .route("/healthz", get(|| async { "ok" }))
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
    if endpoints.readiness.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
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
