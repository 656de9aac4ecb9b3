//! What becomes of a call before it runs (SPEC §3.2, §3.5), as the approvals gate
//! (`approvals.rs`) and the delegation gate (`subtasks.rs`) say: run it, park it for a
//! person, answer it without running, or start a subtask for it. Plain data, below both.

use maestro_domain::action::NewAction;
use maestro_domain::{ActionDetail, ToolCall};

/// What becomes of a call before it runs.
#[derive(Debug)]
pub(super) enum Gate {
    /// Run it (the policy is checked again as it runs).
    Run,
    /// It waits for a person: this item is recorded and the job pauses.
    Park(NewAction),
    /// Answered without running: `(content, is_error)`.
    Answer(String, bool),
    /// A `delegate` call: its subtask starts once the turn's other calls have run.
    Spawn(Delegation),
}

impl Gate {
    /// An error answer the model reads instead of a result.
    pub fn error(message: impl Into<String>) -> Self {
        Gate::Answer(message.into(), true)
    }
}

/// A checked `delegate` call, to start once the reply's other calls have run (a child must
/// not read the workspace before the calls that came before it changed it).
#[derive(Debug, Clone)]
pub(super) struct Delegation {
    pub key: String,
    pub instruction: String,
    pub piece: String,
}

/// Where a call stands in the job: its item key — the call's place (movement, iteration, call
/// id), the same on every claim that reaches it, unique even if a provider reuses call ids —
/// and its movement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CallSite {
    pub key: String,
    pub movement: String,
}

impl CallSite {
    pub fn new(movement: &str, iteration: u32, call: &ToolCall) -> Self {
        Self {
            key: format!("{movement}/{iteration}/{}", call.id),
            movement: movement.to_owned(),
        }
    }

    /// The item a call parked here waits on.
    pub fn item(&self, detail: ActionDetail) -> NewAction {
        NewAction {
            key: self.key.clone(),
            movement: self.movement.clone(),
            source_seq: None,
            detail,
        }
    }
}
