//! One tool call as the tool-runner runs it: what it asks for, where, and within which
//! limits. Below both the built-in tools and the MCP client.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::workspace::Workspace;

/// Output limits of the file tools.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_read_bytes: usize,
    pub max_output_bytes: usize,
}

/// Everything a tool call may use.
#[derive(Debug, Clone)]
pub struct Call {
    pub tool: String,
    pub arguments: Value,
    pub workspace: Workspace,
    pub limits: Limits,
    pub timeout: std::time::Duration,
    pub network: bool,
    pub allowed_hosts: Vec<String>,
    pub operation_id: String,
    /// The task the call is for.
    pub task: maestro_domain::TaskId,
    /// For an MCP tool: its server.
    pub mcp: Option<maestro_domain::tools::McpTarget>,
}

pub(crate) fn parse<T: DeserializeOwned>(arguments: Value) -> Result<T, String> {
    serde_json::from_value(arguments).map_err(|e| format!("invalid arguments: {e}"))
}
