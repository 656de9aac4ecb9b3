//! Scenario files: which conversation gets which answers.
//!
//! A request is matched to the first scenario whose `match` text occurs in its first user
//! message (a scenario without `match` matches everything). Its turn is the number of
//! assistant messages already in the request, so the same request always gets the same
//! answer — a job resumed after a crash sees exactly what it would have seen.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenarios {
    pub scenarios: Vec<Scenario>,
}

/// One scripted conversation.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    /// Text that must occur in the request's first user message.
    #[serde(default, rename = "match")]
    pub matches: Option<String>,
    pub turns: Vec<Turn>,
    /// Answer requests past the last turn with the last turn (else they get a 400).
    #[serde(default)]
    pub repeat_last: bool,
}

/// One answer.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    /// Characters per streamed chunk (text and tool arguments).
    #[serde(default = "default_chunk_chars")]
    pub chunk_chars: usize,
    /// Wait before the first chunk.
    #[serde(default)]
    pub delay_ms: u64,
    /// Wait between chunks.
    #[serde(default)]
    pub chunk_delay_ms: u64,
    /// Answer with an error instead, for the first `times` requests of this turn.
    #[serde(default)]
    pub fail: Option<Failure>,
    /// Cut the connection after this many chunks, for the first `times` requests of the turn.
    #[serde(default)]
    pub drop_after_chunks: Option<DropAfter>,
    /// Instead of `text`, stream this many chunks each holding the time it was sent
    /// (microseconds since the Unix epoch, then a space): for latency benchmarks.
    #[serde(default)]
    pub stamp_chunks: Option<usize>,
}

fn default_chunk_chars() -> usize {
    8
}

/// A scripted tool call.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    pub name: String,
    /// An object (sent as its JSON text) or a raw string (sent as is, possibly invalid JSON).
    #[serde(default)]
    pub arguments: Value,
    /// The call id; `call_<turn>_<index>` when absent, none at all when `""`.
    #[serde(default)]
    pub id: Option<String>,
}

impl ScriptedCall {
    pub fn arguments_text(&self) -> String {
        match &self.arguments {
            Value::String(raw) => raw.clone(),
            Value::Null => "{}".to_owned(),
            other => other.to_string(),
        }
    }
}

/// An injected error answer.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    pub status: u16,
    #[serde(default)]
    pub body: Option<String>,
    /// Seconds, sent as `Retry-After`.
    #[serde(default)]
    pub retry_after: Option<u64>,
    /// How many requests of this turn fail; 0 means all of them.
    #[serde(default = "one")]
    pub times: u32,
}

/// An injected broken stream.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DropAfter {
    pub chunks: usize,
    #[serde(default = "one")]
    pub times: u32,
}

fn one() -> u32 {
    1
}

impl Scenarios {
    /// The scenario for a request whose first user message is `first_user`.
    pub fn find(&self, first_user: &str) -> Option<&Scenario> {
        self.scenarios
            .iter()
            .find(|s| s.matches.as_deref().is_none_or(|m| first_user.contains(m)))
    }
}

impl Scenario {
    pub fn turn(&self, index: usize) -> Option<&Turn> {
        match self.turns.get(index) {
            Some(turn) => Some(turn),
            None if self.repeat_last => self.turns.last(),
            None => None,
        }
    }
}
