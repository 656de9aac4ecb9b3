//! Calls that need a person before they run (SPEC §3.2, §6.2). Before the calls of a turn
//! run, each passes this gate:
//!
//! - `ask` parks the job for the user's answer (`waiting_human: ask`), within the task's ask
//!   limit; the answer comes back as a follow-up job in the same movement.
//! - `request_package` parks it for an approval (`package_request`); approved, the package is
//!   installed into the workspace by a tool-runner and the model gets the outcome.
//! - A call the workspace policy refuses in a way a person may lift (a tool not allowed, an
//!   edit where edits are off, a gated tool) parks it for a decision (`tool_request`).
//!   Approved, exactly that call runs — only if its arguments hash to what the reviewer saw;
//!   "for the task" also grants the tool to every later call of the task. Denied, the model
//!   gets a tool error saying so and goes on.
//!
//! Every parked call of one turn becomes one item of the same pause; the job resumes when all
//! are decided. Calls that need nobody run as usual, before the pause.

use std::collections::BTreeMap;

use maestro_db::actions::{self, Action, Decided, Decision, NewAction};
use maestro_db::jobs::Claimed;
use maestro_domain::tools::{self, ASK, DELEGATE, REQUEST_PACKAGE};
use maestro_domain::{Owner, ToolCall, WaitReason};
use serde_json::{Value, json};

use super::calls::{movement_refusal, parse_arguments};
use super::{JobEnd, JobError, JobRun, Shared};

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
    Spawn(super::subtasks::Delegation),
}

impl JobRun<'_> {
    /// The gate of one call.
    pub(super) async fn gate(&mut self, call: &ToolCall) -> Result<Gate, JobError> {
        let Ok(arguments) = parse_arguments(&call.function.arguments) else {
            // Running it reports the malformed arguments to the model.
            return Ok(Gate::Run);
        };
        Ok(match call.name() {
            ASK => self.gate_ask(call, &arguments),
            REQUEST_PACKAGE => self.gate_package(call, &arguments).await?,
            DELEGATE if self.spec(call).is_some() => self.gate_delegate(call, &arguments),
            _ => self.gate_tool(call, &arguments).await?,
        })
    }

    fn gate_ask(&self, call: &ToolCall, arguments: &Value) -> Gate {
        let question = arguments["question"].as_str().unwrap_or_default().trim();
        if question.is_empty() {
            return Gate::Answer("Error: `question` is required".to_owned(), true);
        }
        let limit = self.shared.settings.max_asks;
        if self.claim.ask_count >= limit {
            return Gate::Answer(
                format!(
                    "Error: the user has been asked {limit} questions in this task, the most \
                     allowed; go on with what you know"
                ),
                true,
            );
        }
        Gate::Park(self.item(call, WaitReason::Ask, json!({"question": question})))
    }

    async fn gate_package(&mut self, call: &ToolCall, arguments: &Value) -> Result<Gate, JobError> {
        let package = match package(arguments) {
            Ok(package) => package,
            Err(error) => return Ok(Gate::Answer(error, true)),
        };
        let hash = tools::arguments_hash(&package);
        Ok(match self.decision(&self.item_key(call)) {
            Some(action) if action.status == "approved" => {
                if action.detail["arguments_hash"].as_str() == Some(hash.as_str()) {
                    Gate::Run
                } else {
                    Gate::Answer(
                        "Error: the approval was for another package; nothing was installed"
                            .to_owned(),
                        true,
                    )
                }
            }
            Some(action) => Gate::Answer(
                format!(
                    "Error: a person denied installing {}{}",
                    package["name"].as_str().unwrap_or_default(),
                    note(&action)
                ),
                true,
            ),
            None => {
                let reason = arguments["reason"].as_str().unwrap_or_default();
                let detail = json!({"package": package, "reason": reason, "arguments_hash": hash});
                Gate::Park(self.item(call, WaitReason::PackageRequest, detail))
            }
        })
    }

    async fn gate_tool(&mut self, call: &ToolCall, arguments: &Value) -> Result<Gate, JobError> {
        let name = call.name();
        if self.spec(call).is_none() || movement_refusal(self.movement(), name).is_some() {
            // Unknown, or not a tool of this movement: running it reports that.
            return Ok(Gate::Run);
        }
        let refusal = match self.shared.policy.refusal(name, arguments, &self.granted) {
            Some(refusal) if refusal.approvable => refusal,
            // Allowed, or refused outright: running it answers either way.
            _ => return Ok(Gate::Run),
        };
        let hash = tools::arguments_hash(arguments);
        Ok(match self.decision(&self.item_key(call)) {
            Some(action) if action.status == "approved" => {
                if action.detail["arguments_hash"].as_str() == Some(hash.as_str()) {
                    self.approved_calls.insert(call.id.clone());
                    Gate::Run
                } else {
                    // Fail closed: what would run is not what the reviewer approved.
                    Gate::Answer(
                        "Error: the approval was for other arguments; the call was not run"
                            .to_owned(),
                        true,
                    )
                }
            }
            Some(action) => Gate::Answer(
                format!(
                    "Error: a person denied this call of `{name}`{}; do not repeat it",
                    note(&action)
                ),
                true,
            ),
            None => {
                let detail = json!({
                    "tool": name,
                    "arguments": arguments,
                    "arguments_hash": hash,
                    "reason": refusal.reason,
                });
                Gate::Park(self.item(call, WaitReason::ToolRequest, detail))
            }
        })
    }

    /// An item's key within the job: the call's place (movement, iteration, call id), the same
    /// on every claim that reaches it, unique even if a provider reuses call ids.
    pub(super) fn item_key(&self, call: &ToolCall) -> String {
        format!("{}/{}/{}", self.place.movement, self.iterations, call.id)
    }

    fn item(&self, call: &ToolCall, kind: WaitReason, detail: Value) -> NewAction {
        NewAction {
            key: self.item_key(call),
            kind,
            movement: self.place.movement.clone(),
            source_seq: None,
            detail,
            subtask: None,
        }
    }

    /// The decision on this job's item `key`, if it was decided (read when the job resumed).
    pub(super) fn decision(&self, key: &str) -> Option<Action> {
        self.decisions
            .iter()
            .find(|a| a.key == key && a.is_decided())
            .cloned()
    }

    /// Pause for the parked calls of a turn: one item each. An `ask` waits alone: next to
    /// approvals or subtasks it is answered with an error (the model may ask again once they
    /// are done). The job waits for a person when any item is a person's (`waiting_human`),
    /// else for its subtasks (`waiting_subtasks`).
    pub(super) async fn pause_for_calls(
        &mut self,
        parked: Vec<(ToolCall, NewAction)>,
    ) -> Result<JobEnd, JobError> {
        let (asks, decisions): (Vec<_>, Vec<_>) = parked
            .into_iter()
            .partition(|(_, item)| item.kind == WaitReason::Ask);
        let items: Vec<NewAction> = if decisions.is_empty() {
            asks.into_iter().take(1).map(|(_, item)| item).collect()
        } else {
            for (call, _) in &asks {
                let error =
                    "Error: ask once the pending approvals and subtasks are done".to_owned();
                self.record_result(call, error, true);
            }
            decisions.into_iter().map(|(_, item)| item).collect()
        };
        let kinds = || items.iter().map(|i| i.kind);
        let wait = kinds()
            .find(|k| *k == WaitReason::ToolRequest)
            .or_else(|| kinds().find(|k| k.is_human()))
            .unwrap_or(WaitReason::Subtask);
        let reason = match wait {
            WaitReason::Ask => format!(
                "the agent asks: {}",
                items[0].detail["question"].as_str().unwrap_or_default()
            ),
            WaitReason::Subtask => format!("waiting for {} subtask(s)", items.len()),
            _ => format!("{} call(s) wait for a person's decision", items.len()),
        };
        self.pause(wait, reason, items).await
    }

    /// `mcp_auth_required` before the LLM is called when an MCP server that needs a token has
    /// none from the task's owner. A token stored while the pause was being committed would
    /// find no waiting job to resume, so the tokens are read again after the pause: if they
    /// are there now, the job resolves its own items and goes on at once.
    pub(super) async fn authorize_mcp(&mut self) -> Result<Option<JobEnd>, JobError> {
        let missing: Vec<String> = self
            .shared
            .policy
            .mcp_servers
            .iter()
            .filter(|(name, s)| s.requires_auth && !self.mcp_tokens.contains_key(*name))
            .map(|(name, _)| name.clone())
            .collect();
        if missing.is_empty() {
            return Ok(None);
        }
        let items = missing
            .iter()
            .map(|server| NewAction {
                key: format!("mcp:{server}"),
                kind: WaitReason::McpAuthRequired,
                movement: self.place.movement.clone(),
                source_seq: None,
                detail: json!({"server": server}),
                subtask: None,
            })
            .collect();
        let reason = format!(
            "the MCP servers {} need authorization before the job can start",
            missing.join(", ")
        );
        let end = self
            .pause(WaitReason::McpAuthRequired, reason, items)
            .await?;
        if end != JobEnd::Paused {
            return Ok(Some(end));
        }
        let tokens = mcp_tokens(self.shared, self.claim).await?;
        if !missing.iter().all(|s| tokens.contains_key(s)) {
            return Ok(Some(end));
        }
        let Ok(owner) = Owner::parse(&self.claim.owner) else {
            return Ok(Some(end));
        };
        let decision = Decision {
            status: "resolved",
            verb: "token_supplied",
            scope: None,
            note: None,
            by: &owner,
            extra: json!({}),
            grant: None,
        };
        let pool = &self.shared.pool;
        for action in actions::of_job(pool, self.claim.job_id).await? {
            if action.kind != WaitReason::McpAuthRequired.as_str() || action.status != "pending" {
                continue;
            }
            let kinds = [WaitReason::McpAuthRequired];
            let decided =
                actions::decide(pool, self.claim.task_id, action.id, &kinds, &decision).await?;
            maestro_messaging::publish::wake_outbox(&self.shared.nats, &self.shared.subjects).await;
            if let Decided::Done { resumed: true, .. } = decided {
                tracing::info!("a token arrived while the job paused; going on");
                return Ok(Some(JobEnd::Released));
            }
        }
        Ok(Some(end))
    }
}

/// The task owner's tokens for the MCP servers that need one (no query when none does).
pub(super) async fn mcp_tokens(
    shared: &Shared,
    claim: &Claimed,
) -> Result<BTreeMap<String, String>, JobError> {
    let needs: Vec<String> = shared
        .policy
        .mcp_servers
        .iter()
        .filter(|(_, s)| s.requires_auth)
        .map(|(name, _)| name.clone())
        .collect();
    if needs.is_empty() {
        return Ok(BTreeMap::new());
    }
    let tokens = actions::tokens(&shared.pool, &claim.owner, &needs).await?;
    Ok(tokens.into_iter().collect())
}

/// `{name, manager, version}` of a package request, checked (see [`tools::check_package`]).
fn package(arguments: &Value) -> Result<Value, String> {
    let text = |key: &str| {
        arguments[key]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let (name, manager, version) = (text("name"), text("manager"), text("version"));
    let version = (!version.is_empty()).then_some(version);
    tools::check_package(&manager, &name, version.as_deref()).map_err(|e| format!("Error: {e}"))?;
    Ok(json!({"name": name, "manager": manager, "version": version}))
}

/// `: <note>` when the decision has one.
fn note(action: &Action) -> String {
    action
        .decision
        .as_ref()
        .and_then(|d| d["note"].as_str())
        .filter(|n| !n.trim().is_empty())
        .map(|n| format!(": {}", n.trim()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_requests_take_plain_names_and_versions_only() {
        let ok =
            package(&json!({"name": "six", "manager": "pip", "version": "1.16.0"})).expect("valid");
        assert_eq!(
            ok,
            json!({"name": "six", "manager": "pip", "version": "1.16.0"})
        );
        assert!(package(&json!({"name": "@scope/pkg", "manager": "npm"})).is_ok());
        assert!(package(&json!({"name": "--index-url=x", "manager": "pip"})).is_err());
        assert!(package(&json!({"name": "six; rm -rf /", "manager": "pip"})).is_err());
        assert!(package(&json!({"name": "six", "manager": "apt"})).is_err());
        assert!(package(&json!({"name": "a/b", "manager": "pip"})).is_err());
        assert!(package(&json!({"name": "user/repo", "manager": "npm"})).is_err());
        assert!(package(&json!({"name": "six", "manager": "pip", "version": "-e ."})).is_err());
    }
}
