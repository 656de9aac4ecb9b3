//! A decision on one item of a paused job. The job row is locked first, so decisions on one
//! job are serialized: the first decision on an item wins, a second one sees it decided; the
//! decision that answers the last pending item queues the job again, in the same transaction,
//! with its events.

use maestro_db::{DbError, PgPool, actions, events, grants, jobs};
use maestro_domain::action::Scope;
use maestro_domain::{
    Action, ActionDetail, ActionId, ActionStatus, Decision, DecisionEvent, EventBody,
    JobStateChange, JobStatus, Owner, TaskId, Verdict, WaitReason,
};
use maestro_messaging::AfterCommit;
use maestro_messaging::payloads::JobDispatch;

/// A decision to make.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub task_id: TaskId,
    pub action_id: ActionId,
    /// The kinds of item this request may decide (a kind's own route narrows them).
    pub kinds: &'a [WaitReason],
    pub verdict: Verdict,
    pub by: &'a Owner,
    /// Shown to the model with a denial.
    pub note: Option<&'a str>,
    /// The arguments hash the reviewer saw: when it is not the item's, nothing is decided.
    pub seen_hash: Option<&'a str>,
    /// The A2A `messageId` the decision came in, kept with it.
    pub message_id: Option<&'a str>,
}

/// What a decision came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// Recorded; `resumed` when it was the last pending item and the job is queued again.
    Done {
        action: Box<Action>,
        resumed: bool,
        after: AfterCommit,
    },
    /// No such item of this task (or not of the kinds asked for).
    NotFound,
    /// The call's arguments are not the ones the reviewer saw.
    ArgumentsChanged,
    /// The item was decided before (first decision wins), or set aside.
    AlreadyDecided(ActionStatus),
    /// The job no longer waits (cancelled, or in another state): nothing was written.
    NotWaiting(JobStatus),
}

/// Decide one item of a task's paused job; see [`Decided`].
pub async fn decide(pool: &PgPool, request: Request<'_>) -> Result<Decided, DbError> {
    let mut tx = maestro_db::begin(pool).await?;
    let Some(job) =
        actions::lock_job(&mut tx, request.task_id, request.action_id, request.kinds).await?
    else {
        return Ok(Decided::NotFound);
    };
    let item = actions::load(&mut tx, request.action_id).await?;
    let reviewed = item.detail.arguments_hash();
    if let (Some(seen), Some(reviewed)) = (request.seen_hash, reviewed)
        && seen != reviewed
    {
        return Ok(Decided::ArgumentsChanged);
    }
    if item.status != ActionStatus::Pending {
        return Ok(Decided::AlreadyDecided(item.status));
    }
    if job.status != JobStatus::WaitingHuman {
        return Ok(Decided::NotWaiting(job.status));
    }
    let decision = Decision {
        note: request.note.map(str::to_owned),
        arguments_hash: request.seen_hash.map(str::to_owned),
        message_id: request.message_id.map(str::to_owned),
        ..Decision::new(request.verdict, request.by.as_str())
    };
    let action = actions::store_decision(&mut tx, request.action_id, &decision).await?;
    if let (Some(Scope::Task), ActionDetail::ToolRequest { tool, .. }) =
        (decision.verdict.scope(), &action.detail)
    {
        grants::add(&mut tx, request.task_id, tool, request.by).await?;
    }
    let outstanding = actions::outstanding(&mut tx, job.id).await?;
    let status = outstanding.next_status();
    let mut events = vec![EventBody::Decision(DecisionEvent::new(
        action.id,
        action.kind(),
        &decision,
        status,
    ))];
    if let Some(reason) = outstanding.change_reason() {
        jobs::move_on(&mut tx, job.id, status).await?;
        let mut change = JobStateChange::new(status, job.attempt);
        change.reason = Some(reason.to_owned());
        events.push(EventBody::JobState(change));
    }
    events::push(&mut tx, job.id, &events).await?;
    maestro_db::commit(tx).await?;
    let resumed = status == JobStatus::Queued;
    let after = if resumed {
        let dispatch = JobDispatch {
            job_id: job.id,
            task_id: request.task_id,
            attempt: job.attempt,
            fresh: false,
            opening: None,
        };
        AfterCommit::events().dispatch(&job.profile, dispatch)
    } else {
        // The job may now wait for its subtasks alone, some of which may be over.
        AfterCommit::events().wake_joiner()
    };
    Ok(Decided::Done {
        action: Box::new(action),
        resumed,
        after,
    })
}

/// Store `owner`'s token for the MCP server `server` and resolve every item of `owner`'s
/// paused jobs that waited for it. Returns how many jobs are queued again, and what follows.
pub async fn supply_token(
    pool: &PgPool,
    owner: &Owner,
    server: &str,
    token: &str,
) -> Result<(usize, AfterCommit), DbError> {
    maestro_db::mcp_tokens::put(pool, owner, server, token).await?;
    resume_authorized(pool, owner, server).await
}

/// `owner` is now authorized for the MCP server `server` (a token stored, or an OAuth login
/// completed): resolve every item of `owner`'s paused jobs that waited for it. Returns how
/// many jobs are queued again, and what follows.
pub async fn resume_authorized(
    pool: &PgPool,
    owner: &Owner,
    server: &str,
) -> Result<(usize, AfterCommit), DbError> {
    let mut resumed = 0;
    let mut after = AfterCommit::none();
    for (task_id, action_id) in actions::waiting_for_token(pool, owner, server).await? {
        let request = Request {
            task_id,
            action_id,
            kinds: &[WaitReason::McpAuthRequired],
            verdict: Verdict::TokenSupplied,
            by: owner,
            note: None,
            seen_hash: None,
            message_id: None,
        };
        // Decided elsewhere meanwhile, or the job was cancelled: nothing to resume here.
        if let Decided::Done {
            resumed: again,
            after: then,
            ..
        } = decide(pool, request).await?
        {
            resumed += usize::from(again);
            after = after.and(then);
        }
    }
    Ok((resumed, after))
}
