//! Webhook subscriptions, the notification inbox and webhook deliveries.

use chrono::{DateTime, Utc};
use maestro_domain::notification::NotificationType;
use maestro_domain::webhook::DeliveryStatus;
use maestro_domain::{DeliveryId, NotificationId, Owner, WebhookId};
use sqlx::PgPool;

use crate::DbError;

/// A webhook subscription. Its secret is not part of it: it is shown only once, when it is
/// created (see [`create`]), and opened only to sign a delivery ([`take_delivery`]), so a
/// secret that cannot be opened (sealed under a key no longer listed) does not hide the
/// subscription from its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub id: WebhookId,
    pub url: String,
    pub event_types: Vec<String>,
    pub created_at: DateTime<Utc>,
    /// Set when deliveries kept failing (see `record_attempt`).
    pub disabled_at: Option<DateTime<Utc>>,
    pub disabled_reason: Option<String>,
    /// Deliveries given up on since the last one delivered.
    pub consecutive_failures: i32,
}

/// What a subscription's sealed secret is bound to.
pub fn secret_context(id: WebhookId) -> String {
    format!("webhook_subscriptions.secret/{id}")
}

/// Store a new subscription with its signing secret (sealed).
pub async fn create(
    pool: &PgPool,
    owner: &Owner,
    sub: &Subscription,
    secret: &str,
) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        INSERT INTO webhook_subscriptions (id, owner, url, secret, event_types, created_at)
        VALUES ($1, $2, $3, $4, $5, $6)
        "#,
        sub.id.0,
        owner.as_str(),
        sub.url,
        crate::sealed::seal(secret, &secret_context(sub.id)),
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
        SELECT id, url, event_types, created_at, disabled_at, disabled_reason,
               consecutive_failures
          FROM webhook_subscriptions
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
            event_types: r.event_types,
            created_at: r.created_at,
            disabled_at: r.disabled_at,
            disabled_reason: r.disabled_reason,
            consecutive_failures: r.consecutive_failures,
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

/// A delivery to attempt, with everything needed to send it.
#[derive(Clone, PartialEq)]
pub struct PendingDelivery {
    pub id: DeliveryId,
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
            .field("attempts", &self.attempts)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// What became of an attempt to take a delivery for sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken<T> {
    /// It is pending and held for this sender until the hold runs out or the attempt is
    /// recorded.
    Sending(T),
    /// Another sender holds it for this long yet: look again then (it will usually be
    /// settled by that time).
    HeldElsewhere(std::time::Duration),
    /// It is no longer pending, or no longer exists: nothing to send.
    Settled,
}

/// How long a delivery in `status` whose hold ends in `left` seconds (`None`: not held) is
/// held by another sender, when it is; for [`Taken`] after a take found nothing.
pub(crate) fn held_elsewhere<T>(pending: bool, left: Option<f64>) -> Taken<T> {
    match (pending, left) {
        (false, _) => Taken::Settled,
        (true, Some(seconds)) if seconds > 0.0 => {
            Taken::HeldElsewhere(std::time::Duration::from_secs_f64(seconds))
        }
        // Its hold ended or was released in between: look again at once.
        (true, _) => Taken::HeldElsewhere(std::time::Duration::ZERO),
    }
}

/// Take a pending delivery for sending, holding it for `hold` (see [`Taken`]); a delivery
/// another sender holds is not taken, so two copies of its message are never sent at once.
pub async fn take_delivery(
    pool: &PgPool,
    id: DeliveryId,
    hold: std::time::Duration,
) -> Result<Taken<PendingDelivery>, DbError> {
    let row = sqlx::query!(
        r#"
        WITH d AS (
            UPDATE webhook_deliveries
               SET sending_until = now() + make_interval(secs => $2)
             WHERE id = $1 AND status = 'pending'
               AND (sending_until IS NULL OR sending_until <= now())
         RETURNING id, attempts, subscription_id, notification_id
        )
        SELECT d.id, d.attempts, s.url, s.secret, s.id AS subscription_id,
               s.deleted_at IS NULL AND s.disabled_at IS NULL AS "active!",
               n.id AS notification_id, n.payload
          FROM d
          JOIN webhook_subscriptions s ON s.id = d.subscription_id
          JOIN notifications n ON n.id = d.notification_id
        "#,
        id.0,
        hold.as_secs_f64()
    )
    .fetch_optional(pool)
    .await?;
    if let Some(r) = row {
        let secret =
            match crate::sealed::open(&r.secret, &secret_context(WebhookId(r.subscription_id))) {
                Ok(secret) => secret,
                Err(e) => {
                    // Not sent: the next attempt need not wait for the hold.
                    release_delivery(pool, id).await?;
                    return Err(e);
                }
            };
        return Ok(Taken::Sending(PendingDelivery {
            id: DeliveryId(r.id),
            attempts: r.attempts,
            url: r.url,
            secret,
            subscription_active: r.active,
            notification_id: r.notification_id,
            payload: r.payload,
        }));
    }
    let seen = sqlx::query!(
        r#"
        SELECT status = 'pending' AS "pending!",
               EXTRACT(EPOCH FROM sending_until - now())::float8 AS left
          FROM webhook_deliveries WHERE id = $1
        "#,
        id.0
    )
    .fetch_optional(pool)
    .await?;
    Ok(seen.map_or(Taken::Settled, |r| held_elsewhere(r.pending, r.left)))
}

/// End the hold of a delivery taken and not sent.
async fn release_delivery(pool: &PgPool, id: DeliveryId) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE webhook_deliveries SET sending_until = NULL WHERE id = $1 AND status = 'pending'",
        id.0
    )
    .execute(pool)
    .await?;
    Ok(())
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
        /// How long the receiver asked to wait (`Retry-After`).
        retry_after: Option<std::time::Duration>,
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
                ..
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

/// A subscription an attempt disabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disabled {
    pub id: WebhookId,
    pub owner: String,
    pub url: String,
    pub failures: i32,
}

/// Record an attempt (only a pending delivery changes). A delivery given up on counts
/// against its subscription, one delivered resets the count; the subscription is disabled
/// when `disable_after` deliveries in a row were given up on, and then returned.
pub async fn record_attempt(
    pool: &PgPool,
    id: DeliveryId,
    attempt: &Attempt,
    disable_after: i32,
) -> Result<Option<Disabled>, DbError> {
    let (status, code, error) = attempt.columns();
    let row = sqlx::query!(
        r#"
        WITH d AS (
            UPDATE webhook_deliveries
               SET status = $2, attempts = attempts + 1, last_status_code = $3,
                   last_error = $4, updated_at = now(), sending_until = NULL,
                   delivered_at = CASE WHEN $2 = 'delivered' THEN now() END
             WHERE id = $1 AND status = 'pending'
         RETURNING subscription_id, status
        )
        UPDATE webhook_subscriptions s
           SET consecutive_failures = CASE WHEN d.status = 'delivered' THEN 0
                                           ELSE s.consecutive_failures + 1 END,
               disabled_at = CASE WHEN d.status = 'failed' AND s.disabled_at IS NULL
                                       AND s.deleted_at IS NULL
                                       AND s.consecutive_failures + 1 >= $5
                                  THEN now() ELSE s.disabled_at END,
               disabled_reason = CASE WHEN d.status = 'failed' AND s.disabled_at IS NULL
                                           AND s.deleted_at IS NULL
                                           AND s.consecutive_failures + 1 >= $5
                                      THEN format('%s deliveries in a row failed; the last: %s',
                                                  s.consecutive_failures + 1, $4)
                                      ELSE s.disabled_reason END
          FROM d
         WHERE s.id = d.subscription_id AND d.status IN ('delivered', 'failed')
     RETURNING s.id, s.owner, s.url, s.consecutive_failures,
               s.disabled_at IS NOT NULL AND s.disabled_at = now() AS "disabled_now!"
        "#,
        id.0,
        status.as_str(),
        code,
        error,
        disable_after,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.filter(|r| r.disabled_now).map(|r| Disabled {
        id: WebhookId(r.id),
        owner: r.owner,
        url: r.url,
        failures: r.consecutive_failures,
    }))
}

/// Record a notification that is not about a task event (`webhook.disabled`,
/// `schedule.*`): inbox row, deliveries, outbox rows; once per `dedup`. `false` if it was
/// already recorded.
pub async fn record_notice(
    pool: &PgPool,
    id: NotificationId,
    owner: &str,
    kind: NotificationType,
    payload: &serde_json::Value,
    dedup: &str,
) -> Result<bool, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT record_notice($1, $2, $3, $4, $5) AS "created!""#,
        id.0,
        owner,
        kind.as_str(),
        payload,
        dedup
    )
    .fetch_one(pool)
    .await?)
}

/// Enable a disabled subscription again (its failure count starts over); `false` if the
/// owner has no such subscription.
pub async fn enable(pool: &PgPool, owner: &Owner, id: WebhookId) -> Result<bool, DbError> {
    let done = sqlx::query!(
        r#"
        UPDATE webhook_subscriptions
           SET disabled_at = NULL, disabled_reason = NULL, consecutive_failures = 0
         WHERE id = $1 AND owner = $2 AND deleted_at IS NULL
        "#,
        id.0,
        owner.as_str()
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// One delivery of a subscription, as its owner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRecord {
    pub id: DeliveryId,
    pub notification_id: NotificationId,
    pub kind: String,
    pub task_id: Option<uuid::Uuid>,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub redeliveries: i32,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// A page of a subscription's deliveries, newest first, strictly older than `before`;
/// `None` if the owner has no such subscription.
pub async fn deliveries(
    pool: &PgPool,
    owner: &Owner,
    id: WebhookId,
    status: Option<DeliveryStatus>,
    before: Option<DeliveryId>,
    limit: i64,
) -> Result<Option<Vec<DeliveryRecord>>, DbError> {
    let owned = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM webhook_subscriptions WHERE id = $1 AND owner = $2) AS "owned!""#,
        id.0,
        owner.as_str()
    )
    .fetch_one(pool)
    .await?;
    if !owned {
        return Ok(None);
    }
    let rows = sqlx::query!(
        r#"
        SELECT d.id, d.notification_id, n.kind, n.task_id, d.status, d.attempts, d.redeliveries,
               d.last_status_code, d.last_error, d.created_at, d.updated_at, d.delivered_at
          FROM webhook_deliveries d JOIN notifications n ON n.id = d.notification_id
         WHERE d.subscription_id = $1
           AND ($2::text IS NULL OR d.status = $2)
           AND ($3::uuid IS NULL OR d.id < $3)
         ORDER BY d.id DESC
         LIMIT $4
        "#,
        id.0,
        status.map(DeliveryStatus::as_str),
        before.map(|d| d.0),
        limit
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(DeliveryRecord {
                id: DeliveryId(r.id),
                notification_id: NotificationId(r.notification_id),
                kind: r.kind,
                task_id: r.task_id,
                status: DeliveryStatus::parse(&r.status).ok_or_else(|| {
                    DbError::corrupt(format!("unknown delivery status {:?}", r.status))
                })?,
                attempts: r.attempts,
                redeliveries: r.redeliveries,
                last_status_code: r.last_status_code,
                last_error: r.last_error,
                created_at: r.created_at,
                updated_at: r.updated_at,
                delivered_at: r.delivered_at,
            })
        })
        .collect::<Result<Vec<_>, DbError>>()
        .map(Some)
}

/// Queue a delivery of the owner's subscription again, whatever became of it (a new message
/// with a fresh attempt budget); `None` if there is no such delivery, `Some(false)` if it is
/// still pending (it is being attempted).
pub async fn redeliver(
    pool: &PgPool,
    owner: &Owner,
    webhook: WebhookId,
    id: DeliveryId,
) -> Result<Option<bool>, DbError> {
    let row = sqlx::query!(
        r#"
        WITH target AS (
            SELECT d.id, d.status, d.redeliveries FROM webhook_deliveries d
              JOIN webhook_subscriptions s ON s.id = d.subscription_id
             WHERE d.id = $1 AND s.id = $2 AND s.owner = $3
               FOR UPDATE OF d
        ), again AS (
            UPDATE webhook_deliveries d
               SET status = 'pending', redeliveries = d.redeliveries + 1, updated_at = now(),
                   sending_until = NULL
              FROM target WHERE d.id = target.id AND target.status <> 'pending'
         RETURNING d.id, d.redeliveries
        ), o AS (
            INSERT INTO outbox (topic, kind, msg_id, payload)
            SELECT 'webhook_delivery', NULL, 'delivery:' || id || ':' || redeliveries,
                   jsonb_build_object('delivery_id', id)
              FROM again
        )
        SELECT (SELECT count(*) FROM target) AS "found!", (SELECT count(*) FROM again) AS "queued!"
        "#,
        id.0,
        webhook.0,
        owner.as_str()
    )
    .fetch_one(pool)
    .await?;
    Ok((row.found > 0).then_some(row.queued > 0))
}
