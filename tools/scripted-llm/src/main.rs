//! `scripted-llm`: a deterministic OpenAI-compatible chat-completions server driven by a
//! scenario file, for MAESTRO's tests and demo. See `docs/scripted-llm.md`.
//!
//! Usage: `scripted-llm [--addr 127.0.0.1:8000] [--scenarios FILE] [--upstream URL]`. With
//! `--upstream`, every request is also sent to that real OpenAI-compatible server (for one
//! token), and its `usage` replaces the scripted estimate. Prints
//! `MAESTRO_READY service=scripted-llm addr=<addr>` on stdout once listening.

mod scenario;
mod server;

use anyhow::Context as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter("warn")
        .init();
    let mut addr = "127.0.0.1:8000".to_owned();
    let mut file = None;
    let mut upstream = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--addr" => addr = args.next().context("--addr needs a value")?,
            "--scenarios" => file = Some(args.next().context("--scenarios needs a value")?),
            "--upstream" => upstream = Some(args.next().context("--upstream needs a URL")?),
            "-h" | "--help" => {
                println!(
                    "usage: scripted-llm [--addr HOST:PORT] [--scenarios FILE] [--upstream URL]"
                );
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?} (try --help)"),
        }
    }
    let scenarios = match file {
        Some(path) => {
            let text = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
            serde_json::from_str(&text).with_context(|| format!("parse {path}"))?
        }
        None => scenario::Scenarios::default(),
    };
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("bind {addr}"))?;
    maestro_runtime::announce_ready("scripted-llm", Some(listener.local_addr()?));
    let upstream = match upstream {
        None => None,
        Some(base_url) => Some(server::Upstream {
            http: maestro_runtime::http_client()
                .timeout(std::time::Duration::from_secs(300))
                .build()?,
            base_url,
        }),
    };
    axum::serve(listener, server::router(scenarios, upstream)).await?;
    Ok(())
}
