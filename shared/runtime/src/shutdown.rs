//! Shutdown on SIGTERM or SIGINT: the first signal cancels the returned token (services stop
//! taking work and drain), a second one exits at once.

use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM/SIGINT.
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested; draining (send the signal again to exit now)");
        cancel.cancel();
        wait_for_signal().await;
        tracing::warn!("second signal: exiting immediately");
        std::process::exit(130);
    });
    token
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
