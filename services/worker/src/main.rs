//! `maestro-worker`: runs jobs.

// A job builds and drops many small JSON values (events, requests, replies); with the
// system allocator a quarter of the worker's CPU was malloc and free (`perf`, c=64).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    maestro_runtime::service_main(
        "worker",
        maestro_worker::Settings::from_env,
        maestro_worker::run,
    )
    .await
}
