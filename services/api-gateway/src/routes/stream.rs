//! `GET /api/local/tasks/{id}/stream` (and `/jobs/{job_id}/stream` for one job): Server-Sent
//! Events of a task's persisted events and live deltas, in stream order (`id:` is the
//! [`StreamId`]).
//!
//! The subscription to live subjects starts before anything is replayed, and every item is
//! compared with the last id sent, so nothing falls between replay and live tail and nothing
//! is sent twice. Missing items are filled in from their durable source first: events from
//! Postgres, deltas of the message being generated from the deltas stream. A delta that
//! belongs to a message already committed is never sent after it (the merged message event
//! replaces it). `Last-Event-ID` (or `?after=`) resumes after a given id.

use std::convert::Infallible;
use std::time::Duration;

use async_nats::jetstream::consumer;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::StreamExt;
use maestro_domain::{Event, JobId, StreamId, TaskId};
use maestro_messaging::payloads::Delta;
use maestro_messaging::setup::DELTAS;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::parse_id;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// Events read from Postgres per query while catching up.
const PAGE: i64 = 500;
/// How long a delta replay waits for the next stored delta before it is done.
const REPLAY_IDLE: Duration = Duration::from_millis(150);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    #[serde(default)]
    after: Option<String>,
}

type SseStream = Sse<
    axum::response::sse::KeepAliveStream<
        futures::stream::BoxStream<'static, Result<SseEvent, Infallible>>,
    >,
>;

/// `GET /api/local/tasks/{id}/stream`
pub async fn task_stream(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<SseStream, ApiError> {
    open(state, caller, &id, None, &headers, query).await
}

/// `GET /api/local/tasks/{id}/jobs/{job_id}/stream`: only the items of one job.
pub async fn job_stream(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, job_id)): Path<(String, String)>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<SseStream, ApiError> {
    let job_id: JobId = parse_id(&job_id, "job")?;
    open(state, caller, &id, Some(job_id), &headers, query).await
}

async fn open(
    state: AppState,
    Caller(owner): Caller,
    id: &str,
    job: Option<JobId>,
    headers: &HeaderMap,
    query: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<SseStream, ApiError> {
    let task_id: TaskId = parse_id(id, "task")?;
    let Query(query) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let cursor = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(query.after);
    let last = match cursor.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
        None => StreamId::default(),
        Some(raw) => raw
            .parse()
            .map_err(|e| ApiError::bad_request("invalid_cursor", format!("{e}")))?,
    };
    if !maestro_db::tasks::exists(&state.pool, &owner, task_id).await? {
        return Err(ApiError::NotFound("task"));
    }
    if let Some(job) = job
        && !maestro_db::jobs::belongs_to(&state.pool, job, task_id).await?
    {
        return Err(ApiError::NotFound("job"));
    }
    let events = state
        .bus
        .nats
        .subscribe(state.bus.subjects.events_of_task(task_id))
        .await
        .map_err(anyhow::Error::from)?;
    let deltas = state
        .bus
        .nats
        .subscribe(state.bus.subjects.deltas_of_task(task_id))
        .await
        .map_err(anyhow::Error::from)?;
    // Bounded per client (`SSE_BUFFER`): a client that stops reading holds this much, plus its
    // TCP buffers, and is disconnected after `SSE_STALL_MS`.
    let (tx, rx) = mpsc::channel(state.settings.sse_buffer);
    let keepalive = state.settings.sse_keepalive;
    let pump = Pump {
        state,
        task_id,
        job,
        last,
        tx,
    };
    tokio::spawn(pump.run(events, deltas));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (Ok(item), rx))
    });
    Ok(Sse::new(stream.boxed()).keep_alive(KeepAlive::new().interval(keepalive)))
}

/// Moves items from Postgres, the deltas stream and live subjects to one client, in order.
struct Pump {
    state: AppState,
    task_id: TaskId,
    /// Only this job's items, for a per-job stream.
    job: Option<JobId>,
    last: StreamId,
    tx: mpsc::Sender<SseEvent>,
}

/// The client went away or stalled, or a source failed: the stream ends (the client resumes).
struct Gone;

impl Pump {
    async fn run(mut self, mut events: async_nats::Subscriber, mut deltas: async_nats::Subscriber) {
        if self.catch_up(i64::MAX).await.is_err() || self.replay_deltas().await.is_err() {
            return;
        }
        let shutdown = self.state.shutdown.clone();
        loop {
            // Biased, deltas before events: a message's deltas reach this connection before
            // its event (the worker publishes them before it commits), so when both are
            // waiting the deltas go first — otherwise the event would make them stale and
            // the client would miss the end of the live text.
            let step = tokio::select! {
                biased;
                _ = self.tx.closed() => return,
                _ = shutdown.cancelled() => return,
                Some(message) = deltas.next() => self.on_delta(&message.payload).await,
                Some(message) = events.next() => self.on_event(&message.payload).await,
                else => return,
            };
            if step.is_err() {
                return;
            }
        }
    }

    async fn on_event(&mut self, payload: &[u8]) -> Result<(), Gone> {
        let Ok(event) = serde_json::from_slice::<Event>(payload) else {
            return Ok(());
        };
        if event.seq <= self.last.seq {
            return Ok(());
        }
        if event.seq > self.last.seq + 1 {
            self.catch_up(event.seq - 1).await?;
        }
        self.send_event(&event).await
    }

    async fn on_delta(&mut self, payload: &[u8]) -> Result<(), Gone> {
        let Ok(delta) = serde_json::from_slice::<Delta>(payload) else {
            return Ok(());
        };
        let Some(id) = delta.stream_id() else {
            return Ok(());
        };
        if id.seq > self.last.seq {
            // The delta follows an event this client has not been sent yet.
            self.catch_up(id.seq).await?;
        }
        if id.seq == self.last.seq && id.delta > self.last.delta + 1 {
            // Deltas in between were missed (a slow subscription, a reconnect): replay them.
            self.replay_deltas().await?;
        }
        if id <= self.last || id.seq != self.last.seq {
            return Ok(());
        }
        self.send_delta(id, &delta).await
    }

    /// Send every persisted event with `last.seq < seq <= upto`.
    async fn catch_up(&mut self, upto: i64) -> Result<(), Gone> {
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
    /// (those after the last delta sent, if the client had some). Deltas that aged out of
    /// the stream are simply not there: the message event will carry the whole text.
    async fn replay_deltas(&mut self) -> Result<(), Gone> {
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
            consumer.messages().await.ok()
        };
        let Some(mut messages) = ordered.await else {
            tracing::warn!("cannot replay deltas; the client gets the merged message instead");
            return Ok(());
        };
        while let Ok(Some(Ok(message))) = tokio::time::timeout(REPLAY_IDLE, messages.next()).await {
            let Ok(delta) = serde_json::from_slice::<Delta>(&message.payload) else {
                continue;
            };
            let Some(id) = delta.stream_id() else {
                continue;
            };
            if id > self.last && id.seq == self.last.seq {
                self.send_delta(id, &delta).await?;
            }
            let caught_up = message.info().is_ok_and(|info| info.pending == 0);
            if caught_up {
                break;
            }
        }
        Ok(())
    }

    async fn send_event(&mut self, event: &Event) -> Result<(), Gone> {
        let id = StreamId::event(event.seq);
        if self.job.is_some_and(|job| job != event.job_id) {
            // Not this job's: skip it, but keep the position.
            self.last = id;
            return Ok(());
        }
        let Ok(data) = serde_json::to_string(event) else {
            return Ok(());
        };
        let item = SseEvent::default()
            .id(id.to_string())
            .event(event.kind.as_str())
            .data(data);
        self.send(id, item).await
    }

    async fn send_delta(&mut self, id: StreamId, delta: &Delta) -> Result<(), Gone> {
        if self.job.is_some_and(|job| job != delta.job_id) {
            return Ok(());
        }
        let Ok(data) = serde_json::to_string(delta) else {
            return Ok(());
        };
        self.send(
            id,
            SseEvent::default()
                .id(id.to_string())
                .event("delta")
                .data(data),
        )
        .await
    }

    async fn send(&mut self, id: StreamId, item: SseEvent) -> Result<(), Gone> {
        let stall = self.state.settings.sse_stall;
        match tokio::time::timeout(stall, self.tx.send(item)).await {
            Ok(Ok(())) => {
                self.last = id;
                Ok(())
            }
            _ => Err(Gone),
        }
    }
}
