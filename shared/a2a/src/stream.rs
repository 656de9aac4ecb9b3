//! A task's stream in A2A terms. MAESTRO's stream is its events in `seq` order with the live
//! text deltas of the reply being generated between them; this turns each into the A2A stream
//! events it means:
//!
//! - a state change whose A2A state differs from the last one sent → a `statusUpdate` (with the
//!   agent's message: a question, what it waits for, the result, the error), preceded on
//!   completion by the `result` artifact;
//! - a text delta → an `artifactUpdate` of the reply's artifact (`reply-<seq>`, the seq the
//!   reply follows), appending after the first chunk;
//! - an assistant message with text → its reply artifact whole (`lastChunk`), which replaces
//!   whatever chunks a client got (the artifact of the chunks just streamed; `reply-<seq of the
//!   message>` when none were).
//!
//! Everything else (tool calls and results, movements) is MAESTRO's own detail and is not sent.

use std::collections::HashSet;

use maestro_domain::event::JobStateChange;
use maestro_domain::{Event, EventKind, StreamId};

use crate::map::{reply_text, result_artifact, state_of_change, status_message};
use crate::types::{
    Artifact, Part, StreamResponse, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};

/// The A2A view of one task's stream, for one client.
#[derive(Debug, Clone)]
pub struct Renderer {
    task_id: String,
    context_id: String,
    /// The state the client knows.
    state: Option<TaskState>,
    /// Reply artifacts the client has chunks of.
    open: HashSet<String>,
    /// The reply being streamed (one at a time: a task runs one job).
    current: Option<String>,
}

impl Renderer {
    /// A renderer for a client that knows the task in `state` (from a snapshot), resuming
    /// after `cursor` (in the middle of a reply, the client has its first chunks).
    pub fn new(
        task_id: String,
        context_id: String,
        state: Option<TaskState>,
        cursor: StreamId,
    ) -> Self {
        let mut open = HashSet::new();
        let mut current = None;
        if cursor.is_delta() {
            open.insert(reply_id(cursor.seq));
            current = Some(reply_id(cursor.seq));
        }
        Self {
            task_id,
            context_id,
            state,
            open,
            current,
        }
    }

    /// The last state the client was sent.
    pub fn state(&self) -> Option<TaskState> {
        self.state
    }

    /// What a persisted event means to the client.
    pub fn event(&mut self, event: &Event) -> Vec<StreamResponse> {
        if let Some(text) = reply_text(event) {
            let id = self.current.take().unwrap_or_else(|| reply_id(event.seq));
            self.open.remove(&id);
            return vec![self.chunk(id, text, false, true)];
        }
        if event.kind != EventKind::JobState {
            return Vec::new();
        }
        let Ok(change) = serde_json::from_value::<JobStateChange>(event.payload.clone()) else {
            return Vec::new();
        };
        if change.followed_by.is_some() {
            // A job that hands the task to the next (an answered question): not an end.
            return Vec::new();
        }
        let state = state_of_change(&change);
        if self.state == Some(state) {
            return Vec::new();
        }
        self.state = Some(state);
        let mut items = Vec::new();
        if let Some(artifact) = result_artifact(state, change.result.as_deref()) {
            items.push(self.artifact(artifact, false, true));
        }
        items.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: TaskStatus {
                state,
                message: status_message(&self.task_id, &self.context_id, state, &change),
                timestamp: Some(event.created_at),
            },
            metadata: None,
        }));
        items
    }

    /// A text delta of the reply that follows event `after_seq`.
    pub fn text(&mut self, after_seq: i64, text: &str) -> Vec<StreamResponse> {
        if text.is_empty() {
            return Vec::new();
        }
        let id = reply_id(after_seq);
        let append = !self.open.insert(id.clone());
        self.current = Some(id.clone());
        vec![self.chunk(id, text, append, false)]
    }

    fn chunk(&self, id: String, text: &str, append: bool, last: bool) -> StreamResponse {
        let artifact = Artifact {
            artifact_id: id,
            name: Some("reply".to_owned()),
            description: None,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: Vec::new(),
        };
        self.artifact(artifact, append, last)
    }

    fn artifact(&self, artifact: Artifact, append: bool, last_chunk: bool) -> StreamResponse {
        StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            artifact,
            append,
            last_chunk,
            metadata: None,
        })
    }
}

/// The artifact of the reply that follows event `after_seq`.
fn reply_id(after_seq: i64) -> String {
    format!("reply-{after_seq}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use maestro_domain::{JobId, JobStatus, TaskId};
    use serde_json::json;

    fn event(seq: i64, kind: EventKind, payload: serde_json::Value) -> Event {
        Event {
            task_id: TaskId::new(),
            seq,
            job_id: JobId::new(),
            job_seq: seq as i32,
            kind,
            payload,
            created_at: chrono::Utc::now(),
        }
    }

    fn state(status: JobStatus) -> serde_json::Value {
        json!({"status": status, "attempt": 1, "result": "done"})
    }

    #[test]
    fn a_job_streams_as_status_updates_and_reply_chunks() {
        let mut renderer = Renderer::new("t".into(), "c".into(), None, StreamId::default());
        let running = renderer.event(&event(2, EventKind::JobState, state(JobStatus::Running)));
        assert!(
            matches!(&running[..], [StreamResponse::StatusUpdate(s)] if s.status.state == TaskState::Working)
        );
        let again = renderer.event(&event(3, EventKind::JobState, state(JobStatus::Running)));
        assert!(
            again.is_empty(),
            "a state the client knows is not sent again"
        );
        let first = renderer.text(3, "Hel");
        let second = renderer.text(3, "lo");
        let appends: Vec<bool> = [first, second]
            .iter()
            .map(|items| match &items[0] {
                StreamResponse::ArtifactUpdate(a) => a.append,
                _ => panic!("a chunk"),
            })
            .collect();
        assert_eq!(appends, [false, true]);
        let whole = renderer.event(&event(
            7,
            EventKind::Message,
            json!({"role": "assistant", "content": "Hello"}),
        ));
        match &whole[0] {
            StreamResponse::ArtifactUpdate(a) => {
                assert_eq!(a.artifact.artifact_id, "reply-3", "the chunks' artifact");
                assert_eq!(a.artifact.parts[0].text.as_deref(), Some("Hello"));
                assert!(
                    a.last_chunk && !a.append,
                    "the whole text replaces the chunks"
                );
            }
            other => panic!("{other:?}"),
        }
        let replayed = renderer.event(&event(
            9,
            EventKind::Message,
            json!({"role": "assistant", "content": "Bye"}),
        ));
        assert!(
            matches!(&replayed[0], StreamResponse::ArtifactUpdate(a) if a.artifact.artifact_id == "reply-9"),
            "a reply without chunks is its own artifact"
        );
        let done = renderer.event(&event(10, EventKind::JobState, state(JobStatus::Succeeded)));
        assert!(
            matches!(&done[0], StreamResponse::ArtifactUpdate(a) if a.artifact.artifact_id == "result")
        );
        assert!(
            matches!(&done[1], StreamResponse::StatusUpdate(s) if s.status.state == TaskState::Completed)
        );
    }

    #[test]
    fn an_answered_question_is_not_the_end_of_the_task() {
        let mut renderer = Renderer::new("t".into(), "c".into(), None, StreamId::default());
        let mut handed_on = state(JobStatus::Succeeded);
        handed_on["followed_by"] = json!(JobId::new());
        assert!(
            renderer
                .event(&event(5, EventKind::JobState, handed_on))
                .is_empty(),
            "no completion while the next job carries the task on"
        );
        let queued = renderer.event(&event(6, EventKind::JobState, state(JobStatus::Queued)));
        assert!(
            matches!(&queued[..], [StreamResponse::StatusUpdate(s)] if s.status.state == TaskState::Submitted)
        );
    }
}
