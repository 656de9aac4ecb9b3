//! `maestro-scheduler`: the outbox relay and re-dispatch of stalled jobs.

use maestro_runtime::{Env, telemetry};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::init_process();
    let env = Env::from_process();
    let _telemetry = telemetry::init(&telemetry::TelemetrySettings::from_env(&env, "scheduler")?);
    let settings = maestro_scheduler::Settings::from_env(&env)?;
    tracing::info!(?settings, "starting scheduler");
    let shutdown = maestro_runtime::shutdown::on_signal();
    maestro_scheduler::run(settings, shutdown).await
}
