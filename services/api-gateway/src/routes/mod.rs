//! Request handlers, one module per resource. Route files do not import each other: what
//! two of them need lives below them (`validate`, `routing`, `error`, or here).

pub mod actions;
pub mod comments;
pub mod continues;
pub mod files;
pub mod health;
pub mod history;
pub mod inbox;
pub mod mcp_logins;
pub mod me;
pub mod schedules;
pub mod space_files;
pub mod spaces;
pub mod stream;
pub mod tasks;
pub mod tokens;
pub mod webhooks;

use maestro_domain::{Access, Owner, TaskId};

use crate::error::ApiError;
use crate::state::AppState;

/// The gateway's URL as the caller reached it: `PUBLIC_URL` when set, else `http://<host>`
/// of the request (`https` behind a proxy that says `X-Forwarded-Proto: https`).
pub fn base_url(state: &AppState, headers: &axum::http::HeaderMap) -> String {
    if let Some(url) = &state.settings.public_url {
        return url.trim_end_matches('/').to_owned();
    }
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map_or_else(|| state.settings.addr.to_string(), str::to_owned);
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("http");
    format!("{scheme}://{host}")
}

/// Unknown routes answer in the API's error shape too.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("route")
}

/// Parse an id from the path; a malformed id names nothing, so it is a 404.
pub fn parse_id<T: std::str::FromStr>(raw: &str, what: &'static str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| ApiError::NotFound(what))
}

/// The task `raw` names, if the caller may see it (404 otherwise, malformed ids included).
pub async fn readable_task(
    state: &AppState,
    caller: &Owner,
    raw: &str,
) -> Result<TaskId, ApiError> {
    task_with(state, caller, raw, Access::Read).await
}

/// The task `raw` names, if the caller may read it, and whether they created it (what only
/// the creator gets, such as MCP login links, is kept from other readers).
pub async fn read_task_as(
    state: &AppState,
    caller: &Owner,
    raw: &str,
) -> Result<(TaskId, bool), ApiError> {
    let task_id: TaskId = parse_id(raw, "task")?;
    let reach = maestro_db::tasks::reach(&state.pool, caller, task_id).await?;
    check_access(reach.map(|(access, _)| access), Access::Read)?;
    Ok((task_id, reach.is_some_and(|(_, creator)| creator)))
}

/// The task `raw` names, if the caller may act on it: comment, decide, cancel, continue (404
/// when they may not see it, 403 when they may only read it).
pub async fn actable_task(state: &AppState, caller: &Owner, raw: &str) -> Result<TaskId, ApiError> {
    task_with(state, caller, raw, Access::Act).await
}

async fn task_with(
    state: &AppState,
    caller: &Owner,
    raw: &str,
    need: Access,
) -> Result<TaskId, ApiError> {
    let task_id: TaskId = parse_id(raw, "task")?;
    check_access(
        maestro_db::tasks::access(&state.pool, caller, task_id).await?,
        need,
    )?;
    Ok(task_id)
}

/// `Ok` when `has` covers `need`: 404 when the caller may not see the task, 403 when they may
/// only read it.
pub fn check_access(has: Option<Access>, need: Access) -> Result<(), ApiError> {
    match has {
        None => Err(ApiError::NotFound("task")),
        Some(has) if has < need => Err(ApiError::Forbidden(
            "you may read this task but not act on it (a viewer of its space)".to_owned(),
        )),
        Some(_) => Ok(()),
    }
}

/// A query string as `T`, or a 400 saying what is wrong with it.
pub fn query<T>(
    parsed: Result<axum::extract::Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T, ApiError> {
    parsed
        .map(|axum::extract::Query(q)| q)
        .map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))
}

/// `?limit=&before=` of a listing.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// How many (20 when absent).
    #[serde(default)]
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
    /// The cursor: the `next_before` of the previous page.
    #[serde(default)]
    pub before: Option<String>,
}

/// A page size: 20 when absent, 1 to 100.
pub fn page_limit(limit: Option<i64>) -> Result<i64, ApiError> {
    let limit = limit.unwrap_or(20);
    if (1..=100).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::bad_request("invalid_query", "limit is 1 to 100"))
    }
}

/// A `before` cursor of the query string, parsed as `T` (`what` names it in the 400).
pub fn before<T: std::str::FromStr>(raw: Option<&str>, what: &str) -> Result<Option<T>, ApiError> {
    raw.map(|raw| {
        raw.parse()
            .map_err(|_| ApiError::bad_request("invalid_query", format!("before is {what}")))
    })
    .transpose()
}
