//! `maestro-tool-runner`: executes tool calls inside task workspaces.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::service_main(
        "tool-runner",
        maestro_tool_runner::Settings::from_env,
        maestro_tool_runner::run,
    )
    .await
}
