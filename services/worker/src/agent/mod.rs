//! The piece engine of one job (SPEC §3.5). The piece loop starts the job in a movement
//! (resume > the task's start movement > the piece's start), guards against loops and
//! revisits, and moves on when the model calls `transition`; the movement loop streams the
//! LLM, commits its message, runs the tools it called, commits their results, and repeats
//! until the model calls `complete` (or a guard ends the job).
//!
//! Commits per iteration are few and deliberate: the assistant message (with its tool calls)
//! is committed before any tool that may change something runs, so what the model asked for
//! is never lost; when every call only reads, the message is committed with the results
//! instead (nothing happened that a crash could lose track of); the tool results follow in
//! one commit, together with a transition's movement event and the next
//! movement's guidance — or, when the next reply comes within the commit wait, in that reply's
//! commit (`journal.rs`); a message that only calls `complete` is committed together with the
//! job's final state. A job resumed after a crash rebuilds its conversation and its place in
//! the piece from these events and carries on from the last commit.
//!
//! Two signals reach a running job: `lost` (its lease is gone: stop without writing) and the
//! worker's `release` (shutdown grace is over: hand the job back at the next safe point).
//!
//! This file only starts a job; where each part lives is said in `run.rs`.

mod approvals;
mod arguments;
mod attachments;
mod cache;
mod calls;
mod catalog;
mod context;
mod continuation;
mod drive;
mod early_reads;
mod ending;
mod execute;
mod finals;
mod first_call;
mod gate;
pub mod guard;
mod journal;
mod llm;
mod mcp_auth;
pub mod router;
mod run;
pub mod space_workspace;
mod subtasks;

use maestro_db::claims::Claimed;
use maestro_db::jobs::Fence;
use maestro_domain::piece;

pub use catalog::{EarlyContext, forget_listing};
pub use context::{Delivery, JobEnd, JobError, Shared};
pub use first_call::FirstCall;

use approvals::Approvals;
use run::JobRun;

/// What a new job's dispatch started while the job was claimed: the read of its workspace's
/// context, or its first LLM request.
#[derive(Debug)]
pub struct Early {
    pub context: Option<EarlyContext>,
    pub first_call: Option<FirstCall>,
}

/// Run a claimed job to its end.
pub async fn run(
    shared: &Shared,
    claim: &Claimed,
    delivery: Delivery,
    early: Early,
) -> Result<JobEnd, JobError> {
    // A job of a space with its own tool policy runs under it: the policy is the only source
    // of its tool permissions (SPEC §3.5). Its MCP servers are listed per job, not from the
    // worker's listings (another space may name a different server the same).
    let own;
    let shared = match &claim.space_policy {
        None => shared,
        Some(policy) => match space_policy(policy) {
            Ok(policy) => {
                own = Shared {
                    policy: std::sync::Arc::new(policy),
                    mcp_tools: std::sync::Arc::default(),
                    ..shared.clone()
                };
                &own
            }
            Err(error) => {
                let fence = Fence {
                    job_id: claim.job_id,
                    attempt: claim.attempt,
                };
                return ending::settle_failed(shared, fence, error).await;
            }
        },
    };
    // Both are retried: the job stays claimed until its lease runs out, then runs again (its
    // attempts bound how often).
    if space_workspace::applies(claim)
        && let Err(error) = space_workspace::prepare(shared, claim).await
    {
        let error = format!("the space's workspace could not be prepared: {error}");
        return Err(JobError::Unavailable(error));
    }
    if claim.unplaced_attachments
        && let Err(error) = attachments::place(shared, claim).await
    {
        let error = format!("the task's attachments could not be placed: {error}");
        return Err(JobError::Unavailable(error));
    }
    match run_job(shared, claim, delivery, early).await {
        // The database refused this job's data: the same write would be refused on every
        // attempt, so the job fails now, saying why, instead of retrying.
        Err(JobError::Db(maestro_db::DbError::Rejected(e))) => {
            let fence = Fence {
                job_id: claim.job_id,
                attempt: claim.attempt,
            };
            let error = format!("the database refused this job's data (not retried): {e}");
            ending::settle_failed(shared, fence, error).await
        }
        other => other,
    }
}

/// A space's stored tool policy, checked as the worker checks its own at start.
fn space_policy(stored: &serde_json::Value) -> Result<maestro_domain::policy::ToolPolicy, String> {
    let policy: maestro_domain::policy::ToolPolicy = serde_json::from_value(stored.clone())
        .map_err(|e| format!("the space's tool policy cannot be read: {e}"))?;
    match policy.problem() {
        Some(problem) => Err(format!("the space's tool policy is not usable: {problem}")),
        None => Ok(policy),
    }
}

async fn run_job(
    shared: &Shared,
    claim: &Claimed,
    delivery: Delivery,
    early: Early,
) -> Result<JobEnd, JobError> {
    let fence = Fence {
        job_id: claim.job_id,
        attempt: claim.attempt,
    };
    if claim.attempt > claim.max_attempts {
        let error = format!("gave up after {} attempts", claim.max_attempts);
        return ending::settle_failed(shared, fence, error).await;
    }
    let piece_name = if claim.piece == piece::ROUTER {
        router::route(shared, claim).await?
    } else {
        claim.piece.clone()
    };
    let Some(piece) = shared.catalog.get(&piece_name) else {
        let error = format!("unknown piece {piece_name:?}");
        return ending::settle_failed(shared, fence, error).await;
    };
    // A first claim has nothing to resume from: skip the reads (but a Continue's replay).
    let resumed = claim.attempt > 1;
    let (history, continuation) = continuation::load(shared, claim, piece).await?;
    let replayed = continuation.as_ref().map(|c| &c.replay.messages[..]);
    let rebuilt = maestro_domain::transcript::rebuild_with(&history, replayed.unwrap_or(&[]))?;
    let tokens = mcp_auth::mcp_tokens(shared, claim).await?;
    let catalog::Offered { tools, logins } = catalog::tools(shared, piece, claim, &tokens).await;
    let mut approvals = Approvals::new(claim.grants.clone(), tokens);
    if resumed {
        approvals.remember(maestro_db::actions::of_job(&shared.pool, claim.job_id).await?);
    }
    let mut run = JobRun::new(shared, claim, delivery, piece, tools, approvals);
    run.first_call = early.first_call;
    let pending = match rebuilt.movement.as_deref().and_then(|m| piece.movement(m)) {
        Some(movement) if !rebuilt.messages.is_empty() => run.resume(movement, rebuilt),
        _ => {
            run.open(continuation, early.context).await?;
            Vec::new()
        }
    };
    if let Some(end) = run.authorize_mcp(logins).await? {
        return Ok(end);
    }
    run.drive(pending).await
}
