//! All of MAESTRO's SQL. One module per aggregate; functions take a pool or a connection so
//! the caller owns the transaction. Writes on the job path are single statements (CTEs), so
//! each state change is one round trip and one commit.

pub mod actions;
pub mod comments;
pub mod dead_letters;
pub mod events;
pub mod jobs;
pub mod operations;
pub mod outbox;
pub mod subtasks;
pub mod tasks;
pub mod webhooks;

use std::time::Duration;

pub use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// A database error, or stored data this version cannot read.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database error (usually safe to retry): {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("stored data is not readable: {0}")]
    Corrupt(String),
}

/// The migrations in the repository's `migrations/` folder, embedded in every binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Open a pool. Connection attempts are retried by the pool, so a database that is briefly
/// down at start-up delays the service instead of failing it.
///
/// Connections are not pinged before each use (that would add a round trip to every query
/// on the job path); a connection broken by a database restart fails its next query, is
/// dropped, and the caller's retry gets a fresh one.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .connect(url)
        .await
}

/// Apply the migrations that have not been applied yet.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// Check the database answers.
pub async fn ping(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT 1").execute(pool).await.map(|_| ())
}
