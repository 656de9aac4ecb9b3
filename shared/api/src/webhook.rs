//! Webhook subscriptions.

use chrono::{DateTime, Utc};
use maestro_domain::webhook::DeliveryStatus;
use maestro_domain::{DeliveryId, NotificationId, WebhookId};
use serde::{Deserialize, Serialize};

/// The body of `POST /api/webhooks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Webhook {
    pub id: WebhookId,
    pub url: String,
    pub event_types: Vec<String>,
    pub created_at: DateTime<Utc>,
    /// Only in the response that created the subscription.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// `active`, or `disabled` after too many failed deliveries in a row.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// Deliveries given up on since the last one delivered.
    #[serde(default)]
    pub consecutive_failures: i32,
}

/// One delivery of a notification to a subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookDeliveryView {
    pub id: DeliveryId,
    pub notification_id: NotificationId,
    /// The notification's type.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<uuid::Uuid>,
    /// `pending` (being attempted), `delivered`, or `failed` (given up on: dead-lettered).
    pub status: DeliveryStatus,
    pub attempts: i32,
    /// Times it was queued again by hand.
    pub redeliveries: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<DateTime<Utc>>,
}

/// `GET /api/webhooks/{id}/deliveries`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeliveryPage {
    pub deliveries: Vec<WebhookDeliveryView>,
    /// Pass as `before` for the next (older) page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_before: Option<DeliveryId>,
}

/// `GET /api/webhooks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookList {
    pub webhooks: Vec<Webhook>,
}
