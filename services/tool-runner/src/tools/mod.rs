//! The built-in tools. Each returns the text the model sees: `Ok` for a result, `Err` for an
//! error the model can act on (bad arguments, a missing file, a refused path, a failed
//! command). File tools run on a thread Landlock confines to the workspace; `shell` runs in
//! the bubblewrap sandbox; `http_fetch` runs only when the policy grants network.

mod files;
mod http;
mod packages;
mod search;
mod shell;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::sandbox::{self, Sandbox};
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

/// What tools run with.
#[derive(Debug, Clone)]
pub struct Toolbox {
    pub sandbox: Sandbox,
    pub mcp: crate::mcp::McpSessions,
}

impl Toolbox {
    /// Run one call.
    pub async fn execute(&self, call: Call, cancel: &CancellationToken) -> Result<String, String> {
        if let Some(target) = &call.mcp {
            let output = self
                .mcp
                .call(&self.sandbox, call.task, target, &call)
                .await?;
            return Ok(files::truncate(
                output,
                self.sandbox.limits.max_output_bytes,
            ));
        }
        let output = match call.tool.as_str() {
            "read_file"
            | "write_file"
            | "edit_file"
            | "list_files"
            | "glob"
            | "grep"
            | maestro_domain::tools::WORKSPACE_CONTEXT => self.confined(call).await?,
            "shell" => shell::run(&self.sandbox, &call, cancel).await?,
            "http_fetch" => http::fetch(&call).await?,
            maestro_domain::tools::INSTALL_PACKAGE => {
                packages::install(&self.sandbox, &call, cancel).await?
            }
            other => return Err(format!("unknown tool {other:?}")),
        };
        Ok(files::truncate(
            output,
            self.sandbox.limits.max_output_bytes,
        ))
    }

    /// A file tool, on a thread Landlock confines to the workspace.
    async fn confined(&self, call: Call) -> Result<String, String> {
        if let Some(reason) = &self.sandbox.files_unavailable {
            return Err(format!("the sandbox is unavailable on this host: {reason}"));
        }
        let root = call.workspace.root().to_path_buf();
        let owner = self.sandbox.run_as;
        let timeout = call.timeout;
        let work = sandbox::confined(&root, move || {
            let Call {
                tool,
                arguments,
                workspace,
                limits,
                ..
            } = call;
            match tool.as_str() {
                "grep" => search::grep(&workspace, parse(arguments)?, limits),
                _ => files::execute(&workspace, &tool, arguments, limits, owner),
            }
        });
        // The thread cannot be killed; past the time limit the call answers and the thread's
        // result is dropped when it ends.
        match tokio::time::timeout(timeout, work).await {
            Ok(outcome) => outcome.map_err(|e| e.to_string())?,
            Err(_) => Err(format!(
                "stopped: the call ran longer than {} s",
                timeout.as_secs_f32()
            )),
        }
    }
}

pub(crate) fn parse<T: DeserializeOwned>(arguments: Value) -> Result<T, String> {
    serde_json::from_value(arguments).map_err(|e| format!("invalid arguments: {e}"))
}
