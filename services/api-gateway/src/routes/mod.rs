//! Request handlers, one module per resource. Route files do not import each other: what
//! two of them need lives below them (`validate`, `routing`, `error`, or here).

pub mod actions;
pub mod comments;
pub mod continues;
pub mod files;
pub mod health;
pub mod history;
pub mod stream;
pub mod tasks;
pub mod webhooks;

use maestro_domain::{Owner, TaskId};

use crate::error::ApiError;
use crate::state::AppState;

/// Unknown routes answer in the API's error shape too.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("route")
}

/// Parse an id from the path; a malformed id names nothing, so it is a 404.
pub fn parse_id<T: std::str::FromStr>(raw: &str, what: &'static str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| ApiError::NotFound(what))
}

/// The task `raw` names, if the caller owns it (404 otherwise, malformed ids included).
pub async fn owned_task(state: &AppState, owner: &Owner, raw: &str) -> Result<TaskId, ApiError> {
    let task_id: TaskId = parse_id(raw, "task")?;
    if maestro_db::tasks::exists(&state.pool, owner, task_id).await? {
        Ok(task_id)
    } else {
        Err(ApiError::NotFound("task"))
    }
}
