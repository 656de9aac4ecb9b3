//! `/api/local/tasks/{id}/comments` and `/cancel`: the two ways a person reaches a task's job.
//!
//! A comment is routed by the state of the task's latest job (SPEC §3.2): while the job can
//! still take one (queued, running, waiting to retry or for subtasks) it becomes an
//! interjection, delivered into the conversation at the job's next step; while the job waits
//! for a decision (an approval, a token, a side effect) it is refused (409) and writes
//! nothing; while the job waits for the answer to its question it is that answer, and a
//! follow-up job resumes in the asking movement; when the job is over (or there is none) it
//! starts a follow-up job. Both writes are guarded on the job row, so a comment racing the
//! job's end is routed by the state that won.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use bytes::Bytes;
use maestro_db::comments::{self, Comment};
use maestro_domain::{JobId, JobStatus, TaskId};
use maestro_messaging::payloads::{JobControl, JobDispatch};
use serde::{Deserialize, Serialize};

use super::parse_id;
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::json::ApiJson;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewComment {
    body: String,
}

#[derive(Debug, Serialize)]
pub struct Routed {
    #[serde(flatten)]
    comment: Comment,
    /// `interjection`, `answer` (to the job's question) or `follow_up`.
    routed_to: &'static str,
}

/// `POST /api/local/tasks/{id}/comments`
pub async fn create(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<NewComment>,
) -> Result<(StatusCode, Json<Routed>), ApiError> {
    let task_id: TaskId = parse_id(&id, "task")?;
    let text = body.body.trim().to_owned();
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
    if !maestro_db::tasks::exists(&state.pool, &owner, task_id).await? {
        return Err(ApiError::NotFound("task"));
    }
    // The job may change state between the look and the write; the write is guarded, so try
    // again with the state that won.
    for _ in 0..3 {
        let latest = maestro_db::jobs::latest(&state.pool, task_id).await?;
        match latest {
            Some((job_id, status, _)) if accepts_interjections(status) => {
                if let Some(comment) =
                    comments::interject(&state.pool, task_id, job_id, &owner, &text).await?
                {
                    signal(&state, job_id, JobControl::Interjection).await;
                    return Ok((
                        StatusCode::CREATED,
                        Json(Routed {
                            comment,
                            routed_to: "interjection",
                        }),
                    ));
                }
            }
            Some((_, status @ JobStatus::WaitingHuman, reason)) => {
                if let Some(conflict) = super::actions::comment_conflict(status, reason.as_deref())
                {
                    return Err(conflict);
                }
                // The comment answers the job's question: a follow-up job resumes there.
                let job_id = JobId::new();
                let max_attempts = state.settings.job_max_attempts;
                if let Some(comment) = maestro_db::actions::answer(
                    &state.pool,
                    task_id,
                    &owner,
                    &text,
                    job_id,
                    max_attempts,
                )
                .await?
                {
                    return Ok(started(&state, task_id, job_id, comment, "answer").await);
                }
            }
            _ => {
                let job_id = JobId::new();
                let max_attempts = state.settings.job_max_attempts;
                if let Some(comment) =
                    comments::follow_up(&state.pool, task_id, job_id, &owner, &text, max_attempts)
                        .await?
                {
                    return Ok(started(&state, task_id, job_id, comment, "follow_up").await);
                }
            }
        }
    }
    Err(ApiError::Conflict {
        code: "busy",
        message: "the task changed state while the comment was routed; retry".to_owned(),
    })
}

/// A comment started job `job_id` (committed): wake the relay for its events, dispatch it,
/// and answer.
async fn started(
    state: &AppState,
    task_id: TaskId,
    job_id: JobId,
    comment: Comment,
    routed_to: &'static str,
) -> (StatusCode, Json<Routed>) {
    maestro_messaging::publish::wake_outbox(&state.nats, &state.subjects).await;
    let dispatch = JobDispatch {
        job_id,
        task_id,
        attempt: 0,
    };
    super::tasks::dispatch(state, dispatch).await;
    (StatusCode::CREATED, Json(Routed { comment, routed_to }))
}

fn accepts_interjections(status: JobStatus) -> bool {
    matches!(
        status,
        JobStatus::Queued | JobStatus::Running | JobStatus::Retry | JobStatus::WaitingSubtasks
    )
}

#[derive(Debug, Serialize)]
pub struct CommentList {
    comments: Vec<Comment>,
}

/// `GET /api/local/tasks/{id}/comments`
pub async fn list(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<CommentList>, ApiError> {
    let task_id: TaskId = parse_id(&id, "task")?;
    if !maestro_db::tasks::exists(&state.pool, &owner, task_id).await? {
        return Err(ApiError::NotFound("task"));
    }
    Ok(Json(CommentList {
        comments: comments::list(&state.pool, task_id).await?,
    }))
}

/// `POST /api/local/tasks/{id}/cancel`: the latest job ends `cancelled` at once, whether a
/// worker runs it or not, and so does the latest job of every task below it (its subtasks,
/// theirs...); a running worker is told to stop, and its tool processes are killed.
pub async fn cancel(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<crate::views::TaskJson>, ApiError> {
    let task_id: TaskId = parse_id(&id, "task")?;
    if !maestro_db::tasks::exists(&state.pool, &owner, task_id).await? {
        return Err(ApiError::NotFound("task"));
    }
    let reason = format!("cancelled by {owner}");
    let cancelled = maestro_db::subtasks::cancel_tree(&state.pool, task_id, &reason).await?;
    if cancelled.is_empty() {
        return Err(ApiError::Conflict {
            code: "nothing_to_cancel",
            message: "the task has no job that is not over".to_owned(),
        });
    }
    maestro_messaging::publish::wake_outbox(&state.nats, &state.subjects).await;
    // A cancelled subtask is over: a parent waiting for it goes on.
    maestro_messaging::publish::wake_joiner(&state.nats, &state.subjects).await;
    for job in &cancelled {
        tracing::info!(task_id = %job.task_id, job_id = %job.job_id, "job cancelled");
        maestro_messaging::publish::stop_cancelled_job(&state.nats, &state.subjects, job.job_id)
            .await;
    }
    let task = maestro_db::tasks::get(&state.pool, &owner, task_id)
        .await?
        .ok_or(ApiError::NotFound("task"))?;
    Ok(Json(task.into()))
}

/// Wake the worker running the job (best effort: it also looks on its own).
async fn signal(state: &AppState, job_id: JobId, control: JobControl) {
    let payload = Bytes::from(serde_json::to_vec(&control).unwrap_or_default());
    if let Err(e) = state
        .nats
        .publish(state.subjects.control(job_id), payload)
        .await
    {
        tracing::warn!(error = %e, %job_id, "cannot signal the job's worker");
    }
}
