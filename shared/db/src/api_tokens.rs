//! API tokens kept in the database: only the SHA-256 of each token is stored (a token is 256
//! random bits, so a fast hash cannot be searched back), with whom it stands for, whether it
//! may manage tokens, and when it expires or was revoked.

use chrono::{DateTime, Utc};
use maestro_domain::TokenId;
use sqlx::PgPool;

use crate::DbError;

/// A token as stored (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    pub id: TokenId,
    pub owner: String,
    pub name: String,
    pub admin: bool,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// What a new token is.
#[derive(Debug, Clone)]
pub struct NewToken<'a> {
    pub id: TokenId,
    pub owner: &'a str,
    pub name: &'a str,
    pub hash: &'a [u8],
    pub admin: bool,
    pub created_by: &'a str,
    pub expires_at: Option<DateTime<Utc>>,
}

/// Store a new token.
pub async fn create(pool: &PgPool, new: &NewToken<'_>) -> Result<StoredToken, DbError> {
    let row = sqlx::query!(
        r#"
        INSERT INTO api_tokens (id, owner, name, hash, admin, created_by, expires_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7)
        RETURNING created_at
        "#,
        new.id.0,
        new.owner,
        new.name,
        new.hash,
        new.admin,
        new.created_by,
        new.expires_at,
    )
    .fetch_one(pool)
    .await?;
    Ok(StoredToken {
        id: new.id,
        owner: new.owner.to_owned(),
        name: new.name.to_owned(),
        admin: new.admin,
        created_by: new.created_by.to_owned(),
        created_at: row.created_at,
        expires_at: new.expires_at,
        revoked_at: None,
    })
}

/// Whom the token with this hash stands for, and whether it is an admin token, if it is
/// neither revoked nor expired.
pub async fn find(pool: &PgPool, hash: &[u8]) -> Result<Option<(String, bool)>, DbError> {
    let row = sqlx::query!(
        r#"
        SELECT owner, admin FROM api_tokens
         WHERE hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
        "#,
        hash
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| (r.owner, r.admin)))
}

/// Every token, newest first (of one owner when given).
pub async fn list(pool: &PgPool, owner: Option<&str>) -> Result<Vec<StoredToken>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT id, owner, name, admin, created_by, created_at, expires_at, revoked_at
          FROM api_tokens WHERE $1::text IS NULL OR owner = $1
         ORDER BY id DESC
        "#,
        owner
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| StoredToken {
            id: TokenId(r.id),
            owner: r.owner,
            name: r.name,
            admin: r.admin,
            created_by: r.created_by,
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
        })
        .collect())
}

/// Revoke token `id` (again is a no-op); `false` when there is no such token.
pub async fn revoke(pool: &PgPool, id: TokenId) -> Result<bool, DbError> {
    let done = sqlx::query!(
        "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1",
        id.0
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}
