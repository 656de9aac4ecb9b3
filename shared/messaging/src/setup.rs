//! Idempotent creation of MAESTRO's streams and durable consumers. Every service calls the
//! part it needs at start-up; running it again (or from several services at once) leaves the
//! same streams, and a consumer whose settings changed is updated in place.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};

use crate::subjects::Subjects;

/// An error while creating or updating a stream or consumer.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot create or update stream {name}: {source}")]
    Stream {
        name: String,
        #[source]
        source: async_nats::Error,
    },
    #[error("cannot create or update consumer {name}: {source}")]
    Consumer {
        name: String,
        #[source]
        source: async_nats::Error,
    },
}

/// Retention and de-duplication settings of the streams.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    /// How long JetStream remembers a `Nats-Msg-Id` to drop duplicates.
    pub duplicate_window: Duration,
    /// How long published events stay in the events stream (Postgres keeps them forever).
    pub events_max_age: Duration,
    /// How long live deltas stay replayable for reconnecting clients.
    pub deltas_max_age: Duration,
    /// Where the deltas stream keeps them (`DELTAS_STORAGE`): in memory by default, as they
    /// are the busiest stream by far with a real model and only ever a convenience (a
    /// message's event is its durable record), or in files.
    pub deltas_storage: stream::StorageType,
    /// The most the deltas stream holds (`DELTAS_MAX_BYTES`), the oldest dropped first: the
    /// bound that keeps memory storage within the server's `max_memory_store`.
    pub deltas_max_bytes: i64,
    /// How long notifications stay in the notify stream for direct subscribers.
    pub notify_max_age: Duration,
    /// How many copies of each stream (and so of its consumers) a JetStream cluster keeps
    /// (`STREAM_REPLICAS`; 1 on a single server).
    pub replicas: usize,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self {
            replicas: 1,
            duplicate_window: Duration::from_secs(120),
            events_max_age: Duration::from_secs(24 * 3600),
            deltas_max_age: Duration::from_secs(15 * 60),
            deltas_storage: stream::StorageType::Memory,
            deltas_max_bytes: 64 * 1024 * 1024,
            notify_max_age: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Stream roles, the suffix of their names.
pub const JOBS: &str = "JOBS";
pub const EVENTS: &str = "EVENTS";
pub const DELTAS: &str = "DELTAS";
pub const NOTIFY: &str = "NOTIFY";
pub const WEBHOOKS: &str = "WEBHOOKS";
pub const OPERATIONS: &str = "OPERATIONS";
pub const SIGNALS: &str = "SIGNALS";

/// Create (or update) every MAESTRO stream.
pub async fn ensure_streams(
    js: &jetstream::Context,
    subjects: &Subjects,
    settings: &StreamSettings,
) -> Result<(), SetupError> {
    let p = subjects.prefix();
    let configs = [
        stream::Config {
            name: subjects.stream(JOBS),
            subjects: vec![subjects.dispatch_all()],
            retention: stream::RetentionPolicy::WorkQueue,
            duplicate_window: settings.duplicate_window,
            ..Default::default()
        },
        stream::Config {
            name: subjects.stream(EVENTS),
            subjects: vec![format!("{p}.events.>")],
            max_age: settings.events_max_age,
            duplicate_window: settings.duplicate_window,
            ..Default::default()
        },
        stream::Config {
            name: subjects.stream(DELTAS),
            subjects: vec![format!("{p}.deltas.>")],
            max_age: settings.deltas_max_age,
            max_bytes: settings.deltas_max_bytes,
            storage: settings.deltas_storage,
            // Deltas carry no `Nats-Msg-Id` (each is published once; its id is in the
            // payload), so there is nothing to de-duplicate: keep the window short.
            duplicate_window: Duration::from_secs(1).min(settings.deltas_max_age),
            ..Default::default()
        },
        stream::Config {
            name: subjects.stream(NOTIFY),
            subjects: vec![format!("{p}.notify.>")],
            max_age: settings.notify_max_age,
            duplicate_window: settings.duplicate_window,
            ..Default::default()
        },
        stream::Config {
            name: subjects.stream(SIGNALS),
            subjects: vec![subjects.signals_all()],
            max_age: settings.events_max_age,
            duplicate_window: settings.duplicate_window,
            ..Default::default()
        },
        stream::Config {
            name: subjects.stream(OPERATIONS),
            subjects: vec![format!("{p}.operations.>")],
            max_messages_per_subject: 1,
            max_age: Duration::from_secs(7 * 24 * 3600),
            ..Default::default()
        },
        stream::Config {
            name: subjects.stream(WEBHOOKS),
            subjects: vec![
                subjects.webhook_deliver(),
                subjects.a2a_push(),
                subjects.a2a_states(),
            ],
            retention: stream::RetentionPolicy::WorkQueue,
            duplicate_window: settings.duplicate_window,
            ..Default::default()
        },
    ];
    for mut config in configs {
        config.num_replicas = settings.replicas.max(1);
        let name = config.name.clone();
        let disposable = name == subjects.stream(DELTAS);
        patiently(&name, || async {
            if disposable {
                recreate_if_storage_differs(js, &config).await?;
            }
            js.create_or_update_stream(config.clone())
                .await
                .map(|_| ())
                .map_err(async_nats::Error::from)
        })
        .await
        .map_err(|source| SetupError::Stream { name, source })?;
    }
    Ok(())
}

/// JetStream cannot change a stream's storage in place. A stream whose content is only a
/// convenience (the deltas') is deleted for `config` to create it again with the new storage;
/// its clients get whole messages from their events meanwhile. (Services started with
/// different settings would each recreate it at their start: set them the same everywhere.)
async fn recreate_if_storage_differs(
    js: &jetstream::Context,
    config: &stream::Config,
) -> Result<(), async_nats::Error> {
    let stream = match js.get_stream(&config.name).await {
        Ok(stream) => stream,
        Err(e) if stream_not_found(&e.kind()) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let storage = stream.cached_info().config.storage;
    if storage == config.storage {
        return Ok(());
    }
    tracing::info!(stream = %config.name, from = ?storage, to = ?config.storage,
        "recreating a stream whose storage changes (its live deltas are dropped)");
    match js.delete_stream(&config.name).await {
        Ok(_) => Ok(()),
        // Another service got there first.
        Err(e) if stream_not_found(&e.kind()) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn stream_not_found(kind: &jetstream::context::GetStreamErrorKind) -> bool {
    matches!(kind, jetstream::context::GetStreamErrorKind::JetStream(e)
        if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// Where the tool-runner records the outcome of every ledgered (side-effecting) tool call, so a
/// worker resuming after a crash can learn whether an effect it started completed: one
/// message per operation on `<p>.operations.<key>` in the stream `<P>_OPERATIONS` (the last
/// per subject kept, for 7 days). A plain stream rather than a key-value bucket, so servers
/// from 2.9 on serve it alike.
#[derive(Debug, Clone)]
pub struct OperationOutcomes {
    js: jetstream::Context,
    stream: String,
    prefix: String,
}

impl OperationOutcomes {
    pub fn new(js: jetstream::Context, subjects: &Subjects) -> Self {
        Self {
            js,
            stream: subjects.stream(OPERATIONS),
            prefix: subjects.prefix().to_owned(),
        }
    }

    fn subject(&self, operation_id: &str) -> String {
        let key = crate::subjects::token(operation_id);
        format!("{}.operations.{key}", self.prefix)
    }

    /// Record an outcome (waits until the stream has stored it).
    pub async fn record(
        &self,
        operation_id: &str,
        outcome: bytes::Bytes,
    ) -> Result<(), async_nats::Error> {
        self.js
            .publish(self.subject(operation_id), outcome)
            .await?
            .await?;
        Ok(())
    }

    /// The latest record of an operation with its stream sequence, if any.
    pub async fn last(
        &self,
        operation_id: &str,
    ) -> Result<Option<(u64, bytes::Bytes)>, async_nats::Error> {
        let stream = self.js.get_stream(&self.stream).await?;
        match stream
            .get_last_raw_message_by_subject(&self.subject(operation_id))
            .await
        {
            Ok(message) => Ok(Some((message.sequence, message.payload))),
            Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Record `outcome` only if the operation's latest record is still the one at stream
    /// sequence `after` (0: none): of two that race to record, one wins and the other gets an
    /// error (JetStream's expected-last-subject-sequence check).
    pub async fn record_after(
        &self,
        operation_id: &str,
        after: u64,
        outcome: bytes::Bytes,
    ) -> Result<(), async_nats::Error> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
            after.to_string().as_str(),
        );
        self.js
            .publish_with_headers(self.subject(operation_id), headers, outcome)
            .await?
            .await?;
        Ok(())
    }

    /// The recorded outcome, if any.
    pub async fn get(&self, operation_id: &str) -> Result<Option<bytes::Bytes>, async_nats::Error> {
        let stream = self.js.get_stream(&self.stream).await?;
        match stream
            .get_last_raw_message_by_subject(&self.subject(operation_id))
            .await
        {
            Ok(message) => Ok(Some(message.payload)),
            Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Settings of a durable pull consumer.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// How long a delivered message may stay unacknowledged before it is redelivered.
    pub ack_wait: Duration,
    /// Deliveries after which JetStream gives up on a message.
    pub max_deliver: i64,
    /// Messages delivered and not yet acknowledged, across all instances.
    pub max_ack_pending: i64,
}

/// The durable consumer workers of `profile` pull jobs from.
pub async fn jobs_consumer(
    js: &jetstream::Context,
    subjects: &Subjects,
    profile: &str,
    settings: &ConsumerSettings,
) -> Result<consumer::PullConsumer, SetupError> {
    let name = format!("workers_{profile}");
    ensure_consumer(
        js,
        &subjects.stream(JOBS),
        &name,
        subjects.dispatch(profile),
        settings,
    )
    .await
}

/// The durable consumer the notifier reads the job state changes of tasks with A2A push
/// configs from (to queue their pushes): the copies on `<p>.webhooks.a2a_states`. It replaced
/// `notifier_job_states`, which read every `job_state` event of `<P>_EVENTS` to act on few.
pub async fn job_state_consumer(
    js: &jetstream::Context,
    subjects: &Subjects,
    settings: &ConsumerSettings,
) -> Result<consumer::PullConsumer, SetupError> {
    ensure_consumer(
        js,
        &subjects.stream(WEBHOOKS),
        "notifier_a2a_states",
        subjects.a2a_states(),
        settings,
    )
    .await
}

/// Remove durable consumer `name` of `stream` that an earlier version created and nothing
/// reads any more (absent: nothing to do).
pub async fn retire_consumer(
    js: &jetstream::Context,
    subjects: &Subjects,
    stream: &str,
    name: &str,
) -> Result<(), SetupError> {
    let stream_name = subjects.stream(stream);
    let stream = js
        .get_stream(&stream_name)
        .await
        .map_err(|e| SetupError::Stream {
            name: stream_name,
            source: e.into(),
        })?;
    if stream.consumer_info(name).await.is_ok() {
        stream
            .delete_consumer(name)
            .await
            .map_err(|e| SetupError::Consumer {
                name: name.to_owned(),
                source: e.into(),
            })?;
        tracing::info!(consumer = name, "retired a consumer nothing reads any more");
    }
    Ok(())
}

/// The durable consumer the notifier attempts webhook deliveries from.
pub async fn webhook_consumer(
    js: &jetstream::Context,
    subjects: &Subjects,
    settings: &ConsumerSettings,
) -> Result<consumer::PullConsumer, SetupError> {
    let filter = subjects.webhook_deliver();
    ensure_consumer(
        js,
        &subjects.stream(WEBHOOKS),
        "notifier_webhooks",
        filter,
        settings,
    )
    .await
}

/// The durable consumer the notifier attempts A2A push notification deliveries from.
pub async fn a2a_push_consumer(
    js: &jetstream::Context,
    subjects: &Subjects,
    settings: &ConsumerSettings,
) -> Result<consumer::PullConsumer, SetupError> {
    let filter = subjects.a2a_push();
    ensure_consumer(
        js,
        &subjects.stream(WEBHOOKS),
        "notifier_a2a_push",
        filter,
        settings,
    )
    .await
}

async fn ensure_consumer(
    js: &jetstream::Context,
    stream_name: &str,
    name: &str,
    filter_subject: String,
    settings: &ConsumerSettings,
) -> Result<consumer::PullConsumer, SetupError> {
    let err = |e: async_nats::Error| SetupError::Consumer {
        name: name.to_owned(),
        source: e,
    };
    let config = consumer::pull::Config {
        durable_name: Some(name.to_owned()),
        filter_subject,
        ack_policy: consumer::AckPolicy::Explicit,
        deliver_policy: consumer::DeliverPolicy::All,
        ack_wait: settings.ack_wait,
        max_deliver: settings.max_deliver,
        max_ack_pending: settings.max_ack_pending,
        ..Default::default()
    };
    // Create-or-update: a consumer whose settings changed since the last start is updated.
    patiently(name, || async {
        let stream = js.get_stream(stream_name).await?;
        Ok(stream.create_consumer(config.clone()).await?)
    })
    .await
    .map_err(err)
}

/// How long start-up setup keeps trying: a cluster electing a leader (a node just died or
/// came back) answers JetStream requests with timeouts for a few seconds.
const SETUP_PATIENCE: Duration = Duration::from_secs(60);

/// `attempt` until it succeeds, or [`SETUP_PATIENCE`] has passed (then its last error), with
/// a growing pause between tries.
async fn patiently<T, F, Fut>(what: &str, mut attempt: F) -> Result<T, async_nats::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, async_nats::Error>>,
{
    let deadline = tokio::time::Instant::now() + SETUP_PATIENCE;
    let mut pause = Duration::from_millis(250);
    loop {
        match attempt().await {
            Ok(done) => return Ok(done),
            Err(e) if tokio::time::Instant::now() + pause < deadline => {
                tracing::warn!(%what, error = %e, retry_in_ms = pause.as_millis() as u64, "JetStream setup failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(4));
            }
            Err(e) => return Err(e),
        }
    }
}
