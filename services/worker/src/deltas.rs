//! Publishing live deltas of the message being generated. Each delta gets the stream id
//! `<after_seq>.<n>` (see `maestro_domain::StreamId`). It is a plain (core) publish: live
//! subscribers get it at once, and the deltas stream, which captures the subject, keeps it for
//! a short retention so reconnecting clients can catch up, without the worker waiting for a
//! JetStream acknowledgement per fragment. Deltas are best-effort: the merged message event is
//! the durable record. They carry no `Nats-Msg-Id`: each is published once, with its id in
//! the payload, so the stream has nothing to de-duplicate (and no id to remember per
//! fragment, hundreds of them per turn with a real model).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use bytes::Bytes;
use maestro_domain::{JobId, StreamId, TaskId};
use maestro_messaging::payloads::{Delta, DeltaFragment};

/// Numbers and publishes the deltas of one job.
pub struct DeltaPublisher {
    nats: async_nats::Client,
    subjects: maestro_messaging::Subjects,
    task_id: TaskId,
    job_id: JobId,
    /// Task-wide seq of the job's last committed event, moved on by the commit that wrote it
    /// before it publishes its events — on a task of its own while a reply may stream — so a
    /// delta published after them follows them.
    committed: Arc<AtomicI64>,
    after_seq: i64,
    n: u64,
    /// Deltas held back while the results of the turn before wait to be committed (the seq
    /// of the last commit when holding began, and the fragments): a delta published before
    /// that commit would follow the same event as the turn before's, its text read as theirs.
    held: Option<(i64, Vec<DeltaFragment>)>,
}

impl std::fmt::Debug for DeltaPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaPublisher")
            .field("job_id", &self.job_id)
            .field("after_seq", &self.after_seq)
            .field("n", &self.n)
            .finish()
    }
}

impl DeltaPublisher {
    pub fn new(
        nats: async_nats::Client,
        subjects: maestro_messaging::Subjects,
        task_id: TaskId,
        job_id: JobId,
        after_seq: i64,
    ) -> Self {
        Self {
            nats,
            subjects,
            task_id,
            job_id,
            committed: Arc::new(AtomicI64::new(after_seq)),
            after_seq,
            n: 0,
            held: None,
        }
    }

    /// Hold the deltas back until the job's next commit is written: its results wait to be
    /// committed with the reply these deltas are of.
    pub fn hold(&mut self) {
        if self.held.is_none() {
            self.held = Some((self.committed.load(Ordering::Acquire), Vec::new()));
        }
    }

    /// The results were committed: publish what was held, after their events.
    pub async fn release(&mut self) {
        if let Some((_, held)) = self.held.take() {
            for fragment in held {
                self.emit(fragment).await;
            }
        }
    }

    /// The reply ended before the results were committed, and they are committed with it: its
    /// message comes whole, and the deltas held are dropped.
    pub fn drop_held(&mut self) {
        self.held = None;
    }

    /// Where the commits of the job set the seq of their last event.
    pub fn committed_seq(&self) -> Arc<AtomicI64> {
        self.committed.clone()
    }

    pub async fn publish(&mut self, fragment: DeltaFragment) {
        if let Some((since, held)) = &mut self.held {
            if self.committed.load(Ordering::Acquire) == *since {
                held.push(fragment);
                return;
            }
            self.release().await;
        }
        self.emit(fragment).await;
    }

    async fn emit(&mut self, fragment: DeltaFragment) {
        let committed = self.committed.load(Ordering::Acquire);
        if committed != self.after_seq {
            // A new event was committed: later deltas follow it.
            self.after_seq = committed;
            self.n = 0;
        }
        self.n += 1;
        let id = StreamId::delta(self.after_seq, self.n).to_string();
        let delta = Delta {
            id,
            task_id: self.task_id,
            job_id: self.job_id,
            fragment,
        };
        let Ok(payload) = serde_json::to_vec(&delta) else {
            return;
        };
        let subject = self
            .subjects
            .deltas(self.task_id, self.job_id, self.after_seq);
        if let Err(e) = self.nats.publish(subject, Bytes::from(payload)).await {
            tracing::warn!(error = %e, "cannot publish a delta");
        }
    }
}
