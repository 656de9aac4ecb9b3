//! `maestro-mcp-probe`: connect MAESTRO's MCP client (the tool-runner's, on rmcp) to one
//! server, log in if it asks and `--login` is given, list its tools and call one. For people
//! debugging a server, and for conformance scenarios that drive a client.
//!
//! ```text
//! maestro-mcp-probe [--login] [--token TOKEN] [--call TOOL [--args JSON]] URL
//! maestro-mcp-probe [--call TOOL [--args JSON]] -- COMMAND [ARG...]
//! ```
//!
//! A stdio server is run as a plain child process here (no sandbox: the probe runs what you
//! ask, as you). With `--login`, a server that answers 401 gets the OAuth flow MAESTRO uses
//! (discovery from the challenge, dynamic client registration, PKCE): the probe prints
//! `login: <url>` and waits for the browser on a loopback callback. Exit status: 0 when the
//! listing (and the call) succeeded, 1 otherwise.

use std::time::Duration;

use anyhow::{Context as _, bail};
use maestro_tool_runner::mcp::{self, Client, Connection, McpError};
use rmcp::transport::auth::{AuthorizationManager, AuthorizationRequest, AuthorizationSession};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[derive(Debug, Default)]
struct Options {
    login: bool,
    token: Option<String>,
    call: Option<String>,
    args: Option<String>,
    url: Option<String>,
    command: Vec<String>,
}

const USAGE: &str = "usage: maestro-mcp-probe [--login] [--token TOKEN] [--call TOOL [--args JSON]] (URL | -- COMMAND [ARG...])";

fn options() -> anyhow::Result<Options> {
    let mut options = Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--login" => options.login = true,
            "--token" => options.token = Some(args.next().context("--token needs a value")?),
            "--call" => options.call = Some(args.next().context("--call needs a tool")?),
            "--args" => options.args = Some(args.next().context("--args needs JSON")?),
            "--" => {
                options.command = args.by_ref().collect();
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            url if !url.starts_with('-') && options.url.is_none() => {
                options.url = Some(url.to_owned())
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    if options.url.is_some() != options.command.is_empty() {
        bail!("name a server: a URL or -- COMMAND\n{USAGE}");
    }
    Ok(options)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    maestro_runtime::init_process();
    if let Err(e) = probe().await {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

async fn probe() -> anyhow::Result<()> {
    let options = options()?;
    let arguments: Value = match &options.args {
        Some(json) => serde_json::from_str(json).context("--args is not JSON")?,
        None => Value::Object(Default::default()),
    };
    let (connection, _child) = connect(&options).await?;
    let server = "probe";
    let tools = mcp::list_tools(&connection, server).await.map_err(failed)?;
    println!("tools: {}", tools.len());
    for tool in &tools {
        let name = tool.name.strip_prefix("mcp__probe__").unwrap_or(&tool.name);
        println!("  {name} ({:?}): {}", tool.idempotency, tool.description);
    }
    if let Some(tool) = &options.call {
        let never = tokio_util::sync::CancellationToken::new();
        let outcome = mcp::call_tool(
            &connection,
            tool,
            &arguments,
            Duration::from_secs(60),
            &never,
        )
        .await;
        match outcome {
            Ok(text) => println!("result of {tool}:\n{}", text.trim_end()),
            Err(e) => bail!("{tool} failed: {e}"),
        }
    }
    Ok(())
}

fn failed(e: McpError) -> anyhow::Error {
    match e {
        McpError::AuthRequired { challenge } => {
            anyhow::anyhow!("the server requires authorization ({challenge}); rerun with --login")
        }
        McpError::Failed(e) => anyhow::anyhow!(e),
    }
}

/// The connection, and the stdio server's process (killed when the probe is done).
async fn connect(options: &Options) -> anyhow::Result<(Connection, Option<tokio::process::Child>)> {
    let client = Client::new("probe", None);
    if let Some(url) = &options.url {
        let connection =
            match mcp::connect_http(url, options.token.as_deref(), client.clone()).await {
                Err(McpError::AuthRequired { challenge }) if options.login => {
                    let token = login(url, &challenge).await?;
                    mcp::connect_http(url, Some(&token), client).await
                }
                other => other,
            };
        return Ok((connection.map_err(failed)?, None));
    }
    let mut command = tokio::process::Command::new(&options.command[0]);
    command
        .args(&options.command[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .with_context(|| format!("start {}", options.command[0]))?;
    let stdin = child.stdin.take().context("stdin")?;
    let stdout = child.stdout.take().context("stdout")?;
    let connection = mcp::connect_stdio(stdout, stdin, client)
        .await
        .map_err(failed)?;
    Ok((connection, Some(child)))
}

/// The OAuth login MAESTRO does, with the probe's own loopback callback: returns the access
/// token.
async fn login(url: &str, challenge: &str) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let redirect = format!("http://{}/callback", listener.local_addr()?);
    let mut manager = AuthorizationManager::new(url).await?;
    let resolution = manager
        .resolve_metadata_from_challenge(Some(challenge))
        .await?;
    manager.set_metadata(resolution.metadata);
    let request = AuthorizationRequest::new(redirect.clone())
        .with_client_name("maestro-mcp-probe")
        .with_challenge(challenge);
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| e)?;
    println!("login: {}", session.get_authorization_url());
    let callback = tokio::time::timeout(Duration::from_secs(600), one_callback(&listener))
        .await
        .context("no login within 10 minutes")??;
    session
        .handle_callback_url(&format!("http://{}{callback}", listener.local_addr()?))
        .await
        .context("the login did not complete")?;
    println!("logged in");
    Ok(session.auth_manager.get_access_token().await?)
}

/// Accept one HTTP request on the callback listener; returns its path and query.
async fn one_callback(listener: &tokio::net::TcpListener) -> anyhow::Result<String> {
    loop {
        let (mut stream, _) = listener.accept().await?;
        let mut buffer = vec![0u8; 8192];
        let read = stream.read(&mut buffer).await?;
        let request = String::from_utf8_lossy(&buffer[..read]);
        let target = request
            .lines()
            .next()
            .and_then(|line| line.split_whitespace().nth(1))
            .unwrap_or_default()
            .to_owned();
        if !target.starts_with("/callback") {
            let _ = stream
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                .await;
            continue;
        }
        let page = "Logged in: you can close this page and go back to maestro-mcp-probe.";
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
            page.len()
        );
        stream.write_all(reply.as_bytes()).await?;
        return Ok(target);
    }
}
