//! Figures for the metrics (`maestro_jobs`, `maestro_outbox_lag_seconds`), cheap enough to
//! read every few seconds: the active job states through their partial index, the outbox's
//! oldest row by its primary key.

use crate::PgPool;

/// Jobs by status, for the states a job passes through (the finished ones grow without
/// bound and are counted by the transition counters instead).
pub async fn active_jobs(pool: &PgPool) -> sqlx::Result<Vec<(String, i64)>> {
    sqlx::query_as(
        "SELECT s.status, (SELECT count(*) FROM jobs j WHERE j.status = s.status)
         FROM unnest(ARRAY['queued', 'running', 'retry', 'waiting_human', 'waiting_subtasks'])
              AS s(status)",
    )
    .fetch_all(pool)
    .await
}

/// Seconds since the oldest event not yet relayed was written (0 when none waits). Rows
/// their writer publishes itself count once their grace is over.
pub async fn outbox_lag(pool: &PgPool) -> sqlx::Result<f64> {
    let (lag,): (Option<f64>,) = sqlx::query_as(
        "SELECT extract(epoch FROM now() - least(
                    (SELECT created_at FROM outbox WHERE relay_after IS NULL ORDER BY id LIMIT 1),
                    (SELECT min(created_at) FROM outbox WHERE relay_after <= now())))::float8",
    )
    .fetch_optional(pool)
    .await?
    .unwrap_or((None,));
    Ok(lag.unwrap_or(0.0).max(0.0))
}
