//! How a job ends (or pauses): every ending is one commit of the remaining events, the
//! `job_state` event and the state change together.

use std::time::Duration;

use chrono::Utc;
use maestro_db::actions;
use maestro_db::jobs::{self, Fence, Transition};
use maestro_domain::action::{NewAction, PauseFor};
use maestro_domain::{ActionStatus, EventBody, JobId, JobStateChange, JobStatus, WaitReason};
use maestro_llm::LlmError;
use maestro_messaging::AfterCommit;
use maestro_messaging::backoff::backoff;

use super::context::{JobEnd, JobError, Shared};
use super::run::JobRun;

/// Fail a job before any work (too many attempts, unknown piece).
pub(super) async fn settle_failed(
    shared: &Shared,
    fence: Fence,
    error: String,
) -> Result<JobEnd, JobError> {
    tracing::warn!(%error, "job failed");
    let transition = Transition {
        error: Some(error.clone()),
        ..Transition::to(JobStatus::Failed)
    };
    let change = state_event(JobStatus::Failed, fence.attempt, |c| {
        c.error = Some(error.clone())
    });
    let (pool, publish) = (&shared.pool, jobs::Publish::Directly);
    let appended =
        jobs::append_publishing(pool, fence, &[change], Some(&transition), &[], publish).await??;
    // Published from here, as every other end of a job; it may be a subtask whose parent
    // waits for it.
    super::journal::announce(&shared.bus, appended, true).await;
    cancel_children(shared, fence.job_id).await;
    Ok(JobEnd::Failed(error))
}

/// A failed job's subtasks still running are cancelled (nobody will read their results). Best
/// effort: the job's own end is committed already; a child left running only wastes work.
async fn cancel_children(shared: &Shared, job_id: JobId) {
    let reason = "the job that started it failed";
    match maestro_db::subtasks::cancel_children(&shared.pool, job_id, reason).await {
        Ok(cancelled) if cancelled.is_empty() => {}
        Ok(cancelled) => {
            let mut after = AfterCommit::events();
            for job in cancelled {
                tracing::info!(job_id = %job.job_id, "subtask cancelled: {reason}");
                after = after.stop(job.job_id);
            }
            shared.bus.after_commit(after).await;
        }
        Err(e) => tracing::warn!(error = %e, "cannot cancel the failed job's subtasks"),
    }
}

fn state_event(
    status: JobStatus,
    attempt: i32,
    fill: impl FnOnce(&mut JobStateChange),
) -> EventBody {
    let mut change = JobStateChange::new(status, attempt);
    fill(&mut change);
    EventBody::JobState(change)
}

impl JobRun<'_> {
    /// Finish the job, unless an interjection arrived that the model has not seen: then the
    /// `complete` call is answered with a note to read it, and the job goes on (`None`).
    /// Saying how, when it matters (`JobStateChange::REPLIED`: the agent answered directly).
    pub(super) async fn succeed_as(
        &mut self,
        result: String,
        reason: Option<&str>,
    ) -> Result<Option<JobEnd>, JobError> {
        // A space's task: its changes are committed on the task's branch first (doing it again
        // after a crash commits nothing new); they are merged into `main` only once the
        // success is committed below.
        let in_space = super::space_workspace::applies(self.claim);
        if in_space {
            let outcome = maestro_domain::tools::GitOutcome::Succeeded;
            if let Err(error) =
                super::space_workspace::finish(self.shared, self.claim, outcome, &result).await
            {
                // Nothing of the ending is committed: the job runs again (its last LLM call
                // repeated), and the commit is tried again.
                let error = format!("the job's changes could not be committed: {error}");
                return Err(JobError::Unavailable(error));
            }
        }
        let transition = Transition {
            result: Some(result.clone()),
            ..Transition::to(JobStatus::Succeeded)
        };
        self.journal
            .push(state_event(JobStatus::Succeeded, self.fence.attempt, |c| {
                c.result = Some(result);
                c.reason = reason.map(str::to_owned);
            }));
        match self.journal.commit(Some(transition)).await {
            Ok(()) => {
                tracing::info!(iterations = self.iterations, "job succeeded");
                if in_space {
                    self.merge_into_main().await;
                }
                Ok(Some(JobEnd::Succeeded))
            }
            Err(JobError::Fenced(fenced)) => {
                if !jobs::held(&self.shared.pool, self.fence).await? {
                    return Err(JobError::Fenced(fenced));
                }
                self.journal.withdraw_completion();
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The success is committed: merge the task's branch into `main` and record where its
    /// changes are. Best effort: a merge that does not happen now happens with the task's next
    /// success (the branch keeps every commit).
    async fn merge_into_main(&self) {
        let merged = super::space_workspace::merge(self.shared, self.claim).await;
        let (commit, branch) = match merged {
            Ok(reply) => (reply.commit, reply.branch),
            Err(error) => {
                tracing::warn!(%error, "the job's changes are not merged yet");
                let branch = format!("maestro/task/{}", self.claim.workspace_id);
                (None, Some(branch))
            }
        };
        let recorded = maestro_db::jobs::record_commit(
            &self.shared.pool,
            self.claim.job_id,
            commit.as_deref(),
            branch.as_deref(),
        )
        .await;
        if let Err(e) = recorded {
            tracing::warn!(error = %e, "cannot record the job's commit");
        }
    }

    pub(super) async fn fail(&mut self, error: String) -> Result<JobEnd, JobError> {
        self.fail_as(error, None).await
    }

    /// [`Self::fail`], saying why when it is not an error (`JobStateChange::DECLINED`).
    pub(super) async fn fail_as(
        &mut self,
        error: String,
        reason: Option<&str>,
    ) -> Result<JobEnd, JobError> {
        tracing::warn!(%error, "job failed");
        // A space's task keeps what the job changed on its branch, not merged.
        let outcome = maestro_domain::tools::GitOutcome::Failed;
        super::space_workspace::keep(self.shared, self.claim, outcome, &error).await;
        let branch = super::space_workspace::applies(self.claim)
            .then(|| format!("maestro/task/{}", self.claim.workspace_id));
        let transition = Transition {
            error: Some(error.clone()),
            branch: branch.clone(),
            ..Transition::to(JobStatus::Failed)
        };
        self.journal
            .push(state_event(JobStatus::Failed, self.fence.attempt, |c| {
                c.error = Some(error.clone());
                c.reason = reason.map(str::to_owned);
                c.branch = branch;
            }));
        self.journal.commit(Some(transition)).await?;
        cancel_children(self.shared, self.fence.job_id).await;
        Ok(JobEnd::Failed(error))
    }

    pub(super) async fn llm_failed(&mut self, error: LlmError) -> Result<JobEnd, JobError> {
        if error.is_recoverable() {
            self.recoverable(format!("LLM: {error}"), error.retry_after())
                .await
        } else {
            self.fail(format!("LLM: {error}")).await
        }
    }

    /// A recoverable error: `retry` with a backoff while attempts (and deliveries) remain,
    /// else `failed`. Events not yet committed are dropped: the retry rebuilds from what was
    /// committed.
    pub(super) async fn recoverable(
        &mut self,
        error: String,
        hint: Option<Duration>,
    ) -> Result<JobEnd, JobError> {
        self.journal.discard_unsaved();
        if self.fence.attempt >= self.claim.max_attempts {
            let attempts = self.fence.attempt;
            return self
                .fail(format!("{error} (gave up after {attempts} attempts)"))
                .await;
        }
        if self.delivery.last {
            return self
                .fail(format!(
                    "{error} (gave up: the dispatch reached its redelivery limit)"
                ))
                .await;
        }
        let settings = &self.shared.settings;
        let delay = backoff(
            self.fence.attempt,
            settings.retry_base,
            settings.retry_max,
            hint,
        );
        let next_retry_at = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
        tracing::warn!(%error, ?delay, "recoverable error; job will retry");
        let transition = Transition {
            error: Some(error.clone()),
            next_retry_at: Some(next_retry_at),
            ..Transition::to(JobStatus::Retry)
        };
        self.journal
            .push(state_event(JobStatus::Retry, self.fence.attempt, |c| {
                c.error = Some(error);
                c.next_retry_at = Some(next_retry_at);
            }));
        self.journal.commit(Some(transition)).await?;
        Ok(JobEnd::Retry(delay))
    }

    /// Hand the job back (`queued`, with its attempt refunded) so another worker takes it
    /// over from the last commit. Events not yet committed are dropped.
    pub(super) async fn release(&mut self) -> Result<JobEnd, JobError> {
        self.journal.discard_unsaved();
        let reason = "the worker is shutting down".to_owned();
        tracing::info!("releasing the job: {reason}");
        let transition = Transition {
            refund_attempt: true,
            ..Transition::to(JobStatus::Queued)
        };
        self.journal
            .push(state_event(JobStatus::Queued, self.fence.attempt, |c| {
                c.reason = Some(reason)
            }));
        self.journal.commit(Some(transition)).await?;
        Ok(JobEnd::Released)
    }

    /// Pause for a person (`waiting_human` for `wait`) or for subtasks (`waiting_subtasks`
    /// when `wait` is `Subtask`), saying why, until every one of `items` is answered. The
    /// items are recorded first (idempotently: a worker that dies before the pause commits
    /// records the same ones again), then the pause commits with their summary.
    pub(super) async fn pause(
        &mut self,
        wait: WaitReason,
        reason: String,
        items: Vec<NewAction>,
    ) -> Result<JobEnd, JobError> {
        tracing::warn!(%reason, %wait, items = items.len(), "pausing the job");
        let subtasks = items.iter().any(|i| i.kind() == WaitReason::Subtask);
        let recorded = actions::record(&self.shared.pool, self.claim.task_id, self.fence, &items)
            .await?
            .ok_or(jobs::Fenced(self.fence.job_id))?;
        let pending: Vec<_> = recorded
            .into_iter()
            .filter(|a| a.status == ActionStatus::Pending)
            .collect();
        let kinds: Vec<WaitReason> = pending.iter().map(|a| a.kind()).collect();
        let Some((status, wait_reason)) = PauseFor::choose(wait, &kinds, subtasks).job_state()
        else {
            // Every item is decided already (a provider reusing call ids could do this): a
            // pause would wait for nothing, so fail closed instead.
            let error = format!("a pause for {wait} found nothing left to wait for: {reason}");
            return self.fail(error).await;
        };
        // Children that are over already (fast ones) are not waited for; with none left, the
        // join queues the job again at once.
        let summaries: Vec<serde_json::Value> = pending.iter().map(|a| a.summary()).collect();
        let transition = Transition {
            wait_reason,
            ..Transition::to(status)
        };
        self.journal
            .push(state_event(status, self.fence.attempt, |c| {
                c.wait_reason = wait_reason;
                c.reason = Some(reason);
                c.required_actions = summaries;
            }));
        self.journal.commit(Some(transition)).await?;
        if subtasks {
            // A child that ended while this pause was being committed found no waiting job to
            // queue: the join looks again now.
            let after = AfterCommit::none().wake_joiner();
            self.shared.bus.after_commit(after).await;
        }
        Ok(JobEnd::Paused)
    }
}
