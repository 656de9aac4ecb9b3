//! Claims made together. The claims waiting when one is made go into the same statement (one
//! commit for all of them, `maestro_db::claims::claim_many`), and no claim waits for company:
//! with one job at a time a claim runs at once, alone. A batch the database refuses is claimed
//! again one job at a time, so each claim gets its own answer.

use std::collections::HashMap;
use std::time::Duration;

use maestro_db::claims::{self, Claimed};
use maestro_db::{DbError, PgPool};
use maestro_domain::JobId;
use tokio::sync::{mpsc, oneshot};

type Answer = oneshot::Sender<Result<Option<Claimed>, DbError>>;

/// Claims jobs for this worker.
#[derive(Debug, Clone)]
pub struct Claimer {
    requests: mpsc::Sender<(JobId, Answer)>,
}

/// What every claim of this worker shares.
#[derive(Debug, Clone)]
pub struct ClaimSettings {
    pub worker_id: String,
    pub lease: Duration,
    /// Claims per statement at the most.
    pub most: usize,
}

impl Claimer {
    /// Start claiming (until every [`Claimer`] clone is dropped).
    pub fn start(pool: PgPool, settings: ClaimSettings) -> Self {
        let (requests, waiting) = mpsc::channel(settings.most.max(1) * 4);
        tokio::spawn(run(waiting, pool, settings));
        Self { requests }
    }

    /// Claim `job_id` (see [`claims::claim`]).
    pub async fn claim(&self, job_id: JobId) -> Result<Option<Claimed>, DbError> {
        let (answer, answered) = oneshot::channel();
        let closed = || DbError::Corrupt("the worker's claimer has stopped".to_owned());
        self.requests
            .send((job_id, answer))
            .await
            .map_err(|_| closed())?;
        answered.await.map_err(|_| closed())?
    }
}

async fn run(mut waiting: mpsc::Receiver<(JobId, Answer)>, pool: PgPool, settings: ClaimSettings) {
    let ClaimSettings {
        worker_id,
        lease,
        most,
    } = settings;
    let mut batch = Vec::with_capacity(most);
    while waiting.recv_many(&mut batch, most.max(1)).await > 0 {
        let ids: Vec<JobId> = batch.iter().map(|(id, _)| *id).collect();
        match claims::claim_many(&pool, &ids, &worker_id, lease).await {
            Ok(claimed) => {
                let mut by_job: HashMap<JobId, Claimed> =
                    claimed.into_iter().map(|c| (c.job_id, c)).collect();
                for (job_id, answer) in batch.drain(..) {
                    let _ = answer.send(Ok(by_job.remove(&job_id)));
                }
            }
            Err(e) if batch.len() == 1 => {
                if let Some((_, answer)) = batch.pop() {
                    let _ = answer.send(Err(e));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, claims = batch.len(), "a batch of claims failed; claiming one at a time");
                for (job_id, answer) in batch.drain(..) {
                    let _ = answer.send(claims::claim(&pool, job_id, &worker_id, lease).await);
                }
            }
        }
    }
}
