//! The inbox: an owner's notifications, read marks, and the order a stream hands them out in.
//!
//! A stream cannot follow ids alone: two notifiers commit in any order, so a row with a lower
//! id may become visible after one with a higher id was sent. Each row keeps the id of the
//! transaction that wrote it (`tx`), and a stream reads only rows whose transaction is older
//! than every transaction still running (`pg_snapshot_xmin`): no row can appear later below
//! that line, so `(tx, id)` is a cursor that never skips one.

use chrono::{DateTime, Utc};
use maestro_domain::{NotificationId, Owner, ScheduleId, TaskId};
use sqlx::PgPool;
use uuid::Uuid;

use crate::DbError;

/// One inbox item.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub id: NotificationId,
    pub kind: String,
    pub task_id: Option<TaskId>,
    pub created_at: DateTime<Utc>,
    pub read_at: Option<DateTime<Utc>>,
    /// The notification as webhooks and NATS subscribers get it.
    pub payload: serde_json::Value,
    pub cursor: Cursor,
}

/// A place in an owner's stream of notifications: after the row `id` written by `tx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub tx: i64,
    pub id: Uuid,
}

impl Cursor {
    /// The SSE event id: `<tx>-<id>`.
    pub fn encode(&self) -> String {
        format!("{}-{}", self.tx, self.id.simple())
    }

    pub fn decode(s: &str) -> Option<Self> {
        let (tx, id) = s.split_once('-')?;
        Some(Self {
            tx: tx.parse().ok().filter(|tx: &i64| *tx >= 0)?,
            id: Uuid::parse_str(id).ok()?,
        })
    }
}

/// Which items to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub kind: Option<String>,
    pub task_id: Option<TaskId>,
    pub schedule_id: Option<ScheduleId>,
    pub unread: bool,
}

struct Row {
    id: Uuid,
    kind: String,
    task_id: Option<Uuid>,
    created_at: DateTime<Utc>,
    read_at: Option<DateTime<Utc>>,
    payload: serde_json::Value,
    tx: i64,
}

impl From<Row> for Item {
    fn from(r: Row) -> Self {
        Item {
            id: NotificationId(r.id),
            kind: r.kind,
            task_id: r.task_id.map(TaskId),
            created_at: r.created_at,
            read_at: r.read_at,
            payload: r.payload,
            cursor: Cursor { tx: r.tx, id: r.id },
        }
    }
}

/// A page of the owner's items, newest first, strictly older than `before`.
pub async fn list(
    pool: &PgPool,
    owner: &Owner,
    filter: &Filter,
    before: Option<NotificationId>,
    limit: i64,
) -> Result<Vec<Item>, DbError> {
    let rows = sqlx::query_as!(
        Row,
        r#"
        SELECT id, kind, task_id, created_at, read_at, payload, tx::text::bigint AS "tx!"
          FROM notifications
         WHERE owner = $1
           AND ($2::uuid IS NULL OR id < $2)
           AND ($3::text IS NULL OR kind = $3)
           AND ($4::uuid IS NULL OR task_id = $4)
           AND ($5::text IS NULL OR payload -> 'data' ->> 'schedule_id' = $5)
           AND (NOT $6 OR read_at IS NULL)
         ORDER BY id DESC
         LIMIT $7
        "#,
        owner.as_str(),
        before.map(|id| id.0),
        filter.kind,
        filter.task_id.map(|id| id.0),
        filter.schedule_id.map(|id| id.to_string()),
        filter.unread,
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Item::from).collect())
}

/// How many of the owner's items are unread.
pub async fn unread(pool: &PgPool, owner: &Owner) -> Result<i64, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM notifications WHERE owner = $1 AND read_at IS NULL"#,
        owner.as_str()
    )
    .fetch_one(pool)
    .await?)
}

/// Mark one item read (again: nothing changes); whether it was unread, or `None` if the owner
/// has no such item.
pub async fn mark_read(
    pool: &PgPool,
    owner: &Owner,
    id: NotificationId,
) -> Result<Option<bool>, DbError> {
    Ok(sqlx::query_scalar!(
        r#"
        WITH unread AS (
            UPDATE notifications SET read_at = now()
             WHERE id = $1 AND owner = $2 AND read_at IS NULL
         RETURNING id
        )
        SELECT EXISTS (SELECT 1 FROM unread) AS "marked!"
          FROM notifications WHERE id = $1 AND owner = $2
        "#,
        id.0,
        owner.as_str()
    )
    .fetch_optional(pool)
    .await?)
}

/// Mark every unread item read, or those up to `up_to` (its id and older: what the reader
/// has seen); returns how many changed.
pub async fn mark_all_read(
    pool: &PgPool,
    owner: &Owner,
    up_to: Option<NotificationId>,
) -> Result<u64, DbError> {
    let done = sqlx::query!(
        r#"
        UPDATE notifications SET read_at = now()
         WHERE owner = $1 AND read_at IS NULL AND ($2::uuid IS NULL OR id <= $2)
        "#,
        owner.as_str(),
        up_to.map(|id| id.0)
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Up to `limit` of the owner's items after `after` in stream order, only from transactions
/// no running transaction can come before; and the cursor a stream opened now starts at.
pub async fn after(
    pool: &PgPool,
    owner: &Owner,
    after: Cursor,
    limit: i64,
) -> Result<Vec<Item>, DbError> {
    let rows = sqlx::query_as!(
        Row,
        r#"
        SELECT id, kind, task_id, created_at, read_at, payload, tx::text::bigint AS "tx!"
          FROM notifications
         WHERE owner = $1
           AND (tx, id) > ($2::text::xid8, $3)
           AND tx < pg_snapshot_xmin(pg_current_snapshot())
         ORDER BY tx, id
         LIMIT $4
        "#,
        owner.as_str(),
        after.tx.to_string(),
        after.id,
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Item::from).collect())
}

/// Where a stream opened now without a cursor starts: after everything already committed
/// (items of transactions still running come after it).
pub async fn present(pool: &PgPool) -> Result<Cursor, DbError> {
    let xmin = sqlx::query_scalar!(
        r#"SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS "xmin!""#
    )
    .fetch_one(pool)
    .await?;
    Ok(Cursor {
        tx: xmin - 1,
        id: Uuid::max(),
    })
}

/// One task-level event of the owner's, for the activity feed.
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    pub task_id: TaskId,
    pub seq: i64,
    pub kind: String,
    pub payload: serde_json::Value,
    pub at: DateTime<Utc>,
    pub instruction: String,
    pub schedule_id: Option<ScheduleId>,
    pub job_no: i32,
}

/// A page of the owner's task-level events across tasks (job states, decisions, continues),
/// newest first, strictly before `before` (`(at, task_id, seq)` of the last item seen).
pub async fn activity(
    pool: &PgPool,
    owner: &Owner,
    before: Option<(DateTime<Utc>, TaskId, i64)>,
    limit: i64,
) -> Result<Vec<Activity>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT e.task_id, e.seq, e.kind, e.payload, e.created_at, t.instruction, t.schedule_id,
               j.job_no
          FROM events e
          JOIN tasks t ON t.id = e.task_id
          JOIN jobs j ON j.id = e.job_id
         WHERE t.owner = $1
           AND e.kind IN ('job_state', 'decision', 'job_continued')
           AND ($2::timestamptz IS NULL OR (e.created_at, e.task_id, e.seq) < ($2, $3, $4))
         ORDER BY e.created_at DESC, e.task_id DESC, e.seq DESC
         LIMIT $5
        "#,
        owner.as_str(),
        before.map(|b| b.0),
        before.map(|b| b.1.0),
        before.map(|b| b.2),
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Activity {
            task_id: TaskId(r.task_id),
            seq: r.seq,
            kind: r.kind,
            payload: r.payload,
            at: r.created_at,
            instruction: r.instruction,
            schedule_id: r.schedule_id.map(ScheduleId),
            job_no: r.job_no,
        })
        .collect())
}
