//! Owners' tokens for MCP servers that need authorization. Never returned by the API and
//! never logged.

use maestro_domain::Owner;
use sqlx::PgPool;

use crate::DbError;

/// Store (or replace) `owner`'s token for the MCP server `server`.
pub async fn put(pool: &PgPool, owner: &Owner, server: &str, token: &str) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        INSERT INTO mcp_tokens (owner, server, token) VALUES ($1, $2, $3)
        ON CONFLICT (owner, server) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
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
