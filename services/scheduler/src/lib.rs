//! The scheduler: MAESTRO's timekeeper. It fires schedules (cron tasks, `fire`), runs the
//! outbox relay (the only publisher of events, notifications and webhook deliveries to
//! JetStream), the subtask join (a parent waiting for its subtasks is queued again once they
//! are over) and re-dispatches jobs that should be running but are not.

pub mod config;
pub mod fire;
pub mod gauges;
pub mod joiner;
pub mod redispatch;
pub mod relay;
mod wake;

use maestro_db::jobs::ToDispatch;
use maestro_messaging::AfterCommit;
use maestro_messaging::payloads::JobDispatch;
use maestro_runtime::Infra;
use tokio_util::sync::CancellationToken;

pub use config::Settings;

/// Run the relay, the subtask join and the re-dispatcher until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let Infra { pool, bus } = Infra::connect(&settings.common, "maestro-scheduler").await?;
    let relay = relay::Relay {
        pool: pool.clone(),
        bus: bus.clone(),
        batch: settings.relay_batch,
        poll: settings.relay_poll,
    };
    let joiner = joiner::Joiner {
        pool: pool.clone(),
        bus: bus.clone(),
        poll: settings.join_poll,
    };
    let firer = fire::Firer {
        pool: pool.clone(),
        bus: bus.clone(),
        batch: settings.schedule_batch,
        grace: chrono::TimeDelta::from_std(settings.schedule_grace)?,
        queue_poll: settings.schedule_queue_poll,
        idle: std::time::Duration::from_secs(60),
        max_attempts: settings.job_max_attempts,
    };
    let gauges = gauges::Gauges {
        pool: pool.clone(),
        bus: bus.clone(),
        interval: settings.metrics_poll,
    };
    let redispatcher = redispatch::Redispatcher {
        pool,
        bus,
        interval: settings.redispatch_interval,
        grace: settings.redispatch_grace,
    };
    maestro_runtime::announce_ready("scheduler", None);
    tokio::join!(
        relay.run(shutdown.clone()),
        joiner.run(shutdown.clone()),
        firer.run(shutdown.clone()),
        gauges.run(shutdown.clone()),
        redispatcher.run(shutdown)
    );
    Ok(())
}

/// What follows a commit that queued `jobs` (again): its events, then each job's dispatch (a
/// dispatch lost here is sent again by the re-dispatcher: the job is `queued`).
fn dispatch_all<'a>(jobs: impl IntoIterator<Item = &'a ToDispatch>) -> AfterCommit {
    jobs.into_iter().fold(AfterCommit::events(), |after, job| {
        let dispatch = JobDispatch {
            job_id: job.job_id,
            task_id: job.task_id,
            attempt: job.attempt,
            fresh: false,
            opening: None,
        };
        after.dispatch(&job.profile, dispatch)
    })
}
