//! Settings of the tool-runner, from the environment.

use std::path::PathBuf;

use maestro_runtime::{ConfigError, Env};

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
    /// Largest output any tool returns.
    pub max_output_bytes: usize,
}

impl Settings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            nats_url: env.string("NATS_URL", "nats://127.0.0.1:4222"),
            subject_prefix: env.string("SUBJECT_PREFIX", "maestro"),
            workspaces_dir: PathBuf::from(env.string("WORKSPACES_DIR", ".maestro/workspaces")),
            concurrency: env.parse("TOOL_CONCURRENCY", 64)?,
            max_read_bytes: env.parse("TOOL_MAX_READ_BYTES", 256 * 1024)?,
            max_output_bytes: env.parse("TOOL_MAX_OUTPUT_BYTES", 256 * 1024)?,
        })
    }
}
