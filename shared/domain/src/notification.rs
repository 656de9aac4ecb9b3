//! Notifications: what webhook subscribers receive and what is published on
//! `<prefix>.notify.<type>` (see `docs/notifications.md`).

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{JobId, NotificationId, ScheduleId, TaskId};
use crate::job::{JobStatus, WaitReason};

/// The type of a notification; webhook subscriptions filter on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NotificationType {
    #[serde(rename = "task.succeeded")]
    TaskSucceeded,
    #[serde(rename = "task.failed")]
    TaskFailed,
    #[serde(rename = "task.cancelled")]
    TaskCancelled,
    #[serde(rename = "task.waiting_human")]
    TaskWaitingHuman,
    /// A person answered or decided an item a paused job waited for.
    #[serde(rename = "task.decided")]
    TaskDecided,
    /// Fire times of a schedule passed while no scheduler ran.
    #[serde(rename = "schedule.missed")]
    ScheduleMissed,
    /// A schedule could not start a run and paused itself.
    #[serde(rename = "schedule.failed")]
    ScheduleFailed,
    /// A webhook subscription kept failing and was disabled.
    #[serde(rename = "webhook.disabled")]
    WebhookDisabled,
}

impl NotificationType {
    pub const ALL: [NotificationType; 8] = [
        NotificationType::TaskSucceeded,
        NotificationType::TaskFailed,
        NotificationType::TaskCancelled,
        NotificationType::TaskWaitingHuman,
        NotificationType::TaskDecided,
        NotificationType::ScheduleMissed,
        NotificationType::ScheduleFailed,
        NotificationType::WebhookDisabled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotificationType::TaskSucceeded => "task.succeeded",
            NotificationType::TaskFailed => "task.failed",
            NotificationType::TaskCancelled => "task.cancelled",
            NotificationType::TaskWaitingHuman => "task.waiting_human",
            NotificationType::TaskDecided => "task.decided",
            NotificationType::ScheduleMissed => "schedule.missed",
            NotificationType::ScheduleFailed => "schedule.failed",
            NotificationType::WebhookDisabled => "webhook.disabled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The notification a job entering `status` produces, if any.
    pub fn for_status(status: JobStatus) -> Option<Self> {
        match status {
            JobStatus::Succeeded => Some(NotificationType::TaskSucceeded),
            JobStatus::Failed => Some(NotificationType::TaskFailed),
            JobStatus::Cancelled => Some(NotificationType::TaskCancelled),
            JobStatus::WaitingHuman => Some(NotificationType::TaskWaitingHuman),
            _ => None,
        }
    }
}

impl fmt::Display for NotificationType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A notification, in the Standard Webhooks payload shape `{type, timestamp, data}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    #[serde(rename = "type")]
    pub kind: NotificationType,
    pub timestamp: DateTime<Utc>,
    pub data: NotificationData,
}

/// What happened to which task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotificationData {
    pub notification_id: NotificationId,
    pub task_id: TaskId,
    pub job_id: JobId,
    pub owner: String,
    pub status: JobStatus,
    pub attempt: i32,
    /// `seq` of the task event that caused this notification.
    pub event_seq: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_reason: Option<WaitReason>,
    /// For `task.waiting_human`: the items the job waits for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_actions: Vec<serde_json::Value>,
    /// For `task.decided`: the decision (as its `decision` event's payload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<serde_json::Value>,
    /// The schedule whose run the task is, if it is one (filled in from the task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<ScheduleId>,
}

/// A notification about something other than a task event (`schedule.*`,
/// `webhook.disabled`), in the same `{type, timestamp, data}` shape: `data` holds
/// `notification_id`, `owner` and what the type tells.
pub fn notice(
    kind: NotificationType,
    id: NotificationId,
    owner: &str,
    timestamp: DateTime<Utc>,
    mut data: serde_json::Value,
) -> serde_json::Value {
    if let Some(fields) = data.as_object_mut() {
        fields.insert("notification_id".to_owned(), serde_json::json!(id));
        fields.insert("owner".to_owned(), serde_json::json!(owner));
    }
    serde_json::json!({"type": kind, "timestamp": timestamp, "data": data})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_round_trip_and_map_from_statuses() {
        for t in NotificationType::ALL {
            assert_eq!(NotificationType::parse(t.as_str()), Some(t));
            assert_eq!(serde_json::to_value(t).expect("json"), t.as_str());
        }
        assert_eq!(
            NotificationType::for_status(JobStatus::Succeeded),
            Some(NotificationType::TaskSucceeded)
        );
        assert_eq!(NotificationType::for_status(JobStatus::Running), None);
    }
}
