//! The one consumer runner. A handler looks at a delivery and decides an [`Outcome`]; only
//! this runner turns that into `ack` (done), `nak` with a delay (retry later) or `term` plus a
//! dead-letter record (poison, or retries exhausted). While a handler runs, the runner sends
//! `in progress` acks so a long job keeps its delivery. Handlers acknowledge nothing
//! themselves, and return only once their effect is committed. A handler may hand a delivery
//! to another process instead ([`Outcome::HandedOver`]), which settles it by the same rules
//! ([`handed`], [`settle_handed`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::PullConsumer};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How long past its expiry a pull request is waited for. The server ends an expired request
/// with a status message; `nats-server` 2.9 sometimes does not, and the client library then
/// waits 5 s more — messages published meanwhile sat undelivered (seen as a 5 s tail in
/// `maestro-bench`). Past this grace the runner gives the request up and pulls again.
const PULL_GRACE: Duration = Duration::from_millis(500);

/// What to do with a delivered message once the handler is done with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Processed (or nothing to do): acknowledge.
    Done,
    /// Not now: redeliver after this delay.
    Retry(Duration),
    /// Can never succeed: terminate it and record a dead letter.
    Poison(String),
    /// Handed to another process, which settles it ([`handed`]): nothing is sent from here.
    HandedOver,
}

/// A delivered message and where it is in its delivery history.
#[derive(Debug)]
pub struct Delivery {
    pub message: jetstream::Message,
    /// 1 for the first delivery.
    pub attempt: u64,
    /// The consumer's `max_deliver` (non-positive: unlimited).
    pub max_deliver: i64,
}

impl Delivery {
    /// No redelivery will follow this one.
    pub fn is_last_attempt(&self) -> bool {
        self.max_deliver > 0 && self.attempt >= self.max_deliver as u64
    }

    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.message.payload)
    }

    /// The delivery as a core NATS message for another process to settle ([`handed`]): its
    /// payload and headers, with its subject and acknowledgement subject in two headers of
    /// their own. `None` for a message without an acknowledgement subject.
    pub fn hand_over(&self) -> Option<(async_nats::HeaderMap, bytes::Bytes)> {
        let reply = self.message.reply.as_ref()?;
        let mut headers = self.message.headers.clone().unwrap_or_default();
        headers.insert(HANDED_SUBJECT, self.message.subject.as_str());
        headers.insert(HANDED_ACK, reply.as_str());
        Some((headers, self.message.payload.clone()))
    }
}

/// The headers a handed-over delivery carries its subject and acknowledgement subject in.
const HANDED_SUBJECT: &str = "Maestro-Handed-Subject";
const HANDED_ACK: &str = "Maestro-Handed-Ack";

/// A delivery another process handed over ([`Delivery::hand_over`]), to be settled here through
/// `context` exactly as its own runner would have ([`settle_handed`]). `None` when the message
/// is not one.
pub fn handed(
    message: async_nats::Message,
    context: jetstream::Context,
    max_deliver: i64,
) -> Option<Delivery> {
    let headers = message.headers.as_ref()?;
    let subject = headers.get(HANDED_SUBJECT)?.as_str().to_owned();
    let reply = headers.get(HANDED_ACK)?.as_str().to_owned();
    let mut own = async_nats::HeaderMap::new();
    for (name, values) in headers.iter() {
        if [HANDED_SUBJECT, HANDED_ACK].contains(&name.as_ref()) {
            continue;
        }
        for value in values {
            own.append(name.clone(), value.clone());
        }
    }
    let message = jetstream::Message {
        message: async_nats::Message {
            subject: subject.into(),
            reply: Some(reply.into()),
            headers: Some(own),
            ..message
        },
        context,
    };
    let attempt = message.info().ok()?.delivered.max(1) as u64;
    Some(Delivery {
        message,
        attempt,
        max_deliver,
    })
}

/// Settle a handed-over delivery with what `work` decides, sending `in progress` acks every
/// `heartbeat` meanwhile, as the runner does for a delivery of its own.
pub async fn settle_handed<H: Handler>(
    delivery: &Delivery,
    handler: &H,
    heartbeat: Duration,
    work: impl Future<Output = Outcome>,
) {
    let outcome = with_heartbeat(delivery, work, heartbeat).await;
    settle(delivery, handler, outcome).await;
}

/// Processes deliveries of one consumer.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, delivery: &Delivery) -> impl Future<Output = Outcome> + Send;

    /// Record a message that is being given up on. The default only logs.
    fn dead_letter(&self, delivery: &Delivery, reason: &str) -> impl Future<Output = ()> + Send {
        tracing::error!(
            subject = %delivery.message.subject,
            attempt = delivery.attempt,
            reason,
            "message given up"
        );
        async {}
    }
}

/// How the runner pulls and paces.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// Name for logs.
    pub name: &'static str,
    /// Messages handled at once by this process.
    pub concurrency: usize,
    /// Interval of `in progress` acks while a handler runs (keep it well under `ack_wait`).
    pub heartbeat: Duration,
    /// The consumer's `max_deliver`.
    pub max_deliver: i64,
    /// How long one pull request waits for messages.
    pub fetch_expires: Duration,
}

/// Pull and handle messages until `shutdown` is cancelled, then wait for the handlers in
/// flight to finish (handlers watch the same token to checkpoint and return early).
pub async fn run<H: Handler>(
    consumer: PullConsumer,
    handler: Arc<H>,
    config: RunnerConfig,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(config.concurrency.max(1)));
    let mut in_flight = JoinSet::new();
    tracing::info!(
        consumer = config.name,
        concurrency = config.concurrency,
        "consuming"
    );
    'pull: while !shutdown.is_cancelled() {
        let first = tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("semaphore is never closed"),
            _ = shutdown.cancelled() => break,
        };
        let mut spare = Some(first);
        let want = 1 + permits.available_permits();
        let batch = tokio::select! {
            batch = consumer.batch().max_messages(want).expires(config.fetch_expires).messages() => batch,
            _ = shutdown.cancelled() => break,
        };
        // From when the request was sent: the server's expiry starts no earlier.
        let given_up_at = tokio::time::Instant::now() + config.fetch_expires + PULL_GRACE;
        let mut batch = match batch {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!(consumer = config.name, error = %e, "pull failed; retrying shortly");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        loop {
            let next = tokio::select! {
                // Messages already delivered are taken before the request is given up.
                biased;
                next = batch.next() => next,
                _ = shutdown.cancelled() => {
                    give_back(&mut batch).await;
                    break 'pull;
                }
                _ = tokio::time::sleep_until(given_up_at) => break,
            };
            let message = match next {
                None => break,
                Some(Ok(message)) => message,
                Some(Err(e)) => {
                    tracing::warn!(consumer = config.name, error = %e, "pull interrupted");
                    break;
                }
            };
            let permit = match spare.take() {
                Some(permit) => permit,
                None => permits
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("semaphore is never closed"),
            };
            in_flight.spawn(process(message, handler.clone(), config.clone(), permit));
        }
        while in_flight.try_join_next().is_some() {}
    }
    tracing::info!(
        consumer = config.name,
        in_flight = in_flight.len(),
        "stopping; draining"
    );
    while in_flight.join_next().await.is_some() {}
}

/// Hand back the messages a pull request still brings after shutdown, so another instance
/// gets them now rather than after `ack_wait`.
async fn give_back(
    batch: &mut (
             impl futures::Stream<Item = Result<jetstream::Message, impl std::fmt::Display>> + Unpin
         ),
) {
    while let Ok(Some(Ok(message))) =
        tokio::time::timeout(Duration::from_millis(50), batch.next()).await
    {
        let _ = message.ack_with(AckKind::Nak(None)).await;
    }
}

async fn process<H: Handler>(
    message: jetstream::Message,
    handler: Arc<H>,
    config: RunnerConfig,
    _permit: OwnedSemaphorePermit,
) {
    let attempt = message
        .info()
        .map(|info| info.delivered.max(1) as u64)
        .unwrap_or(1);
    let span = tracing::info_span!(
        "consume",
        consumer = config.name,
        subject = %message.subject,
        attempt
    );
    crate::trace::adopt(&span, message.headers.as_ref());
    let delivery = Delivery {
        message,
        attempt,
        max_deliver: config.max_deliver,
    };
    async {
        let outcome = with_heartbeat(&delivery, handler.handle(&delivery), config.heartbeat).await;
        settle(&delivery, &*handler, outcome).await;
    }
    .instrument(span)
    .await;
}

async fn with_heartbeat(
    delivery: &Delivery,
    work: impl Future<Output = Outcome>,
    every: Duration,
) -> Outcome {
    tokio::pin!(work);
    let mut ticker = tokio::time::interval(every);
    ticker.tick().await;
    loop {
        tokio::select! {
            outcome = &mut work => return outcome,
            _ = ticker.tick() => {
                if let Err(e) = delivery.message.ack_with(AckKind::Progress).await {
                    tracing::warn!(error = %e, "in-progress ack failed");
                }
            }
        }
    }
}

async fn settle<H: Handler>(delivery: &Delivery, handler: &H, outcome: Outcome) {
    let ack = match outcome {
        Outcome::HandedOver => return,
        Outcome::Done => AckKind::Ack,
        Outcome::Retry(_) if delivery.is_last_attempt() => {
            handler
                .dead_letter(delivery, "redelivery limit reached")
                .await;
            AckKind::Term
        }
        Outcome::Retry(delay) => AckKind::Nak(Some(delay)),
        Outcome::Poison(reason) => {
            handler.dead_letter(delivery, &reason).await;
            AckKind::Term
        }
    };
    if let Err(e) = delivery.message.ack_with(ack).await {
        // The message will be redelivered after ack_wait; handlers are idempotent.
        tracing::warn!(error = %e, "acknowledgement failed");
    }
}
