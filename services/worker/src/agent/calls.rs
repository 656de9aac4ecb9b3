//! Running the tool calls of an assistant message: each call is checked against the tool
//! policy, read-only calls are answered from the job's cache when the workspace has not
//! changed, regular calls go to the tool-runner (all at once when every one is read-only, in
//! order otherwise), then `complete` ends the job.
//!
//! Side-effecting calls go through the operation ledger: `started` is committed before the
//! request, the outcome after the reply. A resumed job that finds a call `started` without an
//! outcome asks the tool-runner's outcome record; if that does not know either, the effect may
//! or may not have happened, and the job pauses for a human (`side_effect_unknown`) rather
//! than repeat or skip it.

use futures::future::join_all;
use maestro_db::operations::{self, NewOperation, Operation};
use maestro_domain::tools::{
    self, Idempotency, OperationRecord, ToolExecReply, ToolExecRequest, ToolSpec,
};
use maestro_domain::{ToolCall, WaitReason};
use serde_json::Value;

use super::{JobEnd, JobError, JobRun};
use crate::tool_client;

/// The movement calls belong to (the piece engine names them; the foundation has one).
const MOVEMENT: &str = "main";
/// A ledgered request reaches a tool-runner, which records it, well within this time; an
/// operation started longer ago without any record never ran.
const UNSEEN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

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

impl JobRun<'_> {
    /// Run the calls of an assistant message and commit their results; `complete` ends the job.
    pub(super) async fn run_calls(
        &mut self,
        calls: Vec<ToolCall>,
    ) -> Result<Option<JobEnd>, JobError> {
        let (finals, regular): (Vec<ToolCall>, Vec<ToolCall>) =
            calls.into_iter().partition(|c| c.name() == tools::COMPLETE);
        if !regular.is_empty() {
            // What the model asked for is durable before anything touches the world.
            self.commit(None).await?;
            let (results, stopped) = self.execute_all(&regular).await;
            for (call, (content, is_error)) in regular.iter().zip(results) {
                self.record_result(call, content, is_error);
            }
            match stopped {
                None => {}
                Some(CallError::Unavailable(e)) => {
                    return self.recoverable(e.to_string(), None).await.map(Some);
                }
                Some(CallError::Unknown {
                    operation_id,
                    tool,
                    arguments,
                }) => {
                    let reason = format!(
                        "operation {operation_id} (`{tool}` with {arguments}) was started but its outcome \
                         is unknown; a person must say whether it happened before the job goes on"
                    );
                    return self
                        .pause(WaitReason::SideEffectUnknown, reason)
                        .await
                        .map(Some);
                }
                Some(CallError::Job(e)) => return Err(e),
            }
        }
        let mut finals = finals.into_iter();
        if let Some(complete) = finals.next() {
            match complete_result(&complete) {
                Ok(result) => {
                    self.record_result(&complete, "ok".to_owned(), false);
                    let extras: Vec<ToolCall> = finals.collect();
                    if extras.is_empty()
                        && let Some(end) = self.succeed(result).await?
                    {
                        return Ok(Some(end));
                    }
                    if extras.is_empty() {
                        // An interjection came in first: the model reads it before finishing.
                        let note = "Error: the user sent a message before the task was complete; \
                                    read it, then call `complete` again";
                        self.record_result(&complete, note.to_owned(), true);
                    } else {
                        self.unsaved.pop();
                        self.messages.pop();
                        let note = "Error: call `complete` once, alone";
                        self.record_result(&complete, note.to_owned(), true);
                        for extra in extras {
                            self.record_result(&extra, note.to_owned(), true);
                        }
                    }
                }
                Err(error) => self.record_result(&complete, error, true),
            }
        }
        self.commit(None).await?;
        Ok(None)
    }

    /// Results of the calls, in order, up to the first call that got none (and why).
    async fn execute_all(
        &mut self,
        calls: &[ToolCall],
    ) -> (Vec<(String, bool)>, Option<CallError>) {
        let read_only = calls
            .iter()
            .all(|c| self.spec(c).is_some_and(ToolSpec::is_read_only));
        if read_only {
            let outcomes = join_all(calls.iter().map(|c| self.execute(c))).await;
            let mut results = Vec::with_capacity(outcomes.len());
            for (call, outcome) in calls.iter().zip(outcomes) {
                match outcome {
                    Ok(result) => {
                        self.remember(call, &result);
                        results.push(result);
                    }
                    Err(e) => return (results, Some(e)),
                }
            }
            (results, None)
        } else {
            let mut results = Vec::with_capacity(calls.len());
            for call in calls {
                match self.execute(call).await {
                    Ok(result) => {
                        self.remember(call, &result);
                        results.push(result);
                    }
                    Err(e) => return (results, Some(e)),
                }
            }
            (results, None)
        }
    }

    fn spec(&self, call: &ToolCall) -> Option<&ToolSpec> {
        self.tools
            .iter()
            .find(|t| t.name == call.name() && t.name != tools::COMPLETE)
    }

    /// Keep a read-only result for the rest of the job; any other call may change the
    /// workspace, so it forgets everything kept.
    fn remember(&mut self, call: &ToolCall, result: &(String, bool)) {
        match self.spec(call).map(|s| s.idempotency) {
            Some(Idempotency::ReadOnly) if !result.1 => {
                self.cache.insert(cache_key(call), result.0.clone());
            }
            Some(Idempotency::ReadOnly) => {}
            _ => self.cache.clear(),
        }
    }

    /// One call: `(content for the model, is_error)`.
    async fn execute(&self, call: &ToolCall) -> Result<(String, bool), CallError> {
        let Some(spec) = self.spec(call) else {
            let known: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
            let error = format!(
                "Error: unknown tool {:?}; available: {}",
                call.name(),
                known.join(", ")
            );
            return Ok((error, true));
        };
        let arguments = match parse_arguments(&call.function.arguments) {
            Ok(arguments) => arguments,
            Err(error) => return Ok((error, true)),
        };
        let policy = &self.shared.policy;
        if let Some(refusal) = policy.refusal(&spec.name, &arguments, &[]) {
            return Ok((format!("Error: {refusal}"), true));
        }
        if let Some(cached) = self.cache.get(&cache_key(call)) {
            return Ok((cached.clone(), false));
        }
        let operation_id = format!(
            "{}/{MOVEMENT}/{}/{}",
            self.claim.job_id, self.iterations, call.id
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
            operations::start(&self.shared.pool, op).await?;
        }
        let settings = &self.shared.settings;
        let request = ToolExecRequest {
            task_id: self.claim.task_id,
            job_id: self.claim.job_id,
            call_id: call.id.clone(),
            operation_id: operation_id.clone(),
            tool: spec.name.clone(),
            arguments,
            timeout_ms: settings.tool_timeout.as_millis() as u64,
            network: policy.network,
            allowed_hosts: policy.allowed_hosts.clone(),
            ledgered,
            mcp: tools::split_mcp_tool_name(&spec.name).and_then(|(server, _)| {
                let config = policy.mcp_servers.get(server)?;
                Some(tools::McpTarget {
                    name: server.to_owned(),
                    server: config.clone(),
                })
            }),
        };
        // The tool-runner stops the tool at its timeout and still answers; wait a little longer.
        let wait = settings.tool_timeout + std::time::Duration::from_secs(5);
        let subject = self.shared.subjects.tools_exec();
        let reply = tool_client::execute(&self.shared.nats, subject, &request, wait)
            .await
            .map_err(CallError::Unavailable)?;
        if reply.not_run {
            return Err(CallError::Unavailable(tool_client::Unavailable(
                reply.output,
            )));
        }
        if ledgered {
            operations::finish(&self.shared.pool, &operation_id, reply.ok, &reply.output).await?;
        }
        tracing::debug!(tool = %spec.name, ok = reply.ok, "tool call done");
        Ok(model_view(reply))
    }

    /// On a resumed job, what is already known about a ledgered operation: its recorded
    /// outcome, or the tool-runner's record of it. `Err(Unknown)` when it was started and
    /// neither knows how it ended; `None` when it never started.
    async fn settled_before(
        &self,
        operation_id: &str,
        spec: &ToolSpec,
        arguments: &Value,
    ) -> Result<Option<(String, bool)>, CallError> {
        if self.claim.attempt <= 1 {
            return Ok(None);
        }
        match operations::get(&self.shared.pool, operation_id).await? {
            None => Ok(None),
            Some(Operation::Committed(output)) => Ok(Some((output, false))),
            Some(Operation::Failed(output)) => Ok(Some((format!("Error: {output}"), true))),
            Some(Operation::Started { at }) => {
                self.await_outcome(operation_id, spec, arguments, at).await
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
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<(String, bool)>, CallError> {
        let since = |d: std::time::Duration| at + chrono::Duration::from_std(d).unwrap_or_default();
        let unseen_after = since(UNSEEN_GRACE);
        let deadline = since(self.shared.settings.tool_timeout + std::time::Duration::from_secs(5));
        loop {
            let now = chrono::Utc::now();
            match self.shared.operations.get(operation_id).await {
                Ok(Some(bytes)) => match serde_json::from_slice::<OperationRecord>(&bytes) {
                    Ok(OperationRecord::Done { ok, output }) => {
                        tracing::info!(
                            operation_id,
                            "the tool-runner recorded the outcome; not running it again"
                        );
                        operations::finish(&self.shared.pool, operation_id, ok, &output).await?;
                        return Ok(Some(model_view(ToolExecReply {
                            ok,
                            output,
                            not_run: false,
                        })));
                    }
                    Ok(OperationRecord::Running) | Err(_) => {}
                },
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
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
}

fn model_view(reply: ToolExecReply) -> (String, bool) {
    if reply.ok {
        (reply.output, false)
    } else {
        (format!("Error: {}", reply.output), true)
    }
}

fn cache_key(call: &ToolCall) -> String {
    let arguments = parse_arguments(&call.function.arguments)
        .map(|v| v.to_string())
        .unwrap_or_default();
    format!("{}\u{0}{arguments}", call.name())
}

fn parse_arguments(raw: &str) -> Result<Value, String> {
    let raw = if raw.trim().is_empty() { "{}" } else { raw };
    match serde_json::from_str::<Value>(raw) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err("Error: arguments must be a JSON object".to_owned()),
        Err(e) => Err(format!("Error: arguments are not valid JSON ({e})")),
    }
}

/// The `result` of a `complete` call, or the error the model gets back.
fn complete_result(call: &ToolCall) -> Result<String, String> {
    let arguments = parse_arguments(&call.function.arguments)?;
    match arguments.get("result").and_then(|r| r.as_str()) {
        Some(result) if !result.trim().is_empty() => Ok(result.to_owned()),
        _ => Err("Error: `complete` needs a non-empty `result` string".to_owned()),
    }
}
