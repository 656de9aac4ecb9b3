//! Events: the ordered, persisted facts about a task's jobs (SPEC §2).
//!
//! Every event has a task-wide `seq` (gap-free, in commit order, across all jobs of the task)
//! and a per-job `job_seq` (gap-free within its job). The same JSON shape is returned by the
//! events API, sent on SSE streams and published on `<prefix>.events.<task_id>.<kind>`.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{JobId, TaskId};
use crate::job::{JobStatus, WaitReason};
use crate::message::{Message, Usage};

/// The kind of an event; also the last token of its NATS subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    JobState,
    Message,
    ToolCall,
    ToolResult,
    Redispatch,
    Movement,
    Rewrite,
    Decision,
    JobContinued,
    Replay,
}

impl EventKind {
    pub const ALL: [EventKind; 10] = [
        EventKind::JobState,
        EventKind::Message,
        EventKind::ToolCall,
        EventKind::ToolResult,
        EventKind::Redispatch,
        EventKind::Movement,
        EventKind::Rewrite,
        EventKind::Decision,
        EventKind::JobContinued,
        EventKind::Replay,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::JobState => "job_state",
            EventKind::Message => "message",
            EventKind::ToolCall => "tool_call",
            EventKind::ToolResult => "tool_result",
            EventKind::Redispatch => "redispatch",
            EventKind::Movement => "movement",
            EventKind::Rewrite => "rewrite",
            EventKind::Decision => "decision",
            EventKind::JobContinued => "job_continued",
            EventKind::Replay => "replay",
        }
    }
}

/// A persisted event as stored, listed and published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Event {
    pub task_id: TaskId,
    pub seq: i64,
    pub job_id: JobId,
    pub job_seq: i32,
    pub kind: EventKind,
    pub payload: Value,
    pub created_at: DateTime<Utc>,
}

impl Event {
    /// The typed body of this event.
    pub fn body(&self) -> Result<EventBody, serde_json::Error> {
        EventBody::from_parts(self.kind, self.payload.clone())
    }

    /// This event as one who did not create its task sees it: an MCP login link logs its
    /// holder in as the task's creator, so a pause's `mcp_auth_required` items lose their
    /// `login_url` (the rest of the item stays: a reader still sees what the job waits for).
    pub fn for_reader(mut self, creator: bool) -> Self {
        if creator || self.kind != EventKind::JobState {
            return self;
        }
        if let Some(Value::Array(items)) = self.payload.get_mut("required_actions") {
            for item in items {
                if let Value::Object(item) = item {
                    item.remove("login_url");
                }
            }
        }
        self
    }

    /// [`Event::for_reader`] without a copy where the reader sees the event as stored (its
    /// creator, or any event without login links to hide).
    pub fn as_seen_by(&self, creator: bool) -> Cow<'_, Event> {
        let hides = |item: &Value| item.get("login_url").is_some();
        let stripped = !creator
            && self.kind == EventKind::JobState
            && matches!(self.payload.get("required_actions"),
                        Some(Value::Array(items)) if items.iter().any(hides));
        if stripped {
            Cow::Owned(self.clone().for_reader(false))
        } else {
            Cow::Borrowed(self)
        }
    }
}

/// The typed content of an event, before it has a sequence number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "payload", rename_all = "snake_case")]
pub enum EventBody {
    JobState(JobStateChange),
    Message(MessageEvent),
    ToolCall(ToolCallEvent),
    ToolResult(ToolResultEvent),
    Redispatch(RedispatchEvent),
    Movement(MovementEvent),
    Rewrite(RewriteEvent),
    Decision(DecisionEvent),
    JobContinued(ContinuedEvent),
    Replay(ReplayEvent),
}

impl EventBody {
    pub fn kind(&self) -> EventKind {
        match self {
            EventBody::JobState(_) => EventKind::JobState,
            EventBody::Message(_) => EventKind::Message,
            EventBody::ToolCall(_) => EventKind::ToolCall,
            EventBody::ToolResult(_) => EventKind::ToolResult,
            EventBody::Redispatch(_) => EventKind::Redispatch,
            EventBody::Movement(_) => EventKind::Movement,
            EventBody::Rewrite(_) => EventKind::Rewrite,
            EventBody::Decision(_) => EventKind::Decision,
            EventBody::JobContinued(_) => EventKind::JobContinued,
            EventBody::Replay(_) => EventKind::Replay,
        }
    }

    /// Whether the event makes a notice (`notice_kind`, migration `0026`): a decision, or a
    /// job that ended or waits for a person.
    pub fn has_notice(&self) -> bool {
        match self {
            EventBody::Decision(_) => true,
            EventBody::JobState(change) => matches!(
                change.status,
                JobStatus::Succeeded
                    | JobStatus::Failed
                    | JobStatus::Cancelled
                    | JobStatus::WaitingHuman
            ),
            _ => false,
        }
    }

    /// Whether writing the event also writes a signal, which only the relay publishes
    /// (`events_to_outbox`): a decision, a cancel. A writer that publishes its events itself
    /// wakes the relay for it; were this to miss a case, the relay's poll would still publish
    /// the row, later.
    pub fn has_signal(&self) -> bool {
        match self {
            EventBody::Decision(_) => true,
            EventBody::JobState(change) => change.status == JobStatus::Cancelled,
            _ => false,
        }
    }

    /// The payload as stored in the `payload` column (made storable: a NUL from a tool's
    /// output or the model becomes U+FFFD, `crate::storable`).
    pub fn payload(&self) -> Value {
        let payload = match self {
            EventBody::JobState(p) => serde_json::to_value(p),
            EventBody::Message(p) => serde_json::to_value(p),
            EventBody::ToolCall(p) => serde_json::to_value(p),
            EventBody::ToolResult(p) => serde_json::to_value(p),
            EventBody::Redispatch(p) => serde_json::to_value(p),
            EventBody::Movement(p) => serde_json::to_value(p),
            EventBody::Rewrite(p) => serde_json::to_value(p),
            EventBody::Decision(p) => serde_json::to_value(p),
            EventBody::JobContinued(p) => serde_json::to_value(p),
            EventBody::Replay(p) => serde_json::to_value(p),
        };
        // Serializing these plain structs cannot fail: every field is JSON-representable.
        let mut payload = payload.unwrap_or(Value::Null);
        crate::storable::json(&mut payload);
        payload
    }

    pub fn from_parts(kind: EventKind, payload: Value) -> Result<Self, serde_json::Error> {
        Ok(match kind {
            EventKind::JobState => EventBody::JobState(serde_json::from_value(payload)?),
            EventKind::Message => EventBody::Message(serde_json::from_value(payload)?),
            EventKind::ToolCall => EventBody::ToolCall(serde_json::from_value(payload)?),
            EventKind::ToolResult => EventBody::ToolResult(serde_json::from_value(payload)?),
            EventKind::Redispatch => EventBody::Redispatch(serde_json::from_value(payload)?),
            EventKind::Movement => EventBody::Movement(serde_json::from_value(payload)?),
            EventKind::Rewrite => EventBody::Rewrite(serde_json::from_value(payload)?),
            EventKind::Decision => EventBody::Decision(serde_json::from_value(payload)?),
            EventKind::JobContinued => EventBody::JobContinued(serde_json::from_value(payload)?),
            EventKind::Replay => EventBody::Replay(serde_json::from_value(payload)?),
        })
    }
}

/// A job changed state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStateChange {
    pub status: JobStatus,
    /// How many times the job has been claimed so far.
    pub attempt: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_reason: Option<WaitReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry_at: Option<DateTime<Utc>>,
    /// Why the state changed, when that is not an error (e.g. a worker shutting down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// On a pause: every item the job waits for (`{id, kind, ...}`, as the required-actions
    /// API shows them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_actions: Vec<Value>,
    /// The job that carries the task on from here (an answered question's follow-up): the
    /// job is over, the task is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub followed_by: Option<JobId>,
    /// A job of a space's task that failed: the branch its changes are kept on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

impl JobStateChange {
    /// `reason` of a job the agent declined (`complete` with status `decline`): it ends
    /// `failed`, by the agent's choice rather than an error.
    pub const DECLINED: &'static str = "declined";
    /// `reason` of a job the agent ended with a direct answer (`complete` with status
    /// `reply`): it ends `succeeded`; the result is the answer.
    pub const REPLIED: &'static str = "replied";

    pub fn new(status: JobStatus, attempt: i32) -> Self {
        Self {
            status,
            attempt,
            wait_reason: None,
            result: None,
            error: None,
            worker_id: None,
            next_retry_at: None,
            reason: None,
            required_actions: Vec::new(),
            followed_by: None,
            branch: None,
        }
    }
}

/// A person answered or decided an item a paused job waits for, or (`kind: subtask`, by the
/// scheduler) a subtask the job waits for is over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionEvent {
    pub action_id: uuid::Uuid,
    pub kind: WaitReason,
    /// `approve`, `deny`, `answer` or `resolve`.
    pub decision: String,
    pub by: String,
    /// `once` or `task` for an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Whether this was the last pending item: the job was queued again.
    pub resumed: bool,
    /// The job's state right after the decision (absent in events written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<crate::JobStatus>,
}

impl DecisionEvent {
    /// The event of `decision` on item `action_id` (of `kind`); `status` is the job's state
    /// right after it.
    pub fn new(
        action_id: crate::ActionId,
        kind: WaitReason,
        decision: &crate::Decision,
        status: JobStatus,
    ) -> Self {
        Self {
            action_id: action_id.0,
            kind,
            decision: decision.verdict.name().to_owned(),
            by: decision.by.clone(),
            scope: decision.verdict.scope().map(|s| s.as_str().to_owned()),
            note: decision.note.clone(),
            resumed: matches!(status, JobStatus::Queued | JobStatus::Succeeded),
            status: Some(status),
        }
    }
}

/// A complete message of the conversation (system, user or assistant). Streaming deltas of an
/// assistant message are merged into this event when it is persisted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageEvent {
    #[serde(flatten)]
    pub message: Message,
    /// The model that produced an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The reasoning text the model streamed before its answer (`reasoning_content`): shown to
    /// people, never sent back to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

impl MessageEvent {
    pub fn plain(message: Message) -> Self {
        Self {
            message,
            model: None,
            usage: None,
            finish_reason: None,
            reasoning: None,
        }
    }
}

/// One tool call of an assistant message, linked to the message event that proposed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallEvent {
    pub call_id: String,
    pub name: String,
    /// The raw arguments text the model produced.
    pub arguments: String,
    /// `seq` of the assistant message event that holds this call.
    pub message_seq: i64,
}

/// The scheduler dispatched a job again because it should have been running and was not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedispatchEvent {
    /// `queued_undelivered`, `retry_due` or `lease_expired`.
    pub reason: String,
    /// The job's claim count at the time.
    pub attempt: i32,
}

/// The job entered a movement of its piece.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovementEvent {
    pub name: String,
    /// The movement it came from (none for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Why: the model's reason for the transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The piece, on a job's first movement event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece: Option<String>,
}

/// The prompt guard rewrote the conversation (deduplicated, compacted or summarized it): from
/// here on the conversation is `messages`, followed by later events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewriteEvent {
    /// What was done: `dedup`, `compact`, `summarize`.
    pub steps: Vec<String>,
    pub messages: Vec<Message>,
}

/// A person continued the task (SPEC §3.3): this job carries on from `from_job_id` with a new
/// instruction, replaying the task's transcript. The first event of the new job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinuedEvent {
    pub from_job_id: JobId,
    /// The handoff comment that carries the instruction.
    pub comment_id: uuid::Uuid,
    /// The piece the job runs, when the request chose one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece: Option<String>,
    /// The model the job uses, when the request chose one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A continuing job opened with the task's earlier transcript replayed (SPEC §5) after its
/// system message. The messages themselves are not copied: they are the replay of the task's
/// jobs before this one, which never change once over; `digest` lets a resumed job check that
/// recomputing them gives the same conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayEvent {
    pub from_job_id: JobId,
    /// Earlier jobs' threads that contributed messages.
    pub threads: usize,
    /// Messages replayed.
    pub messages: usize,
    /// Call ids renamed because they collided across threads.
    pub renamed: usize,
    /// Whether answered `transition` pairs of the last thread were kept (same piece).
    pub same_piece: bool,
    /// `maestro_domain::replay::digest` of the replayed messages.
    pub digest: String,
}

/// The result of a tool call, as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResultEvent {
    pub call_id: String,
    pub name: String,
    pub content: String,
    pub is_error: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_do_not_get_login_links() {
        let mut change = JobStateChange::new(JobStatus::WaitingHuman, 1);
        change.required_actions = vec![serde_json::json!({
            "id": "r1", "kind": "mcp_auth_required", "server": "tracker",
            "login_url": "https://maestro.example.com/api/local/mcp/logins/secret",
        })];
        let body = EventBody::JobState(change);
        let event = Event {
            task_id: TaskId::new(),
            seq: 3,
            job_id: JobId::new(),
            job_seq: 3,
            kind: body.kind(),
            payload: body.payload(),
            created_at: Utc::now(),
        };
        let seen = event.clone().for_reader(false);
        assert_eq!(seen.payload["required_actions"][0]["server"], "tracker");
        assert!(
            seen.payload["required_actions"][0]
                .get("login_url")
                .is_none()
        );
        assert_eq!(event.clone().for_reader(true), event);

        // Seen without a copy by its creator, and by anyone when there is nothing to hide.
        assert_eq!(*event.as_seen_by(false), seen);
        assert!(matches!(event.as_seen_by(true), Cow::Borrowed(e) if *e == event));
        let running = Event {
            payload: EventBody::JobState(JobStateChange::new(JobStatus::Running, 1)).payload(),
            ..event
        };
        assert!(matches!(running.as_seen_by(false), Cow::Borrowed(e) if *e == running));
    }

    #[test]
    fn bodies_split_into_kind_and_payload_and_back() {
        let body = EventBody::ToolResult(ToolResultEvent {
            call_id: "call_1".into(),
            name: "read_file".into(),
            content: "hello".into(),
            is_error: false,
        });
        let (kind, payload) = (body.kind(), body.payload());
        assert_eq!(kind.as_str(), "tool_result");
        assert_eq!(payload["content"], "hello");
        assert_eq!(EventBody::from_parts(kind, payload).expect("parse"), body);
        let kind_json = serde_json::to_value(kind).expect("json");
        assert_eq!(kind_json, "tool_result", "serde name matches as_str");
    }

    #[test]
    fn message_events_flatten_the_message() {
        let body = MessageEvent::plain(Message::user("hi"));
        let json = serde_json::to_value(&body).expect("json");
        assert_eq!(json, serde_json::json!({"role": "user", "content": "hi"}));
        let back: MessageEvent = serde_json::from_value(json).expect("parse");
        assert_eq!(back, body);
    }
}
