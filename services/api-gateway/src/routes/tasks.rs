//! `/api/local/tasks`: create, read, list, and the persisted events of a task.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maestro_db::tasks::NewTask;
use maestro_domain::{Event, JobId, TaskId, piece};
use maestro_messaging::payloads::JobDispatch;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::parse_id;
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::json::ApiJson;
use crate::views::TaskJson;

/// The body of `POST /api/local/tasks`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTask {
    pub instruction: String,
    /// A piece by name, or `auto` for the router; the configured selection when absent.
    #[serde(default)]
    pub piece: Option<String>,
    /// Start at this movement of the piece instead of its start movement.
    #[serde(default)]
    pub start_movement: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
}

/// A validated [`CreateTask`].
struct Valid {
    instruction: String,
    piece: String,
    start_movement: Option<String>,
    model: Option<String>,
}

fn validate(state: &AppState, body: CreateTask) -> Result<Valid, ApiError> {
    let instruction = body.instruction.trim().to_owned();
    if instruction.is_empty() {
        return Err(ApiError::invalid(
            "invalid_instruction",
            "instruction must not be empty",
        ));
    }
    let max = state.settings.max_instruction_bytes;
    if instruction.len() > max {
        return Err(ApiError::invalid(
            "instruction_too_long",
            format!("instruction is longer than {max} bytes"),
        ));
    }
    let catalog = &state.settings.catalog;
    let piece = body
        .piece
        .unwrap_or_else(|| state.settings.selection.piece().to_owned());
    let found = catalog.get(&piece);
    if found.is_none() && piece != piece::ROUTER {
        let known: Vec<&str> = catalog.pieces().map(|p| p.name.as_str()).collect();
        let message = format!(
            "unknown piece {piece:?}; known pieces: {} (or {:?} to let the router choose)",
            known.join(", "),
            piece::ROUTER
        );
        return Err(ApiError::invalid("unknown_piece", message));
    }
    if let Some(start) = &body.start_movement {
        let Some(found) = found else {
            return Err(ApiError::invalid(
                "invalid_start_movement",
                "start_movement needs a piece named explicitly, not the router",
            ));
        };
        if found.movement(start).is_none() {
            let known: Vec<&str> = found.movements.iter().map(|m| m.name.as_str()).collect();
            let message = format!(
                "piece {piece:?} has no movement {start:?}; its movements: {}",
                known.join(", ")
            );
            return Err(ApiError::invalid("invalid_start_movement", message));
        }
    }
    if let Some(model) = &body.model {
        let well_formed = !model.is_empty()
            && model.len() <= 128
            && model
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._:/-@".contains(c));
        if !well_formed {
            return Err(ApiError::invalid(
                "invalid_model",
                "model is 1 to 128 characters of letters, digits and ._:/-@",
            ));
        }
        let allowed = &state.settings.allowed_models;
        if !allowed.is_empty() && !allowed.contains(model) {
            let message = format!(
                "model {model:?} is not offered; offered: {}",
                allowed.join(", ")
            );
            return Err(ApiError::invalid("unknown_model", message));
        }
    }
    Ok(Valid {
        instruction,
        piece,
        start_movement: body.start_movement,
        model: body.model,
    })
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.to_str().ok().map(str::trim).unwrap_or_default();
    if key.is_empty() || key.len() > 255 {
        return Err(ApiError::bad_request(
            "invalid_idempotency_key",
            "Idempotency-Key is 1 to 255 visible ASCII characters",
        ));
    }
    if key.starts_with(maestro_db::subtasks::KEY_PREFIX) {
        return Err(ApiError::bad_request(
            "invalid_idempotency_key",
            "Idempotency-Key may not start with `subtask:` (the keys of subtasks)",
        ));
    }
    Ok(Some(key.to_owned()))
}

fn request_hash(valid: &Valid) -> String {
    let mut hasher = Sha256::new();
    for part in [
        valid.instruction.as_str(),
        valid.piece.as_str(),
        valid.start_movement.as_deref().unwrap_or(""),
        valid.model.as_deref().unwrap_or(""),
    ] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `POST /api/local/tasks`: create a task and queue its first job. With an
/// `Idempotency-Key`, repeating the request returns the task the first one created.
pub async fn create(
    State(state): State<AppState>,
    Caller(owner): Caller,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CreateTask>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let valid = validate(&state, body)?;
    let hash = request_hash(&valid);
    let (task_id, job_id) = (TaskId::new(), JobId::new());
    let new = NewTask {
        id: task_id,
        job_id,
        owner: &owner,
        instruction: &valid.instruction,
        piece: &valid.piece,
        start_movement: valid.start_movement.as_deref(),
        model: valid.model.as_deref(),
        idempotency_key: key.as_deref(),
        request_hash: &hash,
        profile: "default",
        max_attempts: state.settings.job_max_attempts,
    };
    let created = maestro_db::tasks::create(&state.pool, &new).await?;
    maestro_messaging::publish::wake_outbox(&state.nats, &state.subjects).await;
    let Some(task) = created else {
        return replay(&state, &owner, key.as_deref().unwrap_or_default(), &hash).await;
    };
    tracing::info!(%task_id, %job_id, piece = %valid.piece, "task created");
    dispatch(
        &state,
        JobDispatch {
            job_id,
            task_id,
            attempt: 0,
        },
    )
    .await;
    Ok((StatusCode::CREATED, Json(TaskJson::from(task))).into_response())
}

/// The answer to a repeated idempotent request.
async fn replay(
    state: &AppState,
    owner: &maestro_domain::Owner,
    key: &str,
    hash: &str,
) -> Result<Response, ApiError> {
    let (task_id, stored_hash) =
        maestro_db::tasks::find_by_idempotency_key(&state.pool, owner, key)
            .await?
            .ok_or_else(|| {
                ApiError::Unexpected(anyhow::anyhow!("idempotency key conflict without a task"))
            })?;
    if stored_hash.as_deref() != Some(hash) {
        return Err(ApiError::Conflict {
            code: "idempotency_key_reused",
            message: "this Idempotency-Key was used for a different request".to_owned(),
        });
    }
    let task = maestro_db::tasks::get(&state.pool, owner, task_id)
        .await?
        .ok_or(ApiError::NotFound("task"))?;
    let mut response = (StatusCode::OK, Json(TaskJson::from(task))).into_response();
    response
        .headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    Ok(response)
}

/// Publish a job's dispatch. The job is committed already: if this fails the scheduler
/// dispatches it again, so the request still succeeds.
pub(crate) async fn dispatch(state: &AppState, dispatch: JobDispatch) {
    let subject = state.subjects.dispatch("default");
    let result = maestro_messaging::publish::publish_json(
        &state.js,
        subject,
        &dispatch.message_id(),
        &dispatch,
    )
    .await;
    if let Err(e) = result {
        tracing::warn!(error = %e, job_id = %dispatch.job_id, "dispatch not published; the scheduler will retry it");
    }
}

/// `GET /api/local/tasks/{id}`
pub async fn get(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<TaskJson>, ApiError> {
    let id: TaskId = parse_id(&id, "task")?;
    let task = maestro_db::tasks::get(&state.pool, &owner, id)
        .await?
        .ok_or(ApiError::NotFound("task"))?;
    Ok(Json(task.into()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    before: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TaskPage {
    tasks: Vec<TaskJson>,
    /// Pass as `before` to get the next (older) page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_before: Option<TaskId>,
}

/// `GET /api/local/tasks?limit=&before=`: the caller's tasks, newest first.
pub async fn list(
    State(state): State<AppState>,
    Caller(owner): Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<TaskPage>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let limit = query.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "limit is 1 to 100"));
    }
    let before = match query.before.as_deref() {
        None => None,
        Some(raw) => Some(
            raw.parse::<TaskId>()
                .map_err(|_| ApiError::bad_request("invalid_query", "before is a task id"))?,
        ),
    };
    let tasks = maestro_db::tasks::list(&state.pool, &owner, before, limit).await?;
    let next_before = if tasks.len() as i64 == limit {
        tasks.last().map(|t| t.id)
    } else {
        None
    };
    Ok(Json(TaskPage {
        tasks: tasks.into_iter().map(TaskJson::from).collect(),
        next_before,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    #[serde(default)]
    after: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct EventPage {
    events: Vec<Event>,
    /// Pass as `after` to continue; equals the request's `after` when nothing is new.
    next_after: i64,
}

/// The subtasks a task started.
#[derive(Debug, Serialize)]
pub struct SubtaskList {
    pub subtasks: Vec<maestro_db::subtasks::Child>,
}

/// `GET /api/local/tasks/{id}/subtasks`: the tasks this task delegated (oldest first), each
/// with its latest job's status, result and error.
pub async fn subtasks(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<SubtaskList>, ApiError> {
    let id: TaskId = parse_id(&id, "task")?;
    if !maestro_db::tasks::exists(&state.pool, &owner, id).await? {
        return Err(ApiError::NotFound("task"));
    }
    Ok(Json(SubtaskList {
        subtasks: maestro_db::subtasks::children(&state.pool, id).await?,
    }))
}

/// `GET /api/local/tasks/{id}/events?after=SEQ&limit=`: persisted events with `seq > after`.
pub async fn events(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<EventPage>, ApiError> {
    let id: TaskId = parse_id(&id, "task")?;
    let Query(query) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let after = query.after.unwrap_or(0);
    let limit = query.limit.unwrap_or(500);
    if after < 0 || !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "after is a seq (>= 0); limit is 1 to 1000",
        ));
    }
    if !maestro_db::tasks::exists(&state.pool, &owner, id).await? {
        return Err(ApiError::NotFound("task"));
    }
    let events = maestro_db::events::list(&state.pool, id, after, limit).await?;
    let next_after = events.last().map_or(after, |e| e.seq);
    Ok(Json(EventPage { events, next_after }))
}

/// `GET /api/local/tasks/{id}/transcript`: the task's conversation as the model saw it, one
/// thread per job (each opening with its system message), after any prompt-guard rewrite.
pub async fn transcript(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let id: TaskId = parse_id(&id, "task")?;
    if !maestro_db::tasks::exists(&state.pool, &owner, id).await? {
        return Err(ApiError::NotFound("task"));
    }
    let events = maestro_db::events::list(&state.pool, id, 0, i64::MAX).await?;
    let lines = maestro_domain::transcript::transcript(&events)
        .map_err(|e| ApiError::Unexpected(anyhow::anyhow!("a stored event is unreadable: {e}")))?;
    Ok(Json(
        serde_json::json!({ "task_id": id, "messages": lines }),
    ))
}

/// `GET /api/local/pieces`: the pieces tasks may name, with their movements.
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
