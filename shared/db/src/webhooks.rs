//! Webhook subscriptions, the notification inbox and webhook deliveries.

use chrono::{DateTime, Utc};
use maestro_domain::notification::Notification;
use maestro_domain::webhook::DeliveryStatus;
use maestro_domain::{DeliveryId, Owner, WebhookId};
use sqlx::PgPool;

use crate::DbError;

/// A webhook subscription. The secret is only ever shown once, when it is created.
#[derive(Clone, PartialEq, Eq)]
pub struct Subscription {
    pub id: WebhookId,
    pub url: String,
    pub secret: String,
    pub event_types: Vec<String>,
    pub created_at: DateTime<Utc>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("event_types", &self.event_types)
            .finish()
    }
}

/// Store a new subscription.
pub async fn create(pool: &PgPool, owner: &Owner, sub: &Subscription) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        INSERT INTO webhook_subscriptions (id, owner, url, secret, event_types, created_at)
        VALUES ($1, $2, $3, $4, $5, $6)
        "#,
        sub.id.0,
        owner.as_str(),
        sub.url,
        sub.secret,
        &sub.event_types,
        sub.created_at
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The owner's active subscriptions, oldest first.
pub async fn list(pool: &PgPool, owner: &Owner) -> Result<Vec<Subscription>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT id, url, secret, event_types, created_at FROM webhook_subscriptions
         WHERE owner = $1 AND deleted_at IS NULL ORDER BY id
        "#,
        owner.as_str()
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Subscription {
            id: WebhookId(r.id),
            url: r.url,
            secret: r.secret,
            event_types: r.event_types,
            created_at: r.created_at,
        })
        .collect())
}

/// Deactivate a subscription; `false` if the owner has no such active subscription.
pub async fn delete(pool: &PgPool, owner: &Owner, id: WebhookId) -> Result<bool, DbError> {
    let done = sqlx::query!(
        r#"
        UPDATE webhook_subscriptions SET deleted_at = now()
         WHERE id = $1 AND owner = $2 AND deleted_at IS NULL
        "#,
        id.0,
        owner.as_str()
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// What recording a notification did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// False when this event's notification already existed (a redelivered event).
    pub created: bool,
    /// Webhook deliveries queued.
    pub deliveries: i64,
}

/// Record a notification in the owner's inbox and, in the same statement, one pending
/// delivery per matching subscription plus the outbox rows that publish the notification on
/// its type's subject and each delivery on the deliveries subject (topics `notification` and
/// `webhook_delivery`). Recording the same event twice
/// changes nothing. The owner is the task's, read by the same statement (`data.owner` of
/// the notification is filled in from it); a task that no longer exists gets nothing.
pub async fn record_notification(
    pool: &PgPool,
    notification: &Notification,
) -> Result<Recorded, DbError> {
    let data = &notification.data;
    let payload =
        serde_json::to_value(notification).map_err(|e| DbError::Corrupt(e.to_string()))?;
    let row = sqlx::query!(
        r#"
        WITH t AS (
            SELECT owner FROM tasks WHERE id = $3
        ), n AS (
            INSERT INTO notifications (id, owner, kind, task_id, job_id, event_seq, payload)
            SELECT $1, t.owner, $2, $3, $4, $5, jsonb_set($6, '{data,owner}', to_jsonb(t.owner))
              FROM t
            ON CONFLICT (task_id, event_seq) DO NOTHING
            RETURNING id, owner, payload
        ), d AS (
            INSERT INTO webhook_deliveries (id, subscription_id, notification_id, status)
            SELECT gen_random_uuid(), s.id, n.id, 'pending'
              FROM n JOIN webhook_subscriptions s
                ON s.owner = n.owner AND s.deleted_at IS NULL AND $2 = ANY (s.event_types)
            RETURNING id
        ), o AS (
            INSERT INTO outbox (topic, kind, msg_id, payload)
            SELECT 'webhook_delivery', NULL, 'delivery:' || d.id,
                   jsonb_build_object('delivery_id', d.id)
              FROM d
            UNION ALL
            SELECT 'notification', $2, 'notification:' || n.id, n.payload FROM n
        )
        SELECT (SELECT count(*) FROM n) AS "created!", (SELECT count(*) FROM d) AS "deliveries!"
        "#,
        data.notification_id.0,
        notification.kind.as_str(),
        data.task_id.0,
        data.job_id.0,
        data.event_seq,
        payload,
    )
    .fetch_one(pool)
    .await?;
    Ok(Recorded {
        created: row.created > 0,
        deliveries: row.deliveries,
    })
}

/// A delivery to attempt, with everything needed to send it.
#[derive(Clone, PartialEq)]
pub struct PendingDelivery {
    pub id: DeliveryId,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub url: String,
    pub secret: String,
    pub subscription_active: bool,
    pub notification_id: uuid::Uuid,
    pub payload: serde_json::Value,
}

impl std::fmt::Debug for PendingDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingDelivery")
            .field("id", &self.id)
            .field("status", &self.status)
            .field("attempts", &self.attempts)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

pub async fn load_delivery(
    pool: &PgPool,
    id: DeliveryId,
) -> Result<Option<PendingDelivery>, DbError> {
    let row = sqlx::query!(
        r#"
        SELECT d.id, d.status, d.attempts, s.url, s.secret, s.deleted_at IS NULL AS "active!",
               n.id AS notification_id, n.payload
          FROM webhook_deliveries d
          JOIN webhook_subscriptions s ON s.id = d.subscription_id
          JOIN notifications n ON n.id = d.notification_id
         WHERE d.id = $1
        "#,
        id.0
    )
    .fetch_optional(pool)
    .await?;
    row.map(|r| {
        Ok(PendingDelivery {
            id: DeliveryId(r.id),
            status: DeliveryStatus::parse(&r.status).ok_or_else(|| {
                DbError::corrupt(format!("unknown delivery status {:?}", r.status))
            })?,
            attempts: r.attempts,
            url: r.url,
            secret: r.secret,
            subscription_active: r.active,
            notification_id: r.notification_id,
            payload: r.payload,
        })
    })
    .transpose()
}

/// The outcome of one delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    Delivered {
        status_code: i32,
    },
    Failed {
        status_code: Option<i32>,
        error: String,
        give_up: bool,
    },
}

impl Attempt {
    /// The delivery's status after the attempt, the answer's status code and the error.
    pub fn columns(&self) -> (DeliveryStatus, Option<i32>, Option<&str>) {
        match self {
            Attempt::Delivered { status_code } => {
                (DeliveryStatus::Delivered, Some(*status_code), None)
            }
            Attempt::Failed {
                status_code,
                error,
                give_up,
            } => (
                if *give_up {
                    DeliveryStatus::Failed
                } else {
                    DeliveryStatus::Pending
                },
                *status_code,
                Some(error.as_str()),
            ),
        }
    }
}

/// Record an attempt; only a pending delivery changes.
pub async fn record_attempt(
    pool: &PgPool,
    id: DeliveryId,
    attempt: &Attempt,
) -> Result<(), DbError> {
    let (status, code, error) = attempt.columns();
    sqlx::query!(
        r#"
        UPDATE webhook_deliveries
           SET status = $2, attempts = attempts + 1, last_status_code = $3,
               last_error = $4,
               delivered_at = CASE WHEN $2 = 'delivered' THEN now() END
         WHERE id = $1 AND status = 'pending'
        "#,
        id.0,
        status.as_str(),
        code,
        error
    )
    .execute(pool)
    .await?;
    Ok(())
}
