//! Notifications: what webhook subscribers receive and what is published on
//! `<prefix>.notify.<type>` (see `docs/notifications.md`).

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{JobId, NotificationId, TaskId};
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
}

impl NotificationType {
    pub const ALL: [NotificationType; 5] = [
        NotificationType::TaskSucceeded,
        NotificationType::TaskFailed,
        NotificationType::TaskCancelled,
        NotificationType::TaskWaitingHuman,
        NotificationType::TaskDecided,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotificationType::TaskSucceeded => "task.succeeded",
            NotificationType::TaskFailed => "task.failed",
            NotificationType::TaskCancelled => "task.cancelled",
            NotificationType::TaskWaitingHuman => "task.waiting_human",
            NotificationType::TaskDecided => "task.decided",
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
