//! Transcript replay for a Continue (SPEC §5): which of a task's earlier turns a new job sees
//! between its system message and its trailing user message (SPEC §4). Pure: the caller loads
//! the transcript and says whether the continuation runs the same piece as the last job.
//!
//! Kept messages are clones of the transcript's, changed only by removed `tool_calls` and
//! renamed ids, so the replay of a job is a byte-identical prefix the LLM server can cache.

use std::collections::{HashMap, HashSet};

use sha2::{Digest, Sha256};

use crate::ids::JobId;
use crate::message::{Message, Role};
use crate::tools::{COMPLETE, TRANSITION};
use crate::transcript::TranscriptLine;

/// What a Continue replays of a task's earlier jobs (SPEC §5).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replay {
    /// The replayed turns, oldest first: no system message, every call answered, ids unique.
    pub messages: Vec<Message>,
    /// Threads that contributed at least one message.
    pub threads: usize,
    /// Call ids renamed because an earlier thread (or an earlier call) used them.
    pub renamed: usize,
}

/// The turns of `lines` (a task's transcript, oldest first) a continuation replays.
///
/// 1. The transcript splits into threads at `system` lines: a thread starts at each system
///    line, and lines before the first one (if any) form a thread of their own. A thread's job
///    is the job of its first line; threads are numbered from 1 in transcript order.
/// 2. Threads are concatenated oldest first, each cleaned on its own:
///    - its system line is dropped;
///    - a `complete` call is dropped unless its result begins with `Error`; a dropped
///      `complete` takes with it every `transition` call of the same assistant message;
///    - answered `transition` calls are kept only in the last thread, and only when
///      `same_piece(job of the last thread)` holds (asked at most once, never when no
///      thread counts as the last one);
///    - other answered calls are kept; the result of every dropped call is dropped;
///    - unanswered calls (no result later in the thread) are dropped, and so are orphan
///      results: a tool message answering no call of an earlier assistant message of the
///      thread still awaiting one (a second result for an answered call is an orphan). A
///      result answers the latest assistant message with a waiting call of its id (the
///      first such call of that message);
///    - assistant messages left with no text (none, or only whitespace) and no calls are
///      dropped; user messages are kept as they are.
/// 3. A last thread holding only its system line is empty: no thread counts as the last one,
///    so the thread before it drops its transitions like any older thread.
/// 4. Colliding call ids are then renamed, walking the output in order: a call whose id an
///    earlier call of the output used becomes `{id}_{n}`, `n` the number of its thread, or
///    `{id}_{n}_2`, `{id}_{n}_3`, … when that is a call id anywhere in the output; the result
///    answering it follows the rename.
/// 5. Everything else of a kept message is untouched: the replay of one completed job is its
///    conversation minus the system line and the `complete` call (with its result, and its
///    message unless that message has text).
pub fn replay(lines: &[TranscriptLine], same_piece: impl Fn(JobId) -> bool) -> Replay {
    let threads = split(lines);
    let last = match threads.last() {
        Some([only]) if only.message.role == Role::System => None,
        Some(thread) => Some((threads.len() - 1, thread[0].job_id)),
        None => None,
    };
    let transitions_in = last.and_then(|(index, job)| same_piece(job).then_some(index));
    let mut kept = Vec::new();
    let mut contributing = 0;
    for (index, thread) in threads.iter().enumerate() {
        let cleaned = clean(index + 1, thread, transitions_in == Some(index));
        contributing += usize::from(!cleaned.is_empty());
        kept.extend(cleaned);
    }
    let renamed = rename(&mut kept);
    Replay {
        messages: kept.into_iter().map(|k| k.message).collect(),
        threads: contributing,
        renamed,
    }
}

/// Lowercase hex SHA-256 over `messages`, each as its `serde_json` bytes prefixed by their
/// length (u64, little endian): recomputing a replay must give the digest recorded for it.
pub fn digest(messages: &[Message]) -> String {
    let mut hasher = Sha256::new();
    for message in messages {
        let bytes = serde_json::to_vec(message).expect("a message always serializes to JSON");
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Where a call stands in the transcript: (thread number, message index in the thread, call
/// index in the message). Results are tied to calls by it, not by ids, which may collide.
type CallKey = (usize, usize, usize);

/// A message the cleaning kept, with what ties its calls and its result together.
struct Kept {
    message: Message,
    /// One key per call left in `message.tool_calls`, in the same order.
    calls: Vec<CallKey>,
    /// For a tool message: the call it answers.
    answers: Option<CallKey>,
}

/// Rule 1: a thread starts at each system line; leading lines form a thread of their own.
fn split(lines: &[TranscriptLine]) -> Vec<&[TranscriptLine]> {
    let mut threads = Vec::new();
    let mut start = 0;
    for (index, line) in lines.iter().enumerate() {
        if line.message.role == Role::System && index > start {
            threads.push(&lines[start..index]);
            start = index;
        }
    }
    if start < lines.len() {
        threads.push(&lines[start..]);
    }
    threads
}

/// Rule 2 on one thread (numbered `thread`).
fn clean(thread: usize, lines: &[TranscriptLine], keep_transitions: bool) -> Vec<Kept> {
    let messages: Vec<&Message> = lines.iter().map(|line| &line.message).collect();
    let answers = pair(&messages);
    let results: HashMap<(usize, usize), usize> =
        answers.iter().map(|(&tool, &call)| (call, tool)).collect();
    let keep = kept_calls(&messages, &results, keep_transitions);
    let mut kept = Vec::new();
    for (at, message) in messages.iter().enumerate() {
        match message.role {
            Role::System => {}
            Role::User => kept.push(Kept {
                message: (*message).clone(),
                calls: Vec::new(),
                answers: None,
            }),
            Role::Tool => {
                if let Some(&(from, call)) = answers.get(&at).filter(|c| keep.contains(c)) {
                    kept.push(Kept {
                        message: (*message).clone(),
                        calls: Vec::new(),
                        answers: Some((thread, from, call)),
                    });
                }
            }
            Role::Assistant => {
                let calls: Vec<usize> = (0..message.tool_calls.len())
                    .filter(|&call| keep.contains(&(at, call)))
                    .collect();
                let has_text = message
                    .content
                    .as_deref()
                    .is_some_and(|t| !t.trim().is_empty());
                if calls.is_empty() && !has_text {
                    continue;
                }
                let mut copy = (*message).clone();
                if calls.len() < message.tool_calls.len() {
                    copy.tool_calls = calls
                        .iter()
                        .map(|&c| message.tool_calls[c].clone())
                        .collect();
                }
                kept.push(Kept {
                    message: copy,
                    calls: calls.iter().map(|&call| (thread, at, call)).collect(),
                    answers: None,
                });
            }
        }
    }
    kept
}

/// The call (message index, call index) each tool message of a thread answers; others are orphans.
fn pair(messages: &[&Message]) -> HashMap<usize, (usize, usize)> {
    let mut waiting: Vec<(usize, usize)> = Vec::new();
    let mut answers = HashMap::new();
    for (at, message) in messages.iter().enumerate() {
        match message.role {
            Role::Assistant => waiting.extend((0..message.tool_calls.len()).map(|c| (at, c))),
            Role::Tool => {
                let Some(id) = message.tool_call_id.as_deref() else {
                    continue;
                };
                let answered = waiting
                    .iter()
                    .enumerate()
                    .filter(|(_, (from, call))| messages[*from].tool_calls[*call].id == id)
                    .min_by_key(|(_, (from, call))| (std::cmp::Reverse(*from), *call))
                    .map(|(slot, _)| slot);
                if let Some(slot) = answered {
                    answers.insert(at, waiting.remove(slot));
                }
            }
            Role::System | Role::User => {}
        }
    }
    answers
}

/// The calls of a thread that survive rule 2, given which tool message answers which call.
fn kept_calls(
    messages: &[&Message],
    results: &HashMap<(usize, usize), usize>,
    keep_transitions: bool,
) -> HashSet<(usize, usize)> {
    let mut keep = HashSet::new();
    for (at, message) in messages.iter().enumerate() {
        if message.role != Role::Assistant {
            continue;
        }
        let result = |call: usize| {
            results
                .get(&(at, call))
                .map(|&tool| messages[tool].content.as_deref().unwrap_or_default())
        };
        let failed = |call: usize| result(call).is_some_and(|r| r.starts_with("Error"));
        let complete_dropped = message
            .tool_calls
            .iter()
            .enumerate()
            .any(|(call, c)| c.name() == COMPLETE && !failed(call));
        for (call, c) in message.tool_calls.iter().enumerate() {
            let survives = result(call).is_some()
                && match c.name() {
                    COMPLETE => failed(call),
                    TRANSITION => keep_transitions && !complete_dropped,
                    _ => true,
                };
            if survives {
                keep.insert((at, call));
            }
        }
    }
    keep
}

/// Rule 4; returns how many calls were renamed.
fn rename(kept: &mut [Kept]) -> usize {
    let mut taken: HashSet<String> = kept
        .iter()
        .flat_map(|k| k.message.tool_calls.iter().map(|c| c.id.clone()))
        .collect();
    let mut used = HashSet::new();
    let mut new_ids: HashMap<CallKey, String> = HashMap::new();
    for entry in kept.iter_mut() {
        if let Some(id) = entry.answers.and_then(|call| new_ids.get(&call)) {
            entry.message.tool_call_id = Some(id.clone());
        }
        for (call, key) in entry.message.tool_calls.iter_mut().zip(&entry.calls) {
            if used.insert(call.id.clone()) {
                continue;
            }
            let fresh = fresh_id(&call.id, key.0, &taken);
            taken.insert(fresh.clone());
            used.insert(fresh.clone());
            new_ids.insert(*key, fresh.clone());
            call.id = fresh;
        }
    }
    new_ids.len()
}

/// `{id}_{thread}`, or `{id}_{thread}_{k}` with the least `k >= 2` not `taken`.
fn fresh_id(id: &str, thread: usize, taken: &HashSet<String>) -> String {
    let base = format!("{id}_{thread}");
    if !taken.contains(&base) {
        return base;
    }
    let mut k = 2u64;
    loop {
        let candidate = format!("{base}_{k}");
        if !taken.contains(&candidate) {
            return candidate;
        }
        k += 1;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use proptest::collection::vec;
    use proptest::prelude::*;
    use uuid::Uuid;

    use super::*;
    use crate::message::ToolCall;

    fn job(n: u128) -> JobId {
        JobId(Uuid::from_u128(n))
    }

    /// A message in the notation of [`render`]: `system s`, `user u`, `tool id: content`,
    /// `assistant text [name#id,…]` (text `-` is none).
    fn parse(line: &str) -> Message {
        let (role, rest) = line.split_once(' ').expect("role and content");
        match role {
            "system" => Message::system(rest),
            "user" => Message::user(rest),
            "tool" => {
                let (id, content) = rest.split_once(": ").expect("tool id: content");
                Message::tool(id, content)
            }
            _ => {
                let (text, calls) = rest.rsplit_once(" [").expect("assistant text [calls]");
                let calls = calls.trim_end_matches(']').split(',');
                let calls = calls.filter_map(|c| c.split_once('#'));
                let calls = calls.map(|(name, id)| ToolCall::new(id, name, "{}"));
                let calls = calls.collect();
                Message::assistant((text != "-").then(|| text.to_owned()), calls)
            }
        }
    }

    fn line(n: u128, message: Message) -> TranscriptLine {
        let job_id = job(n);
        TranscriptLine { job_id, message }
    }

    /// Job `n`'s thread: its lines in the notation of [`parse`].
    fn thread(n: u128, lines: &[&str]) -> Vec<TranscriptLine> {
        lines.iter().map(|l| line(n, parse(l))).collect()
    }

    fn render(messages: &[Message]) -> Vec<String> {
        messages.iter().map(render_one).collect()
    }

    fn render_one(m: &Message) -> String {
        let text = m.content.as_deref().unwrap_or("-");
        let id = m.tool_call_id.as_deref().unwrap_or_default();
        let calls = m
            .tool_calls
            .iter()
            .map(|c| format!("{}#{}", c.name(), c.id));
        let calls = calls.collect::<Vec<_>>().join(",");
        match m.role {
            Role::System => format!("system {text}"),
            Role::User => format!("user {text}"),
            Role::Tool => format!("tool {id}: {text}"),
            Role::Assistant => format!("assistant {text} [{calls}]"),
        }
    }

    /// `lines` replayed, in the notation of [`render`].
    fn replayed(lines: &[TranscriptLine], same_piece: bool) -> Vec<String> {
        render(&replay(lines, |_| same_piece).messages)
    }

    /// A job that read a file, moved to another movement and completed.
    const COMPLETED: [&str; 8] = [
        "system preamble",
        "user do it",
        "assistant reading [read_file#gen_call_1]",
        "tool gen_call_1: contents",
        "assistant - [transition#gen_call_2]",
        "tool gen_call_2: now in implement",
        "assistant - [complete#gen_call_3]",
        "tool gen_call_3: ok",
    ];

    #[test]
    fn a_completed_job_replays_as_its_conversation_minus_system_and_the_final_complete() {
        let lines = thread(1, &COMPLETED);
        let replay = replay(&lines, |_| true);
        let expected: Vec<Message> = lines[1..6].iter().map(|l| l.message.clone()).collect();
        assert_eq!(replay.messages, expected, "byte-identical clones");
        assert_eq!((replay.threads, replay.renamed), (1, 0));
    }

    #[test]
    fn an_assistant_with_text_and_a_successful_complete_keeps_its_text_only() {
        let mut lines = thread(1, &COMPLETED);
        lines[6].message.content = Some("all done".into());
        let replay = replay(&lines, |_| true);
        assert_eq!(replay.messages.len(), 6, "complete's result goes");
        let mut original = lines[6].message.clone();
        original.tool_calls.clear();
        assert_eq!(replay.messages[5], original, "only the call goes");
    }

    #[test]
    fn threads_split_at_system_lines_and_leading_lines_form_their_own_thread() {
        let lines = [
            thread(1, &["user before any system"]),
            thread(2, &["system s", "user second"]),
            thread(3, &["system s", "user third"]),
        ];
        let asked = Cell::new(None);
        let replay = replay(&lines.concat(), |job_id| {
            asked.set(Some(job_id));
            true
        });
        let expected = ["user before any system", "user second", "user third"];
        assert_eq!(render(&replay.messages), expected, "no system line");
        assert_eq!(replay.threads, 3);
        assert_eq!(asked.get(), Some(job(3)), "asked about the last job");
    }

    #[test]
    fn complete_calls_survive_only_with_an_error_result() {
        let call = "assistant - [complete#c1]";
        for (result, kept) in [("Error: tests fail", true), ("ok", false), ("error", false)] {
            let result = format!("tool c1: {result}");
            let lines = thread(1, &["system s", call, &result]);
            let expected = if kept { vec![call, &result] } else { vec![] };
            assert_eq!(replayed(&lines, true), expected, "{result}");
        }
    }

    #[test]
    fn transition_pairs_survive_only_in_the_last_thread_of_the_same_piece() {
        let pair = ["assistant - [transition#gen_call_1]", "tool gen_call_1: ok"];
        let moved = |n| thread(n, &["system s", pair[0], pair[1]]);
        let lines = [moved(1), moved(2)].concat();
        assert_eq!(replayed(&lines, true), pair, "the last thread's only");
        assert!(replayed(&lines, false).is_empty(), "other piece: none");
    }

    #[test]
    fn a_transition_goes_with_a_successful_complete_and_stays_with_a_failed_one() {
        let call = "assistant done [transition#t,complete#c]";
        for (result, kept) in [("ok", false), ("Error: not yet", true)] {
            let result = format!("tool c: {result}");
            let lines = thread(1, &["system s", call, "tool t: moved", &result]);
            let expected = match kept {
                true => vec![call, "tool t: moved", &result],
                false => vec!["assistant done []"],
            };
            assert_eq!(replayed(&lines, true), expected, "{result}");
        }
    }

    #[test]
    fn unanswered_calls_orphan_results_and_empty_assistants_are_dropped() {
        let (call, answer) = ("assistant - [read_file#a]", "tool a: 1");
        let cases: [(&str, &[&str], &[&str]); 8] = [
            (
                "unanswered call",
                &["assistant t [x#a]"],
                &["assistant t []"],
            ),
            ("call-only message left empty", &[call], &[]),
            ("whitespace-only assistant", &["assistant \n []"], &[]),
            ("empty assistant", &["assistant  []"], &[]),
            ("orphan result", &[answer], &[]),
            ("result before its call", &[answer, call], &[]),
            (
                "second result",
                &[call, answer, "tool a: 2"],
                &[call, answer],
            ),
            (
                "answer after a turn",
                &[call, "user u", answer],
                &[call, "user u", answer],
            ),
        ];
        for (name, messages, expected) in cases {
            let lines = [thread(1, &["system s"]), thread(1, messages)].concat();
            assert_eq!(replayed(&lines, true), expected, "{name}");
        }
    }

    #[test]
    fn a_last_thread_with_only_its_system_line_makes_the_previous_one_old() {
        let first = [
            "system s",
            "assistant - [transition#t]",
            "tool t: ok",
            "user u",
        ];
        let lines = [thread(1, &first), thread(2, &["system s"])].concat();
        let replay = replay(&lines, |_| true);
        assert_eq!(render(&replay.messages), ["user u"], "transition goes");
        assert_eq!(replay.threads, 1, "the empty thread contributes nothing");
    }

    #[test]
    fn colliding_ids_are_renamed_deterministically_and_results_follow() {
        let read = |id: &str, content: &str| {
            [
                format!("assistant - [read#{id}]"),
                format!("tool {id}: {content}"),
            ]
        };
        let threads = [
            read("gen_call_1", "a").to_vec(),
            [read("gen_call_1", "b"), read("gen_call_1_2", "c")].concat(),
            [read("gen_call_1", "d"), read("gen_call_1", "e")].concat(),
        ];
        let lines = threads.iter().zip(1..).flat_map(|(messages, n)| {
            let messages: Vec<&str> = messages.iter().map(String::as_str).collect();
            thread(n, &[&["system s"], &messages[..]].concat())
        });
        let replay = replay(&lines.collect::<Vec<_>>(), |_| true);
        let expected = [
            read("gen_call_1", "a"),
            read("gen_call_1_2_2", "b"),
            read("gen_call_1_2", "c"),
            read("gen_call_1_3", "d"),
            read("gen_call_1_3_2", "e"),
        ];
        assert_eq!(render(&replay.messages), expected.concat(), "renames");
        assert_eq!((replay.threads, replay.renamed), (3, 3));
    }

    #[test]
    fn the_digest_is_stable_and_changes_with_any_message() {
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(digest(&[]), empty, "no messages hash like no bytes");
        let messages = vec![parse("user u"), parse("assistant t [read_file#a]")];
        let first = digest(&messages);
        assert_eq!(first, digest(&messages.clone()), "stable");
        let hex = first.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'));
        assert!(hex && first.len() == 64, "lowercase hex SHA-256");
        let mut changed = messages.clone();
        changed[1].tool_calls[0].id = "b".into();
        assert_ne!(digest(&changed), first, "a renamed id changes the digest");
        let (joined, split) = ([parse("user ab")], [parse("user a"), parse("user b")]);
        assert_ne!(digest(&joined), digest(&split), "length-prefixed");
    }

    const NAMES: [&str; 4] = [COMPLETE, TRANSITION, "read_file", "write_file"];

    fn arb_message() -> impl Strategy<Value = Message> {
        let id = (1..=4u8).prop_map(|n| format!("gen_call_{n}"));
        let call = (0..NAMES.len(), id.clone());
        let call = call.prop_map(|(n, id)| ToolCall::new(id, NAMES[n], "{}"));
        let text = prop_oneof![Just(None), Just(Some(" ".into())), Just(Some("t".into()))];
        let result = prop_oneof![Just("ok"), Just("Error: failed")];
        prop_oneof![
            1 => Just(Message::system("s")),
            1 => Just(Message::user("u")),
            4 => (text, vec(call, 0..=3)).prop_map(|(text, calls)| Message::assistant(text, calls)),
            4 => (id, result).prop_map(|(id, content)| Message::tool(id, content)),
        ]
    }

    /// Up to five jobs' threads, each opening with a system line or not.
    fn arb_transcript() -> impl Strategy<Value = Vec<TranscriptLine>> {
        let one = (1..=3u128, any::<bool>(), vec(arb_message(), 0..10));
        vec(one, 0..5).prop_map(move |threads| {
            let threads = threads.into_iter().flat_map(|(n, opens, messages)| {
                let opening = opens.then(|| Message::system("s"));
                opening.into_iter().chain(messages).map(move |m| line(n, m))
            });
            threads.collect()
        })
    }

    /// Every call answered exactly once after it, only by errors for `complete`, never
    /// `transition` of another piece; ids unique; no system or empty message.
    fn check(messages: &[Message], same_piece: bool) -> Result<(), TestCaseError> {
        let mut ids = HashSet::new();
        for (at, m) in messages.iter().enumerate() {
            prop_assert!(m.role != Role::System, "no system message at {}", at);
            let has_text = m.content.as_deref().is_some_and(|t| !t.trim().is_empty());
            prop_assert!(has_text || !m.tool_calls.is_empty() || m.role != Role::Assistant);
            for call in &m.tool_calls {
                prop_assert!(ids.insert(call.id.clone()), "duplicate id {}", call.id);
                let (name, id) = (call.name(), call.id.as_str());
                prop_assert!(same_piece || name != TRANSITION, "other piece's transition");
                let answered = |r: &&Message| r.tool_call_id.as_deref() == Some(id);
                let answers: Vec<_> = messages[at + 1..].iter().filter(answered).collect();
                prop_assert_eq!(answers.len(), 1, "call {} answered once, later", id);
                let result = answers[0].content.as_deref().unwrap_or_default();
                prop_assert!(name != COMPLETE || result.starts_with("Error"), "complete");
            }
            if m.role == Role::Tool {
                let mut calls = messages[..at].iter().flat_map(|a| &a.tool_calls);
                let called = calls.any(|c| m.tool_call_id.as_deref() == Some(c.id.as_str()));
                prop_assert!(called, "tool result at {} answers an earlier call", at);
            }
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn replays_are_well_formed_and_deterministic(
            lines in arb_transcript(),
            same in any::<bool>(),
        ) {
            let replay = replay(&lines, |_| same);
            prop_assert_eq!(&replay, &super::replay(&lines, |_| same), "deterministic");
            check(&replay.messages, same)?;
            prop_assert!(replay.threads <= lines.len() && replay.messages.len() <= lines.len());
            prop_assert!(replay.renamed <= replay.messages.len());
        }
    }
}
