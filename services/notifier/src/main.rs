//! `maestro-notifier`: notifications and webhooks.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::service_main(
        "notifier",
        maestro_notifier::Settings::from_env,
        maestro_notifier::run,
    )
    .await
}
