//! Scenario files: which conversation gets which answers.
//!
//! A request is matched to the first scenario whose `match` text occurs in its first user
//! message (a scenario without `match` matches everything) and, for a scenario with `after`,
//! that has a user message containing that text (a Continue's instruction): such a scenario
//! answers what follows the last such message, its turns counted from there. The turn is the
//! number of assistant messages already in the request (see [`turn_of`]), so the same request
//! always gets the same answer — a job resumed after a crash sees exactly what it would have
//! seen.

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
    /// Answer only the part of a conversation after the last user message holding this text
    /// (a Continue's instruction); turns count from there.
    #[serde(default)]
    pub after: Option<String>,
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
    /// Reasoning text, streamed before `text` as `reasoning_content` (as DeepSeek, vLLM and
    /// llama.cpp send it) and returned in the non-streaming message.
    #[serde(default)]
    pub reasoning: Option<String>,
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
    /// The scenario for a request whose first user message is `first_user`, and the turn the
    /// request is at in it.
    pub fn find(&self, first_user: &str, messages: &[Value]) -> Option<(&Scenario, usize)> {
        self.scenarios.iter().find_map(|s| {
            if !s.matches.as_deref().is_none_or(|m| first_user.contains(m)) {
                return None;
            }
            let Some(anchor) = &s.after else {
                return Some((s, turn_of(messages)));
            };
            let at = messages.iter().rposition(|m| {
                m.get("role").and_then(Value::as_str) == Some("user")
                    && m.get("content")
                        .and_then(Value::as_str)
                        .is_some_and(|c| c.contains(anchor.as_str()))
            })?;
            Some((s, turn_of(&messages[at + 1..])))
        })
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

/// The turn a conversation is at: one past the turn that produced its last assistant message
/// with scripted call ids (`call_<turn>_<n>`), plus the assistant messages after that one — so
/// a conversation the client rewrote (a summary replacing old messages) goes on where it was;
/// without such ids, the number of assistant messages.
pub fn turn_of(messages: &[Value]) -> usize {
    let assistants: Vec<&Value> = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .collect();
    let scripted_turn = |m: &Value| {
        m.get("tool_calls")?
            .as_array()?
            .iter()
            .filter_map(|c| {
                let id = c.get("id")?.as_str()?;
                let (turn, _) = id.strip_prefix("call_")?.split_once('_')?;
                turn.parse::<usize>().ok()
            })
            .max()
    };
    assistants
        .iter()
        .rev()
        .enumerate()
        .find_map(|(after, m)| scripted_turn(m).map(|turn| turn + 1 + after))
        .unwrap_or(assistants.len())
}
