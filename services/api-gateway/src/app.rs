//! Building and serving the gateway: routes, middleware, the listener.

use std::net::SocketAddr;

use anyhow::Context as _;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::Request;
use axum::routing::{delete, get, post, put};
use axum::serve::ListenerExt as _;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;

use crate::config::Settings;
use crate::routes;
use crate::state::AppState;

/// All routes.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route(
            "/api/local/tasks",
            post(routes::tasks::create).get(routes::tasks::list),
        )
        .route("/api/local/tasks/{id}", get(routes::tasks::get))
        .route("/api/local/tasks/{id}/events", get(routes::history::events))
        .route(
            "/api/local/tasks/{id}/files/{*path}",
            get(routes::files::get),
        )
        .route(
            "/api/local/tasks/{id}/subtasks",
            get(routes::history::subtasks),
        )
        .route(
            "/api/local/tasks/{id}/transcript",
            get(routes::history::transcript),
        )
        .route("/api/local/pieces", get(routes::history::pieces))
        .route(
            "/api/local/tasks/{id}/stream",
            get(routes::stream::task_stream),
        )
        .route(
            "/api/local/tasks/{id}/jobs/{job_id}/stream",
            get(routes::stream::job_stream),
        )
        .route(
            "/api/local/tasks/{id}/comments",
            post(routes::comments::create).get(routes::comments::list),
        )
        .route(
            "/api/local/tasks/{id}/continue",
            post(routes::continues::create),
        )
        .route(
            "/api/local/tasks/{id}/cancel",
            post(routes::comments::cancel),
        )
        .merge(pauses_and_webhooks())
        .merge(schedules_and_inbox())
        .fallback(routes::not_found);
    Router::new()
        .route("/healthz", get(routes::health::healthz))
        .route("/readyz", get(routes::health::readyz))
        .merge(api)
        .merge(crate::a2a::router())
        .layer(DefaultBodyLimit::max(state.settings.max_body_bytes))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
                let span = tracing::info_span!(
                    "http",
                    method = %request.method(),
                    path = %request.uri().path(),
                    owner = tracing::field::Empty
                );
                maestro_runtime::http_trace::adopt(&span, request.headers());
                span
            }),
        )
        .with_state(state)
}

/// The routes of pauses (required actions, decisions, MCP tokens) and of webhooks.
fn pauses_and_webhooks() -> Router<AppState> {
    Router::new()
        .route(
            "/api/local/tasks/{id}/required-actions",
            get(routes::actions::list),
        )
        .route(
            "/api/local/tasks/{id}/required-actions/{rid}/decide",
            post(routes::actions::decide),
        )
        .route(
            "/api/local/tasks/{id}/tool-requests/{rid}/decide",
            post(routes::actions::decide_tool),
        )
        .route(
            "/api/local/tasks/{id}/package-requests/{rid}/decide",
            post(routes::actions::decide_package),
        )
        .route(
            "/api/local/mcp-servers/{server}/token",
            put(routes::actions::put_token),
        )
        .route(
            "/api/webhooks",
            post(routes::webhooks::create).get(routes::webhooks::list),
        )
        .route("/api/webhooks/{id}", delete(routes::webhooks::delete))
        .route(
            "/api/webhooks/{id}/deliveries",
            get(routes::webhooks::deliveries),
        )
        .route(
            "/api/webhooks/{id}/deliveries/{delivery_id}/redeliver",
            post(routes::webhooks::redeliver),
        )
        .route("/api/webhooks/{id}/enable", post(routes::webhooks::enable))
}

/// The routes of schedules, the inbox and the activity feed.
fn schedules_and_inbox() -> Router<AppState> {
    Router::new()
        .route(
            "/api/local/schedules",
            post(routes::schedules::create).get(routes::schedules::list),
        )
        .route(
            "/api/local/schedules/{id}",
            get(routes::schedules::get)
                .patch(routes::schedules::update)
                .delete(routes::schedules::delete),
        )
        .route(
            "/api/local/schedules/{id}/pause",
            post(routes::schedules::pause),
        )
        .route(
            "/api/local/schedules/{id}/resume",
            post(routes::schedules::resume),
        )
        .route(
            "/api/local/schedules/{id}/run",
            post(routes::schedules::run_now),
        )
        .route(
            "/api/local/schedules/{id}/runs",
            get(routes::schedules::runs),
        )
        .route("/api/local/inbox", get(routes::inbox::list))
        .route("/api/local/inbox/stream", get(routes::inbox::stream))
        .route(
            "/api/local/inbox/read-all",
            post(routes::inbox::mark_all_read),
        )
        .route("/api/local/inbox/{id}/read", post(routes::inbox::mark_read))
        .route("/api/local/activity", get(routes::inbox::activity))
}

/// Bind, announce the address, and serve until `shutdown`. Then the listener closes, SSE
/// streams end (clients resume elsewhere with `Last-Event-ID`) and open requests get
/// `SHUTDOWN_GRACE_MS` to finish.
pub async fn serve(mut settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(settings.addr)
        .await
        .with_context(|| format!("bind {}", settings.addr))?;
    let addr: SocketAddr = listener.local_addr()?;
    // The address as bound (a port of 0 is chosen now): the card's URLs name it.
    settings.addr = addr;
    let grace = settings.shutdown_grace;
    let state = AppState::connect(settings, shutdown.clone()).await?;
    let on_nats = crate::a2a::nats::serve(state.clone());
    tokio::spawn(async move {
        if let Err(e) = on_nats.await {
            tracing::error!(error = %e, "A2A over NATS stopped");
        }
    });
    let signals = crate::signals::serve(state.clone());
    tokio::spawn(async move {
        if let Err(e) = signals.await {
            tracing::error!(error = %e, "signal requests over NATS stopped");
        }
    });
    tracing::info!(%addr, "api-gateway listening");
    maestro_runtime::announce_ready("api-gateway", Some(addr));
    // Small writes (SSE events, short answers) go out at once: without TCP_NODELAY, Nagle's
    // algorithm holds an event back until the client's delayed ACK of the previous one.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
    });
    // `into_make_service` finalizes the routes once; handing `axum::serve` the router itself
    // rebuilds its route tables for every connection (~18 KiB each, heaptrack), which a
    // thousand idle SSE clients keep.
    let server = axum::serve(listener, router(state).into_make_service())
        .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        served = server => served.context("serve HTTP"),
        _ = deadline => {
            tracing::warn!(?grace, "shutdown grace period over; dropping open connections");
            Ok(())
        }
    }
}
