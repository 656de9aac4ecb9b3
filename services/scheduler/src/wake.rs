//! A loop that does its work when woken by a core NATS subject, and on a slow poll in case a
//! wake-up is lost. Wake-ups that pile up while the work runs count once: the run that follows
//! covers them.

use std::future::Future;
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use tokio_util::sync::CancellationToken;

/// Run `work` now, on every wake-up on `subject`, and every `poll`, until `shutdown`; then once
/// more. `what` names the work in logs.
pub async fn run<F, Fut>(
    nats: &async_nats::Client,
    subject: String,
    poll: Duration,
    shutdown: CancellationToken,
    what: &str,
    mut work: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<usize>>,
{
    let timed = || {
        let done = work();
        async move {
            match done.await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(n, "{what} done"),
                Err(e) => return Err(e),
            }
            Ok(poll)
        }
    };
    run_timed(nats, subject, shutdown, what, timed).await;
    // Once more, so what was committed before the signal is not left for the next start.
    let _ = work().await;
}

/// Run `work` now, on every wake-up on `subject`, and after the time each run returns, until
/// `shutdown`. A failed run is retried after half a second.
pub async fn run_timed<F, Fut>(
    nats: &async_nats::Client,
    subject: String,
    shutdown: CancellationToken,
    what: &str,
    mut work: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Duration>>,
{
    let mut wakes = match nats.subscribe(subject).await {
        Ok(wakes) => Some(wakes),
        Err(e) => {
            tracing::warn!(error = %e, "cannot subscribe to {what} wake-ups; polling");
            None
        }
    };
    while !shutdown.is_cancelled() {
        if let Some(wakes) = wakes.as_mut() {
            while let Some(Some(_)) = wakes.next().now_or_never() {}
        }
        let sleep = match work().await {
            Ok(sleep) => sleep,
            Err(e) => {
                tracing::warn!(error = %e, "{what} failed; retrying");
                Duration::from_millis(500)
            }
        };
        let woken = async {
            match wakes.as_mut() {
                Some(wakes) => {
                    wakes.next().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(sleep) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}
