//! The tools a job offers the model: the built-ins, the tools of the workspace's MCP servers
//! (listed once through a tool-runner and kept for the life of the worker, so the `tools`
//! array has the same bytes in every request), `ask` and `request_package` (answered through
//! a person), `delegate` (when the policy allows it and the task is not at the deepest
//! subtask level), the piece's `transition` (when it has targets) and `complete`, in that
//! order — the same bytes for every request of a task's piece.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use maestro_db::claims::Claimed;
use maestro_domain::piece::Piece;
use maestro_domain::tools::{
    self, McpListReply, McpListRequest, McpTarget, ToolExecRequest, ToolSpec, WorkspaceContext,
};
use maestro_domain::{JobId, TaskId};
use serde_json::value::RawValue;

use super::context::Shared;
use crate::tool_client;

/// The tools a job offers, and the remote MCP servers that asked for a login first
/// (`(server, WWW-Authenticate challenge)`): their tools are left out until the owner logs in.
#[derive(Debug)]
pub(super) struct Offered {
    pub tools: Arc<Offer>,
    pub logins: Vec<(String, String)>,
}

/// Offered tools and their rendering, as every request of the job sends them.
#[derive(Debug)]
pub struct Offer {
    pub specs: Vec<ToolSpec>,
    /// `specs` as the requests' `tools` array: the same bytes in every request.
    pub json: Box<RawValue>,
}

impl Offer {
    fn new(specs: Vec<ToolSpec>) -> Self {
        let rendered: Vec<serde_json::Value> = specs.iter().map(ToolSpec::to_openai).collect();
        let json = serde_json::value::to_raw_value(&rendered).expect("tool specs are valid JSON");
        Self { specs, json }
    }
}

/// The offers of jobs without MCP tools (most jobs), made once per worker: such an offer
/// depends only on the piece (its transition targets) and on whether the job may delegate,
/// the rest being the worker's fixed built-ins and catalog.
pub type Offers = Arc<Mutex<HashMap<(String, bool), Arc<Offer>>>>;

/// The offered tools, in their fixed order.
pub(super) async fn tools(
    shared: &Shared,
    piece: &Piece,
    claim: &Claimed,
    tokens: &BTreeMap<String, String>,
) -> Offered {
    let (mcp, logins) = mcp_tools(shared, &claim.owner, tokens).await;
    let delegates = claim.depth < shared.settings.max_subtask_depth
        && shared
            .policy
            .refusal(tools::DELEGATE, &serde_json::json!({}), &claim.grants)
            .is_none();
    if !mcp.is_empty() {
        let tools = Arc::new(Offer::new(specs(shared, piece, mcp, delegates)));
        return Offered { tools, logins };
    }
    let key = (piece.name.clone(), delegates);
    let known = shared.offers.lock().expect("lock").get(&key).cloned();
    let tools = known.unwrap_or_else(|| {
        let offer = Arc::new(Offer::new(specs(shared, piece, mcp, delegates)));
        shared
            .offers
            .lock()
            .expect("lock")
            .insert(key, offer.clone());
        offer
    });
    Offered { tools, logins }
}

fn specs(shared: &Shared, piece: &Piece, mcp: Vec<ToolSpec>, delegates: bool) -> Vec<ToolSpec> {
    let mut tools = tools::builtin_tools();
    tools.extend(mcp);
    tools.extend(tools::human_tools());
    if delegates {
        let pieces: Vec<String> = shared.catalog.pieces().map(|p| p.name.clone()).collect();
        tools.push(tools::delegate_tool(&pieces));
    }
    let targets = piece.targets();
    if !targets.is_empty() {
        tools.push(tools::transition_tool(&targets));
    }
    tools.push(tools::complete_tool());
    tools
}

/// What the prompt shows of the task's workspace — `AGENTS.md`, the memory and skills
/// indexes, the lessons — read in one tool-runner call (the worker has no access to
/// workspaces), when the policy lets the job read files. Nothing when that fails: the job
/// starts without it.
async fn workspace_context(shared: &Shared, workspace: TaskId, job_id: JobId) -> WorkspaceContext {
    let probe = serde_json::json!({"path": "AGENTS.md"});
    if shared.policy.refusal("read_file", &probe, &[]).is_some() {
        return WorkspaceContext::default();
    }
    let request = ToolExecRequest::internal(
        (workspace, job_id),
        "workspace_context",
        tools::WORKSPACE_CONTEXT,
        serde_json::json!({}),
        5_000,
    );
    let subject = shared.bus.subjects.tools_exec();
    match tool_client::execute(&shared.bus.nats, subject, &request, Duration::from_secs(5)).await {
        Ok(reply) if reply.ok => serde_json::from_str(&reply.output).unwrap_or_default(),
        Ok(reply) => {
            tracing::warn!(error = %reply.output, "cannot read the workspace context");
            WorkspaceContext::default()
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the workspace context; the job starts without it");
            WorkspaceContext::default()
        }
    }
}

/// The workspace context of a new job, read while the claim is being made (a read, so a claim
/// that fails wastes nothing but the read): a task works in its own workspace unless it is a
/// subtask, and the claim says which.
#[derive(Debug)]
pub struct EarlyContext {
    workspace: TaskId,
    read: tokio::task::JoinHandle<WorkspaceContext>,
}

impl EarlyContext {
    /// Start reading task `task_id`'s own workspace context for job `job_id`.
    pub fn start(shared: &Shared, task_id: TaskId, job_id: JobId) -> Self {
        let shared = shared.clone();
        let read = tokio::spawn(async move { workspace_context(&shared, task_id, job_id).await });
        Self {
            workspace: task_id,
            read,
        }
    }

    /// The context `claim` opens with: none when the workspace cannot hold anything yet
    /// ([`untouched`]), else the early read's when it was of the claim's workspace.
    pub async fn take(early: Option<Self>, shared: &Shared, claim: &Claimed) -> WorkspaceContext {
        if untouched(claim) {
            return WorkspaceContext::default();
        }
        match early {
            // A space's task reads again once its worktree is ready (and under the space's
            // own policy, which may not let the job read what the early read did).
            Some(mut early)
                if early.workspace == claim.workspace_id && claim.space_id.is_none() =>
            {
                (&mut early.read).await.unwrap_or_default()
            }
            _ => workspace_context(shared, claim.workspace_id, claim.job_id).await,
        }
    }
}

/// Whether the claimed job's workspace cannot hold anything yet: the first claim of a task's
/// first job, in a workspace of its own (not a subtask's parent's, not a space's worktree),
/// with no files attached. Nothing but that task's jobs writes there, and none has run, so
/// its context is empty without asking the tool-runner.
pub fn untouched(claim: &Claimed) -> bool {
    claim.attempt == 1
        && claim.job_no == 1
        && claim.continued_from.is_none()
        && claim.workspace_id == claim.task_id
        && claim.space_id.is_none()
        && !claim.unplaced_attachments
}

/// A read nobody takes (the claim failed, or the job resumes) is stopped.
impl Drop for EarlyContext {
    fn drop(&mut self) {
        self.read.abort();
    }
}

/// The MCP servers' tools, each server listed on first use and kept for the life of the
/// worker (in the policy's order, so the bytes never change) or until the server says its
/// list changed. A server that cannot be listed now is tried again by the next job. A server
/// that needs authorization — a token (`requires_auth`), or a remote server's OAuth grant —
/// is listed per owner (with the owner's token, which may change what it offers) once a job
/// has one, and left out until then; a remote server that answers 401 is returned with its
/// challenge (a login is due).
async fn mcp_tools(
    shared: &Shared,
    owner: &str,
    tokens: &BTreeMap<String, String>,
) -> (Vec<ToolSpec>, Vec<(String, String)>) {
    let mut cached = shared.mcp_tools.lock().await;
    let mut tools = Vec::new();
    let mut logins = Vec::new();
    for (name, server) in &shared.policy.mcp_servers {
        let token = tokens.get(name);
        if server.requires_auth && token.is_none() {
            continue;
        }
        let key = match token {
            Some(_) => format!("{name}\u{0}{owner}"),
            None => name.clone(),
        };
        if let Some(listed) = cached.get(&key) {
            tools.extend(listed.iter().cloned());
            continue;
        }
        let request = McpListRequest {
            target: McpTarget {
                name: name.clone(),
                server: server.clone(),
                token: token.cloned(),
            },
            network: shared.policy.network,
            allowed_hosts: shared.policy.allowed_hosts.clone(),
        };
        let payload = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
        let mut headers = async_nats::HeaderMap::new();
        maestro_messaging::trace::inject(&mut headers);
        let message = async_nats::Request::new()
            .payload(payload)
            .headers(headers)
            .timeout(Some(Duration::from_secs(30)));
        let reply = shared
            .bus
            .nats
            .send_request(shared.bus.subjects.mcp_list(), message)
            .await;
        match reply.map(|r| serde_json::from_slice::<McpListReply>(&r.payload)) {
            Ok(Ok(McpListReply {
                auth_challenge: Some(challenge),
                ..
            })) if server.may_need_login() => {
                tracing::info!(server = %name, "the MCP server asks for a login");
                logins.push((name.clone(), challenge));
            }
            Ok(Ok(McpListReply {
                tools: listed,
                error: None,
                ..
            })) => {
                tools.extend(listed.iter().cloned());
                cached.insert(key, listed);
            }
            Ok(Ok(McpListReply {
                error: Some(error), ..
            })) => {
                tracing::warn!(server = %name, %error, "cannot list the MCP server's tools");
            }
            Ok(Err(e)) => {
                tracing::warn!(server = %name, error = %e, "malformed MCP listing");
            }
            Err(e) => {
                tracing::warn!(server = %name, error = %e, "no tool-runner listed the MCP server");
            }
        }
    }
    (tools, logins)
}

/// Forget the listings of MCP server `server` (its tool list changed): the next job lists it
/// again.
pub async fn forget_listing(
    shared_tools: &tokio::sync::Mutex<BTreeMap<String, Vec<ToolSpec>>>,
    server: &str,
) {
    let owned = format!("{server}\u{0}");
    shared_tools
        .lock()
        .await
        .retain(|key, _| key != server && !key.starts_with(&owned));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::claim;

    #[test]
    fn only_a_new_tasks_first_claim_in_its_own_empty_workspace_is_untouched() {
        let own = || {
            let mut claim = claim(1);
            claim.workspace_id = claim.task_id;
            claim
        };
        assert!(untouched(&own()));
        type Change = fn(&mut Claimed);
        let cases: [(&str, Change); 6] = [
            ("a second claim (an earlier attempt ran)", |c| c.attempt = 2),
            ("a later job", |c| c.job_no = 2),
            ("a Continue", |c| {
                c.continued_from = Some(maestro_domain::JobId::new())
            }),
            ("a subtask in its parent's workspace", |c| {
                c.workspace_id = maestro_domain::TaskId::new()
            }),
            ("a space's worktree", |c| {
                c.space_id = Some(maestro_domain::SpaceId(uuid::Uuid::now_v7()))
            }),
            ("files to place", |c| c.unplaced_attachments = true),
        ];
        for (case, change) in cases {
            let mut claim = own();
            change(&mut claim);
            assert!(!untouched(&claim), "{case}");
        }
        assert!(!untouched(&claim(1)), "another task's workspace");
    }
}
