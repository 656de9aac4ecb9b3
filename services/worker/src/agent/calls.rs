//! Running the tool calls of an assistant message: each regular call passes its gate (the
//! approvals gate, or the delegation gate for `delegate`), the calls that need nobody run —
//! read-only ones in parallel, others in order (`execute.rs`) — the rest park the job, and the
//! children of `delegate` calls start after the other calls; then `transition` / `complete`
//! move the piece on or end it (`finals.rs`).

use futures::future::join_all;
use maestro_domain::action::{NewAction, wait_reason_of};
use maestro_domain::tools::{self, ASK, DELEGATE, REQUEST_PACKAGE, ToolSpec};
use maestro_domain::{ActionDetail, Message, MessageEvent, ToolCall, WaitReason};
use serde_json::Value;

use super::approvals::gate_ask;
use super::context::{JobEnd, JobError};
use super::execute::{Answer, CallError};
use super::gate::{Delegation, Gate};
use super::run::JobRun;
use super::subtasks::{self, Limits};

/// What the regular calls of a reply came to.
enum Regular {
    /// The job ended or paused.
    Ended(JobEnd),
    /// Every call is answered; `delegated` when subtasks were started in this reply (now) or
    /// answered it (on resume).
    Answered { delegated: bool },
}

impl JobRun<'_> {
    /// Run the calls of an assistant message and commit their results (with what a
    /// `transition` brings); a final call may end the job.
    pub(super) async fn run_calls(
        &mut self,
        calls: Vec<ToolCall>,
    ) -> Result<Option<JobEnd>, JobError> {
        let (finals, regular): (Vec<ToolCall>, Vec<ToolCall>) = calls
            .into_iter()
            .partition(|c| c.name() == tools::COMPLETE || c.name() == tools::TRANSITION);
        self.delegations.new_turn();
        let delegated = if regular.is_empty() {
            false
        } else {
            match self.run_regular(regular).await? {
                Regular::Ended(end) => return Ok(Some(end)),
                Regular::Answered { delegated } => delegated,
            }
        };
        if delegated {
            // Finishing in the reply that delegates would finish before reading what the
            // subtasks found (the seed's "complete with pending children waits for them").
            let note = "Error: not done yet: read the results of your subtasks (above), then \
                        call it again";
            for call in &finals {
                self.journal.record_result(call, note.to_owned(), true);
            }
        } else if let Some(end) = self.run_finals(finals).await? {
            return Ok(Some(end));
        }
        let answered = self.delegations.take_answered();
        if !answered.is_empty() {
            let notice = subtasks::resume_notice(&answered, &self.place.movement);
            self.journal
                .record(MessageEvent::plain(Message::user(notice)));
        }
        // Committed while the next LLM request goes out (the reply waits for it).
        self.journal.send().await?;
        Ok(None)
    }

    /// The regular calls of a reply: gated, run, parked or delegated.
    async fn run_regular(&mut self, regular: Vec<ToolCall>) -> Result<Regular, JobError> {
        // What the model asked for is durable before anything touches the world. Calls that
        // only read (and need nobody's approval) touch nothing: their message is committed
        // with their results, one commit instead of two; a crash in between only asks the
        // LLM that turn again.
        if !regular.iter().all(|c| self.reads_freely(c)) {
            self.journal.commit(None).await?;
        }
        let mut runnable = Vec::with_capacity(regular.len());
        let mut parked = Vec::new();
        let mut delegations: Vec<(ToolCall, Delegation)> = Vec::new();
        for call in regular {
            match self.gate(&call) {
                Gate::Run => runnable.push(call),
                Gate::Park(item) => parked.push((call, item)),
                Gate::Answer(content, is_error) => {
                    self.journal.record_result(&call, content, is_error);
                }
                Gate::Spawn(delegation) => delegations.push((call, delegation)),
            }
        }
        let delegated = !delegations.is_empty() || self.delegations.answered_any();
        let (results, stopped) = self.execute_all(&runnable).await;
        for (call, (content, is_error)) in runnable.iter().zip(results) {
            self.journal.record_result(call, content, is_error);
        }
        if let Some(stopped) = stopped {
            return self.stopped(stopped).await.map(Regular::Ended);
        }
        // While a call of the reply waits for a person's approval, its `delegate` calls wait
        // too: still unanswered, they are started when the job resumes, after that call.
        let approvals = parked
            .iter()
            .any(|(_, item)| item.kind() != WaitReason::Ask);
        if !delegations.is_empty() && !approvals {
            // After the reply's other calls: the children see what they changed. (An `ask`
            // next to them is answered with an error and waits for them.)
            let movement = self.place.movement.clone();
            let started = subtasks::start(self.shared, self.claim, &movement, delegations).await?;
            parked.extend(started);
        }
        if !parked.is_empty() {
            // The calls that need nobody ran; the rest wait (and the finals with them).
            return self.pause_for_calls(parked).await.map(Regular::Ended);
        }
        Ok(Regular::Answered { delegated })
    }

    /// The gate of one call.
    fn gate(&mut self, call: &ToolCall) -> Gate {
        let Ok(arguments) = tools::parse_arguments(&call.function.arguments) else {
            // Running it reports the malformed arguments to the model.
            return Gate::Run;
        };
        let site = self.site(call);
        match call.name() {
            ASK => {
                let limit = self.shared.settings.max_asks;
                gate_ask(&arguments, &site, self.claim.ask_count, limit)
            }
            REQUEST_PACKAGE => self.approvals.gate_package(&arguments, &site),
            DELEGATE if self.spec(call).is_some() => {
                let settings = &self.shared.settings;
                let limits = Limits {
                    catalog: &self.shared.catalog,
                    default_piece: &settings.subtask_piece,
                    per_turn: settings.max_subtasks_per_turn,
                };
                let decided = self.approvals.decided(&site.key).cloned();
                let movement = self.movement();
                self.delegations
                    .gate(&arguments, &site, decided.as_ref(), movement, limits)
            }
            name => {
                if self.spec(call).is_none() || self.movement().refusal(name).is_some() {
                    // Unknown, or not a tool of this movement: running it reports that.
                    return Gate::Run;
                }
                let policy = &self.shared.policy;
                self.approvals.gate_tool(call, &arguments, &site, policy)
            }
        }
    }

    /// A call got no result: the tool-runner is unavailable (retry later, keeping the turn),
    /// or a side effect's outcome is unknown (a person must say).
    async fn stopped(&mut self, stopped: CallError) -> Result<JobEnd, JobError> {
        match stopped {
            CallError::Unavailable(e) => {
                // Keep the LLM's turn (and the results so far): the retry runs only the calls
                // still without a result, and does not ask the LLM again.
                self.journal.commit(None).await?;
                self.recoverable(e.to_string(), None).await
            }
            CallError::Unknown {
                operation_id,
                tool,
                arguments,
            } => {
                let reason = format!(
                    "operation {operation_id} (`{tool}` with {arguments}) was started but its \
                     outcome is unknown; a person must say whether it happened before the job \
                     goes on"
                );
                let item = NewAction {
                    // One item per time the outcome was lost: a later loss asks again.
                    key: format!("op:{operation_id}:{}", self.fence.attempt),
                    movement: self.place.movement.clone(),
                    source_seq: None,
                    detail: ActionDetail::SideEffectUnknown {
                        operation_id,
                        tool,
                        arguments: serde_json::from_str::<Value>(&arguments)
                            .unwrap_or(Value::String(arguments)),
                    },
                };
                self.pause(WaitReason::SideEffectUnknown, reason, vec![item])
                    .await
            }
            CallError::Job(e) => Err(e),
        }
    }

    /// Pause for the parked calls of a turn: one item each. An `ask` waits alone: next to
    /// approvals or subtasks it is answered with an error (the model may ask again once they
    /// are done).
    async fn pause_for_calls(
        &mut self,
        parked: Vec<(ToolCall, NewAction)>,
    ) -> Result<JobEnd, JobError> {
        let (asks, decisions): (Vec<_>, Vec<_>) = parked
            .into_iter()
            .partition(|(_, item)| item.kind() == WaitReason::Ask);
        let items: Vec<NewAction> = if decisions.is_empty() {
            asks.into_iter().take(1).map(|(_, item)| item).collect()
        } else {
            for (call, _) in &asks {
                let error =
                    "Error: ask once the pending approvals and subtasks are done".to_owned();
                self.journal.record_result(call, error, true);
            }
            decisions.into_iter().map(|(_, item)| item).collect()
        };
        let kinds: Vec<WaitReason> = items.iter().map(NewAction::kind).collect();
        let wait = wait_reason_of(&kinds);
        let reason = match (wait, &items[0].detail) {
            (WaitReason::Ask, ActionDetail::Ask { question }) => {
                format!("the agent asks: {question}")
            }
            (WaitReason::Subtask, _) => format!("waiting for {} subtask(s)", items.len()),
            _ => format!("{} call(s) wait for a person's decision", items.len()),
        };
        self.pause(wait, reason, items).await
    }

    /// Results of the calls, in order, up to the first call that got none (and why). Runs
    /// of consecutive read-only calls go out in parallel; any other call runs alone, in order.
    async fn execute_all(&mut self, calls: &[ToolCall]) -> (Vec<Answer>, Option<CallError>) {
        let mut results = Vec::with_capacity(calls.len());
        let mut rest = calls;
        while !rest.is_empty() {
            let batch = rest
                .iter()
                .take_while(|c| self.spec(c).is_some_and(ToolSpec::is_read_only))
                .count()
                .max(1);
            let (now, later) = rest.split_at(batch);
            rest = later;
            let outcomes = join_all(now.iter().map(|c| self.execute(c))).await;
            for (call, outcome) in now.iter().zip(outcomes) {
                match outcome {
                    Ok(result) => {
                        let kind = self.spec(call).map(|s| s.idempotency);
                        self.cache.remember(call, kind, &result);
                        results.push(result);
                    }
                    Err(e) => return (results, Some(e)),
                }
            }
        }
        (results, None)
    }

    /// A read-only call the policy allows as it is (no approval, no person).
    fn reads_freely(&self, call: &ToolCall) -> bool {
        let Some(spec) = self.spec(call) else {
            return false;
        };
        if !spec.is_read_only() || spec.name == ASK {
            return false;
        }
        tools::parse_arguments(&call.function.arguments).is_ok_and(|arguments| {
            self.shared
                .policy
                .refusal(&spec.name, &arguments, self.approvals.granted())
                .is_none()
        })
    }
}
