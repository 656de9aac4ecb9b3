//! `POST /api/local/tasks/{id}/continue` (SPEC §3.3): a finished task carries on in a new job
//! with a new instruction. The job replays the task's transcript when it opens (the worker's
//! part, SPEC §5); here the request is checked and recorded: the caller owns the task (404),
//! the piece and model exist (422), the latest job is over (409 naming its state: a paused job
//! is answered or decided, not continued). With an `Idempotency-Key`, a repeat returns the
//! task as the first request left it.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maestro_api::{ContinueTask, Task};
use maestro_db::continues::{self, Continued, NewContinue};
use maestro_domain::{JobId, Owner, TaskId};
use maestro_messaging::AfterCommit;

use super::owned_task;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::json::ApiJson;
use crate::state::AppState;
use crate::validate;

/// How often the latest job is read again when it changed under the insert.
const ATTEMPTS: usize = 3;

/// A validated [`ContinueTask`] and its hash.
struct Valid {
    instruction: String,
    piece: Option<String>,
    model: Option<String>,
    hash: String,
}

fn validate(state: &AppState, body: ContinueTask) -> Result<Valid, ApiError> {
    let settings = &state.settings;
    let instruction = validate::instruction(settings, &body.instruction)?;
    if let Some(piece) = &body.piece {
        validate::piece(settings, piece, None)?;
    }
    if let Some(model) = &body.model {
        validate::model(settings, model)?;
    }
    let hash = validate::request_hash(&[
        "continue",
        &instruction,
        body.piece.as_deref().unwrap_or(""),
        body.model.as_deref().unwrap_or(""),
    ]);
    Ok(Valid {
        instruction,
        piece: body.piece,
        model: body.model,
        hash,
    })
}

/// `POST /api/local/tasks/{id}/continue`: queue a job that carries the finished task on.
/// Answers `202` with the task, its latest job now the new one.
pub async fn create(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<ContinueTask>,
) -> Result<Response, ApiError> {
    let task_id = owned_task(&state, &owner, &id).await?;
    let key = validate::idempotency_key(&headers)?;
    let valid = validate(&state, body)?;
    if let Some(key) = key.as_deref()
        && let Some(found) = continues::find_by_key(&state.pool, task_id, key).await?
    {
        return replay(&state, &owner, task_id, found, &valid.hash).await;
    }
    for _ in 0..ATTEMPTS {
        let Some((from, status, waiting)) = maestro_db::jobs::latest(&state.pool, task_id).await?
        else {
            return Err(ApiError::Unexpected(anyhow::anyhow!(
                "task {task_id} has no job"
            )));
        };
        if !status.is_terminal() {
            return Err(ApiError::not_over(status, waiting));
        }
        let job_id = JobId::new();
        let new = NewContinue {
            task_id,
            job_id,
            from,
            author: &owner,
            instruction: &valid.instruction,
            piece: valid.piece.as_deref(),
            model: valid.model.as_deref(),
            idempotency_key: key.as_deref(),
            request_hash: &valid.hash,
            max_attempts: state.settings.job_max_attempts,
        };
        match continues::insert(&state.pool, &new).await? {
            Continued::Created { job_no, .. } => {
                tracing::info!(%task_id, %job_id, job_no, from = %from, "task continued");
                let after = AfterCommit::new_job(task_id, job_id);
                state.bus.after_commit(after).await;
                let task = task(&state, &owner, task_id).await?;
                return Ok((StatusCode::ACCEPTED, Json(task)).into_response());
            }
            Continued::KeyUsed => {
                let key = key.as_deref().unwrap_or_default();
                let found = continues::find_by_key(&state.pool, task_id, key).await?;
                let found = found.ok_or_else(|| {
                    ApiError::Unexpected(anyhow::anyhow!("idempotency key conflict without a job"))
                })?;
                return replay(&state, &owner, task_id, found, &valid.hash).await;
            }
            // Another job started or ended meanwhile: read the latest again.
            Continued::Busy => continue,
        }
    }
    Err(ApiError::Conflict {
        code: "busy",
        message: "the task changed state while it was continued; retry".to_owned(),
    })
}

/// The answer to a repeated Continue: the task as it is now, if the key was used for the
/// same request.
async fn replay(
    state: &AppState,
    owner: &Owner,
    task_id: TaskId,
    (job_id, stored_hash): (JobId, Option<String>),
    hash: &str,
) -> Result<Response, ApiError> {
    if stored_hash.as_deref() != Some(hash) {
        return Err(ApiError::Conflict {
            code: "idempotency_key_reused",
            message: "this Idempotency-Key was used for a different request".to_owned(),
        });
    }
    tracing::debug!(%task_id, %job_id, "continue repeated");
    let mut response = (StatusCode::OK, Json(task(state, owner, task_id).await?)).into_response();
    response
        .headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    Ok(response)
}

async fn task(state: &AppState, owner: &Owner, task_id: TaskId) -> Result<Task, ApiError> {
    let task = maestro_db::tasks::get(&state.pool, owner, task_id)
        .await?
        .ok_or(ApiError::NotFound("task"))?;
    Ok(Task::new(task))
}
