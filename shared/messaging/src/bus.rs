//! The NATS side of a service, and the one place where what follows a commit happens: waking
//! the outbox relay (which publishes events, notifications and signals) or publishing the
//! commit's events directly ([`Bus::publish_direct`]), dispatching jobs,
//! waking the subtask join and the schedulers, and stopping a cancelled job's tools. A writer
//! commits, then hands an [`AfterCommit`] to [`Bus::after_commit`].
//!
//! Everything here announces a fact that is already committed, so a lost message costs
//! latency only: the relay polls, the re-dispatcher sends a `queued` job again, the join
//! polls, a cancelled job's worker is fenced at its next write, and a running job looks for
//! interjections on its own. Signals to running jobs (a comment, a cancel) are outbox rows
//! written with the change (`<p>.signals.<task>.<kind>`, docs/architecture.md#signals).

use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::context::PublishAckFuture;
use bytes::Bytes;
use maestro_domain::{JobId, TaskId};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::Subjects;
use crate::payloads::{JobDispatch, ToolsCancel};

/// How long a writer gathers the keys of the rows it published itself before it tells the
/// relay: one `<p>.outbox.published` message per window instead of one per commit (three per
/// job, each waking nats-server and the relay). Far inside the relay's grace for such rows
/// (`maestro_db::outbox::DIRECT_GRACE`, 2 s), and the relay gathers its deletes for 100 ms
/// anyway.
const PUBLISHED_WINDOW: Duration = Duration::from_millis(25);
/// A window's message is sent early once its keys reach this many bytes.
const PUBLISHED_MAX_BYTES: usize = 64 * 1024;

/// How long [`Bus::finish`] waits at the most: the relay's grace for rows their writer
/// publishes (`maestro_db::outbox::DIRECT_GRACE`), past which it publishes them anyway.
const FINISH_WITHIN: Duration = Duration::from_secs(2);

/// A service's connection to NATS and JetStream, with its deployment's subjects.
#[derive(Debug, Clone)]
pub struct Bus {
    pub nats: async_nats::Client,
    pub js: jetstream::Context,
    pub subjects: Subjects,
    published: Published,
}

/// What must follow a commit. Build it next to the write it follows, then hand it to
/// [`Bus::after_commit`] once the transaction has committed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "hand it to Bus::after_commit once the write has committed"]
pub struct AfterCommit {
    outbox: bool,
    dispatch: Vec<(String, JobDispatch)>,
    joiner: bool,
    schedules: bool,
    stop: Vec<JobId>,
}

impl AfterCommit {
    /// Nothing (yet).
    pub fn none() -> Self {
        Self::default()
    }

    /// The commit wrote outbox rows (every event has one): the relay drains now.
    pub fn events() -> Self {
        Self {
            outbox: true,
            ..Self::default()
        }
    }

    /// The commit queued a new job of task `task_id` (with its events): the relay drains and
    /// the job is dispatched to the workers of the default profile.
    pub fn new_job(profile: &str, task_id: TaskId, job_id: JobId) -> Self {
        Self::events().dispatch(profile, JobDispatch::new_job(task_id, job_id))
    }

    /// Dispatch a job the commit queued to the workers of `profile`.
    pub fn dispatch(mut self, profile: &str, dispatch: JobDispatch) -> Self {
        self.dispatch.push((profile.to_owned(), dispatch));
        self
    }

    /// A subtask's job may be over, or a parent began to wait for its subtasks: the join runs.
    pub fn wake_joiner(mut self) -> Self {
        self.joiner = true;
        self
    }

    /// A schedule was created or changed: the schedulers look at their next due time again.
    pub fn wake_schedulers(mut self) -> Self {
        self.schedules = true;
        self
    }

    /// The job was cancelled: its worker stops (on the `cancel` signal the commit wrote to the
    /// outbox), and the tool-runners kill its tools.
    pub fn stop(mut self, job_id: JobId) -> Self {
        self.outbox = true;
        self.stop.push(job_id);
        self
    }

    /// A comment waits for the job: the relay publishes its `comment` signal now.
    pub fn interjection(mut self, _job_id: JobId) -> Self {
        self.outbox = true;
        self
    }

    /// Both this and `other`.
    pub fn and(mut self, other: AfterCommit) -> Self {
        self.outbox |= other.outbox;
        self.dispatch.extend(other.dispatch);
        self.joiner |= other.joiner;
        self.schedules |= other.schedules;
        self.stop.extend(other.stop);
        self
    }

    /// The jobs it dispatches.
    pub fn dispatches(&self) -> impl Iterator<Item = &JobDispatch> {
        self.dispatch.iter().map(|(_, d)| d)
    }
}

impl Bus {
    /// The bus of a service connected by `nats`. Starts the task that tells the outbox relay
    /// which rows this process published itself, so it must be called on a Tokio runtime.
    pub fn new(nats: async_nats::Client, subjects: Subjects) -> Self {
        let published = Published::start(nats.clone(), subjects.outbox_published());
        Self {
            js: jetstream::new(nats.clone()),
            nats,
            subjects,
            published,
        }
    }

    /// Do what follows a commit (best effort; see the module's documentation).
    pub async fn after_commit(&self, after: AfterCommit) {
        if after.outbox {
            self.signal(
                self.subjects.outbox_wake(),
                Bytes::new(),
                "the outbox relay",
            )
            .await;
        }
        for (profile, dispatch) in &after.dispatch {
            self.send_dispatch(profile, dispatch).await;
        }
        if after.joiner {
            self.signal(
                self.subjects.subtasks_wake(),
                Bytes::new(),
                "the subtask join",
            )
            .await;
        }
        if after.schedules {
            self.signal(
                self.subjects.schedules_wake(),
                Bytes::new(),
                "the schedulers",
            )
            .await;
        }
        for job_id in after.stop {
            let cancel = json_bytes(&ToolsCancel { job_id });
            self.signal(self.subjects.tools_cancel(), cancel, "the tool-runners")
                .await;
        }
    }

    /// Publish the events the commit just made that their writer publishes itself (the job
    /// path's: `maestro_db::jobs::Publish::Directly`), then tell the relay, by the keys of the
    /// outbox rows that stand for them, so it deletes those rows without publishing the
    /// events again. The messages are sent in order before this returns, so a writer's next
    /// commit cannot overtake them; the acknowledgements are awaited in the background, and
    /// the keys of the acknowledged rows go to the relay with the others of their
    /// [`PUBLISHED_WINDOW`]. Best effort: events not confirmed here are published by the relay
    /// once the grace of their row is over (a repeat is dropped by its `Nats-Msg-Id`).
    pub async fn publish_direct(&self, rows: Vec<maestro_domain::topic::Direct>) {
        if rows.is_empty() {
            return;
        }
        let mut acks = Vec::with_capacity(rows.len());
        let mut ids = String::new();
        for row in rows {
            let sent = self
                .send_row(
                    row.topic,
                    &row.msg_id,
                    row.traceparent.as_deref(),
                    row.a2a_push,
                    Bytes::from(row.payload),
                )
                .await;
            match sent {
                Ok(sent) => acks.extend(sent),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot publish committed events; the relay will");
                    return;
                }
            }
            if let Some(key) = &row.outbox_key {
                if !ids.is_empty() {
                    ids.push('\n');
                }
                ids.push_str(key);
            }
        }
        if ids.is_empty() {
            return;
        }
        let published = self.published.clone();
        self.published.acks.spawn(async move {
            for ack in acks {
                if let Err(e) = ack.await {
                    tracing::warn!(error = %e, "committed events not acknowledged; the relay will publish them");
                    return;
                }
            }
            published.add(ids);
        });
    }

    /// Send the message of an outbox row, whoever publishes it (the relay, or the writer that
    /// committed it), without waiting for the stream: on its topic's subject with
    /// [`crate::publish::headers_of_row`], and a job state event of a task with A2A push
    /// configs also as a copy on `<p>.webhooks.a2a_states`, the notifier's (`Nats-Msg-Id`
    /// `a2a:<msg_id>`). The acknowledgements to await.
    pub async fn send_row(
        &self,
        topic: maestro_domain::topic::Topic,
        msg_id: &str,
        traceparent: Option<&str>,
        a2a_push: bool,
        payload: Bytes,
    ) -> Result<Vec<PublishAckFuture>, crate::publish::PublishError> {
        let subject = self.subjects.of_topic(topic);
        let headers = crate::publish::headers_of_row(msg_id, traceparent, a2a_push);
        let mut acks = Vec::with_capacity(1 + usize::from(a2a_push));
        let copy = a2a_push.then(|| payload.clone());
        acks.push(crate::publish::start(&self.js, subject, headers, payload).await?);
        if let Some(copy) = copy {
            let headers =
                crate::publish::headers_of_row(&format!("a2a:{msg_id}"), traceparent, true);
            let to = self.subjects.a2a_states();
            acks.push(crate::publish::start(&self.js, to, headers, copy).await?);
        }
        Ok(acks)
    }

    /// Before the process ends (its work drained): wait, [`FINISH_WITHIN`] at the most, for the
    /// acknowledgements of the rows and dispatches it published itself, tell the relay of those
    /// rows now rather than at the end of their [`PUBLISHED_WINDOW`], and flush the connection.
    /// Without it, a graceful stop within a window leaves those rows to the relay's poll, which
    /// publishes them again after its grace (a repeat JetStream drops, a core-NATS subscriber
    /// sees).
    pub async fn finish(&self) {
        let finished = async {
            self.published.acks.close();
            self.published.acks.wait().await;
            let (done, told) = oneshot::channel();
            if self.published.notes.send(Note::Flush(done)).is_ok() {
                let _ = told.await;
            }
            self.nats.flush().await
        };
        match tokio::time::timeout(FINISH_WITHIN, finished).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot flush NATS before stopping"),
            Err(_) => tracing::warn!(
                within = ?FINISH_WITHIN,
                "the relay was not told of every published row before stopping; it publishes them again"
            ),
        }
    }

    /// Send a job's dispatch to the workers of `profile`, in order behind what this process
    /// sent before, and await the stream's acknowledgement in the background (on the tracker
    /// [`Bus::finish`] waits for): a writer's answer, such as the gateway's `201 Created`,
    /// does not wait for JetStream's store. Best effort, as it was when it waited: a dispatch
    /// the stream does not store is sent again by the scheduler's re-dispatch of jobs still
    /// `queued`, and a repeat is dropped by its `Nats-Msg-Id`.
    async fn send_dispatch(&self, profile: &str, dispatch: &JobDispatch) {
        let subject = self.subjects.dispatch(profile);
        let headers = crate::publish::headers(&dispatch.message_id());
        let job_id = dispatch.job_id;
        match crate::publish::start(&self.js, subject, headers, json_bytes(dispatch)).await {
            Ok(ack) => {
                self.published.acks.spawn(async move {
                    if let Err(e) = ack.await {
                        tracing::warn!(error = %e, %job_id, "dispatch not stored; the scheduler will send it again");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, %job_id, "dispatch not published; the scheduler will send it again");
            }
        }
    }

    /// A core NATS message, fire and forget.
    async fn signal(&self, subject: String, payload: Bytes, to: &str) {
        if let Err(e) = self.nats.publish(subject, payload).await {
            tracing::warn!(error = %e, "cannot signal {to}; it will find out on its own");
        }
    }
}

/// The keys of the outbox rows this process published itself, on their way to the relay,
/// and the tasks awaiting the acknowledgements of such rows and of its dispatches.
#[derive(Debug, Clone)]
struct Published {
    notes: mpsc::UnboundedSender<Note>,
    acks: TaskTracker,
}

#[derive(Debug)]
enum Note {
    /// Newline-separated keys whose rows' messages JetStream acknowledged.
    Keys(String),
    /// Send what is gathered now, then answer.
    Flush(oneshot::Sender<()>),
}

impl Published {
    fn start(nats: async_nats::Client, subject: String) -> Self {
        let (notes, gathered) = mpsc::unbounded_channel();
        tokio::spawn(tell_relay(nats, subject, gathered));
        Self {
            notes,
            acks: TaskTracker::new(),
        }
    }

    /// Newline-separated keys whose rows' messages JetStream acknowledged.
    fn add(&self, keys: String) {
        // The receiver lives as long as any sender: this cannot fail.
        let _ = self.notes.send(Note::Keys(keys));
    }
}

/// Send the keys on `subject`, one message per [`PUBLISHED_WINDOW`] from the first key of
/// each (sooner when [`Bus::finish`] asks), until every [`Bus`] of the process is gone. A
/// message lost here (the process dies within the window) leaves its rows to the relay's
/// poll, which publishes them again: the repeat is dropped by its `Nats-Msg-Id`.
async fn tell_relay(
    nats: async_nats::Client,
    subject: String,
    mut gathered: mpsc::UnboundedReceiver<Note>,
) {
    while let Some(note) = gathered.recv().await {
        let mut keys = match note {
            Note::Keys(keys) => keys,
            Note::Flush(done) => {
                let _ = done.send(());
                continue;
            }
        };
        let until = tokio::time::Instant::now() + PUBLISHED_WINDOW;
        let mut flushed = None;
        while keys.len() < PUBLISHED_MAX_BYTES {
            match tokio::time::timeout_at(until, gathered.recv()).await {
                Ok(Some(Note::Keys(more))) => {
                    keys.push('\n');
                    keys.push_str(&more);
                }
                Ok(Some(Note::Flush(done))) => {
                    flushed = Some(done);
                    break;
                }
                Ok(None) | Err(_) => break,
            }
        }
        if let Err(e) = nats.publish(subject.clone(), Bytes::from(keys)).await {
            tracing::warn!(error = %e, "cannot tell the relay what was published; it will publish it again");
        }
        if let Some(done) = flushed {
            let _ = done.send(());
        }
    }
}

fn json_bytes<T: serde::Serialize>(value: &T) -> Bytes {
    // Plain payload structs: serializing them cannot fail.
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use maestro_domain::TaskId;

    #[test]
    fn effects_add_up() {
        let job = JobDispatch {
            job_id: JobId::new(),
            task_id: TaskId::new(),
            attempt: 0,
            fresh: false,
            opening: None,
        };
        let after = AfterCommit::events()
            .dispatch("default", job.clone())
            .and(AfterCommit::none().wake_joiner());
        assert!(after.outbox && after.joiner);
        assert_eq!(after.dispatches().collect::<Vec<_>>(), [&job]);
        assert_eq!(AfterCommit::none(), AfterCommit::default());
    }
}
