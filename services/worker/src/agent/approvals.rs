//! The approvals gate: calls that need a person before they run (SPEC §3.2, §6.2), and what
//! people decided on the items this job paused for before (read when it resumes).
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

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use maestro_domain::action::Package;
use maestro_domain::policy::ToolPolicy;
use maestro_domain::tools;
use maestro_domain::{Action, ActionDetail, ToolCall, Verdict};
use serde_json::Value;

use super::gate::{CallSite, Gate};

/// Who allowed what beyond the workspace policy, and the decisions on this job's items.
#[derive(Debug, Default)]
pub(super) struct Approvals {
    /// Tools approved for the whole task (an approval with scope `task`).
    granted: Vec<String>,
    /// Calls a person approved, with the arguments they saw: these run past the policy.
    approved_calls: HashSet<String>,
    /// The items this job paused for before, with their decisions (read on resume).
    decisions: Vec<Action>,
    /// The owner's tokens for the MCP servers that need one.
    pub mcp_tokens: BTreeMap<String, String>,
}

impl Approvals {
    pub fn new(granted: Vec<String>, mcp_tokens: BTreeMap<String, String>) -> Self {
        Self {
            granted,
            mcp_tokens,
            ..Self::default()
        }
    }

    /// The decisions on this job's earlier items (a resumed job reads them).
    pub fn remember(&mut self, decisions: Vec<Action>) {
        self.decisions = decisions;
    }

    /// Tools granted for the task beyond the policy.
    pub fn granted(&self) -> &[String] {
        &self.granted
    }

    /// Whether a person approved exactly this call.
    pub fn approved(&self, call_id: &str) -> bool {
        self.approved_calls.contains(call_id)
    }

    /// The item `key` of this job, once decided (a superseded item is nobody's answer).
    pub fn decided(&self, key: &str) -> Option<&Action> {
        self.decisions
            .iter()
            .find(|a| a.key == key && a.is_decided())
    }

    /// What a person said about the outcome of operation `operation_id` started at `started`:
    /// the latest verdict given after that start (an older one is about an earlier run).
    pub fn side_effect_verdict(
        &self,
        operation_id: &str,
        started: DateTime<Utc>,
    ) -> Option<&Verdict> {
        let prefix = format!("op:{operation_id}:");
        self.decisions
            .iter()
            .filter(|a| {
                a.key.starts_with(&prefix)
                    && a.is_decided()
                    && a.decided_at.is_some_and(|d| d > started)
            })
            .max_by_key(|a| a.decided_at)
            .and_then(Action::verdict)
    }

    /// The gate of a call the policy may refuse in a way a person can lift.
    pub fn gate_tool(
        &mut self,
        call: &ToolCall,
        arguments: &Value,
        site: &CallSite,
        policy: &ToolPolicy,
    ) -> Gate {
        let name = call.name();
        let refusal = match policy.refusal(name, arguments, &self.granted) {
            Some(refusal) if refusal.approvable => refusal,
            // Allowed, or refused outright: running it answers either way.
            _ => return Gate::Run,
        };
        let hash = tools::arguments_hash(arguments);
        let Some(action) = self.decided(&site.key) else {
            return Gate::Park(site.item(ActionDetail::ToolRequest {
                tool: name.to_owned(),
                arguments: arguments.clone(),
                arguments_hash: hash,
                reason: refusal.reason,
            }));
        };
        let note = action
            .decision
            .as_ref()
            .map(|d| d.note_suffix())
            .unwrap_or_default();
        match action.verdict() {
            Some(Verdict::Approve { .. }) if action.detail.arguments_hash() == Some(&hash) => {
                self.approved_calls.insert(call.id.clone());
                Gate::Run
            }
            // Fail closed: what would run is not what the reviewer approved.
            Some(Verdict::Approve { .. }) => {
                Gate::error("Error: the approval was for other arguments; the call was not run")
            }
            _ => Gate::error(format!(
                "Error: a person denied this call of `{name}`{note}; do not repeat it"
            )),
        }
    }

    /// The gate of a `request_package` call.
    pub fn gate_package(&self, arguments: &Value, site: &CallSite) -> Gate {
        let package = match package(arguments) {
            Ok(package) => package,
            Err(error) => return Gate::error(error),
        };
        let hash = tools::arguments_hash(&serde_json::to_value(&package).unwrap_or_default());
        let Some(action) = self.decided(&site.key) else {
            let reason = arguments["reason"].as_str().unwrap_or_default().to_owned();
            return Gate::Park(site.item(ActionDetail::PackageRequest {
                package,
                reason,
                arguments_hash: hash,
            }));
        };
        match action.verdict() {
            Some(Verdict::Approve { .. }) if action.detail.arguments_hash() == Some(&hash) => {
                Gate::Run
            }
            Some(Verdict::Approve { .. }) => {
                Gate::error("Error: the approval was for another package; nothing was installed")
            }
            _ => {
                let note = action
                    .decision
                    .as_ref()
                    .map(|d| d.note_suffix())
                    .unwrap_or_default();
                Gate::error(format!(
                    "Error: a person denied installing {}{note}",
                    package.name
                ))
            }
        }
    }
}

/// The gate of an `ask` call: parked for the user's answer, within the task's ask limit
/// (`asked` questions so far, `limit` at most).
pub(super) fn gate_ask(arguments: &Value, site: &CallSite, asked: i32, limit: i32) -> Gate {
    let question = arguments["question"].as_str().unwrap_or_default().trim();
    if question.is_empty() {
        return Gate::error("Error: `question` is required");
    }
    if asked >= limit {
        return Gate::error(format!(
            "Error: the user has been asked {limit} questions in this task, the most allowed; \
             go on with what you know"
        ));
    }
    Gate::Park(site.item(ActionDetail::Ask {
        question: question.to_owned(),
    }))
}

/// The package a `request_package` call asks for, checked (see [`tools::check_package`]).
fn package(arguments: &Value) -> Result<Package, String> {
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
    Ok(Package {
        name,
        manager,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn package_requests_take_plain_names_and_versions_only() {
        let ok =
            package(&json!({"name": "six", "manager": "pip", "version": "1.16.0"})).expect("valid");
        assert_eq!(
            serde_json::to_value(ok).expect("json"),
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
