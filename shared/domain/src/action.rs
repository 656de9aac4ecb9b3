//! Required actions: the items a paused job waits for (SPEC §3.2, §6.2), what people (and
//! child tasks) decide about them, and what a job does next once they are decided.
//!
//! Everything here is pure. The db crate maps a stored row to an [`Action`] once; services
//! parse a request into a [`Verdict`] with [`Verdict::parse`], ask [`Outstanding::next_status`]
//! what the job becomes, and [`route_comment`] where a comment goes.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::ids::{ActionId, JobId, TaskId};
use crate::job::{JobStatus, WaitReason};

/// Where an item is in its life. `pending` until it is decided; `superseded` when a later pause
/// of its job set it aside as left behind by a dead attempt (nobody's answer; recorded again,
/// it is pending again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionStatus {
    Pending,
    Approved,
    Denied,
    Answered,
    Resolved,
    Superseded,
}

impl ActionStatus {
    pub const ALL: [ActionStatus; 6] = [
        ActionStatus::Pending,
        ActionStatus::Approved,
        ActionStatus::Denied,
        ActionStatus::Answered,
        ActionStatus::Resolved,
        ActionStatus::Superseded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionStatus::Pending => "pending",
            ActionStatus::Approved => "approved",
            ActionStatus::Denied => "denied",
            ActionStatus::Answered => "answered",
            ActionStatus::Resolved => "resolved",
            ActionStatus::Superseded => "superseded",
        }
    }

    /// Answered: by a person, or (a subtask) by its child. A superseded item is nobody's answer.
    pub fn is_decided(self) -> bool {
        !matches!(self, ActionStatus::Pending | ActionStatus::Superseded)
    }
}

impl fmt::Display for ActionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status string that is not one of [`ActionStatus::ALL`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown required action status {0:?}")]
pub struct UnknownActionStatus(pub String);

impl FromStr for ActionStatus {
    type Err = UnknownActionStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownActionStatus(s.to_owned()))
    }
}

/// How far an approval reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

impl Decision {
    pub fn new(verdict: Verdict, by: impl Into<String>) -> Self {
        Self {
            verdict,
            by: by.into(),
            note: None,
            arguments_hash: None,
            answered_by_job: None,
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

/// A package a `request_package` call asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    pub name: String,
    pub manager: String,
    #[serde(default)]
    pub version: Option<String>,
}

/// What an item is about, by kind (stored as the item's `detail`, and shown flat in it).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ActionDetail {
    /// A call the policy refuses in a way a person may lift.
    ToolRequest {
        tool: String,
        arguments: Value,
        arguments_hash: String,
        reason: String,
    },
    PackageRequest {
        package: Package,
        reason: String,
        arguments_hash: String,
    },
    Ask {
        question: String,
    },
    McpAuthRequired {
        server: String,
    },
    /// A ledgered call started before a crash, whose outcome nobody knows.
    SideEffectUnknown {
        operation_id: String,
        tool: String,
        arguments: Value,
    },
    Subtask {
        subtask_id: TaskId,
        instruction: String,
        piece: String,
    },
}

/// The wire forms of [`ActionDetail`]'s variants, to parse a stored detail by its kind.
mod stored {
    use super::*;

    #[derive(Deserialize)]
    pub struct ToolRequest {
        pub tool: String,
        pub arguments: Value,
        pub arguments_hash: String,
        #[serde(default)]
        pub reason: String,
    }
    #[derive(Deserialize)]
    pub struct PackageRequest {
        pub package: Package,
        #[serde(default)]
        pub reason: String,
        pub arguments_hash: String,
    }
    #[derive(Deserialize)]
    pub struct Ask {
        pub question: String,
    }
    #[derive(Deserialize)]
    pub struct McpAuth {
        pub server: String,
    }
    #[derive(Deserialize)]
    pub struct SideEffect {
        pub operation_id: String,
        pub tool: String,
        pub arguments: Value,
    }
    #[derive(Deserialize)]
    pub struct Subtask {
        pub subtask_id: TaskId,
        pub instruction: String,
        pub piece: String,
    }
}

/// A stored detail that does not fit its kind.
#[derive(Debug, thiserror::Error)]
#[error("the detail of a {kind} item is not readable: {reason}")]
pub struct BadDetail {
    pub kind: WaitReason,
    pub reason: String,
}

impl ActionDetail {
    /// The kind of item this detail belongs to.
    pub fn kind(&self) -> WaitReason {
        match self {
            ActionDetail::ToolRequest { .. } => WaitReason::ToolRequest,
            ActionDetail::PackageRequest { .. } => WaitReason::PackageRequest,
            ActionDetail::Ask { .. } => WaitReason::Ask,
            ActionDetail::McpAuthRequired { .. } => WaitReason::McpAuthRequired,
            ActionDetail::SideEffectUnknown { .. } => WaitReason::SideEffectUnknown,
            ActionDetail::Subtask { .. } => WaitReason::Subtask,
        }
    }

    /// Read a stored detail of an item of `kind`.
    pub fn parse(kind: WaitReason, value: Value) -> Result<Self, BadDetail> {
        let bad = |e: serde_json::Error| BadDetail {
            kind,
            reason: e.to_string(),
        };
        Ok(match kind {
            WaitReason::ToolRequest => {
                let d: stored::ToolRequest = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::ToolRequest {
                    tool: d.tool,
                    arguments: d.arguments,
                    arguments_hash: d.arguments_hash,
                    reason: d.reason,
                }
            }
            WaitReason::PackageRequest => {
                let d: stored::PackageRequest = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::PackageRequest {
                    package: d.package,
                    reason: d.reason,
                    arguments_hash: d.arguments_hash,
                }
            }
            WaitReason::Ask => {
                let d: stored::Ask = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::Ask {
                    question: d.question,
                }
            }
            WaitReason::McpAuthRequired => {
                let d: stored::McpAuth = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::McpAuthRequired { server: d.server }
            }
            WaitReason::SideEffectUnknown => {
                let d: stored::SideEffect = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::SideEffectUnknown {
                    operation_id: d.operation_id,
                    tool: d.tool,
                    arguments: d.arguments,
                }
            }
            WaitReason::Subtask => {
                let d: stored::Subtask = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::Subtask {
                    subtask_id: d.subtask_id,
                    instruction: d.instruction,
                    piece: d.piece,
                }
            }
            WaitReason::Browser => {
                return Err(BadDetail {
                    kind,
                    reason: "browser items are not recorded".to_owned(),
                });
            }
        })
    }

    /// The JSON stored in the `detail` column.
    pub fn to_value(&self) -> Value {
        // Plain data: serializing it cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The hash of the arguments a reviewer approves (tool and package requests).
    pub fn arguments_hash(&self) -> Option<&str> {
        match self {
            ActionDetail::ToolRequest { arguments_hash, .. }
            | ActionDetail::PackageRequest { arguments_hash, .. } => Some(arguments_hash),
            _ => None,
        }
    }

    /// The child task a `subtask` item waits for.
    pub fn subtask(&self) -> Option<TaskId> {
        match self {
            ActionDetail::Subtask { subtask_id, .. } => Some(*subtask_id),
            _ => None,
        }
    }
}

/// An item a job waits for (or waited for), as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    pub id: ActionId,
    pub task_id: TaskId,
    pub job_id: JobId,
    pub status: ActionStatus,
    /// Unique within the job: the call's place (`<movement>/<iteration>/<call id>`),
    /// `mcp:<server>` or `op:<operation>:<attempt>`.
    pub key: String,
    pub movement: String,
    /// `seq` of the event that proposed it (the assistant message with the call).
    pub source_seq: Option<i64>,
    pub detail: ActionDetail,
    pub decision: Option<Decision>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

impl Action {
    pub fn kind(&self) -> WaitReason {
        self.detail.kind()
    }

    /// Answered: by a person, or (a subtask) by its child.
    pub fn is_decided(&self) -> bool {
        self.status.is_decided()
    }

    /// The verdict, once decided.
    pub fn verdict(&self) -> Option<&Verdict> {
        self.decision
            .as_ref()
            .filter(|_| self.is_decided())
            .map(|d| &d.verdict)
    }

    /// The summary carried by the pause event and the notification: `{id, kind, movement,
    /// source_seq, ...detail}`.
    pub fn summary(&self) -> Value {
        let mut summary = serde_json::json!({
            "id": self.id,
            "kind": self.kind(),
            "movement": self.movement,
            "source_seq": self.source_seq,
        });
        if let (Some(summary), Value::Object(detail)) =
            (summary.as_object_mut(), self.detail.to_value())
        {
            summary.extend(detail);
        }
        summary
    }
}

/// An item to record for a job about to pause.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAction {
    /// Unique within the job (see [`Action::key`]).
    pub key: String,
    pub movement: String,
    pub source_seq: Option<i64>,
    pub detail: ActionDetail,
}

impl NewAction {
    pub fn kind(&self) -> WaitReason {
        self.detail.kind()
    }
}

/// The items of a paused job still pending, by who answers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outstanding {
    /// Items a person answers.
    pub people: usize,
    /// `subtask` items, answered by their children.
    pub children: usize,
}

impl Outstanding {
    /// What the job becomes once an item is decided: still waiting for a person while any
    /// person's item is pending, else for its children, else queued again to resume.
    pub fn next_status(self) -> JobStatus {
        if self.people > 0 {
            JobStatus::WaitingHuman
        } else if self.children > 0 {
            JobStatus::WaitingSubtasks
        } else {
            JobStatus::Queued
        }
    }

    /// Why the job's state changed with a decision (`None`: it did not).
    pub fn change_reason(self) -> Option<&'static str> {
        match self.next_status() {
            JobStatus::Queued => Some("every item the job waited for is decided"),
            JobStatus::WaitingSubtasks => {
                Some("every person's item is decided; subtasks are still running")
            }
            _ => None,
        }
    }
}

/// What a pause waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseFor {
    /// A person (`waiting_human` with this reason).
    Human(WaitReason),
    /// Its subtasks (`waiting_subtasks`).
    Subtasks,
    /// Nothing is left to wait for: the pause must not happen.
    Nothing,
}

impl PauseFor {
    /// What a job pausing for `requested` waits for, given the kinds of the items still
    /// pending once they are recorded and whether it started subtasks: the requested kind
    /// while such an item is pending, else the first pending person's kind, else its
    /// subtasks (which may all be over: the join then resumes it at once), else nothing.
    pub fn choose(requested: WaitReason, pending: &[WaitReason], subtasks: bool) -> PauseFor {
        let people: Vec<WaitReason> = pending.iter().copied().filter(|k| k.is_human()).collect();
        if people.contains(&requested) {
            PauseFor::Human(requested)
        } else if let Some(first) = people.first() {
            PauseFor::Human(*first)
        } else if subtasks || requested == WaitReason::Subtask {
            PauseFor::Subtasks
        } else {
            PauseFor::Nothing
        }
    }

    /// The job's status and wait reason for this pause.
    pub fn job_state(self) -> Option<(JobStatus, Option<WaitReason>)> {
        match self {
            PauseFor::Human(reason) => Some((JobStatus::WaitingHuman, Some(reason))),
            PauseFor::Subtasks => Some((JobStatus::WaitingSubtasks, None)),
            PauseFor::Nothing => None,
        }
    }
}

/// The reason a pause over these items is reported under: a tool request first, else any
/// person's kind, else subtasks.
pub fn wait_reason_of(kinds: &[WaitReason]) -> WaitReason {
    let find = |wanted: fn(&WaitReason) -> bool| kinds.iter().copied().find(wanted);
    find(|k| *k == WaitReason::ToolRequest)
        .or_else(|| find(|k| k.is_human()))
        .unwrap_or(WaitReason::Subtask)
}

/// Where a comment on a task goes, by its latest job's state (SPEC §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentRoute {
    /// Into the job's conversation at its next step.
    Interjection,
    /// It answers the job's question: a follow-up job resumes in the asking movement.
    Answer,
    /// A new job that carries the comment (the latest is over, or there is none).
    FollowUp,
    /// Refused: the job waits for a decision of this kind first.
    DecideFirst(Option<WaitReason>),
}

/// Route a comment by the latest job's status and wait reason (`None`: the task has no job).
pub fn route_comment(latest: Option<(JobStatus, Option<WaitReason>)>) -> CommentRoute {
    match latest {
        Some((
            JobStatus::Queued | JobStatus::Running | JobStatus::Retry | JobStatus::WaitingSubtasks,
            _,
        )) => CommentRoute::Interjection,
        Some((JobStatus::WaitingHuman, Some(WaitReason::Ask))) => CommentRoute::Answer,
        Some((JobStatus::WaitingHuman, reason)) => CommentRoute::DecideFirst(reason),
        Some((JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled, _)) | None => {
            CommentRoute::FollowUp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn statuses_round_trip_and_only_answers_count_as_decided() {
        for status in ActionStatus::ALL {
            assert_eq!(status.as_str().parse::<ActionStatus>(), Ok(status));
            assert_eq!(
                serde_json::to_value(status).expect("json"),
                json!(status.as_str())
            );
        }
        assert!(!ActionStatus::Pending.is_decided());
        assert!(!ActionStatus::Superseded.is_decided(), "nobody's answer");
        assert!(ActionStatus::Resolved.is_decided());
        assert!("done".parse::<ActionStatus>().is_err());
    }

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

    #[test]
    fn details_are_read_by_kind_and_shown_flat() {
        let tool = json!({"tool": "write_file", "arguments": {"path": "a"}, "arguments_hash": "h", "reason": "r"});
        let detail = ActionDetail::parse(WaitReason::ToolRequest, tool.clone()).expect("tool");
        assert_eq!(detail.kind(), WaitReason::ToolRequest);
        assert_eq!(detail.to_value(), tool, "stored as it came");
        assert_eq!(detail.arguments_hash(), Some("h"));
        let child = TaskId::new();
        let subtask = json!({"subtask_id": child, "instruction": "i", "piece": "chat"});
        let detail = ActionDetail::parse(WaitReason::Subtask, subtask).expect("subtask");
        assert_eq!(detail.subtask(), Some(child));
        assert!(ActionDetail::parse(WaitReason::Ask, json!({"server": "x"})).is_err());
        assert!(ActionDetail::parse(WaitReason::Browser, json!({})).is_err());
    }

    #[test]
    fn the_next_status_follows_what_is_still_pending() {
        let table = [
            ((0, 0), JobStatus::Queued),
            ((1, 0), JobStatus::WaitingHuman),
            ((1, 2), JobStatus::WaitingHuman),
            ((0, 2), JobStatus::WaitingSubtasks),
        ];
        for ((people, children), expected) in table {
            let outstanding = Outstanding { people, children };
            assert_eq!(outstanding.next_status(), expected, "{outstanding:?}");
        }
        assert!(
            Outstanding {
                people: 1,
                children: 0
            }
            .change_reason()
            .is_none()
        );
    }

    #[test]
    fn a_pause_waits_for_the_requested_kind_then_people_then_children() {
        use WaitReason::*;
        let table: &[(WaitReason, &[WaitReason], bool, PauseFor)] = &[
            (
                ToolRequest,
                &[ToolRequest, PackageRequest],
                false,
                PauseFor::Human(ToolRequest),
            ),
            (
                ToolRequest,
                &[PackageRequest],
                false,
                PauseFor::Human(PackageRequest),
            ),
            (
                ToolRequest,
                &[Subtask, PackageRequest],
                true,
                PauseFor::Human(PackageRequest),
            ),
            (Subtask, &[Subtask], true, PauseFor::Subtasks),
            (Subtask, &[], true, PauseFor::Subtasks),
            (ToolRequest, &[], true, PauseFor::Subtasks),
            (ToolRequest, &[], false, PauseFor::Nothing),
        ];
        for (requested, pending, subtasks, expected) in table {
            assert_eq!(
                PauseFor::choose(*requested, pending, *subtasks),
                *expected,
                "{requested} {pending:?} {subtasks}"
            );
        }
        assert_eq!(
            wait_reason_of(&[Subtask, PackageRequest, ToolRequest]),
            ToolRequest
        );
        assert_eq!(wait_reason_of(&[Subtask, Ask]), Ask);
        assert_eq!(wait_reason_of(&[Subtask]), Subtask);
    }

    #[test]
    fn comments_are_routed_by_the_latest_job() {
        use JobStatus::*;
        let table = [
            (Some((Running, None)), CommentRoute::Interjection),
            (Some((Queued, None)), CommentRoute::Interjection),
            (Some((Retry, None)), CommentRoute::Interjection),
            (Some((WaitingSubtasks, None)), CommentRoute::Interjection),
            (
                Some((WaitingHuman, Some(WaitReason::Ask))),
                CommentRoute::Answer,
            ),
            (
                Some((WaitingHuman, Some(WaitReason::ToolRequest))),
                CommentRoute::DecideFirst(Some(WaitReason::ToolRequest)),
            ),
            (
                Some((WaitingHuman, Some(WaitReason::SideEffectUnknown))),
                CommentRoute::DecideFirst(Some(WaitReason::SideEffectUnknown)),
            ),
            (Some((Succeeded, None)), CommentRoute::FollowUp),
            (Some((Failed, None)), CommentRoute::FollowUp),
            (Some((Cancelled, None)), CommentRoute::FollowUp),
            (None, CommentRoute::FollowUp),
        ];
        for (latest, expected) in table {
            assert_eq!(route_comment(latest), expected, "{latest:?}");
        }
    }
}
