//! Tasks as they stand: a task with its latest job, the subtasks it delegated, and its
//! comments (the instruction, interjections, answers, follow-ups and handoffs).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ids::{JobId, TaskId};
use crate::job::{JobRecord, JobStatus};

/// A task and its latest job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskRecord {
    pub id: TaskId,
    /// Who created it.
    pub owner: String,
    /// The space it belongs to (`None`: its own ephemeral workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_id: Option<crate::SpaceId>,
    #[serde(default)]
    pub visibility: crate::Visibility,
    /// The worker profile its jobs are dispatched to.
    pub profile: String,
    pub instruction: String,
    pub piece: String,
    pub model: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub latest_job: Option<JobRecord>,
    /// Set on a subtask: the task that delegated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<TaskId>,
    /// 0 for a task nobody delegated; a subtask is one deeper than its parent.
    pub depth: i32,
    /// The A2A context it belongs to, when an A2A client named or was given one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The schedule whose run it is (docs/schedules.md), and the fire time it ran for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<crate::ScheduleId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_for: Option<DateTime<Utc>>,
    /// Files attached when it was created (`GET …/attachments/{name}` serves each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

impl TaskRecord {
    /// The latest job's status (`None` when the task has no job).
    pub fn status(&self) -> Option<JobStatus> {
        self.latest_job.as_ref().map(|j| j.status)
    }
}

/// A file a person attached to a task, placed in its workspace at `attachments/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Attachment {
    pub name: String,
    pub content_type: String,
    pub size: i64,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
}

/// A subtask as its parent shows it, with its latest job's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChildTask {
    pub id: TaskId,
    /// The parent's job that delegated it.
    pub parent_job_id: Option<JobId>,
    pub instruction: String,
    pub piece: String,
    pub depth: i32,
    pub status: JobStatus,
    pub result: Option<String>,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// What a comment is to its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommentKind {
    /// The task's instruction, or a follow-up that started a job.
    Instruction,
    /// Delivered into a running job's conversation.
    Interjection,
    /// The answer to a job's question.
    Answer,
    /// The instruction a Continue carries on with.
    Handoff,
    /// Posted while the job was queued or waiting to retry: it joins the job's instruction
    /// (folded into its opening when it opens fresh, else delivered at its next step).
    Addition,
}

impl CommentKind {
    pub const ALL: [CommentKind; 5] = [
        CommentKind::Instruction,
        CommentKind::Interjection,
        CommentKind::Answer,
        CommentKind::Handoff,
        CommentKind::Addition,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CommentKind::Instruction => "instruction",
            CommentKind::Interjection => "interjection",
            CommentKind::Answer => "answer",
            CommentKind::Handoff => "handoff",
            CommentKind::Addition => "addition",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A comment on a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Comment {
    pub id: Uuid,
    pub task_id: TaskId,
    pub job_id: Option<JobId>,
    pub author: String,
    pub kind: CommentKind,
    pub body: String,
    pub created_at: DateTime<Utc>,
    /// For an interjection or an addition: when it entered the job's conversation.
    pub delivered_at: Option<DateTime<Utc>>,
    /// The A2A `messageId` it came as, if it came over A2A (unique per task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}
