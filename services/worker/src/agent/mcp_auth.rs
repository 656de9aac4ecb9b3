//! MCP servers that need a token (SPEC §3.4): a job whose owner has no token for one of them
//! pauses (`waiting_human: mcp_auth_required`) before the LLM is called, and resumes when the
//! token is supplied.

use std::collections::BTreeMap;

use maestro_db::claims::Claimed;
use maestro_domain::{ActionDetail, ActionStatus, NewAction, Owner, Verdict, WaitReason};
use maestro_pauses::{Decided, Request};

use super::context::{JobEnd, JobError, Shared};
use super::run::JobRun;

impl JobRun<'_> {
    /// `mcp_auth_required` before the LLM is called when an MCP server that needs a token has
    /// none from the task's owner. A token stored while the pause was being committed would
    /// find no waiting job to resume, so the tokens are read again after the pause: if they
    /// are there now, the job resolves its own items and goes on at once.
    pub(super) async fn authorize_mcp(&mut self) -> Result<Option<JobEnd>, JobError> {
        let missing: Vec<String> = self
            .shared
            .policy
            .mcp_servers
            .iter()
            .filter(|(name, s)| s.requires_auth && !self.approvals.mcp_tokens.contains_key(*name))
            .map(|(name, _)| name.clone())
            .collect();
        if missing.is_empty() {
            return Ok(None);
        }
        let items = missing
            .iter()
            .map(|server| NewAction {
                key: format!("mcp:{server}"),
                movement: self.place.movement.clone(),
                source_seq: None,
                detail: ActionDetail::McpAuthRequired {
                    server: server.clone(),
                },
            })
            .collect();
        let reason = format!(
            "the MCP servers {} need authorization before the job can start",
            missing.join(", ")
        );
        let end = self
            .pause(WaitReason::McpAuthRequired, reason, items)
            .await?;
        if end != JobEnd::Paused {
            return Ok(Some(end));
        }
        let tokens = mcp_tokens(self.shared, self.claim).await?;
        if !missing.iter().all(|s| tokens.contains_key(s)) {
            return Ok(Some(end));
        }
        self.resolve_own_token_waits().await.map(Some)
    }

    /// The tokens came while the job paused for them: decide its own items, and go on at once
    /// when that was the last of them (`Released`: dispatch again now).
    async fn resolve_own_token_waits(&mut self) -> Result<JobEnd, JobError> {
        let Ok(owner) = Owner::parse(&self.claim.owner) else {
            return Ok(JobEnd::Paused);
        };
        let pool = &self.shared.pool;
        for action in maestro_db::actions::of_job(pool, self.claim.job_id).await? {
            if action.kind() != WaitReason::McpAuthRequired
                || action.status != ActionStatus::Pending
            {
                continue;
            }
            let request = Request {
                task_id: self.claim.task_id,
                action_id: action.id,
                kinds: &[WaitReason::McpAuthRequired],
                verdict: Verdict::TokenSupplied,
                by: &owner,
                note: None,
                seen_hash: None,
                message_id: None,
            };
            if let Decided::Done { resumed, .. } = maestro_pauses::decide(pool, request).await? {
                // Not the decision's dispatch: this worker hands the job back itself, and its
                // dispatch comes again at once.
                let after = maestro_messaging::AfterCommit::events();
                self.shared.bus.after_commit(after).await;
                if resumed {
                    tracing::info!("a token arrived while the job paused; going on");
                    return Ok(JobEnd::Released);
                }
            }
        }
        Ok(JobEnd::Paused)
    }
}

/// The task owner's tokens for the MCP servers that need one (no query when none does).
pub(super) async fn mcp_tokens(
    shared: &Shared,
    claim: &Claimed,
) -> Result<BTreeMap<String, String>, JobError> {
    let needs: Vec<String> = shared
        .policy
        .mcp_servers
        .iter()
        .filter(|(_, s)| s.requires_auth)
        .map(|(name, _)| name.clone())
        .collect();
    if needs.is_empty() {
        return Ok(BTreeMap::new());
    }
    let tokens = maestro_db::mcp_tokens::of_owner(&shared.pool, &claim.owner, &needs).await?;
    Ok(tokens.into_iter().collect())
}
