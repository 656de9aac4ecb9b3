//! Liveness and readiness.

use maestro_api::ErrorBody;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::state::AppState;

/// The process is up.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    summary = "The process is up",
    responses(
        (status = 200, body = serde_json::Value),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    ),
    security(())
)]
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Postgres answers and NATS is connected; 503 otherwise.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    summary = "Postgres answers and NATS is connected",
    responses(
        (status = 200, body = serde_json::Value),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    ),
    security(())
)]
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
