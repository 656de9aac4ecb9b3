//! Settings of the worker, from the environment.

use std::time::Duration;

use maestro_domain::policy::ToolPolicy;
use maestro_llm::LlmConfig;
use maestro_runtime::env::CommonSettings;
use maestro_runtime::{ConfigError, Env};

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub common: CommonSettings,
    /// Identifies this worker in job rows and logs.
    pub worker_id: String,
    /// The dispatch profiles this worker serves (`<prefix>.jobs.dispatch.<profile>` each).
    pub profiles: Vec<String>,
    /// The models it serves (empty: any); it claims no job that names another.
    pub models: Vec<String>,
    /// Jobs run at once by this process.
    pub concurrency: usize,
    /// Start a job when its dispatch is published, not only when JetStream delivers it
    /// (`WORKER_DISPATCH_HINTS`, default on; see `hints.rs`).
    pub dispatch_hints: bool,
    /// Send a hinted new task's first LLM request while its job is claimed
    /// (`WORKER_EARLY_FIRST_CALL`, default on; see `agent/first_call.rs`).
    pub early_first_call: bool,
    /// How long a turn's results, sent to be committed while the next LLM request runs, wait
    /// for its reply to be committed with it (`WORKER_RESULTS_COMMIT_WAIT_MS`, default 25; 0:
    /// committed at once, and the reply read only once they are; see `agent/journal.rs`).
    pub results_commit_wait: Duration,
    /// JetStream `ack_wait` of the jobs consumer; also the job lease, renewed at a third of it.
    pub ack_wait: Duration,
    /// JetStream `max_deliver` of the jobs consumer.
    pub max_deliver: i64,
    pub llm: LlmConfig,
    /// Model used when a task names none.
    pub default_model: String,
    /// LLM iterations one job may take before it fails (each movement also has its piece's
    /// `max_iterations`).
    pub max_iterations: u32,
    /// Questions (`ask`) the model may put to the user within one task; past it, `ask` gets a
    /// tool error telling the model to go on with what it has.
    pub max_asks: i32,
    /// How old a job may grow (from its creation) before it fails; `None`: no limit.
    pub job_deadline: Option<Duration>,
    /// The prompt guard's budget: requests are kept within this many (estimated) tokens.
    pub max_prompt_tokens: usize,
    /// The pieces jobs run (built-ins plus `PIECES_DIR`).
    pub catalog: maestro_domain::piece::Catalog,
    /// The piece the router falls back to.
    pub default_piece: String,
    /// Longest a single tool call may take.
    pub tool_timeout: Duration,
    /// First retry delay after a recoverable error; doubled per attempt, with jitter.
    pub retry_base: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
    /// After SIGTERM, how long running jobs may go on before they are handed back.
    pub shutdown_grace: Duration,
    /// The gateway's URL as people reach it (`PUBLIC_URL`), for the login links of remote MCP
    /// servers; without it the links are paths on the gateway (which completes them when it
    /// shows the item).
    pub public_url: Option<String>,
    /// The workspace tool policy (`WORKSPACE_POLICY`, a JSON file; built-in default otherwise).
    pub policy: ToolPolicy,
    /// How deep subtasks may nest: a task at this depth is not offered `delegate` (0 turns
    /// delegation off).
    pub max_subtask_depth: i32,
    /// `delegate` calls one reply may make; the ones past it get a tool error.
    pub max_subtasks_per_turn: usize,
    /// The piece a subtask runs when the `delegate` call names none.
    pub subtask_piece: String,
}

impl Settings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let default_id = format!("worker-{}-{}", std::process::id(), short_random());
        // WORKER_PROFILE (one) is the older name of WORKER_PROFILES.
        let (key, spec) = match (env.opt("WORKER_PROFILES"), env.opt("WORKER_PROFILE")) {
            (Some(list), _) => ("WORKER_PROFILES", list),
            (None, Some(one)) => ("WORKER_PROFILE", one),
            (None, None) => ("WORKER_PROFILES", "default".to_owned()),
        };
        let profiles = list(&spec);
        if profiles.is_empty() {
            return Err(env.invalid(key, "name at least one profile"));
        }
        if let Some(bad) = profiles
            .iter()
            .find(|p| !maestro_domain::job::valid_profile(p))
        {
            return Err(env.invalid(
                key,
                format!("{bad:?}: a profile is 1 to 64 letters, digits, '-' and '_'"),
            ));
        }
        let models = list(&env.string("WORKER_MODELS", ""));
        let default_model = env.opt("LLM_MODEL").ok_or_else(|| {
            env.invalid("LLM_MODEL", "set the model a task uses when it names none")
        })?;
        if !models.is_empty() && !models.contains(&default_model) {
            return Err(env.invalid(
                "LLM_MODEL",
                format!("{default_model:?} is not one of WORKER_MODELS"),
            ));
        }
        let catalog = maestro_runtime::pieces::catalog(env)?;
        let default_piece = maestro_runtime::pieces::default_piece(env, &catalog)?;
        let job_deadline = env.millis("JOB_DEADLINE_MS", Duration::from_secs(3600))?;
        let subtask_piece = env.string("SUBTASK_PIECE", &default_piece);
        if catalog.get(&subtask_piece).is_none() {
            return Err(env.invalid("SUBTASK_PIECE", format!("no piece {subtask_piece:?}")));
        }
        Ok(Self {
            common: CommonSettings::from_env(env)?,
            job_deadline: (!job_deadline.is_zero()).then_some(job_deadline),
            max_prompt_tokens: env.parse("MAX_PROMPT_TOKENS", 100_000)?,
            catalog,
            default_piece,
            worker_id: env.string("WORKER_ID", &default_id),
            profiles,
            models,
            concurrency: env.parse("WORKER_CONCURRENCY", 32)?,
            dispatch_hints: env.parse("WORKER_DISPATCH_HINTS", true)?,
            early_first_call: env.parse("WORKER_EARLY_FIRST_CALL", true)?,
            results_commit_wait: env
                .millis("WORKER_RESULTS_COMMIT_WAIT_MS", Duration::from_millis(25))?,
            ack_wait: env.millis("JOB_ACK_WAIT_MS", Duration::from_secs(30))?,
            max_deliver: env.parse("JOB_MAX_DELIVER", 20)?,
            llm: LlmConfig {
                base_url: env.string("LLM_BASE_URL", "http://127.0.0.1:8000/v1"),
                api_key: env.opt("LLM_API_KEY"),
                connect_timeout: env.millis("LLM_CONNECT_TIMEOUT_MS", Duration::from_secs(5))?,
                idle_timeout: env.millis("LLM_IDLE_TIMEOUT_MS", Duration::from_secs(120))?,
            },
            default_model,
            max_iterations: env.parse("MAX_ITERATIONS", 100)?,
            max_asks: env.parse("MAX_ASKS", 5)?,
            max_subtask_depth: env.parse("MAX_SUBTASK_DEPTH", 2)?,
            max_subtasks_per_turn: env.parse("MAX_SUBTASKS_PER_TURN", 8)?,
            subtask_piece,
            tool_timeout: env.millis("TOOL_TIMEOUT_MS", Duration::from_secs(60))?,
            retry_base: env.millis("RETRY_BASE_MS", Duration::from_secs(1))?,
            retry_max: env.millis("RETRY_MAX_MS", Duration::from_secs(60))?,
            shutdown_grace: env.millis("SHUTDOWN_GRACE_MS", Duration::from_secs(20))?,
            public_url: env
                .opt("PUBLIC_URL")
                .map(|url| url.trim_end_matches('/').to_owned()),
            policy: match env.opt("WORKSPACE_POLICY") {
                None => ToolPolicy::default(),
                Some(path) => {
                    let text = std::fs::read_to_string(&path).map_err(|e| {
                        env.invalid("WORKSPACE_POLICY", format!("cannot read {path}: {e}"))
                    })?;
                    let policy: ToolPolicy = serde_json::from_str(&text).map_err(|e| {
                        env.invalid(
                            "WORKSPACE_POLICY",
                            format!("{path} is not a valid policy: {e}"),
                        )
                    })?;
                    if let Some(problem) = policy.problem() {
                        return Err(env.invalid("WORKSPACE_POLICY", format!("{path}: {problem}")));
                    }
                    policy
                }
            },
        })
    }
}

fn short_random() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// The non-empty items of a comma-separated list, trimmed.
fn list(spec: &str) -> Vec<String> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}
