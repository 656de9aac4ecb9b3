//! What more than one binding does (REST and A2A): decide a paused job's item, cancel a task.
//! Route files stay thin and never import each other; both bindings call these.

use maestro_api::{DecideReply, DecideRequest};
use maestro_domain::{ActionId, Owner, TaskId, Verdict, WaitReason};
use maestro_messaging::AfterCommit;
use maestro_pauses::{Decided, Request};

use crate::error::ApiError;
use crate::state::AppState;

/// Decide item `action_id` of task `task_id` (which `owner` owns), if it is of one of `kinds`.
pub async fn decide(
    state: &AppState,
    owner: &Owner,
    (task_id, action_id): (TaskId, ActionId),
    body: &DecideRequest,
    kinds: &[WaitReason],
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
        after = after.stop(job.job_id);
    }
    state.bus.after_commit(after).await;
    Ok(())
}
