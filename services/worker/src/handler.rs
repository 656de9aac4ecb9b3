//! The jobs consumer's handler: claim, run, and turn the result into an [`Outcome`] for the
//! consumer runner. The dispatch is acknowledged only after the job's state is committed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::Utc;
use maestro_db::claims::{self, Claimed};
use maestro_db::jobs::{self, Fence};
use maestro_domain::job::NotClaimed;
use maestro_messaging::payloads::JobDispatch;
use maestro_messaging::{Delivery, Handler, Outcome};
use maestro_runtime::metrics::transition;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub use crate::agent::Shared as Deps;
use crate::agent::{self, Early, EarlyContext, FirstCall, JobEnd, JobError};
use crate::hints::{Held, HintHold, Take};
use crate::signals::JobSignals;

/// How long a worker waits for the worker a hint ran a job at to take the job's delivery over
/// (see [`crate::hints`]); past it, the delivery looks again when the lease runs out.
const HANDOVER_WAIT: Duration = Duration::from_secs(2);

/// What a handover's answer says when the hinted run's worker took the delivery.
const HANDOVER_TAKEN: &[u8] = b"taken";

/// Handles job dispatches.
#[derive(Debug)]
pub struct JobHandler {
    deps: Deps,
    /// The jobs held here, and by which path (see [`crate::hints`]).
    held: Held,
    /// The runs hints started, and the handed-over deliveries that wait for them.
    hinted: TaskTracker,
    /// No other worker serves this worker's profiles: a hint's first LLM call goes out beside
    /// the claim (see [`JobHandler::early`]).
    alone: AtomicBool,
}

/// Why a claim took nothing: what the delivery does, and the worker that holds the job's lease
/// when it is another one.
#[derive(Debug)]
struct Refused {
    outcome: Outcome,
    holder: Option<String>,
}

impl JobHandler {
    pub fn new(deps: Deps) -> Self {
        Self {
            deps,
            held: Held::default(),
            hinted: TaskTracker::new(),
            alone: AtomicBool::new(false),
        }
    }

    /// Whether this worker is alone on its profiles now (a hint's first LLM call goes out
    /// beside the claim only then).
    pub fn set_alone(&self, alone: bool) {
        if self.alone.swap(alone, Ordering::Relaxed) != alone {
            let early = if alone { "on" } else { "off" };
            tracing::info!(alone, "early first LLM calls {early}");
        }
    }

    fn lease(&self) -> Duration {
        self.deps.settings.ack_wait
    }

    /// Claim the job, or say what to do with the message instead.
    async fn claim(&self, dispatch: &JobDispatch, last: bool) -> Result<Claimed, Refused> {
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
        let mut holder = None;
        let later = match not_claimed {
            // Still queued yet not taken: it names a model this worker does not serve. Another
            // worker of the profile may; the job shows why it waits (`queued_reason`).
            Ok(NotClaimed::Settled(maestro_domain::JobStatus::Queued)) => {
                tracing::debug!(job_id = %dispatch.job_id, "not claimed: its model is not served here");
                Duration::from_secs(5)
            }
            Ok(NotClaimed::Missing | NotClaimed::Settled(_)) => {
                return Err(Refused {
                    outcome: Outcome::Done,
                    holder: None,
                });
            }
            // Someone else holds it: look again when that lease runs out (unless its holder
            // takes the delivery over).
            Ok(NotClaimed::Leased {
                lease_expires_at,
                holder: leased_by,
            }) => {
                holder = leased_by.filter(|h| *h != self.deps.settings.worker_id);
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
        let outcome = if last {
            Outcome::Done
        } else {
            Outcome::Retry(later)
        };
        Err(Refused { outcome, holder })
    }
}

impl Handler for JobHandler {
    async fn handle(&self, delivery: &Delivery) -> Outcome {
        let dispatch: JobDispatch = match delivery.json() {
            Ok(dispatch) => dispatch,
            Err(e) => return Outcome::Poison(format!("malformed dispatch: {e}")),
        };
        tracing::debug!(job_id = %dispatch.job_id, via = "jetstream", "dispatch received");
        let _hold = match self.held.delivery(dispatch.job_id) {
            // A hint started the job: this delivery settles as that run did.
            Take::Hinted(ending) => match ending.outcome().await {
                Some(outcome) => return outcome,
                None => None,
            },
            Take::Held(hold) => Some(hold),
            Take::Again => None,
        };
        self.take(delivery, &dispatch).await
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
    /// Claim the dispatched job and run it; the outcome is what its delivery does. A job
    /// another worker's hint runs has the delivery handed over to that worker.
    async fn take(&self, delivery: &Delivery, dispatch: &JobDispatch) -> Outcome {
        if self.deps.release.is_cancelled() {
            // Shutting down: leave the job to another worker at once.
            return Outcome::Retry(Duration::ZERO);
        }
        let last = delivery.is_last_attempt();
        let early = self.early(dispatch, false);
        let claimed = match self.claim(dispatch, last).await {
            Ok(claimed) => claimed,
            Err(Refused {
                outcome,
                holder: Some(holder),
            }) if !last => {
                if self.hand_over(delivery, &holder).await {
                    return Outcome::HandedOver;
                }
                return outcome;
            }
            Err(refused) => return refused.outcome,
        };
        dispatch_taken("jetstream");
        self.run_claimed(claimed, last, early).await
    }

    /// Hand `delivery` to `holder`, the worker whose lease the job is under: taken when a hint
    /// runs (or ran) the job there, and then settled there with the run's outcome.
    async fn hand_over(&self, delivery: &Delivery, holder: &str) -> bool {
        let Some((headers, payload)) = delivery.hand_over() else {
            return false;
        };
        let bus = &self.deps.bus;
        let subject = bus.subjects.handover(holder);
        let answer = tokio::time::timeout(
            HANDOVER_WAIT,
            bus.nats.request_with_headers(subject, headers, payload),
        )
        .await;
        let outcome = match answer {
            Ok(Ok(answer)) if answer.payload.as_ref() == HANDOVER_TAKEN => "taken",
            Ok(Ok(_)) => "refused",
            // No such worker listens (it stopped, or predates handovers), or it did not answer.
            Ok(Err(_)) | Err(_) => "unanswered",
        };
        tracing::debug!(job_holder = holder, outcome, "delivery handed over");
        metrics::counter!(maestro_runtime::metrics::HANDOVERS, "outcome" => outcome).increment(1);
        outcome == "taken"
    }

    /// Take the deliveries other workers hand over (see [`crate::hints`]) until `shutdown`:
    /// each one of a job a hint runs (or ran) here is settled with that run's outcome, as its
    /// delivery would have been had it come here.
    pub async fn follow_handovers(
        self: Arc<Self>,
        mut handovers: async_nats::Subscriber,
        shutdown: CancellationToken,
    ) {
        use futures::StreamExt as _;
        while let Some(Some(handover)) = shutdown.run_until_cancelled(handovers.next()).await {
            let answer_to = handover.reply.clone();
            let taken = self.take_handed(handover);
            if let Some(answer_to) = answer_to {
                let answer: &'static [u8] = if taken { HANDOVER_TAKEN } else { b"not here" };
                if let Err(e) = self.deps.bus.nats.publish(answer_to, answer.into()).await {
                    tracing::warn!(error = %e, "cannot answer a handover");
                }
            }
        }
    }

    /// Settle a handed-over delivery with the end of the hinted run it waits for; `false`
    /// (not taken) when no hint runs or ran its job here.
    fn take_handed(self: &Arc<Self>, handover: async_nats::Message) -> bool {
        let settings = &self.deps.settings;
        let js = self.deps.bus.js.clone();
        let Some(delivery) =
            maestro_messaging::consumer::handed(handover, js, settings.max_deliver)
        else {
            return false;
        };
        let Ok(dispatch) = delivery.json::<JobDispatch>() else {
            return false;
        };
        let Some(ending) = self.held.handed(dispatch.job_id) else {
            return false;
        };
        let span =
            tracing::info_span!("handover", job_id = %dispatch.job_id, attempt = delivery.attempt);
        maestro_messaging::trace::adopt(&span, delivery.message.headers.as_ref());
        let (this, heartbeat) = (self.clone(), settings.ack_wait / 3);
        self.hinted.spawn(
            async move {
                let work = async {
                    match ending.outcome().await {
                        Some(outcome) => outcome,
                        // The run stopped without an end: the delivery claims on its own.
                        None => this.handle(&delivery).await,
                    }
                };
                maestro_messaging::consumer::settle_handed(&delivery, &*this, heartbeat, work)
                    .await;
            }
            .instrument(span),
        );
        true
    }

    /// A new job's first dispatch opens the job while the claim is made, not after (a hop off
    /// the path to the first LLM call): its workspace context is read — unless the task is new
    /// with an empty workspace of its own, which has none to read; then its first LLM request
    /// is sent instead, when the dispatch says what it will be ([`FirstCall`]) and came as a
    /// hint (`hinted`): published a moment ago for this worker alone, so the claim will find
    /// the job as it was created. From JetStream the delivery may be late — a comment may have
    /// joined the instruction, another worker may hold the job — and the call would be paid
    /// for nothing.
    ///
    /// A worker with company on its profiles sends no early call: the job's delivery may reach
    /// the other worker and be claimed there first.
    fn early(&self, dispatch: &JobDispatch, hinted: bool) -> Early {
        let context = (dispatch.attempt == 0 && !dispatch.fresh)
            .then(|| EarlyContext::start(&self.deps, dispatch.task_id, dispatch.job_id));
        let alone = self.alone.load(Ordering::Relaxed);
        Early {
            context,
            first_call: (hinted && alone)
                .then(|| FirstCall::start(&self.deps, dispatch))
                .flatten(),
        }
    }

    /// Follow the dispatches of this worker's profiles as they are published (see
    /// [`crate::hints`]) until `shutdown`; each one this worker has room for starts at once.
    pub async fn follow_hints(
        self: Arc<Self>,
        mut hints: impl futures::Stream<Item = async_nats::Message> + Unpin,
        shutdown: CancellationToken,
    ) {
        use futures::StreamExt as _;
        while let Some(Some(hint)) = shutdown.run_until_cancelled(hints.next()).await {
            if self.deps.release.is_cancelled() {
                continue;
            }
            // A malformed one is its delivery's to dead-letter.
            let Ok(dispatch) = serde_json::from_slice::<JobDispatch>(&hint.payload) else {
                continue;
            };
            let Some(hold) = self
                .held
                .hint(dispatch.job_id, self.deps.settings.concurrency)
            else {
                continue;
            };
            let span = tracing::info_span!("hint", job_id = %dispatch.job_id);
            maestro_messaging::trace::adopt(&span, hint.headers.as_ref());
            let this = self.clone();
            self.hinted
                .spawn(async move { this.run_hinted(dispatch, hold).await }.instrument(span));
        }
    }

    async fn run_hinted(self: Arc<Self>, dispatch: JobDispatch, hold: HintHold) {
        tracing::debug!(job_id = %dispatch.job_id, via = "hint", "dispatch received");
        // A hint comes from a publish, so its delivery will be the message's first.
        let last = self.deps.settings.max_deliver == 1;
        let early = self.early(&dispatch, true);
        let claimed = match self.claim(&dispatch, last).await {
            Ok(claimed) => claimed,
            Err(_) => {
                self.held.forget(&hold);
                hold.end(None);
                return;
            }
        };
        dispatch_taken("hint");
        let outcome = self.run_claimed(claimed, last, early).await;
        hold.end(Some(outcome));
        // Its delivery has usually taken the end already (it came here or was handed over
        // while the job ran). One still to come normally takes it within milliseconds; one
        // that goes to another worker now finds the job settled there; past this, one that
        // comes here claims on its own and finds the same.
        if !self.held.waits(&hold) {
            return;
        }
        tokio::spawn(async move {
            tokio::time::sleep(self.lease()).await;
            self.held.forget(&hold);
        });
    }

    /// Wait for the jobs hints started (after the hints have stopped).
    pub async fn hinted_done(&self) {
        self.hinted.close();
        self.hinted.wait().await;
    }

    async fn run_claimed(&self, claimed: Claimed, last: bool, early: Early) -> Outcome {
        let span = tracing::info_span!(
            "job",
            task_id = %claimed.task_id,
            job_id = %claimed.job_id,
            attempt = claimed.attempt
        );
        self.run_in_span(claimed, last, early)
            .instrument(span)
            .await
    }

    async fn run_in_span(&self, claimed: Claimed, last: bool, early: Early) -> Outcome {
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

/// Count a job claimed from its dispatch, by the path whose claim took it.
fn dispatch_taken(via: &'static str) {
    metrics::counter!(maestro_runtime::metrics::DISPATCHES, "via" => via).increment(1);
}

fn until(at: chrono::DateTime<Utc>) -> Duration {
    (at - Utc::now()).to_std().unwrap_or_default()
}
