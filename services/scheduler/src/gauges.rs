//! The gauges only a look can tell, read every `METRICS_POLL_MS`: jobs by active status and
//! the outbox's lag from Postgres, and from JetStream each stream's messages and each durable
//! consumer's pending, unacknowledged and redelivered counts. Any scheduler may read them;
//! with several, each reports the same figures (Prometheus tells them apart by `instance`).

use std::time::Duration;

use futures::TryStreamExt;
use maestro_db::PgPool;
use maestro_messaging::Bus;
use maestro_messaging::setup;
use maestro_runtime::metrics::{
    CONSUMER_ACK_PENDING, CONSUMER_PENDING, CONSUMER_REDELIVERED, JOBS, OUTBOX_LAG, STREAM_MESSAGES,
};
use tokio_util::sync::CancellationToken;

/// Reads and records the gauges.
#[derive(Debug, Clone)]
pub struct Gauges {
    pub pool: PgPool,
    pub bus: Bus,
    pub interval: Duration,
}

/// The streams, by the role that names them (a bounded label).
const STREAMS: [&str; 7] = [
    setup::JOBS,
    setup::EVENTS,
    setup::DELTAS,
    setup::NOTIFY,
    setup::WEBHOOKS,
    setup::OPERATIONS,
    setup::SIGNALS,
];

impl Gauges {
    pub async fn run(self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            if let Err(e) = self.database().await {
                tracing::debug!(error = %e, "cannot read the job gauges");
            }
            for role in STREAMS {
                if let Err(e) = self.stream(role).await {
                    tracing::debug!(error = %e, role, "cannot read a stream's gauges");
                }
            }
        }
    }

    async fn database(&self) -> sqlx::Result<()> {
        for (status, count) in maestro_db::stats::active_jobs(&self.pool).await? {
            metrics::gauge!(JOBS, "status" => status).set(count as f64);
        }
        let lag = maestro_db::stats::outbox_lag(&self.pool).await?;
        metrics::gauge!(OUTBOX_LAG).set(lag);
        Ok(())
    }

    async fn stream(&self, role: &'static str) -> anyhow::Result<()> {
        let mut stream = self
            .bus
            .js
            .get_stream(self.bus.subjects.stream(role))
            .await?;
        let messages = stream.info().await?.state.messages;
        metrics::gauge!(STREAM_MESSAGES, "stream" => role).set(messages as f64);
        let mut consumers = stream.consumers();
        while let Some(info) = consumers.try_next().await? {
            // Ordered consumers (the gateway's and workers' followers) have made-up names:
            // only durable ones are reported, so the labels stay bounded.
            let Some(name) = info.config.durable_name.clone() else {
                continue;
            };
            let labels = [("stream", role.to_owned()), ("consumer", name)];
            metrics::gauge!(CONSUMER_PENDING, &labels).set(info.num_pending as f64);
            metrics::gauge!(CONSUMER_ACK_PENDING, &labels).set(info.num_ack_pending as f64);
            metrics::gauge!(CONSUMER_REDELIVERED, &labels).set(info.num_redelivered as f64);
        }
        Ok(())
    }
}
