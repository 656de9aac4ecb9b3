//! The inbox and the activity feed (docs/notifications.md).

use chrono::{DateTime, Utc};
use maestro_domain::{NotificationId, ScheduleId, TaskId};
use serde::{Deserialize, Serialize};

/// One notification in the inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InboxItem {
    pub id: NotificationId,
    #[serde(rename = "type")]
    pub kind: String,
    pub created_at: DateTime<Utc>,
    pub read: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// Its place in the inbox stream: a `Last-Event-ID` to resume the stream after it.
    pub stream_id: String,
    /// The notification as webhooks and NATS subscribers get it (`{type, timestamp, data}`).
    pub notification: serde_json::Value,
}

/// `GET /api/local/inbox`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InboxPage {
    pub items: Vec<InboxItem>,
    /// Unread items in the whole inbox (whatever the filter).
    pub unread: i64,
    /// Pass as `before` for the next (older) page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_before: Option<NotificationId>,
}

/// The body of `POST /api/local/inbox/read-all` (may be empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MarkAllRead {
    /// Mark only this item and older ones (what the reader has seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to: Option<NotificationId>,
}

/// The answer to marking items read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MarkedRead {
    /// Items that changed from unread to read.
    pub marked: u64,
    /// Unread items left.
    pub unread: i64,
}

/// One task-level event of the owner's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActivityItem {
    pub at: DateTime<Utc>,
    pub task_id: TaskId,
    /// The event's `seq` in its task.
    pub seq: i64,
    /// `created`, `scheduled_run`, `started`, `paused`, `retrying`, `queued`, `decided`,
    /// `continued`, `succeeded`, `failed` or `cancelled`.
    pub what: String,
    pub job_no: i32,
    /// The task's instruction, cut to 200 characters.
    pub instruction: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<ScheduleId>,
    /// The event's payload.
    pub detail: serde_json::Value,
}

/// `GET /api/local/activity`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActivityPage {
    pub items: Vec<ActivityItem>,
    /// Pass as `before` for the next (older) page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_before: Option<String>,
}
