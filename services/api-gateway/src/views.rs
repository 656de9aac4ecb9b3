//! The JSON shapes the API returns.

use chrono::{DateTime, Utc};
use maestro_db::tasks::{JobView, TaskView};
use maestro_db::webhooks::Subscription;
use maestro_domain::{TaskId, WebhookId};
use serde::Serialize;

/// A task and its latest job.
#[derive(Debug, Serialize)]
pub struct TaskJson {
    pub id: TaskId,
    pub instruction: String,
    pub piece: String,
    pub model: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub latest_job: Option<JobView>,
    /// Set on a subtask: the task that delegated it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<TaskId>,
    /// 0 for a task nobody delegated; a subtask is one deeper than its parent.
    pub depth: i32,
    pub links: Links,
}

#[derive(Debug, Serialize)]
pub struct Links {
    pub events: String,
    pub stream: String,
    pub subtasks: String,
}

impl From<TaskView> for TaskJson {
    fn from(t: TaskView) -> Self {
        let links = Links {
            events: format!("/api/local/tasks/{}/events", t.id),
            stream: format!("/api/local/tasks/{}/stream", t.id),
            subtasks: format!("/api/local/tasks/{}/subtasks", t.id),
        };
        Self {
            id: t.id,
            instruction: t.instruction,
            piece: t.piece,
            model: t.model,
            created_at: t.created_at,
            updated_at: t.updated_at,
            latest_job: t.latest_job,
            parent_task_id: t.parent_task_id,
            depth: t.depth,
            links,
        }
    }
}

/// A webhook subscription, without its secret.
#[derive(Debug, Serialize)]
pub struct WebhookJson {
    pub id: WebhookId,
    pub url: String,
    pub event_types: Vec<String>,
    pub created_at: DateTime<Utc>,
    /// Only in the response that created the subscription.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl WebhookJson {
    pub fn new(sub: Subscription, with_secret: bool) -> Self {
        Self {
            id: sub.id,
            url: sub.url,
            event_types: sub.event_types,
            created_at: sub.created_at,
            secret: with_secret.then_some(sub.secret),
        }
    }
}
