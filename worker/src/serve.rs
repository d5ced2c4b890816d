//! The worker's HTTP endpoint (`--metrics-addr`): `/metrics` in Prometheus' text format,
//! `/healthz` (liveness) and `/readyz` (readiness), and the [`Health`] state behind them.
//!
//! Liveness fails only when a worker loop has died with an error: a worker busy with long
//! tasks is alive. Readiness needs a worker that has reached its queue and is not
//! draining, so Kubernetes stops counting a pod as soon as SIGTERM arrives.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::metrics::WorkerMetrics;

/// What the health endpoints report, shared by the workers of a process.
#[derive(Debug, Default)]
pub struct Health {
    /// Workers whose loop has reached the queue and is running.
    running: AtomicUsize,
    /// Set when shutdown starts: no more claims.
    draining: AtomicBool,
    /// Set when a worker loop ended with an error.
    failed: AtomicBool,
}

impl Health {
    /// A worker loop reached its queue.
    pub fn started(&self) {
        self.running.fetch_add(1, Ordering::Relaxed);
    }

    /// A worker loop ended (`ok`: by shutdown).
    pub fn stopped(&self, ok: bool) {
        self.running.fetch_sub(1, Ordering::Relaxed);
        if !ok {
            self.failed.store(true, Ordering::Relaxed);
        }
    }

    /// Shutdown started: stop claiming, finish or release what is held.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Whether the process should be restarted.
    pub fn is_live(&self) -> bool {
        !self.failed.load(Ordering::Relaxed)
    }

    /// Whether the process takes tasks.
    pub fn is_ready(&self) -> bool {
        self.is_live()
            && !self.draining.load(Ordering::Relaxed)
            && self.running.load(Ordering::Relaxed) > 0
    }
}

#[derive(Clone)]
struct Shared {
    metrics: Arc<WorkerMetrics>,
    health: Arc<Health>,
}

/// Binds `addr` and serves the endpoints until `stop` fires. Returns the bound address
/// (port 0 picks a free one) once listening, so a bad address fails at start-up.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<WorkerMetrics>,
    health: Arc<Health>,
    stop: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route(METRICS_PATH, get(render_metrics))
        .route(LIVENESS_PATH, get(healthz))
        .route(READINESS_PATH, get(readyz))
        .with_state(Shared { metrics, health });
    let handle = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the metrics endpoint stopped");
        }
    });
    tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
    Ok((bound, handle))
}

/// Where the metrics are served (the PodMonitor's `path`).
pub const METRICS_PATH: &str = "/metrics";
/// The liveness probe's path.
pub const LIVENESS_PATH: &str = "/healthz";
/// The readiness probe's path.
pub const READINESS_PATH: &str = "/readyz";

/// The metrics' content type: `prometheus_client` writes OpenMetrics text (`# EOF` at
/// the end, counters typed without their `_total`), not Prometheus' 0.0.4 format.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn render_metrics(State(s): State<Shared>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        s.metrics.render(),
    )
}

async fn healthz(State(s): State<Shared>) -> impl IntoResponse {
    if s.health.is_live() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "a worker loop failed; see the log\n",
        )
    }
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    let h = &s.health;
    if h.is_ready() {
        (StatusCode::OK, "ready\n")
    } else if !h.is_live() {
        (StatusCode::SERVICE_UNAVAILABLE, "failed\n")
    } else if h.draining.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let status = out[9..12].parse().unwrap();
        (status, out)
    }

    #[tokio::test]
    async fn readiness_follows_start_drain_and_failure() {
        let metrics = Arc::new(WorkerMetrics::new());
        let health = Arc::new(Health::default());
        let stop = CancellationToken::new();
        let (addr, server) = serve(
            "127.0.0.1:0".parse().unwrap(),
            metrics.clone(),
            health.clone(),
            stop.clone(),
        )
        .await
        .unwrap();
        assert_eq!(get(addr, "/readyz").await.0, 503, "not started");
        assert_eq!(get(addr, "/healthz").await.0, 200);
        health.started();
        assert_eq!(get(addr, "/readyz").await.0, 200);
        metrics.claimed(crate::metrics::Kind::Backup);
        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.contains("tablevault_tasks_claimed_total{kind=\"backup\"} 1"));
        assert!(
            body.contains(&format!("content-type: {METRICS_CONTENT_TYPE}\r\n")),
            "{body}"
        );
        assert!(body.ends_with("# EOF\n"), "OpenMetrics text: {body}");
        health.drain();
        let (status, body) = get(addr, "/readyz").await;
        assert_eq!((status, body.ends_with("draining\n")), (503, true));
        assert_eq!(get(addr, "/healthz").await.0, 200, "draining is alive");
        health.stopped(false);
        assert_eq!(get(addr, "/healthz").await.0, 503);
        stop.cancel();
        server.await.unwrap();
    }
}
