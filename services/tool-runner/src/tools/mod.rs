//! The built-in tools. Each returns the text the model sees: `Ok` for a result, `Err` for an
//! error the model can act on (bad arguments, a missing file, a refused path, a failed
//! command). File tools run on a thread Landlock confines to the workspace; `shell` runs in
//! the bubblewrap sandbox; `http_fetch` runs only when the policy grants network.

pub(crate) mod files;
mod http;
mod packages;
mod search;
mod shell;

use tokio_util::sync::CancellationToken;

use crate::call::parse;
pub use crate::call::{Call, Limits};
use crate::sandbox::{self, Sandbox};

/// Whether `tool` (a built-in, not an MCP server's) only reads its workspace: run on a task
/// that has none yet, it reads an empty one ([`crate::workspace::Workspaces::open_to_read`]).
pub fn reads_only(tool: &str) -> bool {
    matches!(
        tool,
        "read_file" | "list_files" | "glob" | "grep" | maestro_domain::tools::WORKSPACE_CONTEXT
    )
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
                .call(&self.sandbox, call.task, target, &call, cancel)
                .await
                .map_err(|e| match e {
                    crate::mcp::McpError::AuthRequired { .. } => format!(
                        "the MCP server {} refused the owner's authorization (expired or \
                         revoked); the next job asks for a new login",
                        target.name
                    ),
                    crate::mcp::McpError::Failed(e) => e,
                })?;
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
            | maestro_domain::tools::WORKSPACE_CONTEXT
            | maestro_domain::tools::PLACE_ATTACHMENT => self.confined(call).await?,
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
        let writable = !call.workspace.is_stand_in();
        let work = move || {
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
        };
        let work = async move {
            if writable {
                sandbox::confined(&root, work).await
            } else {
                sandbox::confined_to_read(&root, work).await
            }
        };
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
