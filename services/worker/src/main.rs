//! `maestro-worker`: runs jobs.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::service_main(
        "worker",
        maestro_worker::Settings::from_env,
        maestro_worker::run,
    )
    .await
}
