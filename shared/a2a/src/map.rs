//! MAESTRO seen as A2A: a task's latest job gives its state, its comments and the agent's
//! replies its history, its result its artifact (pure functions; the gateway loads the rows).
//!
//! | MAESTRO (latest job) | A2A state |
//! |---|---|
//! | `queued` | `TASK_STATE_SUBMITTED` |
//! | `running`, `retry`, `waiting_subtasks` | `TASK_STATE_WORKING` |
//! | `waiting_human` for an answer, a tool or package approval, a side effect's outcome | `TASK_STATE_INPUT_REQUIRED` |
//! | `waiting_human` for an MCP token (or a browser login) | `TASK_STATE_AUTH_REQUIRED` |
//! | `succeeded` | `TASK_STATE_COMPLETED` |
//! | `failed` | `TASK_STATE_FAILED` |
//! | `cancelled` | `TASK_STATE_CANCELED` |

use chrono::{DateTime, Utc};
use maestro_domain::event::JobStateChange;
use maestro_domain::{
    Comment, Event, EventKind, JobStatus, Role as DomainRole, TaskRecord, WaitReason,
};
use serde_json::Value;

use crate::types::{Artifact, Message, Part, Role, Task, TaskState, TaskStatus};

/// The artifact that holds a finished task's result.
pub const RESULT_ARTIFACT: &str = "result";

/// The A2A state of a task whose latest job is in `status` (waiting for `wait`).
pub fn state_of(status: JobStatus, wait: Option<WaitReason>) -> TaskState {
    match status {
        JobStatus::Queued => TaskState::Submitted,
        JobStatus::Running | JobStatus::Retry | JobStatus::WaitingSubtasks => TaskState::Working,
        JobStatus::WaitingHuman => match wait {
            Some(WaitReason::McpAuthRequired | WaitReason::Browser) => TaskState::AuthRequired,
            _ => TaskState::InputRequired,
        },
        JobStatus::Succeeded => TaskState::Completed,
        JobStatus::Failed => TaskState::Failed,
        JobStatus::Cancelled => TaskState::Canceled,
    }
}

/// The A2A state a job state change means: [`state_of`], except that a job the agent
/// declined (`complete` with status `decline`) is `rejected`.
pub fn state_of_change(change: &JobStateChange) -> TaskState {
    if declined(change) {
        TaskState::Rejected
    } else {
        state_of(change.status, change.wait_reason)
    }
}

fn declined(change: &JobStateChange) -> bool {
    change.status == JobStatus::Failed && change.reason.as_deref() == Some(JobStateChange::DECLINED)
}

/// Whether the task's latest job ended with a direct answer (`complete` with status
/// `reply`): A2A's `SendMessage` then answers with a message rather than the task.
pub fn replied(events: &[Event]) -> bool {
    latest_change(events).is_some_and(|c| {
        c.status == JobStatus::Succeeded && c.reason.as_deref() == Some(JobStateChange::REPLIED)
    })
}

/// Which latest jobs a state filter matches: their statuses, and for `waiting_human` the
/// wait reasons (`None`: any).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobFilter {
    pub statuses: Vec<JobStatus>,
    pub waiting_for: Option<Vec<WaitReason>>,
}

/// The latest jobs whose task is in `state` ([`state_of`] read backwards). A declined job is
/// `failed` in MAESTRO: `rejected` and `failed` select the same jobs.
pub fn jobs_in(state: TaskState) -> JobFilter {
    let mut filter = JobFilter::default();
    let state = match state {
        TaskState::Rejected => TaskState::Failed,
        other => other,
    };
    for status in JobStatus::ALL {
        if status == JobStatus::WaitingHuman {
            let reasons: Vec<WaitReason> = WaitReason::ALL
                .into_iter()
                .filter(|w| state_of(status, Some(*w)) == state)
                .collect();
            if !reasons.is_empty() {
                filter.statuses.push(status);
                filter.waiting_for = Some(reasons);
            }
        } else if state_of(status, None) == state {
            filter.statuses.push(status);
        }
    }
    filter
}

/// What a task view is made of.
#[derive(Debug, Clone, Copy)]
pub struct TaskParts<'a> {
    pub record: &'a TaskRecord,
    /// The task's context (its own id when nobody gave one).
    pub context_id: &'a str,
    /// The task's comments: the user's side of the history.
    pub comments: &'a [Comment],
    /// The task's events: the agent's replies and the latest state change.
    pub events: &'a [Event],
    /// The files its jobs wrote (workspace paths), and the URL they are served under
    /// (`<url><path>`).
    pub files: &'a [String],
    pub files_url: &'a str,
}

/// How much of a task to show.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shape {
    /// The last this many history messages (`None`: all, `Some(0)`: none).
    pub history_length: Option<usize>,
    pub include_artifacts: bool,
}

/// A task as A2A shows it.
pub fn task(parts: TaskParts<'_>, shape: Shape) -> Task {
    let record = parts.record;
    let id = record.id.to_string();
    let state = record
        .latest_job
        .as_ref()
        .map_or(TaskState::Submitted, |j| state_of(j.status, j.wait_reason));
    let change = latest_change(parts.events);
    let state = match &change {
        Some(c) if state == TaskState::Failed && declined(c) => TaskState::Rejected,
        _ => state,
    };
    let status = TaskStatus {
        state,
        message: change
            .as_ref()
            .and_then(|c| status_message(&id, parts.context_id, state, c)),
        timestamp: Some(record.updated_at),
    };
    let mut history = history(parts);
    if let Some(n) = shape.history_length {
        history.drain(..history.len().saturating_sub(n));
    }
    let artifacts = if shape.include_artifacts {
        let result = result_artifact(
            state,
            record.latest_job.as_ref().and_then(|j| j.result.as_deref()),
        );
        let files = parts
            .files
            .iter()
            .map(|path| file_artifact(parts.files_url, path));
        result.into_iter().chain(files).collect()
    } else {
        Vec::new()
    };
    Task {
        id,
        context_id: Some(parts.context_id.to_owned()),
        status,
        artifacts,
        history,
        metadata: None,
    }
}

/// A file a job wrote, as an artifact: `file:<path>`, one part served at `<files_url><path>`
/// (each path segment percent-encoded).
pub fn file_artifact(files_url: &str, path: &str) -> Artifact {
    let filename = path.rsplit('/').next().unwrap_or(path).to_owned();
    Artifact {
        artifact_id: format!("file:{path}"),
        name: Some(path.to_owned()),
        description: Some("A file the agent wrote in the task's workspace.".to_owned()),
        parts: vec![Part::file(
            format!("{files_url}{}", maestro_domain::tools::url_path(path)),
            filename,
            media_type(path),
        )],
        metadata: None,
        extensions: Vec::new(),
    }
}

/// The media type a file's name suggests (`application/octet-stream` when it says nothing).
pub fn media_type(path: &str) -> &'static str {
    let extension = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match extension.as_deref() {
        Some("txt" | "log") => "text/plain",
        Some("md" | "markdown") => "text/markdown",
        Some("html" | "htm") => "text/html",
        Some("css") => "text/css",
        Some("csv") => "text/csv",
        Some("json") => "application/json",
        Some("yaml" | "yml") => "application/yaml",
        Some("toml") => "application/toml",
        Some("xml") => "application/xml",
        Some("js" | "mjs") => "text/javascript",
        Some("py" | "rs" | "go" | "java" | "c" | "h" | "cpp" | "ts" | "sh" | "sql") => "text/plain",
        Some("pdf") => "application/pdf",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("svg") => "image/svg+xml",
        Some("zip") => "application/zip",
        _ => "application/octet-stream",
    }
}

/// The finished task's result, as its artifact.
/// A result that is a JSON object or array also comes as a data part, for clients that read
/// structure.
pub fn result_artifact(state: TaskState, result: Option<&str>) -> Option<Artifact> {
    let result = result.filter(|r| !r.is_empty())?;
    let mut parts = vec![Part::text(result)];
    if let Ok(data @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str(result) {
        parts.push(Part {
            media_type: Some("application/json".to_owned()),
            ..Part::data(data)
        });
    }
    (state == TaskState::Completed).then(|| Artifact {
        artifact_id: RESULT_ARTIFACT.to_owned(),
        name: Some("result".to_owned()),
        description: Some("What the agent reported when it completed the task.".to_owned()),
        parts,
        metadata: None,
        extensions: Vec::new(),
    })
}

/// The last state change among `events`.
fn latest_change(events: &[Event]) -> Option<JobStateChange> {
    events
        .iter()
        .rev()
        .find(|e| e.kind == EventKind::JobState)
        .and_then(|e| serde_json::from_value(e.payload.clone()).ok())
}

/// The agent's word on a state: the question or the items it waits for, the result, the
/// error. `None` while it works.
pub fn status_message(
    task_id: &str,
    context_id: &str,
    state: TaskState,
    change: &JobStateChange,
) -> Option<Message> {
    let mut parts = Vec::new();
    match state {
        TaskState::InputRequired | TaskState::AuthRequired => {
            parts.push(Part::text(waiting_text(change)));
            if !change.required_actions.is_empty() {
                parts.push(Part {
                    media_type: Some("application/json".to_owned()),
                    ..Part::data(serde_json::json!({"requiredActions": change.required_actions}))
                });
            }
        }
        TaskState::Completed => parts.push(Part::text(change.result.clone()?)),
        TaskState::Failed | TaskState::Canceled | TaskState::Rejected => {
            let why = change.error.clone().or_else(|| change.reason.clone())?;
            parts.push(Part::text(why));
        }
        _ => return None,
    }
    Some(Message {
        message_id: format!("status-{task_id}-{}-{}", change.attempt, state.name()),
        context_id: Some(context_id.to_owned()),
        task_id: Some(task_id.to_owned()),
        role: Role::Agent,
        parts,
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    })
}

/// What a paused job asks for, in words.
fn waiting_text(change: &JobStateChange) -> String {
    let question = change.required_actions.iter().find_map(|a| {
        (a["kind"] == "ask")
            .then(|| a["question"].as_str().map(str::to_owned))
            .flatten()
    });
    if let Some(question) = question {
        return question;
    }
    let items: Vec<String> = change
        .required_actions
        .iter()
        .map(|a| {
            let kind = a["kind"].as_str().unwrap_or("item");
            let what = a["tool"]
                .as_str()
                .or_else(|| a["package"]["name"].as_str())
                .or_else(|| a["server"].as_str())
                .unwrap_or_default();
            format!(
                "{kind} {what} (id {})",
                a["id"].as_str().unwrap_or_default()
            )
        })
        .collect();
    match change.wait_reason {
        Some(WaitReason::McpAuthRequired) => format!(
            "The agent needs a token for an MCP server: {}",
            items.join("; ")
        ),
        _ => format!(
            "The agent waits for a decision: {}. Answer with a data part {{\"decisions\": [{{\"requiredActionId\": \"<id>\", \"decision\": \"approve\" | \"deny\"}}]}}.",
            items.join("; ")
        ),
    }
}

/// The user's comments and the agent's replies, oldest first.
fn history(parts: TaskParts<'_>) -> Vec<Message> {
    let task_id = parts.record.id.to_string();
    let mut dated: Vec<(DateTime<Utc>, Message)> = Vec::new();
    for comment in parts.comments {
        let message_id = comment
            .message_id
            .clone()
            .unwrap_or_else(|| comment.id.to_string());
        dated.push((
            comment.created_at,
            message(
                &task_id,
                parts.context_id,
                message_id,
                Role::User,
                &comment.body,
            ),
        ));
    }
    for event in parts.events.iter().filter(|e| e.kind == EventKind::Message) {
        let reply = event.payload["role"] == "assistant";
        let text = event.payload["content"].as_str().unwrap_or_default();
        if reply && !text.trim().is_empty() {
            let id = format!("agent-{task_id}-{}", event.seq);
            dated.push((
                event.created_at,
                message(&task_id, parts.context_id, id, Role::Agent, text),
            ));
        }
    }
    dated.sort_by_key(|(at, _)| *at);
    dated.into_iter().map(|(_, m)| m).collect()
}

fn message(task_id: &str, context_id: &str, id: String, role: Role, text: &str) -> Message {
    Message {
        message_id: id,
        context_id: Some(context_id.to_owned()),
        task_id: Some(task_id.to_owned()),
        role,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    }
}

/// Whether a message event is an assistant's reply with text.
pub fn reply_text(event: &Event) -> Option<&str> {
    let message: Option<&Value> = (event.kind == EventKind::Message).then_some(&event.payload);
    let message = message?;
    (message["role"] == serde_json::json!(DomainRole::Assistant))
        .then(|| message["content"].as_str())
        .flatten()
        .filter(|t| !t.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_state_has_one_a2a_state_and_filters_read_it_backwards() {
        use JobStatus::*;
        let table = [
            (Queued, None, TaskState::Submitted),
            (Running, None, TaskState::Working),
            (Retry, None, TaskState::Working),
            (WaitingSubtasks, None, TaskState::Working),
            (
                WaitingHuman,
                Some(WaitReason::Ask),
                TaskState::InputRequired,
            ),
            (
                WaitingHuman,
                Some(WaitReason::ToolRequest),
                TaskState::InputRequired,
            ),
            (
                WaitingHuman,
                Some(WaitReason::SideEffectUnknown),
                TaskState::InputRequired,
            ),
            (
                WaitingHuman,
                Some(WaitReason::McpAuthRequired),
                TaskState::AuthRequired,
            ),
            (Succeeded, None, TaskState::Completed),
            (Failed, None, TaskState::Failed),
            (Cancelled, None, TaskState::Canceled),
        ];
        for (status, wait, state) in table {
            assert_eq!(state_of(status, wait), state, "{status:?} {wait:?}");
            let filter = jobs_in(state);
            assert!(filter.statuses.contains(&status), "{state:?}");
            if let (Some(wait), Some(reasons)) = (wait, &filter.waiting_for) {
                assert!(reasons.contains(&wait));
            }
        }
        assert_eq!(jobs_in(TaskState::Unspecified), JobFilter::default());
        assert_eq!(
            jobs_in(TaskState::AuthRequired).waiting_for,
            Some(vec![WaitReason::McpAuthRequired, WaitReason::Browser])
        );
    }

    #[test]
    fn a_question_is_the_status_message_with_the_items_as_data() {
        let mut change = JobStateChange::new(JobStatus::WaitingHuman, 1);
        change.wait_reason = Some(WaitReason::Ask);
        change.required_actions =
            vec![serde_json::json!({"id": "r1", "kind": "ask", "question": "Which colour?"})];
        let message =
            status_message("t", "c", TaskState::InputRequired, &change).expect("a message");
        assert_eq!(message.role, Role::Agent);
        assert_eq!(message.parts[0].text.as_deref(), Some("Which colour?"));
        assert_eq!(
            message.parts[1].data.as_ref().expect("data")["requiredActions"][0]["id"],
            "r1"
        );
        let working = JobStateChange::new(JobStatus::Running, 1);
        assert!(status_message("t", "c", TaskState::Working, &working).is_none());
    }

    #[test]
    fn a_declined_job_is_rejected_and_filters_find_it_among_the_failed() {
        let mut change = JobStateChange::new(JobStatus::Failed, 1);
        assert_eq!(state_of_change(&change), TaskState::Failed);
        change.reason = Some(JobStateChange::DECLINED.to_owned());
        change.error = Some("declined: not mine".to_owned());
        assert_eq!(state_of_change(&change), TaskState::Rejected);
        let message = status_message("t", "c", TaskState::Rejected, &change).expect("why");
        assert_eq!(message.parts[0].text.as_deref(), Some("declined: not mine"));
        assert_eq!(jobs_in(TaskState::Rejected), jobs_in(TaskState::Failed));
    }

    #[test]
    fn a_json_result_is_also_data_and_files_are_served_by_url() {
        let artifact =
            result_artifact(TaskState::Completed, Some(r#"{"key": "value"}"#)).expect("a result");
        assert_eq!(artifact.parts.len(), 2);
        assert_eq!(
            artifact.parts[1].data,
            Some(serde_json::json!({"key": "value"}))
        );
        let plain = result_artifact(TaskState::Completed, Some("42")).expect("a result");
        assert_eq!(plain.parts.len(), 1, "only objects and arrays are data");
        let file = file_artifact(
            "http://h/api/local/tasks/t/files/",
            "out dir/r\u{e9}sum\u{e9}.md",
        );
        assert_eq!(file.artifact_id, "file:out dir/r\u{e9}sum\u{e9}.md");
        let part = &file.parts[0];
        assert_eq!(
            part.url.as_deref(),
            Some("http://h/api/local/tasks/t/files/out%20dir/r%C3%A9sum%C3%A9.md")
        );
        assert_eq!(part.filename.as_deref(), Some("r\u{e9}sum\u{e9}.md"));
        assert_eq!(part.media_type.as_deref(), Some("text/markdown"));
    }
}
