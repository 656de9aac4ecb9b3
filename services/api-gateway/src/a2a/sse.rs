//! A2A streams (`SendStreamingMessage`, `SubscribeToTask`): the task's stream (`crate::stream`)
//! translated by `maestro_a2a::stream::Renderer`, each SSE event's `data:` a `StreamResponse`
//! (inside a JSON-RPC response with the request's id on the JSON-RPC binding).
//!
//! Every event carries an SSE `id:` (the resume extension): `<seq>` for the first A2A event
//! that MAESTRO event `<seq>` means and `<seq>/<k>` for the k-th after it, `<seq>.<n>` for a
//! live text chunk. Resuming after an id replays every later event exactly once, in order.
//! The task snapshot a stream opens with has no id: it is not an event, and a client that
//! resumes gets a fresh one.

use std::fmt;

use axum::response::sse::Event as SseEvent;
use maestro_a2a::jsonrpc::Dialect;
use maestro_a2a::stream::Renderer;
use maestro_a2a::types::{StreamResponse, Task};
use maestro_a2a::{A2aError, jsonrpc, v03};
use maestro_domain::{Event, StreamId, TaskId};
use maestro_messaging::payloads::{Delta, DeltaFragment};
use serde_json::Value;

use super::ops::{self, Ctx};
use crate::stream::{self, Render, SseStream};

/// How each event is wrapped.
#[derive(Debug, Clone)]
pub enum Envelope {
    /// A JSON-RPC response carrying the request's id, in the request's protocol version.
    JsonRpc(Value, Dialect),
    /// The bare `StreamResponse` (HTTP+JSON binding).
    Bare,
}

impl Envelope {
    fn data(&self, item: &StreamResponse) -> String {
        let value = serde_json::to_value(item).unwrap_or(Value::Null);
        match self {
            Envelope::JsonRpc(id, Dialect::V1) => jsonrpc::result(id, value).to_string(),
            Envelope::JsonRpc(id, Dialect::V03) => {
                jsonrpc::result(id, v03::result_to_v03(&value)).to_string()
            }
            Envelope::Bare => value.to_string(),
        }
    }
}

/// When a stream has said all it will.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The task is over (`SubscribeToTask`: a paused task's stream stays open).
    Over,
    /// The task is over or waits for the client (`SendStreamingMessage`).
    Interrupted,
}

/// A position a client resumes after: a stream id, and for an event, how many of the A2A
/// events it means the client got beyond the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub id: StreamId,
    pub sub: usize,
}

impl Cursor {
    pub fn parse(raw: &str) -> Result<Cursor, A2aError> {
        let invalid =
            |_| A2aError::invalid_params(format!("{raw:?} is not an event id of this stream"));
        let (id, sub) = match raw.split_once('/') {
            Some((id, sub)) => (id, sub.parse::<usize>().map_err(|_| invalid(()))?),
            None => (raw, 0),
        };
        let id: StreamId = id.trim().parse().map_err(|_| invalid(()))?;
        Ok(Cursor { id, sub })
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.sub {
            0 => write!(f, "{}", self.id),
            k => write!(f, "{}/{k}", self.id),
        }
    }
}

/// The A2A translation of one client's stream.
struct A2aRender {
    renderer: Renderer,
    envelope: Envelope,
    until: Until,
}

impl A2aRender {
    fn items(&self, seq: i64, items: Vec<StreamResponse>, skip: usize) -> Vec<SseEvent> {
        items
            .into_iter()
            .enumerate()
            .skip(skip)
            .map(|(k, item)| {
                let cursor = Cursor {
                    id: StreamId::event(seq),
                    sub: k,
                };
                SseEvent::default()
                    .id(cursor.to_string())
                    .data(self.envelope.data(&item))
            })
            .collect()
    }
}

impl Render for A2aRender {
    fn event(&mut self, event: &Event) -> Vec<SseEvent> {
        let items = self.renderer.event(event);
        self.items(event.seq, items, 0)
    }

    fn delta(&mut self, id: StreamId, delta: &Delta) -> Vec<SseEvent> {
        let DeltaFragment::Text { text } = &delta.fragment else {
            return Vec::new();
        };
        self.renderer
            .text(id.seq, text)
            .into_iter()
            .map(|item| {
                SseEvent::default()
                    .id(id.to_string())
                    .data(self.envelope.data(&item))
            })
            .collect()
    }

    fn done(&self) -> bool {
        self.renderer.state().is_some_and(|s| match self.until {
            Until::Over => s.is_terminal(),
            Until::Interrupted => s.is_interrupted(),
        })
    }
}

/// Open task `task_id`'s A2A stream for a client: a fresh snapshot first, then every event
/// after `cursor` (or after the snapshot), until the stream has said all it will.
pub async fn open(
    ctx: Ctx<'_>,
    task_id: TaskId,
    cursor: Option<Cursor>,
    envelope: Envelope,
    until: Until,
) -> Result<SseStream, A2aError> {
    let state = ctx.state;
    // Readers other than the creator do not get MCP login links (`Event::for_reader`).
    let creator = maestro_db::tasks::reach(&state.pool, ctx.owner, task_id)
        .await
        .map_err(|e| ops::from_api(e.into()))?
        .is_some_and(|(_, creator)| creator);
    let last_seq = maestro_db::events::last_seq(&state.pool, task_id)
        .await
        .map_err(|e| ops::from_api(e.into()))?;
    let snapshot: Task = ops::task(
        ctx,
        task_id,
        maestro_a2a::map::Shape {
            history_length: None,
            include_artifacts: true,
        },
    )
    .await?;
    let context = snapshot
        .context_id
        .clone()
        .unwrap_or_else(|| task_id.to_string());
    // Resuming after an event: the A2A events it meant that the client did not get come first.
    let resume_event = cursor.filter(|c| !c.id.is_delta() && c.id.seq > 0 && c.id.seq <= last_seq);
    // Caught up: the snapshot says where the task is. Otherwise the replay will.
    let (position, known) = match cursor {
        None => (StreamId::event(last_seq), Some(snapshot.status.state)),
        Some(c) if c.id.seq >= last_seq && resume_event.is_none() => {
            (c.id, Some(snapshot.status.state))
        }
        Some(c) => (c.id, None),
    };
    let mut render = A2aRender {
        renderer: Renderer::new(task_id.to_string(), context, known, position),
        envelope,
        until,
    };
    let mut first =
        vec![SseEvent::default().data(render.envelope.data(&StreamResponse::Task(snapshot)))];
    if let Some(c) = resume_event {
        first.extend(rest_of(ctx, (task_id, creator), c, &mut render).await?);
    }
    stream::open(state.clone(), (task_id, creator), position, first, render)
        .await
        .map_err(ops::from_api)
}

/// The A2A events of MAESTRO event `cursor.id` the client did not get (those after the
/// `cursor.sub`-th), rendered as they were the first time (which also tells the renderer the
/// state the client knows).
async fn rest_of(
    ctx: Ctx<'_>,
    (task_id, creator): (TaskId, bool),
    cursor: Cursor,
    render: &mut A2aRender,
) -> Result<Vec<SseEvent>, A2aError> {
    let event = maestro_db::events::get(&ctx.state.pool, task_id, cursor.id.seq)
        .await
        .map_err(|e| ops::from_api(e.into()))?;
    let Some(event) = event else {
        return Ok(Vec::new());
    };
    let event = event.for_reader(creator);
    let items = render.renderer.event(&event);
    Ok(render.items(event.seq, items, cursor.sub + 1))
}
