//! The movement loop (SPEC §3.5), each iteration: run the calls still without a result,
//! check the hand-back signal and the job's deadline, deliver interjections, the watchdog and
//! loop guard, the prompt guard, stream the LLM, record its reply (a reply without a tool
//! call gets a warning and another turn), and take its calls to the next iteration.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use maestro_domain::{EventBody, Message, MessageEvent, Role, ToolCall, ToolCallEvent};
use maestro_llm::Completion;

use super::context::{JobEnd, JobError};
use super::llm::Interrupt;
use super::run::JobRun;

/// Consecutive replies without a tool call before the job fails.
const MAX_TEXT_ONLY_REPLIES: u32 = 2;

const TEXT_ONLY_WARNING: &str = "Your last reply called no tool. Continue the task with the \
tools: call `transition` when this movement is done, `complete` when the whole task is.";

/// The same tool calls this many times in a row get a warning...
const REPEAT_WARN: usize = 3;
/// ...and this many times end the job.
const REPEAT_ABORT: usize = 5;

impl JobRun<'_> {
    /// Run the movement loop until the job ends or pauses; `pending` are calls of the last
    /// committed reply without a result (a resumed job runs them first).
    pub async fn drive(mut self, mut pending: Vec<ToolCall>) -> Result<JobEnd, JobError> {
        let mut text_only = 0;
        let mut iteration_started = Instant::now();
        loop {
            if !pending.is_empty()
                && let Some(end) = self.run_calls(std::mem::take(&mut pending)).await?
            {
                return Ok(end);
            }
            if self.iterations > 0 {
                self.log_overhead(iteration_started);
                metrics::histogram!(maestro_runtime::metrics::ITERATION_DURATION)
                    .record(maestro_runtime::metrics::seconds(iteration_started));
            }
            iteration_started = Instant::now();
            if let Some(end) = self.before_llm().await? {
                return Ok(end);
            }
            let completion = match self.llm_iteration().await? {
                Ok(completion) => completion,
                Err(Interrupt::Released) => return self.release().await,
                Err(Interrupt::Llm(e)) => return self.llm_failed(e).await,
            };
            let calls = self.take_reply(completion);
            if calls.is_empty() {
                text_only += 1;
                if text_only > MAX_TEXT_ONLY_REPLIES {
                    let error =
                        format!("the model replied {text_only} times without calling a tool");
                    return self.fail(error).await;
                }
                let warning = Message::user(TEXT_ONLY_WARNING);
                self.journal.record(MessageEvent::plain(warning));
                self.journal.send().await?;
                continue;
            }
            text_only = 0;
            let repeats = repeated_calls(&self.journal.messages);
            if repeats >= REPEAT_ABORT {
                let error = format!(
                    "loop detected: the model made the same tool calls {repeats} times in a row"
                );
                return self.fail(error).await;
            }
            for call in &calls {
                self.journal.push(EventBody::ToolCall(ToolCallEvent {
                    call_id: call.id.clone(),
                    name: call.name().to_owned(),
                    arguments: call.function.arguments.clone(),
                    message_seq: 0,
                }));
            }
            pending = calls;
        }
    }

    /// Everything before the next LLM call: the hand-back signal, the deadline, interjections,
    /// the watchdog and the prompt guard. `Some` when the job ended.
    async fn before_llm(&mut self) -> Result<Option<JobEnd>, JobError> {
        if self.shared.release.is_cancelled() {
            return self.release().await.map(Some);
        }
        let settings = Arc::clone(&self.shared.settings);
        if let Some(deadline) = settings.job_deadline {
            let age = (chrono::Utc::now() - self.claim.created_at)
                .to_std()
                .unwrap_or_default();
            if age > deadline {
                let error = format!(
                    "deadline exceeded: the job is {}s old (JOB_DEADLINE_MS allows {}s)",
                    age.as_secs(),
                    deadline.as_secs()
                );
                return self.fail(error).await.map(Some);
            }
        }
        self.journal.take_interjections().await?;
        if let Some(end) = self.watchdog().await? {
            return Ok(Some(end));
        }
        self.prompt_guard().await
    }

    /// Record the model's reply (its calls given ids) and return its calls.
    fn take_reply(&mut self, completion: Completion) -> Vec<ToolCall> {
        self.iterations += 1;
        self.place.iterations += 1;
        let calls = self.journal.assign_ids(completion.tool_calls);
        let model = completion.model.or_else(|| Some(self.model.clone()));
        self.journal.record(MessageEvent {
            message: Message::assistant(completion.content, calls.clone()),
            model,
            usage: completion.usage,
            finish_reason: completion.finish_reason,
            reasoning: completion.reasoning,
        });
        calls
    }

    /// The per-movement and per-job iteration limits: a warning as the movement's limit
    /// nears (and a duplicate-call warning), the end of the job past either limit.
    async fn watchdog(&mut self) -> Result<Option<JobEnd>, JobError> {
        let limit = self.piece.max_iterations;
        if self.place.iterations >= limit {
            let error = format!(
                "movement `{}` took {limit} LLM iterations without leaving (max_iterations of piece `{}`)",
                self.place.movement, self.piece.name
            );
            return self.fail(error).await.map(Some);
        }
        if self.iterations >= self.shared.settings.max_iterations {
            let error = format!("no `complete` after {} LLM iterations", self.iterations);
            return self.fail(error).await.map(Some);
        }
        let left = limit - self.place.iterations;
        if !self.place.warned && limit >= 4 && left <= (limit / 5).max(2) {
            self.place.warned = true;
            let warning = format!(
                "[Watchdog] {left} LLM iterations are left in movement `{}`. Finish it now: \
                 call `transition` or `complete`.",
                self.place.movement
            );
            self.journal
                .record(MessageEvent::plain(Message::user(warning)));
        }
        let messages = &self.journal.messages;
        if repeated_calls(messages) == REPEAT_WARN
            && messages.last().is_some_and(|m| m.role == Role::Tool)
        {
            let warning = format!(
                "[Loop guard] You made the same tool calls {REPEAT_WARN} times in a row and got \
                 the same kind of answer. Change your approach; repeating them {REPEAT_ABORT} \
                 times ends the task."
            );
            self.journal
                .record(MessageEvent::plain(Message::user(warning)));
        }
        Ok(None)
    }

    fn log_overhead(&self, started: Instant) {
        let total = started.elapsed().as_micros() as u64;
        let llm = self.waits.llm_us.swap(0, Ordering::Relaxed);
        let tools = self.waits.tools_us.swap(0, Ordering::Relaxed);
        tracing::debug!(
            target: "maestro_worker::overhead",
            overhead_us = total.saturating_sub(llm + tools),
            llm_us = llm,
            tools_us = tools,
            "iteration"
        );
    }
}

/// How many assistant messages in a row, ending with the last one, made exactly the same
/// tool calls (names and arguments; 0 when the last made none).
fn repeated_calls(messages: &[Message]) -> usize {
    let signature = |m: &Message| -> Vec<(String, String)> {
        m.tool_calls
            .iter()
            .map(|c| {
                let arguments = serde_json::from_str::<serde_json::Value>(&c.function.arguments)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|_| c.function.arguments.clone());
                (c.name().to_owned(), arguments)
            })
            .collect()
    };
    let mut assistants = messages.iter().rev().filter(|m| m.role == Role::Assistant);
    let Some(last) = assistants.next() else {
        return 0;
    };
    let wanted = signature(last);
    if wanted.is_empty() {
        return 0;
    }
    1 + assistants.take_while(|m| signature(m) == wanted).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_calls_count_identical_assistant_turns_from_the_end() {
        let call =
            |args: &str| Message::assistant(None, vec![ToolCall::new("c", "read_file", args)]);
        let result = Message::tool("c", "same");
        let mut messages = vec![Message::system("s"), Message::user("u")];
        assert_eq!(repeated_calls(&messages), 0);
        messages.extend([call(r#"{"path":"b"}"#), result.clone()]);
        for _ in 0..3 {
            messages.extend([call(r#"{ "path": "a" }"#), result.clone()]);
        }
        assert_eq!(
            repeated_calls(&messages),
            3,
            "argument whitespace does not matter"
        );
        messages.push(call(r#"{"path":"a"}"#));
        assert_eq!(repeated_calls(&messages), 4);
        messages.push(Message::assistant(Some("text".into()), vec![]));
        assert_eq!(repeated_calls(&messages), 0);
    }
}
