//! The consumer runner's handover contract (`shared/messaging/src/consumer.rs`), which a
//! worker uses to pass a job's delivery to the worker whose dispatch hint runs the job: a
//! handler that hands a delivery over acknowledges nothing, and the process it went to —
//! another NATS connection — settles it by the runner's own rules. A retry there redelivers
//! the message after its delay with its delivery count, a poison one is terminated with a
//! dead letter recorded there, and the message's subject and headers arrive as they were.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt as _;
use maestro_messaging::consumer::{self, Delivery, Handler, Outcome, RunnerConfig};
use maestro_testkit::NatsServer;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const SUBJECT: &str = "handover.jobs";
const HANDED: &str = "handover.handed";
const MAX_DELIVER: i64 = 3;

/// The first runner's handler: hands every delivery over, on core NATS.
struct HandsOver {
    nats: async_nats::Client,
}

impl Handler for HandsOver {
    async fn handle(&self, delivery: &Delivery) -> Outcome {
        let (headers, payload) = delivery.hand_over().expect("a delivery has an ack subject");
        (self.nats)
            .publish_with_headers(HANDED, headers, payload)
            .await
            .expect("publish the handover");
        Outcome::HandedOver
    }
}

/// The other process's handler: only its dead letters are used (it settles what it is handed).
#[derive(Default)]
struct Settles {
    letters: Mutex<Vec<(String, u64)>>,
}

impl Handler for Settles {
    async fn handle(&self, _: &Delivery) -> Outcome {
        unreachable!("handed deliveries are settled with their own outcome")
    }

    async fn dead_letter(&self, delivery: &Delivery, reason: &str) {
        let letter = (reason.to_owned(), delivery.attempt);
        self.letters.lock().expect("lock").push(letter);
    }
}

/// What the other process saw of one handed delivery.
#[derive(Debug)]
struct Seen {
    payload: String,
    attempt: u64,
    subject: String,
    trace: Option<String>,
    handover_headers: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_delivery_is_settled_by_the_process_it_went_to() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = NatsServer::start(dir.path()).await.expect("nats-server");
    let (first, other) = (
        server.client().await.expect("connect"),
        server.client().await.expect("connect"),
    );
    let js = jetstream::new(first.clone());
    let stream = js
        .create_stream(stream::Config {
            name: "HANDOVER".to_owned(),
            subjects: vec![SUBJECT.to_owned()],
            ..Default::default()
        })
        .await
        .expect("the stream");
    let pull = stream
        .create_consumer(pull::Config {
            durable_name: Some("handover".to_owned()),
            ack_wait: Duration::from_secs(30),
            max_deliver: MAX_DELIVER,
            ..Default::default()
        })
        .await
        .expect("the consumer");

    // The other process: settles each handed delivery, `retry` once with a short delay and
    // then done, `poison` as poison.
    let settles = Arc::new(Settles::default());
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let mut handed = other.subscribe(HANDED).await.expect("subscribe");
    other.flush().await.expect("flush");
    let other_js = jetstream::new(other.clone());
    let settler = tokio::spawn({
        let settles = settles.clone();
        async move {
            while let Some(message) = handed.next().await {
                let delivery = consumer::handed(message, other_js.clone(), MAX_DELIVER)
                    .expect("a handed delivery");
                let headers = delivery.message.headers.clone().unwrap_or_default();
                let payload = String::from_utf8_lossy(&delivery.message.payload).into_owned();
                let outcome = match (payload.as_str(), delivery.attempt) {
                    ("retry", 1) => Outcome::Retry(Duration::from_millis(200)),
                    ("poison", _) => Outcome::Poison("cannot ever run".to_owned()),
                    _ => Outcome::Done,
                };
                let _ = seen_tx.send(Seen {
                    payload,
                    attempt: delivery.attempt,
                    subject: delivery.message.subject.to_string(),
                    trace: headers.get("traceparent").map(|v| v.to_string()),
                    handover_headers: headers
                        .iter()
                        .any(|(name, _)| AsRef::<str>::as_ref(name).contains("Handed")),
                });
                consumer::settle_handed(&delivery, &*settles, Duration::from_secs(5), async {
                    outcome
                })
                .await;
            }
        }
    });

    let shutdown = CancellationToken::new();
    let runner = tokio::spawn(consumer::run(
        pull,
        Arc::new(HandsOver {
            nats: first.clone(),
        }),
        RunnerConfig {
            name: "handover",
            concurrency: 4,
            heartbeat: Duration::from_secs(10),
            max_deliver: MAX_DELIVER,
            fetch_expires: Duration::from_secs(1),
        },
        shutdown.clone(),
    ));
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    for payload in ["retry", "poison"] {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("traceparent", traceparent);
        js.publish_with_headers(SUBJECT, headers, payload.into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    }

    let mut all = Vec::new();
    while all.len() < 3 {
        let next = tokio::time::timeout(Duration::from_secs(20), seen.recv()).await;
        all.push(
            next.expect("a handed delivery in time")
                .expect("the settler runs"),
        );
    }
    for s in &all {
        assert_eq!(s.subject, SUBJECT, "{s:?}");
        assert_eq!(s.trace.as_deref(), Some(traceparent), "{s:?}");
        assert!(
            !s.handover_headers,
            "the handover's own headers are gone: {s:?}"
        );
    }
    let mut attempts: Vec<(&str, u64)> = all.iter().map(|s| (&*s.payload, s.attempt)).collect();
    attempts.sort();
    assert_eq!(
        attempts,
        [("poison", 1), ("retry", 1), ("retry", 2)],
        "the retry came back once, counted, from the other process's nak"
    );
    assert_eq!(
        *settles.letters.lock().expect("lock"),
        [("cannot ever run".to_owned(), 1)],
        "the poison one is dead-lettered where it was settled"
    );

    // Nothing left pending or unacknowledged: the ack and the term from the other connection
    // settled both messages.
    let mut consumer: jetstream::consumer::PullConsumer = js
        .get_stream("HANDOVER")
        .await
        .expect("stream")
        .get_consumer("handover")
        .await
        .expect("consumer");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info = consumer.info().await.expect("consumer info");
        if info.num_ack_pending == 0 && info.num_pending == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still unsettled: {} unacknowledged, {} pending",
            info.num_ack_pending,
            info.num_pending
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.cancel();
    runner.await.expect("the runner stops");
    settler.abort();
}
