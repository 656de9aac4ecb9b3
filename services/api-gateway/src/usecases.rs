//! What more than one binding does (REST and A2A): decide a paused job's item, cancel a task,
//! continue a finished one.
//! Route files stay thin and never import each other; both bindings call these.

use maestro_api::{DecideReply, DecideRequest};
use maestro_db::continues::{self, NewContinue};
use maestro_domain::{ActionId, JobId, Owner, TaskId, Verdict, WaitReason};
use maestro_messaging::AfterCommit;
use maestro_pauses::{Decided, Request};

use crate::error::ApiError;
use crate::state::AppState;

/// Decide item `action_id` of task `task_id` (which `owner` owns), if it is of one of `kinds`
/// (`message_id`: the A2A message it came in, kept with the decision).
pub async fn decide(
    state: &AppState,
    owner: &Owner,
    (task_id, action_id): (TaskId, ActionId),
    body: &DecideRequest,
    (kinds, message_id): (&[WaitReason], Option<&str>),
) -> Result<DecideReply, ApiError> {
    let item = maestro_db::actions::get(&state.pool, task_id, action_id)
        .await?
        .filter(|a| kinds.contains(&a.kind()))
        .ok_or(ApiError::NotFound("required action"))?;
    let note = body
        .note
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty());
    if note.is_some_and(|n| n.len() > 4000) {
        return Err(ApiError::invalid(
            "invalid_decision",
            "note is at most 4000 bytes",
        ));
    }
    let verdict = Verdict::parse(item.kind(), &body.decision, body.scope.as_deref())?;
    let request = Request {
        task_id,
        action_id,
        kinds,
        verdict,
        by: owner,
        note,
        seen_hash: body.arguments_hash.as_deref(),
        message_id,
    };
    let (action, resumed, after) = match maestro_pauses::decide(&state.pool, request).await? {
        Decided::Done {
            action,
            resumed,
            after,
        } => (action, resumed, after),
        Decided::NotFound => return Err(ApiError::NotFound("required action")),
        Decided::ArgumentsChanged => return Err(ApiError::arguments_changed()),
        Decided::AlreadyDecided(status) => return Err(ApiError::already_decided(status)),
        Decided::NotWaiting(status) => return Err(ApiError::not_waiting(status)),
    };
    state.bus.after_commit(after).await;
    tracing::info!(%task_id, %action_id, decision = %body.decision, resumed, "decided");
    Ok(DecideReply {
        required_action: (*action).into(),
        resumed,
    })
}

/// Cancel task `task_id` (which `owner` owns): its latest job and every task below it end
/// `cancelled`; running workers stop. A conflict when nothing was left to cancel.
pub async fn cancel(state: &AppState, owner: &Owner, task_id: TaskId) -> Result<(), ApiError> {
    let reason = format!("cancelled by {owner}");
    let cancelled = maestro_db::subtasks::cancel_tree(&state.pool, task_id, &reason).await?;
    if cancelled.is_empty() {
        return Err(ApiError::Conflict {
            code: "nothing_to_cancel",
            message: "the task has no job that is not over".to_owned(),
        });
    }
    // A cancelled subtask is over: a parent waiting for it goes on.
    let mut after = AfterCommit::events().wake_joiner();
    for job in &cancelled {
        tracing::info!(task_id = %job.task_id, job_id = %job.job_id, "job cancelled");
        maestro_runtime::metrics::transition("cancelled");
        after = after.stop(job.job_id);
    }
    state.bus.after_commit(after).await;
    Ok(())
}

/// How often the latest job is read again when it changed under a Continue's insert.
const CONTINUE_ATTEMPTS: usize = 3;

/// What a Continue came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continued {
    /// A new job carries the task on.
    Created,
    /// The Idempotency-Key's request was carried out before: nothing new.
    Repeated,
}

/// How a Continue was asked for: its Idempotency-Key, and the A2A message it came as.
#[derive(Debug, Clone, Default)]
pub struct Asked<'a> {
    pub key: Option<String>,
    pub message_id: Option<&'a str>,
}

/// Continue task `task_id` (which `owner` owns; SPEC §3.3): validate the request, check the
/// latest job is over, and queue the job that replays the transcript. With a key, a repeat of
/// the same request does nothing and a different request under it is refused.
pub async fn continue_task(
    state: &AppState,
    owner: &Owner,
    task_id: TaskId,
    body: maestro_api::ContinueTask,
    asked: Asked<'_>,
) -> Result<Continued, ApiError> {
    let key = asked.key;
    let settings = &state.settings;
    let instruction = crate::validate::instruction(settings, &body.instruction)?;
    if let Some(piece) = &body.piece {
        crate::validate::piece(settings, piece, None)?;
    }
    if let Some(model) = &body.model {
        crate::validate::model(settings, model)?;
    }
    let hash = crate::validate::request_hash(&[
        "continue",
        &instruction,
        body.piece.as_deref().unwrap_or(""),
        body.model.as_deref().unwrap_or(""),
    ]);
    if let Some(key) = key.as_deref()
        && let Some(found) = continues::find_by_key(&state.pool, task_id, key).await?
    {
        return repeated(found, &hash);
    }
    for _ in 0..CONTINUE_ATTEMPTS {
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
            author: owner,
            instruction: &instruction,
            piece: body.piece.as_deref(),
            model: body.model.as_deref(),
            idempotency_key: key.as_deref(),
            request_hash: &hash,
            max_attempts: settings.job_max_attempts,
            message_id: asked.message_id,
        };
        match continues::insert(&state.pool, &new).await? {
            continues::Continued::Created { job_no, .. } => {
                tracing::info!(%task_id, %job_id, job_no, from = %from, "task continued");
                maestro_runtime::metrics::transition("queued");
                let profile = crate::routing::task_profile(state, task_id).await?;
                state
                    .bus
                    .after_commit(AfterCommit::new_job(&profile, task_id, job_id))
                    .await;
                return Ok(Continued::Created);
            }
            continues::Continued::KeyUsed => {
                let key = key.as_deref().unwrap_or_default();
                let found = continues::find_by_key(&state.pool, task_id, key).await?;
                let found = found.ok_or_else(|| {
                    ApiError::Unexpected(anyhow::anyhow!("idempotency key conflict without a job"))
                })?;
                return repeated(found, &hash);
            }
            // Another job started or ended meanwhile: read the latest again.
            continues::Continued::Busy => continue,
        }
    }
    Err(ApiError::Conflict {
        code: "busy",
        message: "the task changed state while it was continued; retry".to_owned(),
    })
}

/// A Continue under a key used before: the same request is a repeat, another a conflict.
fn repeated((_, stored): (JobId, Option<String>), hash: &str) -> Result<Continued, ApiError> {
    if stored.as_deref() != Some(hash) {
        return Err(ApiError::Conflict {
            code: "idempotency_key_reused",
            message: "this Idempotency-Key was used for a different request".to_owned(),
        });
    }
    Ok(Continued::Repeated)
}

/// What follows a new task's commit (REST and A2A): its `queued` event, published from here
/// (docs/architecture.md#the-outbox), then its first job's dispatch, in that order on one
/// connection, so no reader sees the job run before it was queued. `fresh`: the task works in
/// its own workspace and brought no files (`JobDispatch::fresh`); `opening`: what its job opens
/// with, when the worker can send the first LLM request from it (`JobDispatch::opening`).
pub async fn announce_new_task(
    bus: &maestro_messaging::Bus,
    (profile, fresh): (&str, bool),
    (task_id, job_id): (TaskId, JobId),
    opening: Option<maestro_messaging::payloads::Opening>,
    queued: Vec<maestro_domain::topic::Direct>,
) {
    bus.publish_direct(queued).await;
    let mut dispatch = maestro_messaging::payloads::JobDispatch::new_task(task_id, job_id, fresh);
    if let Some(opening) = opening {
        dispatch = dispatch.with_opening(opening);
    }
    bus.after_commit(AfterCommit::none().dispatch(profile, dispatch))
        .await;
}
