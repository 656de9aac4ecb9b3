//! `maestro-scheduler`: the outbox relay, the subtask join and re-dispatch of stalled jobs.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::service_main(
        "scheduler",
        maestro_scheduler::Settings::from_env,
        maestro_scheduler::run,
    )
    .await
}
