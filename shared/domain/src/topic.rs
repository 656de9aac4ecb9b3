//! What an outbox row announces, and so where the relay publishes it. The database stores
//! the topic's parts; `maestro_messaging::Subjects::of_topic` spells the subject.

use crate::event::EventKind;
use crate::ids::TaskId;
use crate::notification::NotificationType;

/// What an outbox row announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// A persisted event of a task.
    Event { task_id: TaskId, kind: EventKind },
    /// A signal about a task: a comment for its job, a decision, a cancel.
    Signal { task_id: TaskId, kind: SignalKind },
    /// A notification of this type.
    Notification(NotificationType),
    /// A webhook delivery to attempt.
    WebhookDelivery,
    /// An A2A push notification delivery to attempt.
    A2aPush,
}

/// An event its writer publishes itself, right after the commit that wrote it (the job
/// path's events; docs/architecture.md#the-outbox). The statement left one outbox row per
/// task for its events, keyed [`Direct::outbox_key`]; the relay publishes the events from
/// `events` only if the writer does not say, by that key, that it published them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Direct {
    pub topic: Topic,
    pub msg_id: String,
    /// The event's JSON as stored: what the relay would publish.
    pub payload: String,
    pub traceparent: Option<String>,
    /// A job state event of a task with A2A push configs.
    pub a2a_push: bool,
    /// On the first event of a statement's range of a task: the `msg_id` of the outbox row
    /// that stands for the range ([`range_key`]), which the writer's notice names once all of
    /// the range is published.
    pub outbox_key: Option<String>,
}

/// The `msg_id` of the outbox row standing for the events of `task_id` a statement wrote from
/// seq `first` on (as the outbox trigger spells it, migration `0022`).
pub fn range_key(task_id: TaskId, first: i64) -> String {
    format!("events:{task_id}:{first}")
}

/// What a signal on `<prefix>.signals.<task_id>.<kind>` says (docs/architecture.md#signals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalKind {
    /// A person's comment reached a job: an interjection into a running job, or an addition
    /// to the instruction of one that is queued.
    Comment,
    /// A person answered or decided an item a paused job waits for (or a subtask it waits
    /// for is over).
    Decision,
    /// A job was cancelled.
    Cancel,
}

impl SignalKind {
    pub const ALL: [SignalKind; 3] = [
        SignalKind::Comment,
        SignalKind::Decision,
        SignalKind::Cancel,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SignalKind::Comment => "comment",
            SignalKind::Decision => "decision",
            SignalKind::Cancel => "cancel",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A stored topic this version cannot read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown outbox topic {topic:?} (task {task_id:?}, kind {kind:?})")]
pub struct UnknownTopic {
    pub topic: String,
    pub task_id: Option<TaskId>,
    pub kind: Option<String>,
}

impl Topic {
    /// The stored name of the topic's variant.
    pub fn name(self) -> &'static str {
        match self {
            Topic::Event { .. } => "event",
            Topic::Signal { .. } => "signal",
            Topic::Notification(_) => "notification",
            Topic::WebhookDelivery => "webhook_delivery",
            Topic::A2aPush => "a2a_push",
        }
    }

    /// The topic stored as `(topic, task_id, kind)`.
    pub fn from_parts(
        topic: &str,
        task_id: Option<TaskId>,
        kind: Option<&str>,
    ) -> Result<Topic, UnknownTopic> {
        let parsed = match (topic, task_id, kind) {
            ("event", Some(task_id), Some(kind)) => {
                EventKind::parse(kind).map(|kind| Topic::Event { task_id, kind })
            }
            ("signal", Some(task_id), Some(kind)) => {
                SignalKind::parse(kind).map(|kind| Topic::Signal { task_id, kind })
            }
            ("notification", _, Some(kind)) => {
                NotificationType::parse(kind).map(Topic::Notification)
            }
            ("webhook_delivery", _, _) => Some(Topic::WebhookDelivery),
            ("a2a_push", _, _) => Some(Topic::A2aPush),
            _ => None,
        };
        parsed.ok_or_else(|| UnknownTopic {
            topic: topic.to_owned(),
            task_id,
            kind: kind.map(str::to_owned),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_are_read_from_their_stored_parts() {
        let task_id = TaskId::new();
        assert_eq!(
            Topic::from_parts("event", Some(task_id), Some("job_state")),
            Ok(Topic::Event {
                task_id,
                kind: EventKind::JobState
            })
        );
        assert_eq!(
            Topic::from_parts("notification", None, Some("task.succeeded")),
            Ok(Topic::Notification(NotificationType::TaskSucceeded))
        );
        assert_eq!(
            Topic::from_parts("webhook_delivery", None, None),
            Ok(Topic::WebhookDelivery)
        );
        assert_eq!(
            Topic::from_parts("a2a_push", None, None),
            Ok(Topic::A2aPush)
        );
        assert!(Topic::from_parts("event", None, Some("job_state")).is_err());
        assert!(Topic::from_parts("events.x.y", None, None).is_err());
        assert_eq!(Topic::WebhookDelivery.name(), "webhook_delivery");
    }
}
