//! The tools a job offers the model: the built-ins, the tools of the workspace's MCP servers
//! (listed once through a tool-runner and kept for the life of the worker, so the `tools`
//! array has the same bytes in every request), and `complete`, in that order.

use std::time::Duration;

use bytes::Bytes;
use maestro_domain::tools::{self, McpListReply, McpListRequest, McpTarget, ToolSpec};

use super::Shared;

/// The offered tools, in their fixed order.
pub(super) async fn tools(shared: &Shared) -> Vec<ToolSpec> {
    let mut tools = tools::builtin_tools();
    tools.extend(mcp_tools(shared).await);
    tools.push(tools::complete_tool());
    tools
}

/// The MCP servers' tools, listed on first use. A server that cannot be listed now is tried
/// again by the next job; servers that need authorization are not started at all.
async fn mcp_tools(shared: &Shared) -> Vec<ToolSpec> {
    let mut cached = shared.mcp_tools.lock().await;
    if let Some(tools) = cached.as_ref() {
        return tools.clone();
    }
    let mut tools = Vec::new();
    let mut complete = true;
    for (name, server) in shared
        .policy
        .mcp_servers
        .iter()
        .filter(|(_, s)| !s.requires_auth)
    {
        let request = McpListRequest {
            target: McpTarget {
                name: name.clone(),
                server: server.clone(),
            },
            network: shared.policy.network,
        };
        let payload = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
        let message = async_nats::Request::new()
            .payload(payload)
            .timeout(Some(Duration::from_secs(30)));
        let reply = shared
            .nats
            .send_request(shared.subjects.mcp_list(), message)
            .await;
        match reply.map(|r| serde_json::from_slice::<McpListReply>(&r.payload)) {
            Ok(Ok(McpListReply {
                tools: listed,
                error: None,
            })) => tools.extend(listed),
            Ok(Ok(McpListReply {
                error: Some(error), ..
            })) => {
                tracing::warn!(server = %name, %error, "cannot list the MCP server's tools");
                complete = false;
            }
            Ok(Err(e)) => {
                tracing::warn!(server = %name, error = %e, "malformed MCP listing");
                complete = false;
            }
            Err(e) => {
                tracing::warn!(server = %name, error = %e, "no tool-runner listed the MCP server");
                complete = false;
            }
        }
    }
    if complete {
        *cached = Some(tools.clone());
    }
    tools
}
