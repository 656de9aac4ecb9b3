//! The notifier: delivers notifications (recorded with the state change that causes them, as
//! an inbox row, a message on `<prefix>.notify.<type>` and one pending delivery per webhook
//! subscription) to webhook subscriptions, signed per Standard Webhooks and retried with
//! backoff; queues and delivers A2A push notifications the same way.

pub mod a2a_push;
pub mod config;
pub mod notifications;
pub mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use maestro_messaging::setup::{self, ConsumerSettings};
use maestro_messaging::{Delivery, RunnerConfig};
use maestro_runtime::Infra;
use tokio_util::sync::CancellationToken;

pub use config::Settings;

/// Run the consumers (job states for A2A pushes, webhook and push deliveries) until
/// `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let Infra { pool, bus } = Infra::connect(&settings.common, "maestro-notifier").await?;
    let (js, subjects) = (&bus.js, &bus.subjects);
    let events_settings = ConsumerSettings {
        ack_wait: Duration::from_secs(30),
        max_deliver: 20,
        max_ack_pending: 1000,
    };
    let states = setup::job_state_consumer(js, subjects, &events_settings).await?;
    // Job states reach the notifier as copies on their own subject now (only those of tasks
    // with A2A push configs), not from every `job_state` event of the events stream.
    setup::retire_consumer(js, subjects, setup::EVENTS, "notifier_job_states").await?;
    // Decisions' notices are recorded with the decision now (before, this consumer did it).
    setup::retire_consumer(js, subjects, setup::SIGNALS, "notifier_decisions").await?;
    let hook_settings = ConsumerSettings {
        ack_wait: settings.webhook_timeout * 3,
        max_deliver: settings.webhook_max_attempts,
        max_ack_pending: 1000,
    };
    let hooks = setup::webhook_consumer(js, subjects, &hook_settings).await?;
    let pushes = setup::a2a_push_consumer(js, subjects, &hook_settings).await?;
    let http = maestro_runtime::http_client()
        .timeout(settings.webhook_timeout)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .context("build the HTTP client")?;
    let state_handler = Arc::new(notifications::JobStateHandler {
        pool: pool.clone(),
        bus: bus.clone(),
    });
    let hook_handler = Arc::new(webhooks::DeliveryHandler {
        pool: pool.clone(),
        bus: bus.clone(),
        disable_after: settings.webhook_disable_after,
        http: http.clone(),
        retry_base: settings.retry_base,
        retry_max: settings.retry_max,
        hold: webhooks::hold(settings.webhook_timeout),
    });
    let push_handler = Arc::new(a2a_push::PushHandler {
        pool,
        http,
        retry_base: settings.retry_base,
        retry_max: settings.retry_max,
        hold: webhooks::hold(settings.webhook_timeout),
    });
    let state_runner = RunnerConfig {
        name: "job_states",
        concurrency: 16,
        heartbeat: Duration::from_secs(10),
        max_deliver: events_settings.max_deliver,
        fetch_expires: Duration::from_secs(5),
    };
    let hook_runner = RunnerConfig {
        name: "webhooks",
        concurrency: settings.concurrency,
        heartbeat: settings.webhook_timeout,
        max_deliver: hook_settings.max_deliver,
        fetch_expires: Duration::from_secs(5),
    };
    let push_runner = RunnerConfig {
        name: "a2a_push",
        ..hook_runner.clone()
    };
    maestro_runtime::announce_ready("notifier", None);
    tokio::join!(
        maestro_messaging::consumer::run(states, state_handler, state_runner, shutdown.clone()),
        maestro_messaging::consumer::run(hooks, hook_handler, hook_runner, shutdown.clone()),
        maestro_messaging::consumer::run(pushes, push_handler, push_runner, shutdown),
    );
    Ok(())
}

/// Keep a message the notifier gives up on.
pub(crate) async fn record_dead_letter(
    pool: &maestro_db::PgPool,
    consumer: &str,
    delivery: &Delivery,
    reason: &str,
) {
    let letter = maestro_db::dead_letters::DeadLetter {
        consumer,
        subject: &delivery.message.subject,
        payload: &delivery.message.payload,
        reason,
        attempts: delivery.attempt as i32,
    };
    metrics::counter!(maestro_runtime::metrics::DEAD_LETTERS, "consumer" => consumer.to_owned())
        .increment(1);
    if let Err(e) = maestro_db::dead_letters::record(pool, letter).await {
        tracing::error!(error = %e, reason, "cannot record a dead letter");
    }
}
