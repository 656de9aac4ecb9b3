//! `GET /api/local/tasks/{id}/stream` (and `/jobs/{job_id}/stream` for one job): Server-Sent
//! Events of a task's persisted events and live deltas, in stream order (`id:` is the
//! [`StreamId`]), exactly once (`crate::stream`). `Last-Event-ID` (or `?after=`) resumes after
//! a given id.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use maestro_api::ErrorBody;
use maestro_domain::{Event, JobId, StreamId, TaskId};
use maestro_messaging::payloads::Delta;
use serde::Deserialize;

use super::parse_id;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::fanout::Shared;
use crate::state::AppState;
use crate::stream::{self, Render, SseStream};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    #[serde(default)]
    after: Option<String>,
}

/// `GET /api/local/tasks/{id}/stream`
#[utoipa::path(
    get,
    path = "/api/local/tasks/{id}/stream",
    tag = "streams",
    summary = "The task's events and live deltas as they happen",
    params(("id" = String, Path, description = "The task id"), StreamQuery, ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event")),
    responses(
        (status = 200, description = "A Server-Sent Events stream; resume with `Last-Event-ID`", content_type = "text/event-stream", body = crate::stream::StreamEvent),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
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
#[utoipa::path(
    get,
    path = "/api/local/tasks/{id}/jobs/{job_id}/stream",
    tag = "streams",
    summary = "One job's events and live deltas",
    params(("id" = String, Path, description = "The task id"), ("job_id" = String, Path, description = "The job id"), StreamQuery, ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event")),
    responses(
        (status = 200, description = "A Server-Sent Events stream; resume with `Last-Event-ID`", content_type = "text/event-stream", body = crate::stream::StreamEvent),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
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
    let reach = maestro_db::tasks::reach(&state.pool, &owner, task_id).await?;
    super::check_access(reach.map(|(a, _)| a), maestro_domain::Access::Read)?;
    let creator = reach.is_some_and(|(_, creator)| creator);
    if let Some(job) = job
        && !maestro_db::jobs::belongs_to(&state.pool, job, task_id).await?
    {
        return Err(ApiError::NotFound("job"));
    }
    stream::open(state, (task_id, creator), last, Vec::new(), Raw { job }).await
}

/// MAESTRO's own items: every event (of one job, for a per-job stream) as its kind, every
/// delta as `delta`, each with its stream position as `id:`. What an item renders as depends
/// on the item alone, so a live item is rendered once for all of the task's clients.
struct Raw {
    job: Option<JobId>,
}

impl Raw {
    fn render_event(event: &Event) -> Vec<SseEvent> {
        let Ok(data) = serde_json::to_string(event) else {
            return Vec::new();
        };
        let id = StreamId::event(event.seq);
        vec![
            SseEvent::default()
                .id(id.to_string())
                .event(event.kind.as_str())
                .data(data),
        ]
    }

    fn render_delta(id: StreamId, delta: &Delta) -> Vec<SseEvent> {
        let Ok(data) = serde_json::to_string(delta) else {
            return Vec::new();
        };
        vec![
            SseEvent::default()
                .id(id.to_string())
                .event("delta")
                .data(data),
        ]
    }
}

impl Render for Raw {
    fn event(&mut self, event: &Event) -> Vec<SseEvent> {
        if self.job.is_some_and(|job| job != event.job_id) {
            return Vec::new();
        }
        Self::render_event(event)
    }

    fn delta(&mut self, id: StreamId, delta: &Delta) -> Vec<SseEvent> {
        if self.job.is_some_and(|job| job != delta.job_id) {
            return Vec::new();
        }
        Self::render_delta(id, delta)
    }

    fn live_event(&mut self, event: &Shared<Event>, creator: bool) -> Vec<SseEvent> {
        if self.job.is_some_and(|job| job != event.value.job_id) {
            return Vec::new();
        }
        event.rendered(creator, |event| {
            Self::render_event(&event.as_seen_by(creator))
        })
    }

    fn live_delta(&mut self, id: StreamId, delta: &Shared<Delta>) -> Vec<SseEvent> {
        if self.job.is_some_and(|job| job != delta.value.job_id) {
            return Vec::new();
        }
        // `id` is the delta's own (`Delta::stream_id`), so the rendering is the item's alone.
        delta.rendered(true, |delta| Self::render_delta(id, delta))
    }
}
