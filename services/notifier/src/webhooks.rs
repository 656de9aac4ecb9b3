//! Webhook delivery: one attempt per delivered message, signed per Standard Webhooks
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`). A non-2xx answer or a transport
//! error is retried with backoff through `nak`; after the last attempt the delivery is marked
//! `failed`. A delivery already delivered (a redelivered message) is not sent again.

use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use maestro_db::PgPool;
use maestro_db::webhooks::{Attempt, PendingDelivery};
use maestro_domain::webhook::{DeliveryStatus, WebhookSecret};
use maestro_messaging::backoff::backoff;
use maestro_messaging::payloads::WebhookDelivery;
use maestro_messaging::{Delivery, Handler, Outcome};

/// Attempts webhook deliveries.
#[derive(Debug)]
pub struct DeliveryHandler {
    pub pool: PgPool,
    pub http: reqwest::Client,
    pub retry_base: Duration,
    pub retry_max: Duration,
}

impl Handler for DeliveryHandler {
    async fn handle(&self, delivery: &Delivery) -> Outcome {
        let message: WebhookDelivery = match delivery.json() {
            Ok(message) => message,
            Err(e) => return Outcome::Poison(format!("malformed delivery message: {e}")),
        };
        let pending =
            match maestro_db::webhooks::load_delivery(&self.pool, message.delivery_id).await {
                Ok(Some(pending)) => pending,
                Ok(None) => return Outcome::Done,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot load a delivery; will retry");
                    return Outcome::Retry(Duration::from_secs(1));
                }
            };
        if pending.status != DeliveryStatus::Pending {
            return Outcome::Done;
        }
        let attempt = if pending.subscription_active {
            self.send(&pending).await
        } else {
            Attempt::Failed {
                status_code: None,
                error: "subscription deleted".to_owned(),
                give_up: true,
            }
        };
        let (attempt, outcome) = settle(attempt, delivery, self.retry_base, self.retry_max);
        if let Err(e) = maestro_db::webhooks::record_attempt(&self.pool, pending.id, &attempt).await
        {
            tracing::warn!(error = %e, "cannot record a delivery attempt");
        }
        outcome
    }

    async fn dead_letter(&self, delivery: &Delivery, reason: &str) {
        crate::record_dead_letter(&self.pool, "notifier_webhooks", delivery, reason).await;
    }
}

impl DeliveryHandler {
    async fn send(&self, pending: &PendingDelivery) -> Attempt {
        let secret = match WebhookSecret::parse(&pending.secret) {
            Ok(secret) => secret,
            Err(e) => {
                return Attempt::Failed {
                    status_code: None,
                    error: e.to_string(),
                    give_up: true,
                };
            }
        };
        let body = Bytes::from(serde_json::to_vec(&pending.payload).unwrap_or_default());
        let msg_id = format!("msg_{}", pending.notification_id.simple());
        let timestamp = Utc::now().timestamp();
        let signature = secret.sign(&msg_id, timestamp, &body);
        let request = self
            .http
            .post(&pending.url)
            .header("content-type", "application/json")
            .header("user-agent", "maestro-notifier")
            .header("webhook-id", &msg_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body);
        post(request, "webhook", &pending.id).await
    }
}

/// The attempt as it is recorded (a failed last attempt gives up) and what becomes of the
/// message: done, or retried after a backoff.
pub(crate) fn settle(
    attempt: Attempt,
    delivery: &Delivery,
    retry_base: Duration,
    retry_max: Duration,
) -> (Attempt, Outcome) {
    let attempt = match attempt {
        Attempt::Failed {
            status_code, error, ..
        } if delivery.is_last_attempt() => Attempt::Failed {
            status_code,
            error,
            give_up: true,
        },
        other => other,
    };
    let outcome = match attempt {
        Attempt::Delivered { .. } | Attempt::Failed { give_up: true, .. } => Outcome::Done,
        Attempt::Failed { .. } => Outcome::Retry(backoff(
            delivery.attempt as i32,
            retry_base,
            retry_max,
            None,
        )),
    };
    (attempt, outcome)
}

/// Send one request (with the current trace's `traceparent`): a 2xx answer is delivered,
/// anything else a failure to retry.
pub(crate) async fn post(
    request: reqwest::RequestBuilder,
    what: &str,
    id: &(dyn std::fmt::Display + Sync),
) -> Attempt {
    let mut trace = async_nats::HeaderMap::new();
    maestro_messaging::trace::inject(&mut trace);
    let request = match trace.get("traceparent") {
        Some(traceparent) => request.header("traceparent", traceparent.as_str()),
        None => request,
    };
    match request.send().await {
        Ok(response) if response.status().is_success() => {
            let status = response.status().as_u16();
            tracing::info!(delivery_id = %id, status, "{what} delivered");
            Attempt::Delivered {
                status_code: i32::from(status),
            }
        }
        Ok(response) => {
            let status = response.status().as_u16();
            tracing::warn!(delivery_id = %id, status, "{what} refused");
            Attempt::Failed {
                status_code: Some(i32::from(status)),
                error: format!("HTTP {status}"),
                give_up: false,
            }
        }
        Err(e) => {
            tracing::warn!(delivery_id = %id, error = %e, "{what} not delivered");
            Attempt::Failed {
                status_code: None,
                error: e.to_string(),
                give_up: false,
            }
        }
    }
}
