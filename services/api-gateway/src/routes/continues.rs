//! `POST /api/local/tasks/{id}/continue` (SPEC §3.3): a finished task carries on in a new job
//! with a new instruction. The job replays the task's transcript when it opens (the worker's
//! part, SPEC §5); here the request is checked and recorded (`crate::usecases::continue_task`):
//! the caller owns the task (404), the piece and model exist (422), the latest job is over
//! (409 naming its state: a paused job is answered or decided, not continued). With an
//! `Idempotency-Key`, a repeat returns the task as the first request left it.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maestro_api::ErrorBody;
use maestro_api::{ContinueTask, Task};

use super::actable_task;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::json::ApiJson;
use crate::state::AppState;
use crate::usecases::{self, Continued};
use crate::validate;

/// `POST /api/local/tasks/{id}/continue`: queue a job that carries the finished task on.
/// Answers `202` with the task, its latest job now the new one (`200` and
/// `Idempotent-Replayed: true` for a repeat).
#[utoipa::path(
    post,
    path = "/api/local/tasks/{id}/continue",
    tag = "tasks",
    summary = "Continue a finished task with a new instruction and its whole history",
    params(("id" = String, Path, description = "The task id"), ("Idempotency-Key" = Option<String>, Header, description = "Retries with the same key answer the same job")),
    request_body = ContinueTask,
    responses(
        (status = 202, description = "The task goes on in a new job, queued", body = Task),
        (status = 200, description = "Already answered for this Idempotency-Key", body = Task),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<ContinueTask>,
) -> Result<Response, ApiError> {
    let task_id = actable_task(&state, &owner, &id).await?;
    let key = validate::idempotency_key(&headers)?;
    let asked = usecases::Asked {
        key,
        message_id: None,
    };
    let continued = usecases::continue_task(&state, &owner, task_id, body, asked).await?;
    let task = maestro_db::tasks::get(&state.pool, &owner, task_id)
        .await?
        .ok_or(ApiError::NotFound("task"))?;
    let mut response = match continued {
        Continued::Created => (StatusCode::ACCEPTED, Json(Task::new(task))).into_response(),
        Continued::Repeated => (StatusCode::OK, Json(Task::new(task))).into_response(),
    };
    if continued == Continued::Repeated {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}
