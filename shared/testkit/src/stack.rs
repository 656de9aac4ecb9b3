//! The whole MAESTRO stack for one test: a database, a NATS server, the scripted LLM and the
//! five services, each a real process.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::{NatsServer, PgServer, Process, ScriptedLlm, SseClient, TestDb};

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
        }
    }

    pub fn policy(mut self, json: &str) -> Self {
        self.policy = Some(json.to_owned());
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
    pub nats: NatsServer,
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
        let (db, nats) =
            tokio::try_join!(TestDb::create_on(&admin_url), NatsServer::start(dir.path()))?;
        let llm = ScriptedLlm::start_with(
            &options.scenarios,
            dir.path(),
            options.llm_upstream.as_deref(),
        )
        .await?;
        let prefix = crate::unique("t");
        let workspaces = dir.path().join("workspaces");
        let token = "test-token-alice".to_owned();
        let other_token = "test-token-bob".to_owned();
        let mut env: Vec<(String, String)> = [
            ("DATABASE_URL", db.url.as_str()),
            ("NATS_URL", nats.url.as_str()),
            ("SUBJECT_PREFIX", prefix.as_str()),
            ("LLM_BASE_URL", llm.base_url.as_str()),
            ("LLM_MODEL", "scripted"),
            ("GATEWAY_ADDR", "127.0.0.1:0"),
            ("API_TOKENS", "test-token-alice=alice,test-token-bob=bob"),
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
        if let Some(policy) = &options.policy {
            let path = dir.path().join("policy.json");
            std::fs::write(&path, policy)?;
            env.push(("WORKSPACE_POLICY".to_owned(), path.display().to_string()));
        }
        env.extend(options.env);
        let mut stack = Self {
            db,
            postgres,
            nats,
            llm,
            prefix,
            token,
            other_token,
            workspaces,
            http: crate::http_client(),
            processes: Vec::new(),
            env,
            gateway: None,
            dir,
        };
        for service in options.services {
            stack.start(service, service.name(), &[]).await?;
        }
        Ok(stack)
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
            self.gateway = Some(format!("http://{addr}"));
        }
        self.processes.retain(|p| p.name != instance);
        self.processes.push(process);
        Ok(())
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
    pub fn workspace(&self, task_id: &str) -> PathBuf {
        self.workspaces.join(task_id)
    }

    /// `POST /api/local/tasks` as alice; fails unless the answer is 201.
    pub async fn create_task(&self, body: Value) -> anyhow::Result<Value> {
        let response = self
            .http
            .post(self.url("/api/local/tasks"))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await?;
        if status != reqwest::StatusCode::CREATED {
            bail!("create task answered {status}: {body}");
        }
        Ok(body)
    }

    /// Any API call as alice: `(status, JSON body)` (`null` for an empty body).
    pub async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .http
            .request(method, self.url(path))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).with_context(|| format!("not JSON: {text}"))?
        };
        Ok((status, body))
    }

    /// `GET /api/local/tasks/{id}` as alice.
    pub async fn get_task(&self, id: &str) -> anyhow::Result<Value> {
        let url = self.url(&format!("/api/local/tasks/{id}"));
        Ok(self
            .http
            .get(url)
            .bearer_auth(&self.token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Every persisted event of a task, as alice.
    pub async fn events(&self, id: &str) -> anyhow::Result<Vec<Value>> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let url = self.url(&format!(
                "/api/local/tasks/{id}/events?after={after}&limit=1000"
            ));
            let page: Value = self
                .http
                .get(url)
                .bearer_auth(&self.token)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let events = page["events"].as_array().cloned().unwrap_or_default();
            if events.is_empty() {
                return Ok(all);
            }
            after = page["next_after"].as_i64().context("next_after")?;
            all.extend(events);
        }
    }

    /// Poll the task until its latest job's status is one of `statuses`.
    pub async fn wait_for_status(
        &self,
        id: &str,
        statuses: &[&str],
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let task = self.get_task(id).await?;
            let status = task["latest_job"]["status"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if statuses.contains(&status.as_str()) {
                return Ok(task);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "task {id} is {status:?} after {timeout:?}, expected one of {statuses:?}: {task}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Open the task's SSE stream as alice.
    pub async fn stream(&self, id: &str, last_event_id: Option<&str>) -> anyhow::Result<SseClient> {
        let url = self.url(&format!("/api/local/tasks/{id}/stream"));
        SseClient::connect(&self.http, &url, &self.token, last_event_id).await
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
