//! One tool call: checked against the tool policy and the movement, answered from the read
//! cache when it can be, else sent to the tool-runner.
//!
//! Side-effecting calls go through the operation ledger: `started` is committed before the
//! request, the outcome after the reply. A resumed job that finds a call `started` without an
//! outcome asks the tool-runner's outcome record; if that does not know either, the effect may
//! or may not have happened, and the job pauses for a human (`side_effect_unknown`) rather
//! than repeat or skip it.

use std::collections::BTreeMap;
use std::time::Duration;
use tracing::Instrument as _;

use chrono::{DateTime, Utc};
use maestro_db::claims::Claimed;
use maestro_db::operations::{self, NewOperation, Operation};
use maestro_domain::ToolCall;
use maestro_domain::Verdict;
use maestro_domain::tools::{
    self, Idempotency, McpTarget, OperationRecord, ToolExecReply, ToolExecRequest, ToolSpec,
};
use serde_json::Value;

use super::context::{JobError, Shared};
use super::run::{JobRun, Waits};
use crate::tool_client;

/// A ledgered request reaches a tool-runner, which records it, well within this time; an
/// operation started longer ago without any record never ran.
const UNSEEN_GRACE: Duration = Duration::from_secs(5);

/// Why a call got no result.
#[derive(Debug)]
pub(super) enum CallError {
    /// The tool-runner did not answer: retry the job later.
    Unavailable(tool_client::Unavailable),
    /// A side-effecting call was started earlier and nobody knows whether it completed.
    Unknown {
        operation_id: String,
        tool: String,
        arguments: String,
    },
    Job(JobError),
}

impl From<maestro_db::DbError> for CallError {
    fn from(e: maestro_db::DbError) -> Self {
        CallError::Job(e.into())
    }
}

/// A result as the model sees it: `(content, is_error)`.
pub(super) type Answer = (String, bool);

impl JobRun<'_> {
    /// One call: `(content for the model, is_error)`.
    pub(super) async fn execute(&self, call: &ToolCall) -> Result<Answer, CallError> {
        let (spec, arguments) = match self.admit(call) {
            Ok(admitted) => admitted,
            Err(answer) => return Ok(answer),
        };
        if let Some(cached) = self.cache.get(call) {
            return Ok((cached.clone(), false));
        }
        let operation_id = operation_id(
            self.claim.job_id,
            &self.place.movement,
            self.iterations,
            &call.id,
        );
        let ledgered = spec.idempotency == Idempotency::SideEffecting;
        if ledgered {
            if let Some(known) = self.settled_before(&operation_id, spec, &arguments).await? {
                return Ok(known);
            }
            let op = NewOperation {
                id: &operation_id,
                job_id: self.claim.job_id,
                call_id: &call.id,
                tool: &spec.name,
                arguments: &arguments,
                attempt: self.fence.attempt,
            };
            // Fenced: a worker that lost the job (its lease ran out while it was stopped) does
            // not start the call; the one that holds it now decides what became of it.
            operations::start(&self.shared.pool, op)
                .await?
                .map_err(|fenced| CallError::Job(fenced.into()))?;
        }
        let request = tool_request(
            self.shared,
            (self.claim, self.fence.attempt),
            call,
            (spec, arguments),
            (&operation_id, ledgered),
            &self.approvals.mcp_tokens,
        );
        let reply = self.send(&request).await?;
        if ledgered {
            operations::finish(&self.shared.pool, &operation_id, reply.ok, &reply.output).await?;
        }
        tracing::debug!(tool = %spec.name, ok = reply.ok, "tool call done");
        Ok(model_view(reply))
    }

    /// The checks before a call runs: a tool of the job, arguments that parse, allowed by the
    /// policy (or approved by a person) and by the movement. `Err` is the model's answer.
    fn admit(&self, call: &ToolCall) -> Result<(&ToolSpec, Value), Answer> {
        let Some(spec) = self.spec(call) else {
            let known: Vec<&str> = self.tools.specs.iter().map(|t| t.name.as_str()).collect();
            let error = format!(
                "Error: unknown tool {:?}; available: {}",
                call.name(),
                known.join(", ")
            );
            return Err((error, true));
        };
        let arguments = tools::parse_arguments(&call.function.arguments).map_err(|e| (e, true))?;
        super::arguments::check(spec, &arguments).map_err(|e| (e, true))?;
        if spec.name == tools::ASK {
            let error = "Error: ask alone, once the other calls are done".to_owned();
            return Err((error, true));
        }
        let install = spec.name == tools::REQUEST_PACKAGE;
        let policy = &self.shared.policy;
        if !install
            && let Some(refusal) = policy.refusal(&spec.name, &arguments, self.approvals.granted())
            && !(refusal.approvable && self.approvals.approved(&call.id))
        {
            return Err((format!("Error: {refusal}"), true));
        }
        if let Some(refusal) = self.movement().refusal(&spec.name) {
            return Err((format!("Error: {refusal}"), true));
        }
        Ok((spec, arguments))
    }

    /// Send a request to a tool-runner and wait for its reply (an early read's, when one
    /// asked the same: [`super::early_reads`]).
    async fn send(&self, request: &ToolExecRequest) -> Result<ToolExecReply, CallError> {
        let settings = &self.shared.settings;
        // The tool-runner stops the tool at its timeout and still answers; wait a little longer.
        let wait = settings.tool_timeout + Duration::from_secs(5);
        let subject = self.shared.bus.subjects.tools_exec();
        let sent = std::time::Instant::now();
        // A span `tool` of the job's trace; the tool-runner's span of the call is its child.
        let span = tracing::info_span!(
            "tool",
            tool = %request.tool,
            call_id = %request.call_id,
            outcome = tracing::field::Empty
        );
        let early = match &self.early_reads {
            Some(reads) => reads.take(request).await,
            None => None,
        };
        let reply = match early {
            Some(read) => read
                .await
                .unwrap_or_else(|e| Err(tool_client::Unavailable(e.to_string()))),
            None => {
                tool_client::execute(&self.shared.bus.nats, subject, request, wait)
                    .instrument(span.clone())
                    .await
            }
        };
        Waits::add(&self.waits.tools_us, sent);
        let outcome = match &reply {
            Err(_) => "unavailable",
            Ok(reply) if reply.not_run => "not_run",
            Ok(reply) if reply.ok => "ok",
            Ok(_) => "error",
        };
        span.record("outcome", outcome);
        // Built-in tool names are a fixed set; MCP tools are counted together.
        let tool = if request.mcp.is_some() {
            "mcp".to_owned()
        } else {
            request.tool.clone()
        };
        metrics::histogram!(maestro_runtime::metrics::TOOL_DURATION, "tool" => tool, "outcome" => outcome)
            .record(maestro_runtime::metrics::seconds(sent));
        let reply = reply.map_err(CallError::Unavailable)?;
        if reply.not_run {
            return Err(CallError::Unavailable(tool_client::Unavailable(
                reply.output,
            )));
        }
        Ok(reply)
    }

    /// On a resumed job, what is already known about a ledgered operation: its recorded
    /// outcome, or the tool-runner's record of it. `Err(Unknown)` when it was started and
    /// neither knows how it ended; `None` when it never started.
    async fn settled_before(
        &self,
        operation_id: &str,
        spec: &ToolSpec,
        arguments: &Value,
    ) -> Result<Option<Answer>, CallError> {
        if self.claim.attempt <= 1 {
            return Ok(None);
        }
        match operations::get(&self.shared.pool, operation_id).await? {
            None => Ok(None),
            Some(Operation::Committed(output)) => Ok(Some((output, false))),
            Some(Operation::Failed(output)) => Ok(Some((format!("Error: {output}"), true))),
            Some(Operation::Started { at }) => {
                // A person may have said what became of it (`side_effect_unknown`) — about this
                // start of it: a decision older than the start is about an earlier run. The
                // latest such decision counts; an item set aside as stale is nobody's answer.
                match self.approvals.side_effect_verdict(operation_id, at) {
                    Some(Verdict::Happened) => {
                        let output = "a person confirmed that this call took effect";
                        operations::finish(&self.shared.pool, operation_id, true, output).await?;
                        Ok(Some((output.to_owned(), false)))
                    }
                    Some(_) => {
                        tracing::info!(operation_id, "a person said it did not happen; running it");
                        Ok(None)
                    }
                    None => self.await_outcome(operation_id, spec, arguments, at).await,
                }
            }
        }
    }

    /// Wait for the tool-runner's record of an operation started at `at`. The tool-runner
    /// records `running` before it starts a ledgered tool and `done` before it answers, and
    /// stops every call at its timeout. So: `done` is the outcome; no record at all a while
    /// after the start means the request never reached a tool-runner, and the call can run
    /// now; `running` (or no answer from the record) past the time limit means a tool-runner
    /// died mid-call and nobody can say whether the effect happened.
    async fn await_outcome(
        &self,
        operation_id: &str,
        spec: &ToolSpec,
        arguments: &Value,
        at: DateTime<Utc>,
    ) -> Result<Option<Answer>, CallError> {
        let since = |d: Duration| at + chrono::Duration::from_std(d).unwrap_or_default();
        let unseen_after = since(UNSEEN_GRACE);
        let deadline = since(self.shared.settings.tool_timeout + Duration::from_secs(5));
        loop {
            let now = Utc::now();
            match self.shared.operations.get(operation_id).await {
                Ok(Some(bytes)) => {
                    if let Ok(OperationRecord::Done { ok, output }) =
                        serde_json::from_slice::<OperationRecord>(&bytes)
                    {
                        tracing::info!(
                            operation_id,
                            "the tool-runner recorded the outcome; not running it again"
                        );
                        operations::finish(&self.shared.pool, operation_id, ok, &output).await?;
                        let reply = ToolExecReply {
                            ok,
                            output,
                            not_run: false,
                        };
                        return Ok(Some(model_view(reply)));
                    }
                }
                Ok(None) if now > unseen_after => {
                    tracing::info!(
                        operation_id,
                        "the operation never reached a tool-runner; running it now"
                    );
                    return Ok(None);
                }
                Ok(None) | Err(_) => {}
            }
            if now > deadline {
                return Err(CallError::Unknown {
                    operation_id: operation_id.to_owned(),
                    tool: spec.name.clone(),
                    arguments: arguments.to_string(),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A call's operation id: `<job>/<movement>/<iteration>/<call id>`, the same on every attempt.
pub(super) fn operation_id(
    job_id: maestro_domain::JobId,
    movement: &str,
    iteration: u32,
    call_id: &str,
) -> String {
    format!("{job_id}/{movement}/{iteration}/{call_id}")
}

/// The tool-runner request for a call that passed its checks, by the claim (with its attempt)
/// that makes it.
pub(super) fn tool_request(
    shared: &Shared,
    (claim, attempt): (&Claimed, i32),
    call: &ToolCall,
    (spec, arguments): (&ToolSpec, Value),
    (operation_id, ledgered): (&str, bool),
    mcp_tokens: &BTreeMap<String, String>,
) -> ToolExecRequest {
    let policy = &shared.policy;
    let install = spec.name == tools::REQUEST_PACKAGE;
    ToolExecRequest {
        // Subtasks work in their top task's workspace.
        task_id: claim.workspace_id,
        job_id: claim.job_id,
        call_id: call.id.clone(),
        operation_id: operation_id.to_owned(),
        // An approved package request runs as the tool-runner's installer, which needs
        // the package registry.
        tool: if install {
            tools::INSTALL_PACKAGE.to_owned()
        } else {
            spec.name.clone()
        },
        arguments,
        timeout_ms: shared.settings.tool_timeout.as_millis() as u64,
        attempt,
        network: policy.network || install,
        allowed_hosts: policy.allowed_hosts.clone(),
        ledgered,
        mcp: tools::split_mcp_tool_name(&spec.name).and_then(|(server, _)| {
            Some(McpTarget {
                name: server.to_owned(),
                server: policy.mcp_servers.get(server)?.clone(),
                token: mcp_tokens.get(server).cloned(),
            })
        }),
    }
}

fn model_view(reply: ToolExecReply) -> Answer {
    if reply.ok {
        (reply.output, false)
    } else {
        (format!("Error: {}", reply.output), true)
    }
}
