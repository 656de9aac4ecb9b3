//! A2A push notifications (`docs/a2a.md#push-notifications`). For every job state event of a
//! task that has push configs, what it means to an A2A client (a `statusUpdate`; at the end,
//! the `task` with its status and `result` artifact in one body, so nothing of the end can
//! arrive out of order) is queued as one delivery per config, then POSTed: the body is the `StreamResponse`, with the
//! config's token as `X-A2A-Notification-Token` and its authentication as `Authorization`.
//! Deliveries retry like webhooks; each carries `metadata["maestro/seq"]`, the task stream
//! position, since deliveries may arrive out of order.

use std::time::Duration;

use maestro_a2a::stream::Renderer;
use maestro_a2a::types::{StreamResponse, Task};
use maestro_db::PgPool;
use maestro_db::a2a::PushDelivery;
use maestro_db::webhooks::Taken;
use maestro_domain::{Event, EventKind, StreamId};
use maestro_messaging::payloads::WebhookDelivery;
use maestro_messaging::{Delivery, Handler, Outcome};
use serde_json::{Value, json};

use crate::webhooks::{post, settle};

/// The metadata key of a pushed event's position in the task's stream.
pub const SEQ_KEY: &str = "maestro/seq";

/// Queue the pushes a job state event means, when its task has push configs; the number
/// of deliveries queued (zero for the usual task, after one index probe).
pub async fn record(pool: &PgPool, event: &Event) -> Result<i64, maestro_db::DbError> {
    if event.kind != EventKind::JobState {
        return Ok(0);
    }
    let Some(context) = maestro_db::a2a::push_context(pool, event.task_id).await? else {
        return Ok(0);
    };
    let items = render(event, context);
    if items.is_empty() {
        return Ok(0);
    }
    maestro_db::a2a::record_pushes(pool, event.task_id, event.seq, &items).await
}

/// What a job state event means to a pushed client (JSON, with the stream position).
fn render(event: &Event, context: String) -> Vec<Value> {
    let cursor = StreamId::event(event.seq - 1);
    let mut renderer = Renderer::new(event.task_id.to_string(), context, None, cursor);
    let mut items = renderer.event(event);
    if let Some(StreamResponse::StatusUpdate(last)) = items.last()
        && last.status.state.is_terminal()
    {
        let artifacts = items
            .iter()
            .filter_map(|item| match item {
                StreamResponse::ArtifactUpdate(update) => Some(update.artifact.clone()),
                _ => None,
            })
            .collect();
        items = vec![StreamResponse::Task(Task {
            id: last.task_id.clone(),
            context_id: Some(last.context_id.clone()),
            status: last.status.clone(),
            artifacts,
            history: Vec::new(),
            metadata: None,
        })];
    }
    items
        .into_iter()
        .map(|mut item| {
            let metadata = match &mut item {
                StreamResponse::StatusUpdate(update) => &mut update.metadata,
                StreamResponse::ArtifactUpdate(update) => &mut update.metadata,
                StreamResponse::Task(task) => &mut task.metadata,
                StreamResponse::Message(message) => &mut message.metadata,
            };
            metadata
                .get_or_insert_with(Default::default)
                .insert(SEQ_KEY.to_owned(), json!(event.seq));
            serde_json::to_value(item).unwrap_or(Value::Null)
        })
        .collect()
}

/// Attempts A2A push deliveries.
#[derive(Debug)]
pub struct PushHandler {
    pub pool: PgPool,
    pub http: reqwest::Client,
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// How long a delivery is held while it is sent ([`crate::webhooks::hold`]).
    pub hold: Duration,
}

impl Handler for PushHandler {
    async fn handle(&self, delivery: &Delivery) -> Outcome {
        let message: WebhookDelivery = match delivery.json() {
            Ok(message) => message,
            Err(e) => return Outcome::Poison(format!("malformed push delivery message: {e}")),
        };
        let id = message.delivery_id.0;
        let push = match maestro_db::a2a::take_push(&self.pool, id, self.hold).await {
            Ok(Taken::Sending(push)) => push,
            // Sent, given up on, or its config deleted (and the delivery with it).
            Ok(Taken::Settled) => return Outcome::Done,
            // Another copy of this message is being sent: look again once that is over.
            Ok(Taken::HeldElsewhere(left)) => {
                return Outcome::Retry(left + crate::webhooks::HELD_MARGIN);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot load a push delivery; will retry");
                return Outcome::Retry(Duration::from_secs(1));
            }
        };
        let attempt = post(self.request(&push), "A2A push", &id).await;
        let (attempt, outcome) = settle(attempt, delivery, self.retry_base, self.retry_max);
        if let Err(e) = maestro_db::a2a::record_push_attempt(&self.pool, id, &attempt).await {
            tracing::warn!(error = %e, "cannot record a push attempt");
        }
        outcome
    }

    async fn dead_letter(&self, delivery: &Delivery, reason: &str) {
        crate::record_dead_letter(&self.pool, "notifier_a2a_push", delivery, reason).await;
    }
}

impl PushHandler {
    fn request(&self, push: &PushDelivery) -> reqwest::RequestBuilder {
        let config = &push.config;
        let mut request = self
            .http
            .post(&config.url)
            .header("content-type", "application/json")
            .header("user-agent", "maestro-notifier")
            .body(serde_json::to_vec(&push.payload).unwrap_or_default());
        if let Some(token) = &config.token {
            request = request.header("X-A2A-Notification-Token", token);
        }
        if let (Some(scheme), Some(credentials)) = (&config.auth_scheme, &config.auth_credentials) {
            request = request.header("authorization", format!("{scheme} {credentials}"));
        }
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maestro_domain::{JobId, JobStatus, TaskId};

    fn job_state(status: JobStatus, result: Option<&str>) -> Event {
        let mut payload = json!({"status": status, "attempt": 1});
        if let Some(result) = result {
            payload["result"] = json!(result);
        }
        Event {
            task_id: TaskId::new(),
            seq: 7,
            job_id: JobId::new(),
            job_seq: 3,
            kind: EventKind::JobState,
            payload,
            created_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn a_completion_pushes_the_task_with_its_result_and_position() {
        let items = render(&job_state(JobStatus::Succeeded, Some("done")), "c".into());
        assert_eq!(items.len(), 1, "{items:?}");
        let task = &items[0]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
        assert_eq!(task["contextId"], "c");
        assert_eq!(task["artifacts"][0]["artifactId"], "result");
        assert_eq!(task["artifacts"][0]["parts"][0]["text"], "done");
        assert_eq!(task["metadata"][SEQ_KEY], 7);
    }

    #[test]
    fn a_failure_pushes_the_task_without_artifacts() {
        let items = render(&job_state(JobStatus::Failed, None), "c".into());
        assert_eq!(items.len(), 1, "{items:?}");
        assert_eq!(items[0]["task"]["status"]["state"], "TASK_STATE_FAILED");
        assert!(items[0]["task"].get("artifacts").is_none());
    }

    #[test]
    fn a_running_job_pushes_working() {
        let items = render(&job_state(JobStatus::Running, None), "c".into());
        assert_eq!(items.len(), 1);
        assert_eq!(
            items[0]["statusUpdate"]["status"]["state"],
            "TASK_STATE_WORKING"
        );
    }
}
