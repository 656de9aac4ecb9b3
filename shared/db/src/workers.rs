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
