//! Authentication: every `/api` request carries `Authorization: Bearer <token>`, and the
//! token names its owner. Handlers receive the owner as a [`Caller`].

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use maestro_domain::Owner;

use crate::error::ApiError;
use crate::state::AppState;

/// The authenticated owner of the request.
#[derive(Debug, Clone)]
pub struct Caller(pub Owner);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        owner(state, &parts.headers).map(Caller)
    }
}

/// The owner the request's bearer token names.
pub fn owner(state: &AppState, headers: &HeaderMap) -> Result<Owner, ApiError> {
    let header = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    let token = header
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim)
        .ok_or(ApiError::Unauthorized)?;
    let owner = state
        .settings
        .tokens
        .get(token)
        .ok_or(ApiError::Unauthorized)?;
    tracing::Span::current().record("owner", owner.as_str());
    Ok(owner.clone())
}
