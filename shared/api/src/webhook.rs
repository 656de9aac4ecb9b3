//! Webhook subscriptions.

use chrono::{DateTime, Utc};
use maestro_domain::WebhookId;
use serde::{Deserialize, Serialize};

/// The body of `POST /api/webhooks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    pub url: String,
    /// Notification types to receive; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<String>>,
    /// A `whsec_…` secret; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// A webhook subscription, without its secret except in the response that created it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    pub id: WebhookId,
    pub url: String,
    pub event_types: Vec<String>,
    pub created_at: DateTime<Utc>,
    /// Only in the response that created the subscription.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// `GET /api/webhooks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookList {
    pub webhooks: Vec<Webhook>,
}
