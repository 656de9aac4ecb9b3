//! Messages a consumer gave up on, kept for inspection and manual replay.

use sqlx::PgPool;

use crate::DbError;

/// A message being given up on.
#[derive(Debug, Clone, Copy)]
pub struct DeadLetter<'a> {
    pub consumer: &'a str,
    pub subject: &'a str,
    pub payload: &'a [u8],
    pub reason: &'a str,
    pub attempts: i32,
}

pub async fn record(pool: &PgPool, letter: DeadLetter<'_>) -> Result<(), DbError> {
    sqlx::query!(
        "INSERT INTO dead_letters (consumer, subject, payload, reason, attempts) VALUES ($1, $2, $3, $4, $5)",
        letter.consumer,
        letter.subject,
        letter.payload,
        letter.reason,
        letter.attempts
    )
    .execute(pool)
    .await?;
    Ok(())
}
