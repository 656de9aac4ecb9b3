//! Building and serving the gateway: routes, middleware, the listener.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::config::Settings;
use crate::routes;
use crate::state::AppState;

/// The REST API's OpenAPI document: every route registered below through `routes!` is in it
/// (its path and method come from the handler's `#[utoipa::path]`, so the two cannot drift),
/// with the bearer scheme and the error shape.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "MAESTRO REST API",
        description = "Durable agent tasks: create and follow tasks, answer what their jobs \
                       wait for, comment, continue, schedule, subscribe webhooks. Every error \
                       is `{\"error\": {\"code\", \"message\"}}`. See docs/api.md.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    // The routes with a wildcard segment: axum spells it `{*path}`, OpenAPI `{path}`.
    paths(routes::files::get, routes::space_files::get),
    components(schemas(maestro_api::ErrorBody)),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "tasks", description = "Tasks, their jobs, history and files"),
        (name = "streams", description = "Live streams (Server-Sent Events)"),
        (name = "comments", description = "Comments and interjections"),
        (name = "actions", description = "What paused jobs wait for, and the answers"),
        (name = "webhooks", description = "Webhook subscriptions and deliveries"),
        (name = "schedules", description = "Cron schedules of tasks"),
        (name = "inbox", description = "Notifications and the activity feed"),
        (name = "spaces", description = "Spaces, their members and settings"),
        (name = "admin", description = "API tokens (admin tokens only)"),
        (name = "health", description = "Liveness and readiness"),
    )
)]
pub struct ApiDoc;

/// `Authorization: Bearer <token>` (`API_TOKENS`).
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "An API token: one of API_TOKENS, or one made with POST /api/local/admin/tokens",
            ))
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The REST routes and their OpenAPI document.
pub fn api() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    use routes::{
        actions, comments, continues, files, health, history, inbox, mcp_logins, me, schedules,
        space_files, spaces, stream, tasks, tokens, webhooks,
    };
    use utoipa::OpenApi as _;
    use utoipa_axum::routes;
    utoipa_axum::router::OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(tasks::create, tasks::list))
        .routes(routes!(tasks::get))
        .routes(routes!(history::events))
        .routes(routes!(files::list))
        .route("/api/local/tasks/{id}/files/{*path}", get(files::get))
        .routes(routes!(files::attachment))
        .routes(routes!(history::subtasks))
        .routes(routes!(history::transcript))
        .routes(routes!(history::pieces))
        .routes(routes!(stream::task_stream))
        .routes(routes!(stream::job_stream))
        .routes(routes!(comments::create, comments::list))
        .routes(routes!(continues::create))
        .routes(routes!(comments::cancel))
        .routes(routes!(actions::list))
        .routes(routes!(actions::decide))
        .routes(routes!(actions::decide_tool))
        .routes(routes!(actions::decide_package))
        .routes(routes!(actions::put_token))
        .routes(routes!(mcp_logins::start))
        .routes(routes!(mcp_logins::callback))
        .routes(routes!(webhooks::create, webhooks::list))
        .routes(routes!(webhooks::delete))
        .routes(routes!(webhooks::deliveries))
        .routes(routes!(webhooks::redeliver))
        .routes(routes!(webhooks::enable))
        .routes(routes!(schedules::create, schedules::list))
        .routes(routes!(
            schedules::get,
            schedules::update,
            schedules::delete
        ))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(schedules::run_now))
        .routes(routes!(schedules::runs))
        .routes(routes!(inbox::list))
        .routes(routes!(inbox::stream))
        .routes(routes!(inbox::mark_all_read))
        .routes(routes!(inbox::mark_read))
        .routes(routes!(inbox::activity))
        .routes(routes!(spaces::create, spaces::list))
        .routes(routes!(spaces::get, spaces::update))
        .routes(routes!(spaces::put_member, spaces::delete_member))
        .routes(routes!(spaces::archive))
        .routes(routes!(spaces::unarchive))
        .routes(routes!(space_files::list))
        .route(
            "/api/local/spaces/{id}/files/{*path}",
            get(space_files::get),
        )
        .routes(routes!(space_files::commits))
        .routes(routes!(me::get))
        .routes(routes!(tokens::create, tokens::list))
        .routes(routes!(tokens::revoke))
        .split_for_parts()
}

/// The OpenAPI document as served at `/api/openapi.json`.
pub fn openapi_json() -> String {
    api().1.to_pretty_json().unwrap_or_default()
}

/// All routes.
pub fn router(state: AppState) -> Router {
    let (api, doc) = api();
    let doc = axum::body::Bytes::from(doc.to_pretty_json().unwrap_or_default());
    let openapi = get(move || {
        let doc = doc.clone();
        async move {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                doc,
            )
        }
    });
    Router::new()
        .route("/api/openapi.json", openapi)
        .route("/metrics", get(maestro_runtime::metrics::handler))
        .merge(api)
        .fallback(routes::not_found)
        .merge(crate::a2a::router())
        .merge(crate::ui::router())
        .layer(DefaultBodyLimit::max(state.settings.max_body_bytes))
        .layer(axum::middleware::from_fn(observe))
        .with_state(state)
}

/// Each request in an `http` span (a child of the caller's `traceparent`, if it sent one)
/// around its handler, logged (`debug`, `error` for a 5xx) and counted by method, matched route
/// (the template, never the ids in it) and status when its response head is ready.
///
/// The span ends with the handler, not with the body: an SSE response's body lasts as long as
/// its client stays, and a span around it would be kept (~1 KiB) and entered for every frame
/// for that long (tower-http's `TraceLayer` does both; docs/performance.md#streams-maestro-bench-sse).
async fn observe(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let span = tracing::info_span!(
        "http",
        method = %request.method(),
        path = %request.uri().path(),
        owner = tracing::field::Empty
    );
    maestro_runtime::http_trace::adopt(&span, request.headers());
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let started = Instant::now();
    let response = async {
        tracing::debug!("started processing request");
        let response = next.run(request).await;
        let status = response.status().as_u16();
        let latency_ms = started.elapsed().as_secs_f64() * 1e3;
        if response.status().is_server_error() {
            tracing::error!(status, latency_ms, "response failed");
        } else {
            tracing::debug!(status, latency_ms, "finished processing request");
        }
        response
    }
    .instrument(span)
    .await;
    let status = response.status().as_u16().to_string();
    metrics::counter!(maestro_runtime::metrics::HTTP_REQUESTS, "method" => method, "route" => route, "status" => status)
        .increment(1);
    response
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
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        () = accept(listener, state.settings.sse_stall, router(state.clone()), shutdown.clone()) => {}
        _ = deadline => {
            tracing::warn!(?grace, "shutdown grace period over; dropping open connections");
        }
    }
    state.bus.finish().await;
    Ok(())
}

/// Serve HTTP/1.1 on every accepted connection until `shutdown`; then stop accepting, let
/// each connection finish its open request (SSE streams end on `shutdown` themselves) and
/// return when all have closed.
///
/// By hand rather than `axum::serve`: its connections sniff for HTTP/2 first (hyper-util's
/// `auto` builder), which makes hyper grow every connection's read buffer to 16 KiB on the
/// request, kept for the connection's life; HTTP/1.1 alone keeps it at 8 KiB, and an idle SSE
/// client costs that much less (docs/performance.md#streams-maestro-bench-sse). The router is
/// built once and shared (an `Arc`), not rebuilt per connection.
async fn accept(
    listener: tokio::net::TcpListener,
    stall: Duration,
    router: Router,
    shutdown: CancellationToken,
) {
    let connections = tokio_util::task::TaskTracker::new();
    loop {
        let tcp = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // Small writes (SSE events, short answers) go out at once: without TCP_NODELAY,
        // Nagle's algorithm holds an event back until the client's delayed ACK of the last.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let io = hyper_util::rt::TokioIo::new(Stalling::new(tcp, stall));
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
            let mut conn = std::pin::pin!(conn);
            let served = tokio::select! {
                served = conn.as_mut() => served,
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = served {
                tracing::trace!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// A connection's socket whose writes fail once the client has taken nothing for `stall`
/// (`SSE_STALL_MS`): a client that stops reading a stream is let go, and resumes with
/// `Last-Event-ID`. The socket stays full meanwhile, so what the gateway holds for it is
/// bounded by its buffers (an SSE body makes no more items than hyper asks for).
struct Stalling {
    io: tokio::net::TcpStream,
    stall: Duration,
    /// Since when a write has waited for room, as the deadline it may wait until.
    waiting: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stalling {
    fn new(io: tokio::net::TcpStream, stall: Duration) -> Self {
        Self {
            io,
            stall,
            waiting: None,
        }
    }

    fn watch<T>(
        &mut self,
        written: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        if written.is_ready() {
            self.waiting = None;
            return written;
        }
        let stall = self.stall;
        let deadline = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took nothing for SSE_STALL_MS",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl tokio::io::AsyncRead for Stalling {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Stalling {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(written, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(written, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_describes_every_route_with_bearer_auth() {
        let doc: serde_json::Value = serde_json::from_str(&openapi_json()).expect("JSON");
        assert!(
            doc["openapi"]
                .as_str()
                .is_some_and(|v| v.starts_with("3.1"))
        );
        let paths = doc["paths"].as_object().expect("paths");
        let operations: usize = paths
            .values()
            .map(|item| item.as_object().map_or(0, |ops| ops.len()))
            .sum();
        assert_eq!(operations, 60, "every REST operation: {:?}", paths.keys());
        assert!(paths.contains_key("/api/local/tasks/{id}/files/{path}"));
        assert!(paths.contains_key("/api/local/tasks/{id}/files"));
        assert_eq!(
            doc["components"]["securitySchemes"]["bearer"]["scheme"],
            "bearer"
        );
        for (path, item) in paths {
            for (method, op) in item.as_object().expect("operations") {
                let responses = op["responses"].as_object().expect("responses");
                assert!(
                    responses.contains_key("4XX"),
                    "{method} {path} documents its errors"
                );
            }
        }
    }
}
