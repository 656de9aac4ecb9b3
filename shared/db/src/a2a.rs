//! What only the A2A binding reads and writes: pages of an owner's tasks by their last change
//! (`ListTasks`), per-task push notification configs and their deliveries.

use chrono::{DateTime, Utc};
use maestro_domain::{JobStatus, Owner, TaskId, WaitReason};
use sqlx::PgPool;
use uuid::Uuid;

use crate::DbError;
use crate::webhooks::Taken;

/// Which tasks a `ListTasks` page holds.
#[derive(Debug, Clone, Default)]
pub struct TaskQuery<'a> {
    pub context_id: Option<&'a str>,
    /// The latest job's status is one of these (`None`: any).
    pub statuses: Option<Vec<JobStatus>>,
    /// …and, when it waits for a person, for one of these (`None`: any).
    pub waiting_for: Option<Vec<WaitReason>>,
    /// Changed after this time.
    pub changed_after: Option<DateTime<Utc>>,
    /// After this position in the order (the last task of the page before).
    pub after: Option<(DateTime<Utc>, TaskId)>,
    pub limit: i64,
}

/// A page of tasks, newest change first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPage {
    /// The tasks and their last change, in order.
    pub tasks: Vec<(TaskId, DateTime<Utc>)>,
    /// Every task the query matches, on all pages.
    pub total: i64,
}

/// A page of `owner`'s tasks, by last change (newest first, then id).
pub async fn page(
    pool: &PgPool,
    owner: &Owner,
    query: &TaskQuery<'_>,
) -> Result<TaskPage, DbError> {
    let statuses: Option<Vec<&str>> = query
        .statuses
        .as_ref()
        .map(|s| s.iter().map(|s| s.as_str()).collect());
    let waits: Option<Vec<&str>> = query
        .waiting_for
        .as_ref()
        .map(|w| w.iter().map(|w| w.as_str()).collect());
    let rows = sqlx::query!(
        r#"
        WITH matching AS (
            SELECT t.id, t.updated_at
              FROM tasks t
              LEFT JOIN LATERAL (SELECT status, wait_reason FROM jobs WHERE task_id = t.id
                                  ORDER BY job_no DESC LIMIT 1) j ON true
             WHERE t.owner = $1
               AND ($2::text IS NULL OR t.context_id = $2
                    OR (t.context_id IS NULL AND t.id::text = $2))
               AND ($3::text[] IS NULL OR j.status = ANY($3))
               AND ($4::text[] IS NULL OR j.status <> 'waiting_human' OR j.wait_reason = ANY($4))
               AND ($5::timestamptz IS NULL OR t.updated_at > $5)
        )
        SELECT id AS "id!", updated_at AS "updated_at!",
               (SELECT count(*) FROM matching) AS "total!"
          FROM matching
         WHERE $6::timestamptz IS NULL OR (updated_at, id) < ($6, $7::uuid)
         ORDER BY updated_at DESC, id DESC
         LIMIT $8
        "#,
        owner.as_str(),
        query.context_id,
        statuses.as_deref() as Option<&[&str]>,
        waits.as_deref() as Option<&[&str]>,
        query.changed_after,
        query.after.map(|a| a.0),
        query.after.map(|a| a.1.0),
        query.limit
    )
    .fetch_all(pool)
    .await?;
    let total = match (rows.first(), query.after) {
        (Some(r), _) => r.total,
        // Nothing matches at all.
        (None, None) => 0,
        // A page past the last: count without the cursor.
        (None, Some(_)) => {
            let everything = TaskQuery {
                after: None,
                limit: 1,
                ..query.clone()
            };
            Box::pin(page(pool, owner, &everything)).await?.total
        }
    };
    Ok(TaskPage {
        tasks: rows
            .into_iter()
            .map(|r| (TaskId(r.id), r.updated_at))
            .collect(),
        total,
    })
}

/// A push notification config of a task (its token and credentials never shown in logs).
#[derive(Clone, PartialEq, Eq)]
pub struct PushConfig {
    pub task_id: TaskId,
    pub id: String,
    pub url: String,
    pub token: Option<String>,
    pub auth_scheme: Option<String>,
    pub auth_credentials: Option<String>,
}

impl std::fmt::Debug for PushConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("PushConfig")
            .field("task_id", &self.task_id)
            .field("id", &self.id)
            .field("url", &self.url)
            .field("token", &redacted(&self.token))
            .field("auth_scheme", &self.auth_scheme)
            .field("auth_credentials", &redacted(&self.auth_credentials))
            .finish()
    }
}

impl PushConfig {
    /// Its token and credentials as stored for task `task_id`: sealed, bound to the config.
    pub(crate) fn sealed_for(&self, task_id: TaskId) -> (Option<String>, Option<String>) {
        let (token, credentials) = push_contexts(task_id, &self.id);
        (
            crate::sealed::seal_opt(self.token.as_deref(), &token),
            crate::sealed::seal_opt(self.auth_credentials.as_deref(), &credentials),
        )
    }

    /// A config read back: its token and credentials opened.
    fn opened(mut self) -> Result<Self, DbError> {
        let (token, credentials) = push_contexts(self.task_id, &self.id);
        self.token = crate::sealed::open_opt(self.token, &token)?;
        self.auth_credentials = crate::sealed::open_opt(self.auth_credentials, &credentials)?;
        Ok(self)
    }
}

/// What a push config's sealed token and credentials are bound to.
pub fn push_contexts(task_id: TaskId, id: &str) -> (String, String) {
    (
        format!("a2a_push_configs.token/{task_id}/{id}"),
        format!("a2a_push_configs.auth_credentials/{task_id}/{id}"),
    )
}

/// Store a push config (replacing the task's config of the same id).
pub async fn put_push_config(pool: &PgPool, config: &PushConfig) -> Result<(), DbError> {
    let (token, credentials) = config.sealed_for(config.task_id);
    sqlx::query!(
        r#"
        INSERT INTO a2a_push_configs (task_id, id, url, token, auth_scheme, auth_credentials)
        VALUES ($1, $2, $3, $4, $5, $6)
        ON CONFLICT (task_id, id) DO UPDATE
           SET url = EXCLUDED.url, token = EXCLUDED.token, auth_scheme = EXCLUDED.auth_scheme,
               auth_credentials = EXCLUDED.auth_credentials
        "#,
        config.task_id.0,
        config.id,
        config.url,
        token,
        config.auth_scheme,
        credentials
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// A task's push configs (all of them, or the one with `id`), oldest first.
pub async fn push_configs(
    pool: &PgPool,
    task_id: TaskId,
    id: Option<&str>,
) -> Result<Vec<PushConfig>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT id, url, token, auth_scheme, auth_credentials FROM a2a_push_configs
         WHERE task_id = $1 AND ($2::text IS NULL OR id = $2)
         ORDER BY created_at, id
        "#,
        task_id.0,
        id
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| {
            PushConfig {
                task_id,
                id: r.id,
                url: r.url,
                token: r.token,
                auth_scheme: r.auth_scheme,
                auth_credentials: r.auth_credentials,
            }
            .opened()
        })
        .collect()
}

/// Delete a push config; whether there was one.
pub async fn delete_push_config(pool: &PgPool, task_id: TaskId, id: &str) -> Result<bool, DbError> {
    let done = sqlx::query!(
        "DELETE FROM a2a_push_configs WHERE task_id = $1 AND id = $2",
        task_id.0,
        id
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// The task's context (as [`context_of`]) when the task has any push config; `None` (the
/// usual case, one index probe) when nobody is to be told.
pub async fn push_context(pool: &PgPool, task_id: TaskId) -> Result<Option<String>, DbError> {
    let row = sqlx::query_scalar!(
        r#"
        SELECT COALESCE(t.context_id, t.id::text) AS "context!" FROM tasks t
         WHERE t.id = $1 AND EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.task_id = t.id)
        "#,
        task_id.0
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

/// Queue one delivery per push config of the task and item (the stream events event
/// `event_seq` means, in order), with the outbox rows that publish them (topic `a2a_push`),
/// in one statement. Recording the same event twice changes nothing; returns the deliveries
/// queued.
pub async fn record_pushes(
    pool: &PgPool,
    task_id: TaskId,
    event_seq: i64,
    items: &[serde_json::Value],
) -> Result<i64, DbError> {
    let items = serde_json::Value::from(items.to_vec());
    let queued = sqlx::query_scalar!(
        r#"
        WITH d AS (
            INSERT INTO a2a_push_deliveries (id, task_id, config_id, event_seq, item, payload)
            SELECT gen_random_uuid(), c.task_id, c.id, $2, (i.n - 1)::smallint, i.payload
              FROM a2a_push_configs c,
                   jsonb_array_elements($3::jsonb) WITH ORDINALITY AS i(payload, n)
             WHERE c.task_id = $1
            ON CONFLICT (task_id, config_id, event_seq, item) DO NOTHING
            RETURNING id
        ), o AS (
            INSERT INTO outbox (topic, msg_id, payload)
            SELECT 'a2a_push', 'a2a-push:' || d.id, jsonb_build_object('delivery_id', d.id)
              FROM d
        )
        SELECT count(*) AS "queued!" FROM d
        "#,
        task_id.0,
        event_seq,
        items
    )
    .fetch_one(pool)
    .await?;
    Ok(queued)
}

/// A push delivery to attempt, with its config.
#[derive(Clone, PartialEq)]
pub struct PushDelivery {
    pub id: Uuid,
    pub config: PushConfig,
    pub payload: serde_json::Value,
}

impl std::fmt::Debug for PushDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushDelivery")
            .field("id", &self.id)
            .field("url", &self.config.url)
            .finish_non_exhaustive()
    }
}

/// Take a pending push delivery for sending, holding it for `hold`
/// ([`crate::webhooks::Taken`]; `Settled` also when its config was deleted since, and the
/// delivery with it).
pub async fn take_push(
    pool: &PgPool,
    id: Uuid,
    hold: std::time::Duration,
) -> Result<Taken<PushDelivery>, DbError> {
    let row = sqlx::query!(
        r#"
        WITH d AS (
            UPDATE a2a_push_deliveries
               SET sending_until = now() + make_interval(secs => $2)
             WHERE id = $1 AND status = 'pending'
               AND (sending_until IS NULL OR sending_until <= now())
         RETURNING task_id, config_id, payload
        )
        SELECT d.payload, c.task_id, c.id, c.url, c.token, c.auth_scheme, c.auth_credentials
          FROM d
          JOIN a2a_push_configs c ON c.task_id = d.task_id AND c.id = d.config_id
        "#,
        id,
        hold.as_secs_f64()
    )
    .fetch_optional(pool)
    .await?;
    if let Some(r) = row {
        let config = PushConfig {
            task_id: TaskId(r.task_id),
            id: r.id,
            url: r.url,
            token: r.token,
            auth_scheme: r.auth_scheme,
            auth_credentials: r.auth_credentials,
        };
        let config = match config.opened() {
            Ok(config) => config,
            Err(e) => {
                // Not sent: the next attempt need not wait for the hold.
                sqlx::query!(
                    "UPDATE a2a_push_deliveries SET sending_until = NULL \
                     WHERE id = $1 AND status = 'pending'",
                    id
                )
                .execute(pool)
                .await?;
                return Err(e);
            }
        };
        return Ok(Taken::Sending(PushDelivery {
            id,
            config,
            payload: r.payload,
        }));
    }
    let seen = sqlx::query!(
        r#"
        SELECT status = 'pending' AS "pending!",
               EXTRACT(EPOCH FROM sending_until - now())::float8 AS left
          FROM a2a_push_deliveries WHERE id = $1
        "#,
        id
    )
    .fetch_optional(pool)
    .await?;
    Ok(seen.map_or(Taken::Settled, |r| {
        crate::webhooks::held_elsewhere(r.pending, r.left)
    }))
}

/// Record an attempt at a push delivery; only a pending delivery changes.
pub async fn record_push_attempt(
    pool: &PgPool,
    id: Uuid,
    attempt: &crate::webhooks::Attempt,
) -> Result<(), DbError> {
    let (status, code, error) = attempt.columns();
    sqlx::query!(
        r#"
        UPDATE a2a_push_deliveries
           SET status = $2, attempts = attempts + 1, last_status_code = $3, last_error = $4,
               delivered_at = CASE WHEN $2 = 'delivered' THEN now() END, sending_until = NULL
         WHERE id = $1 AND status = 'pending'
        "#,
        id,
        status.as_str(),
        code,
        error
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// A task's context as A2A names it (its own id when it has none).
pub async fn context_of(pool: &PgPool, task_id: TaskId) -> Result<Option<String>, DbError> {
    let row = sqlx::query_scalar!(
        r#"SELECT COALESCE(context_id, id::text) AS "context!" FROM tasks WHERE id = $1"#,
        task_id.0
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

/// A fresh context id.
pub fn new_context() -> String {
    Uuid::now_v7().to_string()
}
