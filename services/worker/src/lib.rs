//! The worker: pulls job dispatches from JetStream, claims each job atomically in Postgres,
//! runs its agent loop against the LLM (streaming deltas live, executing tools through the
//! tool-runner), commits every message and tool result as events, and acknowledges the
//! dispatch only after the job's new state is committed.

pub mod agent;
pub mod claimer;
pub mod config;
pub mod conversation;
pub mod deltas;
pub mod handler;
pub mod hints;
pub mod signals;
#[cfg(test)]
mod testing;
pub mod tool_client;

use std::sync::Arc;

use anyhow::Context as _;
use maestro_messaging::RunnerConfig;
use maestro_messaging::setup::{self, ConsumerSettings};
use maestro_runtime::Infra;
use tokio_util::sync::CancellationToken;

/// Claims that wait together are made in one statement, this many at the most.
const CLAIMS_PER_STATEMENT: usize = 32;

pub use config::Settings;

/// Run the worker until `shutdown` is cancelled. Then it takes no new job; jobs in flight may
/// finish within `SHUTDOWN_GRACE_MS`, after which they are handed back (`queued`) at their
/// next safe point and dispatched again at once, for another worker.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let Infra { pool, bus } = Infra::connect(&settings.common, "maestro-worker").await?;
    let consumer_settings = ConsumerSettings {
        ack_wait: settings.ack_wait,
        max_deliver: settings.max_deliver,
        max_ack_pending: 10_000,
    };
    let mut consumers = Vec::with_capacity(settings.profiles.len());
    for profile in &settings.profiles {
        consumers
            .push(setup::jobs_consumer(&bus.js, &bus.subjects, profile, &consumer_settings).await?);
    }
    let llm = maestro_llm::LlmClient::new(settings.llm.clone()).context("build the LLM client")?;
    let runner = RunnerConfig {
        name: "jobs",
        concurrency: settings.concurrency,
        heartbeat: settings.ack_wait / 3,
        max_deliver: settings.max_deliver,
        // Short pull requests: after shutdown, no request is left pending on the server to
        // deliver a job into a consumer that no longer reads.
        fetch_expires: std::time::Duration::from_secs(1),
    };
    let release = CancellationToken::new();
    tokio::spawn({
        let (shutdown, release, grace) =
            (shutdown.clone(), release.clone(), settings.shutdown_grace);
        async move {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
            release.cancel();
        }
    });
    let operations = setup::OperationOutcomes::new(bus.js.clone(), &bus.subjects);
    let policy = Arc::new(settings.policy.clone());
    let catalog = Arc::new(settings.catalog.clone());
    let signals = signals::Signals::default();
    tokio::spawn(signals.clone().listen(bus.clone(), shutdown.clone()));
    let claimer = claimer::Claimer::new(
        pool.clone(),
        claimer::ClaimSettings {
            worker_id: settings.worker_id.clone(),
            lease: settings.ack_wait,
            most: CLAIMS_PER_STATEMENT,
            models: settings.models.clone(),
        },
    );
    let worker = (
        settings.worker_id.clone(),
        settings.profiles.clone(),
        settings.models.clone(),
    );
    maestro_db::workers::seen(&pool, &worker.0, &worker.1, &worker.2)
        .await
        .context("register the worker")?;
    let heartbeat = tokio::spawn(say_seen(pool.clone(), worker.clone(), shutdown.clone()));
    let mcp_tools: Arc<tokio::sync::Mutex<_>> = Arc::default();
    tokio::spawn(forget_changed_listings(
        bus.clone(),
        mcp_tools.clone(),
        shutdown.clone(),
    ));
    let hints = if settings.dispatch_hints {
        let joined = bus
            .nats
            .subscribe(bus.subjects.workers_joined())
            .await
            .context("subscribe to joining workers")?;
        let handovers = bus
            .nats
            .subscribe(bus.subjects.handover(&settings.worker_id))
            .await
            .context("subscribe to handed-over deliveries")?;
        Some((
            hint_subscriptions(&bus, &settings.profiles).await?,
            handovers,
            joined,
        ))
    } else {
        None
    };
    // Said with hints off too: this worker's deliveries compete with the others' hints.
    say_joined(&bus, &worker).await;
    let handler = Arc::new(handler::JobHandler::new(handler::Deps {
        pool: pool.clone(),
        bus: bus.clone(),
        llm,
        settings: Arc::new(settings),
        release,
        policy,
        catalog,
        operations,
        mcp_tools,
        offers: Arc::default(),
        signals,
        claimer,
    }));
    let hints = hints.map(|(hints, handovers, joined)| {
        tokio::spawn(watch_company(
            pool.clone(),
            worker.clone(),
            handler.clone(),
            joined,
            shutdown.clone(),
        ));
        let handovers = tokio::spawn(
            handler
                .clone()
                .follow_handovers(handovers, shutdown.clone()),
        );
        (
            tokio::spawn(handler.clone().follow_hints(hints, shutdown.clone())),
            handovers,
        )
    });
    maestro_runtime::announce_ready("worker", None);
    futures::future::join_all(consumers.into_iter().map(|consumer| {
        maestro_messaging::consumer::run(
            consumer,
            handler.clone(),
            runner.clone(),
            shutdown.clone(),
        )
    }))
    .await;
    if let Some((hints, handovers)) = hints {
        let _ = hints.await;
        let _ = handovers.await;
        handler.hinted_done().await;
    }
    heartbeat.abort();
    bus.finish().await;
    if let Err(e) = maestro_db::workers::gone(&pool, &worker.0).await {
        tracing::warn!(error = %e, "cannot say this worker has stopped");
    }
    Ok(())
}

/// The dispatches of `profiles` as they are published (see [`hints`]): a core queue
/// subscription per profile, one worker of the group hearing each.
async fn hint_subscriptions(
    bus: &maestro_messaging::Bus,
    profiles: &[String],
) -> anyhow::Result<futures::stream::SelectAll<async_nats::Subscriber>> {
    let mut subscriptions = Vec::with_capacity(profiles.len());
    for profile in profiles {
        let subscription = bus
            .nats
            .queue_subscribe(bus.subjects.dispatch(profile), format!("workers_{profile}"))
            .await
            .context("subscribe to the dispatch hints")?;
        subscriptions.push(subscription);
    }
    Ok(futures::stream::select_all(subscriptions))
}

/// Say on `<p>.workers.joined` that this worker is here (it is in the `workers` table already
/// and takes no job yet), so that workers of its profiles stop their early first LLM calls at
/// once rather than at their next look at the table ([`watch_company`]).
async fn say_joined(
    bus: &maestro_messaging::Bus,
    (id, profiles, _): &(String, Vec<String>, Vec<String>),
) {
    let joined = maestro_messaging::payloads::WorkerJoined {
        worker_id: id.clone(),
        profiles: profiles.clone(),
    };
    let payload = serde_json::to_vec(&joined).expect("a joined notice serializes");
    let subject = bus.subjects.workers_joined();
    let said = match bus.nats.publish(subject, payload.into()).await {
        Ok(()) => bus.nats.flush().await.map_err(anyhow::Error::from),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = said {
        tracing::warn!(error = %e, "cannot say this worker has joined");
    }
}

/// Send a hinted job's first LLM call beside its claim only while no other worker serves this
/// worker's profiles (looked at every second, and at once when one says it has joined): with
/// company, the job's JetStream delivery could reach the other worker and be claimed there
/// first, and the call would be paid for nothing.
async fn watch_company(
    pool: maestro_db::PgPool,
    (id, profiles, _): (String, Vec<String>, Vec<String>),
    handler: Arc<handler::JobHandler>,
    mut joined: async_nats::Subscriber,
    shutdown: CancellationToken,
) {
    use futures::StreamExt as _;
    let recently = maestro_db::workers::HEARTBEAT * 3;
    let mut ticks = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            Some(notice) = joined.next() => {
                let notice = serde_json::from_slice::<maestro_messaging::payloads::WorkerJoined>(
                    &notice.payload,
                );
                if notice.is_ok_and(|joined| joined.is_company_of(&id, &profiles)) {
                    handler.set_alone(false);
                }
                continue;
            }
            () = shutdown.cancelled() => return,
        }
        match maestro_db::workers::others_serving(&pool, &id, &profiles, recently).await {
            Ok(others) => handler.set_alone(!others),
            Err(e) => {
                tracing::warn!(error = %e, "cannot tell whether other workers serve these profiles");
                handler.set_alone(false);
            }
        }
    }
}

/// Say every [`maestro_db::workers::HEARTBEAT`] that this worker is up and what it serves.
async fn say_seen(
    pool: maestro_db::PgPool,
    (id, profiles, models): (String, Vec<String>, Vec<String>),
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(maestro_db::workers::HEARTBEAT);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shutdown.cancelled() => return,
        }
        if let Err(e) = maestro_db::workers::seen(&pool, &id, &profiles, &models).await {
            tracing::warn!(error = %e, "cannot say this worker is up");
        }
    }
}

/// An MCP server told a tool-runner its tool list changed (`<p>.tools.mcp.changed`): its
/// listings are forgotten, and the next job lists it again.
async fn forget_changed_listings(
    bus: maestro_messaging::Bus,
    listings: Arc<
        tokio::sync::Mutex<
            std::collections::BTreeMap<String, Vec<maestro_domain::tools::ToolSpec>>,
        >,
    >,
    shutdown: CancellationToken,
) {
    use futures::StreamExt as _;
    let mut changes = match bus.nats.subscribe(bus.subjects.mcp_changed()).await {
        Ok(changes) => changes,
        Err(e) => {
            tracing::warn!(error = %e, "cannot follow MCP tool-list changes");
            return;
        }
    };
    while let Some(Some(change)) = shutdown.run_until_cancelled(changes.next()).await {
        let server = String::from_utf8_lossy(&change.payload).into_owned();
        tracing::info!(%server, "an MCP server's tools changed; listing it again next job");
        agent::forget_listing(&listings, &server).await;
    }
}
