//! Owners' tokens for MCP servers that need authorization. Never returned by the API and
//! never logged.

use chrono::{DateTime, Utc};
use maestro_domain::Owner;
use serde_json::Value;
use sqlx::PgPool;

use crate::DbError;

/// Store (or replace) `owner`'s token for the MCP server `server`.
pub async fn put(pool: &PgPool, owner: &Owner, server: &str, token: &str) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        INSERT INTO mcp_tokens (owner, server, token) VALUES ($1, $2, $3)
        ON CONFLICT (owner, server) DO UPDATE
           SET token = EXCLUDED.token, credentials = NULL, expires_at = NULL, updated_at = now()
        "#,
        owner.as_str(),
        server,
        token
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// `owner`'s tokens for `servers`: `(server, token)`.
pub async fn of_owner(
    pool: &PgPool,
    owner: &str,
    servers: &[String],
) -> Result<Vec<(String, String)>, DbError> {
    let rows = sqlx::query!(
        "SELECT server, token FROM mcp_tokens WHERE owner = $1 AND server = ANY($2)",
        owner,
        servers
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.server, r.token)).collect())
}

/// `owner`'s OAuth grant for `server` (rmcp's stored credentials), if any.
pub async fn grant(pool: &PgPool, owner: &str, server: &str) -> Result<Option<Value>, DbError> {
    let row = sqlx::query_scalar!(
        "SELECT credentials FROM mcp_tokens WHERE owner = $1 AND server = $2",
        owner,
        server
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.flatten())
}

/// Store `owner`'s OAuth grant for `server`: the grant itself, its access token (what jobs
/// use) and when that expires.
pub async fn put_grant(
    pool: &PgPool,
    owner: &str,
    server: &str,
    credentials: &Value,
    access_token: &str,
    expires_at: Option<DateTime<Utc>>,
) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        INSERT INTO mcp_tokens (owner, server, token, credentials, expires_at)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (owner, server) DO UPDATE
           SET token = EXCLUDED.token, credentials = EXCLUDED.credentials,
               expires_at = EXCLUDED.expires_at, updated_at = now()
        "#,
        owner,
        server,
        access_token,
        credentials,
        expires_at
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Forget `owner`'s token or grant for `server` (refused by the server: a new login is due).
pub async fn delete(pool: &PgPool, owner: &str, server: &str) -> Result<(), DbError> {
    sqlx::query!(
        "DELETE FROM mcp_tokens WHERE owner = $1 AND server = $2",
        owner,
        server
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// `owner`'s tokens for `servers` with when each expires: `(server, token, expires_at,
/// is_grant)`.
pub async fn of_owner_with_expiry(
    pool: &PgPool,
    owner: &str,
    servers: &[String],
) -> Result<Vec<(String, String, Option<DateTime<Utc>>, bool)>, DbError> {
    let rows = sqlx::query!(
        r#"SELECT server, token, expires_at, credentials IS NOT NULL AS "grant!"
           FROM mcp_tokens WHERE owner = $1 AND server = ANY($2)"#,
        owner,
        servers
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.server, r.token, r.expires_at, r.grant))
        .collect())
}
