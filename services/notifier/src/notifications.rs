//! Job state changes → A2A push notifications (`crate::a2a_push`). A task's notifications
//! themselves (the inbox row, its webhook deliveries and their outbox rows) are written by the
//! statement that changes the task's state (migration `20261201000015`); what is left here is
//! queuing the A2A pushes of a `job_state` event of a task with push configs, which its
//! publisher (the writer or the relay) copies to `<p>.webhooks.a2a_states` for this. A
//! redelivered event queues each push once.

use maestro_db::PgPool;
use maestro_domain::{Event, EventBody};
use maestro_messaging::{Delivery, Handler, Outcome};
use std::time::Duration;

/// Handles `job_state` events.
#[derive(Debug)]
pub struct JobStateHandler {
    pub pool: PgPool,
    /// To wake the outbox relay after queuing (the pushes' outbox rows).
    pub bus: maestro_messaging::Bus,
}

impl Handler for JobStateHandler {
    async fn handle(&self, delivery: &Delivery) -> Outcome {
        let Ok(event) = delivery.json::<Event>() else {
            return Outcome::Poison("malformed event".to_owned());
        };
        match event.body() {
            Ok(EventBody::JobState(_)) => match self.push(delivery, &event).await {
                Ok(()) => Outcome::Done,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot queue A2A pushes; will retry");
                    Outcome::Retry(Duration::from_secs(1))
                }
            },
            Ok(_) => Outcome::Done,
            Err(e) => Outcome::Poison(format!("malformed event payload: {e}")),
        }
    }

    async fn dead_letter(&self, delivery: &Delivery, reason: &str) {
        crate::record_dead_letter(&self.pool, "notifier_a2a_states", delivery, reason).await;
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
}
