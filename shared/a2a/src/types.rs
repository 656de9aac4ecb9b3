//! The A2A 1.0 objects as JSON: the proto3 JSON mapping of package `lf.a2a.v1` (`a2a.proto`).
//! Field names are the proto's `json_name`s (camelCase), enums their value names
//! (`TASK_STATE_COMPLETED`, `ROLE_USER`), oneofs one key of several. Fields the proto marks
//! optional or repeated are left out when empty, as protobuf's JSON printer does; the official
//! SDKs parse with protobuf, which refuses unknown fields, so nothing else is ever written.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `google.protobuf.Struct`.
pub type Struct = Map<String, Value>;

/// `lf.a2a.v1.TaskState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaskState {
    #[serde(rename = "TASK_STATE_UNSPECIFIED")]
    Unspecified,
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

impl TaskState {
    pub const ALL: [TaskState; 9] = [
        TaskState::Unspecified,
        TaskState::Submitted,
        TaskState::Working,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Canceled,
        TaskState::InputRequired,
        TaskState::Rejected,
        TaskState::AuthRequired,
    ];

    /// The 1.0 name (`TASK_STATE_COMPLETED`).
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Unspecified => "TASK_STATE_UNSPECIFIED",
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
        }
    }

    /// The 0.3 name (`completed`, `input-required`).
    pub fn v03_name(self) -> &'static str {
        match self {
            TaskState::Unspecified => "unknown",
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Canceled => "canceled",
            TaskState::InputRequired => "input-required",
            TaskState::Rejected => "rejected",
            TaskState::AuthRequired => "auth-required",
        }
    }

    /// A state by its 1.0 or 0.3 name (query strings and 0.3 clients use either).
    pub fn parse(name: &str) -> Option<TaskState> {
        Self::ALL
            .into_iter()
            .find(|s| s.name() == name || s.v03_name() == name)
    }

    /// Nothing more happens to the task in this state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }

    /// The task waits for the client (or is over): a stream of it ends here.
    pub fn is_interrupted(self) -> bool {
        self.is_terminal() || matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }
}

/// `lf.a2a.v1.Role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    #[serde(rename = "ROLE_UNSPECIFIED")]
    Unspecified,
    #[serde(rename = "ROLE_USER", alias = "user")]
    User,
    #[serde(rename = "ROLE_AGENT", alias = "agent")]
    Agent,
}

/// `lf.a2a.v1.Part`: one of `text`, `raw` (base64), `url`, `data` (any JSON), with optional
/// `metadata`, `filename` and `mediaType`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Struct>,
    #[serde(default, skip_serializing_if = "is_blank")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "is_blank")]
    pub media_type: Option<String>,
}

fn is_blank(value: &Option<String>) -> bool {
    value.as_deref().is_none_or(str::is_empty)
}

impl Part {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// A file served at `url`.
    pub fn file(url: String, filename: String, media_type: &str) -> Self {
        Self {
            url: Some(url),
            filename: Some(filename),
            media_type: Some(media_type.to_owned()),
            ..Self::default()
        }
    }

    pub fn data(data: Value) -> Self {
        Self {
            data: Some(data),
            ..Self::default()
        }
    }
}

/// `lf.a2a.v1.Message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub message_id: String,
    #[serde(default, skip_serializing_if = "is_blank")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "is_blank")]
    pub task_id: Option<String>,
    pub role: Role,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Struct>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
}

impl Message {
    /// The concatenated text parts (blank lines between them).
    pub fn text(&self) -> String {
        self.parts
            .iter()
            .filter_map(|p| p.text.as_deref())
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

/// `lf.a2a.v1.TaskStatus`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<DateTime<Utc>>,
}

/// `lf.a2a.v1.Artifact`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "is_blank")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "is_blank")]
    pub description: Option<String>,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Struct>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

/// `lf.a2a.v1.Task`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    #[serde(default, skip_serializing_if = "is_blank")]
    pub context_id: Option<String>,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Struct>,
}

/// `lf.a2a.v1.TaskStatusUpdateEvent`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Struct>,
}

/// `lf.a2a.v1.TaskArtifactUpdateEvent`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub artifact: Artifact,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last_chunk: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Struct>,
}

/// `lf.a2a.v1.StreamResponse` (and, with only its first two members, `SendMessageResponse`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    Task(Task),
    Message(Message),
    StatusUpdate(TaskStatusUpdateEvent),
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// `lf.a2a.v1.SendMessageConfiguration`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    #[serde(default)]
    pub accepted_output_modes: Vec<String>,
    #[serde(default, alias = "pushNotificationConfig")]
    pub task_push_notification_config: Option<TaskPushNotificationConfig>,
    #[serde(default)]
    pub history_length: Option<i32>,
    /// Answer at once with the task as it is, instead of when it is over or interrupted.
    #[serde(default)]
    pub return_immediately: bool,
    /// 0.3's inverse of `returnImmediately`.
    #[serde(default, skip_serializing)]
    pub blocking: Option<bool>,
}

/// `lf.a2a.v1.SendMessageRequest`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    #[serde(default)]
    pub tenant: Option<String>,
    pub message: Message,
    #[serde(default)]
    pub configuration: Option<SendMessageConfiguration>,
    #[serde(default)]
    pub metadata: Option<Struct>,
}

/// `lf.a2a.v1.GetTaskRequest` (and `SubscribeToTaskRequest`, `CancelTaskRequest`: `id`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskIdRequest {
    #[serde(default)]
    pub tenant: Option<String>,
    pub id: String,
    #[serde(default)]
    pub history_length: Option<i32>,
    #[serde(default)]
    pub metadata: Option<Struct>,
}

/// `lf.a2a.v1.ListTasksRequest`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub context_id: Option<String>,
    #[serde(default)]
    pub status: Option<TaskState>,
    #[serde(default)]
    pub page_size: Option<i32>,
    #[serde(default)]
    pub page_token: Option<String>,
    #[serde(default)]
    pub history_length: Option<i32>,
    #[serde(default)]
    pub status_timestamp_after: Option<DateTime<Utc>>,
    #[serde(default)]
    pub include_artifacts: Option<bool>,
}

/// `lf.a2a.v1.ListTasksResponse`: every field is always written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    pub tasks: Vec<Task>,
    pub next_page_token: String,
    pub page_size: i32,
    pub total_size: i32,
}

/// `lf.a2a.v1.AuthenticationInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationInfo {
    pub scheme: String,
    #[serde(default, skip_serializing_if = "is_blank")]
    pub credentials: Option<String>,
}

/// `lf.a2a.v1.TaskPushNotificationConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPushNotificationConfig {
    #[serde(default, skip_serializing_if = "is_blank")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "is_blank")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "is_blank")]
    pub task_id: Option<String>,
    pub url: String,
    #[serde(default, skip_serializing_if = "is_blank")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<AuthenticationInfo>,
}

/// `lf.a2a.v1.Get…`/`DeleteTaskPushNotificationConfigRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushConfigRequest {
    #[serde(default)]
    pub tenant: Option<String>,
    pub task_id: String,
    pub id: String,
}

/// `lf.a2a.v1.ListTaskPushNotificationConfigsRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPushConfigsRequest {
    #[serde(default)]
    pub tenant: Option<String>,
    pub task_id: String,
    #[serde(default)]
    pub page_size: Option<i32>,
    #[serde(default)]
    pub page_token: Option<String>,
}

/// `lf.a2a.v1.ListTaskPushNotificationConfigsResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPushConfigsResponse {
    pub configs: Vec<TaskPushNotificationConfig>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next_page_token: String,
}
