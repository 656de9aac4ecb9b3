//! Reading a task's story in tests: its job's state, the statuses it went through, its tool
//! results, the events of one kind.

use maestro_api::Task;
use maestro_domain::{Event, EventKind, JobRecord};

/// A task's latest job (every task a test made has one).
pub trait TaskExt {
    fn job(&self) -> &JobRecord;
}

impl TaskExt for Task {
    fn job(&self) -> &JobRecord {
        self.task
            .latest_job
            .as_ref()
            .unwrap_or_else(|| panic!("task {} has no job", self.id()))
    }
}

/// The events of one kind.
pub fn of_kind(events: &[Event], kind: EventKind) -> impl Iterator<Item = &Event> {
    events.iter().filter(move |e| e.kind == kind)
}

/// The statuses the task's jobs went through, in order (`job_state` events).
pub fn job_states(events: &[Event]) -> Vec<String> {
    of_kind(events, EventKind::JobState)
        .map(|e| e.payload["status"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The first `job_state` event that moved the job to `status` (`retry`, `waiting_human`...).
pub fn state_change<'a>(events: &'a [Event], status: &str) -> &'a Event {
    of_kind(events, EventKind::JobState)
        .find(|e| e.payload["status"] == status)
        .unwrap_or_else(|| panic!("no {status} event among {events:#?}"))
}

/// Every tool result: `(content, is_error)`.
pub fn tool_results(events: &[Event]) -> Vec<(String, bool)> {
    of_kind(events, EventKind::ToolResult)
        .map(|e| {
            let content = e.payload["content"].as_str().unwrap_or_default().to_owned();
            (content, e.payload["is_error"] == true)
        })
        .collect()
}
