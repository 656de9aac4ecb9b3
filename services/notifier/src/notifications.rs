//! Job state changes (events) and decisions (`decision` signals) → notifications (and A2A pushes, `crate::a2a_push`). For every `job_state` event whose status
//! is notification-worthy (succeeded, failed, cancelled, waiting for a human — with the items
//! it waits for) and every `decision` event (`task.decided`) the notifier
//! records a notification, its webhook deliveries and their outbox rows in one statement,
//! then acknowledges the event. A redelivered event changes nothing (one notification per
//! event).

use maestro_db::PgPool;
use maestro_domain::notification::{Notification, NotificationData, NotificationType};
use maestro_domain::{Event, EventBody, JobStatus, NotificationId};
use maestro_messaging::payloads::Signal;
use maestro_messaging::{Delivery, Handler, Outcome};
use std::time::Duration;

/// Handles `job_state` and `decision` events.
#[derive(Debug)]
pub struct JobStateHandler {
    pub pool: PgPool,
    /// To wake the outbox relay after recording (the notification's outbox rows).
    pub bus: maestro_messaging::Bus,
}

impl Handler for JobStateHandler {
    async fn handle(&self, delivery: &Delivery) -> Outcome {
        // Job states come as events; decisions as `decision` signals, with their event.
        let event = match delivery.json::<Signal>() {
            Ok(signal) => signal.event,
            Err(_) => delivery.json::<Event>().ok(),
        };
        let Some(event) = event else {
            return Outcome::Poison("malformed event or signal".to_owned());
        };
        let (kind, change, decision) = match event.body() {
            Ok(EventBody::JobState(change)) => {
                if let Err(e) = self.push(delivery, &event).await {
                    tracing::warn!(error = %e, "cannot queue A2A pushes; will retry");
                    return Outcome::Retry(Duration::from_secs(1));
                }
                let Some(kind) = NotificationType::for_status(change.status) else {
                    return Outcome::Done;
                };
                (kind, change, None)
            }
            Ok(EventBody::Decision(decided)) => {
                // The job's state right after the decision.
                let status = decided
                    .status
                    .unwrap_or(match (decided.kind, decided.resumed) {
                        (maestro_domain::WaitReason::Ask, _) => JobStatus::Succeeded,
                        (_, true) => JobStatus::Queued,
                        (_, false) => JobStatus::WaitingHuman,
                    });
                let change = maestro_domain::JobStateChange::new(status, 0);
                let payload = serde_json::to_value(&decided).ok();
                (NotificationType::TaskDecided, change, payload)
            }
            Ok(_) => return Outcome::Done,
            Err(e) => return Outcome::Poison(format!("malformed event payload: {e}")),
        };
        match self.record(&event, kind, change, decision).await {
            Ok(()) => Outcome::Done,
            Err(e) => {
                tracing::warn!(error = %e, "cannot record a notification; will retry");
                Outcome::Retry(Duration::from_secs(1))
            }
        }
    }

    async fn dead_letter(&self, delivery: &Delivery, reason: &str) {
        crate::record_dead_letter(&self.pool, "notifier_job_states", delivery, reason).await;
    }
}

impl JobStateHandler {
    /// Queue the A2A pushes the event means, when the relay marked it as an event of a task
    /// with push configs (before its notification: a retried event queues each push once).
    async fn push(&self, delivery: &Delivery, event: &Event) -> Result<(), maestro_db::DbError> {
        let marked = delivery
            .message
            .headers
            .as_ref()
            .is_some_and(|h| h.get(maestro_messaging::publish::A2A_PUSH_HEADER).is_some());
        if !marked {
            return Ok(());
        }
        let queued = crate::a2a_push::record(&self.pool, event).await?;
        if queued > 0 {
            self.bus
                .after_commit(maestro_messaging::AfterCommit::events())
                .await;
            tracing::info!(task_id = %event.task_id, seq = event.seq, queued, "A2A pushes queued");
        }
        Ok(())
    }

    async fn record(
        &self,
        event: &Event,
        kind: NotificationType,
        change: maestro_domain::JobStateChange,
        decision: Option<serde_json::Value>,
    ) -> anyhow::Result<()> {
        let notification = Notification {
            kind,
            timestamp: event.created_at,
            data: NotificationData {
                notification_id: NotificationId::new(),
                task_id: event.task_id,
                job_id: event.job_id,
                // Filled in from the task by the statement that records it.
                owner: String::new(),
                status: change.status,
                attempt: change.attempt,
                event_seq: event.seq,
                result: change.result,
                error: change.error,
                wait_reason: change.wait_reason,
                required_actions: change.required_actions,
                decision,
                schedule_id: None,
            },
        };
        let recorded = maestro_db::webhooks::record_notification(&self.pool, &notification).await?;
        if recorded.created {
            let after = maestro_messaging::AfterCommit::events();
            self.bus.after_commit(after).await;
            tracing::info!(
                task_id = %event.task_id,
                kind = kind.as_str(),
                deliveries = recorded.deliveries,
                "notification recorded"
            );
        }
        Ok(())
    }
}
