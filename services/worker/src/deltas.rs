//! Publishing live deltas of the message being generated. Each delta gets the stream id
//! `<after_seq>.<n>` (see `maestro_domain::StreamId`). It is a plain (core) publish: live
//! subscribers get it at once, and the deltas stream, which captures the subject, keeps it for
//! a short retention so reconnecting clients can catch up, without the worker waiting for a
//! JetStream acknowledgement per fragment. Deltas are best-effort: the merged message event is
//! the durable record. They carry no `Nats-Msg-Id`: each is published once, with its id in
//! the payload, so the stream has nothing to de-duplicate (and no id to remember per
//! fragment, hundreds of them per turn with a real model).

use bytes::Bytes;
use maestro_domain::{JobId, StreamId, TaskId};
use maestro_messaging::payloads::{Delta, DeltaFragment};

/// Numbers and publishes the deltas of one job.
pub struct DeltaPublisher {
    nats: async_nats::Client,
    subjects: maestro_messaging::Subjects,
    task_id: TaskId,
    job_id: JobId,
    after_seq: i64,
    n: u64,
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
            after_seq,
            n: 0,
        }
    }

    /// A new event was committed: later deltas follow it.
    pub fn committed(&mut self, last_seq: i64) {
        if last_seq != self.after_seq {
            self.after_seq = last_seq;
            self.n = 0;
        }
    }

    pub async fn publish(&mut self, fragment: DeltaFragment) {
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
