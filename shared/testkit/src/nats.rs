//! A NATS server with JetStream of its own for each test, on a free port, with its store in a
//! temporary directory; or a cluster of them ([`NatsCluster`]), each node a process on
//! loopback ports with JetStream of its own. The binary is `NATS_SERVER_BIN`, or
//! `nats-server` on `PATH`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::Value;
use tokio::process::{Child, Command};

/// A running nats-server.
#[derive(Debug)]
pub struct NatsServer {
    pub url: String,
    /// Its server name (`-n`): the name JetStream gives leaders.
    pub name: String,
    port: u16,
    /// Its part in a cluster, if it has one.
    cluster: Option<Node>,
    store: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// A cluster node's own route port, its peers' route URLs and its monitoring port.
#[derive(Debug, Clone)]
struct Node {
    cluster_name: String,
    route_port: u16,
    routes: String,
    monitor_port: u16,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl NatsServer {
    /// Start one on a free port; if it exits at once (the port taken by another test since
    /// [`free_port`] chose it), again on another, twice at most.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut server = Self::new(dir, "nats", None)?;
            match server.run().await {
                Ok(()) => return Ok(server),
                Err(error) if attempt < 3 && !server.is_up() => {
                    eprintln!("testkit: nats-server attempt {attempt} failed, retrying: {error:#}");
                }
                Err(error) => return Err(error),
            }
        }
    }

    fn new(dir: &Path, name: &str, cluster: Option<Node>) -> anyhow::Result<Self> {
        let port = free_port()?;
        Ok(Self {
            url: format!("nats://127.0.0.1:{port}"),
            name: name.to_owned(),
            port,
            cluster,
            store: dir.join(format!("jetstream-{name}")),
            log: dir.join(format!("{name}-server.log")),
            child: None,
        })
    }

    fn binary() -> PathBuf {
        std::env::var_os("NATS_SERVER_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("nats-server"))
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let mut command = Command::new(Self::binary());
        command
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-js"])
            .args(["-n", &self.name, "-sd"])
            .arg(&self.store)
            .arg("-l")
            .arg(&self.log);
        if let Some(node) = &self.cluster {
            command
                .args(["--cluster_name", &node.cluster_name])
                .args([
                    "--cluster",
                    &format!("nats://127.0.0.1:{}", node.route_port),
                ])
                .args(["--routes", &node.routes])
                .args(["-m", &node.monitor_port.to_string()]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("start nats-server (install it, or set NATS_SERVER_BIN)")?;
        self.child = Some(child);
        Ok(())
    }

    /// Wait until JetStream answers on this server (in a cluster: once a meta leader is
    /// elected). A server that exits meanwhile (a port taken since [`free_port`] chose it)
    /// fails at once; either failure carries the end of the server's log, which lives in the
    /// test's temporary directory and is gone once the test ends.
    async fn ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                bail!(
                    "nats-server {} exited ({status}){}",
                    self.name,
                    self.log_tail()
                );
            }
            if let Ok(client) = async_nats::connect(&self.url).await
                && let Ok(reply) = client.request("$JS.API.INFO", "".into()).await
                && serde_json::from_slice::<Value>(&reply.payload)
                    .is_ok_and(|info| info.get("error").is_none())
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!(
            "nats-server {} did not start within {timeout:?}{}",
            self.name,
            self.log_tail()
        )
    }

    /// The last lines of the server's log, for an error message.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines = log.lines().collect::<Vec<_>>();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        format!("; the end of {}:\n{tail}", self.log.display())
    }

    async fn run(&mut self) -> anyhow::Result<()> {
        self.spawn()?;
        self.ready(Duration::from_secs(30)).await
    }

    /// Kill the server (SIGKILL).
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Start it again on the same ports with the same store.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill().await;
        self.run().await
    }

    pub async fn client(&self) -> anyhow::Result<async_nats::Client> {
        Ok(async_nats::connect(&self.url).await?)
    }

    /// Whether the process is up (killed ones are not).
    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }
}

/// Start a JetStream cluster of `nodes` nats-servers on loopback, each with a store of its
/// own, and wait until every node answers JetStream requests. A node that exits (a port
/// another test took between [`free_port`] and the bind) or a cluster without a meta leader
/// in time (two cores shared with a whole suite) is retried, twice, on fresh ports.
pub async fn start_cluster(dir: &Path, nodes: usize) -> anyhow::Result<Vec<NatsServer>> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let cluster_dir = dir.join(format!("cluster-{attempt}"));
        std::fs::create_dir_all(&cluster_dir)?;
        match try_start_cluster(&cluster_dir, nodes).await {
            Ok(servers) => return Ok(servers),
            Err(error) if attempt < 3 => {
                eprintln!("testkit: NATS cluster attempt {attempt} failed, retrying: {error:#}");
            }
            Err(error) => return Err(error),
        }
    }
}

async fn try_start_cluster(dir: &Path, nodes: usize) -> anyhow::Result<Vec<NatsServer>> {
    let route_ports = (0..nodes)
        .map(|_| free_port())
        .collect::<anyhow::Result<Vec<_>>>()?;
    let routes = route_ports
        .iter()
        .map(|p| format!("nats://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let cluster_name = format!("maestro-{}", route_ports[0]);
    let mut servers = Vec::with_capacity(nodes);
    for (i, route_port) in route_ports.iter().enumerate() {
        let node = Node {
            cluster_name: cluster_name.clone(),
            route_port: *route_port,
            routes: routes.clone(),
            monitor_port: free_port()?,
        };
        servers.push(NatsServer::new(dir, &format!("n{i}"), Some(node))?);
    }
    // All of them first: none is ready before a quorum has elected a meta leader. (Dropping
    // `servers` on an error kills them.)
    for server in &mut servers {
        server.spawn()?;
    }
    for server in &mut servers {
        server.ready(Duration::from_secs(45)).await?;
    }
    Ok(servers)
}

/// `/jsz` of the first of `nodes` that is up and answers.
async fn jsz(nodes: &[&NatsServer]) -> anyhow::Result<Value> {
    for node in nodes.iter().filter(|n| n.is_up()) {
        let Some(cluster) = &node.cluster else {
            continue;
        };
        let url = format!("http://127.0.0.1:{}/jsz", cluster.monitor_port);
        let answer = async { reqwest::get(&url).await?.json::<Value>().await };
        if let Ok(jsz) = answer.await {
            return Ok(jsz);
        }
    }
    bail!("no node answers /jsz")
}

/// The name of the cluster's JetStream meta leader (the node that places streams), once
/// there is one.
pub async fn meta_leader(nodes: &[&NatsServer]) -> anyhow::Result<String> {
    for _ in 0..200 {
        if let Ok(jsz) = jsz(nodes).await
            && let Some(leader) = jsz["meta_cluster"]["leader"].as_str()
            && !leader.is_empty()
        {
            return Ok(leader.to_owned());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("no meta leader")
}

/// The name of the leader of stream `stream`, once it has one.
pub async fn stream_leader(nodes: &[&NatsServer], stream: &str) -> anyhow::Result<String> {
    for _ in 0..200 {
        for node in nodes.iter().filter(|n| n.is_up()) {
            let Ok(client) = node.client().await else {
                continue;
            };
            let subject = format!("$JS.API.STREAM.INFO.{stream}");
            if let Ok(reply) = client.request(subject, "".into()).await
                && let Ok(info) = serde_json::from_slice::<Value>(&reply.payload)
                && let Some(leader) = info["cluster"]["leader"].as_str()
            {
                return Ok(leader.to_owned());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("stream {stream} has no leader")
}
