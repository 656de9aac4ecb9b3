//! Webhook delivery: one attempt per delivered message, signed per Standard Webhooks
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`). A non-2xx answer or a transport
//! error is retried with backoff through `nak`; after the last attempt the delivery is marked
//! `failed`. A delivery already delivered (a redelivered message) is not sent again, and one
//! that another copy of its message is sending right now waits for that send's end
//! ([`hold`]).

use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use maestro_db::PgPool;
use maestro_db::webhooks::{Attempt, PendingDelivery, Taken};
use maestro_domain::NotificationId;
use maestro_domain::notification::{NotificationType, notice};
use maestro_domain::webhook::WebhookSecret;
use maestro_messaging::AfterCommit;
use maestro_messaging::backoff::backoff;
use maestro_messaging::payloads::WebhookDelivery;
use maestro_messaging::{Delivery, Handler, Outcome};

/// Attempts webhook deliveries.
#[derive(Debug)]
pub struct DeliveryHandler {
    pub pool: PgPool,
    /// To wake the relay after telling an owner a subscription was disabled.
    pub bus: maestro_messaging::Bus,
    /// Deliveries given up on in a row that disable a subscription.
    pub disable_after: i32,
    pub http: reqwest::Client,
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// How long a delivery is held while it is sent ([`hold`]).
    pub hold: Duration,
}

/// How long a notifier holds a delivery it sends, so that another copy of its message is not
/// sent at the same time: the HTTP timeout `timeout` (which bounds the whole request) and a
/// margin for recording the attempt. A notifier that dies mid-POST holds it no longer.
pub fn hold(timeout: Duration) -> Duration {
    timeout + Duration::from_secs(2)
}

/// A copy that found its delivery held looks again this long after the hold ends.
pub(crate) const HELD_MARGIN: Duration = Duration::from_millis(100);

impl Handler for DeliveryHandler {
    async fn handle(&self, delivery: &Delivery) -> Outcome {
        let message: WebhookDelivery = match delivery.json() {
            Ok(message) => message,
            Err(e) => return Outcome::Poison(format!("malformed delivery message: {e}")),
        };
        let taken = maestro_db::webhooks::take_delivery(&self.pool, message.delivery_id, self.hold);
        let pending = match taken.await {
            Ok(Taken::Sending(pending)) => pending,
            Ok(Taken::Settled) => return Outcome::Done,
            // Another copy of this message is being sent: look again once that is over.
            Ok(Taken::HeldElsewhere(left)) => return Outcome::Retry(left + HELD_MARGIN),
            Err(e) => {
                tracing::warn!(error = %e, "cannot load a delivery; will retry");
                return Outcome::Retry(Duration::from_secs(1));
            }
        };
        let attempt = if pending.subscription_active {
            self.send(&pending).await
        } else {
            Attempt::Failed {
                status_code: None,
                error: "subscription deleted or disabled".to_owned(),
                give_up: true,
                retry_after: None,
            }
        };
        let (attempt, outcome) = settle(attempt, delivery, self.retry_base, self.retry_max);
        let counted = match &attempt {
            Attempt::Delivered { .. } => "delivered",
            Attempt::Failed { give_up: true, .. } => "gave_up",
            Attempt::Failed { .. } => "failed",
        };
        metrics::counter!(maestro_runtime::metrics::WEBHOOK_DELIVERIES, "outcome" => counted)
            .increment(1);
        let recorded = maestro_db::webhooks::record_attempt(
            &self.pool,
            pending.id,
            &attempt,
            self.disable_after,
        )
        .await;
        match recorded {
            Ok(Some(disabled)) => self.disabled(disabled).await,
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot record a delivery attempt"),
        }
        outcome
    }

    async fn dead_letter(&self, delivery: &Delivery, reason: &str) {
        crate::record_dead_letter(&self.pool, "notifier_webhooks", delivery, reason).await;
    }
}

impl DeliveryHandler {
    /// Tell the owner of a subscription its failures disabled it (`webhook.disabled`).
    async fn disabled(&self, sub: maestro_db::webhooks::Disabled) {
        tracing::warn!(webhook_id = %sub.id, url = %sub.url, failures = sub.failures, "webhook subscription disabled");
        let id = NotificationId::new();
        let data = serde_json::json!({
            "webhook_id": sub.id,
            "url": sub.url,
            "consecutive_failures": sub.failures,
            "reason": format!("{} deliveries in a row failed", sub.failures),
        });
        let kind = NotificationType::WebhookDisabled;
        let payload = notice(kind, id, &sub.owner, Utc::now(), data);
        let dedup = format!("webhook.disabled:{}:{}", sub.id, id);
        let recorded =
            maestro_db::webhooks::record_notice(&self.pool, id, &sub.owner, kind, &payload, &dedup)
                .await;
        match recorded {
            Ok(_) => self.bus.after_commit(AfterCommit::events()).await,
            Err(e) => tracing::error!(error = %e, "cannot tell the owner a webhook was disabled"),
        }
    }

    async fn send(&self, pending: &PendingDelivery) -> Attempt {
        let secret = match WebhookSecret::parse(&pending.secret) {
            Ok(secret) => secret,
            Err(e) => {
                return Attempt::Failed {
                    status_code: None,
                    error: e.to_string(),
                    give_up: true,
                    retry_after: None,
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
            status_code,
            error,
            retry_after,
            ..
        } if delivery.is_last_attempt() => Attempt::Failed {
            status_code,
            error,
            give_up: true,
            retry_after,
        },
        other => other,
    };
    let outcome = match attempt {
        Attempt::Delivered { .. } | Attempt::Failed { give_up: true, .. } => Outcome::Done,
        // A receiver's Retry-After is honoured up to the longest backoff.
        Attempt::Failed { retry_after, .. } => Outcome::Retry(backoff(
            delivery.attempt as i32,
            retry_base,
            retry_max,
            retry_after.map(|hint| hint.min(retry_max)),
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
            let retry_after = retry_after(response.headers(), Utc::now());
            tracing::warn!(delivery_id = %id, status, ?retry_after, "{what} refused");
            Attempt::Failed {
                status_code: Some(i32::from(status)),
                error: format!("HTTP {status}"),
                give_up: false,
                retry_after,
            }
        }
        Err(e) => {
            let error = if e.is_timeout() {
                format!("timed out: {e}")
            } else {
                e.to_string()
            };
            tracing::warn!(delivery_id = %id, %error, "{what} not delivered");
            Attempt::Failed {
                status_code: None,
                error,
                give_up: false,
                retry_after: None,
            }
        }
    }
}

/// The wait a `Retry-After` header asks for: delay seconds, or an HTTP date.
pub(crate) fn retry_after(
    headers: &reqwest::header::HeaderMap,
    now: chrono::DateTime<Utc>,
) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&Utc) - now).to_std().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut headers = reqwest::header::HeaderMap::new();
        let now = Utc::now();
        assert_eq!(retry_after(&headers, now), None);
        headers.insert("retry-after", "7".parse().expect("header"));
        assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(7)));
        let at = chrono::DateTime::parse_from_rfc2822("Tue, 01 Dec 2026 10:00:30 GMT")
            .expect("date")
            .with_timezone(&Utc);
        let date = "Tue, 01 Dec 2026 10:00:30 GMT".parse().expect("header");
        headers.insert("retry-after", date);
        let now = at - chrono::TimeDelta::seconds(30);
        assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(30)));
        headers.insert("retry-after", "soon".parse().expect("header"));
        assert_eq!(retry_after(&headers, now), None);
    }
}
