//! One tool request, from its bytes to its reply. A ledgered call is recorded as `running`
//! before the tool starts (if that cannot be recorded, it does not run) and as `done` before
//! the answer, so a worker that never gets the answer can still learn what happened.

use std::time::Duration;

use bytes::Bytes;
use maestro_domain::tools::{OperationRecord, ToolExecReply, ToolExecRequest};
use maestro_messaging::setup::OperationOutcomes;

use crate::call::{Call, Limits};
use crate::server::Server;
use crate::workspace::Workspace;

impl Server {
    /// Run one request and answer it.
    pub(crate) async fn handle(&self, payload: &[u8]) -> ToolExecReply {
        let request: ToolExecRequest = match serde_json::from_slice(payload) {
            Ok(request) => request,
            Err(e) => return refused(format!("malformed tool request: {e}")),
        };
        let span = tracing::Span::current();
        span.record("tool", request.tool.as_str());
        span.record("task_id", tracing::field::display(request.task_id));
        // Reading a workspace's context creates nothing: a workspace that does not exist yet
        // has none (and a worker may ask, while claiming a new job, for a subtask's own
        // workspace, which the subtask then does not use).
        if request.tool == maestro_domain::tools::WORKSPACE_CONTEXT
            && !self.workspaces.exists(request.task_id)
        {
            return ToolExecReply {
                ok: true,
                output: "{}".to_owned(),
                not_run: false,
            };
        }
        let owner = self.toolbox.sandbox.run_as;
        let workspace = if request.mcp.is_none() && crate::tools::reads_only(&request.tool) {
            self.workspaces.open_to_read(request.task_id, owner)
        } else {
            self.workspaces.open(request.task_id, owner)
        };
        let workspace = match workspace {
            Ok(workspace) => workspace,
            Err(e) => return refused(format!("cannot open the task workspace: {e}")),
        };
        let ledgered = request.ledgered.then(|| request.operation_id.clone());
        if let Some(operation_id) = &ledgered
            && let Err(not_run) = self.record_start(operation_id, request.attempt).await
        {
            return not_run;
        }
        let job_id = request.job_id;
        let cancel = self
            .running
            .lock()
            .expect("lock")
            .entry(job_id)
            .or_default()
            .clone();
        let result = self
            .toolbox
            .execute(self.call(request, workspace), &cancel)
            .await;
        if cancel.is_cancelled() {
            self.running.lock().expect("lock").remove(&job_id);
        }
        let (ok, output) = match result {
            Ok(output) => (true, output),
            Err(output) => {
                tracing::info!(error = %output, "tool call failed");
                (false, output)
            }
        };
        let output = maestro_domain::storable::tool_output(output);
        if let Some(operation_id) = &ledgered {
            // Recorded before the answer: a worker that never gets the answer can still learn
            // that the effect happened, and what it produced.
            let done = OperationRecord::Done {
                ok,
                output: output.clone(),
            };
            let done = Bytes::from(serde_json::to_vec(&done).unwrap_or_default());
            record_outcome(&self.outcomes, operation_id, done).await;
        }
        ToolExecReply {
            ok,
            output,
            not_run: false,
        }
    }

    /// Record that a ledgered operation starts for claim `attempt`; `Err` is the reply when
    /// it must not run: its start cannot be recorded, or it was started already by this claim
    /// or a later one, or it is done ([`OperationRecord::admits`]). The start is recorded only
    /// over the record that was read, so of two tool-runners racing to start it one wins.
    async fn record_start(&self, operation_id: &str, attempt: i32) -> Result<(), ToolExecReply> {
        let not_run = |why: String| {
            tracing::warn!(operation_id, attempt, %why, "not running a ledgered call");
            Err(ToolExecReply {
                ok: false,
                output: format!("operation {operation_id} was not run: {why}"),
                not_run: true,
            })
        };
        let last = match self.outcomes.last(operation_id).await {
            Ok(last) => last,
            Err(e) => return not_run(format!("its record cannot be read ({e})")),
        };
        let after = match &last {
            None => 0,
            Some((seq, bytes)) => match serde_json::from_slice::<OperationRecord>(bytes) {
                Ok(record) if record.admits(attempt) => *seq,
                Ok(record) => {
                    return not_run(format!("it was started or done already ({record:?})"));
                }
                Err(e) => return not_run(format!("its record is unreadable ({e})")),
            },
        };
        let started = serde_json::to_vec(&OperationRecord::Running { attempt }).unwrap_or_default();
        match self
            .outcomes
            .record_after(operation_id, after, Bytes::from(started))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) => not_run(format!("its start could not be recorded ({e})")),
        }
    }

    /// The call a request makes, within this instance's limits.
    fn call(&self, request: ToolExecRequest, workspace: Workspace) -> Call {
        let settings = &self.settings;
        Call {
            tool: request.tool,
            arguments: request.arguments,
            workspace,
            limits: Limits {
                max_read_bytes: settings.max_read_bytes,
                max_output_bytes: settings.limits.max_output_bytes,
            },
            timeout: Duration::from_millis(request.timeout_ms).min(settings.max_timeout),
            network: request.network,
            allowed_hosts: request.allowed_hosts,
            operation_id: request.operation_id,
            task: request.task_id,
            mcp: request.mcp,
        }
    }
}

fn refused(output: String) -> ToolExecReply {
    ToolExecReply {
        ok: false,
        output,
        not_run: false,
    }
}

/// Record a ledgered outcome, retrying through a NATS outage for up to a minute: the effect
/// has happened, and without the record a resumed job can only ask a person.
async fn record_outcome(outcomes: &OperationOutcomes, operation_id: &str, payload: Bytes) {
    let mut delay = Duration::from_millis(100);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
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
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}
