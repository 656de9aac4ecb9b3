//! Claims made together. The claims waiting when one is made go into the same statement (one
//! commit for all of them, `maestro_db::claims::claim_many`), and no claim waits for company:
//! with one job at a time a claim runs at once, alone, on the task that asked for it (no hand-off
//! to another task and back on the job's path). Claims asked for while one runs wait, and go
//! together, on a task of their own, once it is answered. A batch the database refuses is
//! claimed again one job at a time, so each claim gets its own answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use maestro_db::claims::{self, Claimed};
use maestro_db::jobs::Publish;
use maestro_db::{DbError, PgPool};
use maestro_domain::JobId;
use tokio::sync::oneshot;

type Answer = oneshot::Sender<Result<Option<Claimed>, DbError>>;
/// A job to claim, the `traceparent` its dispatch carried, and where the answer goes.
type Request = (JobId, String, Answer);

/// Claims jobs for this worker.
#[derive(Debug, Clone)]
pub struct Claimer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: PgPool,
    settings: ClaimSettings,
    queue: Mutex<Queue>,
}

/// Whether a statement of this worker's claims is running, and the claims waiting for the next.
/// Claims wait only while one runs: `waiting` is empty whenever `busy` is not.
#[derive(Debug, Default)]
struct Queue {
    busy: bool,
    waiting: Vec<Request>,
}

/// What every claim of this worker shares.
#[derive(Debug, Clone)]
pub struct ClaimSettings {
    pub worker_id: String,
    pub lease: Duration,
    /// Claims per statement at the most.
    pub most: usize,
    /// The models this worker serves (empty: any); it claims no job that names another.
    pub models: Vec<String>,
}

impl Claimer {
    /// A claimer with no claim running.
    pub fn new(pool: PgPool, settings: ClaimSettings) -> Self {
        let inner = Inner {
            pool,
            settings,
            queue: Mutex::default(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Claim `job_id` (see [`claims::claim`]), recording the trace of the current span (the
    /// dispatch's) on the job.
    pub async fn claim(&self, job_id: JobId) -> Result<Option<Claimed>, DbError> {
        let traceparent = maestro_messaging::trace::current_traceparent().unwrap_or_default();
        let answered = self.inner.wait_or_lead(job_id, &traceparent);
        if let Some(answered) = answered {
            let closed = || DbError::Corrupt("the worker's claimer has stopped".to_owned());
            return answered.await.map_err(|_| closed())?;
        }
        // Alone: claimed here. Whatever came meanwhile is claimed once this is answered, also
        // when this task is dropped before.
        let _next = Next(self.inner.clone());
        self.inner
            .claim(&[job_id], &[traceparent])
            .await
            .map(|mut claimed| claimed.pop())
    }
}

/// Ends a claim's statement: the claims that waited for it go next, on a task of their own.
struct Next(Arc<Inner>);

impl Drop for Next {
    fn drop(&mut self) {
        let waiting = {
            let mut queue = self.0.lock();
            queue.busy = !queue.waiting.is_empty();
            queue.busy
        };
        // Outside a runtime (it is shutting down) the waiting claims are dropped, and their
        // callers told the claimer has stopped.
        if let (true, Ok(runtime)) = (waiting, tokio::runtime::Handle::try_current()) {
            runtime.spawn(self.0.clone().drain());
        }
    }
}

impl Inner {
    /// Wait for a running statement's end (the answer comes here), or, with none running,
    /// claim now (`None`).
    fn wait_or_lead(
        &self,
        job_id: JobId,
        traceparent: &str,
    ) -> Option<oneshot::Receiver<Result<Option<Claimed>, DbError>>> {
        let mut queue = self.lock();
        if !queue.busy {
            queue.busy = true;
            return None;
        }
        let (answer, answered) = oneshot::channel();
        queue.waiting.push((job_id, traceparent.to_owned(), answer));
        Some(answered)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // The queue is consistent between statements: a panic elsewhere leaves it usable.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn claim(&self, ids: &[JobId], traces: &[String]) -> Result<Vec<Claimed>, DbError> {
        let ClaimSettings {
            worker_id,
            lease,
            models,
            ..
        } = &self.settings;
        claims::claim_many_traced(
            &self.pool,
            ids,
            traces,
            worker_id,
            *lease,
            models,
            Publish::Directly,
        )
        .await
    }

    /// Claim the waiting claims, as many per statement as allowed, until none wait.
    async fn drain(self: Arc<Self>) {
        let most = self.settings.most.max(1);
        loop {
            let mut batch = {
                let mut queue = self.lock();
                if queue.waiting.is_empty() {
                    queue.busy = false;
                    return;
                }
                let take = queue.waiting.len().min(most);
                let rest = queue.waiting.split_off(take);
                std::mem::replace(&mut queue.waiting, rest)
            };
            let ids: Vec<JobId> = batch.iter().map(|(id, _, _)| *id).collect();
            let traces: Vec<String> = batch.iter().map(|(_, trace, _)| trace.clone()).collect();
            match self.claim(&ids, &traces).await {
                Ok(claimed) => {
                    let mut by_job: HashMap<JobId, Claimed> =
                        claimed.into_iter().map(|c| (c.job_id, c)).collect();
                    for (job_id, _, answer) in batch.drain(..) {
                        let _ = answer.send(Ok(by_job.remove(&job_id)));
                    }
                }
                Err(e) if batch.len() == 1 => {
                    if let Some((_, _, answer)) = batch.pop() {
                        let _ = answer.send(Err(e));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, claims = batch.len(), "a batch of claims failed; claiming one at a time");
                    for (job_id, trace, answer) in batch.drain(..) {
                        let one = self.claim(&[job_id], &[trace]).await;
                        let _ = answer.send(one.map(|mut claimed| claimed.pop()));
                    }
                }
            }
        }
    }
}
