//! Authentication: every `/api` request carries `Authorization: Bearer <token>`, and the
//! token names its owner. Tokens are known by their SHA-256 only: those of `API_TOKENS` (in
//! memory) and those made through `/api/local/admin/tokens` (in Postgres, each lookup
//! remembered for `TOKEN_CACHE_MS`, so a revoked or expired token stops working within that
//! long), and, with `OIDC_JWKS_URL`, JWTs of an identity provider (`crate::oidc`; never admin
//! tokens). Handlers receive the owner as a [`Caller`], or an [`Admin`] on the token routes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use maestro_domain::Owner;
use sha2::{Digest as _, Sha256};

use crate::error::ApiError;
use crate::state::AppState;

/// The authenticated owner of the request.
#[derive(Debug, Clone)]
pub struct Caller(pub Owner);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        identify(state, &parts.headers)
            .await
            .map(|who| Caller(who.owner))
    }
}

/// The authenticated owner of a request that needs an admin token (403 for other tokens).
#[derive(Debug, Clone)]
pub struct Admin(pub Owner);

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let who = identify(state, &parts.headers).await?;
        if who.admin {
            Ok(Admin(who.owner))
        } else {
            Err(ApiError::Forbidden(
                "this needs an admin token (ADMIN_OWNERS, or a token made with admin: true)"
                    .to_owned(),
            ))
        }
    }
}

/// Whom a token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub owner: Owner,
    pub admin: bool,
}

/// The SHA-256 of a token: how every token is known.
pub fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The owner the request's bearer token names.
pub async fn owner(state: &AppState, headers: &HeaderMap) -> Result<Owner, ApiError> {
    identify(state, headers).await.map(|who| who.owner)
}

/// Who the request's bearer token stands for.
pub async fn identify(state: &AppState, headers: &HeaderMap) -> Result<Identity, ApiError> {
    let header = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    let token = header
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(ApiError::Unauthorized)?;
    let hash = hash(token);
    let who = match state.settings.tokens.get(&hash) {
        Some(owner) => Identity {
            owner: owner.clone(),
            admin: state.settings.admins.contains(owner),
        },
        None => match &state.oidc {
            Some(oidc) if crate::oidc::Oidc::is_jwt(token) => {
                let owner = oidc.owner(token).await.map_err(|reason| {
                    tracing::info!(%reason, "a JWT bearer token was refused");
                    ApiError::Unauthorized
                })?;
                Identity {
                    owner,
                    admin: false,
                }
            }
            _ => state
                .token_cache
                .lookup(&state.pool, hash, state.settings.token_cache)
                .await?
                .ok_or(ApiError::Unauthorized)?,
        },
    };
    tracing::Span::current().record("owner", who.owner.as_str());
    Ok(who)
}

/// Database token lookups, each remembered for a while (a miss too, so a stream of bad tokens
/// costs one query per token per period). At most [`TokenCache::MOST`] entries: when full,
/// the expired ones go, and if none has, all do.
#[derive(Debug, Default)]
pub struct TokenCache {
    known: Mutex<Known>,
}

/// Each token hash looked up, with whom it stands for (`None`: nobody) and when.
type Known = HashMap<[u8; 32], (Option<Identity>, Instant)>;

impl TokenCache {
    const MOST: usize = 10_000;

    async fn lookup(
        &self,
        pool: &maestro_db::PgPool,
        hash: [u8; 32],
        ttl: std::time::Duration,
    ) -> Result<Option<Identity>, ApiError> {
        if let Some((who, at)) = self.lock().get(&hash)
            && at.elapsed() < ttl
        {
            return Ok(who.clone());
        }
        let found = maestro_db::api_tokens::find(pool, &hash).await?;
        let who = found.and_then(|(owner, admin)| {
            Owner::parse(&owner)
                .ok()
                .map(|owner| Identity { owner, admin })
        });
        let mut known = self.lock();
        if known.len() >= Self::MOST {
            known.retain(|_, (_, at)| at.elapsed() < ttl);
            if known.len() >= Self::MOST {
                known.clear();
            }
        }
        known.insert(hash, (who.clone(), Instant::now()));
        Ok(who)
    }

    /// Forget every lookup (a token was revoked here).
    pub fn forget_all(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}
