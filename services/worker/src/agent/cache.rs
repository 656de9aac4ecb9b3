//! The job's read cache: results of read-only calls, kept while the workspace has not
//! changed, so the model asking again gets the answer without another tool-runner round trip.
//! Any other call may change the workspace, so it forgets everything kept. A subtask keeps
//! nothing: sibling subtasks change the workspace it shares with them.

use std::collections::HashMap;

use maestro_domain::ToolCall;
use maestro_domain::tools::Idempotency;

/// Read-only results since the workspace last changed.
#[derive(Debug, Default)]
pub(super) struct ReadCache {
    enabled: bool,
    results: HashMap<String, String>,
}

impl ReadCache {
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            results: HashMap::new(),
        }
    }

    /// The kept result of the same call (same tool, same arguments).
    pub fn get(&self, call: &ToolCall) -> Option<&String> {
        self.results.get(&key(call))
    }

    /// Keep a successful read-only result; forget everything after a call of any other kind
    /// (`None`: not a tool of the job).
    pub fn remember(
        &mut self,
        call: &ToolCall,
        kind: Option<Idempotency>,
        result: &(String, bool),
    ) {
        match kind {
            Some(Idempotency::ReadOnly) if !result.1 && self.enabled => {
                self.results.insert(key(call), result.0.clone());
            }
            Some(Idempotency::ReadOnly) => {}
            _ => self.results.clear(),
        }
    }
}

/// The tool and its arguments, normalized (whitespace and key order do not matter).
fn key(call: &ToolCall) -> String {
    let arguments = maestro_domain::tools::parse_arguments(&call.function.arguments)
        .map(|v| v.to_string())
        .unwrap_or_default();
    format!("{}\u{0}{arguments}", call.name())
}
