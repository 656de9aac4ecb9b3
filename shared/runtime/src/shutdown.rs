//! Shutdown on SIGTERM or SIGINT: the first signal cancels the returned token (services stop
//! taking work and drain), a second one exits at once.

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM/SIGINT. The handlers are installed before this
/// returns and kept for the life of the process, so no signal falls between the first and
/// the second.
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    tokio::spawn(async move {
        next_signal(&mut term, &mut int).await;
        tracing::info!("shutdown requested; draining (send the signal again to exit now)");
        cancel.cancel();
        next_signal(&mut term, &mut int).await;
        tracing::warn!("second signal: exiting immediately");
        std::process::exit(130);
    });
    token
}

async fn next_signal(term: &mut Signal, int: &mut Signal) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
