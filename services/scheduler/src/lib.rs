//! The scheduler: MAESTRO's timekeeper. It runs the outbox relay (the only publisher of
//! events, notifications and webhook deliveries to JetStream) and re-dispatches jobs that
//! should be running but are not.

pub mod config;
pub mod redispatch;
pub mod relay;

use anyhow::Context as _;
use maestro_messaging::Subjects;
use maestro_messaging::setup::{self, StreamSettings};
use tokio_util::sync::CancellationToken;

pub use config::Settings;

/// Run the relay and the re-dispatcher until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let subjects = Subjects::new(&settings.common.subject_prefix).context("SUBJECT_PREFIX")?;
    let pool = maestro_db::connect(
        &settings.common.database_url,
        settings.common.db_max_connections,
    )
    .await
    .context("connect to Postgres")?;
    if settings.common.migrate_on_start {
        maestro_db::migrate(&pool)
            .await
            .context("apply migrations")?;
    }
    let nats = maestro_messaging::connect(&settings.common.nats_url, "maestro-scheduler")
        .await
        .context("connect to NATS")?;
    let js = async_nats::jetstream::new(nats);
    setup::ensure_streams(&js, &subjects, &StreamSettings::default()).await?;
    let relay = relay::Relay {
        pool: pool.clone(),
        js: js.clone(),
        subjects: subjects.clone(),
        batch: settings.relay_batch,
        poll: settings.relay_poll,
    };
    let redispatcher = redispatch::Redispatcher {
        pool,
        js,
        subjects,
        interval: settings.redispatch_interval,
        grace: settings.redispatch_grace,
    };
    maestro_runtime::announce_ready("scheduler", None);
    tokio::join!(relay.run(shutdown.clone()), redispatcher.run(shutdown));
    Ok(())
}
