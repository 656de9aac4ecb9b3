//! OAuth logins for remote MCP servers (`maestro_mcp_oauth`). A job whose remote server asked
//! for a login waits (`mcp_auth_required`) with a login URL on its item:
//!
//! - `GET /api/local/mcp/logins/{id}` — the login URL a person opens in a browser: MAESTRO
//!   discovers the server's authorization server, registers itself (or uses the policy's
//!   client), and redirects to the authorization server with a fresh PKCE challenge.
//! - `GET /api/local/mcp/oauth/callback` — where the authorization server sends the browser
//!   back: the code is exchanged, the grant stored for the task's owner and that server, and
//!   every job of that owner that waited for it resumes by itself.
//!
//! Neither takes a bearer token (a browser follows them): the login id and the `state` are
//! the secrets, 256 bits each, and a `state` is used once and expires after ten minutes.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maestro_api::ErrorBody;
use maestro_domain::Owner;
use maestro_mcp_oauth::LoginError;
use serde::Deserialize;

use crate::error::ApiError;
use crate::state::AppState;

/// Where the authorization server sends the browser back.
pub const CALLBACK: &str = "/api/local/mcp/oauth/callback";

impl From<LoginError> for ApiError {
    fn from(e: LoginError) -> Self {
        match e {
            LoginError::UnknownLogin => ApiError::NotFound("login"),
            LoginError::UnknownState => ApiError::NotFound("login request"),
            LoginError::Expired => ApiError::Conflict {
                code: "login_expired",
                message: e.to_string(),
            },
            LoginError::Refused(message) => ApiError::bad_request(
                "login_failed",
                format!("the login did not succeed: {message}; open the login link again"),
            ),
            LoginError::Db(e) => e.into(),
        }
    }
}

/// `GET /api/local/mcp/logins/{id}`
#[utoipa::path(
    get,
    path = "/api/local/mcp/logins/{id}",
    tag = "actions",
    summary = "Log in to a remote MCP server (opens the authorization server)",
    description = "The `login_url` of an `mcp_auth_required` item. Redirects the browser to the \
        MCP server's authorization server (authorization code with PKCE); the login link stays \
        valid until the login completes.",
    params(("id" = String, Path, description = "The login's id (from the item's login_url)")),
    security(()),
    responses(
        (status = 303, description = "To the authorization server"),
        (status = "4XX", description = "No such login, or the server's authorization could not be discovered", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn start(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if id.len() != 64 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(ApiError::NotFound("login"));
    }
    let redirect_uri = format!("{}{CALLBACK}", super::base_url(&state, &headers));
    let url = maestro_mcp_oauth::authorization_url(&state.pool, &id, &redirect_uri).await;
    Ok(Redirect::to(&url?).into_response())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    /// The authorization code (on success).
    code: Option<String>,
    /// The authorization request this answers.
    state: Option<String>,
    /// The authorization server's issuer (RFC 9207), checked when present.
    iss: Option<String>,
    /// Why the authorization server refused (`access_denied`, …).
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /api/local/mcp/oauth/callback`
#[utoipa::path(
    get,
    path = "/api/local/mcp/oauth/callback",
    tag = "actions",
    summary = "Where the authorization server sends the browser back after an MCP login",
    params(CallbackQuery),
    security(()),
    responses(
        (status = 200, description = "Logged in; the jobs that waited resume", content_type = "text/html", body = String),
        (status = "4XX", description = "Refused, expired, already used or unknown: the item keeps waiting and says why", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn callback(
    State(state): State<AppState>,
    query: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let query = super::query(query)?;
    let Some(request) = query
        .state
        .as_deref()
        .filter(|s| !s.is_empty() && s.len() <= 512)
    else {
        return Err(ApiError::bad_request(
            "invalid_callback",
            "the callback has no state: open the login link again",
        ));
    };
    if let Some(error) = &query.error {
        let why = match &query.error_description {
            Some(description) => {
                format!("the authorization server refused: {error} ({description})")
            }
            None => format!("the authorization server refused: {error}"),
        };
        let login = maestro_mcp_oauth::refused(&state.pool, request, &why).await?;
        tracing::info!(server = %login.server, %error, "MCP login refused");
        return Err(ApiError::bad_request(
            "login_refused",
            format!("{why}; the task keeps waiting: open the login link again to retry"),
        ));
    }
    let Some(code) = query.code.as_deref().filter(|c| !c.is_empty()) else {
        return Err(ApiError::bad_request(
            "invalid_callback",
            "the callback has neither a code nor an error",
        ));
    };
    let login =
        maestro_mcp_oauth::complete(&state.pool, request, code, query.iss.as_deref()).await?;
    let owner = Owner::parse(&login.owner)
        .map_err(|_| ApiError::Unexpected(anyhow::anyhow!("a login of an unreadable owner")))?;
    let (resumed, after) =
        maestro_pauses::resume_authorized(&state.pool, &owner, &login.server).await?;
    state.bus.after_commit(after).await;
    tracing::info!(server = %login.server, resumed, "MCP login completed");
    let page = format!(
        "<!doctype html><meta charset=utf-8><title>MAESTRO: logged in</title>\
         <h1>Logged in to {server}</h1><p>{resumed} waiting job(s) resume now. \
         You can close this page.</p>",
        server = html_escape(&login.server),
    );
    Ok(([(header::CACHE_CONTROL, "no-store")], Html(page)).into_response())
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A login URL the worker wrote as a path (it knows no `PUBLIC_URL`), made absolute on the
/// gateway the person reached.
pub fn absolute_login_url(detail: &mut serde_json::Map<String, serde_json::Value>, base: &str) {
    if let Some(serde_json::Value::String(url)) = detail.get_mut("login_url")
        && url.starts_with('/')
    {
        *url = format!("{base}{url}");
    }
}
