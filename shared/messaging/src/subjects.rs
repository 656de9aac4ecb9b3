//! Subject and stream names. Everything is rooted at a prefix (default `maestro`) so that
//! several deployments, or several tests, can share one NATS server without seeing each
//! other's messages.
//!
//! | subject | carries |
//! |---|---|
//! | `<p>.jobs.dispatch.<profile>` | job dispatch (work queue, stream `<P>_JOBS`) |
//! | `<p>.workers.joined` | a worker has started: the others stop early first LLM calls if it serves one of their profiles (core NATS) |
//! | `<p>.workers.<worker_id>.handover` | a job dispatch's delivery, handed to the worker whose hint runs the job (core NATS, request/reply) |
//! | `<p>.jobs.<job_id>.control` | interject/cancel wake-ups for a running job (core NATS) |
//! | `<p>.outbox.wake` | a writer committed outbox rows: the relay drains (core NATS) |
//! | `<p>.outbox.published` | a writer published its own outbox rows: the relay deletes them (core NATS) |
//! | `<p>.subtasks.wake` | a child's job may be over: the subtask join runs (core NATS) |
//! | `<p>.events.<task_id>.<kind>` | persisted events, from the outbox or their writer (stream `<P>_EVENTS`) |
//! | `<p>.deltas.<task_id>.<job_id>.<after_seq>` | live message fragments (stream `<P>_DELTAS`, short retention) |
//! | `<p>.tools.exec` | tool execution, request/reply to the tool-runner (core NATS) |
//! | `<p>.tools.cancel` | stop a job's running tool calls (core NATS, every tool-runner) |
//! | `<p>.tools.mcp.list` | the tools of an MCP server, request/reply to the tool-runner |
//! | `<p>.tools.files.read` | one file of a workspace, request/reply to the tool-runner |
//! | `<p>.notify.<type>` | notifications such as `task.succeeded` (stream `<P>_NOTIFY`) |
//! | `<p>.webhooks.deliver` | webhook deliveries to attempt (work queue, stream `<P>_WEBHOOKS`) |
//! | `<p>.webhooks.a2a` | A2A push notification deliveries to attempt (same stream) |
//! | `<p>.webhooks.a2a_states` | job state events of tasks with A2A push configs, for the notifier to queue their pushes (same stream) |
//! | `<p>.a2a.rpc` | A2A JSON-RPC requests, request/reply to the gateway (core NATS) |

use maestro_domain::notification::NotificationType;
use maestro_domain::topic::{SignalKind, Topic};
use maestro_domain::{EventKind, JobId, TaskId};

/// Why a prefix was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a subject prefix is 1 to 32 characters of letters, digits, '-' and '_'")]
pub struct InvalidPrefix;

/// The subject and stream names of one deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    prefix: String,
}

impl Subjects {
    pub fn new(prefix: &str) -> Result<Self, InvalidPrefix> {
        let ok = !prefix.is_empty()
            && prefix.len() <= 32
            && prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if ok {
            Ok(Self {
                prefix: prefix.to_owned(),
            })
        } else {
            Err(InvalidPrefix)
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<p>.jobs.dispatch.<profile>`
    pub fn dispatch(&self, profile: &str) -> String {
        format!("{}.jobs.dispatch.{profile}", self.prefix)
    }

    /// `<p>.jobs.dispatch.>`
    pub fn dispatch_all(&self) -> String {
        format!("{}.jobs.dispatch.>", self.prefix)
    }

    /// `<p>.workers.<worker_id>.handover`: deliveries of jobs this worker's hints run, handed
    /// to it by the worker JetStream gave them to (request/reply). Characters of the id that
    /// cannot be in a subject token become `_`.
    pub fn handover(&self, worker_id: &str) -> String {
        format!("{}.workers.{}.handover", self.prefix, token(worker_id))
    }

    /// `<p>.workers.joined`: a starting worker says so (core NATS).
    pub fn workers_joined(&self) -> String {
        format!("{}.workers.joined", self.prefix)
    }

    /// `<p>.signals.<task_id>.<kind>`: a signal about a task (stream `<P>_SIGNALS`).
    pub fn signal(&self, task_id: TaskId, kind: SignalKind) -> String {
        format!("{}.signals.{task_id}.{}", self.prefix, kind.as_str())
    }

    /// `<p>.signals.*.*`: every signal (what a worker follows).
    pub fn signals_all(&self) -> String {
        format!("{}.signals.*.*", self.prefix)
    }

    /// `<p>.signals.requests`: programs on the bus send comments, decisions and cancels here
    /// (request/reply, answered by the gateways).
    pub fn signal_requests(&self) -> String {
        format!("{}.signals.requests", self.prefix)
    }

    /// The subject the outbox relay publishes a row of `topic` on.
    pub fn of_topic(&self, topic: Topic) -> String {
        match topic {
            Topic::Event { task_id, kind } => self.event(task_id, kind),
            Topic::Signal { task_id, kind } => self.signal(task_id, kind),
            Topic::Notification(kind) => self.notify(kind),
            Topic::WebhookDelivery => self.webhook_deliver(),
            Topic::A2aPush => self.a2a_push(),
        }
    }

    /// The prefix of event subjects, without the trailing dot: `<p>.events`. The outbox
    /// relay publishes each event on `<p>.events.<task_id>.<kind>`.
    pub fn events_root(&self) -> String {
        format!("{}.events", self.prefix)
    }

    /// `<p>.events.<task_id>.<kind>`
    pub fn event(&self, task_id: TaskId, kind: EventKind) -> String {
        format!("{}.events.{task_id}.{}", self.prefix, kind.as_str())
    }

    /// `<p>.events.<task_id>.>`: every event of one task.
    pub fn events_of_task(&self, task_id: TaskId) -> String {
        format!("{}.events.{task_id}.>", self.prefix)
    }

    /// `<p>.events.*.<kind>`: one kind of event of every task.
    pub fn events_of_kind(&self, kind: EventKind) -> String {
        format!("{}.events.*.{}", self.prefix, kind.as_str())
    }

    /// `<p>.deltas.<task_id>.<job_id>.<after_seq>`: the deltas of the message a job is
    /// generating after event `after_seq`.
    pub fn deltas(&self, task_id: TaskId, job_id: JobId, after_seq: i64) -> String {
        format!("{}.deltas.{task_id}.{job_id}.{after_seq}", self.prefix)
    }

    /// `<p>.deltas.<task_id>.>`: the deltas of every job of one task.
    pub fn deltas_of_task(&self, task_id: TaskId) -> String {
        format!("{}.deltas.{task_id}.>", self.prefix)
    }

    /// `<p>.deltas.<task_id>.*.<after_seq>`: the deltas that follow event `after_seq`.
    pub fn deltas_after(&self, task_id: TaskId, after_seq: i64) -> String {
        format!("{}.deltas.{task_id}.*.{after_seq}", self.prefix)
    }

    /// `<p>.tools.exec`
    pub fn tools_exec(&self) -> String {
        format!("{}.tools.exec", self.prefix)
    }

    /// `<p>.tools.mcp.list`: the tools of an MCP server (request/reply).
    pub fn mcp_list(&self) -> String {
        format!("{}.tools.mcp.list", self.prefix)
    }

    /// `<p>.tools.mcp.changed` (core NATS): an MCP server told a tool-runner its tool list
    /// changed; the payload is the server's name. Workers list it again.
    pub fn mcp_changed(&self) -> String {
        format!("{}.tools.mcp.changed", self.prefix)
    }

    /// `<p>.outbox.wake` (core NATS): a writer committed outbox rows; the relay drains now.
    pub fn outbox_wake(&self) -> String {
        format!("{}.outbox.wake", self.prefix)
    }

    /// `<p>.outbox.published` (core NATS): a writer published outbox rows itself (their
    /// `msg_id`s, one per line); the relay deletes them.
    pub fn outbox_published(&self) -> String {
        format!("{}.outbox.published", self.prefix)
    }

    /// `<p>.subtasks.wake` (core NATS): a child task's job may be over, or a parent began to
    /// wait; the scheduler's subtask join runs now.
    pub fn subtasks_wake(&self) -> String {
        format!("{}.subtasks.wake", self.prefix)
    }

    /// `<p>.schedules.wake` (core NATS): a schedule was created or changed; the schedulers
    /// look again at when the next one is due.
    pub fn schedules_wake(&self) -> String {
        format!("{}.schedules.wake", self.prefix)
    }

    /// `<p>.tools.cancel`: `{"job_id": ...}` stops every tool call of the job.
    pub fn tools_cancel(&self) -> String {
        format!("{}.tools.cancel", self.prefix)
    }

    /// `<p>.notify.<type>`, e.g. `maestro.notify.task.succeeded`.
    pub fn notify(&self, kind: NotificationType) -> String {
        format!("{}.notify.{}", self.prefix, kind.as_str())
    }

    /// `<p>.webhooks.deliver`
    pub fn webhook_deliver(&self) -> String {
        format!("{}.webhooks.deliver", self.prefix)
    }

    /// `<p>.tools.git`: a space's persistent workspace (request/reply to the tool-runner).
    pub fn tools_git(&self) -> String {
        format!("{}.tools.git", self.prefix)
    }

    /// `<p>.tools.files.read`: one file of a workspace, request/reply to the tool-runner.
    pub fn files_read(&self) -> String {
        format!("{}.tools.files.read", self.prefix)
    }

    /// `<p>.a2a.rpc`: A2A JSON-RPC over NATS request/reply, answered by the gateway.
    pub fn a2a_rpc(&self) -> String {
        format!("{}.a2a.rpc", self.prefix)
    }

    /// `<p>.webhooks.a2a`: A2A push notification deliveries to attempt.
    pub fn a2a_push(&self) -> String {
        format!("{}.webhooks.a2a", self.prefix)
    }

    /// `<p>.webhooks.a2a_states`: a copy of each `job_state` event of a task with A2A push
    /// configs, published beside the event, so the notifier hears only those.
    pub fn a2a_states(&self) -> String {
        format!("{}.webhooks.a2a_states", self.prefix)
    }

    /// Stream name for a role: `MAESTRO_JOBS`, `MAESTRO_EVENTS`, ...
    pub fn stream(&self, role: &str) -> String {
        let prefix: String = self
            .prefix
            .chars()
            .map(|c| {
                if c == '-' {
                    '_'
                } else {
                    c.to_ascii_uppercase()
                }
            })
            .collect();
        format!("{prefix}_{role}")
    }
}

/// `text` as one subject token: every character but letters, digits, `-` and `_` becomes `_`.
pub(crate) fn token(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_rooted_at_the_prefix() {
        let s = Subjects::new("t-1").expect("prefix");
        let task = TaskId::new();
        assert_eq!(s.dispatch("default"), "t-1.jobs.dispatch.default");
        assert_eq!(
            s.event(task, EventKind::JobState),
            format!("t-1.events.{task}.job_state")
        );
        assert_eq!(
            s.events_of_kind(EventKind::JobState),
            "t-1.events.*.job_state"
        );
        assert_eq!(
            s.notify(NotificationType::TaskSucceeded),
            "t-1.notify.task.succeeded"
        );
        assert_eq!(s.stream("JOBS"), "T_1_JOBS");
        assert_eq!(
            s.handover("worker-host.example:7 b>*"),
            "t-1.workers.worker-host_example_7_b__.handover"
        );
        assert_eq!(s.workers_joined(), "t-1.workers.joined");
    }

    #[test]
    fn signal_subjects_name_their_task_and_topics_their_subject() {
        let s = Subjects::new("t-1").expect("prefix");
        let task = TaskId::new();
        let cancel = Topic::Signal {
            task_id: task,
            kind: SignalKind::Cancel,
        };
        assert_eq!(s.of_topic(cancel), format!("t-1.signals.{task}.cancel"));
        assert_eq!(s.signals_all(), "t-1.signals.*.*");
        assert_eq!(s.signal_requests(), "t-1.signals.requests");
        let event = Topic::Event {
            task_id: task,
            kind: EventKind::Decision,
        };
        assert_eq!(s.of_topic(event), s.event(task, EventKind::Decision));
        assert_eq!(
            s.of_topic(Topic::Notification(NotificationType::TaskFailed)),
            "t-1.notify.task.failed"
        );
        assert_eq!(s.of_topic(Topic::WebhookDelivery), "t-1.webhooks.deliver");
        assert_eq!(s.of_topic(Topic::A2aPush), "t-1.webhooks.a2a");
    }

    #[test]
    fn prefixes_that_would_break_subjects_are_refused() {
        for bad in ["", "a.b", "a b", "a*", "a>", &"x".repeat(33)] {
            assert_eq!(Subjects::new(bad), Err(InvalidPrefix), "{bad:?}");
        }
    }
}
