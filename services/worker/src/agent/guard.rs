//! The prompt guard (SPEC §3.5): before each LLM call the conversation's size is estimated,
//! and when it would not fit `MAX_PROMPT_TOKENS` it is rewritten, cheapest step first:
//! `dedup` (a tool result repeated later is replaced by a pointer to the later copy),
//! `compact` (long old tool results are cut to their head and tail), `summarize` (an LLM call
//! condenses the older part into one message). What still does not fit ends the job with a
//! context-overflow error. Every rewrite is committed as a `rewrite` event holding the new
//! conversation, from which a resumed job and the transcript rebuild.
//!
//! A rewrite changes early messages, so the LLM's prompt cache is lost once, from the first
//! changed byte; the system message and the opening user message are never touched.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Range;

use maestro_domain::{EventBody, Message, RewriteEvent, Role};

use super::context::{JobEnd, JobError};
use super::run::JobRun;

/// Messages at the end of the conversation that are never compacted or summarized.
pub const KEEP_RECENT: usize = 8;
/// Old tool results longer than this (in bytes) are compacted.
pub const COMPACT_BYTES: usize = 2_000;
/// Tool results shorter than this are not worth deduplicating.
const DEDUP_MIN_BYTES: usize = 256;
/// The first words of the summarization request (scripted LLM scenarios match on them).
pub const SUMMARY_PROMPT: &str = "Summarize the work so far.";
/// Opens the message that replaces the summarized messages.
pub const SUMMARY_HEADER: &str =
    "[Summary of the earlier work in this job, written by the prompt guard]";
/// What an older duplicate tool result becomes.
pub const DUPLICATE_NOTE: &str = "[The same output as a later call's result; see there.]";

/// Estimated tokens of a conversation: about four bytes a token, plus a little per message.
pub fn estimate(messages: &[Message]) -> usize {
    let bytes: usize = messages
        .iter()
        .map(|m| {
            let calls: usize = m
                .tool_calls
                .iter()
                .map(|c| c.id.len() + c.function.name.len() + c.function.arguments.len() + 32)
                .sum();
            m.content.as_deref().map_or(0, str::len) + calls + 16
        })
        .sum();
    bytes / 4
}

/// The estimated tokens of the rendered `tools`, and what `max` (`MAX_PROMPT_TOKENS`) leaves
/// for the conversation beside them.
fn budget(tools: &serde_json::value::RawValue, max: usize) -> (usize, usize) {
    let fixed = tools.get().len() / 4;
    (fixed, max.saturating_sub(fixed))
}

/// Whether a request of `messages` with the rendered `tools` goes out as it is: the prompt
/// guard neither rewrites it nor refuses it.
pub fn fits(messages: &[Message], tools: &serde_json::value::RawValue, max: usize) -> bool {
    estimate(messages) <= budget(tools, max).1
}

/// Replace each tool result whose exact text comes again in a later tool result. Returns
/// how many were replaced.
pub fn dedup(messages: &mut [Message]) -> usize {
    let mut seen = HashSet::new();
    let mut replaced = 0;
    for message in messages.iter_mut().rev() {
        let Some(content) = message.content.as_deref() else {
            continue;
        };
        if message.role != Role::Tool || content.len() < DEDUP_MIN_BYTES {
            continue;
        }
        let mut hasher = DefaultHasher::new();
        content.hash(&mut hasher);
        if !seen.insert(hasher.finish()) {
            message.content = Some(DUPLICATE_NOTE.to_owned());
            replaced += 1;
        }
    }
    replaced
}

/// Cut tool results longer than `max_bytes` outside the last `keep_recent` messages to their
/// head and tail. Returns how many were cut.
pub fn compact(messages: &mut [Message], keep_recent: usize, max_bytes: usize) -> usize {
    let old = messages.len().saturating_sub(keep_recent);
    let mut cut = 0;
    for message in &mut messages[..old] {
        let Some(content) = message.content.as_deref() else {
            continue;
        };
        if message.role != Role::Tool || content.len() <= max_bytes {
            continue;
        }
        let head = floor_char_boundary(content, max_bytes / 2);
        let tail = ceil_char_boundary(content, content.len() - max_bytes / 4);
        let elided = tail - head;
        message.content = Some(format!(
            "{}\n[... {elided} bytes elided by the prompt guard ...]\n{}",
            &content[..head],
            &content[tail..]
        ));
        cut += 1;
    }
    cut
}

/// The messages to summarize: from after the opening (system message and first user
/// message) up to the last `keep_recent`, ending before an assistant or user message so no
/// tool result is parted from its call. `None` when fewer than two messages qualify.
pub fn summary_range(messages: &[Message], keep_recent: usize) -> Option<Range<usize>> {
    let start = messages.iter().position(|m| m.role == Role::User)? + 1;
    let limit = messages.len().saturating_sub(keep_recent);
    let end = (start..=limit)
        .rev()
        .find(|&i| i == messages.len() || messages[i].role != Role::Tool)?;
    (end >= start + 2).then_some(start..end)
}

/// The request that asks the LLM for a summary of `part`.
pub fn summary_request(part: &[Message]) -> Vec<Message> {
    let mut history = String::new();
    for message in part {
        let text = message.content.as_deref().unwrap_or_default();
        match message.role {
            Role::Assistant => {
                if !text.is_empty() {
                    history.push_str(&format!("assistant: {text}\n"));
                }
                for call in &message.tool_calls {
                    history.push_str(&format!(
                        "assistant called {}({})\n",
                        call.name(),
                        call.function.arguments
                    ));
                }
            }
            Role::Tool => {
                let shown = &text[..floor_char_boundary(text, COMPACT_BYTES)];
                history.push_str(&format!("result: {shown}\n"));
            }
            Role::User | Role::System => history.push_str(&format!("user: {text}\n")),
        }
    }
    let system = "You condense an agent's working history so it can go on without it. Keep \
                  every fact it will need: decisions, file names, findings, errors, what is \
                  done and what is left. Be brief.";
    vec![
        Message::system(system),
        Message::user(format!(
            "{SUMMARY_PROMPT}\n\n<history>\n{history}</history>"
        )),
    ]
}

/// The message that replaces `part`: the summary, and the guidance of the movement the job
/// is in when that guidance was part of what is replaced.
pub fn summary_message(part: &[Message], summary: &str) -> Message {
    let mut text = format!("{SUMMARY_HEADER}\n{}", summary.trim());
    if let Some(guidance) = part
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .filter_map(|m| m.content.as_deref())
        .find(|c| c.starts_with("[Movement `"))
    {
        text.push_str("\n\n");
        text.push_str(guidance);
    }
    Message::user(text)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

impl JobRun<'_> {
    /// Keep the next request within `MAX_PROMPT_TOKENS`; `Some` when the job ended.
    pub(super) async fn prompt_guard(&mut self) -> Result<Option<JobEnd>, JobError> {
        let max = self.shared.settings.max_prompt_tokens;
        let (fixed, budget) = budget(&self.tools.json, max);
        let before = estimate(&self.journal.messages);
        if before <= budget {
            return Ok(None);
        }
        let mut messages = self.journal.messages.clone();
        let mut steps = Vec::new();
        if dedup(&mut messages) > 0 {
            steps.push("dedup".to_owned());
        }
        if estimate(&messages) > budget && compact(&mut messages, KEEP_RECENT, COMPACT_BYTES) > 0 {
            steps.push("compact".to_owned());
        }
        if estimate(&messages) > budget
            && let Some(range) = summary_range(&messages, KEEP_RECENT)
        {
            let request = summary_request(&messages[range.clone()]);
            let summary = match super::llm::text(&self.shared.llm, &self.model, &request).await {
                Ok((summary, _)) if !summary.trim().is_empty() => summary,
                Ok(_) => String::from("(the summarizer returned nothing)"),
                Err(e) => return self.llm_failed(e).await.map(Some),
            };
            let replacement = summary_message(&messages[range.clone()], &summary);
            messages.splice(range, [replacement]);
            steps.push("summarize".to_owned());
        }
        let after = estimate(&messages);
        if after > budget {
            let error = format!(
                "context overflow: the conversation needs about {after} tokens besides the \
                 tools' {fixed}, over MAX_PROMPT_TOKENS={max}, even after {}",
                if steps.is_empty() {
                    "trying to rewrite it".to_owned()
                } else {
                    steps.join(", ")
                }
            );
            return self.fail(error).await.map(Some);
        }
        tracing::info!(before, after, steps = ?steps, "prompt guard rewrote the conversation");
        let event = EventBody::Rewrite(RewriteEvent {
            steps,
            messages: messages.clone(),
        });
        self.journal.rewrite(messages, event);
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maestro_domain::ToolCall;

    fn turn(i: usize, output: &str) -> [Message; 2] {
        let id = format!("call_{i}");
        [
            Message::assistant(None, vec![ToolCall::new(&id, "read_file", "{}")]),
            Message::tool(id, output),
        ]
    }

    fn conversation(outputs: &[String]) -> Vec<Message> {
        let mut messages = vec![Message::system("s"), Message::user("task")];
        for (i, output) in outputs.iter().enumerate() {
            messages.extend(turn(i, output));
        }
        messages
    }

    #[test]
    fn the_estimate_grows_with_content() {
        let small = estimate(&conversation(&["x".into()]));
        let big = estimate(&conversation(&["x".repeat(4_000)]));
        assert!(big >= small + 999, "{small} {big}");
    }

    #[test]
    fn dedup_keeps_the_latest_copy_only() {
        let long = "same ".repeat(100);
        let mut messages = conversation(&[long.clone(), "short".into(), long.clone()]);
        assert_eq!(dedup(&mut messages), 1);
        assert_eq!(messages[3].content.as_deref(), Some(DUPLICATE_NOTE));
        assert_eq!(messages[7].content.as_deref(), Some(long.as_str()));
        assert_eq!(dedup(&mut messages), 0, "nothing left to do");
    }

    #[test]
    fn compact_cuts_old_long_results_only() {
        let long = "é".repeat(3_000);
        let mut outputs = vec![long.clone()];
        outputs.extend((0..5).map(|i| format!("r{i}")));
        outputs.push(long.clone());
        let mut messages = conversation(&outputs);
        assert_eq!(compact(&mut messages, KEEP_RECENT, COMPACT_BYTES), 1);
        let cut = messages[3].content.as_deref().expect("text");
        assert!(
            cut.len() < 2_000 && cut.contains("bytes elided"),
            "{}",
            cut.len()
        );
        let last = messages.last().and_then(|m| m.content.as_deref());
        assert_eq!(last, Some(long.as_str()), "recent results stay whole");
    }

    #[test]
    fn the_summary_range_keeps_the_opening_and_whole_turns() {
        let outputs: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
        let messages = conversation(&outputs);
        let range = summary_range(&messages, 5).expect("range");
        assert_eq!(range.start, 2, "system and task stay");
        assert_ne!(
            messages[range.end].role,
            Role::Tool,
            "no result parted from its call"
        );
        assert!(messages.len() - range.end >= 5);
        assert_eq!(summary_range(&conversation(&[]), 5), None);
    }

    #[test]
    fn the_summary_keeps_the_current_movement_guidance() {
        let mut part = turn(0, "r").to_vec();
        part.push(Message::user(
            "[Movement `plan` is over; now in `implement`.]\nDo it.",
        ));
        part.extend(turn(1, "r"));
        let request = summary_request(&part);
        let asked = request[1].content.as_deref().expect("text");
        assert!(
            asked.starts_with(SUMMARY_PROMPT) && asked.contains("assistant called read_file({})")
        );
        let message = summary_message(&part, "Read two files.");
        let text = message.content.expect("text");
        assert!(text.starts_with(SUMMARY_HEADER) && text.contains("Read two files."));
        assert!(text.ends_with("now in `implement`.]\nDo it."));
    }
}
