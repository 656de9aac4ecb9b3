//! The whole MAESTRO stack for one test: a database, a NATS server, the scripted LLM and the
//! five services, each a real process.

use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::Value;

use crate::{Client, NatsServer, PgServer, Process, ScriptedLlm, TestDb};

/// The five services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    ApiGateway,
    Scheduler,
    Worker,
    ToolRunner,
    Notifier,
}

impl Service {
    pub const ALL: [Service; 5] = [
        Service::ApiGateway,
        Service::Scheduler,
        Service::Worker,
        Service::ToolRunner,
        Service::Notifier,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Service::ApiGateway => "api-gateway",
            Service::Scheduler => "scheduler",
            Service::Worker => "worker",
            Service::ToolRunner => "tool-runner",
            Service::Notifier => "notifier",
        }
    }

    fn binary(self) -> String {
        format!("maestro-{}", self.name())
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// The scripted LLM's scenarios (a scenario file's JSON).
    pub scenarios: Value,
    /// Extra environment for every service (overrides the defaults).
    pub env: Vec<(String, String)>,
    /// Services started at once, each as the instance named like the service.
    pub services: Vec<Service>,
    /// Run a PostgreSQL server of the test's own (so the test may stop and restart it)
    /// instead of using a database on the shared server.
    pub private_postgres: bool,
    /// A real OpenAI-compatible server whose usage the scripted LLM reports.
    pub llm_upstream: Option<String>,
    /// A workspace tool policy (JSON), written to the stack's directory as `WORKSPACE_POLICY`.
    pub policy: Option<String>,
    /// Piece files `(name, YAML)`, written to a `PIECES_DIR` of the stack's.
    pub pieces: Vec<(String, String)>,
    /// The worker's instance name, when not `worker`.
    pub worker_name: Option<String>,
    /// NATS as a JetStream cluster of this many nodes (`STREAM_REPLICAS` set to match, up to
    /// 3; every service given every node's URL) instead of one server.
    pub nats_nodes: usize,
}

impl StackOptions {
    pub fn new(scenarios: Value) -> Self {
        Self {
            scenarios,
            env: Vec::new(),
            services: Service::ALL.to_vec(),
            private_postgres: false,
            llm_upstream: None,
            policy: None,
            pieces: Vec::new(),
            worker_name: None,
            nats_nodes: 1,
        }
    }

    /// NATS as a JetStream cluster of `nodes` nodes ([`StackOptions::nats_nodes`]).
    pub fn nats_cluster(mut self, nodes: usize) -> Self {
        self.nats_nodes = nodes.max(1);
        self
    }

    /// Write the pieces and the policy into `dir`; the environment that points at them.
    fn files(&self, dir: &std::path::Path) -> anyhow::Result<Vec<(String, String)>> {
        let mut env = Vec::new();
        if !self.pieces.is_empty() {
            let pieces = dir.join("pieces");
            std::fs::create_dir_all(&pieces)?;
            for (name, yaml) in &self.pieces {
                let file = if name.contains('.') {
                    name.clone()
                } else {
                    format!("{name}.yaml")
                };
                std::fs::write(pieces.join(file), yaml)?;
            }
            env.push(("PIECES_DIR".to_owned(), pieces.display().to_string()));
        }
        if let Some(policy) = &self.policy {
            let path = dir.join("policy.json");
            std::fs::write(&path, policy)?;
            env.push(("WORKSPACE_POLICY".to_owned(), path.display().to_string()));
        }
        Ok(env)
    }

    /// Add a piece (its YAML), as the file `name` (`.yaml` added when it has no extension) in
    /// the stack's `PIECES_DIR`.
    pub fn piece(mut self, name: &str, yaml: &str) -> Self {
        self.pieces.push((name.to_owned(), yaml.to_owned()));
        self
    }

    pub fn policy(mut self, json: &str) -> Self {
        self.policy = Some(json.to_owned());
        self
    }

    /// A job's retry backoff: `base_ms` first, doubling up to `max_ms`.
    pub fn retry_backoff(self, base_ms: u64, max_ms: u64) -> Self {
        self.env("RETRY_BASE_MS", &base_ms.to_string())
            .env("RETRY_MAX_MS", &max_ms.to_string())
    }

    /// Start the worker as the instance `name` (to kill or stop it by that name) instead of
    /// `worker`.
    pub fn worker_named(mut self, name: &str) -> Self {
        self.worker_name = Some(name.to_owned());
        self
    }

    pub fn private_postgres(mut self) -> Self {
        self.private_postgres = true;
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }
}

/// A running stack. Dropping it stops every process and drops the database.
pub struct Stack {
    pub db: TestDb,
    /// The test's own PostgreSQL server, with [`StackOptions::private_postgres`].
    pub postgres: Option<PgServer>,
    /// The NATS server; with [`StackOptions::nats_cluster`], the cluster's first node.
    pub nats: NatsServer,
    /// The cluster's other nodes (none with a single server).
    pub nats_peers: Vec<NatsServer>,
    pub llm: ScriptedLlm,
    pub prefix: String,
    /// Bearer token of owner `alice`.
    pub token: String,
    /// Bearer token of owner `bob`.
    pub other_token: String,
    pub workspaces: PathBuf,
    pub http: reqwest::Client,
    processes: Vec<Process>,
    env: Vec<(String, String)>,
    gateway: Option<String>,
    /// The API as alice, once the gateway is up.
    alice: Option<Client>,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("prefix", &self.prefix)
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl Stack {
    pub async fn spawn(options: StackOptions) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("maestro-test-").tempdir()?;
        let postgres = if options.private_postgres {
            Some(PgServer::start(dir.path())?)
        } else {
            None
        };
        let admin_url = match &postgres {
            Some(server) => server.admin_url.clone(),
            None => TestDb::shared_admin_url(),
        };
        let nats_nodes = options.nats_nodes;
        let servers = async {
            if nats_nodes > 1 {
                crate::nats::start_cluster(dir.path(), nats_nodes).await
            } else {
                Ok(vec![NatsServer::start(dir.path()).await?])
            }
        };
        let (db, mut servers) = tokio::try_join!(TestDb::create_on(&admin_url), servers)?;
        let nats = servers.remove(0);
        let nats_peers = servers;
        let nats_url = std::iter::once(&nats)
            .chain(&nats_peers)
            .map(|n| n.url.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let replicas = nats_nodes.min(3).to_string();
        let llm = ScriptedLlm::start_with(
            &options.scenarios,
            dir.path(),
            options.llm_upstream.as_deref(),
        )
        .await?;
        let prefix = crate::unique("t");
        let workspaces = dir.path().join("workspaces");
        let token = "test-token-alice".to_owned();
        // Secrets at rest are sealed in every test stack, under a key of its own.
        let secrets_keys = format!("test:{}", crate::random_key());
        let other_token = "test-token-bob".to_owned();
        let mut env: Vec<(String, String)> = [
            ("DATABASE_URL", db.url.as_str()),
            ("NATS_URL", nats_url.as_str()),
            ("STREAM_REPLICAS", replicas.as_str()),
            ("SUBJECT_PREFIX", prefix.as_str()),
            ("LLM_BASE_URL", llm.base_url.as_str()),
            ("LLM_MODEL", "scripted"),
            ("GATEWAY_ADDR", "127.0.0.1:0"),
            (
                "API_TOKENS",
                "test-token-alice=alice,test-token-bob=bob,test-token-carol=carol",
            ),
            ("ADMIN_OWNERS", "alice"),
            ("SECRETS_KEYS", secrets_keys.as_str()),
            ("WORKSPACES_DIR", &workspaces.display().to_string()),
            ("LOG_FORMAT", "json"),
            ("RUST_LOG", "info"),
            ("RUST_BACKTRACE", "0"),
            ("DB_MAX_CONNECTIONS", "4"),
            ("RELAY_POLL_MS", "250"),
            ("REDISPATCH_INTERVAL_MS", "250"),
            ("REDISPATCH_GRACE_MS", "3000"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        env.extend(options.files(dir.path())?);
        env.extend(options.env);
        let mut stack = Self {
            db,
            postgres,
            nats,
            nats_peers,
            llm,
            prefix,
            token,
            other_token,
            workspaces,
            http: crate::http_client(),
            processes: Vec::new(),
            env,
            gateway: None,
            alice: None,
            dir,
        };
        for service in options.services {
            let instance = match (service, &options.worker_name) {
                (Service::Worker, Some(name)) => name.as_str(),
                _ => service.name(),
            };
            stack.start(service, instance, &[]).await?;
        }
        Ok(stack)
    }

    /// [`Stack::spawn`], for a test: a stack that does not start fails the test there.
    pub async fn up(options: StackOptions) -> Self {
        Self::spawn(options)
            .await
            .unwrap_or_else(|e| panic!("the stack starts: {e:#}"))
    }

    /// Start one more instance of `service` named `instance`, with extra environment.
    pub async fn start(
        &mut self,
        service: Service,
        instance: &str,
        extra: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let mut env = self.env.clone();
        env.push(("WORKER_ID".to_owned(), instance.to_owned()));
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let process = Process::start(
            instance,
            &crate::binary(&service.binary()),
            &[],
            &env,
            self.dir.path(),
        )
        .await?;
        if service == Service::ApiGateway {
            let addr = process
                .addr()
                .context("the gateway announces its address")?;
            let base = format!("http://{addr}");
            self.alice = Some(Client::new(self.http.clone(), &base, &self.token));
            self.gateway = Some(base);
        }
        self.processes.retain(|p| p.name != instance);
        self.processes.push(process);
        Ok(())
    }

    /// [`Stack::start`] with no extra environment, for a test: an instance that does not start
    /// fails the test there.
    pub async fn add(&mut self, service: Service, instance: &str) {
        self.start(service, instance, &[])
            .await
            .unwrap_or_else(|e| panic!("{instance} starts: {e:#}"));
    }

    /// Every NATS node (one without a cluster).
    pub fn nats_nodes(&self) -> Vec<&NatsServer> {
        std::iter::once(&self.nats)
            .chain(&self.nats_peers)
            .collect()
    }

    /// The NATS node named `name` (`n0`, `n1`, … in a cluster).
    pub fn nats_node(&mut self, name: &str) -> &mut NatsServer {
        std::iter::once(&mut self.nats)
            .chain(&mut self.nats_peers)
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no NATS node {name}"))
    }

    /// The cluster's JetStream meta leader's name.
    pub async fn nats_meta_leader(&self) -> anyhow::Result<String> {
        crate::nats::meta_leader(&self.nats_nodes()).await
    }

    /// The name of the node leading the stream of `role` (`JOBS`, `EVENTS`, …).
    pub async fn nats_stream_leader(&self, role: &str) -> anyhow::Result<String> {
        let stream = maestro_messaging::Subjects::new(&self.prefix)?.stream(role);
        crate::nats::stream_leader(&self.nats_nodes(), &stream).await
    }

    /// The base URL of gateway instance `instance`.
    pub fn gateway_url(&self, instance: &str) -> String {
        let addr = self
            .processes
            .iter()
            .find(|p| p.name == instance)
            .and_then(Process::addr)
            .unwrap_or_else(|| panic!("{instance} announced no address"));
        format!("http://{addr}")
    }

    /// The process of a running instance.
    pub fn process(&mut self, instance: &str) -> &mut Process {
        self.processes
            .iter_mut()
            .find(|p| p.name == instance)
            .expect("no such instance")
    }

    /// The process id of a running instance.
    pub fn pid(&self, instance: &str) -> Option<u32> {
        self.processes
            .iter()
            .find(|p| p.name == instance)
            .and_then(Process::pid)
    }

    /// Where an instance serves `/metrics`.
    pub fn metrics_addr(&self, instance: &str) -> std::net::SocketAddr {
        self.processes
            .iter()
            .find(|p| p.name == instance)
            .and_then(Process::metrics_addr)
            .unwrap_or_else(|| panic!("{instance} announced no metrics address"))
    }

    /// What an instance's `/metrics` answers now (Prometheus text).
    pub async fn scrape(&self, instance: &str) -> String {
        let addr = self.metrics_addr(instance);
        let response = self
            .http
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{instance}'s /metrics answers: {e}"));
        assert!(
            response.status().is_success(),
            "{instance}: {}",
            response.status()
        );
        response.text().await.expect("the metrics text")
    }

    /// The value of `key` in the environment the stack's services get.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The status of `GET <path>` on an instance's metrics listener (`/livez`, `/readyz`).
    pub async fn probe(&self, instance: &str, path: &str) -> u16 {
        let addr = self.metrics_addr(instance);
        self.http
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{instance}'s {path} answers: {e}"))
            .status()
            .as_u16()
    }

    /// SIGKILL an instance.
    pub async fn kill(&mut self, instance: &str) {
        self.process(instance).kill().await;
    }

    /// `http://127.0.0.1:<port><path>` of the gateway.
    pub fn url(&self, path: &str) -> String {
        format!(
            "{}{path}",
            self.gateway.as_deref().expect("the api-gateway is running")
        )
    }

    /// The workspace directory of a task.
    pub fn workspace(&self, task_id: impl std::fmt::Display) -> PathBuf {
        self.workspaces.join(task_id.to_string())
    }

    /// The A2A bindings as alice (`bob`: as bob).
    pub fn a2a(&self, bob: bool) -> crate::a2a::A2a {
        let token = if bob { &self.other_token } else { &self.token };
        let base = self.gateway.as_deref().expect("the api-gateway is running");
        crate::a2a::A2a::new(self.http.clone(), base, token)
    }

    /// The API as bob (another owner) sees it.
    pub fn bob(&self) -> Client {
        self.client_as(&self.other_token)
    }

    /// The API as carol (a third owner) sees it.
    pub fn carol(&self) -> Client {
        self.client_as("test-token-carol")
    }

    /// The API as the owner of `token` sees it.
    pub fn client_as(&self, token: &str) -> Client {
        Client::new(self.http.clone(), &self.url(""), token)
    }
}

/// A stack answers the API as alice: it is her [`Client`].
impl std::ops::Deref for Stack {
    type Target = Client;

    fn deref(&self) -> &Client {
        self.alice
            .as_ref()
            .expect("the api-gateway is running (start it before calling the API)")
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let show = std::thread::panicking() || std::env::var("TEST_LOG").is_ok_and(|v| v == "1");
        if show {
            for process in &self.processes {
                eprintln!(
                    "----- {} (last 40 lines of {}) -----",
                    process.name,
                    process.log_path().display()
                );
                eprintln!("{}", process.log_tail(40));
            }
            // Keep the directory for a post-mortem.
            let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir"));
            eprintln!("logs and workspaces kept in {}", dir.keep().display());
        }
    }
}
