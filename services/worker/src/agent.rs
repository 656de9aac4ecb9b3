//! The agent loop of one job (one movement of SPEC §3.5, the part the foundation needs):
//! stream the LLM, commit its message, run the tools it called, commit their results, and
//! repeat until the model calls `complete`.
//!
//! Commits per iteration are few and deliberate: the assistant message (with its tool calls)
//! is committed before any tool runs, so what the model asked for is never lost; the tool
//! results follow in one commit; a message that only calls `complete` is committed together
//! with the job's final state. A job resumed after a crash rebuilds its conversation from
//! these events and carries on from the last commit.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::future::join_all;
use maestro_db::jobs::{self, Claimed, Fence, Fenced, Transition};
use maestro_db::{DbError, PgPool};
use maestro_domain::piece;
use maestro_domain::tools::{self, ToolExecRequest, ToolSpec};
use maestro_domain::{
    EventBody, JobStatus, Message, MessageEvent, ToolCall, ToolCallEvent, ToolResultEvent,
};
use maestro_llm::{Accumulator, ChatRequest, Completion, LlmClient, LlmError, StreamEvent};
use maestro_messaging::Subjects;
use maestro_messaging::backoff::backoff;
use maestro_messaging::payloads::DeltaFragment;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::conversation;
use crate::deltas::DeltaPublisher;
use crate::tool_client;

/// Consecutive replies without a tool call before the job fails.
const MAX_TEXT_ONLY_REPLIES: u32 = 2;

const TEXT_ONLY_WARNING: &str = "Your last reply called no tool. Continue the task with the \
tools, and call `complete` when it is done.";

/// What the job came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// Committed as succeeded or failed.
    Settled(JobStatus),
    /// Committed as `retry`; dispatch again after this delay.
    Retry(Duration),
    /// Another attempt holds the job now; this one stopped without writing.
    Fenced,
}

/// Infrastructure trouble while running a job.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Fenced(#[from] Fenced),
    #[error("a committed event cannot be read: {0}")]
    Corrupt(#[from] serde_json::Error),
}

/// What a job needs from the worker.
#[derive(Debug, Clone)]
pub struct Shared {
    pub pool: PgPool,
    pub nats: async_nats::Client,
    pub subjects: Subjects,
    pub llm: LlmClient,
    pub settings: Arc<Settings>,
}

/// One job being run by this worker.
pub struct JobRun<'a> {
    shared: &'a Shared,
    claim: &'a Claimed,
    fence: Fence,
    cancel: CancellationToken,
    model: String,
    tools: Vec<ToolSpec>,
    tools_json: Box<RawValue>,
    messages: Vec<Message>,
    unsaved: Vec<EventBody>,
    deltas: DeltaPublisher,
    last_seq: i64,
    iterations: u32,
    next_generated_id: u32,
}

impl std::fmt::Debug for JobRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRun")
            .field("job_id", &self.claim.job_id)
            .finish_non_exhaustive()
    }
}

/// Run a claimed job to its end. `cancel` fires when the job's lease is lost.
pub async fn run(
    shared: &Shared,
    claim: &Claimed,
    cancel: CancellationToken,
) -> Result<JobEnd, JobError> {
    let fence = Fence {
        job_id: claim.job_id,
        attempt: claim.attempt,
    };
    if claim.attempt > claim.max_attempts {
        let error = format!("gave up after {} attempts", claim.max_attempts);
        return settle_failed(shared, fence, error).await;
    }
    let Some(piece) = piece::find(&claim.piece) else {
        return settle_failed(shared, fence, format!("unknown piece {:?}", claim.piece)).await;
    };
    // A first claim has nothing to resume from: skip the read.
    let history = if claim.attempt > 1 {
        maestro_db::events::of_job(&shared.pool, claim.job_id).await?
    } else {
        Vec::new()
    };
    let rebuilt = conversation::rebuild(&history)?;
    let mut run = JobRun::new(shared, claim, fence, cancel);
    let pending = if rebuilt.messages.is_empty() {
        let seed = conversation::seed(piece, &run.tools, claim, Utc::now());
        for message in seed {
            run.record(MessageEvent::plain(message));
        }
        Vec::new()
    } else {
        tracing::info!(
            iterations = rebuilt.iterations,
            pending = rebuilt.pending.len(),
            "resuming from committed events"
        );
        run.messages = rebuilt.messages;
        run.iterations = rebuilt.iterations;
        run.next_generated_id = rebuilt.next_generated_id;
        rebuilt.pending
    };
    run.drive(pending).await
}

async fn settle_failed(shared: &Shared, fence: Fence, error: String) -> Result<JobEnd, JobError> {
    tracing::warn!(%error, "job failed");
    let transition = Transition {
        error: Some(error.clone()),
        ..Transition::to(JobStatus::Failed)
    };
    let change = state_event(JobStatus::Failed, fence.attempt, |c| c.error = Some(error));
    jobs::append(&shared.pool, fence, &[change], Some(&transition)).await??;
    Ok(JobEnd::Settled(JobStatus::Failed))
}

fn state_event(
    status: JobStatus,
    attempt: i32,
    fill: impl FnOnce(&mut maestro_domain::JobStateChange),
) -> EventBody {
    let mut change = maestro_domain::JobStateChange::new(status, attempt);
    fill(&mut change);
    EventBody::JobState(change)
}

impl<'a> JobRun<'a> {
    fn new(
        shared: &'a Shared,
        claim: &'a Claimed,
        fence: Fence,
        cancel: CancellationToken,
    ) -> Self {
        let mut tools = tools::builtin_tools();
        tools.push(tools::complete_tool());
        let rendered: Vec<serde_json::Value> = tools.iter().map(ToolSpec::to_openai).collect();
        let tools_json =
            serde_json::value::to_raw_value(&rendered).expect("tool specs are valid JSON");
        let deltas = DeltaPublisher::new(
            shared.nats.clone(),
            shared.subjects.deltas(claim.task_id, claim.job_id),
            claim.task_id,
            claim.job_id,
            claim.claim_seq,
        );
        Self {
            shared,
            claim,
            fence,
            cancel,
            model: claim
                .model
                .clone()
                .unwrap_or_else(|| shared.settings.default_model.clone()),
            tools,
            tools_json,
            messages: Vec::new(),
            unsaved: Vec::new(),
            deltas,
            last_seq: claim.claim_seq,
            iterations: 0,
            next_generated_id: 1,
        }
    }

    async fn drive(mut self, mut pending: Vec<ToolCall>) -> Result<JobEnd, JobError> {
        let mut text_only = 0;
        loop {
            if !pending.is_empty()
                && let Some(end) = self.run_calls(std::mem::take(&mut pending)).await?
            {
                return Ok(end);
            }
            if self.iterations >= self.shared.settings.max_iterations {
                let error = format!("no `complete` after {} LLM iterations", self.iterations);
                return self.fail(error).await;
            }
            let completion = match self.llm_iteration().await {
                Ok(completion) => completion,
                Err(IterationError::Llm(e)) => return self.llm_failed(e).await,
                Err(IterationError::Job(e)) => return Err(e),
            };
            self.iterations += 1;
            let calls = self.assign_ids(completion.tool_calls.clone());
            self.record(MessageEvent {
                message: Message::assistant(completion.content.clone(), calls.clone()),
                model: completion
                    .model
                    .clone()
                    .or_else(|| Some(self.model.clone())),
                usage: completion.usage,
                finish_reason: completion.finish_reason.clone(),
            });
            if calls.is_empty() {
                text_only += 1;
                if text_only > MAX_TEXT_ONLY_REPLIES {
                    return self
                        .fail(format!(
                            "the model replied {text_only} times without calling a tool"
                        ))
                        .await;
                }
                self.record(MessageEvent::plain(Message::user(TEXT_ONLY_WARNING)));
                self.commit(None).await?;
                continue;
            }
            text_only = 0;
            for call in &calls {
                self.unsaved.push(EventBody::ToolCall(ToolCallEvent {
                    call_id: call.id.clone(),
                    name: call.name().to_owned(),
                    arguments: call.function.arguments.clone(),
                    message_seq: 0,
                }));
            }
            pending = calls;
        }
    }

    /// Add a message to the conversation and to the events to commit next.
    fn record(&mut self, event: MessageEvent) {
        self.messages.push(event.message.clone());
        self.unsaved.push(EventBody::Message(event));
    }

    fn record_result(&mut self, call: &ToolCall, content: String, is_error: bool) {
        self.messages
            .push(Message::tool(call.id.clone(), content.clone()));
        self.unsaved.push(EventBody::ToolResult(ToolResultEvent {
            call_id: call.id.clone(),
            name: call.name().to_owned(),
            content,
            is_error,
        }));
    }

    /// Commit the unsaved events (and a state change) in one statement.
    async fn commit(&mut self, transition: Option<Transition>) -> Result<(), JobError> {
        if self.unsaved.is_empty() && transition.is_none() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.unsaved);
        let first =
            jobs::append(&self.shared.pool, self.fence, &events, transition.as_ref()).await??;
        self.last_seq = first + events.len() as i64 - 1;
        self.deltas.committed(self.last_seq);
        Ok(())
    }

    fn assign_ids(&mut self, mut calls: Vec<ToolCall>) -> Vec<ToolCall> {
        for call in &mut calls {
            if call.id.is_empty() {
                call.id = format!("gen_call_{}", self.next_generated_id);
                self.next_generated_id += 1;
            }
        }
        calls
    }
}

enum IterationError {
    Llm(LlmError),
    Job(JobError),
}

impl JobRun<'_> {
    /// One streaming LLM call; text and tool-call fragments are published live.
    async fn llm_iteration(&mut self) -> Result<Completion, IterationError> {
        let request = ChatRequest {
            model: &self.model,
            tools: Some(&self.tools_json),
            messages: &self.messages,
        };
        let mut stream = tokio::select! {
            stream = self.shared.llm.stream_chat(request) => stream.map_err(IterationError::Llm)?,
            _ = self.cancel.cancelled() => return Err(IterationError::Job(JobError::Fenced(Fenced(self.fence.job_id)))),
        };
        let mut acc = Accumulator::default();
        loop {
            let next = tokio::select! {
                next = stream.next() => next,
                _ = self.cancel.cancelled() => return Err(IterationError::Job(JobError::Fenced(Fenced(self.fence.job_id)))),
            };
            let Some(event) = next else { break };
            let event = event.map_err(IterationError::Llm)?;
            match &event {
                StreamEvent::Text(text) => {
                    self.deltas
                        .publish(DeltaFragment::Text { text: text.clone() })
                        .await;
                }
                StreamEvent::ToolCall {
                    index,
                    id,
                    name,
                    arguments,
                } => {
                    let fragment = DeltaFragment::ToolCall {
                        index: *index,
                        call_id: id.clone(),
                        name: name.clone(),
                        arguments: arguments.clone(),
                    };
                    self.deltas.publish(fragment).await;
                }
                _ => {}
            }
            acc.push(&event);
        }
        let completion = acc.finish();
        if let Some(usage) = completion.usage {
            tracing::info!(
                "prompt_cache reused={} prompt={} pct={:.1}",
                usage.cached_prompt_tokens,
                usage.prompt_tokens,
                usage.cache_pct()
            );
        }
        Ok(completion)
    }

    /// Run the calls of an assistant message and commit their results; `complete` ends the job.
    async fn run_calls(&mut self, calls: Vec<ToolCall>) -> Result<Option<JobEnd>, JobError> {
        let (finals, regular): (Vec<ToolCall>, Vec<ToolCall>) =
            calls.into_iter().partition(|c| c.name() == tools::COMPLETE);
        if !regular.is_empty() {
            // What the model asked for is durable before anything touches the world.
            self.commit(None).await?;
            let results = match self.execute_all(&regular).await {
                Ok(results) => results,
                Err(unavailable) => {
                    return self
                        .recoverable(unavailable.to_string(), None)
                        .await
                        .map(Some);
                }
            };
            for (call, (content, is_error)) in regular.iter().zip(results) {
                self.record_result(call, content, is_error);
            }
        }
        let mut finals = finals.into_iter();
        if let Some(complete) = finals.next() {
            match complete_result(&complete) {
                Ok(result) => {
                    self.record_result(&complete, "ok".to_owned(), false);
                    for extra in finals {
                        self.record_result(
                            &extra,
                            "Error: `complete` was already called".to_owned(),
                            true,
                        );
                    }
                    return self.succeed(result).await.map(Some);
                }
                Err(error) => self.record_result(&complete, error, true),
            }
        }
        self.commit(None).await?;
        Ok(None)
    }

    /// Execute regular calls: all in parallel when every one is read-only, else in order.
    async fn execute_all(
        &self,
        calls: &[ToolCall],
    ) -> Result<Vec<(String, bool)>, tool_client::Unavailable> {
        let read_only = calls
            .iter()
            .all(|c| self.spec(c).is_some_and(ToolSpec::is_read_only));
        if read_only {
            join_all(calls.iter().map(|c| self.execute(c)))
                .await
                .into_iter()
                .collect()
        } else {
            let mut results = Vec::with_capacity(calls.len());
            for call in calls {
                results.push(self.execute(call).await?);
            }
            Ok(results)
        }
    }

    fn spec(&self, call: &ToolCall) -> Option<&ToolSpec> {
        self.tools
            .iter()
            .find(|t| t.name == call.name() && t.name != tools::COMPLETE)
    }

    /// One call: `(content for the model, is_error)`.
    async fn execute(&self, call: &ToolCall) -> Result<(String, bool), tool_client::Unavailable> {
        let Some(spec) = self.spec(call) else {
            let known: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
            return Ok((
                format!(
                    "Error: unknown tool {:?}; available: {}",
                    call.name(),
                    known.join(", ")
                ),
                true,
            ));
        };
        let arguments = match parse_arguments(&call.function.arguments) {
            Ok(arguments) => arguments,
            Err(error) => return Ok((error, true)),
        };
        let request = ToolExecRequest {
            task_id: self.claim.task_id,
            job_id: self.claim.job_id,
            call_id: call.id.clone(),
            operation_id: format!("{}:{}", self.claim.job_id, call.id),
            tool: spec.name.clone(),
            arguments,
            timeout_ms: self.shared.settings.tool_timeout.as_millis() as u64,
        };
        let subject = self.shared.subjects.tools_exec();
        let reply = tool_client::execute(
            &self.shared.nats,
            subject,
            &request,
            self.shared.settings.tool_timeout,
        )
        .await?;
        tracing::debug!(tool = %spec.name, ok = reply.ok, "tool call done");
        Ok(if reply.ok {
            (reply.output, false)
        } else {
            (format!("Error: {}", reply.output), true)
        })
    }
}

fn parse_arguments(raw: &str) -> Result<serde_json::Value, String> {
    let raw = if raw.trim().is_empty() { "{}" } else { raw };
    match serde_json::from_str::<serde_json::Value>(raw) {
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

impl JobRun<'_> {
    async fn succeed(&mut self, result: String) -> Result<JobEnd, JobError> {
        let transition = Transition {
            result: Some(result.clone()),
            ..Transition::to(JobStatus::Succeeded)
        };
        self.unsaved
            .push(state_event(JobStatus::Succeeded, self.fence.attempt, |c| {
                c.result = Some(result)
            }));
        self.commit(Some(transition)).await?;
        tracing::info!(iterations = self.iterations, "job succeeded");
        Ok(JobEnd::Settled(JobStatus::Succeeded))
    }

    async fn fail(&mut self, error: String) -> Result<JobEnd, JobError> {
        tracing::warn!(%error, "job failed");
        let transition = Transition {
            error: Some(error.clone()),
            ..Transition::to(JobStatus::Failed)
        };
        self.unsaved
            .push(state_event(JobStatus::Failed, self.fence.attempt, |c| {
                c.error = Some(error)
            }));
        self.commit(Some(transition)).await?;
        Ok(JobEnd::Settled(JobStatus::Failed))
    }

    async fn llm_failed(&mut self, error: LlmError) -> Result<JobEnd, JobError> {
        if error.is_recoverable() {
            self.recoverable(format!("LLM: {error}"), error.retry_after())
                .await
        } else {
            self.fail(format!("LLM: {error}")).await
        }
    }

    /// A recoverable error: `retry` with a backoff while attempts remain, else `failed`.
    /// Events not yet committed are dropped: the retry rebuilds from what was committed.
    async fn recoverable(
        &mut self,
        error: String,
        hint: Option<Duration>,
    ) -> Result<JobEnd, JobError> {
        self.unsaved.clear();
        if self.fence.attempt >= self.claim.max_attempts {
            return self
                .fail(format!(
                    "{error} (gave up after {} attempts)",
                    self.fence.attempt
                ))
                .await;
        }
        let settings = &self.shared.settings;
        let delay = backoff(
            self.fence.attempt,
            settings.retry_base,
            settings.retry_max,
            hint,
        );
        let next_retry_at = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
        tracing::warn!(%error, ?delay, "recoverable error; job will retry");
        let transition = Transition {
            error: Some(error.clone()),
            next_retry_at: Some(next_retry_at),
            ..Transition::to(JobStatus::Retry)
        };
        self.unsaved
            .push(state_event(JobStatus::Retry, self.fence.attempt, |c| {
                c.error = Some(error);
                c.next_retry_at = Some(next_retry_at);
            }));
        self.commit(Some(transition)).await?;
        Ok(JobEnd::Retry(delay))
    }
}
