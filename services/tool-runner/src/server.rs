//! Serving `<prefix>.tools.exec`: decode the request, run the tool on a blocking thread with
//! bounded concurrency, reply. Shutdown unsubscribes first (other instances take new calls)
//! and then lets the calls in flight finish.

use std::sync::Arc;

use anyhow::Context as _;
use bytes::Bytes;
use futures::StreamExt;
use maestro_domain::tools::{ToolExecReply, ToolExecRequest};
use maestro_messaging::Subjects;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::Settings;
use crate::tools::{self, Limits};
use crate::workspace::Workspace;

/// The queue group all tool-runner instances join.
pub const QUEUE_GROUP: &str = "tool-runners";

/// Serve tool calls until `shutdown` is cancelled.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let subjects = Subjects::new(&settings.subject_prefix).context("SUBJECT_PREFIX")?;
    std::fs::create_dir_all(&settings.workspaces_dir).with_context(|| {
        format!(
            "create WORKSPACES_DIR {}",
            settings.workspaces_dir.display()
        )
    })?;
    let client = maestro_messaging::connect(&settings.nats_url, "maestro-tool-runner")
        .await
        .context("connect to NATS")?;
    let mut requests = client
        .queue_subscribe(subjects.tools_exec(), QUEUE_GROUP.to_owned())
        .await
        .context("subscribe to tool requests")?;
    client.flush().await.context("flush subscription")?;
    maestro_runtime::announce_ready("tool-runner", None);
    tracing::info!(subject = %subjects.tools_exec(), "serving tool calls");

    let settings = Arc::new(settings);
    let permits = Arc::new(Semaphore::new(settings.concurrency.max(1)));
    let mut in_flight = JoinSet::new();
    loop {
        let message = tokio::select! {
            message = requests.next() => message,
            _ = shutdown.cancelled() => break,
        };
        let Some(message) = message else { break };
        let Some(reply) = message.reply.clone() else {
            continue;
        };
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore is never closed");
        let client = client.clone();
        let settings = settings.clone();
        let span = tracing::info_span!(
            "tool_call",
            tool = tracing::field::Empty,
            task_id = tracing::field::Empty
        );
        maestro_messaging::trace::adopt(&span, message.headers.as_ref());
        in_flight.spawn(
            async move {
                let answer = handle(&settings, &message.payload).await;
                let payload = serde_json::to_vec(&answer).unwrap_or_default();
                if let Err(e) = client.publish(reply, Bytes::from(payload)).await {
                    tracing::warn!(error = %e, "cannot send tool reply");
                }
                drop(permit);
            }
            .instrument(span),
        );
        while in_flight.try_join_next().is_some() {}
    }
    let _ = requests.unsubscribe().await;
    tracing::info!(
        in_flight = in_flight.len(),
        "stopping; finishing calls in flight"
    );
    while in_flight.join_next().await.is_some() {}
    client.flush().await.ok();
    Ok(())
}

async fn handle(settings: &Settings, payload: &[u8]) -> ToolExecReply {
    let request: ToolExecRequest = match serde_json::from_slice(payload) {
        Ok(request) => request,
        Err(e) => {
            return ToolExecReply {
                ok: false,
                output: format!("malformed tool request: {e}"),
            };
        }
    };
    let span = tracing::Span::current();
    span.record("tool", request.tool.as_str());
    span.record("task_id", tracing::field::display(request.task_id));
    let root = settings.workspaces_dir.clone();
    let limits = Limits {
        max_read_bytes: settings.max_read_bytes,
        max_output_bytes: settings.max_output_bytes,
    };
    let result = tokio::task::spawn_blocking(move || {
        let workspace = Workspace::open(&root, request.task_id)
            .map_err(|e| format!("cannot open the task workspace: {e}"))?;
        tools::execute(&workspace, &request.tool, request.arguments, limits)
    })
    .await
    .unwrap_or_else(|e| Err(format!("tool crashed: {e}")));
    match result {
        Ok(output) => ToolExecReply { ok: true, output },
        Err(output) => {
            tracing::info!(error = %output, "tool call failed");
            ToolExecReply { ok: false, output }
        }
    }
}
