//! Re-dispatch of jobs that should be running but are not: `queued` jobs whose dispatch never
//! reached the stream (a crash between commit and publish), `retry` jobs whose time has come
//! and `running` jobs whose lease expired without redelivery. The dispatch id
//! (`dispatch:<job>:<attempt>`) matches the original, so JetStream drops it while the
//! original is still in its duplicate window; a stale duplicate is harmless because claims
//! are compare-and-set.

use std::time::Duration;

use maestro_db::PgPool;
use maestro_messaging::Bus;
use tokio_util::sync::CancellationToken;

/// Stalled jobs taken per scan.
const SCAN_BATCH: i64 = 200;

/// Finds and re-dispatches stalled jobs.
#[derive(Debug, Clone)]
pub struct Redispatcher {
    pub pool: PgPool,
    pub bus: Bus,
    pub interval: Duration,
    pub grace: Duration,
}

impl Redispatcher {
    pub async fn run(self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            if let Err(e) = self.once().await {
                tracing::warn!(error = %e, "re-dispatch scan failed");
            }
        }
    }

    /// One scan; returns how many jobs were dispatched again.
    pub async fn once(&self) -> anyhow::Result<usize> {
        let stalled = maestro_db::jobs::take_stalled(&self.pool, self.grace, SCAN_BATCH).await?;
        if stalled.is_empty() {
            return Ok(0);
        }
        for stalled in &stalled {
            let job = &stalled.job;
            tracing::info!(job_id = %job.job_id, attempt = job.attempt, reason = %stalled.reason, "job dispatched again");
        }
        // Each re-dispatch wrote a `redispatch` event.
        let jobs = stalled.iter().map(|s| &s.job);
        self.bus.after_commit(crate::dispatch_all(jobs)).await;
        Ok(stalled.len())
    }
}
