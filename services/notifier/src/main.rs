//! `maestro-notifier`: notifications and webhooks.

use maestro_runtime::{Env, telemetry};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::init_process();
    let env = Env::from_process();
    let _telemetry = telemetry::init(&telemetry::TelemetrySettings::from_env(&env, "notifier")?);
    let settings = maestro_notifier::Settings::from_env(&env)?;
    tracing::info!(?settings, "starting notifier");
    let shutdown = maestro_runtime::shutdown::on_signal();
    maestro_notifier::run(settings, shutdown).await
}
