//! Events: reading them, and appending them to a job no worker holds. Every writer hands out
//! the sequence numbers from the counters on `tasks` and `jobs` in the inserting statement
//! (here, the job's fenced appends, the claim and the creating statements).

use chrono::{DateTime, Utc};
use maestro_domain::{Event, EventBody, EventKind, JobId, TaskId};
use sqlx::{PgConnection, PgPool};
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
        let kind = EventKind::parse(&r.kind)
            .ok_or_else(|| DbError::corrupt(format!("unknown event kind {:?}", r.kind)))?;
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

/// What an A2A view of tasks `task_ids` reads of their events: the agent's replies (assistant
/// messages with text) and each task's latest state change, by task and in order.
pub async fn replies_and_states(pool: &PgPool, task_ids: &[TaskId]) -> Result<Vec<Event>, DbError> {
    let ids: Vec<Uuid> = task_ids.iter().map(|t| t.0).collect();
    let rows = sqlx::query_as!(
        EventRow,
        r#"
        SELECT task_id, seq, job_id, job_seq, kind, payload, created_at
          FROM events
         WHERE task_id = ANY($1)
           AND ((kind = 'message' AND payload->>'role' = 'assistant'
                 AND COALESCE(payload->>'content', '') <> '')
                OR (task_id, seq) IN (SELECT task_id, max(seq) FROM events
                                       WHERE task_id = ANY($1) AND kind = 'job_state'
                                       GROUP BY task_id))
         ORDER BY task_id, seq
        "#,
        &ids
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(Event::try_from).collect()
}

/// The files the tasks' jobs wrote: the `path` of every call of a file-writing tool
/// ([`maestro_domain::tools::FILE_WRITERS`]) that succeeded, per task in the order of the
/// calls, each path once.
pub async fn files_written(
    pool: &PgPool,
    task_ids: &[TaskId],
) -> Result<Vec<(TaskId, String)>, DbError> {
    let ids: Vec<Uuid> = task_ids.iter().map(|t| t.0).collect();
    let writers = maestro_domain::tools::FILE_WRITERS;
    let rows = sqlx::query!(
        r#"
        SELECT c.task_id, c.payload->>'arguments' AS "arguments!"
          FROM events c
         WHERE c.task_id = ANY($1) AND c.kind = 'tool_call'
           AND c.payload->>'name' = ANY($2) AND c.payload ? 'arguments'
           AND EXISTS (SELECT 1 FROM events r
                        WHERE r.task_id = c.task_id AND r.kind = 'tool_result'
                          AND r.payload->>'call_id' = c.payload->>'call_id'
                          AND r.payload->>'is_error' = 'false')
         ORDER BY c.task_id, c.seq
        "#,
        &ids,
        &writers.map(str::to_owned)
    )
    .fetch_all(pool)
    .await?;
    let mut written: Vec<(TaskId, String)> = Vec::new();
    for row in rows {
        let arguments = serde_json::from_str::<serde_json::Value>(&row.arguments);
        let Some(path) = arguments
            .ok()
            .and_then(|a| a["path"].as_str().map(normalize))
        else {
            continue;
        };
        let task = TaskId(row.task_id);
        if !written.iter().any(|(t, p)| *t == task && *p == path) {
            written.push((task, path));
        }
    }
    Ok(written)
}

/// A workspace path as one file is named once (`./a.txt` and `a.txt` alike).
fn normalize(path: &str) -> String {
    path.trim().trim_start_matches("./").to_owned()
}

/// One event of a task.
pub async fn get(pool: &PgPool, task_id: TaskId, seq: i64) -> Result<Option<Event>, DbError> {
    let row = sqlx::query_as!(
        EventRow,
        r#"
        SELECT task_id, seq, job_id, job_seq, kind, payload, created_at
          FROM events WHERE task_id = $1 AND seq = $2
        "#,
        task_id.0,
        seq
    )
    .fetch_optional(pool)
    .await?;
    row.map(Event::try_from).transpose()
}

/// The task-wide seq of the task's last event (0 when it has none).
pub async fn last_seq(pool: &PgPool, task_id: TaskId) -> Result<i64, DbError> {
    let seq = sqlx::query_scalar!("SELECT last_seq FROM tasks WHERE id = $1", task_id.0)
        .fetch_optional(pool)
        .await?;
    Ok(seq.unwrap_or(0))
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

/// Append events to a job no worker holds (a paused job, one just queued), in the caller's
/// transaction.
pub async fn push(
    conn: &mut PgConnection,
    job_id: JobId,
    events: &[EventBody],
) -> Result<(), DbError> {
    let kinds: Vec<&str> = events.iter().map(|e| e.kind().as_str()).collect();
    let payloads: Vec<serde_json::Value> = events.iter().map(EventBody::payload).collect();
    sqlx::query!(
        r#"
        WITH j AS (
            UPDATE jobs SET last_job_seq = last_job_seq + cardinality($2::text[])
             WHERE id = $1
         RETURNING id, task_id, last_job_seq - cardinality($2::text[]) AS base
        ), t AS (
            UPDATE tasks SET last_seq = last_seq + cardinality($2::text[]), updated_at = now()
              FROM j WHERE tasks.id = j.task_id
         RETURNING tasks.id, tasks.last_seq - cardinality($2::text[]) AS base
        )
        INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
        SELECT t.id, t.base + x.ord, j.id, j.base + x.ord, x.kind, x.payload
          FROM j, t, unnest($2::text[], $3::jsonb[]) WITH ORDINALITY AS x(kind, payload, ord)
        "#,
        job_id.0,
        &kinds as &[&str],
        &payloads
    )
    .execute(conn)
    .await?;
    Ok(())
}
