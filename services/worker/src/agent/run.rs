//! One job being run: its parts and where it stands in its piece. The parts have their own
//! files and narrow interfaces — the conversation and its journal (`journal.rs`), the
//! approvals gate (`approvals.rs`), the read cache (`cache.rs`), the subtasks it delegates
//! (`subtasks.rs`) — and the loops that drive them are `drive.rs` (the movement loop),
//! `calls.rs` and `execute.rs` (a reply's tool calls), `finals.rs` (`transition` and
//! `complete`) and `ending.rs` (every way a job ends or pauses).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use maestro_db::claims::Claimed;
use maestro_db::jobs::Fence;
use maestro_domain::piece::{Movement, Piece};
use maestro_domain::tools::ToolSpec;
use maestro_domain::transcript::Rebuilt;
use maestro_domain::{CommentKind, EventBody, MessageEvent, MovementEvent, ToolCall};

use super::approvals::Approvals;
use super::cache::ReadCache;
use super::catalog::{EarlyContext, Offer};
use super::context::{Delivery, JobError, Shared};
use super::continuation::Continuation;
use super::first_call::FirstCall;
use super::gate::CallSite;
use super::journal::Journal;
use super::subtasks::Delegations;
use crate::conversation::{self, Handoff, Opening};

/// The comments a new job opens with.
#[derive(Debug, Default)]
struct Comments {
    /// A follow-up's comments, or the answer to a question.
    follow_ups: Vec<String>,
    /// A Continue's instruction.
    handoff: Option<String>,
    /// Joined the instruction while the job was queued: folded into its opening.
    additions: Vec<String>,
    addition_ids: Vec<uuid::Uuid>,
}

impl Comments {
    /// Read only when there can be any: a later job's, or when some were counted at the claim.
    async fn of(shared: &Shared, claim: &Claimed) -> Result<Self, JobError> {
        let mut comments = Comments::default();
        if claim.job_no == 1 && claim.pending_interjections == 0 {
            return Ok(comments);
        }
        for comment in
            maestro_db::comments::opening(&shared.pool, claim.task_id, claim.job_id).await?
        {
            match comment.kind {
                // The first job's instruction is the task's own.
                CommentKind::Instruction if claim.job_no == 1 => {}
                CommentKind::Instruction | CommentKind::Answer => {
                    comments.follow_ups.push(comment.body)
                }
                CommentKind::Handoff => comments.handoff = Some(comment.body),
                CommentKind::Addition => {
                    comments.additions.push(comment.body);
                    comments.addition_ids.push(comment.id);
                }
                // Delivered at the first step, as in a running job.
                CommentKind::Interjection => {}
            }
        }
        Ok(comments)
    }
}

/// Where the job is in its piece.
#[derive(Debug, Clone, Default)]
pub(super) struct Place {
    pub movement: String,
    /// Movements entered so far (revisits included), and how often each.
    pub entered: u32,
    pub visits: BTreeMap<String, u32>,
    /// LLM iterations in the current movement.
    pub iterations: u32,
    /// The watchdog warned in this movement.
    pub warned: bool,
}

/// Time one iteration spent waiting on others, for the overhead figures.
#[derive(Debug, Default)]
pub(super) struct Waits {
    pub llm_us: AtomicU64,
    pub tools_us: AtomicU64,
}

impl Waits {
    pub fn add(counter: &AtomicU64, since: Instant) {
        counter.fetch_add(since.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

/// One job being run by this worker.
pub(super) struct JobRun<'a> {
    pub shared: &'a Shared,
    pub claim: &'a Claimed,
    pub fence: Fence,
    pub delivery: Delivery,
    pub piece: &'a Piece,
    pub place: Place,
    pub model: String,
    /// The offered tools, and their rendering: the same bytes in every request.
    pub tools: Arc<Offer>,
    pub journal: Journal,
    pub approvals: Approvals,
    pub cache: ReadCache,
    pub delegations: Delegations,
    /// LLM iterations of this job.
    pub iterations: u32,
    pub waits: Waits,
    /// The first LLM request, sent while the job was claimed ([`FirstCall`]).
    pub first_call: Option<FirstCall>,
    /// Its answer's calls, sent as it came when they only read.
    pub early_reads: Option<super::early_reads::EarlyReads>,
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

impl<'a> JobRun<'a> {
    pub fn new(
        shared: &'a Shared,
        claim: &'a Claimed,
        delivery: Delivery,
        piece: &'a Piece,
        tools: Arc<Offer>,
        approvals: Approvals,
    ) -> Self {
        let journal = Journal::new(
            &shared.pool,
            &shared.bus,
            claim,
            delivery.interjections.clone(),
            shared.settings.results_commit_wait,
        );
        let model = claim
            .model
            .clone()
            .unwrap_or_else(|| shared.settings.default_model.clone());
        Self {
            shared,
            claim,
            fence: Fence {
                job_id: claim.job_id,
                attempt: claim.attempt,
            },
            delivery,
            piece,
            place: Place::default(),
            model,
            tools,
            journal,
            approvals,
            cache: ReadCache::new(claim.parent_task_id.is_none()),
            delegations: Delegations::default(),
            iterations: 0,
            waits: Waits::default(),
            first_call: None,
            early_reads: None,
        }
    }

    /// Carry on from the committed events of an earlier claim: the same movement, the same
    /// conversation, the calls still without a result (returned, to run first).
    pub fn resume(&mut self, movement: &Movement, rebuilt: Rebuilt) -> Vec<ToolCall> {
        tracing::info!(
            iterations = rebuilt.iterations,
            pending = rebuilt.pending.len(),
            movement = %movement.name,
            "resuming from committed events"
        );
        self.place = Place {
            movement: movement.name.clone(),
            entered: rebuilt.movements_entered,
            visits: rebuilt.visits,
            iterations: rebuilt.movement_iterations,
            warned: false,
        };
        self.journal.messages = rebuilt.messages;
        self.journal.next_generated_id = rebuilt.next_generated_id;
        self.iterations = rebuilt.iterations;
        rebuilt.pending
    }

    /// Start a new job: enter its first movement (an answered question's movement, else the
    /// task's start movement on its first job, else the piece's) and seed the conversation —
    /// on a Continue, with the task's earlier turns replayed between the system message and
    /// the instruction. Committed with the first turn.
    pub async fn open(
        &mut self,
        continuation: Option<Continuation>,
        early: Option<EarlyContext>,
    ) -> Result<(), JobError> {
        let claim = self.claim;
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
        let comments = Comments::of(self.shared, claim).await?;
        let earlier = match &continuation {
            Some(c) if c.replay.messages.is_empty() => {
                maestro_db::continues::outcome(&self.shared.pool, c.from).await?
            }
            _ => None,
        };
        let workspace = EarlyContext::take(early, self.shared, claim).await;
        self.enter(start, None, None);
        let handoff = continuation.as_ref().map(|_| Handoff {
            instruction: comments.handoff.as_deref().unwrap_or(&claim.instruction),
            earlier: earlier.as_ref().map(|(status, result, error)| {
                (status.as_str(), result.as_deref().or(error.as_deref()))
            }),
        });
        let opening = Opening {
            tools: &self.tools.specs,
            claim,
            follow_ups: &comments.follow_ups,
            question: claim.resume_question.as_deref(),
            workspace: &workspace,
            handoff,
            additions: &comments.additions,
        };
        let [system, user] = conversation::seed(self.piece, start, opening);
        self.journal.record(MessageEvent::plain(system));
        if let Some(continuation) = continuation {
            let event = continuation.event();
            tracing::info!(
                from = %continuation.from,
                threads = event.threads,
                messages = event.messages,
                same_piece = event.same_piece,
                "replaying the task's transcript"
            );
            self.journal.replayed(continuation.replay.messages, event);
        }
        self.journal.record(MessageEvent::plain(user));
        self.journal.delivering(comments.addition_ids);
        Ok(())
    }

    /// Enter `movement`: a movement event (not yet committed) and a fresh count.
    pub fn enter(&mut self, movement: &Movement, from: Option<&str>, reason: Option<&str>) {
        self.place.entered += 1;
        *self.place.visits.entry(movement.name.clone()).or_default() += 1;
        self.place.movement = movement.name.clone();
        self.place.iterations = 0;
        self.place.warned = false;
        tracing::info!(movement = %movement.name, from, "entering a movement");
        self.journal.push(EventBody::Movement(MovementEvent {
            name: movement.name.clone(),
            from: from.map(str::to_owned),
            reason: reason.map(str::to_owned),
            piece: from.is_none().then(|| self.piece.name.clone()),
        }));
    }

    /// The movement the job is in.
    pub fn movement(&self) -> &'a Movement {
        self.piece
            .movement(&self.place.movement)
            .expect("the job is always in a movement of its piece")
    }

    /// The offered tool a call names, if any.
    pub fn spec(&self, call: &ToolCall) -> Option<&ToolSpec> {
        self.tools.specs.iter().find(|t| t.name == call.name())
    }

    /// Where a call of the current reply stands (its item key and movement).
    pub fn site(&self, call: &ToolCall) -> CallSite {
        CallSite::new(&self.place.movement, self.iterations, call)
    }
}
