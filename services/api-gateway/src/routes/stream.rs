//! `GET /api/local/tasks/{id}/stream`: Server-Sent Events of a task's persisted events and
//! live deltas, in stream order (`id:` is the [`StreamId`]).
//!
//! The subscription to live subjects starts before the replay from Postgres, and every item
//! is compared with the last id sent, so nothing falls between replay and live tail and
//! nothing is sent twice. A live event that skips ahead, or a delta that follows an event the
//! client has not seen, first fills the gap from Postgres: the database is the authority,
//! NATS only the fast path. `Last-Event-ID` (or `?after=`) resumes after a given id.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use maestro_domain::{Event, StreamId, TaskId};
use maestro_messaging::payloads::Delta;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::parse_id;
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

/// Items buffered per client before the pump waits for it.
const BUFFER: usize = 256;
/// A client that accepts nothing for this long is disconnected (it can resume).
const STALL_LIMIT: Duration = Duration::from_secs(30);
/// Events read from Postgres per query while catching up.
const PAGE: i64 = 500;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    #[serde(default)]
    after: Option<String>,
}

pub async fn task_stream(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let task_id: TaskId = parse_id(&id, "task")?;
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
    let subscribe = |subject: String| {
        let nats = state.nats.clone();
        async move { nats.subscribe(subject).await }
    };
    let events = subscribe(state.subjects.events_of_task(task_id))
        .await
        .map_err(anyhow::Error::from)?;
    let deltas = subscribe(state.subjects.deltas_of_task(task_id))
        .await
        .map_err(anyhow::Error::from)?;
    let (tx, rx) = mpsc::channel(BUFFER);
    let keepalive = state.settings.sse_keepalive;
    let pump = Pump {
        state,
        task_id,
        last,
        tx,
    };
    tokio::spawn(pump.run(events, deltas));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (Ok(item), rx))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(keepalive)))
}

/// Moves items from Postgres and NATS to one client, in order.
struct Pump {
    state: AppState,
    task_id: TaskId,
    last: StreamId,
    tx: mpsc::Sender<SseEvent>,
}

/// The client went away or stalled.
struct Gone;

impl Pump {
    async fn run(mut self, mut events: async_nats::Subscriber, mut deltas: async_nats::Subscriber) {
        if self.catch_up(i64::MAX).await.is_err() {
            return;
        }
        let shutdown = self.state.shutdown.clone();
        loop {
            let step = tokio::select! {
                _ = self.tx.closed() => return,
                _ = shutdown.cancelled() => return,
                Some(message) = events.next() => self.on_event(&message.payload).await,
                Some(message) = deltas.next() => self.on_delta(&message.payload).await,
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
        if id <= self.last || id.seq != self.last.seq {
            return Ok(());
        }
        let Ok(data) = serde_json::to_string(&delta) else {
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

    /// Send every persisted event with `last.seq < seq <= upto`.
    async fn catch_up(&mut self, upto: i64) -> Result<(), Gone> {
        loop {
            let page =
                maestro_db::events::list(&self.state.pool, self.task_id, self.last.seq, PAGE).await;
            let page = match page {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read events for a stream; closing it");
                    return Err(Gone);
                }
            };
            let full = page.len() as i64 == PAGE;
            for event in page.iter().filter(|e| e.seq <= upto) {
                self.send_event(event).await?;
            }
            if !full || self.last.seq >= upto {
                return Ok(());
            }
        }
    }

    async fn send_event(&mut self, event: &Event) -> Result<(), Gone> {
        let id = StreamId::event(event.seq);
        let Ok(data) = serde_json::to_string(event) else {
            return Ok(());
        };
        let item = SseEvent::default()
            .id(id.to_string())
            .event(event.kind.as_str())
            .data(data);
        self.send(id, item).await
    }

    async fn send(&mut self, id: StreamId, item: SseEvent) -> Result<(), Gone> {
        match tokio::time::timeout(STALL_LIMIT, self.tx.send(item)).await {
            Ok(Ok(())) => {
                self.last = id;
                Ok(())
            }
            _ => Err(Gone),
        }
    }
}
