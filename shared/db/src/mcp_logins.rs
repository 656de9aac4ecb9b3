//! OAuth logins for remote MCP servers: the login an owner has to complete for a server, the
//! authorization requests sent to the browser (PKCE verifier and state, used once), and the
//! grants that result (kept in `mcp_tokens`, beside the static tokens). Secrets here are
//! never returned by the API and never logged.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;

use crate::DbError;

/// A login an owner has to complete for a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    pub id: String,
    pub owner: String,
    pub server: String,
    pub url: String,
    pub challenge: String,
    /// A client registered out of band (the policy's `oauth`).
    pub client: Option<Value>,
    pub last_error: Option<String>,
}

/// The login of `owner` for `server`, opened now or kept (with its id, so a login URL already
/// shown keeps working) with the server's newest endpoint and challenge. Returns its id.
pub async fn open(
    pool: &PgPool,
    fresh_id: &str,
    owner: &str,
    server: &str,
    url: &str,
    challenge: &str,
    client: Option<&Value>,
) -> Result<String, DbError> {
    let id = sqlx::query_scalar!(
        r#"
        INSERT INTO mcp_logins (id, owner, server, url, challenge, client)
        VALUES ($1, $2, $3, $4, $5, $6)
        ON CONFLICT (owner, server) DO UPDATE
           SET url = EXCLUDED.url, challenge = EXCLUDED.challenge, client = EXCLUDED.client
        RETURNING id
        "#,
        fresh_id,
        owner,
        server,
        url,
        challenge,
        client
    )
    .fetch_one(pool)
    .await?;
    Ok(id)
}

/// The login `id`.
pub async fn get(pool: &PgPool, id: &str) -> Result<Option<Login>, DbError> {
    let row = sqlx::query_as!(
        Login,
        "SELECT id, owner, server, url, challenge, client, last_error FROM mcp_logins WHERE id = $1",
        id
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

/// Record why the last attempt of login `id` failed.
pub async fn failed(pool: &PgPool, id: &str, error: &str) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE mcp_logins SET last_error = $2 WHERE id = $1",
        id,
        error
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The login is done: it and its open authorization requests go.
pub async fn close(pool: &PgPool, id: &str) -> Result<(), DbError> {
    sqlx::query!("DELETE FROM mcp_logins WHERE id = $1", id)
        .execute(pool)
        .await?;
    Ok(())
}

/// One authorization request sent to the browser.
#[derive(Debug, Clone, PartialEq)]
pub struct LoginState {
    pub login_id: String,
    /// The OAuth client it was made with.
    pub client: Value,
    /// rmcp's `StoredAuthorizationState` (the PKCE verifier).
    pub state: Value,
    pub created_at: DateTime<Utc>,
}

/// Keep an authorization request (its `state` parameter is `csrf`).
pub async fn put_state(
    pool: &PgPool,
    csrf: &str,
    login_id: &str,
    client: &Value,
    state: &Value,
) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        INSERT INTO mcp_login_states (csrf, login_id, client, state) VALUES ($1, $2, $3, $4)
        ON CONFLICT (csrf) DO UPDATE SET state = EXCLUDED.state
        "#,
        csrf,
        login_id,
        client,
        state
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The authorization request whose `state` parameter is `csrf`.
pub async fn state(pool: &PgPool, csrf: &str) -> Result<Option<LoginState>, DbError> {
    let row = sqlx::query_as!(
        LoginState,
        "SELECT login_id, client, state, created_at FROM mcp_login_states WHERE csrf = $1",
        csrf
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

/// Forget the authorization request `csrf` (used, or expired).
pub async fn delete_state(pool: &PgPool, csrf: &str) -> Result<(), DbError> {
    sqlx::query!("DELETE FROM mcp_login_states WHERE csrf = $1", csrf)
        .execute(pool)
        .await?;
    Ok(())
}
