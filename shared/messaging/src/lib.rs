//! MAESTRO's messaging layer over NATS JetStream.
//!
//! This crate owns every subject name ([`Subjects`]), the payloads that travel on them
//! ([`payloads`]), idempotent stream and consumer setup ([`setup`]), publishing with
//! `Nats-Msg-Id` de-duplication and trace headers ([`publish`]) and the one consumer runner
//! that turns a handler's [`Outcome`] into `ack`, `nak(delay)` or `term` ([`consumer`]), and
//! the one place where what follows a commit happens ([`Bus::after_commit`]).

pub mod backoff;
pub mod bus;
pub mod consumer;
pub mod payloads;
pub mod publish;
pub mod setup;
pub mod subjects;
pub mod trace;

pub use bus::{AfterCommit, Bus};
pub use consumer::{Delivery, Handler, Outcome, RunnerConfig};
pub use subjects::{InvalidPrefix, Subjects};

/// Messages buffered per subscription before the slowest are dropped.
pub const SUBSCRIPTION_CAPACITY: usize = 4096;

/// Connect to NATS with the options every MAESTRO service uses: endless reconnects, a name
/// that shows up in server monitoring, and a bounded buffer per subscription (a subscriber
/// that falls behind loses live messages rather than growing without limit; MAESTRO's
/// consumers of live messages refill from durable sources).
pub async fn connect(
    url: &str,
    name: &str,
) -> Result<async_nats::Client, async_nats::ConnectError> {
    // `NATS_URL` may list several servers (`nats://a:4222,nats://b:4222`): the seeds of a
    // cluster. The client tries them in turn, learns the rest of the cluster from the one it
    // reaches, and reconnects to any that is up.
    let servers: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    async_nats::ConnectOptions::new()
        .name(name)
        .retry_on_initial_connect()
        .max_reconnects(None)
        .subscription_capacity(SUBSCRIPTION_CAPACITY)
        .connect(servers)
        .await
}
