//! The transcript: a job's conversation as its committed events define it. Messages and tool
//! results append; a rewrite (by the prompt guard) replaces everything before it; movement
//! events say where in the piece the job is. A resumed job rebuilds its conversation and its
//! place from this, and a task's transcript is the concatenation of its jobs' conversations
//! (one thread per job, each opening with its system message). A continuing job's replay of
//! earlier jobs (`replay` event) belongs to its conversation but not to its thread of the
//! transcript: the transcript holds each message once, where it was first said.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::event::{Event, EventBody, EventKind, MovementEvent};
use crate::ids::JobId;
use crate::message::{Message, Role, ToolCall};

/// A job's conversation and position, as rebuilt from its events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuilt {
    pub messages: Vec<Message>,
    /// Calls of the last assistant message that have no result yet.
    pub pending: Vec<ToolCall>,
    /// LLM iterations committed (assistant messages), in the whole job.
    pub iterations: u32,
    /// The next `gen_call_<n>` number free for calls whose server gave no id.
    pub next_generated_id: u32,
    /// The movement the job is in, if it entered one.
    pub movement: Option<String>,
    /// Movements entered so far, and how often each.
    pub movements_entered: u32,
    pub visits: BTreeMap<String, u32>,
    /// LLM iterations in the current movement.
    pub movement_iterations: u32,
}

/// Rebuild one job's conversation from its events (in `job_seq` order), without what a
/// `replay` event stands for (a task's transcript shows it where it was first said).
pub fn rebuild(events: &[Event]) -> Result<Rebuilt, serde_json::Error> {
    rebuild_with(events, &[])
}

/// Rebuild one job's conversation from its events (in `job_seq` order), with `replayed` (the
/// replay its `replay` event stands for, recomputed) where that event is.
pub fn rebuild_with(events: &[Event], replayed: &[Message]) -> Result<Rebuilt, serde_json::Error> {
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
                    rebuilt.movement_iterations += 1;
                    rebuilt.next_generated_id = rebuilt
                        .next_generated_id
                        .max(next_generated_id(std::slice::from_ref(&m.message)));
                }
                rebuilt.messages.push(m.message);
            }
            EventBody::Replay(_) => {
                rebuilt.next_generated_id =
                    rebuilt.next_generated_id.max(next_generated_id(replayed));
                rebuilt.messages.extend(replayed.iter().cloned());
            }
            EventBody::ToolResult(r) => {
                answered.insert(r.call_id.clone());
                rebuilt.messages.push(Message::tool(r.call_id, r.content));
            }
            EventBody::Movement(m) => {
                rebuilt.movements_entered += 1;
                *rebuilt.visits.entry(m.name.clone()).or_default() += 1;
                rebuilt.movement = Some(m.name);
                rebuilt.movement_iterations = 0;
            }
            EventBody::Rewrite(r) => rebuilt.messages = r.messages,
            EventBody::ToolCall(_)
            | EventBody::JobState(_)
            | EventBody::Redispatch(_)
            | EventBody::Decision(_)
            | EventBody::JobContinued(_) => {}
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

/// The first `gen_call_<n>` number no call of `messages` uses (1 when none does): a job's own
/// calls without an id are numbered after the ones it replays, so ids never collide.
pub fn next_generated_id(messages: &[Message]) -> u32 {
    messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .filter_map(|call| call.id.strip_prefix("gen_call_")?.parse::<u32>().ok())
        .map(|n| n + 1)
        .max()
        .unwrap_or(1)
}

/// The piece each job ran, from its first movement event (a routed task's job records the
/// router's choice there).
pub fn job_pieces(events: &[Event]) -> Result<BTreeMap<JobId, String>, serde_json::Error> {
    let mut pieces = BTreeMap::new();
    for event in events.iter().filter(|e| e.kind == EventKind::Movement) {
        if let EventBody::Movement(MovementEvent {
            piece: Some(piece), ..
        }) = event.body()?
        {
            pieces.entry(event.job_id).or_insert(piece);
        }
    }
    Ok(pieces)
}

/// One line of a task's transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TranscriptLine {
    pub job_id: JobId,
    #[serde(flatten)]
    pub message: Message,
}

/// A task's transcript: each job's rebuilt conversation, oldest job first (events in `seq`
/// order). Every job's thread opens with its system message.
pub fn transcript(events: &[Event]) -> Result<Vec<TranscriptLine>, serde_json::Error> {
    let mut jobs: Vec<(JobId, Vec<Event>)> = Vec::new();
    for event in events {
        match jobs.iter_mut().find(|(id, _)| *id == event.job_id) {
            Some((_, list)) => list.push(event.clone()),
            None => jobs.push((event.job_id, vec![event.clone()])),
        }
    }
    let mut lines = Vec::new();
    for (job_id, mut list) in jobs {
        list.sort_by_key(|e| e.job_seq);
        lines.extend(
            rebuild(&list)?
                .messages
                .into_iter()
                .map(|message| TranscriptLine { job_id, message }),
        );
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{MessageEvent, MovementEvent, RewriteEvent, ToolResultEvent};
    use crate::ids::TaskId;

    fn event(job_id: JobId, seq: i64, body: EventBody) -> Event {
        Event {
            task_id: TaskId::new(),
            seq,
            job_id,
            job_seq: seq as i32,
            kind: body.kind(),
            payload: body.payload(),
            created_at: chrono::Utc::now(),
        }
    }

    fn message(m: Message) -> EventBody {
        EventBody::Message(MessageEvent::plain(m))
    }

    #[test]
    fn a_resumed_job_sees_its_messages_its_movement_and_the_calls_still_unanswered() {
        let job = JobId::new();
        let calls = vec![
            ToolCall::new("gen_call_1", "write_file", "{}"),
            ToolCall::new("gen_call_2", "read_file", "{}"),
        ];
        let movement = |name: &str| {
            EventBody::Movement(MovementEvent {
                name: name.into(),
                from: None,
                reason: None,
                piece: None,
            })
        };
        let events = vec![
            event(job, 1, movement("plan")),
            event(job, 2, message(Message::system("s"))),
            event(job, 3, message(Message::user("u"))),
            event(job, 4, message(Message::assistant(None, vec![]))),
            event(job, 5, movement("implement")),
            event(job, 6, message(Message::assistant(None, calls.clone()))),
            event(
                job,
                7,
                EventBody::ToolResult(ToolResultEvent {
                    call_id: "gen_call_1".into(),
                    name: "write_file".into(),
                    content: "ok".into(),
                    is_error: false,
                }),
            ),
        ];
        let rebuilt = rebuild(&events).expect("rebuild");
        assert_eq!(
            rebuilt.messages.len(),
            5,
            "system, user, two assistants, tool"
        );
        assert_eq!(
            rebuilt.pending,
            vec![calls[1].clone()],
            "only the unanswered call is pending"
        );
        assert_eq!((rebuilt.iterations, rebuilt.movement_iterations), (2, 1));
        assert_eq!(rebuilt.movement.as_deref(), Some("implement"));
        assert_eq!(rebuilt.movements_entered, 2);
        assert_eq!(
            rebuilt.next_generated_id, 3,
            "generated ids continue after gen_call_2"
        );
    }

    #[test]
    fn a_rewrite_replaces_what_came_before_and_transcripts_keep_one_thread_per_job() {
        let (first, second) = (JobId::new(), JobId::new());
        let rewrite = EventBody::Rewrite(RewriteEvent {
            steps: vec!["summarize".into()],
            messages: vec![Message::system("s"), Message::user("summary")],
        });
        let events = vec![
            event(first, 1, message(Message::system("s"))),
            event(first, 2, message(Message::user("long"))),
            event(first, 3, rewrite),
            event(
                first,
                4,
                message(Message::assistant(Some("after".into()), vec![])),
            ),
            event(second, 5, message(Message::system("s"))),
        ];
        let lines = transcript(&events).expect("transcript");
        let contents: Vec<Option<&str>> =
            lines.iter().map(|l| l.message.content.as_deref()).collect();
        assert_eq!(
            contents,
            [Some("s"), Some("summary"), Some("after"), Some("s")]
        );
        assert_eq!(lines[3].job_id, second);
    }
}
