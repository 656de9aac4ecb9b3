//! The jobs consumer's handler: claim, run, and turn the result into an [`Outcome`] for the
//! consumer runner. The dispatch is acknowledged only after the job's state is committed.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use chrono::Utc;
use maestro_db::claims::{self, Claimed};
use maestro_db::jobs::{self, Fence};
use maestro_domain::job::NotClaimed;
use maestro_messaging::payloads::JobDispatch;
use maestro_messaging::{Delivery, Handler, Outcome};
use maestro_runtime::metrics::transition;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use crate::agent::Shared as Deps;
use crate::agent::{self, EarlyContext, JobEnd, JobError};
use crate::signals::JobSignals;

/// Handles job dispatches.
#[derive(Debug)]
pub struct JobHandler {
    deps: Deps,
}

impl JobHandler {
    pub fn new(deps: Deps) -> Self {
        Self { deps }
    }

    fn lease(&self) -> Duration {
        self.deps.settings.ack_wait
    }

    /// Claim the job, or say what to do with the message instead.
    async fn claim(&self, dispatch: &JobDispatch, last: bool) -> Result<Claimed, Outcome> {
        let pool = &self.deps.pool;
        let claimed = self.deps.claimer.claim(dispatch.job_id).await;
        let not_claimed = match claimed {
            Ok(Some(mut claimed)) => {
                // The claim wrote the `running` event; it is published from here.
                let running = claimed.running.take().into_iter().collect();
                self.deps.bus.publish_direct(running).await;
                return Ok(claimed);
            }
            Ok(None) => claims::state(pool, dispatch.job_id)
                .await
                .map(NotClaimed::of),
            Err(e) => Err(e),
        };
        let later = match not_claimed {
            // Still queued yet not taken: it names a model this worker does not serve. Another
            // worker of the profile may; the job shows why it waits (`queued_reason`).
            Ok(NotClaimed::Settled(maestro_domain::JobStatus::Queued)) => {
                tracing::debug!(job_id = %dispatch.job_id, "not claimed: its model is not served here");
                Duration::from_secs(5)
            }
            Ok(NotClaimed::Missing | NotClaimed::Settled(_)) => return Err(Outcome::Done),
            // Someone else holds it: look again when that lease runs out.
            Ok(NotClaimed::Leased { lease_expires_at }) => {
                until(lease_expires_at) + Duration::from_millis(100)
            }
            Ok(NotClaimed::RetryLater { next_retry_at }) => until(next_retry_at),
            Err(e) => {
                tracing::warn!(error = %e, "claim failed; will retry");
                Duration::from_secs(1)
            }
        };
        // Without another delivery, the scheduler's re-dispatch takes over when the job
        // stalls; giving the message up is not an error worth a dead letter.
        Err(if last {
            Outcome::Done
        } else {
            Outcome::Retry(later)
        })
    }
}

impl Handler for JobHandler {
    async fn handle(&self, delivery: &Delivery) -> Outcome {
        let dispatch: JobDispatch = match delivery.json() {
            Ok(dispatch) => dispatch,
            Err(e) => return Outcome::Poison(format!("malformed dispatch: {e}")),
        };
        tracing::debug!(job_id = %dispatch.job_id, "dispatch received");
        if self.deps.release.is_cancelled() {
            // Shutting down: leave the job to another worker at once.
            return Outcome::Retry(Duration::ZERO);
        }
        // A new job's first delivery opens the job: its workspace context is read while the
        // claim is made, not after (a hop off the path to the first LLM call) — unless the
        // task is new with an empty workspace of its own, which has none to read.
        let early = (dispatch.attempt == 0 && !dispatch.fresh)
            .then(|| EarlyContext::start(&self.deps, dispatch.task_id, dispatch.job_id));
        let claimed = match self.claim(&dispatch, delivery.is_last_attempt()).await {
            Ok(claimed) => claimed,
            Err(outcome) => return outcome,
        };
        let span = tracing::info_span!(
            "job",
            task_id = %claimed.task_id,
            job_id = %claimed.job_id,
            attempt = claimed.attempt
        );
        self.run_claimed(claimed, delivery.is_last_attempt(), early)
            .instrument(span)
            .await
    }

    async fn dead_letter(&self, delivery: &Delivery, reason: &str) {
        let letter = maestro_db::dead_letters::DeadLetter {
            consumer: "jobs",
            subject: &delivery.message.subject,
            payload: &delivery.message.payload,
            reason,
            attempts: delivery.attempt as i32,
        };
        metrics::counter!(maestro_runtime::metrics::DEAD_LETTERS, "consumer" => "jobs")
            .increment(1);
        if let Err(e) = maestro_db::dead_letters::record(&self.deps.pool, letter).await {
            tracing::error!(error = %e, reason, "cannot record a dead letter");
        }
    }
}

impl JobHandler {
    async fn run_claimed(
        &self,
        claimed: Claimed,
        last: bool,
        early: Option<EarlyContext>,
    ) -> Outcome {
        tracing::info!(worker_id = %self.deps.settings.worker_id, "job claimed");
        let lost = CancellationToken::new();
        let fence = Fence {
            job_id: claimed.job_id,
            attempt: claimed.attempt,
        };
        let keeper = tokio::spawn(keep_lease(
            self.deps.pool.clone(),
            fence,
            self.lease(),
            lost.clone(),
        ));
        // The first step looks for interjections that came before the claim (the claim counted
        // them: no read when there are none). One sent between the claim and the registration
        // below is found by the periodic look, and in any case before the job can succeed.
        let interjections = Arc::new(AtomicBool::new(claimed.pending_interjections > 0));
        let signals = JobSignals {
            stop: lost.clone(),
            interjections: interjections.clone(),
        };
        let _registration = self.deps.signals.register(claimed.job_id, signals);
        let delivery = agent::Delivery {
            lost,
            last,
            interjections,
        };
        let started = std::time::Instant::now();
        transition("running");
        let result = agent::run(&self.deps, &claimed, delivery, early).await;
        keeper.abort();
        // A cancelled job of a space's task: what it changed is kept on the task's branch.
        if agent::space_workspace::applies(&claimed)
            && matches!(result, Ok(JobEnd::Fenced) | Err(JobError::Fenced(_)))
            && matches!(
                claims::state(&self.deps.pool, claimed.job_id).await,
                Ok(Some(state)) if state.status == maestro_domain::JobStatus::Cancelled
            )
        {
            let outcome = maestro_domain::tools::GitOutcome::Cancelled;
            agent::space_workspace::keep(&self.deps, &claimed, outcome, "cancelled").await;
        }
        let ended = match &result {
            Ok(JobEnd::Succeeded) => "succeeded",
            Ok(JobEnd::Failed(_)) => "failed",
            Ok(JobEnd::Retry(_)) => "retry",
            Ok(JobEnd::Released) => "queued",
            Ok(JobEnd::Paused) => "waiting",
            Ok(JobEnd::Fenced) | Err(JobError::Fenced(_)) => "fenced",
            Err(_) => "interrupted",
        };
        if !matches!(ended, "fenced" | "interrupted") {
            transition(ended);
        }
        metrics::histogram!(maestro_runtime::metrics::JOB_DURATION, "outcome" => ended)
            .record(maestro_runtime::metrics::seconds(started));
        match result {
            Ok(JobEnd::Succeeded | JobEnd::Fenced | JobEnd::Paused) => Outcome::Done,
            // The job is settled as failed; the dispatch is terminated and kept as a dead
            // letter with the reason.
            Ok(JobEnd::Failed(reason)) => Outcome::Poison(reason),
            Ok(JobEnd::Retry(delay)) => Outcome::Retry(delay),
            Ok(JobEnd::Released) => Outcome::Retry(Duration::ZERO),
            Err(JobError::Fenced(_)) => {
                tracing::warn!("lost the job to another attempt; stopped without writing");
                Outcome::Done
            }
            Err(e) => {
                // The job stays `running` under this lease; it is claimable once the lease
                // expires, which is when the redelivery will find it.
                tracing::error!(error = %e, "job interrupted");
                Outcome::Retry(self.lease())
            }
        }
    }
}

/// Renew the lease at a third of its length; fire `lost` if the job is no longer ours.
async fn keep_lease(
    pool: maestro_db::PgPool,
    fence: Fence,
    lease: Duration,
    lost: CancellationToken,
) {
    let mut ticker = tokio::time::interval(lease / 3);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        match jobs::extend_lease(&pool, fence, lease).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                lost.cancel();
                return;
            }
            Err(e) => tracing::warn!(error = %e, "cannot renew the job lease"),
        }
    }
}

fn until(at: chrono::DateTime<Utc>) -> Duration {
    (at - Utc::now()).to_std().unwrap_or_default()
}
