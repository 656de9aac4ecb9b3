//! Owners' tokens for MCP servers that need authorization. Never returned by the API and
//! never logged; sealed at rest ([`crate::sealed`]).

use chrono::{DateTime, Utc};
use maestro_domain::Owner;
use serde_json::Value;
use sqlx::PgPool;

use crate::DbError;
use crate::sealed;

fn token_context(owner: &str, server: &str) -> String {
    format!("mcp_tokens.token/{owner}/{server}")
}

fn grant_context(owner: &str, server: &str) -> String {
    format!("mcp_tokens.credentials/{owner}/{server}")
}

/// A grant as stored: sealed, it is a JSON string holding the sealed JSON text.
fn seal_grant(owner: &str, server: &str, credentials: &Value) -> Value {
    if sealed::sealing() {
        Value::String(sealed::seal(
            &credentials.to_string(),
            &grant_context(owner, server),
        ))
    } else {
        credentials.clone()
    }
}

fn open_grant(owner: &str, server: &str, stored: Value) -> Result<Value, DbError> {
    match stored {
        Value::String(text) => {
            let plain = sealed::open(&text, &grant_context(owner, server))?;
            serde_json::from_str(&plain)
                .map_err(|e| DbError::corrupt(format!("an MCP grant is not JSON: {e}")))
        }
        other => Ok(other),
    }
}

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
        sealed::seal(token, &token_context(owner.as_str(), server)),
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
    rows.into_iter()
        .map(|r| {
            let token = sealed::open(&r.token, &token_context(owner, &r.server))?;
            Ok((r.server, token))
        })
        .collect()
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
    row.flatten()
        .map(|stored| open_grant(owner, server, stored))
        .transpose()
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
        sealed::seal(access_token, &token_context(owner, server)),
        seal_grant(owner, server, credentials),
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
    rows.into_iter()
        .map(|r| {
            let token = sealed::open(&r.token, &token_context(owner, &r.server))?;
            Ok((r.server, token, r.expires_at, r.grant))
        })
        .collect()
}
