//! What a task has done: its persisted events, its transcript, the subtasks it delegated;
//! and the pieces tasks may name.

use axum::Json;
use axum::extract::{Path, Query, State};
use maestro_api::ErrorBody;
use maestro_api::{EventPage, SubtaskList, Transcript};
use serde::Deserialize;

use super::{parse_id, readable_task};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    #[serde(default)]
    after: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
}

/// `GET /api/local/tasks/{id}/events?after=SEQ&limit=`: persisted events with `seq > after`.
#[utoipa::path(
    get,
    path = "/api/local/tasks/{id}/events",
    tag = "tasks",
    summary = "The task's persisted events after a sequence number",
    params(("id" = String, Path, description = "The task id"), EventsQuery),
    responses(
        (status = 200, body = EventPage),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn events(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<EventPage>, ApiError> {
    parse_id::<maestro_domain::TaskId>(&id, "task")?;
    let Query(query) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let after = query.after.unwrap_or(0);
    let limit = query.limit.unwrap_or(500);
    if after < 0 || !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "after is a seq (>= 0); limit is 1 to 1000",
        ));
    }
    let (id, creator) = super::read_task_as(&state, &owner, &id).await?;
    let events: Vec<_> = maestro_db::events::list(&state.pool, id, after, limit)
        .await?
        .into_iter()
        .map(|e| e.for_reader(creator))
        .collect();
    let next_after = events.last().map_or(after, |e| e.seq);
    Ok(Json(EventPage { events, next_after }))
}

/// `GET /api/local/tasks/{id}/subtasks`: the tasks this task delegated (oldest first), each
/// with its latest job's status, result and error.
#[utoipa::path(
    get,
    path = "/api/local/tasks/{id}/subtasks",
    tag = "tasks",
    summary = "The subtasks a task delegated",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, body = SubtaskList),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn subtasks(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<SubtaskList>, ApiError> {
    let id = readable_task(&state, &owner, &id).await?;
    Ok(Json(SubtaskList {
        subtasks: maestro_db::subtasks::children(&state.pool, id).await?,
    }))
}

/// `GET /api/local/tasks/{id}/transcript`: the task's conversation as the model saw it, one
/// thread per job (each opening with its system message), after any prompt-guard rewrite.
#[utoipa::path(
    get,
    path = "/api/local/tasks/{id}/transcript",
    tag = "tasks",
    summary = "The conversation of every job of the task",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, body = Transcript),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn transcript(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<Transcript>, ApiError> {
    let task_id = readable_task(&state, &owner, &id).await?;
    let events = maestro_db::events::list(&state.pool, task_id, 0, i64::MAX).await?;
    let messages = maestro_domain::transcript::transcript(&events)
        .map_err(|e| ApiError::Unexpected(anyhow::anyhow!("a stored event is unreadable: {e}")))?;
    Ok(Json(Transcript { task_id, messages }))
}

/// `GET /api/local/pieces`: the pieces tasks may name, with their movements.
#[utoipa::path(
    get,
    path = "/api/local/pieces",
    tag = "tasks",
    summary = "The pieces (workflows) tasks can run",
    responses(
        (status = 200, description = "Each piece with its movements", body = serde_json::Value),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn pieces(
    State(state): State<AppState>,
    Caller(_owner): Caller,
) -> Json<serde_json::Value> {
    let pieces: Vec<serde_json::Value> = state
        .settings
        .catalog
        .pieces()
        .map(|p| {
            serde_json::json!({
                "name": p.name,
                "description": p.description,
                "start_movement": p.start,
                "movements": p.movements.iter().map(|m| serde_json::json!({
                    "name": m.name,
                    "transitions": m.transitions.iter().map(|t| &t.target).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Json(serde_json::json!({
        "pieces": pieces,
        "default": state.settings.selection.piece(),
    }))
}
