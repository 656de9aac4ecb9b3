//! The transactional outbox. Rows are inserted by the statements that change state (events
//! get theirs from a trigger); the relay takes a batch under `FOR UPDATE SKIP LOCKED`,
//! publishes it and deletes it in the same transaction, so a crash between publish and delete
//! only re-publishes, and JetStream drops the duplicate by `msg_id`. Writers wake the relay
//! over NATS after their commit (`maestro_messaging::publish::wake_outbox`), not with NOTIFY,
//! whose global lock would serialize every writing transaction.

use maestro_domain::TaskId;
use maestro_domain::topic::Topic;
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

/// Lock and return the oldest unpublished rows (skipping rows another relay holds).
pub async fn lock_batch(conn: &mut PgConnection, limit: i64) -> Result<Vec<OutboxRow>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT id, topic, task_id, kind, msg_id, payload, traceparent,
               COALESCE(kind = 'job_state' AND EXISTS (SELECT 1 FROM a2a_push_configs c
                                                        WHERE c.task_id = outbox.task_id), false)
                   AS "a2a_push!"
          FROM outbox
         ORDER BY id LIMIT $1 FOR UPDATE OF outbox SKIP LOCKED
        "#,
        limit
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            let topic = Topic::from_parts(&r.topic, r.task_id.map(TaskId), r.kind.as_deref())
                .map_err(DbError::corrupt)?;
            Ok(OutboxRow {
                id: r.id,
                topic,
                msg_id: r.msg_id,
                payload: r.payload,
                traceparent: r.traceparent,
                a2a_push: r.a2a_push,
            })
        })
        .collect()
}

/// Remove published rows.
pub async fn delete(conn: &mut PgConnection, ids: &[i64]) -> Result<(), DbError> {
    sqlx::query!("DELETE FROM outbox WHERE id = ANY($1)", ids)
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
