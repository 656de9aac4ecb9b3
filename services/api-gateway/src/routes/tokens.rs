//! `/api/local/admin/tokens`: API tokens made, listed and revoked by an admin. A token is
//! `mst_` and 43 characters of base64url (256 random bits); only its SHA-256 is stored, and it
//! is shown once, in the answer that made it.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use base64::Engine as _;
use chrono::Utc;
use maestro_api::{CreateToken, ErrorBody, TokenInfo, TokenList};
use maestro_db::api_tokens::{self, NewToken, StoredToken};
use maestro_domain::{Owner, TokenId};

use super::{parse_id, query};
use crate::auth::Admin;
use crate::error::ApiError;
use crate::json::ApiJson;
use crate::state::AppState;

/// `POST /api/local/admin/tokens`: make a token (shown once).
#[utoipa::path(
    post,
    path = "/api/local/admin/tokens",
    tag = "admin",
    summary = "Make an API token (admins); the token is in this answer only",
    request_body = CreateToken,
    responses(
        (status = 201, body = TokenInfo),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Admin(admin): Admin,
    ApiJson(body): ApiJson<CreateToken>,
) -> Result<(StatusCode, Json<TokenInfo>), ApiError> {
    let owner =
        Owner::parse(&body.owner).map_err(|e| ApiError::invalid("invalid_owner", e.to_string()))?;
    let name = body.name.trim();
    if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "invalid_name",
            "a token's name is 1 to 200 characters, no control characters",
        ));
    }
    if body.expires_at.is_some_and(|at| at <= Utc::now()) {
        return Err(ApiError::invalid(
            "invalid_expiry",
            "expires_at is in the past",
        ));
    }
    let token = new_token();
    let hash = crate::auth::hash(&token);
    let new = NewToken {
        id: TokenId::new(),
        owner: owner.as_str(),
        name,
        hash: &hash,
        admin: body.admin,
        created_by: admin.as_str(),
        expires_at: body.expires_at,
    };
    let stored = api_tokens::create(&state.pool, &new).await?;
    tracing::info!(token_id = %stored.id, owner = %owner, admin = body.admin, "API token made");
    let mut info = view(stored);
    info.token = Some(token);
    Ok((StatusCode::CREATED, Json(info)))
}

/// `?owner=` of the listing.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this owner's tokens.
    #[serde(default)]
    pub owner: Option<String>,
}

/// `GET /api/local/admin/tokens`
#[utoipa::path(
    get,
    path = "/api/local/admin/tokens",
    tag = "admin",
    summary = "The API tokens, newest first, without the tokens themselves (admins)",
    params(ListQuery),
    responses(
        (status = 200, body = TokenList),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Admin(_admin): Admin,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<TokenList>, ApiError> {
    let q = query(q)?;
    let tokens = api_tokens::list(&state.pool, q.owner.as_deref()).await?;
    Ok(Json(TokenList {
        tokens: tokens.into_iter().map(view).collect(),
    }))
}

/// `DELETE /api/local/admin/tokens/{id}`: revoke a token (at once here; within
/// `TOKEN_CACHE_MS` on other gateways).
#[utoipa::path(
    delete,
    path = "/api/local/admin/tokens/{id}",
    tag = "admin",
    summary = "Revoke an API token (admins)",
    params(("id" = String, Path, description = "The token's id")),
    responses(
        (status = 204, description = "Revoked (or already was)"),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn revoke(
    State(state): State<AppState>,
    Admin(admin): Admin,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id: TokenId = parse_id(&id, "token")?;
    if !api_tokens::revoke(&state.pool, id).await? {
        return Err(ApiError::NotFound("token"));
    }
    state.token_cache.forget_all();
    tracing::info!(token_id = %id, by = %admin, "API token revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// A fresh token: `mst_` and 256 random bits in base64url.
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system provides randomness");
    format!(
        "mst_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

fn view(t: StoredToken) -> TokenInfo {
    TokenInfo {
        id: t.id,
        owner: t.owner,
        name: t.name,
        admin: t.admin,
        created_by: t.created_by,
        created_at: t.created_at,
        expires_at: t.expires_at,
        revoked_at: t.revoked_at,
        token: None,
    }
}
