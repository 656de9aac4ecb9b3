//! `mcp-test-server`: a remote MCP server for tests and demos, built on rmcp's server side
//! (Streamable HTTP at `/mcp`), with — given `--oauth` — a small OAuth 2.1 authorization
//! server in front of it, as the MCP authorization specification describes one:
//!
//! - `/mcp` answers 401 with `WWW-Authenticate: Bearer resource_metadata="…"` without a valid
//!   bearer token;
//! - `/.well-known/oauth-protected-resource[/mcp]` (RFC 9728) names the authorization server;
//! - `/.well-known/oauth-authorization-server` (RFC 8414) lists its endpoints;
//! - `/register` (RFC 7591) registers public clients dynamically;
//! - `/authorize` logs the user in at once (no page: a test's browser is an HTTP client) and
//!   redirects back with a code, or with `error=access_denied` under `--deny`;
//! - `/token` exchanges a code (PKCE S256 checked, redirect URI and client matched) and
//!   refreshes (`refresh_token` grant; each refresh token works once).
//!
//! Tools: `echo {message}`, `add {a, b}`, `whoami` (the logged-in user), and `grow`, which
//! adds the tool `extra` and tells the client its tool list changed. `/stats` counts grants,
//! for tests. Options: `--addr`, `--oauth`, `--deny`, `--user NAME`, `--token-ttl SECS`.
//! Announces `MAESTRO_READY addr=…` when it listens.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::extract::{Form, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Digest as _;

#[derive(Debug, Clone)]
struct Options {
    addr: SocketAddr,
    oauth: bool,
    deny: bool,
    user: String,
    token_ttl: Duration,
}

fn options() -> anyhow::Result<Options> {
    let mut options = Options {
        addr: "127.0.0.1:0".parse()?,
        oauth: false,
        deny: false,
        user: "octo".to_owned(),
        token_ttl: Duration::from_secs(3600),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--addr" => options.addr = value("--addr")?.parse()?,
            "--oauth" => options.oauth = true,
            "--deny" => options.deny = true,
            "--user" => options.user = value("--user")?,
            "--token-ttl" => {
                options.token_ttl = Duration::from_secs(value("--token-ttl")?.parse()?);
            }
            other => anyhow::bail!(
                "unknown option {other:?} (--addr, --oauth, --deny, --user, --token-ttl)"
            ),
        }
    }
    Ok(options)
}

/// A code or token the authorization server issued.
#[derive(Debug, Clone)]
struct Issued {
    client_id: String,
    user: String,
    redirect_uri: String,
    challenge: String,
}

#[derive(Default)]
struct Grants {
    clients: HashMap<String, Vec<String>>,
    codes: HashMap<String, Issued>,
    access: HashMap<String, (String, Instant)>,
    refresh: HashMap<String, (String, String)>,
}

struct Shared {
    options: Options,
    base: String,
    grants: Mutex<Grants>,
    code_grants: AtomicU64,
    refresh_grants: AtomicU64,
    grown: AtomicBool,
}

type AppState = Arc<Shared>;

fn random() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::init_process();
    let options = options()?;
    let listener = tokio::net::TcpListener::bind(options.addr).await?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        base: format!("http://{addr}"),
        options,
        grants: Mutex::default(),
        code_grants: AtomicU64::new(0),
        refresh_grants: AtomicU64::new(0),
        grown: AtomicBool::new(false),
    });
    let mcp = {
        let shared = shared.clone();
        StreamableHttpService::new(
            move || Ok(Tools(shared.clone())),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        )
    };
    let guarded = Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(shared.clone(), bearer));
    let app = Router::new()
        .merge(guarded)
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(server_metadata),
        )
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .route("/stats", get(stats))
        .with_state(shared);
    println!("MAESTRO_READY service=mcp-test-server addr={addr}");
    axum::serve(listener, app).await?;
    Ok(())
}

/// `/mcp` without a valid bearer token (under `--oauth`): 401 with the resource metadata.
async fn bearer(State(shared): State<AppState>, mut request: Request, next: Next) -> Response {
    if !shared.options.oauth {
        request
            .extensions_mut()
            .insert(User("anonymous".to_owned()));
        return next.run(request).await;
    }
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let user = token.and_then(|token| {
        let grants = shared.grants.lock().expect("lock");
        grants
            .access
            .get(&token)
            .filter(|(_, expires)| Instant::now() < *expires)
            .map(|(user, _)| user.clone())
    });
    match user {
        Some(user) => {
            request.extensions_mut().insert(User(user));
            next.run(request).await
        }
        None => {
            let challenge = format!(
                "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
                shared.base
            );
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, challenge)],
                "a bearer token is required",
            )
                .into_response()
        }
    }
}

#[derive(Debug, Clone)]
struct User(String);

async fn resource_metadata(State(shared): State<AppState>) -> Json<Value> {
    Json(json!({
        "resource": format!("{}/mcp", shared.base),
        "authorization_servers": [shared.base],
        "scopes_supported": ["tools"],
        "bearer_methods_supported": ["header"]
    }))
}

async fn server_metadata(State(shared): State<AppState>) -> Json<Value> {
    let base = &shared.base;
    Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "scopes_supported": ["tools"]
    }))
}

async fn register(State(shared): State<AppState>, Json(body): Json<Value>) -> Response {
    let redirects: Vec<String> = body["redirect_uris"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    if redirects.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_redirect_uri"})),
        )
            .into_response();
    }
    let client_id = random();
    shared
        .grants
        .lock()
        .expect("lock")
        .clients
        .insert(client_id.clone(), redirects.clone());
    (
        StatusCode::CREATED,
        Json(json!({
            "client_id": client_id,
            "client_name": body["client_name"],
            "redirect_uris": redirects,
            "token_endpoint_auth_method": "none"
        })),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
struct AuthorizeQuery {
    client_id: String,
    redirect_uri: String,
    state: String,
    code_challenge: String,
    code_challenge_method: String,
}

/// The user logs in at once: back to the client with a code (or, under `--deny`, a refusal).
async fn authorize(State(shared): State<AppState>, Query(q): Query<AuthorizeQuery>) -> Response {
    let known = shared
        .grants
        .lock()
        .expect("lock")
        .clients
        .get(&q.client_id)
        .is_some_and(|uris| uris.contains(&q.redirect_uri));
    if !known || q.code_challenge_method != "S256" {
        return (
            StatusCode::BAD_REQUEST,
            "unknown client, redirect URI or PKCE method",
        )
            .into_response();
    }
    let separator = if q.redirect_uri.contains('?') {
        '&'
    } else {
        '?'
    };
    if shared.options.deny {
        let to = format!(
            "{}{separator}error=access_denied&error_description=the+user+said+no&state={}",
            q.redirect_uri, q.state
        );
        return Redirect::to(&to).into_response();
    }
    let code = random();
    shared.grants.lock().expect("lock").codes.insert(
        code.clone(),
        Issued {
            client_id: q.client_id,
            user: shared.options.user.clone(),
            redirect_uri: q.redirect_uri.clone(),
            challenge: q.code_challenge,
        },
    );
    let to = format!(
        "{}{separator}code={code}&state={}&iss={}",
        q.redirect_uri,
        q.state,
        shared.base.replace(':', "%3A").replace('/', "%2F")
    );
    Redirect::to(&to).into_response()
}

#[derive(Debug, Deserialize)]
struct TokenForm {
    grant_type: String,
    code: Option<String>,
    code_verifier: Option<String>,
    redirect_uri: Option<String>,
    client_id: Option<String>,
    refresh_token: Option<String>,
}

fn token_error(error: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({"error": error}))).into_response()
}

async fn token(
    State(shared): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<TokenForm>,
) -> Response {
    let _ = headers;
    let user = match form.grant_type.as_str() {
        "authorization_code" => {
            let issued = form
                .code
                .as_ref()
                .and_then(|code| shared.grants.lock().expect("lock").codes.remove(code));
            let Some(issued) = issued else {
                return token_error("invalid_grant");
            };
            let verifier = form.code_verifier.unwrap_or_default();
            let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(verifier.as_bytes()));
            if challenge != issued.challenge
                || form.redirect_uri.as_deref() != Some(issued.redirect_uri.as_str())
                || form.client_id.as_deref() != Some(issued.client_id.as_str())
            {
                return token_error("invalid_grant");
            }
            shared.code_grants.fetch_add(1, Ordering::Relaxed);
            (issued.client_id, issued.user)
        }
        "refresh_token" => {
            let issued = form
                .refresh_token
                .as_ref()
                .and_then(|token| shared.grants.lock().expect("lock").refresh.remove(token));
            let Some(issued) = issued else {
                return token_error("invalid_grant");
            };
            shared.refresh_grants.fetch_add(1, Ordering::Relaxed);
            issued
        }
        _ => return token_error("unsupported_grant_type"),
    };
    let (client_id, user) = user;
    let (access, refresh) = (random(), random());
    let ttl = shared.options.token_ttl;
    {
        let mut grants = shared.grants.lock().expect("lock");
        grants
            .access
            .insert(access.clone(), (user.clone(), Instant::now() + ttl));
        grants.refresh.insert(refresh.clone(), (client_id, user));
    }
    Json(json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": ttl.as_secs(),
        "refresh_token": refresh,
        "scope": "tools"
    }))
    .into_response()
}

async fn stats(State(shared): State<AppState>) -> Json<Value> {
    Json(json!({
        "code_grants": shared.code_grants.load(Ordering::Relaxed),
        "refresh_grants": shared.refresh_grants.load(Ordering::Relaxed),
    }))
}

/// The MCP side.
#[derive(Clone)]
struct Tools(AppState);

fn schema(value: Value) -> Arc<serde_json::Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::default(),
    }
}

fn text(result: String) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(result)]).into()
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_instructions("MAESTRO's test MCP server")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = vec![
            Tool::new(
                "echo",
                "Say the message back",
                schema(
                    json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
                ),
            ),
            Tool::new(
                "add",
                "Add two integers",
                schema(
                    json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
                ),
            ),
            Tool::new(
                "whoami",
                "Who the caller is logged in as",
                schema(json!({"type": "object"})),
            ),
            Tool::new(
                "grow",
                "Add the tool `extra`",
                schema(json!({"type": "object"})),
            ),
        ];
        if self.0.grown.load(Ordering::Relaxed) {
            tools.push(Tool::new(
                "extra",
                "Offered after grow",
                schema(json!({"type": "object"})),
            ));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let user = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<User>())
            .map_or_else(|| "unknown".to_owned(), |u| u.0.clone());
        match request.name.as_ref() {
            "echo" => Ok(text(format!(
                "Echo: {}",
                arguments
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ))),
            "add" => {
                let (Some(a), Some(b)) = (
                    arguments.get("a").and_then(Value::as_i64),
                    arguments.get("b").and_then(Value::as_i64),
                ) else {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(
                        "a and b must be integers",
                    )])
                    .into());
                };
                Ok(text((a + b).to_string()))
            }
            "whoami" => Ok(text(format!("logged in as {user}"))),
            "grow" => {
                self.0.grown.store(true, Ordering::Relaxed);
                if let Err(e) = context.peer.notify_tool_list_changed().await {
                    tracing::warn!(error = %e, "cannot tell the client");
                }
                Ok(text("the tool extra is offered now".to_owned()))
            }
            "extra" => Ok(text("extra ran".to_owned())),
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}
