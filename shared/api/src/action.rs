//! What paused jobs wait for, and the decisions that answer them.

use chrono::{DateTime, Utc};
use maestro_domain::{Action, ActionId, ActionStatus, Decision, JobId, TaskId, WaitReason};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// An item a job waits for (or waited for), as the API shows it: what it is about (its
/// detail) flat beside its state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RequiredAction {
    pub id: ActionId,
    pub task_id: TaskId,
    pub job_id: JobId,
    pub kind: WaitReason,
    pub status: ActionStatus,
    pub movement: String,
    /// `seq` of the event that proposed it (the assistant message with the call).
    pub source_seq: Option<i64>,
    /// Kind-specific: `{tool, arguments, arguments_hash, reason}`, `{question}`,
    /// `{package: {name, manager, version}, reason, arguments_hash}`, `{server}`,
    /// `{operation_id, tool, arguments}` or `{subtask_id, instruction, piece}`.
    #[serde(flatten)]
    pub detail: Map<String, Value>,
    pub decision: Option<Decision>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

impl From<Action> for RequiredAction {
    fn from(a: Action) -> Self {
        let detail = match a.detail.to_value() {
            Value::Object(detail) => detail,
            _ => Map::new(),
        };
        Self {
            id: a.id,
            task_id: a.task_id,
            job_id: a.job_id,
            kind: a.kind(),
            status: a.status,
            movement: a.movement,
            source_seq: a.source_seq,
            detail,
            decision: a.decision,
            created_at: a.created_at,
            decided_at: a.decided_at,
        }
    }
}

impl RequiredAction {
    /// A text field of the detail (`tool`, `question`, `arguments_hash`, ...).
    pub fn text(&self, key: &str) -> Option<&str> {
        self.detail.get(key).and_then(Value::as_str)
    }
}

/// `GET /api/local/tasks/{id}/required-actions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActionList {
    pub required_actions: Vec<RequiredAction>,
}

/// The body of a `.../decide` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    /// `approve` / `deny` (tool and package requests); `happened` / `not_happened`
    /// (`side_effect_unknown`).
    pub decision: String,
    /// For an approved tool request: `once` (this call, the default) or `task` (the tool for
    /// the rest of the task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Shown to the model with a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The `arguments_hash` the reviewer saw; a mismatch is a 409 and decides nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_hash: Option<String>,
}

impl DecideRequest {
    pub fn new(decision: &str) -> Self {
        Self {
            decision: decision.to_owned(),
            ..Self::default()
        }
    }
}

/// The answer to a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DecideReply {
    pub required_action: RequiredAction,
    /// The job was waiting for this item only and is queued again.
    pub resumed: bool,
}

/// The body of `PUT /api/local/mcp-servers/{server}/token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    pub token: String,
}

/// The answer to a stored token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenReply {
    pub server: String,
    /// Jobs that waited for this token and are queued again.
    pub resumed_jobs: usize,
}
