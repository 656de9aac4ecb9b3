//! Payloads that travel on MAESTRO subjects (JSON). Events and notifications are the domain
//! types themselves ([`maestro_domain::Event`], [`maestro_domain::notification::Notification`]).

use serde::{Deserialize, Serialize};

use maestro_domain::{DeliveryId, JobId, StreamId, TaskId};

/// "Run this job": published on `<p>.jobs.dispatch.<profile>` with
/// `Nats-Msg-Id = dispatch:<job_id>:<attempt>`, so re-dispatching the same job state is
/// de-duplicated by JetStream, and a stale duplicate is harmless because the claim is a
/// compare-and-set on the job's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDispatch {
    pub job_id: JobId,
    pub task_id: TaskId,
    /// The job's claim count when it was dispatched.
    pub attempt: i32,
    /// A hint from the writer: the first job of a new task that has its own, empty workspace
    /// (no space, no attachments), so the worker need not read the workspace's context while
    /// it claims the job. The claim decides (`maestro_worker::agent::catalog`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fresh: bool,
    /// A hint from the writer of a new task: what its first job opens with, as created. The
    /// worker sends the job's first LLM request from it while the claim is made, and uses the
    /// answer only when the request it would make after the claim is the same, byte for byte
    /// (`maestro_worker::agent::first_call`). Only ever a shortcut: the claim decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opening: Option<Opening>,
}

/// A new task as it was created, for its first job's first LLM request (see
/// [`JobDispatch::opening`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Opening {
    pub owner: String,
    pub instruction: String,
    pub piece: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_movement: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The task's (and its first job's) creation time.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// A task an A2A client sent: the `messageId` its instruction came as, and its context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a_message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a_context_id: Option<String>,
}

impl Opening {
    /// Instructions longer than this travel without an opening: a dispatch stays small.
    pub const MAX_INSTRUCTION_BYTES: usize = 16 * 1024;

    /// Whether a dispatch can carry an opening with `instruction` (callers skip building one
    /// that would be dropped, and the copy of a long instruction with it).
    pub fn fits(instruction: &str) -> bool {
        instruction.len() <= Self::MAX_INSTRUCTION_BYTES
    }
}

impl JobDispatch {
    /// The dispatch of a job just queued (never claimed).
    pub fn new_job(task_id: TaskId, job_id: JobId) -> Self {
        Self {
            job_id,
            task_id,
            attempt: 0,
            fresh: false,
            opening: None,
        }
    }

    /// The dispatch of a new task's first job; `fresh` when its workspace is its own and
    /// empty ([`JobDispatch::fresh`]).
    pub fn new_task(task_id: TaskId, job_id: JobId, fresh: bool) -> Self {
        Self {
            fresh,
            ..Self::new_job(task_id, job_id)
        }
    }

    /// With what a new task's first job opens with (see [`JobDispatch::opening`]), unless its
    /// instruction is too long to carry.
    pub fn with_opening(mut self, opening: Opening) -> Self {
        if Opening::fits(&opening.instruction) {
            self.opening = Some(opening);
        }
        self
    }

    pub fn message_id(&self) -> String {
        format!("dispatch:{}:{}", self.job_id, self.attempt)
    }
}

/// A live fragment of the assistant message being generated, published on
/// `<p>.deltas.<task_id>.<job_id>`. Never persisted: the merged message event replaces it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// Stream position, `"<after_seq>.<n>"` (see [`StreamId`]).
    pub id: String,
    pub task_id: TaskId,
    pub job_id: JobId,
    #[serde(flatten)]
    pub fragment: DeltaFragment,
}

impl Delta {
    pub fn stream_id(&self) -> Option<StreamId> {
        self.id.parse().ok()
    }
}

/// What a delta adds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DeltaFragment {
    /// More assistant text.
    Text { text: String },
    /// More reasoning ("thinking") text, from models that stream it apart from the answer.
    Reasoning { text: String },
    /// More of a tool call: its id and name when first seen, then argument text.
    ToolCall {
        index: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default)]
        arguments: String,
    },
}

/// A signal about a task, on `<p>.signals.<task_id>.<kind>` (stream `<P>_SIGNALS`), published
/// from the outbox in the transaction's wake: what it says is committed. `signal_id` is its
/// `Nats-Msg-Id` (`comment:<comment id>`, or `event:<task id>:<seq>` of the event behind it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    pub signal_id: String,
    pub kind: maestro_domain::topic::SignalKind,
    pub task_id: TaskId,
    /// The job it is for.
    pub job_id: JobId,
    /// The required action decided (a decision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<uuid::Uuid>,
    /// Who sent it: the comment's author, the decider, or the canceller's reason.
    pub actor: String,
    /// The comment (`{comment_id, kind, body}`), the `decision` event's payload, or the
    /// `cancelled` state change.
    pub detail: serde_json::Value,
    pub at: chrono::DateTime<chrono::Utc>,
    /// The event behind a `decision` or `cancel` signal, as the events API shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<maestro_domain::Event>,
}

/// "Stop this job's running tool calls", on `<p>.tools.cancel` (core NATS, every
/// tool-runner): the job was cancelled, so its tool processes are killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolsCancel {
    pub job_id: JobId,
}

/// "Attempt this webhook delivery": published from the outbox on `<p>.webhooks.deliver`
/// with `Nats-Msg-Id = delivery:<id>` (and, for an A2A push notification delivery, on
/// `<p>.webhooks.a2a` with `Nats-Msg-Id = a2a-push:<id>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookDelivery {
    pub delivery_id: DeliveryId,
}

/// "A worker has joined": published on `<p>.workers.joined` (core NATS) by a starting worker,
/// once it is in the `workers` table and before it takes any job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerJoined {
    pub worker_id: String,
    pub profiles: Vec<String>,
}

impl WorkerJoined {
    /// Whether it is another worker than `worker_id` serving one of `profiles`.
    pub fn is_company_of(&self, worker_id: &str, profiles: &[String]) -> bool {
        self.worker_id != worker_id && self.profiles.iter().any(|p| profiles.contains(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_serialize_flat_with_a_type_tag() {
        let delta = Delta {
            id: "4.2".into(),
            task_id: TaskId::new(),
            job_id: JobId::new(),
            fragment: DeltaFragment::Text { text: "Hel".into() },
        };
        let json = serde_json::to_value(&delta).expect("json");
        assert_eq!(json["type"], "text");
        assert_eq!(json["text"], "Hel");
        assert_eq!(delta.stream_id(), Some(StreamId::delta(4, 2)));
        let back: Delta = serde_json::from_value(json).expect("parse");
        assert_eq!(back, delta);
    }

    #[test]
    fn a_joined_worker_is_company_when_it_serves_one_of_the_profiles() {
        let joined = WorkerJoined {
            worker_id: "b".to_owned(),
            profiles: vec!["default".to_owned(), "gpu".to_owned()],
        };
        let profiles = |ps: &[&str]| ps.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        assert!(joined.is_company_of("a", &profiles(&["gpu"])));
        assert!(!joined.is_company_of("a", &profiles(&["cpu"])));
        assert!(!joined.is_company_of("b", &profiles(&["gpu"])), "itself");
    }
}
