//! `maestro-tool-runner`: executes tool calls inside task workspaces.

use maestro_runtime::{Env, telemetry};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::init_process();
    let env = Env::from_process();
    let _telemetry = telemetry::init(&telemetry::TelemetrySettings::from_env(
        &env,
        "tool-runner",
    )?);
    let settings = maestro_tool_runner::Settings::from_env(&env)?;
    tracing::info!(?settings, "starting tool-runner");
    let shutdown = maestro_runtime::shutdown::on_signal();
    maestro_tool_runner::run(settings, shutdown).await
}
