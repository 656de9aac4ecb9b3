//! A task's stream to one client: its persisted events and live deltas, in stream order,
//! exactly once, whatever the client reads them as — MAESTRO's own SSE (`routes/stream.rs`)
//! or A2A's (`a2a/`). A [`Render`] turns each item into the SSE events a client gets.
//!
//! The subscription to live subjects starts before anything is replayed, and every item is
//! compared with the last position sent, so nothing falls between replay and live tail and
//! nothing is sent twice. Missing items are filled in from their durable source first: events
//! from Postgres, deltas of the message being generated from the deltas stream. A delta that
//! belongs to a message already committed is never sent after it (the merged message event
//! replaces it), and text is never sent past a hole: when the deltas stream no longer holds
//! some of a message's deltas (aged out, evicted by its byte bound, or lost with a NATS
//! restart), that client gets the message from its event, whole, and no more of its deltas.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_nats::jetstream::consumer;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::StreamExt;
use futures::future::BoxFuture;
use maestro_domain::{Event, StreamId, TaskId};
use maestro_messaging::payloads::Delta;
use maestro_messaging::setup::DELTAS;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::fanout::{Feed, Item, Shared};
use crate::state::AppState;

/// Events read from Postgres per query while catching up.
const PAGE: i64 = 500;
/// How long a delta replay waits for the next stored delta before it is done.
const REPLAY_IDLE: Duration = Duration::from_millis(150);

/// One Server-Sent Event of a stream as a client's parser yields it (the schema of each event,
/// not of the whole body): `data` is JSON — an event of the task, a live delta, or an inbox
/// item — `event` its kind, `id` the position `Last-Event-ID` resumes after.
#[derive(Debug, utoipa::ToSchema)]
pub struct StreamEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// An SSE response.
pub type SseStream = Sse<
    axum::response::sse::KeepAliveStream<
        futures::stream::BoxStream<'static, Result<SseEvent, Infallible>>,
    >,
>;

/// What a client gets for each item of the task's stream.
pub trait Render: Send + 'static {
    /// The SSE events for a persisted event (none: skip it, keeping the position).
    fn event(&mut self, event: &Event) -> Vec<SseEvent>;
    /// The SSE events for a live delta.
    fn delta(&mut self, id: StreamId, delta: &Delta) -> Vec<SseEvent>;
    /// The SSE events for an event of the task's hub, which its other clients get too (for
    /// the creator or not, see [`open`]): a renderer whose output depends on the event alone
    /// shares it with them (`Shared::rendered`).
    fn live_event(&mut self, event: &Shared<Event>, creator: bool) -> Vec<SseEvent> {
        self.event(&event.value.as_seen_by(creator))
    }
    /// The SSE events for a delta of the task's hub, likewise.
    fn live_delta(&mut self, id: StreamId, delta: &Shared<Delta>) -> Vec<SseEvent> {
        self.delta(id, &delta.value)
    }
    /// The stream has said all it will: close it.
    fn done(&self) -> bool {
        false
    }
}

/// Open a stream of task `task_id` after position `last` for one client, first sending
/// `first` (already rendered); `creator` says whether the client created the task (other
/// readers' events lose what only the creator gets: [`Event::for_reader`]). The task's
/// access is the caller's to check.
pub async fn open(
    state: AppState,
    (task_id, creator): (TaskId, bool),
    last: StreamId,
    first: Vec<SseEvent>,
    render: impl Render,
) -> Result<SseStream, ApiError> {
    // The task's live subjects, shared with the gateway's other clients of the task
    // (`fanout.rs`); subscribed on the server before anything is read from Postgres.
    let feed = state
        .hubs
        .join(&state.bus, task_id, state.settings.sse_hub_backlog)
        .await
        .map_err(|e| anyhow::anyhow!("cannot follow the task: {e}"))?;
    // The response body drives the pump: it makes items when hyper asks the body for more, so
    // a client that stops reading stops its pump (at most `SSE_BUFFER` items made ahead, plus
    // hyper's and the TCP buffers), and its connection is closed after `SSE_STALL_MS`
    // (`app.rs`, `Stalling`). No task or channel per client: a live item wakes the client's
    // connection directly.
    let keepalive = state.settings.sse_keepalive;
    let ahead = Ahead::new(state.settings.sse_buffer);
    let pump = Pump {
        state,
        task_id,
        creator,
        last,
        given_up: None,
        ahead: ahead.clone(),
        render,
    };
    let body = Driven {
        ahead,
        pump: Some(Box::pin(pump.run(first, feed))),
        _client: Connected::new("task"),
    };
    Ok(Sse::new(body.boxed()).keep_alive(KeepAlive::new().interval(keepalive)))
}

/// The items a pump has made ahead and its body has not yet handed to hyper.
#[derive(Clone)]
struct Ahead {
    items: Arc<Mutex<VecDeque<SseEvent>>>,
    /// How many it makes before it waits for the body to take them.
    capacity: usize,
}

impl Ahead {
    fn new(capacity: usize) -> Self {
        Self {
            items: Arc::default(),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<SseEvent>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pop(&self) -> Option<SseEvent> {
        self.lock().pop_front()
    }

    /// Add an item; at capacity, give the body a turn to take them (the pump goes on when
    /// hyper next asks the body for more, that is when the client has room).
    async fn push(&self, item: SseEvent) {
        let full = {
            let mut items = self.lock();
            items.push_back(item);
            items.len() >= self.capacity
        };
        if full {
            YieldToBody(false).await;
        }
    }
}

/// Pending once, without a wake-up: the body that polls the pump returns what is queued
/// instead, and polls the pump again when asked for more.
struct YieldToBody(bool);

impl Future for YieldToBody {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// A client's SSE body: what its pump made, the pump run as the body is polled.
struct Driven {
    ahead: Ahead,
    pump: Option<BoxFuture<'static, ()>>,
    _client: Connected,
}

impl futures::Stream for Driven {
    type Item = Result<SseEvent, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(item) = self.ahead.pop() {
                return Poll::Ready(Some(Ok(item)));
            }
            let Some(pump) = self.pump.as_mut() else {
                return Poll::Ready(None);
            };
            match pump.as_mut().poll(cx) {
                // Done: what it made last goes out, then the stream ends.
                Poll::Ready(()) => self.pump = None,
                Poll::Pending if self.ahead.lock().is_empty() => return Poll::Pending,
                // It yielded to let its items out.
                Poll::Pending => {}
            }
        }
    }
}

/// A client's channel of SSE events, `capacity` deep, for a stream whose items a task of its
/// own makes (the inbox's; a task's stream is made by its body, see [`open`]). Events travel
/// boxed: the channel allocates its first block of 32 slots when it is made, so every idle
/// client holds one block: 32 pointers rather than 32 events of 48 bytes (0.3 KiB instead of
/// 1.6).
pub fn channel(capacity: usize) -> (mpsc::Sender<Box<SseEvent>>, mpsc::Receiver<Box<SseEvent>>) {
    mpsc::channel(capacity)
}

/// The SSE response of a client's channel, with keep-alives; counted in
/// `maestro_sse_clients{stream}` while the client is connected.
pub fn sse(
    rx: mpsc::Receiver<Box<SseEvent>>,
    keepalive: Duration,
    kind: &'static str,
) -> SseStream {
    let client = Connected::new(kind);
    let stream = futures::stream::unfold((rx, client), |(mut rx, client)| async move {
        rx.recv().await.map(|item| (Ok(*item), (rx, client)))
    });
    Sse::new(stream.boxed()).keep_alive(KeepAlive::new().interval(keepalive))
}

/// One connected SSE client, in the gauge while it lives.
struct Connected(&'static str);

impl Connected {
    fn new(kind: &'static str) -> Self {
        metrics::gauge!(maestro_runtime::metrics::SSE_CLIENTS, "stream" => kind).increment(1.0);
        Self(kind)
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        metrics::gauge!(maestro_runtime::metrics::SSE_CLIENTS, "stream" => self.0).decrement(1.0);
    }
}

/// Whether a delta replay knows of deltas the client missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// A stream's start: there may be none.
    Unknown,
    /// A gap was seen (or the client lagged): some are missing.
    Some,
}

/// Moves items from Postgres, the deltas stream and live subjects to one client, in order.
struct Pump<R> {
    state: AppState,
    task_id: TaskId,
    creator: bool,
    last: StreamId,
    /// The `seq` after which the message being generated has deltas this client cannot get
    /// (no longer stored): its later deltas are not sent, and its event brings the text.
    given_up: Option<i64>,
    ahead: Ahead,
    render: R,
}

/// A source failed, or the stream said all it will.
struct Gone;

impl<R: Render> Pump<R> {
    async fn run(mut self, first: Vec<SseEvent>, mut feed: Feed) {
        if self.send(self.last, first).await.is_err()
            || self.catch_up(i64::MAX).await.is_err()
            || self.replay_deltas(Missing::Unknown).await.is_err()
        {
            return;
        }
        // Made once, not per item: it is a registration on a `Notify` shared by every client
        // of the gateway, which a fresh future would take and give back under that `Notify`'s
        // lock for every item of every client. (A client that leaves drops its body, and the
        // pump with it.)
        let shutdown = self.state.shutdown.clone();
        let shutdown = shutdown.cancelled();
        tokio::pin!(shutdown);
        loop {
            let step = tokio::select! {
                biased;
                () = &mut shutdown => return,
                item = feed.items.recv() => match item {
                    Ok(Item::Delta(delta)) => self.on_delta(&delta).await,
                    Ok(Item::Event(event)) => self.on_event(&event).await,
                    // Fell behind the hub: whatever was missed is in Postgres and the deltas
                    // stream (the last event may be among it, with nothing after to show the
                    // gap, so fill it now).
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "an SSE client fell behind its task's feed; refilling");
                        self.refill().await
                    }
                    Err(RecvError::Closed) => return,
                },
            };
            if step.is_err() {
                return;
            }
        }
    }

    async fn refill(&mut self) -> Result<(), Gone> {
        self.catch_up(i64::MAX).await?;
        self.replay_deltas(Missing::Some).await
    }

    async fn on_event(&mut self, shared: &Shared<Event>) -> Result<(), Gone> {
        let seq = shared.value.seq;
        if seq <= self.last.seq {
            return Ok(());
        }
        if seq > self.last.seq + 1 {
            self.catch_up(seq - 1).await?;
        }
        let items = self.render.live_event(shared, self.creator);
        self.send(StreamId::event(seq), items).await
    }

    async fn on_delta(&mut self, shared: &Shared<Delta>) -> Result<(), Gone> {
        let delta = &shared.value;
        let Some(id) = delta.stream_id() else {
            return Ok(());
        };
        if id.seq > self.last.seq {
            // The delta follows an event this client has not been sent yet.
            self.catch_up(id.seq).await?;
        }
        if self.given_up == Some(id.seq) {
            return Ok(());
        }
        if id.seq == self.last.seq && id.delta > self.last.delta + 1 {
            // Deltas in between were missed (a slow subscription, a reconnect): replay them.
            self.replay_deltas(Missing::Some).await?;
        }
        if id <= self.last || id.seq != self.last.seq || self.given_up == Some(id.seq) {
            return Ok(());
        }
        if id.delta > self.last.delta + 1 {
            // Still a hole after a replay that waited for the stream to store what it
            // missed: they are not coming. Never send text past it; the message event
            // brings the whole text, and later deltas do not replay again each.
            self.give_up(id.seq);
            return Ok(());
        }
        let items = self.render.live_delta(id, shared);
        self.send(id, items).await
    }

    /// Send every persisted event with `last.seq < seq <= upto`.
    ///
    /// This and `replay_deltas` run boxed: their futures (a query, a JetStream consumer) are
    /// large, and inline they would size every client's pump while it waits for the next
    /// live item, which is what an idle client costs.
    fn catch_up(&mut self, upto: i64) -> BoxFuture<'_, Result<(), Gone>> {
        Box::pin(self.catch_up_inline(upto))
    }

    async fn catch_up_inline(&mut self, upto: i64) -> Result<(), Gone> {
        loop {
            let page =
                maestro_db::events::list(&self.state.pool, self.task_id, self.last.seq, PAGE).await;
            let page = page.map_err(|e| {
                tracing::warn!(error = %e, "cannot read events for a stream; closing it");
                Gone
            })?;
            let full = page.len() as i64 == PAGE;
            for event in page.iter().filter(|e| e.seq <= upto) {
                self.send_event(event).await?;
            }
            if !full || self.last.seq >= upto {
                return Ok(());
            }
        }
    }

    /// Send the stored deltas of the message being generated after the last event sent
    /// (those after the last delta sent, if the client had some), up to the first hole.
    /// Deltas no longer stored (aged out, evicted by the stream's byte bound, lost with a
    /// restart) leave one: from there the client gets none of that message's deltas, and its
    /// event carries the whole text.
    fn replay_deltas(&mut self, missing: Missing) -> BoxFuture<'_, Result<(), Gone>> {
        Box::pin(self.replay_deltas_inline(missing))
    }

    async fn replay_deltas_inline(&mut self, missing: Missing) -> Result<(), Gone> {
        let filter = self
            .state
            .bus
            .subjects
            .deltas_after(self.task_id, self.last.seq);
        let stream_name = self.state.bus.subjects.stream(DELTAS);
        let ordered = async {
            let stream = self.state.bus.js.get_stream(&stream_name).await.ok()?;
            let config = consumer::pull::OrderedConfig {
                filter_subject: filter,
                deliver_policy: consumer::DeliverPolicy::All,
                ..Default::default()
            };
            let consumer = stream.create_consumer(config).await.ok()?;
            // Nothing stored (the usual case at a stream's start: no reply is being
            // generated): nothing to wait for — without this the stream would idle
            // REPLAY_IDLE before going live. When deltas are known to be missing, they may
            // have reached subscribers before the stream stored them: wait for them.
            if missing == Missing::Unknown && consumer.cached_info().num_pending == 0 {
                return Some(None);
            }
            consumer.messages().await.ok().map(Some)
        };
        let mut messages = match ordered.await {
            Some(Some(messages)) => messages,
            Some(None) => return Ok(()),
            None => {
                tracing::warn!("cannot replay deltas; the client gets the merged message instead");
                return Ok(());
            }
        };
        while let Ok(Some(Ok(message))) = tokio::time::timeout(REPLAY_IDLE, messages.next()).await {
            let Ok(delta) = serde_json::from_slice::<Delta>(&message.payload) else {
                continue;
            };
            let Some(id) = delta.stream_id() else {
                continue;
            };
            if id > self.last && id.seq == self.last.seq && self.given_up != Some(id.seq) {
                if id.delta > self.last.delta + 1 {
                    // The stream holds this one but not those before it: they are gone.
                    self.give_up(id.seq);
                    break;
                }
                let items = self.render.delta(id, &delta);
                self.send(id, items).await?;
            }
            let caught_up = message.info().is_ok_and(|info| info.pending == 0);
            if caught_up {
                break;
            }
        }
        Ok(())
    }

    /// Send no more deltas of the message after `seq`: some are no longer stored.
    fn give_up(&mut self, seq: i64) {
        self.given_up = Some(seq);
        metrics::counter!(maestro_runtime::metrics::SSE_DELTA_GAPS).increment(1);
    }

    async fn send_event(&mut self, event: &Event) -> Result<(), Gone> {
        let items = self.render.event(&event.as_seen_by(self.creator));
        self.send(StreamId::event(event.seq), items).await
    }

    /// Send `items` (all of one position) and move the position to `id`; close the stream
    /// when the renderer has said all it will.
    async fn send(&mut self, id: StreamId, items: Vec<SseEvent>) -> Result<(), Gone> {
        for item in items {
            self.ahead.push(item).await;
        }
        self.last = id;
        if self.render.done() {
            return Err(Gone);
        }
        Ok(())
    }
}
