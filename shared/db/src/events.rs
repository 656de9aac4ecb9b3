//! Reading events. Events are written only through [`crate::jobs::append`],
//! [`crate::jobs::claim`] and [`crate::tasks::create`], which hand out the sequence numbers.

use chrono::{DateTime, Utc};
use maestro_domain::{Event, EventKind, JobId, TaskId};
use sqlx::PgPool;
use uuid::Uuid;

use crate::DbError;

struct EventRow {
    task_id: Uuid,
    seq: i64,
    job_id: Uuid,
    job_seq: i32,
    kind: String,
    payload: serde_json::Value,
    created_at: DateTime<Utc>,
}

impl TryFrom<EventRow> for Event {
    type Error = DbError;
    fn try_from(r: EventRow) -> Result<Self, DbError> {
        let kind: EventKind = serde_json::from_value(serde_json::Value::String(r.kind.clone()))
            .map_err(|_| DbError::Corrupt(format!("unknown event kind {:?}", r.kind)))?;
        Ok(Event {
            task_id: TaskId(r.task_id),
            seq: r.seq,
            job_id: JobId(r.job_id),
            job_seq: r.job_seq,
            kind,
            payload: r.payload,
            created_at: r.created_at,
        })
    }
}

/// Events of a task with `seq > after`, in order, at most `limit`.
pub async fn list(
    pool: &PgPool,
    task_id: TaskId,
    after: i64,
    limit: i64,
) -> Result<Vec<Event>, DbError> {
    let rows = sqlx::query_as!(
        EventRow,
        r#"
        SELECT task_id, seq, job_id, job_seq, kind, payload, created_at
          FROM events WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3
        "#,
        task_id.0,
        after,
        limit
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(Event::try_from).collect()
}

/// Every event of one job, in order: what a worker resuming the job rebuilds from.
pub async fn of_job(pool: &PgPool, job_id: JobId) -> Result<Vec<Event>, DbError> {
    let rows = sqlx::query_as!(
        EventRow,
        r#"
        SELECT task_id, seq, job_id, job_seq, kind, payload, created_at
          FROM events WHERE job_id = $1 ORDER BY job_seq
        "#,
        job_id.0
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(Event::try_from).collect()
}
