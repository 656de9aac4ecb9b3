//! The JSON shapes the API returns.

use chrono::{DateTime, Utc};
use maestro_db::tasks::{JobView, TaskView};
use maestro_db::webhooks::Subscription;
use maestro_domain::{JobId, JobStatus, TaskId, WaitReason, WebhookId};
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
    pub latest_job: Option<JobJson>,
    pub links: Links,
}

#[derive(Debug, Serialize)]
pub struct Links {
    pub events: String,
    pub stream: String,
}

#[derive(Debug, Serialize)]
pub struct JobJson {
    pub id: JobId,
    pub job_no: i32,
    pub status: JobStatus,
    pub wait_reason: Option<WaitReason>,
    pub attempt: i32,
    pub max_attempts: i32,
    pub next_retry_at: Option<DateTime<Utc>>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<TaskView> for TaskJson {
    fn from(t: TaskView) -> Self {
        let links = Links {
            events: format!("/api/local/tasks/{}/events", t.id),
            stream: format!("/api/local/tasks/{}/stream", t.id),
        };
        Self {
            id: t.id,
            instruction: t.instruction,
            piece: t.piece,
            model: t.model,
            created_at: t.created_at,
            updated_at: t.updated_at,
            latest_job: t.latest_job.map(JobJson::from),
            links,
        }
    }
}

impl From<JobView> for JobJson {
    fn from(j: JobView) -> Self {
        Self {
            id: j.id,
            job_no: j.job_no,
            status: j.status,
            wait_reason: j.wait_reason,
            attempt: j.attempt,
            max_attempts: j.max_attempts,
            next_retry_at: j.next_retry_at,
            result: j.result,
            error: j.error,
            created_at: j.created_at,
            started_at: j.started_at,
            finished_at: j.finished_at,
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
