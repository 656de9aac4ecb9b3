//! What the gateway answers about webhook subscriptions: the stored subscription without its
//! secret (shown once, when it is created). Tasks, events, comments and required actions are
//! answered as `maestro_api` types built from the domain's.

use maestro_api::Webhook;
use maestro_db::webhooks::Subscription;

/// A subscription as the API shows it; `secret` only in the answer that created it.
pub fn webhook(sub: Subscription, secret: Option<String>) -> Webhook {
    Webhook {
        id: sub.id,
        url: sub.url,
        event_types: sub.event_types,
        created_at: sub.created_at,
        secret,
        status: if sub.disabled_at.is_some() {
            "disabled"
        } else {
            "active"
        }
        .to_owned(),
        disabled_at: sub.disabled_at,
        disabled_reason: sub.disabled_reason,
        consecutive_failures: sub.consecutive_failures,
    }
}
