//! MCP servers that need authorization (SPEC §3.4): a job whose owner has no token for one of
//! them — a static token (`requires_auth`), or the OAuth grant a remote server asked for with
//! a 401 — pauses (`waiting_human: mcp_auth_required`) before the LLM is called, and resumes
//! when the token is supplied or the login completed (`maestro_mcp_oauth`). A grant about to
//! expire is refreshed before the job uses it.

use std::collections::BTreeMap;

use maestro_db::claims::Claimed;
use maestro_domain::{ActionDetail, ActionStatus, NewAction, Owner, Verdict, WaitReason};
use maestro_pauses::{Decided, Request};

use super::context::{JobEnd, JobError, Shared};
use super::run::JobRun;

impl JobRun<'_> {
    /// `mcp_auth_required` before the LLM is called when an MCP server that needs a token has
    /// none from the task's owner, or a remote server asked for a login (`logins`: its name and
    /// challenge; its login is opened, and its URL shown on the item). A token stored while the
    /// pause was being committed would find no waiting job to resume, so the tokens are read
    /// again after the pause: if they are there now, the job resolves its own items and goes
    /// on at once.
    pub(super) async fn authorize_mcp(
        &mut self,
        logins: Vec<(String, String)>,
    ) -> Result<Option<JobEnd>, JobError> {
        let mut missing: Vec<(String, Option<String>)> = self
            .shared
            .policy
            .mcp_servers
            .iter()
            .filter(|(name, s)| s.requires_auth && !self.approvals.mcp_tokens.contains_key(*name))
            .map(|(name, _)| (name.clone(), None))
            .collect();
        for (name, challenge) in logins {
            let Some(server) = self.shared.policy.mcp_servers.get(&name) else {
                continue;
            };
            let owner = &self.claim.owner;
            let pool = &self.shared.pool;
            let login = match maestro_mcp_oauth::open_login(pool, owner, &name, server, &challenge)
                .await
            {
                Ok(login) => login,
                Err(maestro_mcp_oauth::LoginError::Db(e)) => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(server = %name, error = %e, "cannot open a login; its tools are left out");
                    continue;
                }
            };
            let url = format!(
                "{}/api/local/mcp/logins/{login}",
                self.shared
                    .settings
                    .public_url
                    .as_deref()
                    .unwrap_or_default()
            );
            missing.push((name, Some(url)));
        }
        if missing.is_empty() {
            return Ok(None);
        }
        let items = missing
            .iter()
            .map(|(server, login_url)| NewAction {
                key: format!("mcp:{server}"),
                movement: self.place.movement.clone(),
                source_seq: None,
                detail: ActionDetail::McpAuthRequired {
                    server: server.clone(),
                    login_url: login_url.clone(),
                    login_error: None,
                },
            })
            .collect();
        let names: Vec<&str> = missing.iter().map(|(name, _)| name.as_str()).collect();
        let reason = format!(
            "the MCP servers {} need authorization before the job can start",
            names.join(", ")
        );
        let end = self
            .pause(WaitReason::McpAuthRequired, reason, items)
            .await?;
        if end != JobEnd::Paused {
            return Ok(Some(end));
        }
        let tokens = mcp_tokens(self.shared, self.claim).await?;
        if !names.iter().all(|s| tokens.contains_key(*s)) {
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

/// The task owner's tokens for the MCP servers that need or may need one (no query when
/// none does): static tokens as stored, OAuth grants' access tokens refreshed first when they
/// are about to expire (a grant the authorization server no longer refreshes is dropped: a new
/// login is due).
pub(super) async fn mcp_tokens(
    shared: &Shared,
    claim: &Claimed,
) -> Result<BTreeMap<String, String>, JobError> {
    let servers = &shared.policy.mcp_servers;
    let needs: Vec<String> = servers
        .iter()
        .filter(|(_, s)| s.requires_auth || s.may_need_login())
        .map(|(name, _)| name.clone())
        .collect();
    if needs.is_empty() {
        return Ok(BTreeMap::new());
    }
    let stored =
        maestro_db::mcp_tokens::of_owner_with_expiry(&shared.pool, &claim.owner, &needs).await?;
    let mut tokens = BTreeMap::new();
    for (name, token, expires_at, grant) in stored {
        let token = match servers.get(&name) {
            Some(server) if grant => {
                maestro_mcp_oauth::fresh_token(
                    &shared.pool,
                    &claim.owner,
                    &name,
                    server,
                    (token, expires_at),
                )
                .await?
            }
            _ => Some(token),
        };
        if let Some(token) = token {
            tokens.insert(name, token);
        }
    }
    Ok(tokens)
}
