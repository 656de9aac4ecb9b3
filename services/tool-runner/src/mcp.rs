//! MCP tools: a client for stdio MCP servers (JSON-RPC 2.0, one message per line), each server
//! running in the sandbox like any program, in the task's workspace. Sessions are kept per
//! task and server and closed after a while idle; a server that dies is started again on the
//! next call.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use maestro_domain::TaskId;
use maestro_domain::tools::{Idempotency, McpTarget, ToolSpec, mcp_tool_name, split_mcp_tool_name};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt as _, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{Mutex, oneshot};

use crate::call::Call;
use crate::sandbox::{Held, Invocation, Network, Sandbox};

/// The protocol version this client speaks.
const PROTOCOL: &str = "2025-06-18";
/// Sessions unused this long are closed.
const IDLE: Duration = Duration::from_secs(300);
/// Longest wait for the server to start and answer `initialize`.
const START: Duration = Duration::from_secs(20);

type Pending = Arc<std::sync::Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;

/// A running MCP server.
struct Session {
    stdin: Mutex<ChildStdin>,
    pending: Pending,
    next_id: AtomicU64,
    alive: tokio_util::sync::CancellationToken,
    last_used: std::sync::Mutex<Instant>,
    _child: Child,
    _held: Held,
}

/// A session per task (none: a listing) and server configuration.
type SessionKey = (Option<TaskId>, String);

/// The MCP sessions of this tool-runner.
#[derive(Clone, Default)]
pub struct McpSessions {
    sessions: Arc<Mutex<HashMap<SessionKey, Arc<Session>>>>,
}

impl std::fmt::Debug for McpSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSessions").finish_non_exhaustive()
    }
}

impl McpSessions {
    /// The session of `target` for this task (`None`: a scratch session for listing).
    async fn session(
        &self,
        sandbox: &Sandbox,
        task: Option<TaskId>,
        target: &McpTarget,
        workspace: PathBuf,
        network: Network,
    ) -> Result<Arc<Session>, String> {
        let key = (
            task,
            format!(
                "{}:{}",
                target.name,
                serde_json::to_string(&target.server).unwrap_or_default()
            ),
        );
        let mut sessions = self.sessions.lock().await;
        sessions.retain(|_, s| {
            !s.alive.is_cancelled() && s.last_used.lock().expect("lock").elapsed() < IDLE
        });
        if let Some(session) = sessions.get(&key) {
            *session.last_used.lock().expect("lock") = Instant::now();
            return Ok(session.clone());
        }
        let session = Arc::new(Session::start(sandbox, target, workspace, network).await?);
        sessions.insert(key, session.clone());
        Ok(session)
    }

    /// The tools of a server, as offered to the model (`mcp__<server>__<tool>`), sorted.
    pub async fn list(
        &self,
        sandbox: &Sandbox,
        target: &McpTarget,
        scratch: PathBuf,
        network: Network,
    ) -> Result<Vec<ToolSpec>, String> {
        let session = self
            .session(sandbox, None, target, scratch, network)
            .await?;
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = session.request("tools/list", params, START).await?;
            for tool in page["tools"].as_array().cloned().unwrap_or_default() {
                tools.push(spec(&target.name, &tool));
            }
            cursor = page["nextCursor"].as_str().map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(tools)
    }

    /// Run a call of one of the server's tools (`call.tool` is the offered name).
    pub async fn call(
        &self,
        sandbox: &Sandbox,
        task: TaskId,
        target: &McpTarget,
        call: &Call,
    ) -> Result<String, String> {
        let (_, tool) = split_mcp_tool_name(&call.tool)
            .ok_or_else(|| format!("{} is not an MCP tool name", call.tool))?;
        let workspace = call.workspace.root().to_path_buf();
        let session = self
            .session(
                sandbox,
                Some(task),
                target,
                workspace,
                Network::granted(call.network, &call.allowed_hosts),
            )
            .await?;
        let params = json!({"name": tool, "arguments": call.arguments});
        let result = session.request("tools/call", params, call.timeout).await?;
        call_outcome(&result)
    }
}

/// What the model reads of a `tools/call` result: its text content (other kinds named), or
/// its structured content; `Err` when the server flags an error.
pub fn call_outcome(result: &Value) -> Result<String, String> {
    let mut text = String::new();
    for item in result["content"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("text") => text.push_str(item["text"].as_str().unwrap_or_default()),
            Some(kind) => text.push_str(&format!("[{kind} content]")),
            None => {}
        }
        text.push('\n');
    }
    if text.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        text = structured.to_string();
    }
    if result["isError"].as_bool().unwrap_or(false) {
        Err(text)
    } else {
        Ok(text)
    }
}

/// A tool of server `server` as the model sees it; its class comes from the server's hints.
pub fn spec(server: &str, tool: &Value) -> ToolSpec {
    let hints = &tool["annotations"];
    let idempotency = if hints["readOnlyHint"].as_bool() == Some(true) {
        Idempotency::ReadOnly
    } else if hints["idempotentHint"].as_bool() == Some(true) {
        Idempotency::Idempotent
    } else {
        Idempotency::SideEffecting
    };
    ToolSpec {
        name: mcp_tool_name(server, tool["name"].as_str().unwrap_or_default()),
        description: tool["description"].as_str().unwrap_or_default().to_owned(),
        parameters: tool
            .get("inputSchema")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"})),
        idempotency,
    }
}

impl Session {
    async fn start(
        sandbox: &Sandbox,
        target: &McpTarget,
        workspace: PathBuf,
        network: Network,
    ) -> Result<Self, String> {
        if target.server.command.is_empty() {
            return Err(format!("MCP server {} has no command", target.name));
        }
        let server = &target.server;
        let invocation = Invocation {
            env: server
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            network,
            read_only: server.read_only_paths.iter().map(PathBuf::from).collect(),
            ..Invocation::new(workspace, server.command.clone(), Duration::MAX)
        };
        let (mut child, held) = sandbox
            .spawn(&invocation, true)
            .map_err(|e| e.to_string())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let pending: Pending = Arc::default();
        let alive = tokio_util::sync::CancellationToken::new();
        tokio::spawn(read_replies(
            BufReader::new(stdout),
            pending.clone(),
            alive.clone(),
            target.name.clone(),
        ));
        let session = Self {
            stdin: Mutex::new(stdin),
            pending,
            next_id: AtomicU64::new(1),
            alive,
            last_used: std::sync::Mutex::new(Instant::now()),
            _child: child,
            _held: held,
        };
        let params = json!({
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "maestro", "version": env!("CARGO_PKG_VERSION")}
        });
        session
            .request("initialize", params, START)
            .await
            .map_err(|e| format!("MCP server {} did not start: {e}", target.name))?;
        session
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(session)
    }

    async fn send(&self, message: &Value) -> Result<(), String> {
        let mut line = message.to_string();
        line.push('\n');
        let mut stdin = self.stdin.lock().await;
        stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("the MCP server is gone: {e}"))?;
        stdin
            .flush()
            .await
            .map_err(|e| format!("the MCP server is gone: {e}"))
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("lock").insert(id, tx);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        let outcome = tokio::select! {
            reply = rx => reply.unwrap_or_else(|_| Err("the MCP server closed its output".to_owned())),
            _ = tokio::time::sleep(timeout) => Err(format!("the MCP server did not answer {method} within {timeout:?}")),
            _ = self.alive.cancelled() => Err("the MCP server exited".to_owned()),
        };
        self.pending.lock().expect("lock").remove(&id);
        outcome
    }
}

/// Route replies to their requests; notifications and server-to-client requests are ignored
/// (the client offers no capabilities, so a compliant server sends none it needs answered).
/// The largest message an MCP server may send (one JSON-RPC line).
const MAX_REPLY_BYTES: u64 = 16 * 1024 * 1024;

/// One line a server wrote, if it is the reply to a request: its id and its result, or the
/// error's message. Any bytes: invalid UTF-8 is read lossily; notifications, requests of the
/// server's own and lines that are not JSON are `None`.
pub fn parse_reply(line: &[u8]) -> Option<(u64, Result<Value, String>)> {
    let message = serde_json::from_str::<Value>(&String::from_utf8_lossy(line)).ok()?;
    let (Some(id), true) = (message["id"].as_u64(), message.get("method").is_none()) else {
        return None;
    };
    let reply = match message.get("error") {
        Some(error) => Err(error["message"].as_str().unwrap_or("error").to_owned()),
        None => Ok(message["result"].clone()),
    };
    Some((id, reply))
}

async fn read_replies(
    mut stdout: BufReader<tokio::process::ChildStdout>,
    pending: Pending,
    alive: tokio_util::sync::CancellationToken,
    name: String,
) {
    let mut line = Vec::new();
    loop {
        line.clear();
        // A line is read as bytes (a server's invalid UTF-8 costs that message, not the
        // session) and at most MAX_REPLY_BYTES of it (a server that never ends a line cannot
        // grow the tool-runner's memory).
        let mut limited = (&mut stdout).take(MAX_REPLY_BYTES + 1);
        match limited.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.len() as u64 > MAX_REPLY_BYTES {
            tracing::warn!(server = %name, "an MCP message over {MAX_REPLY_BYTES} bytes; stopping the server");
            break;
        }
        let Some((id, reply)) = parse_reply(&line) else {
            continue;
        };
        if let Some(tx) = pending.lock().expect("lock").remove(&id) {
            let _ = tx.send(reply);
        }
    }
    tracing::info!(server = %name, "MCP server exited");
    alive.cancel();
}
