//! `/api/local/tasks`: create, read and list tasks.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maestro_api::ErrorBody;
use maestro_api::{CreateTask, Task, TaskPage};
use maestro_db::jobs::Publish;
use maestro_db::tasks::NewTask;
use maestro_domain::job::DEFAULT_PROFILE;
use maestro_domain::space::SpaceRecord;
use maestro_domain::{JobId, JobStatus, Owner, SpaceId, TaskId, Visibility};

use super::parse_id;
use crate::attachments::CreateBody;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use crate::validate;

/// `POST /api/local/tasks` as `multipart/form-data` (for the OpenAPI document).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct CreateTaskForm {
    /// The JSON body of a JSON create (`CreateTask`).
    task: CreateTask,
    /// Files placed in the task's workspace under `attachments/`, each with a file name.
    #[schema(value_type = Vec<String>, format = Binary)]
    file: Vec<Vec<u8>>,
}

/// A validated [`CreateTask`], its defaults filled in.
pub(crate) struct Valid {
    pub instruction: String,
    pub piece: String,
    pub start_movement: Option<String>,
    pub model: Option<String>,
    pub space: Option<SpaceId>,
    pub visibility: Visibility,
    pub profile: String,
}

/// What a task that `caller` asks for with `body` will be, whoever creates it (a person, an
/// A2A client, a schedule): the space it names (checked as the caller's to add tasks to)
/// and its piece give the defaults it leaves out.
pub(crate) async fn resolve(
    state: &AppState,
    caller: &Owner,
    body: CreateTask,
) -> Result<Valid, ApiError> {
    let space = space_for_task(state, caller, body.space_id).await?;
    validate(state, body, space.as_ref())
}

/// Validate `body`; the space it names (when it names one, checked as the caller's to add
/// tasks to) gives the defaults it leaves out.
fn validate(
    state: &AppState,
    body: CreateTask,
    space: Option<&SpaceRecord>,
) -> Result<Valid, ApiError> {
    let settings = &state.settings;
    let instruction = validate::instruction(settings, &body.instruction)?;
    let piece = body
        .piece
        .or_else(|| space.and_then(|s| s.default_piece.clone()))
        .unwrap_or_else(|| settings.selection.piece().to_owned());
    validate::piece(settings, &piece, body.start_movement.as_deref())?;
    let of_piece = settings.catalog.get(&piece);
    let model = body
        .model
        .or_else(|| of_piece.and_then(|p| p.model.clone()))
        .or_else(|| space.and_then(|s| s.default_model.clone()));
    if let Some(model) = &model {
        validate::model(settings, model)?;
    }
    // A space's tasks share its repository (what one commits, every member sees), so they
    // are seen by its members: `space`. Private or public work goes outside a space.
    let visibility = match (body.visibility, space) {
        (Some(Visibility::Space), None) => {
            return Err(ApiError::invalid(
                "invalid_visibility",
                "visibility `space` needs a space_id",
            ));
        }
        (Some(v @ (Visibility::Private | Visibility::Public)), Some(_)) => {
            return Err(ApiError::invalid(
                "invalid_visibility",
                format!(
                    "a space's tasks share its files, so they are `space`; a `{}` task goes outside a space",
                    v.as_str()
                ),
            ));
        }
        (Some(v), _) => v,
        (None, Some(_)) => Visibility::Space,
        (None, None) => Visibility::Private,
    };
    let profile = body
        .profile
        .or_else(|| of_piece.and_then(|p| p.profile.clone()))
        .or_else(|| space.and_then(|s| s.profile.clone()))
        .unwrap_or_else(|| DEFAULT_PROFILE.to_owned());
    validate::profile(&profile)?;
    if let Some(space) = space
        && !space.profiles.is_empty()
        && !space.profiles.contains(&profile)
    {
        return Err(ApiError::invalid(
            "invalid_profile",
            format!(
                "profile {profile:?} is not one this space allows: {}",
                space.profiles.join(", ")
            ),
        ));
    }
    Ok(Valid {
        instruction,
        piece,
        start_movement: body.start_movement,
        model,
        space: space.map(|s| s.id),
        visibility,
        profile,
    })
}

/// The space a new task names, if the caller may add tasks to it: 404 when they are not a
/// member, 403 for a viewer, 409 when it is archived.
pub(crate) async fn space_for_task(
    state: &AppState,
    caller: &Owner,
    id: Option<SpaceId>,
) -> Result<Option<SpaceRecord>, ApiError> {
    let Some(id) = id else { return Ok(None) };
    let space = maestro_db::spaces::get(&state.pool, caller, id)
        .await?
        .ok_or(ApiError::NotFound("space"))?;
    if !space.role.acts() {
        return Err(ApiError::Forbidden(
            "viewers of a space do not add tasks to it".to_owned(),
        ));
    }
    if space.archived_at.is_some() {
        return Err(ApiError::Conflict {
            code: "space_archived",
            message: "the space is archived: it takes no new task".to_owned(),
        });
    }
    Ok(Some(space))
}

/// `POST /api/local/tasks`: create a task and queue its first job. With an
/// `Idempotency-Key`, repeating the request returns the task the first one created.
#[utoipa::path(
    post,
    path = "/api/local/tasks",
    tag = "tasks",
    summary = "Create a task (and its first job)",
    params(("Idempotency-Key" = Option<String>, Header, description = "Retries with the same key answer the same task")),
    request_body(content(
        (CreateTask = "application/json"),
        (CreateTaskForm = "multipart/form-data")
    )),
    responses(
        (status = 201, description = "The task was created", body = Task),
        (status = 200, description = "The same request with the same Idempotency-Key was already answered", body = Task),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Caller(owner): Caller,
    headers: HeaderMap,
    CreateBody {
        task: body,
        attachments,
    }: CreateBody,
) -> Result<Response, ApiError> {
    let key = validate::idempotency_key(&headers)?;
    let valid = resolve(&state, &owner, body).await?;
    let space_id = valid.space.map(|s| s.to_string()).unwrap_or_default();
    let attached: Vec<String> = attachments
        .iter()
        .map(|a| format!("{}:{}", a.name, a.sha256))
        .collect();
    let attached = attached.join(",");
    let hash = validate::request_hash(&[
        &attached,
        &valid.instruction,
        &valid.piece,
        valid.start_movement.as_deref().unwrap_or(""),
        valid.model.as_deref().unwrap_or(""),
        &space_id,
        valid.visibility.as_str(),
        &valid.profile,
    ]);
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
        profile: &valid.profile,
        space_id: valid.space,
        visibility: valid.visibility,
        max_attempts: state.settings.job_max_attempts,
        context_id: None,
        message_id: None,
        push: None,
        attachments: &attachments,
    };
    let created =
        maestro_db::tasks::create_publishing(&state.pool, &new, Publish::Directly).await?;
    let Some((task, queued)) = created else {
        return replay(&state, &owner, key.as_deref().unwrap_or_default(), &hash).await;
    };
    tracing::info!(%task_id, %job_id, piece = %valid.piece, "task created");
    maestro_runtime::metrics::task_created("rest");
    let fresh = valid.space.is_none() && attachments.is_empty();
    let carried = fresh && maestro_messaging::payloads::Opening::fits(&valid.instruction);
    let opening = carried.then(|| maestro_messaging::payloads::Opening {
        owner: owner.as_str().to_owned(),
        instruction: valid.instruction.clone(),
        piece: valid.piece.clone(),
        start_movement: valid.start_movement.clone(),
        model: valid.model.clone(),
        created_at: task.created_at,
        a2a_message_id: None,
        a2a_context_id: None,
    });
    crate::usecases::announce_new_task(
        &state.bus,
        (&valid.profile, fresh),
        (task_id, job_id),
        opening,
        queued,
    )
    .await;
    Ok((StatusCode::CREATED, Json(Task::new(task))).into_response())
}

/// The answer to a repeated idempotent request.
async fn replay(
    state: &AppState,
    owner: &Owner,
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
    let mut response = (StatusCode::OK, Json(Task::new(task))).into_response();
    response
        .headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    Ok(response)
}

/// `GET /api/local/tasks/{id}`
#[utoipa::path(
    get,
    path = "/api/local/tasks/{id}",
    tag = "tasks",
    summary = "A task with its current job",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, body = Task),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<Task>, ApiError> {
    let id: TaskId = parse_id(&id, "task")?;
    let task = maestro_db::tasks::get(&state.pool, &owner, id)
        .await?
        .ok_or(ApiError::NotFound("task"))?;
    Ok(Json(Task::new(task)))
}

/// `?limit=&before=&space=` of the task listing.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// How many (20 when absent).
    #[serde(default)]
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
    /// The cursor: the `next_before` of the previous page.
    #[serde(default)]
    pub before: Option<String>,
    /// Only this space's tasks (with its public ones, if you are not a member).
    #[serde(default)]
    pub space: Option<String>,
    /// Only tasks whose latest job has this status (`queued`, `running`, `waiting_human`, …).
    #[serde(default)]
    pub state: Option<String>,
    /// Only tasks whose instruction contains this text (case-insensitive; at most 200 bytes).
    #[serde(default)]
    pub q: Option<String>,
}

/// The longest search text.
const MAX_SEARCH_BYTES: usize = 200;

/// `GET /api/local/tasks?limit=&before=&space=&state=&q=`: the tasks the caller may see,
/// newest first: their own and the non-private tasks of their spaces.
#[utoipa::path(
    get,
    path = "/api/local/tasks",
    tag = "tasks",
    summary = "Your tasks and your spaces' tasks, newest first",
    params(ListQuery),
    responses(
        (status = 200, body = TaskPage),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(owner): Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<TaskPage>, ApiError> {
    let query = super::query(query)?;
    let limit = super::page_limit(query.limit)?;
    let before = super::before::<TaskId>(query.before.as_deref(), "a task id")?;
    let space = query
        .space
        .as_deref()
        .map(|s| {
            s.parse::<SpaceId>()
                .map_err(|_| ApiError::bad_request("invalid_query", "space is a space id"))
        })
        .transpose()?;
    let status = query
        .state
        .as_deref()
        .map(|s| {
            JobStatus::ALL
                .into_iter()
                .find(|status| status.as_str() == s)
                .ok_or_else(|| {
                    let known: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
                    ApiError::bad_request(
                        "invalid_query",
                        format!("state is one of {}", known.join(", ")),
                    )
                })
        })
        .transpose()?;
    let text = query.q.as_deref().filter(|q| !q.trim().is_empty());
    if text.is_some_and(|q| q.len() > MAX_SEARCH_BYTES || q.contains('\0')) {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("q is at most {MAX_SEARCH_BYTES} bytes, without NUL characters"),
        ));
    }
    let filter = maestro_db::tasks::Filter {
        ids: None,
        before,
        space,
        status,
        text: text.map(str::trim),
    };
    let tasks = maestro_db::tasks::list(&state.pool, &owner, &filter, limit).await?;
    let next_before = if tasks.len() as i64 == limit {
        tasks.last().map(|t| t.id)
    } else {
        None
    };
    Ok(Json(TaskPage {
        tasks: tasks.into_iter().map(Task::new).collect(),
        next_before,
    }))
}
