//! `maestro-worker`: runs jobs.

use maestro_runtime::{Env, telemetry};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::init_process();
    let env = Env::from_process();
    let _telemetry = telemetry::init(&telemetry::TelemetrySettings::from_env(&env, "worker")?);
    let settings = maestro_worker::Settings::from_env(&env)?;
    tracing::info!(?settings, "starting worker");
    let shutdown = maestro_runtime::shutdown::on_signal();
    maestro_worker::run(settings, shutdown).await
}
