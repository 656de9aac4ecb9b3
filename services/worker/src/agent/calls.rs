//! Running the tool calls of an assistant message: each call is checked against the tool
//! policy, read-only calls are answered from the job's cache when the workspace has not
//! changed, regular calls go to the tool-runner (all at once when every one is read-only, in
//! order otherwise), then `transition` / `complete` move the piece on or end it.
//!
//! Side-effecting calls go through the operation ledger: `started` is committed before the
//! request, the outcome after the reply. A resumed job that finds a call `started` without an
//! outcome asks the tool-runner's outcome record; if that does not know either, the effect may
//! or may not have happened, and the job pauses for a human (`side_effect_unknown`) rather
//! than repeat or skip it.

use futures::future::join_all;
use maestro_db::actions::NewAction;
use maestro_db::operations::{self, NewOperation, Operation};
use maestro_domain::piece::Movement;
use maestro_domain::policy::wildcard;
use maestro_domain::tools::{
    self, Idempotency, OperationRecord, ToolExecReply, ToolExecRequest, ToolSpec,
};
use maestro_domain::{ToolCall, WaitReason};
use serde_json::Value;

use super::gate::Gate;
use super::{JobEnd, JobError, JobRun};
use crate::tool_client;

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
    /// Run the calls of an assistant message and commit their results (with what a
    /// `transition` brings); a final call may end the job.
    pub(super) async fn run_calls(
        &mut self,
        calls: Vec<ToolCall>,
    ) -> Result<Option<JobEnd>, JobError> {
        let (finals, regular): (Vec<ToolCall>, Vec<ToolCall>) = calls
            .into_iter()
            .partition(|c| c.name() == tools::COMPLETE || c.name() == tools::TRANSITION);
        self.turn_delegates = 0;
        // Whether subtasks were started in this reply (now) or answered it (on resume).
        let mut delegated = false;
        if !regular.is_empty() {
            // What the model asked for is durable before anything touches the world. Calls that
            // only read (and need nobody's approval) touch nothing: their message is committed
            // with their results, one commit instead of two; a crash in between only asks the
            // LLM that turn again.
            if !regular.iter().all(|c| self.reads_freely(c)) {
                self.commit(None).await?;
            }
            let mut runnable = Vec::with_capacity(regular.len());
            let mut parked = Vec::new();
            let mut delegations = Vec::new();
            for call in regular {
                match self.gate(&call).await? {
                    Gate::Run => runnable.push(call),
                    Gate::Park(item) => parked.push((call, item)),
                    Gate::Answer(content, is_error) => self.record_result(&call, content, is_error),
                    Gate::Spawn(delegation) => delegations.push((call, delegation)),
                }
            }
            delegated = !delegations.is_empty() || !self.subtasks_answered.is_empty();
            let (results, stopped) = self.execute_all(&runnable).await;
            for (call, (content, is_error)) in runnable.iter().zip(results) {
                self.record_result(call, content, is_error);
            }
            // While a call of the reply waits for a person's approval, its `delegate` calls wait
            // too: still unanswered, they are started when the job resumes, after that call.
            let approvals = parked.iter().any(|(_, item)| item.kind != WaitReason::Ask);
            if stopped.is_none() && !delegations.is_empty() && !approvals {
                // After the reply's other calls: the children see what they changed. (An `ask`
                // next to them is answered with an error and waits for them.)
                parked.extend(self.start_subtasks(delegations).await?);
            }
            if stopped.is_none() && !parked.is_empty() {
                // The calls that need nobody ran; the rest wait (and the finals with them).
                return self.pause_for_calls(parked).await.map(Some);
            }
            match stopped {
                None => {}
                Some(CallError::Unavailable(e)) => {
                    // Keep the LLM's turn (and the results so far): the retry runs only the
                    // calls still without a result, and does not ask the LLM again.
                    self.commit(None).await?;
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
                    let item = NewAction {
                        // One item per time the outcome was lost: a later loss asks again.
                        key: format!("op:{operation_id}:{}", self.fence.attempt),
                        kind: WaitReason::SideEffectUnknown,
                        movement: self.place.movement.clone(),
                        source_seq: None,
                        subtask: None,
                        detail: serde_json::json!({
                            "operation_id": operation_id,
                            "tool": tool,
                            "arguments": serde_json::from_str::<Value>(&arguments)
                                .unwrap_or(Value::String(arguments.clone())),
                        }),
                    };
                    return self
                        .pause(WaitReason::SideEffectUnknown, reason, vec![item])
                        .await
                        .map(Some);
                }
                Some(CallError::Job(e)) => return Err(e),
            }
        }
        if delegated {
            // Finishing in the reply that delegates would finish before reading what the
            // subtasks found (the seed's "complete with pending children waits for them").
            let note = "Error: not done yet: read the results of your subtasks (above), then \
                        call it again";
            for call in &finals {
                self.record_result(call, note.to_owned(), true);
            }
        } else if let Some(end) = self.run_finals(finals).await? {
            return Ok(Some(end));
        }
        if !self.subtasks_answered.is_empty() {
            let answered = std::mem::take(&mut self.subtasks_answered);
            let notice = super::subtasks::resume_notice(&answered, &self.place.movement);
            self.record(maestro_domain::MessageEvent::plain(
                maestro_domain::Message::user(notice),
            ));
        }
        self.commit(None).await?;
        Ok(None)
    }

    /// Results of the calls, in order, up to the first call that got none (and why). Runs
    /// of consecutive read-only calls go out in parallel; any other call runs alone, in order.
    async fn execute_all(
        &mut self,
        calls: &[ToolCall],
    ) -> (Vec<(String, bool)>, Option<CallError>) {
        let mut results = Vec::with_capacity(calls.len());
        let mut rest = calls;
        while !rest.is_empty() {
            let batch = rest
                .iter()
                .take_while(|c| self.spec(c).is_some_and(ToolSpec::is_read_only))
                .count()
                .max(1);
            let (now, later) = rest.split_at(batch);
            rest = later;
            let outcomes = join_all(now.iter().map(|c| self.execute(c))).await;
            for (call, outcome) in now.iter().zip(outcomes) {
                match outcome {
                    Ok(result) => {
                        self.remember(call, &result);
                        results.push(result);
                    }
                    Err(e) => return (results, Some(e)),
                }
            }
        }
        (results, None)
    }

    /// A read-only call the policy allows as it is (no approval, no person).
    fn reads_freely(&self, call: &ToolCall) -> bool {
        let Some(spec) = self.spec(call) else {
            return false;
        };
        if !spec.is_read_only() || spec.name == tools::ASK {
            return false;
        }
        parse_arguments(&call.function.arguments).is_ok_and(|arguments| {
            self.shared
                .policy
                .refusal(&spec.name, &arguments, &self.granted)
                .is_none()
        })
    }

    pub(super) fn spec(&self, call: &ToolCall) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.name == call.name())
    }

    /// Keep a read-only result for the rest of the job; any other call may change the
    /// workspace, so it forgets everything kept.
    /// A subtask keeps nothing: sibling subtasks change the workspace it shares with them.
    fn remember(&mut self, call: &ToolCall, result: &(String, bool)) {
        match self.spec(call).map(|s| s.idempotency) {
            Some(Idempotency::ReadOnly) if !result.1 && self.claim.parent_task_id.is_none() => {
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
        let install = spec.name == tools::REQUEST_PACKAGE;
        if spec.name == tools::ASK {
            return Ok((
                "Error: ask alone, once the other calls are done".to_owned(),
                true,
            ));
        }
        if !install
            && let Some(refusal) = policy.refusal(&spec.name, &arguments, &self.granted)
            && !(refusal.approvable && self.approved_calls.contains(&call.id))
        {
            return Ok((format!("Error: {refusal}"), true));
        }
        if let Some(refusal) = movement_refusal(self.movement(), &spec.name) {
            return Ok((format!("Error: {refusal}"), true));
        }
        if let Some(cached) = self.cache.get(&cache_key(call)) {
            return Ok((cached.clone(), false));
        }
        let operation_id = format!(
            "{}/{}/{}/{}",
            self.claim.job_id, self.place.movement, self.iterations, call.id
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
            // Subtasks work in their top task's workspace.
            task_id: self.claim.workspace_id,
            job_id: self.claim.job_id,
            call_id: call.id.clone(),
            operation_id: operation_id.clone(),
            // An approved package request runs as the tool-runner's installer, which needs
            // the package registry.
            tool: if install {
                tools::INSTALL_PACKAGE.to_owned()
            } else {
                spec.name.clone()
            },
            arguments,
            timeout_ms: settings.tool_timeout.as_millis() as u64,
            network: policy.network || install,
            allowed_hosts: policy.allowed_hosts.clone(),
            ledgered,
            mcp: tools::split_mcp_tool_name(&spec.name).and_then(|(server, _)| {
                let mut config = policy.mcp_servers.get(server)?.clone();
                if let Some(token) = self.mcp_tokens.get(server) {
                    config.env.insert(config.token_env.clone(), token.clone());
                }
                Some(tools::McpTarget {
                    name: server.to_owned(),
                    server: config,
                })
            }),
        };
        // The tool-runner stops the tool at its timeout and still answers; wait a little longer.
        let wait = settings.tool_timeout + std::time::Duration::from_secs(5);
        let subject = self.shared.subjects.tools_exec();
        let sent = std::time::Instant::now();
        let reply = tool_client::execute(&self.shared.nats, subject, &request, wait).await;
        super::Waits::add(&self.waits.tools_us, sent);
        let reply = reply.map_err(CallError::Unavailable)?;
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
                // A person may have said what became of it (`side_effect_unknown`) — about this
                // start of it: a decision older than the start is about an earlier run. The
                // latest such decision counts; an item set aside as stale is nobody's answer.
                let prefix = format!("op:{operation_id}:");
                if let Some(action) = self
                    .decisions
                    .iter()
                    .filter(|a| {
                        a.key.starts_with(&prefix)
                            && a.is_decided()
                            && a.decided_at.is_some_and(|d| d > at)
                    })
                    .max_by_key(|a| a.decided_at)
                {
                    let verdict = action.decision.as_ref().map(|d| d["decision"].clone());
                    if verdict == Some(Value::from("happened")) {
                        let output = "a person confirmed that this call took effect";
                        operations::finish(&self.shared.pool, operation_id, true, output).await?;
                        return Ok(Some((output.to_owned(), false)));
                    }
                    tracing::info!(operation_id, "a person said it did not happen; running it");
                    return Ok(None);
                }
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

pub(super) fn parse_arguments(raw: &str) -> Result<Value, String> {
    let raw = if raw.trim().is_empty() { "{}" } else { raw };
    match serde_json::from_str::<Value>(raw) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err("Error: arguments must be a JSON object".to_owned()),
        Err(e) => Err(format!("Error: arguments are not valid JSON ({e})")),
    }
}

/// Why the current movement refuses a tool the policy allows: it is not among the
/// movement's `allowed_tools` (wildcards allowed), or it writes files in a movement without
/// `edit`. (`shell` is left to `allowed_tools` and the policy's command rules.)
pub(super) fn movement_refusal(movement: &Movement, tool: &str) -> Option<String> {
    if let Some(allowed) = &movement.allowed_tools
        && !allowed.iter().any(|pattern| wildcard(pattern, tool))
    {
        return Some(format!(
            "movement `{}` does not use `{tool}`; its tools: {}",
            movement.name,
            allowed.join(", ")
        ));
    }
    if !movement.edit && matches!(tool, "write_file" | "edit_file") {
        return Some(format!(
            "movement `{}` does not change files, so `{tool}` is refused",
            movement.name
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use maestro_domain::piece::Catalog;

    #[test]
    fn movements_narrow_the_tools() {
        let catalog = Catalog::builtin();
        let coding = catalog.get("coding").expect("coding");
        let review = coding.movement("review").expect("review");
        assert_eq!(movement_refusal(review, "read_file"), None);
        let refused = movement_refusal(review, "write_file").expect("refused");
        assert!(refused.contains("does not use `write_file`"), "{refused}");
        let implement = coding.movement("implement").expect("implement");
        assert_eq!(
            movement_refusal(implement, "write_file"),
            None,
            "no allowed_tools: all"
        );
        let mut read_only = implement.clone();
        read_only.edit = false;
        read_only.allowed_tools = Some(vec!["*".into()]);
        assert!(movement_refusal(&read_only, "edit_file").is_some());
        assert_eq!(movement_refusal(&read_only, "mcp__files__read"), None);
    }
}
