//! The subtask join (SPEC §3.4): a job that waits for its subtasks (`waiting_subtasks`) is
//! queued again, and dispatched, once every child task is over. Woken by
//! `<prefix>.subtasks.wake` (a worker sends it when a subtask's job ends and when a parent
//! begins to wait; the API when it cancels), with a poll as a fallback. The join itself is
//! one transaction in Postgres (`maestro_db::subtasks::join`), safe to run from several
//! schedulers; a dispatch lost after it commits is re-sent by the re-dispatcher.

use std::time::Duration;

use async_nats::jetstream;
use maestro_db::PgPool;
use maestro_messaging::Subjects;
use maestro_messaging::payloads::JobDispatch;
use tokio_util::sync::CancellationToken;

/// Joins finished subtasks to their waiting parents.
#[derive(Debug, Clone)]
pub struct Joiner {
    pub pool: PgPool,
    pub nats: async_nats::Client,
    pub js: jetstream::Context,
    pub subjects: Subjects,
    pub poll: Duration,
}

impl Joiner {
    /// Join until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let subject = self.subjects.subtasks_wake();
        crate::wake::run(
            &self.nats,
            subject,
            self.poll,
            shutdown,
            "subtask join",
            || self.once(),
        )
        .await;
    }

    /// One join; returns how many parent jobs were queued again.
    pub async fn once(&self) -> anyhow::Result<usize> {
        let resumed = maestro_db::subtasks::join(&self.pool, 500).await?;
        if resumed.is_empty() {
            return Ok(0);
        }
        maestro_messaging::publish::wake_outbox(&self.nats, &self.subjects).await;
        for job in &resumed {
            let dispatch = JobDispatch {
                job_id: job.job_id,
                task_id: job.task_id,
                attempt: job.attempt,
            };
            tracing::info!(job_id = %job.job_id, "every subtask is over: job queued again");
            // A dispatch lost here is re-sent by the re-dispatcher (the job is `queued`).
            if let Err(e) = maestro_messaging::publish::dispatch_job(
                &self.js,
                &self.subjects,
                &job.profile,
                &dispatch,
            )
            .await
            {
                tracing::warn!(error = %e, job_id = %job.job_id, "dispatch not published; the re-dispatcher will send it");
            }
        }
        Ok(resumed.len())
    }
}
