//! What a job runs with and how it can end: the worker's shared dependencies ([`Shared`]), how
//! the job was delivered ([`Delivery`]), its ends ([`JobEnd`]) and the infrastructure trouble
//! that interrupts it ([`JobError`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use maestro_db::jobs::Fenced;
use maestro_db::{DbError, PgPool};
use maestro_domain::piece::Catalog;
use maestro_domain::policy::ToolPolicy;
use maestro_domain::tools::ToolSpec;
use maestro_llm::LlmClient;
use maestro_messaging::Bus;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;

/// What the job came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// Committed as succeeded.
    Succeeded,
    /// Committed as failed, for this reason.
    Failed(String),
    /// Committed as `retry`; dispatch again after this delay.
    Retry(std::time::Duration),
    /// Handed back (`queued`) because the worker is shutting down; dispatch again at once.
    Released,
    /// Committed as `waiting_human` (a person must act before the job goes on) or
    /// `waiting_subtasks` (its subtasks must be over).
    Paused,
    /// Another attempt holds the job now; this one stopped without writing.
    Fenced,
}

/// Infrastructure trouble while running a job.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Fenced(#[from] Fenced),
    #[error("a committed event cannot be read: {0}")]
    Corrupt(#[from] serde_json::Error),
    /// Another service could not do its part now (the tool-runner preparing a space's
    /// worktree, placing attachments, committing): the job is tried again.
    #[error("{0}")]
    Unavailable(String),
}

/// What jobs need from the worker.
#[derive(Debug, Clone)]
pub struct Shared {
    pub pool: PgPool,
    /// NATS, JetStream and the subjects: deltas, tool calls, and what follows a commit.
    pub bus: Bus,
    pub llm: LlmClient,
    pub settings: Arc<Settings>,
    /// Fires when the shutdown grace period is over: running jobs hand themselves back.
    pub release: CancellationToken,
    /// The workspace tool policy.
    pub policy: Arc<ToolPolicy>,
    /// The pieces jobs run.
    pub catalog: Arc<Catalog>,
    /// The tool-runner's record of ledgered operations' outcomes.
    pub operations: maestro_messaging::setup::OperationOutcomes,
    /// The MCP servers' tools, once listed.
    pub mcp_tools: Arc<tokio::sync::Mutex<BTreeMap<String, Vec<ToolSpec>>>>,
    /// The tools offered to jobs without MCP tools, rendered once.
    pub offers: super::catalog::Offers,
    /// Wake-ups for the jobs this worker runs.
    pub signals: crate::signals::Signals,
    /// Claims jobs, several per statement when several wait.
    pub claimer: crate::claimer::Claimer,
}

/// How this job was delivered and what can interrupt it.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Fires when the job's lease is lost.
    pub lost: CancellationToken,
    /// No redelivery follows this one: a recoverable error must fail the job now.
    pub last: bool,
    /// Set when an interjection is signalled for the job.
    pub interjections: Arc<AtomicBool>,
}
