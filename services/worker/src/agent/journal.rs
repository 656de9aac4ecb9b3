//! The conversation and its journal: the messages the model sees, the events not committed
//! yet, and the one commit that makes them durable (with a state change when the job moves
//! on), followed by what the commit announces. Interjections enter here too: as `user`
//! messages appended after everything so far (never earlier), marked delivered by the commit
//! that carries them.
//!
//! A turn's results are sent ([`Journal::send`]) rather than committed when the next step is
//! the LLM request that carries them. By default the commit waits a few milliseconds
//! (`WORKER_RESULTS_COMMIT_WAIT_MS`) for that request's reply: a reply that comes sooner takes
//! the results back into the next commit, which then carries both turns; one that takes longer
//! finds them committed while it streams. With no wait the statement runs at once on a task of
//! its own, and the reply is read only once the commit has answered (`llm.rs`). Either way
//! nothing the model replies is run with an effect, published or committed before the results
//! it saw are committed, in an earlier commit or in the same one
//! (docs/architecture.md#commits-on-the-job-path).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use maestro_db::DbError;
use maestro_db::PgPool;
use maestro_db::claims::Claimed;
use maestro_db::jobs::{self, Fence, Fenced, Publish, Transition};
use maestro_domain::event::ReplayEvent;
use maestro_domain::{CommentKind, EventBody, Message, MessageEvent, ToolCall, ToolResultEvent};
use maestro_messaging::payloads::DeltaFragment;
use maestro_messaging::{AfterCommit, Bus};
use tokio::sync::oneshot;

use super::context::JobError;
use crate::deltas::DeltaPublisher;

/// How often a job looks for interjections without being signalled: a slow safety net for a
/// `comment` signal that did not arrive (docs/architecture.md#signals).
const INTERJECTION_POLL: Duration = Duration::from_secs(5);

/// Precedes an interjection in the conversation.
const INTERJECTION_HEADER: &str = "[The user sent this message while you were working]";

/// Precedes an addition to the instruction that reaches a job after it opened (it was queued
/// again: resumed after a pause or waiting to retry).
const ADDITION_HEADER: &str =
    "[The user added this to the task's instruction while the job waited to go on]";

/// One job's conversation and the events it has not committed yet.
#[derive(Debug)]
pub(super) struct Journal {
    pool: PgPool,
    bus: Bus,
    fence: Fence,
    /// A subtask's end wakes the join: its parent may be waiting for it.
    subtask: bool,
    /// The conversation as the model sees it.
    pub messages: Vec<Message>,
    unsaved: Vec<EventBody>,
    /// Interjections and additions whose user messages are among the unsaved events.
    delivering: Vec<uuid::Uuid>,
    /// Set when an interjection is signalled; checked at least every [`INTERJECTION_POLL`].
    signalled: Arc<AtomicBool>,
    last_interjection_check: Instant,
    deltas: DeltaPublisher,
    /// A commit sent and not answered yet.
    in_flight: Option<InFlight>,
    /// How long sent results may wait to be committed with the next reply (zero: at once).
    commit_wait: Duration,
    /// When the oldest events not yet committed were first sent: they are committed by this
    /// plus `commit_wait` at the latest, however often they are taken back and sent again.
    sent_at: Option<Instant>,
    /// The next `gen_call_<n>` for a call the model gave no id.
    pub next_generated_id: u32,
}

impl Journal {
    pub fn new(
        pool: &PgPool,
        bus: &Bus,
        claim: &Claimed,
        signalled: Arc<AtomicBool>,
        commit_wait: Duration,
    ) -> Self {
        let deltas = DeltaPublisher::new(
            bus.nats.clone(),
            bus.subjects.clone(),
            claim.task_id,
            claim.job_id,
            claim.claim_seq,
        );
        Self {
            pool: pool.clone(),
            bus: bus.clone(),
            fence: Fence {
                job_id: claim.job_id,
                attempt: claim.attempt,
            },
            subtask: claim.parent_task_id.is_some(),
            messages: Vec::new(),
            unsaved: Vec::new(),
            delivering: Vec::new(),
            signalled,
            last_interjection_check: Instant::now(),
            deltas,
            in_flight: None,
            commit_wait,
            sent_at: None,
            next_generated_id: 1,
        }
    }

    /// Add a message to the conversation and to the events to commit next.
    pub fn record(&mut self, event: MessageEvent) {
        self.messages.push(event.message.clone());
        self.unsaved.push(EventBody::Message(event));
    }

    /// Answer `call` in the conversation, with its `tool_result` event.
    pub fn record_result(&mut self, call: &ToolCall, content: String, is_error: bool) {
        self.messages
            .push(Message::tool(call.id.clone(), content.clone()));
        self.unsaved.push(EventBody::ToolResult(ToolResultEvent {
            call_id: call.id.clone(),
            name: call.name().to_owned(),
            content,
            is_error,
        }));
    }

    /// An event that is not a message (a movement, a tool call, a state change, a rewrite).
    pub fn push(&mut self, event: EventBody) {
        self.unsaved.push(event);
    }

    /// Additions folded into the opening user message: marked delivered with it.
    pub fn delivering(&mut self, ids: impl IntoIterator<Item = uuid::Uuid>) {
        self.delivering.extend(ids);
    }

    /// The replay of the task's earlier turns (a Continue's): in the conversation, recorded as
    /// the one `replay` event that stands for them.
    pub fn replayed(&mut self, messages: Vec<Message>, event: ReplayEvent) {
        self.next_generated_id = self
            .next_generated_id
            .max(maestro_domain::transcript::next_generated_id(&messages));
        self.messages.extend(messages);
        self.unsaved.push(EventBody::Replay(event));
    }

    /// Replace the conversation (the prompt guard rewrote it), recording the rewrite.
    pub fn rewrite(&mut self, messages: Vec<Message>, event: EventBody) {
        self.messages = messages;
        self.unsaved.push(event);
    }

    /// Drop what is not committed: a retry or a hand-back rebuilds from the commits.
    pub fn discard_unsaved(&mut self) {
        self.unsaved.clear();
    }

    /// Take back the last `complete` (its `ok` result and the success that followed it): an
    /// interjection came in first, which the model must read before it finishes.
    pub fn withdraw_completion(&mut self) {
        self.unsaved.pop(); // the succeeded state
        self.unsaved.pop(); // complete's "ok"
        self.messages.pop();
        self.signalled.store(true, Ordering::SeqCst);
    }

    /// Give calls the model left without an id one: `gen_call_<n>`, counting per job; and the
    /// same to a call whose id the conversation already holds (a server that numbers ids per
    /// request, or a replayed turn's id), so a result always answers exactly one call.
    pub fn assign_ids(&mut self, mut calls: Vec<ToolCall>) -> Vec<ToolCall> {
        let mut used: HashSet<String> = self
            .messages
            .iter()
            .flat_map(|m| &m.tool_calls)
            .map(|c| c.id.clone())
            .collect();
        for call in &mut calls {
            while call.id.is_empty() || used.contains(&call.id) {
                call.id = format!("gen_call_{}", self.next_generated_id);
                self.next_generated_id += 1;
            }
            used.insert(call.id.clone());
        }
        calls
    }

    /// Publish a live fragment of the message being generated.
    pub async fn delta(&mut self, fragment: DeltaFragment) {
        self.deltas.publish(fragment).await;
    }

    /// Commit the unsaved events (and a state change) in one statement, marking the
    /// interjections they deliver, then announce the commit. When the write is refused the
    /// events stay unsaved. A commit still in flight is answered first.
    pub async fn commit(&mut self, transition: Option<Transition>) -> Result<(), JobError> {
        self.settle().await?;
        if self.unsaved.is_empty() && transition.is_none() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.unsaved);
        let delivering = std::mem::take(&mut self.delivering);
        let written = Some(
            self.writer()
                .write(&events, transition.as_ref(), &delivering)
                .await,
        );
        self.answered(Sent {
            events,
            delivering,
            written,
        })
        .await
    }

    /// Commit the unsaved events (no state change) without waiting: the statement runs, and
    /// its events are published, on a task of its own — at once, or once the commit wait is
    /// over, unless the next [`Self::commit`], [`Self::send`] or [`Self::settle`] takes the
    /// events back first to commit them with its own. Those wait for its answer when its
    /// statement has started; with no commit wait the LLM request that follows takes it with
    /// [`Self::take_in_flight`].
    pub async fn send(&mut self) -> Result<(), JobError> {
        if self.unsaved.is_empty() && self.in_flight.is_some() {
            return Ok(());
        }
        // In order: a commit in flight is answered (or taken back) before the next is sent.
        self.settle().await?;
        if self.unsaved.is_empty() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.unsaved);
        let delivering = std::mem::take(&mut self.delivering);
        let writer = self.writer();
        let wait = (!self.commit_wait.is_zero())
            .then(|| *self.sent_at.get_or_insert_with(Instant::now) + self.commit_wait);
        if wait.is_some() {
            self.deltas.hold();
        }
        let (take_back, taken_back) = oneshot::channel();
        let task = tokio::spawn(async move {
            let outcome = match wait {
                None => "at_once",
                Some(until) => tokio::select! {
                    // Taken back: committed with the next commit instead. (A journal dropped
                    // without taking them back has them committed now.)
                    taken = taken_back => match taken {
                        Ok(()) => {
                            results_commit("taken_back");
                            return Sent { events, delivering, written: None };
                        }
                        Err(_) => "after_wait",
                    },
                    () = tokio::time::sleep_until(until.into()) => "after_wait",
                },
            };
            results_commit(outcome);
            let written = writer.write(&events, None, &delivering).await;
            Sent {
                events,
                delivering,
                written: Some(written),
            }
        });
        self.in_flight = Some(InFlight { task, take_back });
        Ok(())
    }

    /// Answer the commit in flight, if any: its events are taken back into the next commit
    /// when its statement has not started, else its answer is waited for (an error is the
    /// commit's).
    pub async fn settle(&mut self) -> Result<(), JobError> {
        match self.in_flight.take() {
            Some(in_flight) => self.answered(in_flight.take_back().await?).await,
            None => Ok(()),
        }
    }

    /// The commit in flight, for a caller that waits for it alongside something else and then
    /// hands its answer to [`Self::answered`]: only with no commit wait, where the next LLM
    /// reply is read once it has answered. With a wait it stays here, for the next commit to
    /// take back or wait for.
    pub fn take_in_flight(&mut self) -> Option<InFlight> {
        match self.commit_wait.is_zero() {
            true => self.in_flight.take(),
            false => None,
        }
    }

    /// Take in what a commit came to: the job's last seq moves on; or, refused or taken back
    /// before its statement started, its events are unsaved again, before any added since.
    pub async fn answered(&mut self, sent: Sent) -> Result<(), JobError> {
        let Sent {
            mut events,
            mut delivering,
            written,
        } = sent;
        let refused = match written.transpose()? {
            Some(Ok(())) => {
                self.sent_at = None;
                self.deltas.release().await;
                return Ok(());
            }
            Some(Err(fenced)) => Some(fenced),
            None => None,
        };
        self.deltas.drop_held();
        events.append(&mut self.unsaved);
        self.unsaved = events;
        delivering.append(&mut self.delivering);
        self.delivering = delivering;
        refused.map_or(Ok(()), |fenced| Err(fenced.into()))
    }

    fn writer(&self) -> Writer {
        Writer {
            pool: self.pool.clone(),
            bus: self.bus.clone(),
            fence: self.fence,
            subtask: self.subtask,
            committed: self.deltas.committed_seq(),
        }
    }

    /// Deliver the interjections (and additions) waiting for this job as `user` messages,
    /// appended after everything so far. They are marked delivered with the next commit. Looks
    /// when signalled, and at least every [`INTERJECTION_POLL`].
    pub async fn take_interjections(&mut self) -> Result<(), JobError> {
        let signalled = self.signalled.swap(false, Ordering::SeqCst);
        if !signalled && self.last_interjection_check.elapsed() < INTERJECTION_POLL {
            return Ok(());
        }
        self.last_interjection_check = Instant::now();
        // What a commit in flight delivers is not pending once it is answered.
        self.settle().await?;
        for comment in maestro_db::comments::pending(&self.pool, self.fence.job_id).await? {
            if self.delivering.contains(&comment.id) {
                continue;
            }
            let header = match comment.kind {
                CommentKind::Addition => ADDITION_HEADER,
                _ => INTERJECTION_HEADER,
            };
            tracing::info!(comment_id = %comment.id, kind = %comment.kind.as_str(), "delivering a comment");
            self.record(MessageEvent::plain(Message::user(format!(
                "{header}\n{}",
                comment.body
            ))));
            self.delivering.push(comment.id);
        }
        if self.sent_at.is_some() {
            // Results taken back from their commit: sent again, with their deadline kept.
            self.send().await?;
        }
        Ok(())
    }
}

/// A commit sent by [`Journal::send`].
#[derive(Debug)]
pub(super) struct InFlight {
    task: tokio::task::JoinHandle<Sent>,
    /// Takes the events back while the commit waits to start.
    take_back: oneshot::Sender<()>,
}

impl InFlight {
    /// Its answer, for [`Journal::answered`].
    pub async fn answer(self) -> Result<Sent, JobError> {
        answer_of(self.task).await
    }

    /// Its events back while its statement has not started, else its answer.
    async fn take_back(self) -> Result<Sent, JobError> {
        let _ = self.take_back.send(());
        answer_of(self.task).await
    }
}

/// Count how a turn's results sent by [`Journal::send`] went.
fn results_commit(outcome: &'static str) {
    metrics::counter!(maestro_runtime::metrics::RESULTS_COMMITS, "outcome" => outcome).increment(1);
}

async fn answer_of(task: tokio::task::JoinHandle<Sent>) -> Result<Sent, JobError> {
    task.await
        .map_err(|e| JobError::Unavailable(format!("a commit's task failed: {e}")))
}

/// What a commit came to: committed, refused (fenced), or an error; with the events
/// and interjections it carried. `written` is `None` when they were taken back before the
/// statement started.
#[derive(Debug)]
pub(super) struct Sent {
    events: Vec<EventBody>,
    delivering: Vec<uuid::Uuid>,
    written: Option<Result<Result<(), Fenced>, DbError>>,
}

/// What a commit needs of its job, owned so that it can run on a task of its own.
#[derive(Debug, Clone)]
struct Writer {
    pool: PgPool,
    bus: Bus,
    fence: Fence,
    /// A subtask's end wakes the join.
    subtask: bool,
    /// The task-wide seq of the job's last committed event, for its deltas.
    committed: Arc<AtomicI64>,
}

impl Writer {
    /// One statement with the events (and the state change), then what it announces: the
    /// job's own events and their notices go to NATS from here, right after the commit; the
    /// relay publishes only what else the commit wrote (signals, webhook deliveries), and the
    /// rest if this publish does not happen (docs/architecture.md#the-outbox). The deltas
    /// published after the events follow them.
    async fn write(
        &self,
        events: &[EventBody],
        transition: Option<&Transition>,
        delivering: &[uuid::Uuid],
    ) -> Result<Result<(), Fenced>, DbError> {
        let written = jobs::append_publishing(
            &self.pool,
            self.fence,
            events,
            transition,
            delivering,
            Publish::Directly,
        )
        .await?;
        let appended = match written {
            Ok(appended) => appended,
            Err(fenced) => return Ok(Err(fenced)),
        };
        let last_seq = appended.first_seq + events.len() as i64 - 1;
        self.committed.store(last_seq, Ordering::Release);
        let over = transition.is_some_and(|t| t.to.is_terminal());
        announce(&self.bus, appended, self.subtask && over).await;
        Ok(Ok(()))
    }
}

/// What follows a job's append committed with [`Publish::Directly`]: its events and notices
/// published from here, the relay woken only for what else the statement wrote (signals,
/// webhook deliveries), and the subtask join when `joiner` (a subtask's job is over).
pub(super) async fn announce(bus: &Bus, appended: jobs::Appended, joiner: bool) {
    bus.publish_direct(appended.direct).await;
    let mut after = if appended.relayed {
        AfterCommit::events()
    } else {
        AfterCommit::none()
    };
    if joiner {
        after = after.wake_joiner();
    }
    bus.after_commit(after).await;
}
