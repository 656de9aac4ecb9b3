//! The subtask join (SPEC §3.4): a job that waits for its subtasks (`waiting_subtasks`) is
//! queued again, and dispatched, once every child task is over. Woken by
//! `<prefix>.subtasks.wake` (a worker sends it when a subtask's job ends and when a parent
//! begins to wait; the API when it cancels), with a poll as a fallback. The join itself is
//! one transaction: the items whose child is over are taken (skipping those another
//! scheduler holds), each gets its child's verdict, the parents with nothing left pending are
//! queued, and their events are written — safe to run from several schedulers at once. A
//! dispatch lost after the commit is re-sent by the re-dispatcher.

use std::time::Duration;

use maestro_db::jobs::ToDispatch;
use maestro_db::subtasks::Finished;
use maestro_db::{DbError, PgPool, events, subtasks};
use maestro_domain::{
    ActionId, Decision, DecisionEvent, EventBody, JobId, JobStateChange, JobStatus, Verdict,
    WaitReason,
};
use maestro_messaging::Bus;
use tokio_util::sync::CancellationToken;

/// Items resolved per join.
const JOIN_BATCH: i64 = 500;

/// Joins finished subtasks to their waiting parents.
#[derive(Debug, Clone)]
pub struct Joiner {
    pub pool: PgPool,
    pub bus: Bus,
    pub poll: Duration,
}

impl Joiner {
    /// Join until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let subject = self.bus.subjects.subtasks_wake();
        crate::wake::run(
            &self.bus.nats,
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
        let Some(resumed) = join(&self.pool, JOIN_BATCH).await? else {
            return Ok(0);
        };
        for job in &resumed {
            tracing::info!(job_id = %job.job_id, "every subtask is over: job queued again");
        }
        self.bus.after_commit(crate::dispatch_all(&resumed)).await;
        Ok(resumed.len())
    }
}

/// The join's transaction: resolve up to `limit` items whose child is over, queue the parents
/// with nothing left pending, write their events. `None` when it wrote nothing; else the
/// parents queued again, to dispatch.
pub async fn join(pool: &PgPool, limit: i64) -> Result<Option<Vec<ToDispatch>>, DbError> {
    let mut tx = maestro_db::begin(pool).await?;
    let finished = subtasks::finished(&mut tx, limit).await?;
    let decisions = verdicts(&finished);
    subtasks::resolve(&mut tx, &decisions).await?;
    let resumed = subtasks::queue_ready(&mut tx).await?;
    let written = join_events(&finished, &decisions, &resumed);
    for (job, events) in &written {
        events::push(&mut tx, *job, events).await?;
    }
    maestro_db::commit(tx).await?;
    Ok((!written.is_empty()).then_some(resumed))
}

/// Each finished item's decision: its child's verdict, by the scheduler.
fn verdicts(finished: &[Finished]) -> Vec<(ActionId, Decision)> {
    finished
        .iter()
        .filter_map(|f| {
            let verdict = Verdict::of_child(f.status, f.result.clone(), f.error.clone())?;
            let decision = Decision {
                note: Some(format!("subtask {}", f.subtask_id)),
                ..Decision::new(verdict, "scheduler")
            };
            Some((f.action_id, decision))
        })
        .collect()
}

/// The events of one join, per parent job: a `decision` event for each item resolved, then,
/// when the job is queued again, its `queued` state change. A parent that is over itself
/// (cancelled with its tree) is told nothing more.
fn join_events(
    finished: &[Finished],
    decisions: &[(ActionId, Decision)],
    resumed: &[ToDispatch],
) -> Vec<(JobId, Vec<EventBody>)> {
    let mut jobs: Vec<JobId> = finished
        .iter()
        .filter(|f| !f.job_status.is_terminal())
        .map(|f| f.job_id)
        .chain(resumed.iter().map(|r| r.job_id))
        .collect();
    jobs.sort();
    jobs.dedup();
    jobs.into_iter()
        .map(|job| {
            let again = resumed.iter().find(|r| r.job_id == job);
            let mut events: Vec<EventBody> = finished
                .iter()
                .filter(|f| f.job_id == job)
                .filter_map(|f| {
                    let (_, decision) = decisions.iter().find(|(id, _)| *id == f.action_id)?;
                    let status = again.map_or(f.job_status, |_| JobStatus::Queued);
                    let event =
                        DecisionEvent::new(f.action_id, WaitReason::Subtask, decision, status);
                    Some(EventBody::Decision(event))
                })
                .collect();
            if let Some(again) = again {
                let mut change = JobStateChange::new(JobStatus::Queued, again.attempt);
                change.reason = Some("every subtask the job waited for is over".to_owned());
                events.push(EventBody::JobState(change));
            }
            (job, events)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use maestro_domain::TaskId;

    fn finished(job: JobId, job_status: JobStatus, child: JobStatus) -> Finished {
        Finished {
            action_id: ActionId::new(),
            job_id: job,
            job_status,
            subtask_id: TaskId::new(),
            status: child,
            result: Some("done".into()),
            error: None,
        }
    }

    #[test]
    fn a_join_tells_each_waiting_parent_and_queues_the_ready_ones() {
        let (waiting, ready, over) = (JobId::new(), JobId::new(), JobId::new());
        let items = [
            finished(waiting, JobStatus::WaitingSubtasks, JobStatus::Succeeded),
            finished(ready, JobStatus::WaitingSubtasks, JobStatus::Failed),
            finished(over, JobStatus::Cancelled, JobStatus::Cancelled),
        ];
        let decisions = verdicts(&items);
        assert_eq!(decisions.len(), 3);
        assert_eq!(
            decisions[0].1.verdict,
            Verdict::Succeeded {
                result: Some("done".into())
            }
        );
        let resumed = [ToDispatch {
            job_id: ready,
            task_id: TaskId::new(),
            attempt: 2,
            profile: "default".into(),
        }];
        let written = join_events(&items, &decisions, &resumed);
        let of = |job: JobId| written.iter().find(|(j, _)| *j == job).map(|(_, e)| e);
        assert!(of(over).is_none(), "a parent that is over hears nothing");
        let waiting_events = of(waiting).expect("the waiting parent is told");
        assert!(matches!(&waiting_events[..], [EventBody::Decision(d)]
            if d.status == Some(JobStatus::WaitingSubtasks) && !d.resumed && d.decision == "succeeded"));
        let ready_events = of(ready).expect("the ready parent");
        assert!(
            matches!(&ready_events[..], [EventBody::Decision(d), EventBody::JobState(s)]
            if d.resumed && d.decision == "failed" && s.status == JobStatus::Queued && s.attempt == 2)
        );
    }
}
