//! Settings of the tool-runner, from the environment.

use std::path::PathBuf;
use std::time::Duration;

use maestro_runtime::{ConfigError, Env};

use crate::sandbox::Limits;

/// How the tool-runner runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub nats_url: String,
    pub subject_prefix: String,
    /// Root under which each task gets `<root>/<task_id>` as its workspace.
    pub workspaces_dir: PathBuf,
    /// Tool calls executed at once by this instance.
    pub concurrency: usize,
    /// Largest file `read_file` returns whole; larger files are truncated with a marker.
    pub max_read_bytes: usize,
    /// Longest any tool call may take, whatever the request asks.
    pub max_timeout: Duration,
    pub bwrap: PathBuf,
    /// `(uid, gid)` sandboxed programs run as when the tool-runner runs as root.
    pub sandbox_user: (u32, u32),
    pub limits: Limits,
    pub extra_ro_paths: Vec<PathBuf>,
    /// `maestro-sandbox-forward`, which programs granted network reach the egress proxy by.
    pub forwarder: Option<PathBuf>,
    pub streams: maestro_messaging::setup::StreamSettings,
}

impl Settings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let mib = 1024 * 1024;
        Ok(Self {
            nats_url: env.string("NATS_URL", "nats://127.0.0.1:4222"),
            subject_prefix: env.string("SUBJECT_PREFIX", "maestro"),
            workspaces_dir: PathBuf::from(env.string("WORKSPACES_DIR", ".maestro/workspaces")),
            concurrency: env.parse("TOOL_CONCURRENCY", 64)?,
            max_read_bytes: env.parse("TOOL_MAX_READ_BYTES", 256 * 1024)?,
            max_timeout: env.millis("TOOL_MAX_TIMEOUT_MS", Duration::from_secs(600))?,
            bwrap: PathBuf::from(env.string("BWRAP_PATH", "bwrap")),
            sandbox_user: (
                env.parse("SANDBOX_UID", 65534)?,
                env.parse("SANDBOX_GID", 65534)?,
            ),
            limits: Limits {
                cpu_seconds: env.parse("SANDBOX_CPU_SECONDS", 60)?,
                memory_bytes: env.parse::<u64>("SANDBOX_MEMORY_MB", 1024)? * mib,
                max_processes: env.parse("SANDBOX_MAX_PROCESSES", 128)?,
                max_open_files: env.parse("SANDBOX_MAX_OPEN_FILES", 256)?,
                max_file_bytes: env.parse::<u64>("SANDBOX_MAX_FILE_MB", 256)? * mib,
                max_output_bytes: env.parse("TOOL_MAX_OUTPUT_BYTES", 256 * 1024)?,
            },
            extra_ro_paths: env
                .string("SANDBOX_RO_PATHS", "")
                .split(':')
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .collect(),
            forwarder: match env.string("SANDBOX_FORWARDER", "") {
                path if path.is_empty() => crate::sandbox::default_forwarder(),
                path => Some(PathBuf::from(path)),
            },
            streams: maestro_runtime::env::stream_settings(env)?,
        })
    }
}
