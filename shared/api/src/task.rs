//! Tasks, their events, transcript, subtasks and comments.

use maestro_domain::task::ChildTask;
use maestro_domain::transcript::TranscriptLine;
use maestro_domain::{Comment, Event, JobStatus, TaskId, TaskRecord};
use serde::{Deserialize, Serialize};

/// The body of `POST /api/local/tasks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTask {
    pub instruction: String,
    /// A piece by name, or `auto` for the router; the configured selection when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece: Option<String>,
    /// Start at this movement of the piece instead of its start movement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_movement: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The space it belongs to (you must be an editor or owner there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_id: Option<maestro_domain::SpaceId>,
    /// Who may see it: `private` (default without a space), `space` (default in one),
    /// `public`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<maestro_domain::Visibility>,
    /// The worker profile its jobs go to; else its piece's, its space's, or `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

impl CreateTask {
    pub fn new(instruction: impl Into<String>) -> Self {
        Self {
            instruction: instruction.into(),
            ..Self::default()
        }
    }

    pub fn piece(mut self, piece: &str) -> Self {
        self.piece = Some(piece.to_owned());
        self
    }
}

/// The body of `POST /api/local/tasks/{id}/continue` (SPEC §3.3): carry a finished task on
/// with a new instruction, its transcript replayed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContinueTask {
    pub instruction: String,
    /// The piece to run; the one the latest job ran when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece: Option<String>,
    /// The model to use; the latest job's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl ContinueTask {
    pub fn new(instruction: impl Into<String>) -> Self {
        Self {
            instruction: instruction.into(),
            ..Self::default()
        }
    }

    pub fn piece(mut self, piece: &str) -> Self {
        self.piece = Some(piece.to_owned());
        self
    }
}

/// A task and its latest job, with links to what belongs to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Task {
    #[serde(flatten)]
    pub task: TaskRecord,
    pub links: Links,
}

impl Task {
    pub fn new(task: TaskRecord) -> Self {
        let id = task.id;
        Self {
            task,
            links: Links {
                events: format!("/api/local/tasks/{id}/events"),
                stream: format!("/api/local/tasks/{id}/stream"),
                subtasks: format!("/api/local/tasks/{id}/subtasks"),
                transcript: format!("/api/local/tasks/{id}/transcript"),
                comments: format!("/api/local/tasks/{id}/comments"),
                continue_task: format!("/api/local/tasks/{id}/continue"),
            },
        }
    }

    pub fn id(&self) -> TaskId {
        self.task.id
    }

    /// The latest job's status (`None` when the task has no job).
    pub fn status(&self) -> Option<JobStatus> {
        self.task.status()
    }
}

/// Where a task's events, stream, subtasks, transcript and comments are, and where to
/// continue it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Links {
    pub events: String,
    pub stream: String,
    pub subtasks: String,
    pub transcript: String,
    pub comments: String,
    #[serde(rename = "continue")]
    pub continue_task: String,
}

/// `GET /api/local/tasks`: a page of tasks, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    /// Pass as `before` to get the next (older) page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_before: Option<TaskId>,
}

/// `GET /api/local/tasks/{id}/events`: persisted events with `seq > after`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventPage {
    pub events: Vec<Event>,
    /// Pass as `after` to continue; equals the request's `after` when nothing is new.
    pub next_after: i64,
}

/// `GET /api/local/tasks/{id}/transcript`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Transcript {
    pub task_id: TaskId,
    pub messages: Vec<TranscriptLine>,
}

/// `GET /api/local/tasks/{id}/subtasks`: the tasks this task delegated, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SubtaskList {
    pub subtasks: Vec<ChildTask>,
}

/// `GET /api/local/tasks/{id}/files`: the files the task's jobs wrote (each path once, in the
/// order of the first successful write), each with the URL that serves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileList {
    pub files: Vec<WrittenFile>,
}

/// One file a job wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WrittenFile {
    /// The path in the task's workspace.
    pub path: String,
    /// `/api/local/tasks/{id}/files/{path}`.
    pub url: String,
}

/// The body of `POST /api/local/tasks/{id}/comments`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewComment {
    pub body: String,
}

/// Where a comment went (SPEC §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoutedTo {
    /// Into the running job's conversation.
    Interjection,
    /// Into the instruction of the job that is queued or waits to retry.
    Instruction,
    /// The answer to the job's question; a follow-up job resumes there.
    Answer,
    /// A new job that carries it.
    FollowUp,
}

/// A comment and where it went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RoutedComment {
    #[serde(flatten)]
    pub comment: Comment,
    pub routed_to: RoutedTo,
}

/// `GET /api/local/tasks/{id}/comments`, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CommentList {
    pub comments: Vec<Comment>,
}
