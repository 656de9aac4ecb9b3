//! MCP tools, on `rmcp` (the official Rust SDK): stdio servers run in the sandbox like any
//! program, in the task's workspace; remote servers are reached over Streamable HTTP by URL,
//! with the owner's bearer token when they need one. Sessions are kept per task and server
//! and closed after a while idle; a server that dies or drops its session is connected again
//! on the next call. A server that answers 401 is reported with its `WWW-Authenticate`
//! challenge, which is where an OAuth login starts (`maestro-mcp-oauth`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use maestro_domain::TaskId;
use maestro_domain::tools::{Idempotency, McpTarget, ToolSpec, mcp_tool_name, split_mcp_tool_name};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::process::Child;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::call::Call;
use crate::sandbox::{Held, Invocation, Network, Sandbox};

/// Sessions unused this long are closed.
const IDLE: Duration = Duration::from_secs(300);
/// Longest wait for a server to start and answer `initialize`, or to list its tools.
const START: Duration = Duration::from_secs(20);
/// The largest message a server may send (one JSON-RPC line or HTTP body).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Why a server could not be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpError {
    /// The server answered 401 (or 403 for a missing scope): its `WWW-Authenticate` challenge.
    AuthRequired {
        challenge: String,
    },
    Failed(String),
}

impl std::fmt::Display for McpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpError::AuthRequired { .. } => f.write_str("the MCP server requires authorization"),
            McpError::Failed(e) => f.write_str(e),
        }
    }
}

impl From<String> for McpError {
    fn from(e: String) -> Self {
        McpError::Failed(e)
    }
}

impl From<&str> for McpError {
    fn from(e: &str) -> Self {
        McpError::Failed(e.to_owned())
    }
}

/// Told the name of a server whose tool list changed (`notifications/tools/list_changed`).
pub type OnToolsChanged = Arc<dyn Fn(&str) + Send + Sync>;

/// MAESTRO's side of a connection: who it is, and what it does with the server's
/// notifications (a changed tool list is passed on; the rest are only logged by rmcp).
#[derive(Clone)]
pub struct Client {
    server: String,
    on_tools_changed: Option<OnToolsChanged>,
}

impl Client {
    pub fn new(server: &str, on_tools_changed: Option<OnToolsChanged>) -> Self {
        Self {
            server: server.to_owned(),
            on_tools_changed,
        }
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("maestro", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::info!(server = %self.server, "the MCP server's tool list changed");
        if let Some(tell) = &self.on_tools_changed {
            tell(&self.server);
        }
    }
}

/// A connected server.
pub type Connection = RunningService<RoleClient, Client>;

/// Connect to a remote server over Streamable HTTP, with `token` as the bearer when given.
pub async fn connect_http(
    url: &str,
    token: Option<&str>,
    client: Client,
) -> Result<Connection, McpError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
        .max_json_response_size(MAX_MESSAGE_BYTES)
        .max_sse_event_size(MAX_MESSAGE_BYTES)
        .reinit_on_expired_session(true);
    if let Some(token) = token {
        config = config.auth_header(token.to_owned());
    }
    let http = maestro_runtime::http_client()
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let transport = StreamableHttpClientTransport::with_client(http, config);
    match tokio::time::timeout(START, client.serve(transport)).await {
        Err(_) => Err(McpError::Failed(format!(
            "the MCP server at {url} did not answer initialize within {START:?}"
        ))),
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(e)) => Err(match e.auth_challenge() {
            Some(challenge) => McpError::AuthRequired {
                challenge: challenge.to_owned(),
            },
            None => McpError::Failed(format!("the MCP server at {url} did not start: {e}")),
        }),
    }
}

/// Connect to a server speaking on a child's stdio (one JSON-RPC message per line).
pub async fn connect_stdio<R, W>(
    stdout: R,
    stdin: W,
    client: Client,
) -> Result<Connection, McpError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    // A server that never ends a line cannot grow the tool-runner's memory.
    let transport =
        AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(MAX_MESSAGE_BYTES);
    let name = client.server.clone();
    match tokio::time::timeout(START, client.serve(transport)).await {
        Err(_) => Err(McpError::Failed(format!(
            "MCP server {name} did not answer initialize within {START:?}"
        ))),
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(e)) => Err(McpError::Failed(format!(
            "MCP server {name} did not start: {e}"
        ))),
    }
}

/// The tools of a connected server, as offered to the model (`mcp__<server>__<tool>`),
/// sorted.
pub async fn list_tools(connection: &Connection, server: &str) -> Result<Vec<ToolSpec>, McpError> {
    let listed = tokio::time::timeout(START, connection.peer().list_all_tools())
        .await
        .map_err(|_| format!("the MCP server did not list its tools within {START:?}"))?
        .map_err(|e| service_error("tools/list", &e))?;
    let mut tools: Vec<ToolSpec> = listed
        .iter()
        .map(|tool| spec(server, &serde_json::to_value(tool).unwrap_or_default()))
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tools)
}

/// Call `tool` with `arguments`, waiting at most `timeout`; `cancel` (the job's) stops the
/// wait, and rmcp tells the server (`notifications/cancelled`) when the request is dropped.
pub async fn call_tool(
    connection: &Connection,
    tool: &str,
    arguments: &Value,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<String, McpError> {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = match arguments {
        Value::Object(map) => Some(map.clone()),
        Value::Null => None,
        _ => {
            return Err(McpError::Failed(
                "tool arguments must be an object".to_owned(),
            ));
        }
    };
    let call = connection.peer().call_tool(params);
    let result = tokio::select! {
        result = tokio::time::timeout(timeout, call) => result
            .map_err(|_| format!("the MCP server did not answer tools/call within {timeout:?}"))?
            .map_err(|e| service_error("tools/call", &e))?,
        () = cancel.cancelled() => return Err(McpError::Failed("cancelled".to_owned())),
    };
    Ok(call_outcome(
        &serde_json::to_value(&result).unwrap_or_default(),
    )?)
}

fn service_error(method: &str, e: &rmcp::ServiceError) -> McpError {
    match e.auth_challenge() {
        Some(challenge) => McpError::AuthRequired {
            challenge: challenge.to_owned(),
        },
        None => McpError::Failed(format!("the MCP server failed {method}: {e}")),
    }
}

/// A running server and what keeps it running.
struct Session {
    connection: Connection,
    last_used: std::sync::Mutex<Instant>,
    /// A stdio server's process and its sandbox (none for a remote server).
    _process: Option<(Child, Held)>,
}

impl Session {
    fn usable(&self) -> bool {
        !self.connection.is_closed() && self.last_used.lock().expect("lock").elapsed() < IDLE
    }
}

/// A session per task (none: a listing) and server configuration (its token included, so a
/// new token is a new session).
type SessionKey = (Option<TaskId>, String);

/// The MCP sessions of this tool-runner.
#[derive(Clone, Default)]
pub struct McpSessions {
    sessions: Arc<Mutex<HashMap<SessionKey, Arc<Session>>>>,
    on_tools_changed: Option<OnToolsChanged>,
}

impl std::fmt::Debug for McpSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSessions").finish_non_exhaustive()
    }
}

impl McpSessions {
    /// Sessions that pass on tool-list changes to `tell`.
    pub fn telling(tell: OnToolsChanged) -> Self {
        Self {
            on_tools_changed: Some(tell),
            ..Self::default()
        }
    }

    /// The session of `target` for this task (`None`: a scratch session for listing).
    async fn session(
        &self,
        sandbox: &Sandbox,
        task: Option<TaskId>,
        target: &McpTarget,
        workspace: PathBuf,
        network: Network,
    ) -> Result<Arc<Session>, McpError> {
        let key = (
            task,
            format!(
                "{}:{}:{}",
                target.name,
                serde_json::to_string(&target.server).unwrap_or_default(),
                target.token.as_deref().unwrap_or_default()
            ),
        );
        let mut sessions = self.sessions.lock().await;
        sessions.retain(|_, s| s.usable());
        if let Some(session) = sessions.get(&key) {
            *session.last_used.lock().expect("lock") = Instant::now();
            return Ok(session.clone());
        }
        let client = Client::new(&target.name, self.on_tools_changed.clone());
        let session = Arc::new(start(sandbox, target, workspace, network, client).await?);
        sessions.insert(key, session.clone());
        Ok(session)
    }

    /// Forget the session of `target` for `task` (it failed; the next call reconnects).
    async fn drop_session(&self, task: Option<TaskId>, target: &McpTarget) {
        let mut sessions = self.sessions.lock().await;
        sessions
            .retain(|(t, name), _| !(*t == task && name.starts_with(&format!("{}:", target.name))));
    }

    /// The tools of a server, as offered to the model (`mcp__<server>__<tool>`), sorted.
    pub async fn list(
        &self,
        sandbox: &Sandbox,
        target: &McpTarget,
        scratch: PathBuf,
        network: Network,
    ) -> Result<Vec<ToolSpec>, McpError> {
        let session = self
            .session(sandbox, None, target, scratch, network)
            .await?;
        let listed = list_tools(&session.connection, &target.name).await;
        if listed.is_err() {
            self.drop_session(None, target).await;
        }
        listed
    }

    /// Run a call of one of the server's tools (`call.tool` is the offered name).
    pub async fn call(
        &self,
        sandbox: &Sandbox,
        task: TaskId,
        target: &McpTarget,
        call: &Call,
        cancel: &CancellationToken,
    ) -> Result<String, McpError> {
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
        let outcome = call_tool(
            &session.connection,
            tool,
            &call.arguments,
            call.timeout,
            cancel,
        )
        .await;
        if matches!(outcome, Err(McpError::AuthRequired { .. })) || session.connection.is_closed() {
            self.drop_session(Some(task), target).await;
        }
        outcome
    }
}

/// Start a session: a stdio server spawned in the sandbox, or a remote one connected.
async fn start(
    sandbox: &Sandbox,
    target: &McpTarget,
    workspace: PathBuf,
    network: Network,
    client: Client,
) -> Result<Session, McpError> {
    let server = &target.server;
    if let Some(url) = &server.url {
        let connection = connect_http(url, target.token.as_deref(), client).await?;
        return Ok(Session {
            connection,
            last_used: std::sync::Mutex::new(Instant::now()),
            _process: None,
        });
    }
    if server.command.is_empty() {
        return Err(McpError::Failed(format!(
            "MCP server {} has neither a command nor a url",
            target.name
        )));
    }
    let mut env: Vec<(String, String)> = server
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(token) = &target.token {
        env.push((server.token_env.clone(), token.clone()));
    }
    let invocation = Invocation {
        env,
        network,
        read_only: server.read_only_paths.iter().map(PathBuf::from).collect(),
        ..Invocation::new(workspace, server.command.clone(), Duration::MAX)
    };
    let (mut child, held) = sandbox
        .spawn(&invocation, true)
        .map_err(|e| e.to_string())?;
    let stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let connection = connect_stdio(stdout, stdin, client).await?;
    Ok(Session {
        connection,
        last_used: std::sync::Mutex::new(Instant::now()),
        _process: Some((child, held)),
    })
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
