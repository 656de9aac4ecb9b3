//! `maestro-api-gateway`: the HTTP API.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::service_main(
        "api-gateway",
        maestro_api_gateway::Settings::from_env,
        maestro_api_gateway::serve,
    )
    .await
}
