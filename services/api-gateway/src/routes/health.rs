//! Liveness and readiness.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::state::AppState;

/// The process is up.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Postgres answers and NATS is connected; 503 otherwise.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let postgres = tokio::time::timeout(Duration::from_secs(2), maestro_db::ping(&state.pool))
        .await
        .is_ok_and(|r| r.is_ok());
    let nats = state.bus.nats.connection_state() == async_nats::connection::State::Connected;
    let ready = postgres && nats;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "checks": {"postgres": postgres, "nats": nats},
    });
    (status, Json(body))
}
