//! Prometheus metrics: one recorder per process (the `metrics` facade with
//! `metrics-exporter-prometheus`), served as text on `/metrics` of `METRICS_ADDR` (every
//! service; the gateway also on its own port). Every metric MAESTRO records is named here
//! with its help text, so the names, units and labels are in one place; labels take only
//! bounded values (a status, a tool name, a stream), never ids. The process's `service` is
//! a label of every series.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static SERVED_AT: OnceLock<SocketAddr> = OnceLock::new();

/// Job status transitions (`to`: queued, running, waiting_human, retry, succeeded, failed,
/// cancelled).
pub const JOB_TRANSITIONS: &str = "maestro_job_transitions_total";
/// Jobs by status now (`status`), counted in Postgres by the scheduler.
pub const JOBS: &str = "maestro_jobs";
/// A job's run from claim to its end or pause (`outcome`).
pub const JOB_DURATION: &str = "maestro_job_run_duration_seconds";
/// One iteration of the movement loop: an LLM call and the tool calls it asked for.
pub const ITERATION_DURATION: &str = "maestro_iteration_duration_seconds";
/// One streaming LLM call, request to last event (`outcome`: ok, error).
pub const LLM_DURATION: &str = "maestro_llm_request_duration_seconds";
/// Request to the first streamed event.
pub const LLM_FIRST_TOKEN: &str = "maestro_llm_time_to_first_token_seconds";
/// Tokens (`kind`: prompt, cached, completion).
pub const LLM_TOKENS: &str = "maestro_llm_tokens_total";
/// A tool call as the worker saw it (`tool`: a built-in name or `mcp`; `outcome`: ok, error,
/// not_run).
pub const TOOL_DURATION: &str = "maestro_tool_call_duration_seconds";
/// Sandboxed programs stopped (`reason`: timeout, runaway_output, cancelled, memory).
pub const SANDBOX_KILLS: &str = "maestro_sandbox_kills_total";
/// Egress proxy decisions (`decision`: allowed, refused).
pub const EGRESS: &str = "maestro_sandbox_egress_total";
/// Age of the oldest event not yet relayed to NATS.
pub const OUTBOX_LAG: &str = "maestro_outbox_lag_seconds";
/// Messages waiting for a consumer (`stream`, `consumer`).
pub const CONSUMER_PENDING: &str = "maestro_consumer_pending_messages";
/// Messages delivered but not acknowledged yet (`stream`, `consumer`).
pub const CONSUMER_ACK_PENDING: &str = "maestro_consumer_ack_pending_messages";
/// Messages delivered more than once (`stream`, `consumer`).
pub const CONSUMER_REDELIVERED: &str = "maestro_consumer_redelivered_messages";
/// Messages in a stream (`stream`).
pub const STREAM_MESSAGES: &str = "maestro_stream_messages";
/// Messages that exhausted their deliveries and were dead-lettered (`consumer`).
pub const DEAD_LETTERS: &str = "maestro_dead_letters_total";
/// SSE clients connected to the gateway now (`stream`: task, job, inbox).
pub const SSE_CLIENTS: &str = "maestro_sse_clients";
/// Messages an SSE client got only from their event, because deltas of them it had not
/// been sent were no longer in the deltas stream (aged out, evicted, or lost with a restart).
pub const SSE_DELTA_GAPS: &str = "maestro_sse_delta_gaps_total";
/// Tasks created (`via`: rest, a2a, schedule, subtask).
pub const TASKS_CREATED: &str = "maestro_tasks_created_total";
/// HTTP requests the gateway answered (`method`, `route`: the matched route, `status`).
pub const HTTP_REQUESTS: &str = "maestro_http_requests_total";
/// Webhook delivery attempts (`outcome`: delivered, failed, gave_up).
pub const WEBHOOK_DELIVERIES: &str = "maestro_webhook_deliveries_total";
/// Scheduled runs started (`outcome`: started, skipped).
pub const SCHEDULE_FIRES: &str = "maestro_schedule_fires_total";
/// Jobs a worker claimed from their dispatch (`via`: hint, jetstream;
/// docs/architecture.md#dispatch-hints).
pub const DISPATCHES: &str = "maestro_dispatches_total";
/// Job deliveries a worker handed to the worker whose hint runs the job (`outcome`: taken,
/// refused, unanswered; docs/architecture.md#dispatch-hints).
pub const HANDOVERS: &str = "maestro_dispatch_handovers_total";
/// New jobs' first LLM requests sent while the claim was made (`outcome`: used, asked_again,
/// unused; docs/architecture.md#the-first-llm-call-beside-the-claim).
pub const EARLY_FIRST_CALLS: &str = "maestro_llm_early_first_calls_total";
/// New jobs' first tool calls sent while the claim was made, when they only read (`outcome`:
/// used, unused; docs/architecture.md#the-first-llm-call-beside-the-claim).
pub const EARLY_READS: &str = "maestro_tool_early_reads_total";
/// Turns' results sent to be committed while the next LLM request runs (`outcome`: at_once,
/// after_wait, taken_back; docs/architecture.md#commits-on-the-job-path).
pub const RESULTS_COMMITS: &str = "maestro_results_commits_total";

/// Every metric MAESTRO records, with its help text (dashboards and alerts use only these).
pub const HELP: &[(&str, &str)] = &[
    (
        JOB_TRANSITIONS,
        "Job status transitions, by the status entered.",
    ),
    (JOBS, "Jobs by status, counted in Postgres."),
    (
        JOB_DURATION,
        "A job's run on a worker, from claim to its end or pause.",
    ),
    (ITERATION_DURATION, "One iteration of the movement loop."),
    (
        DISPATCHES,
        "Jobs a worker claimed from their dispatch, by the path whose claim took each.",
    ),
    (
        HANDOVERS,
        "Job deliveries handed to the worker whose dispatch hint runs the job, by its answer.",
    ),
    (
        EARLY_FIRST_CALLS,
        "New jobs' first LLM requests sent while the claim was made, by what became of each.",
    ),
    (
        EARLY_READS,
        "New jobs' first read-only tool calls sent while the claim was made, by whether the job took each reply.",
    ),
    (
        RESULTS_COMMITS,
        "Turns' results sent to be committed while the next LLM request runs, by how each went.",
    ),
    (LLM_DURATION, "A streaming LLM call, request to last event."),
    (
        LLM_FIRST_TOKEN,
        "A streaming LLM call, request to first event.",
    ),
    (LLM_TOKENS, "LLM tokens: prompt, cached prompt, completion."),
    (TOOL_DURATION, "A tool call, as the worker saw it."),
    (
        SANDBOX_KILLS,
        "Sandboxed programs stopped by a limit or a cancel.",
    ),
    (EGRESS, "Connections through the sandbox egress proxy."),
    (
        OUTBOX_LAG,
        "Age of the oldest event not yet relayed to NATS.",
    ),
    (
        CONSUMER_PENDING,
        "Messages waiting for a JetStream consumer.",
    ),
    (
        CONSUMER_ACK_PENDING,
        "Messages delivered to a consumer and not acknowledged yet.",
    ),
    (
        CONSUMER_REDELIVERED,
        "Messages delivered to a consumer more than once.",
    ),
    (STREAM_MESSAGES, "Messages held in a JetStream stream."),
    (
        DEAD_LETTERS,
        "Messages dead-lettered after their last delivery.",
    ),
    (SSE_CLIENTS, "SSE clients connected to the gateway."),
    (
        SSE_DELTA_GAPS,
        "Messages an SSE client got whole from their event because some of their deltas were no longer stored.",
    ),
    (TASKS_CREATED, "Tasks created."),
    (HTTP_REQUESTS, "HTTP requests answered by the gateway."),
    (WEBHOOK_DELIVERIES, "Webhook delivery attempts by outcome."),
    (SCHEDULE_FIRES, "Scheduled runs by outcome."),
];

/// Buckets of the latency histograms: 1 ms to 10 minutes.
const SECONDS: &[f64] = &[
    0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
    300.0, 600.0,
];

/// Install the process's recorder (once; later calls do nothing), every series labelled with
/// `service`.
pub fn install(service: &str) {
    if HANDLE.get().is_some() {
        return;
    }
    let builder = PrometheusBuilder::new()
        .add_global_label("service", service)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), SECONDS);
    let handle = match builder.and_then(|b| b.install_recorder()) {
        Ok(handle) => handle,
        Err(e) => {
            tracing::warn!(error = %e, "metrics are off: cannot install the recorder");
            return;
        }
    };
    for (name, help) in HELP {
        metrics::describe_counter!(*name, *help);
    }
    if HANDLE.set(handle.clone()).is_ok() && tokio::runtime::Handle::try_current().is_ok() {
        // Histograms keep their samples until upkeep folds them in.
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                handle.run_upkeep();
            }
        });
    }
}

/// The metrics in Prometheus text format (empty before [`install`]).
pub fn render() -> String {
    HANDLE
        .get()
        .map(PrometheusHandle::render)
        .unwrap_or_default()
}

/// Set once the service has said it is ready ([`crate::announce_ready`]).
static READY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The service is ready: `/readyz` of the metrics listener answers 200 from now on.
pub fn set_ready() {
    READY.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Serve `GET /metrics`, `/livez` (200 while the process runs) and `/readyz` (200 once the
/// service is ready, 503 before: the probes of a container platform) on `addr` (port 0: any
/// free one); the address bound.
pub async fn serve(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let _ = SERVED_AT.set(bound);
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(handler))
        .route("/livez", axum::routing::get(|| async { "live\n" }))
        .route(
            "/readyz",
            axum::routing::get(|| async {
                if READY.load(std::sync::atomic::Ordering::Relaxed) {
                    (axum::http::StatusCode::OK, "ready\n")
                } else {
                    (axum::http::StatusCode::SERVICE_UNAVAILABLE, "starting\n")
                }
            }),
        );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app.into_make_service()).await {
            tracing::warn!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(bound)
}

/// `GET /metrics`: the process's metrics.
pub async fn handler() -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(),
    )
}

/// Where this process serves its metrics, once it does.
pub fn served_at() -> Option<SocketAddr> {
    SERVED_AT.get().copied()
}

/// Count a job entering `status`.
pub fn transition(status: &'static str) {
    metrics::counter!(JOB_TRANSITIONS, "to" => status).increment(1);
}

/// Count a task created `via` a way in (its first job queued).
pub fn task_created(via: &'static str) {
    metrics::counter!(TASKS_CREATED, "via" => via).increment(1);
    transition("queued");
}

/// Seconds since `start`, for a histogram.
pub fn seconds(start: std::time::Instant) -> f64 {
    start.elapsed().as_secs_f64()
}
