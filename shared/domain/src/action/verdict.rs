//! What is decided about an item: a person's [`Verdict`] (parsed once from a request, or
//! refused), or how a subtask's child ended; and the [`Decision`] recorded with it.

use serde::{Deserialize, Deserializer, Serialize};

use super::status::ActionStatus;
use crate::ids::JobId;
use crate::job::{JobStatus, WaitReason};

/// How far an approval reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// This call only.
    #[default]
    Once,
    /// The tool, for the rest of the task.
    Task,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Task => "task",
        }
    }
}

/// What was decided about an item: a person's verdict, or (a `subtask` item) how its child
/// task ended. Stored as the `decision` of the item, `{"decision": "<name>", ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Verdict {
    /// Run the call (tool and package requests).
    Approve {
        #[serde(default, deserialize_with = "null_as_default")]
        scope: Scope,
    },
    /// Do not run it; the model is told (tool and package requests).
    Deny,
    /// The side effect of unknown outcome took effect: do not run it again.
    Happened,
    /// It did not: run the call again.
    NotHappened,
    /// The MCP server's token was supplied.
    TokenSupplied,
    /// The question was answered (by a comment).
    Answer,
    /// The child task's latest job succeeded, with this result.
    Succeeded {
        #[serde(default)]
        result: Option<String>,
    },
    /// It failed, with this error.
    Failed {
        #[serde(default)]
        error: Option<String>,
    },
    /// It was cancelled.
    Cancelled,
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Why a requested verdict is refused; nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request does not fit the item (a verb or scope it does not take).
    #[error("{0}")]
    Invalid(String),
    /// This kind is not decided with a verdict: it is answered another way (a comment, a
    /// token, its subtask ending).
    #[error("a {0} item is not decided this way")]
    Elsewhere(WaitReason),
    /// Nothing can decide this kind.
    #[error("a {0} item cannot be decided")]
    Undecidable(WaitReason),
}

impl Verdict {
    /// The one parser of a person's decision on an item of `kind`: the verb (`approve`, `deny`,
    /// `happened`, `not_happened`) and, for an approval, its scope (`once` when absent).
    pub fn parse(kind: WaitReason, verb: &str, scope: Option<&str>) -> Result<Verdict, Refusal> {
        let invalid = |message: String| Err(Refusal::Invalid(message));
        match kind {
            WaitReason::ToolRequest | WaitReason::PackageRequest => match verb {
                "approve" => {
                    let scope = match scope.unwrap_or("once") {
                        "once" => Scope::Once,
                        "task" => Scope::Task,
                        _ => return invalid("scope is `once` or `task`".to_owned()),
                    };
                    if kind == WaitReason::PackageRequest && scope != Scope::Once {
                        return invalid("a package request is approved once".to_owned());
                    }
                    Ok(Verdict::Approve { scope })
                }
                "deny" if scope.is_some() => invalid("scope applies to approvals only".to_owned()),
                "deny" => Ok(Verdict::Deny),
                other => invalid(format!("decision is `approve` or `deny`, not {other:?}")),
            },
            WaitReason::SideEffectUnknown => match verb {
                "happened" => Ok(Verdict::Happened),
                "not_happened" => Ok(Verdict::NotHappened),
                other => invalid(format!(
                    "decision is `happened` or `not_happened`, not {other:?}"
                )),
            },
            WaitReason::Ask | WaitReason::McpAuthRequired | WaitReason::Subtask => {
                Err(Refusal::Elsewhere(kind))
            }
            WaitReason::Browser => Err(Refusal::Undecidable(kind)),
        }
    }

    /// The verdict of a child task whose latest job ended `status` (`None` while it runs).
    pub fn of_child(
        status: JobStatus,
        result: Option<String>,
        error: Option<String>,
    ) -> Option<Verdict> {
        match status {
            JobStatus::Succeeded => Some(Verdict::Succeeded { result }),
            JobStatus::Failed => Some(Verdict::Failed { error }),
            JobStatus::Cancelled => Some(Verdict::Cancelled),
            _ => None,
        }
    }

    /// Its name, as stored and as `decision` events carry it.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Approve { .. } => "approve",
            Verdict::Deny => "deny",
            Verdict::Happened => "happened",
            Verdict::NotHappened => "not_happened",
            Verdict::TokenSupplied => "token_supplied",
            Verdict::Answer => "answer",
            Verdict::Succeeded { .. } => "succeeded",
            Verdict::Failed { .. } => "failed",
            Verdict::Cancelled => "cancelled",
        }
    }

    /// The status an item takes with this verdict.
    pub fn status(&self) -> ActionStatus {
        match self {
            Verdict::Approve { .. } => ActionStatus::Approved,
            Verdict::Deny => ActionStatus::Denied,
            Verdict::Answer => ActionStatus::Answered,
            _ => ActionStatus::Resolved,
        }
    }

    pub fn scope(&self) -> Option<Scope> {
        match self {
            Verdict::Approve { scope } => Some(*scope),
            _ => None,
        }
    }
}

/// A recorded decision: the verdict, who gave it, and what came with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Decision {
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The owner who decided, or `scheduler` for a subtask's end.
    pub by: String,
    /// Shown to the model with a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The arguments hash the reviewer saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_hash: Option<String>,
    /// For an answered question: the follow-up job that carries the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by_job: Option<JobId>,
    /// The A2A `messageId` the decision came in (the same message again decides nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

impl Decision {
    pub fn new(verdict: Verdict, by: impl Into<String>) -> Self {
        Self {
            verdict,
            by: by.into(),
            note: None,
            arguments_hash: None,
            answered_by_job: None,
            message_id: None,
        }
    }

    /// `: <note>` when the decision has a note, for messages to the model.
    pub fn note_suffix(&self) -> String {
        self.note
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| format!(": {n}"))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A request (kind, verb, scope) and what it parses to.
    type Case<'a> = (
        WaitReason,
        &'a str,
        Option<&'a str>,
        Result<Verdict, Refusal>,
    );

    #[test]
    fn verdicts_are_parsed_per_kind() {
        use WaitReason::*;
        let cases: &[Case] = &[
            (
                ToolRequest,
                "approve",
                None,
                Ok(Verdict::Approve { scope: Scope::Once }),
            ),
            (
                ToolRequest,
                "approve",
                Some("task"),
                Ok(Verdict::Approve { scope: Scope::Task }),
            ),
            (
                ToolRequest,
                "approve",
                Some("ever"),
                Err(Refusal::Invalid("scope is `once` or `task`".into())),
            ),
            (
                PackageRequest,
                "approve",
                Some("once"),
                Ok(Verdict::Approve { scope: Scope::Once }),
            ),
            (
                PackageRequest,
                "approve",
                Some("task"),
                Err(Refusal::Invalid(
                    "a package request is approved once".into(),
                )),
            ),
            (ToolRequest, "deny", None, Ok(Verdict::Deny)),
            (
                PackageRequest,
                "deny",
                Some("once"),
                Err(Refusal::Invalid("scope applies to approvals only".into())),
            ),
            (
                ToolRequest,
                "maybe",
                None,
                Err(Refusal::Invalid(
                    "decision is `approve` or `deny`, not \"maybe\"".into(),
                )),
            ),
            (SideEffectUnknown, "happened", None, Ok(Verdict::Happened)),
            (
                SideEffectUnknown,
                "not_happened",
                None,
                Ok(Verdict::NotHappened),
            ),
            (
                SideEffectUnknown,
                "approve",
                None,
                Err(Refusal::Invalid(
                    "decision is `happened` or `not_happened`, not \"approve\"".into(),
                )),
            ),
            (Ask, "approve", None, Err(Refusal::Elsewhere(Ask))),
            (
                McpAuthRequired,
                "approve",
                None,
                Err(Refusal::Elsewhere(McpAuthRequired)),
            ),
            (Subtask, "approve", None, Err(Refusal::Elsewhere(Subtask))),
            (Browser, "approve", None, Err(Refusal::Undecidable(Browser))),
        ];
        for (kind, verb, scope, expected) in cases {
            assert_eq!(
                &Verdict::parse(*kind, verb, *scope),
                expected,
                "{kind} {verb} {scope:?}"
            );
        }
    }

    #[test]
    fn verdicts_give_their_status_and_name() {
        let table = [
            (
                Verdict::Approve { scope: Scope::Task },
                ActionStatus::Approved,
                "approve",
            ),
            (Verdict::Deny, ActionStatus::Denied, "deny"),
            (Verdict::Happened, ActionStatus::Resolved, "happened"),
            (Verdict::NotHappened, ActionStatus::Resolved, "not_happened"),
            (
                Verdict::TokenSupplied,
                ActionStatus::Resolved,
                "token_supplied",
            ),
            (Verdict::Answer, ActionStatus::Answered, "answer"),
            (Verdict::Cancelled, ActionStatus::Resolved, "cancelled"),
        ];
        for (verdict, status, name) in table {
            assert_eq!(verdict.status(), status, "{verdict:?}");
            assert_eq!(verdict.name(), name);
            let stored =
                serde_json::to_value(Decision::new(verdict.clone(), "alice")).expect("json");
            assert_eq!(stored["decision"], name, "stored under its name");
        }
        assert_eq!(
            Verdict::of_child(JobStatus::Succeeded, Some("r".into()), None),
            Some(Verdict::Succeeded {
                result: Some("r".into())
            })
        );
        assert_eq!(Verdict::of_child(JobStatus::Running, None, None), None);
    }

    #[test]
    fn decisions_stored_before_read_back() {
        // As earlier versions stored them: nulls for what did not apply.
        let stored = [
            json!({"decision": "approve", "scope": null, "note": null, "by": "alice", "arguments_hash": null}),
            json!({"decision": "approve", "scope": "task", "note": "fine", "by": "alice", "arguments_hash": "ab"}),
            json!({"decision": "deny", "scope": null, "note": "no", "by": "alice"}),
            json!({"decision": "answer", "by": "alice", "answered_by_job": JobId::new()}),
            json!({"decision": "succeeded", "by": "scheduler", "result": "42", "error": null}),
            json!({"decision": "token_supplied", "scope": null, "note": null, "by": "alice"}),
        ];
        let read: Vec<Decision> = stored
            .iter()
            .map(|v| serde_json::from_value(v.clone()).expect("readable"))
            .collect();
        assert_eq!(read[0].verdict, Verdict::Approve { scope: Scope::Once });
        assert_eq!(read[1].verdict, Verdict::Approve { scope: Scope::Task });
        assert_eq!(read[1].note_suffix(), ": fine");
        assert_eq!(read[2].verdict, Verdict::Deny);
        assert_eq!(
            read[4].verdict,
            Verdict::Succeeded {
                result: Some("42".into())
            }
        );
        assert_eq!(read[5].verdict, Verdict::TokenSupplied);
    }
}
