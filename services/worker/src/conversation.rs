//! The conversation of a job: how it starts (the prompt layout of SPEC §4) and how a
//! resumed job rebuilds it from its committed events, so that a redelivered job continues
//! from its last committed step instead of starting over.

use std::collections::HashSet;

use chrono::SecondsFormat;
use maestro_db::jobs::Claimed;
use maestro_domain::piece::Piece;
use maestro_domain::tools::ToolSpec;
use maestro_domain::{Event, EventBody, Message, Role, ToolCall};

/// The static part of the system message: the same bytes for every job of a piece, so the
/// LLM's prompt cache can reuse it. No time, task, files or other per-job data belong here.
const PREAMBLE: &str = "You are MAESTRO, an agent that carries out a user's task step by step \
with tools.\n\nRules:\n- Act through the tools you are given. Files live in the task workspace; \
give paths relative to its root.\n- Read before you change something, and check your work.\n- \
When the task is done, call `complete` with a short summary of the outcome for the user. \
Do not reply with text alone: every reply calls at least one tool.";

/// The first two messages of a new job: one system message (static preamble, tool overview,
/// movement guidance) and one user message (dynamic context and the task instruction).
/// Comments that started this job (a follow-up on an earlier one) join the instruction.
/// Both are the same bytes on every attempt of the job (the time shown is the job's creation
/// time), so a retried first turn sends the same prompt and reuses the LLM's cache.
pub fn seed(
    piece: &Piece,
    tools: &[ToolSpec],
    claim: &Claimed,
    follow_ups: &[String],
) -> Vec<Message> {
    let overview: String = tools
        .iter()
        .map(|t| format!("- `{}`: {}\n", t.name, t.description))
        .collect();
    let system = format!(
        "{PREAMBLE}\n\nTools:\n{overview}\n## Movement guidance ({})\n{}",
        piece.name, piece.guidance
    );
    let mut user = format!(
        "<context>\ntime: {}\ntask: {}\njob: {}\n</context>\n\n<instruction>\n{}\n</instruction>",
        claim.created_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        claim.task_id,
        claim.job_no,
        claim.instruction
    );
    for follow_up in follow_ups {
        user.push_str(&format!("\n\n<follow-up>\n{follow_up}\n</follow-up>"));
    }
    vec![Message::system(system), Message::user(user)]
}

/// A job's conversation as rebuilt from its events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuilt {
    pub messages: Vec<Message>,
    /// Calls of the last assistant message that have no result yet.
    pub pending: Vec<ToolCall>,
    /// LLM iterations already committed (assistant messages).
    pub iterations: u32,
    /// The next `gen_call_<n>` number free for calls whose server gave no id.
    pub next_generated_id: u32,
}

/// Rebuild the conversation from a job's events (in `job_seq` order).
pub fn rebuild(events: &[Event]) -> Result<Rebuilt, serde_json::Error> {
    let mut rebuilt = Rebuilt {
        next_generated_id: 1,
        ..Default::default()
    };
    let mut answered: HashSet<String> = HashSet::new();
    for event in events {
        match event.body()? {
            EventBody::Message(m) => {
                if m.message.role == Role::Assistant {
                    rebuilt.iterations += 1;
                    for call in &m.message.tool_calls {
                        if let Some(n) = call
                            .id
                            .strip_prefix("gen_call_")
                            .and_then(|n| n.parse::<u32>().ok())
                        {
                            rebuilt.next_generated_id = rebuilt.next_generated_id.max(n + 1);
                        }
                    }
                }
                rebuilt.messages.push(m.message);
            }
            EventBody::ToolResult(r) => {
                answered.insert(r.call_id.clone());
                rebuilt.messages.push(Message::tool(r.call_id, r.content));
            }
            EventBody::ToolCall(_) | EventBody::JobState(_) | EventBody::Redispatch(_) => {}
        }
    }
    if let Some(last) = rebuilt
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
    {
        rebuilt.pending = last
            .tool_calls
            .iter()
            .filter(|c| !answered.contains(&c.id))
            .cloned()
            .collect();
    }
    Ok(rebuilt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use maestro_domain::{JobId, MessageEvent, TaskId, ToolResultEvent};

    fn event(seq: i64, body: EventBody) -> Event {
        Event {
            task_id: TaskId::new(),
            seq,
            job_id: JobId::new(),
            job_seq: seq as i32,
            kind: body.kind(),
            payload: body.payload(),
            created_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn a_resumed_job_sees_its_messages_and_the_calls_still_unanswered() {
        let calls = vec![
            ToolCall::new("gen_call_1", "write_file", "{}"),
            ToolCall::new("gen_call_2", "read_file", "{}"),
        ];
        let events = vec![
            event(
                1,
                EventBody::Message(MessageEvent::plain(Message::system("s"))),
            ),
            event(
                2,
                EventBody::Message(MessageEvent::plain(Message::user("u"))),
            ),
            event(
                3,
                EventBody::Message(MessageEvent::plain(Message::assistant(None, calls.clone()))),
            ),
            event(
                4,
                EventBody::ToolResult(ToolResultEvent {
                    call_id: "gen_call_1".into(),
                    name: "write_file".into(),
                    content: "ok".into(),
                    is_error: false,
                }),
            ),
        ];
        let rebuilt = rebuild(&events).expect("rebuild");
        assert_eq!(rebuilt.messages.len(), 4, "system, user, assistant, tool");
        assert_eq!(rebuilt.messages[3], Message::tool("gen_call_1", "ok"));
        assert_eq!(
            rebuilt.pending,
            vec![calls[1].clone()],
            "only the unanswered call is pending"
        );
        assert_eq!(rebuilt.iterations, 1);
        assert_eq!(
            rebuilt.next_generated_id, 3,
            "generated ids continue after gen_call_2"
        );
    }
}
