//! Where a comment goes (SPEC §3.2). The domain chooses by the state of the task's latest job
//! (`maestro_domain::action::route_comment`); this carries the choice out: an interjection
//! into the running job, an addition to the instruction of a job that is queued or waits to
//! retry, the answer to its question (a follow-up job resumes where it asked), a new
//! follow-up job, or a refusal while the job waits for a decision. Every write is guarded on
//! the job row, so a comment racing a claim or the job's end is routed again by the state
//! that won (an addition that loses to the claim becomes an interjection of the running job).

use maestro_api::{RoutedComment, RoutedTo};
use maestro_db::comments::{self, Said};
use maestro_domain::action::{CommentRoute, route_comment};
use maestro_domain::{Comment, CommentKind, JobId, TaskId};
use maestro_messaging::AfterCommit;

use crate::error::ApiError;
use crate::state::AppState;

/// How often a comment is routed again when the job changed state under it.
const ROUTING_ATTEMPTS: usize = 3;

/// Route what `said` says to task `task_id` (which its author owns).
pub async fn comment(
    state: &AppState,
    task_id: TaskId,
    said: Said<'_>,
) -> Result<RoutedComment, ApiError> {
    for _ in 0..ROUTING_ATTEMPTS {
        let latest = maestro_db::jobs::latest(&state.pool, task_id).await?;
        let route = route_comment(latest.map(|(_, status, wait)| (status, wait)));
        let routed = match (route, latest) {
            (CommentRoute::DecideFirst(waiting), _) => {
                return Err(ApiError::decide_first(waiting));
            }
            (CommentRoute::Interjection, Some((job_id, ..))) => {
                let to = (job_id, CommentKind::Interjection);
                add_to_job(state, task_id, to, said).await?
            }
            (CommentRoute::Addition, Some((job_id, ..))) => {
                let to = (job_id, CommentKind::Addition);
                add_to_job(state, task_id, to, said).await?
            }
            (CommentRoute::Answer, _) => answer(state, task_id, said).await?,
            (CommentRoute::FollowUp | CommentRoute::Interjection | CommentRoute::Addition, _) => {
                follow_up(state, task_id, said).await?
            }
        };
        if let Some((comment, routed_to, after)) = routed {
            state.bus.after_commit(after).await;
            return Ok(RoutedComment { comment, routed_to });
        }
    }
    Err(ApiError::Conflict {
        code: "busy",
        message: "the task changed state while the comment was routed; retry".to_owned(),
    })
}

/// A routed comment, where it went, and what follows its commit; `None` when the job was no
/// longer in the state the route was chosen for (nothing written).
type Routed = Option<(Comment, RoutedTo, AfterCommit)>;

async fn add_to_job(
    state: &AppState,
    task_id: TaskId,
    (job_id, kind): (JobId, CommentKind),
    said: Said<'_>,
) -> Result<Routed, ApiError> {
    let comment = comments::add_to_job(&state.pool, task_id, job_id, kind, said).await?;
    let routed_to = match kind {
        CommentKind::Addition => RoutedTo::Instruction,
        _ => RoutedTo::Interjection,
    };
    Ok(comment.map(|c| {
        let after = AfterCommit::none().interjection(job_id);
        (c, routed_to, after)
    }))
}

async fn answer(state: &AppState, task_id: TaskId, said: Said<'_>) -> Result<Routed, ApiError> {
    let max_attempts = state.settings.job_max_attempts;
    let answered =
        maestro_pauses::answer(&state.pool, task_id, said, JobId::new(), max_attempts).await?;
    Ok(answered.map(|a| (a.comment, RoutedTo::Answer, a.after)))
}

async fn follow_up(state: &AppState, task_id: TaskId, said: Said<'_>) -> Result<Routed, ApiError> {
    let job_id = JobId::new();
    let max_attempts = state.settings.job_max_attempts;
    let comment = comments::follow_up(&state.pool, task_id, job_id, said, max_attempts).await?;
    let profile = task_profile(state, task_id).await?;
    Ok(comment.map(|c| {
        let after = AfterCommit::new_job(&profile, task_id, job_id);
        (c, RoutedTo::FollowUp, after)
    }))
}

/// The worker profile task `task_id`'s new jobs are dispatched to.
pub async fn task_profile(state: &AppState, task_id: TaskId) -> Result<String, ApiError> {
    Ok(maestro_db::tasks::profile(&state.pool, task_id)
        .await?
        .unwrap_or_else(|| maestro_domain::job::DEFAULT_PROFILE.to_owned()))
}
