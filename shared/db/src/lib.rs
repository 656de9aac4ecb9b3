//! All of MAESTRO's SQL. One module per aggregate. This crate stores and loads; it does not
//! decide: what happens next is the domain's (pure functions in `maestro_domain`), and the
//! service composes the two. Functions that stand alone take a pool (or any executor);
//! functions that must run inside a caller's transaction take `&mut PgConnection`, so the
//! caller owns the transaction boundary ([`begin`]). Writes on the job path are single
//! statements (CTEs), so each state change there is one round trip and one commit.

pub mod a2a;
pub mod actions;
pub mod api_tokens;
pub mod attachments;
pub mod claims;
pub mod comments;
pub mod continues;
pub mod dead_letters;
pub mod events;
pub mod grants;
pub mod inbox;
pub mod jobs;
pub mod mcp_logins;
pub mod mcp_tokens;
pub mod operations;
pub mod outbox;
mod parse;
pub mod schedules;
pub mod sealed;
pub mod spaces;
pub mod stats;
pub mod subtasks;
pub mod tasks;
pub mod webhooks;
pub mod workers;

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
pub use sqlx::{PgConnection, PgPool};

/// A transaction a service owns: begin it with [`begin`], pass `&mut tx` to the functions
/// that run inside it, and commit it with [`commit`].
pub type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

/// A database error, or stored data this version cannot read. Callers tell the kinds apart
/// by variant; the driver's error is only the source.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No connection (the database is down, restarting or saturated).
    #[error("the database is unavailable (safe to retry): {0}")]
    Unavailable(#[source] sqlx::Error),
    /// A concurrent transaction won a lock race (a deadlock or a serialization failure).
    #[error("a concurrent change got in the way (safe to retry): {0}")]
    Contention(#[source] sqlx::Error),
    /// The database refused the data itself (SQLSTATE class 22, data exception, or 23, an
    /// integrity constraint other than a unique key): the same write would be refused again,
    /// so it is not retried.
    #[error("the database refused the data (not safe to retry): {0}")]
    Rejected(#[source] sqlx::Error),
    #[error("database error (usually safe to retry): {0}")]
    Query(#[source] sqlx::Error),
    #[error("stored data is not readable: {0}")]
    Corrupt(String),
}

impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                DbError::Unavailable(e)
            }
            sqlx::Error::Database(db)
                if matches!(db.code().as_deref(), Some("40P01" | "40001")) =>
            {
                DbError::Contention(e)
            }
            sqlx::Error::Database(db)
                if db.code().is_some_and(|c| {
                    (c.starts_with("22") || c.starts_with("23")) && c != "23505"
                }) =>
            {
                DbError::Rejected(e)
            }
            _ => DbError::Query(e),
        }
    }
}

impl DbError {
    pub(crate) fn corrupt(what: impl std::fmt::Display) -> Self {
        DbError::Corrupt(what.to_string())
    }
}

/// Begin a transaction.
pub async fn begin(pool: &PgPool) -> Result<Tx, DbError> {
    Ok(pool.begin().await?)
}

/// Commit a transaction.
pub async fn commit(tx: Tx) -> Result<(), DbError> {
    Ok(tx.commit().await?)
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
