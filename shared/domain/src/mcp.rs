//! MCP servers as the workspace policy configures them, and the names their tools are
//! offered under.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A stdio MCP server: the program and its arguments, run in the sandbox. Its `Debug` shows
/// the names of its environment variables only (a user's token travels in them).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Extra read-only paths the server needs (its installation).
    #[serde(default)]
    pub read_only_paths: Vec<String>,
    /// The server needs a token the user supplies (`mcp_auth_required` until then).
    #[serde(default)]
    pub requires_auth: bool,
    /// The environment variable the server reads its token from.
    #[serde(default = "token_env")]
    pub token_env: String,
}

fn token_env() -> String {
    "MCP_AUTH_TOKEN".to_owned()
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("read_only_paths", &self.read_only_paths)
            .field("requires_auth", &self.requires_auth)
            .field("token_env", &self.token_env)
            .finish()
    }
}

/// An MCP server as the workspace policy configures it, named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpTarget {
    pub name: String,
    pub server: McpServer,
}

/// The offered name of an MCP server's tool: `mcp__<server>__<tool>`.
pub fn mcp_tool_name(server: &str, tool: &str) -> String {
    format!("mcp__{server}__{tool}")
}

/// Split an offered MCP tool name into server and tool.
pub fn split_mcp_tool_name(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix("mcp__")?.split_once("__")
}
