//! `maestro-api-gateway`: the HTTP API.

use maestro_runtime::{Env, telemetry};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::init_process();
    let env = Env::from_process();
    let _telemetry = telemetry::init(&telemetry::TelemetrySettings::from_env(
        &env,
        "api-gateway",
    )?);
    let settings = maestro_api_gateway::Settings::from_env(&env)?;
    if env.opt("API_TOKENS").is_none() {
        tracing::warn!("API_TOKENS is not set: only the local development token is accepted");
    }
    tracing::info!(?settings, "starting api-gateway");
    let shutdown = maestro_runtime::shutdown::on_signal();
    maestro_api_gateway::serve(settings, shutdown).await
}
