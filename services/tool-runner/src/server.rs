//! Serving `<prefix>.tools.exec`: decode the request, run the tool (file tools on a confined
//! thread, programs in the sandbox) with bounded concurrency, reply. `<prefix>.tools.cancel`
//! (`{"job_id": ...}`) stops every call of a job at once, killing its processes. Shutdown
//! unsubscribes first (other instances take new calls) and then lets calls in flight finish.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use bytes::Bytes;
use futures::StreamExt;
use maestro_domain::JobId;
use maestro_domain::tools::{
    McpListReply, McpListRequest, OperationRecord, ToolExecReply, ToolExecRequest,
};
use maestro_messaging::Subjects;
use maestro_messaging::setup::OperationOutcomes;
use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::Settings;
use crate::sandbox::Sandbox;
use crate::tools::{self, Call, Toolbox};
use crate::workspace::Workspace;

/// The queue group all tool-runner instances join.
pub const QUEUE_GROUP: &str = "tool-runners";

/// Cancellation tokens of the jobs with calls in flight.
type Running = Arc<Mutex<HashMap<JobId, CancellationToken>>>;

#[derive(Deserialize)]
struct CancelRequest {
    job_id: JobId,
}

/// Serve tool calls until `shutdown` is cancelled.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let subjects = Subjects::new(&settings.subject_prefix).context("SUBJECT_PREFIX")?;
    std::fs::create_dir_all(&settings.workspaces_dir).with_context(|| {
        format!(
            "create WORKSPACES_DIR {}",
            settings.workspaces_dir.display()
        )
    })?;
    let sandbox = Sandbox::detect(
        settings.bwrap.clone(),
        settings.limits.clone(),
        settings.sandbox_user,
        settings.extra_ro_paths.clone(),
        &settings.workspaces_dir.join(".sandbox-probe"),
    )
    .await;
    report(&sandbox);
    let toolbox = Arc::new(Toolbox {
        sandbox,
        mcp: Default::default(),
    });
    let client = maestro_messaging::connect(&settings.nats_url, "maestro-tool-runner")
        .await
        .context("connect to NATS")?;
    let mut requests = client
        .queue_subscribe(subjects.tools_exec(), QUEUE_GROUP.to_owned())
        .await
        .context("subscribe to tool requests")?;
    let mut cancels = client
        .subscribe(subjects.tools_cancel())
        .await
        .context("subscribe to cancellations")?;
    let mut listings = client
        .queue_subscribe(subjects.mcp_list(), QUEUE_GROUP.to_owned())
        .await
        .context("subscribe to MCP listings")?;
    let js = async_nats::jetstream::new(client.clone());
    maestro_messaging::setup::ensure_streams(&js, &subjects, &settings.streams).await?;
    let outcomes = maestro_messaging::setup::OperationOutcomes::new(js, &subjects);
    client.flush().await.context("flush subscriptions")?;
    maestro_runtime::announce_ready("tool-runner", None);
    tracing::info!(subject = %subjects.tools_exec(), "serving tool calls");

    let settings = Arc::new(settings);
    let running: Running = Arc::default();
    let permits = Arc::new(Semaphore::new(settings.concurrency.max(1)));
    let mut in_flight = JoinSet::new();
    loop {
        let message = tokio::select! {
            message = requests.next() => message,
            Some(cancel) = cancels.next() => {
                if let Ok(request) = serde_json::from_slice::<CancelRequest>(&cancel.payload)
                    && let Some(token) = running.lock().expect("lock").get(&request.job_id)
                {
                    tracing::info!(job_id = %request.job_id, "cancelling the job's tool calls");
                    token.cancel();
                }
                continue;
            }
            Some(listing) = listings.next() => {
                let (client, settings, toolbox) = (client.clone(), settings.clone(), toolbox.clone());
                in_flight.spawn(async move {
                    let reply = list_mcp(&settings, &toolbox, &listing.payload).await;
                    if let Some(to) = listing.reply {
                        let _ = client.publish(to, Bytes::from(serde_json::to_vec(&reply).unwrap_or_default())).await;
                    }
                });
                continue;
            }
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
        let (client, settings, toolbox, running) = (
            client.clone(),
            settings.clone(),
            toolbox.clone(),
            running.clone(),
        );
        let outcomes = outcomes.clone();
        let span = tracing::info_span!(
            "tool_call",
            tool = tracing::field::Empty,
            task_id = tracing::field::Empty
        );
        maestro_messaging::trace::adopt(&span, message.headers.as_ref());
        in_flight.spawn(
            async move {
                let answer =
                    handle(&settings, &toolbox, &running, &outcomes, &message.payload).await;
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

/// Record a ledgered outcome, retrying through a NATS outage for up to a minute: the effect
/// has happened, and without the record a resumed job can only ask a person.
async fn record_outcome(outcomes: &OperationOutcomes, operation_id: &str, payload: Bytes) {
    let mut delay = std::time::Duration::from_millis(100);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match outcomes.record(operation_id, payload.clone()).await {
            Ok(()) => return,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                tracing::error!(error = %e, operation_id, "cannot record the operation's outcome; giving up");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, operation_id, "cannot record the operation's outcome yet; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(5));
            }
        }
    }
}

/// List an MCP server's tools, from a scratch workspace.
async fn list_mcp(settings: &Settings, toolbox: &Toolbox, payload: &[u8]) -> McpListReply {
    let request: McpListRequest = match serde_json::from_slice(payload) {
        Ok(request) => request,
        Err(e) => {
            return McpListReply {
                tools: Vec::new(),
                error: Some(format!("malformed listing request: {e}")),
            };
        }
    };
    let scratch = settings
        .workspaces_dir
        .join(".mcp-list")
        .join(&request.target.name);
    let prepared = std::fs::create_dir_all(&scratch).and_then(|()| match toolbox.sandbox.run_as {
        Some((uid, gid)) => std::os::unix::fs::chown(&scratch, Some(uid), Some(gid)),
        None => Ok(()),
    });
    if let Err(e) = prepared {
        return McpListReply {
            tools: Vec::new(),
            error: Some(format!("cannot prepare a scratch workspace: {e}")),
        };
    }
    match toolbox
        .mcp
        .list(&toolbox.sandbox, &request.target, scratch, request.network)
        .await
    {
        Ok(tools) => McpListReply { tools, error: None },
        Err(error) => McpListReply {
            tools: Vec::new(),
            error: Some(error),
        },
    }
}

fn report(sandbox: &Sandbox) {
    match (&sandbox.unavailable, &sandbox.files_unavailable) {
        (None, None) => tracing::info!(
            run_as = ?sandbox.run_as,
            cgroups = sandbox.cgroups.is_some(),
            "sandbox ready: bubblewrap for programs, Landlock for file tools"
        ),
        (programs, files) => tracing::error!(
            programs = programs.as_deref().unwrap_or("ok"),
            files = files.as_deref().unwrap_or("ok"),
            "sandbox incomplete: the affected tools will refuse to run (fail closed)"
        ),
    }
}

/// Run one request and answer it. A ledgered call is recorded as `running` before the tool
/// starts (if that cannot be recorded, it does not run) and as `done` before the answer.
async fn handle(
    settings: &Settings,
    toolbox: &Toolbox,
    running: &Running,
    outcomes: &OperationOutcomes,
    payload: &[u8],
) -> ToolExecReply {
    let refuse = |output: String| ToolExecReply {
        ok: false,
        output,
        not_run: false,
    };
    let request: ToolExecRequest = match serde_json::from_slice(payload) {
        Ok(request) => request,
        Err(e) => return refuse(format!("malformed tool request: {e}")),
    };
    let span = tracing::Span::current();
    span.record("tool", request.tool.as_str());
    span.record("task_id", tracing::field::display(request.task_id));
    let owner = toolbox.sandbox.run_as;
    let workspace = match Workspace::open(&settings.workspaces_dir, request.task_id, owner) {
        Ok(workspace) => workspace,
        Err(e) => return refuse(format!("cannot open the task workspace: {e}")),
    };
    let ledgered = request.ledgered.then(|| request.operation_id.clone());
    if let Some(operation_id) = &ledgered {
        let started = serde_json::to_vec(&OperationRecord::Running).unwrap_or_default();
        if let Err(e) = outcomes.record(operation_id, Bytes::from(started)).await {
            tracing::warn!(error = %e, operation_id, "cannot record the operation's start; not running it");
            let output = format!(
                "the start of operation {operation_id} could not be recorded; it was not run"
            );
            return ToolExecReply {
                ok: false,
                output,
                not_run: true,
            };
        }
    }
    let cancel = running
        .lock()
        .expect("lock")
        .entry(request.job_id)
        .or_default()
        .clone();
    let limits = tools::Limits {
        max_read_bytes: settings.max_read_bytes,
        max_output_bytes: settings.limits.max_output_bytes,
    };
    let call = Call {
        tool: request.tool,
        arguments: request.arguments,
        workspace,
        limits,
        timeout: std::time::Duration::from_millis(request.timeout_ms).min(settings.max_timeout),
        network: request.network,
        allowed_hosts: request.allowed_hosts,
        operation_id: request.operation_id,
        task: request.task_id,
        mcp: request.mcp,
    };
    let result = toolbox.execute(call, &cancel).await;
    if cancel.is_cancelled() {
        running.lock().expect("lock").remove(&request.job_id);
    }
    let (ok, output) = match result {
        Ok(output) => (true, output),
        Err(output) => {
            tracing::info!(error = %output, "tool call failed");
            (false, output)
        }
    };
    if let Some(operation_id) = &ledgered {
        // Recorded before the answer: a worker that never gets the answer can still learn
        // that the effect happened, and what it produced.
        let done = OperationRecord::Done {
            ok,
            output: output.clone(),
        };
        record_outcome(
            outcomes,
            operation_id,
            Bytes::from(serde_json::to_vec(&done).unwrap_or_default()),
        )
        .await;
    }
    ToolExecReply {
        ok,
        output,
        not_run: false,
    }
}
