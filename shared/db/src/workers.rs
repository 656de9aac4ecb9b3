//! The workers that are up, and what they serve: each says so when it starts and every few
//! seconds after ([`seen`]); a queued job whose profile or model none of them serves says why
//! it waits (`maestro_db::tasks`).

use sqlx::PgPool;

use crate::DbError;

/// How often a worker says it is still up; a worker not seen for three times this long
/// counts as gone (the task view's `queued_reason` looks 30 s back).
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(10);

/// Worker `id` is up, serving `profiles` and `models` (empty: any).
pub async fn seen(
    pool: &PgPool,
    id: &str,
    profiles: &[String],
    models: &[String],
) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        INSERT INTO workers (id, profiles, models) VALUES ($1, $2, $3)
        ON CONFLICT (id) DO UPDATE
           SET profiles = EXCLUDED.profiles, models = EXCLUDED.models, seen_at = now()
        "#,
        id,
        profiles,
        models,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Worker `id` has stopped (and workers gone for a day are forgotten).
pub async fn gone(pool: &PgPool, id: &str) -> Result<(), DbError> {
    sqlx::query!(
        "DELETE FROM workers WHERE id = $1 OR seen_at < now() - interval '1 day'",
        id
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Whether a worker other than `id` seen within `within` serves one of `profiles`. A worker
/// alone on its profiles starts jobs from their dispatch hints (the worker's `hints.rs`).
pub async fn others_serving(
    pool: &PgPool,
    id: &str,
    profiles: &[String],
    within: std::time::Duration,
) -> Result<bool, DbError> {
    let others = sqlx::query_scalar!(
        r#"
        SELECT EXISTS (
            SELECT 1 FROM workers
             WHERE id <> $1 AND profiles && $2
               AND seen_at > now() - make_interval(secs => $3)
        ) AS "others!"
        "#,
        id,
        profiles,
        within.as_secs_f64(),
    )
    .fetch_one(pool)
    .await?;
    Ok(others)
}
