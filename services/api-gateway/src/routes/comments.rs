//! `/api/local/tasks/{id}/comments` and `/cancel`: the two ways a person reaches a task's job.
//! Where a comment goes is `crate::routing`'s (SPEC §3.2).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use maestro_api::ErrorBody;
use maestro_api::{CommentList, NewComment, RoutedComment, Task};

use super::{actable_task, readable_task};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::json::ApiJson;
use crate::state::AppState;

/// `POST /api/local/tasks/{id}/comments`
#[utoipa::path(
    post,
    path = "/api/local/tasks/{id}/comments",
    tag = "comments",
    summary = "Comment on a task: an interjection into its running job, or a new job",
    params(("id" = String, Path, description = "The task id")),
    request_body = NewComment,
    responses(
        (status = 201, description = "Where the comment went", body = RoutedComment),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<NewComment>,
) -> Result<(StatusCode, Json<RoutedComment>), ApiError> {
    super::parse_id::<maestro_domain::TaskId>(&id, "task")?;
    let text = body.body.trim();
    if text.is_empty() {
        return Err(ApiError::invalid(
            "invalid_comment",
            "body must not be empty",
        ));
    }
    if text.len() > state.settings.max_instruction_bytes {
        return Err(ApiError::invalid(
            "comment_too_long",
            "the comment is longer than an instruction may be",
        ));
    }
    let task_id = actable_task(&state, &owner, &id).await?;
    let said = maestro_db::comments::Said::new(&owner, text);
    let routed = crate::routing::comment(&state, task_id, said).await?;
    Ok((StatusCode::CREATED, Json(routed)))
}

/// `GET /api/local/tasks/{id}/comments`
#[utoipa::path(
    get,
    path = "/api/local/tasks/{id}/comments",
    tag = "comments",
    summary = "The task's comments",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, body = CommentList),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<CommentList>, ApiError> {
    let task_id = readable_task(&state, &owner, &id).await?;
    Ok(Json(CommentList {
        comments: maestro_db::comments::list(&state.pool, task_id).await?,
    }))
}

/// `POST /api/local/tasks/{id}/cancel`: the latest job ends `cancelled` at once, whether a
/// worker runs it or not, and so does the latest job of every task below it (its subtasks,
/// theirs...); a running worker is told to stop, and its tool processes are killed.
#[utoipa::path(
    post,
    path = "/api/local/tasks/{id}/cancel",
    tag = "tasks",
    summary = "Cancel the task's running or waiting job",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, body = Task),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn cancel(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<Task>, ApiError> {
    let task_id = actable_task(&state, &owner, &id).await?;
    crate::usecases::cancel(&state, &owner, task_id).await?;
    let task = maestro_db::tasks::get(&state.pool, &owner, task_id)
        .await?
        .ok_or(ApiError::NotFound("task"))?;
    Ok(Json(Task::new(task)))
}
