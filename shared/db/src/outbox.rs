//! The transactional outbox. Rows are inserted by the statements that change state (events
//! get theirs from a trigger); the relay takes a batch under `FOR UPDATE SKIP LOCKED`,
//! publishes it and deletes it in the same transaction, so a crash between publish and delete
//! only re-publishes, and JetStream drops the duplicate by `msg_id`. Writers wake the relay
//! over NATS after their commit (`maestro_messaging::Bus::after_commit`), not with NOTIFY,
//! whose global lock would serialize every writing transaction.
//!
//! The relay's deletes commit without waiting for their WAL flush (`synchronous_commit = off`
//! for that transaction only): what they record is that rows were published, not a fact.
//! Should Postgres lose such a commit in a crash (at most the last few hundred milliseconds of
//! them), the rows are there again and are published again; JetStream drops a repeat inside its
//! duplicate window (2 minutes) by `Nats-Msg-Id`, and every reader orders by seq past it. What
//! it saves is a flush the relay would wait for beside the job path's own commits.

use chrono::{DateTime, Utc};
use maestro_domain::notification::NotificationType;
use maestro_domain::topic::{Direct, Topic};
use maestro_domain::{Event, EventKind, JobId, TaskId};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use crate::DbError;

/// A message waiting to be published; `topic` says where (the relay spells the subject).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    pub id: i64,
    pub topic: Topic,
    pub msg_id: String,
    pub payload: serde_json::Value,
    pub traceparent: Option<String>,
    /// A job state event of a task with A2A push configs (read with the batch, so the
    /// notifier looks for configs only then).
    pub a2a_push: bool,
}

/// A row as stored.
struct Stored {
    id: i64,
    topic: String,
    task_id: Option<uuid::Uuid>,
    kind: Option<String>,
    msg_id: String,
    payload: serde_json::Value,
    traceparent: Option<String>,
    a2a_push: bool,
}

impl Stored {
    fn parse(self) -> Result<OutboxRow, DbError> {
        let topic = Topic::from_parts(&self.topic, self.task_id.map(TaskId), self.kind.as_deref())
            .map_err(DbError::corrupt)?;
        Ok(OutboxRow {
            id: self.id,
            topic,
            msg_id: self.msg_id,
            payload: self.payload,
            traceparent: self.traceparent,
            a2a_push: self.a2a_push,
        })
    }
}

/// How long the relay leaves a row its writer publishes itself before taking it over (an
/// `interval` for the outbox trigger; well inside JetStream's duplicate window, so a row
/// published by both is stored once).
pub const DIRECT_GRACE: &str = "2 seconds";

/// Lock and return the oldest rows the relay publishes (skipping rows another relay holds,
/// and rows their writer publishes itself: see [`lock_overdue`]).
pub async fn lock_batch(conn: &mut PgConnection, limit: i64) -> Result<Vec<OutboxRow>, DbError> {
    let rows = sqlx::query_as!(
        Stored,
        r#"
        SELECT id, topic, task_id, kind, msg_id, payload, traceparent,
               COALESCE(kind = 'job_state' AND EXISTS (SELECT 1 FROM a2a_push_configs c
                                                        WHERE c.task_id = outbox.task_id), false)
                   AS "a2a_push!"
          FROM outbox
         WHERE relay_after IS NULL
         ORDER BY id LIMIT $1 FOR UPDATE OF outbox SKIP LOCKED
        "#,
        limit
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(Stored::parse).collect()
}

/// Lock rows their writer was to publish itself and has not said it did, once their grace is
/// over (the writer stopped between its commit and its publish, or its notice was lost), and
/// return what the relay publishes for them: a range row (topic `events`, migration `0022`)
/// becomes its events, read from `events` and rendered as the trigger renders a relayed event,
/// and the notices recorded for those events (every one carries the range row's `id`, which
/// [`delete`] takes). A notice also published by its own row (a writer from before migration
/// `0026`) is dropped by the stream as a repeat of its `msg_id`.
pub async fn lock_overdue(conn: &mut PgConnection, limit: i64) -> Result<Vec<OutboxRow>, DbError> {
    let rows = sqlx::query_as!(
        Stored,
        r#"
        WITH o AS (
            SELECT id, topic, task_id, kind, msg_id, payload, traceparent
              FROM outbox
             WHERE relay_after <= now()
             ORDER BY id LIMIT $1 FOR UPDATE OF outbox SKIP LOCKED
        ), ranges AS (
            SELECT id, task_id, (payload ->> 'first')::bigint AS first,
                   (payload ->> 'last')::bigint AS last
              FROM o WHERE topic = 'events'
        ), published AS (
            SELECT r.id, 'event' AS topic, e.task_id, e.kind,
                   'event:' || e.task_id || ':' || e.seq AS msg_id, to_jsonb(e) AS payload,
                   j.traceparent, e.seq
              FROM ranges r
              JOIN events e ON e.task_id = r.task_id AND e.seq BETWEEN r.first AND r.last
              LEFT JOIN jobs j ON j.id = e.job_id
            UNION ALL
            -- The notices the range's statement wrote with its events (migration 0026), each
            -- as `publish_notice`'s row would be published.
            SELECT r.id, 'notification', NULL, n.kind, 'notification:' || n.id, n.payload,
                   j.traceparent, n.event_seq
              FROM ranges r
              JOIN notifications n ON n.task_id = r.task_id
                                  AND n.event_seq BETWEEN r.first AND r.last
              LEFT JOIN jobs j ON j.id = n.job_id
            UNION ALL
            -- A row as 0021 wrote it: the event itself.
            SELECT id, topic, task_id, kind, msg_id, payload, traceparent, 0
              FROM o WHERE o.topic <> 'events'
        )
        SELECT id AS "id!", topic AS "topic!", task_id, kind, msg_id AS "msg_id!",
               payload AS "payload!", traceparent,
               COALESCE(kind = 'job_state' AND EXISTS (SELECT 1 FROM a2a_push_configs c
                                                        WHERE c.task_id = published.task_id), false)
                   AS "a2a_push!"
          FROM published
         ORDER BY id, seq, topic
        "#,
        limit
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(Stored::parse).collect()
}

/// Remove rows their writer published itself (by `msg_id`: a range row's key,
/// [`maestro_domain::topic::range_key`]; rows the relay publishes are not touched). Returns
/// how many were removed.
///
/// Committed without waiting for the flush (see the module's documentation): a delete lost in a crash only
/// has the relay publish those events again, and the stream drops the repeat by its id.
pub async fn forget_published(pool: &PgPool, msg_ids: &[String]) -> Result<u64, DbError> {
    let done = sqlx::query!(
        r#"
        WITH s AS (SELECT set_config('synchronous_commit', 'off', true))
        DELETE FROM outbox USING s WHERE relay_after IS NOT NULL AND msg_id = ANY($1)
        "#,
        msg_ids
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Where a statement that publishes its events itself wrote them ([`crate::jobs::Publish`]).
pub(crate) struct Written {
    pub task_id: TaskId,
    pub job_id: JobId,
    /// The transaction's time: every event's `created_at`.
    pub created_at: DateTime<Utc>,
    pub traceparent: Option<String>,
    /// The task has A2A push configs.
    pub a2a_push: bool,
}

impl Written {
    /// The outbox rows of events written from `(first seq, first job_seq)` on, in order: the
    /// JSON is the event as stored (what the trigger copies into the row, `to_jsonb` of it),
    /// built here rather than sent back by the statement.
    pub fn events(
        &self,
        (first_seq, first_job_seq): (i64, i32),
        events: impl Iterator<Item = (EventKind, Value)>,
    ) -> Vec<Direct> {
        let mut events: Vec<Direct> = events
            .enumerate()
            .map(|(i, (kind, payload))| {
                let seq = first_seq + i as i64;
                self.event(kind, seq, first_job_seq + i as i32, payload)
            })
            .collect();
        for later in events.iter_mut().skip(1) {
            later.outbox_key = None;
        }
        events
    }

    /// The notices the statement wrote (`[{id, kind, payload}]`, as the turn statement
    /// returns them), each as the relay would publish its row: on its type's subject, with
    /// `msg_id` `notification:<id>`. The statement's range row stands for them
    /// ([`lock_overdue`]), so none carries a key of its own.
    pub fn notices(&self, notices: Value) -> Result<Vec<Direct>, DbError> {
        #[derive(serde::Deserialize)]
        struct Notice {
            id: uuid::Uuid,
            kind: String,
            payload: Value,
        }
        let notices: Vec<Notice> = serde_json::from_value(notices).map_err(DbError::corrupt)?;
        notices
            .into_iter()
            .map(|n| {
                let kind = NotificationType::parse(&n.kind)
                    .ok_or_else(|| DbError::corrupt(format!("unknown notice kind {:?}", n.kind)))?;
                Ok(Direct {
                    topic: Topic::Notification(kind),
                    msg_id: format!("notification:{}", n.id),
                    payload: n.payload.to_string(),
                    traceparent: self.traceparent.clone(),
                    a2a_push: false,
                    outbox_key: None,
                })
            })
            .collect()
    }

    /// One event of this statement, the first (and only) of its range.
    pub fn event(&self, kind: EventKind, seq: i64, job_seq: i32, payload: Value) -> Direct {
        let event = Event {
            task_id: self.task_id,
            seq,
            job_id: self.job_id,
            job_seq,
            kind,
            payload,
            created_at: self.created_at,
        };
        Direct {
            topic: Topic::Event {
                task_id: self.task_id,
                kind,
            },
            msg_id: format!("event:{}:{seq}", self.task_id),
            // A struct of plain values: serializing it cannot fail.
            payload: serde_json::to_string(&event).unwrap_or_default(),
            traceparent: self.traceparent.clone(),
            a2a_push: self.a2a_push && kind == EventKind::JobState,
            outbox_key: Some(maestro_domain::topic::range_key(self.task_id, seq)),
        }
    }
}

/// Remove published rows, in the relay's transaction, which then commits without waiting for
/// its flush (see the module's documentation).
pub async fn delete(conn: &mut PgConnection, ids: &[i64]) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        WITH s AS (SELECT set_config('synchronous_commit', 'off', true))
        DELETE FROM outbox USING s WHERE id = ANY($1)
        "#,
        ids
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Rows not yet published (for readiness and metrics).
pub async fn backlog(pool: &PgPool) -> Result<i64, DbError> {
    let n = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM outbox"#)
        .fetch_one(pool)
        .await?;
    Ok(n)
}
