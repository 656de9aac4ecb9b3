//! Claims made together. The claims waiting when one is made go into the same statement (one
//! commit for all of them, `maestro_db::claims::claim_many`), and no claim waits for company:
//! with one job at a time a claim runs at once, alone. A batch the database refuses is claimed
//! again one job at a time, so each claim gets its own answer.

use std::collections::HashMap;
use std::time::Duration;

use maestro_db::claims::{self, Claimed};
use maestro_db::jobs::Publish;
use maestro_db::{DbError, PgPool};
use maestro_domain::JobId;
use tokio::sync::{mpsc, oneshot};

type Answer = oneshot::Sender<Result<Option<Claimed>, DbError>>;
/// A job to claim, the `traceparent` its dispatch carried, and where the answer goes.
type Request = (JobId, String, Answer);

/// Claims jobs for this worker.
#[derive(Debug, Clone)]
pub struct Claimer {
    requests: mpsc::Sender<Request>,
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
    /// Start claiming (until every [`Claimer`] clone is dropped).
    pub fn start(pool: PgPool, settings: ClaimSettings) -> Self {
        let (requests, waiting) = mpsc::channel(settings.most.max(1) * 4);
        tokio::spawn(run(waiting, pool, settings));
        Self { requests }
    }

    /// Claim `job_id` (see [`claims::claim`]), recording the trace of the current span (the
    /// dispatch's) on the job.
    pub async fn claim(&self, job_id: JobId) -> Result<Option<Claimed>, DbError> {
        let (answer, answered) = oneshot::channel();
        let closed = || DbError::Corrupt("the worker's claimer has stopped".to_owned());
        let traceparent = maestro_messaging::trace::current_traceparent().unwrap_or_default();
        self.requests
            .send((job_id, traceparent, answer))
            .await
            .map_err(|_| closed())?;
        answered.await.map_err(|_| closed())?
    }
}

async fn run(mut waiting: mpsc::Receiver<Request>, pool: PgPool, settings: ClaimSettings) {
    let ClaimSettings {
        worker_id,
        lease,
        most,
        models,
    } = settings;
    let mut batch = Vec::with_capacity(most);
    while waiting.recv_many(&mut batch, most.max(1)).await > 0 {
        let ids: Vec<JobId> = batch.iter().map(|(id, _, _)| *id).collect();
        let traces: Vec<String> = batch.iter().map(|(_, trace, _)| trace.clone()).collect();
        match claims::claim_many_traced(
            &pool,
            &ids,
            &traces,
            &worker_id,
            lease,
            &models,
            Publish::Directly,
        )
        .await
        {
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
                    let one = claims::claim_many_traced(
                        &pool,
                        &[job_id],
                        &[trace],
                        &worker_id,
                        lease,
                        &models,
                        Publish::Directly,
                    )
                    .await
                    .map(|mut claimed| claimed.pop());
                    let _ = answer.send(one);
                }
            }
        }
    }
}
