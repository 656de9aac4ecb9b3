//! A NATS server with JetStream of its own for each test, on a free port, with its store in a
//! temporary directory. The binary is `NATS_SERVER_BIN`, or `nats-server` on `PATH`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};

/// A running nats-server.
#[derive(Debug)]
pub struct NatsServer {
    pub url: String,
    port: u16,
    store: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl NatsServer {
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut server = Self {
            url: format!("nats://127.0.0.1:{port}"),
            port,
            store: dir.join("jetstream"),
            log: dir.join("nats-server.log"),
            child: None,
        };
        server.run().await?;
        Ok(server)
    }

    fn binary() -> PathBuf {
        std::env::var_os("NATS_SERVER_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("nats-server"))
    }

    async fn run(&mut self) -> anyhow::Result<()> {
        let child = Command::new(Self::binary())
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.store)
            .arg("-l")
            .arg(&self.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("start nats-server (install it, or set NATS_SERVER_BIN)")?;
        self.child = Some(child);
        for _ in 0..100 {
            if let Ok(client) = async_nats::connect(&self.url).await {
                // Any answer from the JetStream API means JetStream is up.
                if client.request("$JS.API.INFO", "".into()).await.is_ok() {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("nats-server did not start; see {}", self.log.display())
    }

    /// Kill the server (SIGKILL).
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Start it again on the same port with the same store.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill().await;
        self.run().await
    }

    pub async fn client(&self) -> anyhow::Result<async_nats::Client> {
        Ok(async_nats::connect(&self.url).await?)
    }
}
