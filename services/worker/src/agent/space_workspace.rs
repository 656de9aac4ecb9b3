//! A space's task works in its worktree of the space's repository (docs/spaces.md): made or
//! brought up to date with `main` when a job starts, committed when the job ends — merged
//! into `main` when it succeeded, kept on the task's branch when it failed or was cancelled.
//! The tool-runner does the git work (`<prefix>.tools.git`); a subtask works in its top
//! task's worktree, which its top task's job commits.

use std::time::Duration;

use bytes::Bytes;
use maestro_db::claims::Claimed;
use maestro_domain::tools::{GitOutcome, GitReply, GitRequest};

use super::context::Shared;

/// How long the tool-runner has for one request (a commit and merge of a large tree).
const GIT_TIMEOUT: Duration = Duration::from_secs(90);

/// Longest commit message body taken from a job's result or error.
const SUMMARY_MAX_CHARS: usize = 4000;

/// Whether the claimed job's task keeps its work in a space's repository (and this job is the
/// one that commits it: not a subtask's).
pub fn applies(claim: &Claimed) -> bool {
    claim.space_id.is_some() && claim.depth == 0
}

/// Make or update the task's worktree before the job's first tool call. A note (`main` did
/// not merge into the branch) is logged; an error is the job's.
pub async fn prepare(shared: &Shared, claim: &Claimed) -> Result<(), String> {
    let Some(space_id) = claim.space_id else {
        return Ok(());
    };
    let request = GitRequest::Prepare {
        space_id,
        workspace_id: claim.workspace_id,
        // `main` comes in at a job's first claim only: a resumed job's files do not change
        // under its conversation.
        merge_main: claim.attempt == 1 && claim.resume_movement.is_none(),
    };
    let reply = ask(shared, &request).await?;
    if let Some(note) = reply.note {
        tracing::warn!(%note, "the task's worktree");
    }
    Ok(())
}

/// Commit the job's changes on the task's branch (the reply's `branch`); [`merge`] brings
/// them into `main` once the job's success is committed.
pub async fn finish(
    shared: &Shared,
    claim: &Claimed,
    outcome: GitOutcome,
    summary: &str,
) -> Result<GitReply, String> {
    let Some(space_id) = claim.space_id else {
        return Ok(GitReply::default());
    };
    let request = GitRequest::Finish {
        space_id,
        workspace_id: claim.workspace_id,
        job_id: claim.job_id,
        job_no: claim.job_no,
        outcome,
        summary: summary.chars().take(SUMMARY_MAX_CHARS).collect(),
    };
    let reply = ask(shared, &request).await?;
    if let Some(note) = &reply.note {
        tracing::warn!(%note, "the job's changes were not merged");
    }
    Ok(reply)
}

/// Merge the task's branch into `main` (after the job's success is committed): `main`'s
/// commit, or the reply's `branch` and `note` on a conflict.
pub async fn merge(shared: &Shared, claim: &Claimed) -> Result<GitReply, String> {
    let Some(space_id) = claim.space_id else {
        return Ok(GitReply::default());
    };
    let request = GitRequest::Merge {
        space_id,
        workspace_id: claim.workspace_id,
    };
    let reply = ask(shared, &request).await?;
    if let Some(note) = &reply.note {
        tracing::warn!(%note, "the job's changes were not merged");
    }
    Ok(reply)
}

/// [`finish`] for a job that did not succeed: best effort (its changes stay in the worktree
/// either way, and the next job's commit takes them).
pub async fn keep(shared: &Shared, claim: &Claimed, outcome: GitOutcome, why: &str) {
    if !applies(claim) {
        return;
    }
    if let Err(error) = finish(shared, claim, outcome, why).await {
        tracing::warn!(%error, "cannot keep the job's changes on the task's branch");
    }
}

async fn ask(shared: &Shared, request: &GitRequest) -> Result<GitReply, String> {
    let payload = Bytes::from(serde_json::to_vec(request).map_err(|e| e.to_string())?);
    let mut headers = async_nats::HeaderMap::new();
    maestro_messaging::trace::inject(&mut headers);
    let message = async_nats::Request::new()
        .payload(payload)
        .headers(headers)
        .timeout(Some(GIT_TIMEOUT));
    let reply = shared
        .bus
        .nats
        .send_request(shared.bus.subjects.tools_git(), message)
        .await
        .map_err(|e| format!("no tool-runner answered: {e}"))?;
    let reply: GitReply = serde_json::from_slice(&reply.payload)
        .map_err(|e| format!("malformed answer from the tool-runner: {e}"))?;
    match reply.error {
        Some(error) => Err(error),
        None => Ok(reply),
    }
}
