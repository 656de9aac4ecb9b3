//! The piece engine of one job (SPEC §3.5). The piece loop starts the job in a movement
//! (resume > the task's start movement > the piece's start), guards against loops and
//! revisits, and moves on when the model calls `transition`; the movement loop streams the
//! LLM, commits its message, runs the tools it called, commits their results, and repeats
//! until the model calls `complete` (or a guard ends the job).
//!
//! Commits per iteration are few and deliberate: the assistant message (with its tool calls)
//! is committed before any tool that may change something runs, so what the model asked for
//! is never lost; when every call only reads, the message is committed with the results
//! instead (nothing happened that a crash could lose track of); the tool results follow in
//! one commit, together with a transition's movement event and the next
//! movement's guidance; a message that only calls `complete` is committed together with the
//! job's final state. A job resumed after a crash rebuilds its conversation and its place in
//! the piece from these events and carries on from the last commit.
//!
//! Two signals reach a running job: `lost` (its lease is gone: stop without writing) and the
//! worker's `release` (shutdown grace is over: hand the job back at the next safe point).

mod calls;
mod catalog;
mod ending;
mod finals;
mod gate;
pub mod guard;
mod llm;
pub mod router;
mod subtasks;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use maestro_db::jobs::{self, Claimed, Fence, Fenced, Transition};
use maestro_db::{DbError, PgPool};
use maestro_domain::piece::{self, Catalog, Movement, Piece};
use maestro_domain::policy::ToolPolicy;
use maestro_domain::tools::ToolSpec;
use maestro_domain::{
    EventBody, Message, MessageEvent, MovementEvent, Role, ToolCall, ToolCallEvent, ToolResultEvent,
};
use maestro_llm::LlmClient;
use maestro_messaging::Subjects;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::conversation::{self, Opening};
use crate::deltas::DeltaPublisher;

/// How often a job looks for interjections without being signalled.
const INTERJECTION_POLL: Duration = Duration::from_secs(2);

/// Precedes an interjection in the conversation.
const INTERJECTION_HEADER: &str = "[The user sent this message while you were working]";

/// Consecutive replies without a tool call before the job fails.
const MAX_TEXT_ONLY_REPLIES: u32 = 2;

const TEXT_ONLY_WARNING: &str = "Your last reply called no tool. Continue the task with the \
tools: call `transition` when this movement is done, `complete` when the whole task is.";

/// The same tool calls this many times in a row get a warning...
const REPEAT_WARN: usize = 3;
/// ...and this many times end the job.
const REPEAT_ABORT: usize = 5;

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
    /// Committed as `waiting_human` (a person must act before the job goes on) or
    /// `waiting_subtasks` (its subtasks must be over).
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
    /// To dispatch the subtasks jobs start.
    pub js: async_nats::jetstream::Context,
    pub subjects: Subjects,
    pub llm: LlmClient,
    pub settings: Arc<Settings>,
    /// Fires when the shutdown grace period is over: running jobs hand themselves back.
    pub release: CancellationToken,
    /// The workspace tool policy.
    pub policy: Arc<ToolPolicy>,
    /// The pieces jobs run.
    pub catalog: Arc<Catalog>,
    /// The tool-runner's record of ledgered operations' outcomes.
    pub operations: maestro_messaging::setup::OperationOutcomes,
    /// The MCP servers' tools, once listed.
    pub mcp_tools: Arc<tokio::sync::Mutex<BTreeMap<String, Vec<ToolSpec>>>>,
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

/// Where the job is in its piece.
#[derive(Debug, Clone, Default)]
struct Place {
    movement: String,
    /// Movements entered so far (revisits included), and how often each.
    entered: u32,
    visits: BTreeMap<String, u32>,
    /// LLM iterations in the current movement.
    iterations: u32,
    /// The watchdog warned in this movement.
    warned: bool,
}

/// Time one iteration spent waiting on others, for the overhead figures.
#[derive(Debug, Default)]
struct Waits {
    llm_us: AtomicU64,
    tools_us: AtomicU64,
}

impl Waits {
    fn add(counter: &AtomicU64, since: Instant) {
        counter.fetch_add(since.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

/// One job being run by this worker.
pub struct JobRun<'a> {
    shared: &'a Shared,
    claim: &'a Claimed,
    fence: Fence,
    delivery: Delivery,
    piece: &'a Piece,
    place: Place,
    model: String,
    tools: Vec<ToolSpec>,
    tools_json: Box<RawValue>,
    /// Tools approved for this task beyond the workspace policy.
    granted: Vec<String>,
    /// Calls a person approved, with the arguments they saw: these run past the policy.
    approved_calls: std::collections::HashSet<String>,
    /// The items this job paused for before, with their decisions (read on resume).
    decisions: Vec<maestro_db::actions::Action>,
    /// The owner's tokens for the MCP servers that need one.
    mcp_tokens: BTreeMap<String, String>,
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
    last_interjection_check: Instant,
    waits: Waits,
    /// `delegate` calls of the current reply that started (or found) a child.
    turn_delegates: usize,
    /// The subtask items whose results answered `delegate` calls since the last notice.
    subtasks_answered: Vec<maestro_db::actions::Action>,
}

impl std::fmt::Debug for JobRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRun")
            .field("job_id", &self.claim.job_id)
            .field("piece", &self.piece.name)
            .field("movement", &self.place.movement)
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
    let piece_name = if claim.piece == piece::ROUTER {
        router::route(shared, claim).await?
    } else {
        claim.piece.clone()
    };
    let Some(piece) = shared.catalog.get(&piece_name) else {
        let error = format!("unknown piece {piece_name:?}");
        return ending::settle_failed(shared, fence, error).await;
    };
    // A first claim has nothing to resume from: skip the read.
    let history = if claim.attempt > 1 {
        maestro_db::events::of_job(&shared.pool, claim.job_id).await?
    } else {
        Vec::new()
    };
    let rebuilt = maestro_domain::transcript::rebuild(&history)?;
    let tokens = gate::mcp_tokens(shared, claim).await?;
    let tools = catalog::tools(shared, piece, claim, &tokens).await;
    let mut run = JobRun::new(shared, claim, fence, delivery, piece, tools);
    run.mcp_tokens = tokens;
    if claim.attempt > 1 {
        run.decisions = maestro_db::actions::of_job(&shared.pool, claim.job_id).await?;
    }
    let pending = match rebuilt.movement.as_deref().and_then(|m| piece.movement(m)) {
        Some(movement) if !rebuilt.messages.is_empty() => {
            tracing::info!(
                iterations = rebuilt.iterations,
                pending = rebuilt.pending.len(),
                movement = %movement.name,
                "resuming from committed events"
            );
            run.place = Place {
                movement: movement.name.clone(),
                entered: rebuilt.movements_entered,
                visits: rebuilt.visits,
                iterations: rebuilt.movement_iterations,
                warned: false,
            };
            run.messages = rebuilt.messages;
            run.iterations = rebuilt.iterations;
            run.next_generated_id = rebuilt.next_generated_id;
            rebuilt.pending
        }
        _ => {
            run.open().await?;
            Vec::new()
        }
    };
    if let Some(end) = run.authorize_mcp().await? {
        return Ok(end);
    }
    run.drive(pending).await
}

impl<'a> JobRun<'a> {
    fn new(
        shared: &'a Shared,
        claim: &'a Claimed,
        fence: Fence,
        delivery: Delivery,
        piece: &'a Piece,
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
            piece,
            place: Place::default(),
            model,
            tools,
            tools_json,
            granted: claim.grants.clone(),
            approved_calls: std::collections::HashSet::new(),
            decisions: Vec::new(),
            mcp_tokens: BTreeMap::new(),
            messages: Vec::new(),
            unsaved: Vec::new(),
            deltas,
            last_seq: claim.claim_seq,
            iterations: 0,
            next_generated_id: 1,
            cache: HashMap::new(),
            delivering: Vec::new(),
            last_interjection_check: Instant::now(),
            waits: Waits::default(),
            turn_delegates: 0,
            subtasks_answered: Vec::new(),
        }
    }

    /// Start a new job: enter its first movement (the task's start movement on its first
    /// job, else the piece's) and seed the conversation. Committed with the first turn.
    async fn open(&mut self) -> Result<(), JobError> {
        let claim = self.claim;
        // Resume (an answered question) > the task's start movement (first job) > the piece's.
        let override_start = claim
            .resume_movement
            .as_deref()
            .and_then(|m| self.piece.movement(m))
            .or_else(|| {
                claim
                    .start_movement
                    .as_deref()
                    .filter(|_| claim.job_no == 1)
                    .and_then(|m| self.piece.movement(m))
            });
        let start = override_start.unwrap_or_else(|| {
            self.piece
                .movement(&self.piece.start)
                .expect("a validated piece has its start movement")
        });
        let follow_ups = if claim.job_no > 1 {
            maestro_db::comments::follow_ups(&self.shared.pool, claim.job_id).await?
        } else {
            Vec::new()
        };
        let workspace = catalog::workspace_context(self.shared, claim).await;
        self.enter(start, None, None);
        let opening = Opening {
            tools: &self.tools,
            claim,
            follow_ups: &follow_ups,
            question: claim.resume_question.as_deref(),
            workspace: &workspace,
        };
        for message in conversation::seed(self.piece, start, opening) {
            self.record(MessageEvent::plain(message));
        }
        Ok(())
    }

    /// Enter `movement`: a movement event (not yet committed) and a fresh count.
    fn enter(&mut self, movement: &Movement, from: Option<&str>, reason: Option<&str>) {
        self.place.entered += 1;
        *self.place.visits.entry(movement.name.clone()).or_default() += 1;
        self.place.movement = movement.name.clone();
        self.place.iterations = 0;
        self.place.warned = false;
        tracing::info!(movement = %movement.name, from, "entering a movement");
        self.unsaved.push(EventBody::Movement(MovementEvent {
            name: movement.name.clone(),
            from: from.map(str::to_owned),
            reason: reason.map(str::to_owned),
            piece: from.is_none().then(|| self.piece.name.clone()),
        }));
    }

    fn movement(&self) -> &'a Movement {
        self.piece
            .movement(&self.place.movement)
            .expect("the job is always in a movement of its piece")
    }

    async fn drive(mut self, mut pending: Vec<ToolCall>) -> Result<JobEnd, JobError> {
        let mut text_only = 0;
        let settings = Arc::clone(&self.shared.settings);
        let mut iteration_started = Instant::now();
        loop {
            if !pending.is_empty()
                && let Some(end) = self.run_calls(std::mem::take(&mut pending)).await?
            {
                return Ok(end);
            }
            if self.iterations > 0 {
                self.log_overhead(iteration_started);
            }
            iteration_started = Instant::now();
            if self.shared.release.is_cancelled() {
                return self.release().await;
            }
            if let Some(deadline) = settings.job_deadline {
                let age = (chrono::Utc::now() - self.claim.created_at)
                    .to_std()
                    .unwrap_or_default();
                if age > deadline {
                    let error = format!(
                        "deadline exceeded: the job is {}s old (JOB_DEADLINE_MS allows {}s)",
                        age.as_secs(),
                        deadline.as_secs()
                    );
                    return self.fail(error).await;
                }
            }
            self.take_interjections().await?;
            if let Some(end) = self.watchdog().await? {
                return Ok(end);
            }
            if let Some(end) = self.prompt_guard().await? {
                return Ok(end);
            }
            let completion = match self.llm_iteration().await? {
                Ok(completion) => completion,
                Err(llm::Interrupt::Released) => return self.release().await,
                Err(llm::Interrupt::Llm(e)) => return self.llm_failed(e).await,
            };
            self.iterations += 1;
            self.place.iterations += 1;
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
            let repeats = repeated_calls(&self.messages);
            if repeats >= REPEAT_ABORT {
                let error = format!(
                    "loop detected: the model made the same tool calls {repeats} times in a row"
                );
                return self.fail(error).await;
            }
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

    /// The per-movement and per-job iteration limits: a warning as the movement's limit
    /// nears (and a duplicate-call warning), the end of the job past either limit.
    async fn watchdog(&mut self) -> Result<Option<JobEnd>, JobError> {
        let limit = self.piece.max_iterations;
        if self.place.iterations >= limit {
            let error = format!(
                "movement `{}` took {limit} LLM iterations without leaving (max_iterations of piece `{}`)",
                self.place.movement, self.piece.name
            );
            return self.fail(error).await.map(Some);
        }
        if self.iterations >= self.shared.settings.max_iterations {
            let error = format!("no `complete` after {} LLM iterations", self.iterations);
            return self.fail(error).await.map(Some);
        }
        let left = limit - self.place.iterations;
        if !self.place.warned && limit >= 4 && left <= (limit / 5).max(2) {
            self.place.warned = true;
            let warning = format!(
                "[Watchdog] {left} LLM iterations are left in movement `{}`. Finish it now: \
                 call `transition` or `complete`.",
                self.place.movement
            );
            self.record(MessageEvent::plain(Message::user(warning)));
        }
        if repeated_calls(&self.messages) == REPEAT_WARN
            && self.messages.last().is_some_and(|m| m.role == Role::Tool)
        {
            let warning = format!(
                "[Loop guard] You made the same tool calls {REPEAT_WARN} times in a row and got \
                 the same kind of answer. Change your approach; repeating them {REPEAT_ABORT} \
                 times ends the task."
            );
            self.record(MessageEvent::plain(Message::user(warning)));
        }
        Ok(None)
    }

    fn log_overhead(&self, started: Instant) {
        let total = started.elapsed().as_micros() as u64;
        let llm = self.waits.llm_us.swap(0, Ordering::Relaxed);
        let tools = self.waits.tools_us.swap(0, Ordering::Relaxed);
        tracing::debug!(
            target: "maestro_worker::overhead",
            overhead_us = total.saturating_sub(llm + tools),
            llm_us = llm,
            tools_us = tools,
            "iteration"
        );
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
                maestro_messaging::publish::wake_outbox(&self.shared.nats, &self.shared.subjects)
                    .await;
                if self.claim.parent_task_id.is_some()
                    && transition.as_ref().is_some_and(|t| t.to.is_terminal())
                {
                    // A subtask is over: its parent may be waiting for it.
                    maestro_messaging::publish::wake_joiner(
                        &self.shared.nats,
                        &self.shared.subjects,
                    )
                    .await;
                }
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
        self.last_interjection_check = Instant::now();
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

/// How many assistant messages in a row, ending with the last one, made exactly the same
/// tool calls (names and arguments; 0 when the last made none).
fn repeated_calls(messages: &[Message]) -> usize {
    let signature = |m: &Message| -> Vec<(String, String)> {
        m.tool_calls
            .iter()
            .map(|c| {
                let arguments = serde_json::from_str::<serde_json::Value>(&c.function.arguments)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|_| c.function.arguments.clone());
                (c.name().to_owned(), arguments)
            })
            .collect()
    };
    let mut assistants = messages.iter().rev().filter(|m| m.role == Role::Assistant);
    let Some(last) = assistants.next() else {
        return 0;
    };
    let wanted = signature(last);
    if wanted.is_empty() {
        return 0;
    }
    1 + assistants.take_while(|m| signature(m) == wanted).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_calls_count_identical_assistant_turns_from_the_end() {
        let call =
            |args: &str| Message::assistant(None, vec![ToolCall::new("c", "read_file", args)]);
        let result = Message::tool("c", "same");
        let mut messages = vec![Message::system("s"), Message::user("u")];
        assert_eq!(repeated_calls(&messages), 0);
        messages.extend([call(r#"{"path":"b"}"#), result.clone()]);
        for _ in 0..3 {
            messages.extend([call(r#"{ "path": "a" }"#), result.clone()]);
        }
        assert_eq!(
            repeated_calls(&messages),
            3,
            "argument whitespace does not matter"
        );
        messages.push(call(r#"{"path":"a"}"#));
        assert_eq!(repeated_calls(&messages), 4);
        messages.push(Message::assistant(Some("text".into()), vec![]));
        assert_eq!(repeated_calls(&messages), 0);
    }
}
