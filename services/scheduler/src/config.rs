//! Settings of the scheduler, from the environment.

use std::time::Duration;

use maestro_runtime::env::CommonSettings;
use maestro_runtime::{ConfigError, Env};

/// How the scheduler runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub common: CommonSettings,
    /// Outbox rows published per transaction.
    pub relay_batch: i64,
    /// Fallback poll of the outbox when no notification arrives.
    pub relay_poll: Duration,
    /// How often to look for jobs that should be running but are not.
    pub redispatch_interval: Duration,
    /// How often the job, outbox and JetStream gauges are read (`gauges.rs`).
    pub metrics_poll: Duration,
    /// How long a job may sit queued (or a due retry, or an expired lease) before it is
    /// dispatched again.
    pub redispatch_grace: Duration,
    /// Fallback poll of the subtask join when no wake-up arrives.
    pub join_poll: Duration,
    /// Schedules fired per transaction.
    pub schedule_batch: i64,
    /// A fire taken later than this after its time counts as missed (downtime).
    pub schedule_grace: Duration,
    /// How often queued runs (overlap `queue`) are looked at while any wait.
    pub schedule_queue_poll: Duration,
    /// Attempts of each scheduled task's job (as the gateway's `JOB_MAX_ATTEMPTS`).
    pub job_max_attempts: i32,
}

impl Settings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            common: CommonSettings::from_env(env)?,
            relay_batch: env.parse("RELAY_BATCH", 500)?,
            relay_poll: env.millis("RELAY_POLL_MS", Duration::from_secs(1))?,
            redispatch_interval: env.millis("REDISPATCH_INTERVAL_MS", Duration::from_secs(5))?,
            metrics_poll: env.millis("METRICS_POLL_MS", Duration::from_secs(15))?,
            redispatch_grace: env.millis("REDISPATCH_GRACE_MS", Duration::from_secs(30))?,
            join_poll: env.millis("SUBTASK_JOIN_POLL_MS", Duration::from_secs(2))?,
            schedule_batch: env.parse("SCHEDULE_BATCH", 200)?,
            schedule_grace: env.millis("SCHEDULE_MISFIRE_GRACE_MS", Duration::from_secs(60))?,
            schedule_queue_poll: env.millis("SCHEDULE_QUEUE_POLL_MS", Duration::from_secs(1))?,
            job_max_attempts: env.parse("JOB_MAX_ATTEMPTS", 5)?,
        })
    }
}
