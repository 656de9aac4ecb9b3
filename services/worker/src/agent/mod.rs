//! The agent loop of one job (one movement of SPEC §3.5, the part the foundation needs):
//! stream the LLM, commit its message, run the tools it called, commit their results, and
//! repeat until the model calls `complete`.
//!
//! Commits per iteration are few and deliberate: the assistant message (with its tool calls)
//! is committed before any tool runs, so what the model asked for is never lost; the tool
//! results follow in one commit; a message that only calls `complete` is committed together
//! with the job's final state. A job resumed after a crash rebuilds its conversation from
//! these events and carries on from the last commit.
//!
//! Two signals reach a running job: `lost` (its lease is gone: stop without writing) and the
//! worker's `release` (shutdown grace is over: hand the job back at the next safe point).

mod calls;
mod catalog;
mod ending;
mod llm;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use maestro_db::jobs::{self, Claimed, Fence, Fenced, Transition};
use maestro_db::{DbError, PgPool};
use maestro_domain::piece;
use maestro_domain::policy::ToolPolicy;
use maestro_domain::tools::ToolSpec;
use maestro_domain::{EventBody, Message, MessageEvent, ToolCall, ToolCallEvent, ToolResultEvent};
use maestro_llm::LlmClient;
use maestro_messaging::Subjects;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::conversation;
use crate::deltas::DeltaPublisher;

/// How often a job looks for interjections without being signalled.
const INTERJECTION_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// Precedes an interjection in the conversation.
const INTERJECTION_HEADER: &str = "[The user sent this message while you were working]";

/// Consecutive replies without a tool call before the job fails.
const MAX_TEXT_ONLY_REPLIES: u32 = 2;

const TEXT_ONLY_WARNING: &str = "Your last reply called no tool. Continue the task with the \
tools, and call `complete` when it is done.";

/// What the job came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// Committed as succeeded.
    Succeeded,
    /// Committed as failed, for this reason.
    Failed(String),
    /// Committed as `retry`; dispatch again after this delay.
    Retry(Duration),
    /// Handed back (`queued`) because the worker is shutting down; dispatch again at once.
    Released,
    /// Committed as `waiting_human`: a person must act before the job goes on.
    Paused,
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

/// What jobs need from the worker.
#[derive(Debug, Clone)]
pub struct Shared {
    pub pool: PgPool,
    pub nats: async_nats::Client,
    pub subjects: Subjects,
    pub llm: LlmClient,
    pub settings: Arc<Settings>,
    /// Fires when the shutdown grace period is over: running jobs hand themselves back.
    pub release: CancellationToken,
    /// The workspace tool policy.
    pub policy: Arc<ToolPolicy>,
    /// The tool-runner's record of ledgered operations' outcomes.
    pub operations: maestro_messaging::setup::OperationOutcomes,
    /// The MCP servers' tools, once listed.
    pub mcp_tools: Arc<tokio::sync::Mutex<Option<Vec<ToolSpec>>>>,
    /// Wake-ups for the jobs this worker runs.
    pub signals: crate::signals::Signals,
}

/// How this job was delivered and what can interrupt it.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Fires when the job's lease is lost.
    pub lost: CancellationToken,
    /// No redelivery follows this one: a recoverable error must fail the job now.
    pub last: bool,
    /// Set when an interjection is signalled for the job.
    pub interjections: Arc<std::sync::atomic::AtomicBool>,
}

/// One job being run by this worker.
pub struct JobRun<'a> {
    shared: &'a Shared,
    claim: &'a Claimed,
    fence: Fence,
    delivery: Delivery,
    model: String,
    tools: Vec<ToolSpec>,
    tools_json: Box<RawValue>,
    messages: Vec<Message>,
    unsaved: Vec<EventBody>,
    deltas: DeltaPublisher,
    last_seq: i64,
    iterations: u32,
    next_generated_id: u32,
    /// Results of read-only calls since the workspace last changed.
    cache: HashMap<String, String>,
    /// Interjections whose user messages are among the unsaved events.
    delivering: Vec<uuid::Uuid>,
    last_interjection_check: std::time::Instant,
}

impl std::fmt::Debug for JobRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRun")
            .field("job_id", &self.claim.job_id)
            .finish_non_exhaustive()
    }
}

/// Run a claimed job to its end.
pub async fn run(shared: &Shared, claim: &Claimed, delivery: Delivery) -> Result<JobEnd, JobError> {
    let fence = Fence {
        job_id: claim.job_id,
        attempt: claim.attempt,
    };
    if claim.attempt > claim.max_attempts {
        let error = format!("gave up after {} attempts", claim.max_attempts);
        return ending::settle_failed(shared, fence, error).await;
    }
    let Some(piece) = piece::find(&claim.piece) else {
        let error = format!("unknown piece {:?}", claim.piece);
        return ending::settle_failed(shared, fence, error).await;
    };
    // A first claim has nothing to resume from: skip the read.
    let history = if claim.attempt > 1 {
        maestro_db::events::of_job(&shared.pool, claim.job_id).await?
    } else {
        Vec::new()
    };
    let rebuilt = conversation::rebuild(&history)?;
    let tools = catalog::tools(shared).await;
    let mut run = JobRun::new(shared, claim, fence, delivery, tools);
    let pending = if rebuilt.messages.is_empty() {
        let follow_ups = if claim.job_no > 1 {
            maestro_db::comments::follow_ups(&shared.pool, claim.job_id).await?
        } else {
            Vec::new()
        };
        for message in conversation::seed(piece, &run.tools, claim, &follow_ups) {
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
    let needs_auth: Vec<&String> = shared
        .policy
        .mcp_servers
        .iter()
        .filter(|(_, s)| s.requires_auth)
        .map(|(name, _)| name)
        .collect();
    if !needs_auth.is_empty() {
        // No token store yet: a server that needs authorization always waits for one.
        let names = needs_auth
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let reason = format!("the MCP servers {names} need authorization before the job can start");
        return run
            .pause(maestro_domain::WaitReason::McpAuthRequired, reason)
            .await;
    }
    run.drive(pending).await
}

impl<'a> JobRun<'a> {
    fn new(
        shared: &'a Shared,
        claim: &'a Claimed,
        fence: Fence,
        delivery: Delivery,
        tools: Vec<ToolSpec>,
    ) -> Self {
        let rendered: Vec<serde_json::Value> = tools.iter().map(ToolSpec::to_openai).collect();
        let tools_json =
            serde_json::value::to_raw_value(&rendered).expect("tool specs are valid JSON");
        let deltas = DeltaPublisher::new(
            shared.nats.clone(),
            shared.subjects.clone(),
            claim.task_id,
            claim.job_id,
            claim.claim_seq,
        );
        let model = claim
            .model
            .clone()
            .unwrap_or_else(|| shared.settings.default_model.clone());
        Self {
            shared,
            claim,
            fence,
            delivery,
            model,
            tools,
            tools_json,
            messages: Vec::new(),
            unsaved: Vec::new(),
            deltas,
            last_seq: claim.claim_seq,
            iterations: 0,
            next_generated_id: 1,
            cache: HashMap::new(),
            delivering: Vec::new(),
            last_interjection_check: std::time::Instant::now(),
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
            if self.shared.release.is_cancelled() {
                return self.release().await;
            }
            self.take_interjections().await?;
            if self.iterations >= self.shared.settings.max_iterations {
                let error = format!("no `complete` after {} LLM iterations", self.iterations);
                return self.fail(error).await;
            }
            let completion = match self.llm_iteration().await? {
                Ok(completion) => completion,
                Err(llm::Interrupt::Released) => return self.release().await,
                Err(llm::Interrupt::Llm(e)) => return self.llm_failed(e).await,
            };
            self.iterations += 1;
            let calls = self.assign_ids(completion.tool_calls.clone());
            let model = completion
                .model
                .clone()
                .or_else(|| Some(self.model.clone()));
            self.record(MessageEvent {
                message: Message::assistant(completion.content.clone(), calls.clone()),
                model,
                usage: completion.usage,
                finish_reason: completion.finish_reason.clone(),
            });
            if calls.is_empty() {
                text_only += 1;
                if text_only > MAX_TEXT_ONLY_REPLIES {
                    let error =
                        format!("the model replied {text_only} times without calling a tool");
                    return self.fail(error).await;
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
    /// Commit the unsaved events (and a state change) in one statement, marking the
    /// interjections they deliver. When the write is refused the events stay unsaved.
    async fn commit(&mut self, transition: Option<Transition>) -> Result<(), JobError> {
        if self.unsaved.is_empty() && transition.is_none() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.unsaved);
        let pool = &self.shared.pool;
        let written = jobs::append_delivering(
            pool,
            self.fence,
            &events,
            transition.as_ref(),
            &self.delivering,
        )
        .await?;
        match written {
            Ok(first) => {
                self.last_seq = first + events.len() as i64 - 1;
                self.deltas.committed(self.last_seq);
                self.delivering.clear();
                Ok(())
            }
            Err(fenced) => {
                self.unsaved = events;
                Err(fenced.into())
            }
        }
    }

    /// Deliver the interjections waiting for this job as `user` messages, appended after
    /// everything so far (never earlier). They are marked delivered with the next commit.
    async fn take_interjections(&mut self) -> Result<(), JobError> {
        let signalled = self
            .delivery
            .interjections
            .swap(false, std::sync::atomic::Ordering::SeqCst);
        if !signalled && self.last_interjection_check.elapsed() < INTERJECTION_POLL {
            return Ok(());
        }
        self.last_interjection_check = std::time::Instant::now();
        for (id, body) in
            maestro_db::comments::pending(&self.shared.pool, self.claim.job_id).await?
        {
            if self.delivering.contains(&id) {
                continue;
            }
            tracing::info!(comment_id = %id, "delivering an interjection");
            self.record(MessageEvent::plain(Message::user(format!(
                "{INTERJECTION_HEADER}\n{body}"
            ))));
            self.delivering.push(id);
        }
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
