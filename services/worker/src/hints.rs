//! Dispatch hints. Besides its JetStream pull, the worker hears every dispatch of its profiles
//! as it is published, on a core NATS queue subscription of the same subjects (one worker of
//! the queue group hears each), and starts the job at once. JetStream hands the stored message
//! to a waiting pull only after the stream has stored it and the consumer has woken: 0.2 to
//! 3 ms later on a 2-core VM, the most variable hop of a job at concurrency 1.
//!
//! The JetStream message stays the durable record and the only thing acknowledged. When its
//! delivery reaches this worker while a hint runs (or ran) the job, the delivery waits for the
//! run's end and settles with its outcome, exactly as if it had run the job itself: acked once
//! the job's state is committed, redelivered after a retry delay, terminated with a dead letter.
//! A delivery that reaches another worker while the run goes on finds the job leased by this
//! one: that worker hands the delivery over (`<p>.workers.<worker_id>.handover`), and it waits
//! here for the run's end the same way. One that comes after the run finds the job settled (or
//! due for a retry) by its claim, as any second delivery of a job does. A hint that claims
//! nothing leaves the job to its delivery.
//!
//! [`Held`] is the bookkeeping: which jobs this worker holds, and through which path.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use maestro_domain::JobId;
use maestro_messaging::Outcome;
use tokio::sync::watch;

/// How a hinted run ended: `None` while it runs, `Some(None)` when it claimed nothing (the
/// delivery claims on its own), `Some(Some(outcome))` when it ran the job.
type End = Option<Option<Outcome>>;

/// The jobs this worker holds, by who took them: a JetStream delivery or a hint.
#[derive(Debug, Default)]
pub struct Held {
    jobs: Mutex<HashMap<JobId, Holder>>,
    next_hint: AtomicU64,
}

#[derive(Debug)]
enum Holder {
    Delivery,
    Hint { id: u64, end: watch::Receiver<End> },
}

/// What a delivery of a job does, given who holds it here.
#[derive(Debug)]
pub enum Take<'a> {
    /// A hint runs or ran the job: wait for its end.
    Hinted(Ending),
    /// The delivery holds the job (until the guard drops).
    Held(DeliveryHold<'a>),
    /// Another delivery of the job is being handled here: go on as without hints.
    Again,
}

impl Held {
    /// A delivery of `job` arrived.
    pub fn delivery(&self, job: JobId) -> Take<'_> {
        let mut jobs = self.jobs.lock().expect("lock");
        match jobs.get(&job) {
            Some(Holder::Hint { end, .. }) => {
                let end = end.clone();
                jobs.remove(&job);
                Take::Hinted(Ending(end))
            }
            Some(Holder::Delivery) => Take::Again,
            None => {
                jobs.insert(job, Holder::Delivery);
                Take::Held(DeliveryHold { held: self, job })
            }
        }
    }

    /// Another worker handed over a delivery of `job`: the end of the hinted run it waits for,
    /// if a hint runs (or ran) the job here and no delivery has taken its end yet.
    pub fn handed(&self, job: JobId) -> Option<Ending> {
        let mut jobs = self.jobs.lock().expect("lock");
        match jobs.get(&job) {
            Some(Holder::Hint { end, .. }) => {
                let end = end.clone();
                jobs.remove(&job);
                Some(Ending(end))
            }
            _ => None,
        }
    }

    /// A hint of `job` arrived: hold it for the hint, unless something holds it already or
    /// `limit` jobs are held.
    pub fn hint(&self, job: JobId, limit: usize) -> Option<HintHold> {
        let mut jobs = self.jobs.lock().expect("lock");
        if jobs.len() >= limit || jobs.contains_key(&job) {
            return None;
        }
        let id = self.next_hint.fetch_add(1, Ordering::Relaxed);
        let (end, ended) = watch::channel(None);
        jobs.insert(job, Holder::Hint { id, end: ended });
        Some(HintHold { job, id, end })
    }

    /// Whether a hint's hold still waits for its delivery.
    pub fn waits(&self, hold: &HintHold) -> bool {
        let jobs = self.jobs.lock().expect("lock");
        matches!(jobs.get(&hold.job), Some(Holder::Hint { id, .. }) if *id == hold.id)
    }

    /// Let go of a hint's hold if its delivery has not taken it (it went to another worker,
    /// or has not come yet: it will claim on its own).
    pub fn forget(&self, hold: &HintHold) {
        let mut jobs = self.jobs.lock().expect("lock");
        if matches!(jobs.get(&hold.job), Some(Holder::Hint { id, .. }) if *id == hold.id) {
            jobs.remove(&hold.job);
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.jobs.lock().expect("lock").is_empty()
    }
}

/// A delivery's hold of a job; released when dropped.
#[derive(Debug)]
pub struct DeliveryHold<'a> {
    held: &'a Held,
    job: JobId,
}

impl Drop for DeliveryHold<'_> {
    fn drop(&mut self) {
        let mut jobs = self.held.jobs.lock().expect("lock");
        if matches!(jobs.get(&self.job), Some(Holder::Delivery)) {
            jobs.remove(&self.job);
        }
    }
}

/// A hint's hold of a job, and where its run's end goes.
#[derive(Debug)]
pub struct HintHold {
    job: JobId,
    id: u64,
    end: watch::Sender<End>,
}

impl HintHold {
    /// The run ran the job to this outcome (`None`: it claimed nothing).
    pub fn end(&self, outcome: Option<Outcome>) {
        self.end.send_replace(Some(outcome));
    }
}

/// A hinted run's end, as its delivery waits for it.
#[derive(Debug)]
pub struct Ending(watch::Receiver<End>);

impl Ending {
    /// The run's outcome once it has ended; `None` when it claimed nothing (or stopped without
    /// saying), and the delivery must claim on its own.
    pub async fn outcome(mut self) -> Option<Outcome> {
        match self.0.wait_for(Option::is_some).await {
            Ok(end) => end.clone().flatten(),
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobId {
        JobId::new()
    }

    /// A hint of a new job, and its delivery waiting for the hinted run.
    fn hinted(held: &Held) -> (JobId, HintHold, Ending) {
        let job = job();
        let hold = held.hint(job, 8).expect("nothing holds the job");
        let Take::Hinted(ending) = held.delivery(job) else {
            panic!("the delivery must wait for the hint");
        };
        (job, hold, ending)
    }

    #[tokio::test]
    async fn a_delivery_settles_with_the_hinted_runs_outcome() {
        let held = Held::default();
        let job = job();
        let hold = held.hint(job, 8).expect("nothing holds the job");
        assert!(held.hint(job, 8).is_none(), "one hint per job");
        assert!(held.waits(&hold), "no delivery yet");
        let Take::Hinted(ending) = held.delivery(job) else {
            panic!("the delivery must wait for the hint");
        };
        assert!(held.is_empty(), "the delivery took the hold over");
        assert!(!held.waits(&hold));
        hold.end(Some(Outcome::Retry(std::time::Duration::from_secs(3))));
        assert_eq!(
            ending.outcome().await,
            Some(Outcome::Retry(std::time::Duration::from_secs(3)))
        );
        held.forget(&hold);
        assert!(held.is_empty());
    }

    #[tokio::test]
    async fn a_delivery_handed_over_by_another_worker_settles_with_the_hinted_run() {
        let held = Held::default();
        let job = job();
        assert!(held.handed(job).is_none(), "no hint runs it here");
        let hold = held.hint(job, 8).expect("nothing holds the job");
        let ending = held.handed(job).expect("the hint runs it");
        assert!(held.is_empty(), "the handed delivery took the hold over");
        assert!(held.handed(job).is_none(), "one delivery takes the end");
        hold.end(Some(Outcome::Done));
        assert_eq!(ending.outcome().await, Some(Outcome::Done));
        let Take::Held(_guard) = held.delivery(job) else {
            panic!("a delivery held here takes no hint's end");
        };
        assert!(
            held.handed(job).is_none(),
            "a delivery holds it, not a hint"
        );
    }

    #[tokio::test]
    async fn a_hint_that_claimed_nothing_leaves_the_job_to_its_delivery() {
        let held = Held::default();
        let (job, hold, ending) = hinted(&held);
        hold.end(None);
        assert_eq!(ending.outcome().await, None);
        drop(hold);
        let Take::Held(_guard) = held.delivery(job) else {
            panic!("a later delivery holds the job itself");
        };
    }

    #[tokio::test]
    async fn a_hint_that_stopped_without_an_end_leaves_the_job_to_its_delivery() {
        let held = Held::default();
        let (_, hold, ending) = hinted(&held);
        drop(hold);
        assert_eq!(ending.outcome().await, None);
    }

    #[test]
    fn hints_wait_behind_deliveries_and_the_limit() {
        let held = Held::default();
        let (first, second) = (job(), job());
        let Take::Held(guard) = held.delivery(first) else {
            panic!("nothing held the job");
        };
        assert!(held.hint(first, 8).is_none(), "its delivery has it");
        assert!(matches!(held.delivery(first), Take::Again));
        assert!(held.hint(second, 1).is_none(), "one job held, limit one");
        drop(guard);
        assert!(held.is_empty());
        let hold = held.hint(first, 1).expect("the delivery let go");
        held.forget(&hold);
        assert!(held.is_empty(), "a forgotten hint holds nothing");
        let Take::Held(_) = held.delivery(first) else {
            panic!("a forgotten hint leaves the job to its delivery");
        };
    }
}
