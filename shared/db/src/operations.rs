//! The operation ledger: side-effecting tool calls, recorded before they run and settled
//! after, so recovery never repeats or silently skips an effect.

use maestro_domain::JobId;
use sqlx::PgPool;

use crate::DbError;

/// Where an operation stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// It was about to run (or ran) and its outcome was never recorded.
    Started {
        at: chrono::DateTime<chrono::Utc>,
    },
    Committed(String),
    Failed(String),
}

/// A side-effecting call about to run.
#[derive(Debug, Clone, Copy)]
pub struct NewOperation<'a> {
    pub id: &'a str,
    pub job_id: JobId,
    pub call_id: &'a str,
    pub tool: &'a str,
    pub arguments: &'a serde_json::Value,
    pub attempt: i32,
}

/// The recorded state of an operation, if it was ever started.
pub async fn get(pool: &PgPool, id: &str) -> Result<Option<Operation>, DbError> {
    let row = sqlx::query!(
        "SELECT status, result, started_at FROM operations WHERE id = $1",
        id
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| match (r.status.as_str(), r.result) {
        ("committed", result) => Operation::Committed(result.unwrap_or_default()),
        ("failed", result) => Operation::Failed(result.unwrap_or_default()),
        _ => Operation::Started { at: r.started_at },
    }))
}

/// Record that the operation is about to run, fenced by the job's claim: `Err(Fenced)`
/// (nothing written) when the job is no longer held by claim `op.attempt` — a worker whose
/// lease ran out while it was stopped must not start the call. Starting it again (a person
/// said the earlier run did not happen) keeps the row and moves its start time and attempt
/// forward.
pub async fn start(
    pool: &PgPool,
    op: NewOperation<'_>,
) -> Result<Result<(), crate::jobs::Fenced>, DbError> {
    let row = sqlx::query_scalar!(
        r#"
        INSERT INTO operations (id, job_id, call_id, tool, arguments, status, attempt)
        SELECT $1, $2, $3, $4, $5, 'started', $6
          FROM jobs WHERE id = $2 AND attempt = $6 AND status = 'running'
        ON CONFLICT (id) DO UPDATE SET started_at = now(), attempt = EXCLUDED.attempt
         WHERE operations.status = 'started'
        RETURNING 1 AS "one!"
        "#,
        op.id,
        op.job_id.0,
        op.call_id,
        op.tool,
        op.arguments,
        op.attempt
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|_| ()).ok_or(crate::jobs::Fenced(op.job_id)))
}

/// Record the outcome of a started operation.
pub async fn finish(pool: &PgPool, id: &str, ok: bool, result: &str) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        UPDATE operations SET status = $2, result = $3, finished_at = now()
         WHERE id = $1 AND status = 'started'
        "#,
        id,
        if ok { "committed" } else { "failed" },
        result
    )
    .execute(pool)
    .await?;
    Ok(())
}
