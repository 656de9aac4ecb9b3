//! The A2A operations on MAESTRO, whatever the binding: a message creates a task or reaches
//! an existing one (through the same routing and checks as a REST comment or decision); tasks
//! are read, listed and cancelled as the owner's. A2A types in, A2A types out; every refusal
//! is an [`A2aError`] and writes nothing.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use maestro_a2a::map::{self, Shape, TaskParts};
use maestro_a2a::types::{
    ListTasksRequest, ListTasksResponse, Message, Role, SendMessageRequest, Task,
    TaskPushNotificationConfig, TaskState,
};
use maestro_a2a::{A2aError, ErrorKind};
use maestro_api::DecideRequest;
use maestro_db::comments::Said;
use maestro_db::jobs::Publish;
use maestro_db::tasks::NewTask;
use maestro_domain::{ActionId, JobId, Owner, TaskId, TaskRecord, WaitReason};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::state::AppState;
use crate::{routing, usecases, validate};

/// The metadata key that turns a message to a finished task into a Continue (an extension:
/// A2A itself refuses messages to terminal tasks).
pub const CONTINUE_KEY: &str = "maestro/continue";
/// The metadata key (on the message or the request) that names the skill (piece) of a new task.
pub const SKILL_KEY: &str = "skill";
/// The metadata key that puts a new task in a space (its id; the caller must be an editor or
/// owner there): it then takes the space's defaults, as a REST create does.
pub const SPACE_KEY: &str = "maestro/space";
/// The metadata key that names a new task's model.
pub const MODEL_KEY: &str = "maestro/model";
/// Media types a message's parts may have.
pub const INPUT_MODES: [&str; 2] = ["text/plain", "application/json"];

/// The owner a request acts for.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub state: &'a AppState,
    pub owner: &'a Owner,
    /// The base URL the caller reached the gateway at (for the URLs of files).
    pub base: &'a str,
}

/// A MAESTRO refusal as A2A says it.
pub fn from_api(error: ApiError) -> A2aError {
    let message = error.to_string();
    match error {
        ApiError::NotFound("task") => A2aError::task_not_found(),
        ApiError::NotFound(_)
        | ApiError::Invalid(..)
        | ApiError::BadRequest { .. }
        | ApiError::Forbidden(_) => A2aError::invalid_params(message),
        ApiError::Conflict { code, .. } => A2aError::invalid_params(format!("{message} ({code})")),
        ApiError::Unavailable(_) | ApiError::Unexpected(_) => {
            A2aError::internal("internal error; it was logged, and retrying may help")
        }
        other => A2aError::invalid_params(other.to_string()),
    }
}

fn db(error: maestro_db::DbError) -> A2aError {
    from_api(error.into())
}

/// A task id from a request: one the caller may see, or `TaskNotFound`.
pub async fn readable(ctx: Ctx<'_>, raw: &str) -> Result<TaskId, A2aError> {
    with_access(ctx, raw, maestro_domain::Access::Read).await
}

/// A task id from a request: one the caller may act on (send to, cancel, push from), else
/// `TaskNotFound` (or, for a task they may only read, an invalid-params error saying so).
pub async fn actable(ctx: Ctx<'_>, raw: &str) -> Result<TaskId, A2aError> {
    with_access(ctx, raw, maestro_domain::Access::Act).await
}

async fn with_access(
    ctx: Ctx<'_>,
    raw: &str,
    need: maestro_domain::Access,
) -> Result<TaskId, A2aError> {
    let id: TaskId = raw.parse().map_err(|_| A2aError::task_not_found())?;
    let has = maestro_db::tasks::access(&ctx.state.pool, ctx.owner, id)
        .await
        .map_err(db)?;
    crate::routes::check_access(has, need).map_err(from_api)?;
    Ok(id)
}

/// `SendMessage`'s effect: create a task, or bring the message to the task it names; the task.
pub async fn send(ctx: Ctx<'_>, request: &SendMessageRequest) -> Result<TaskId, A2aError> {
    let message = &request.message;
    check_message(message)?;
    let push = request
        .configuration
        .as_ref()
        .and_then(|c| c.task_push_notification_config.as_ref());
    match message.task_id.as_deref().filter(|t| !t.is_empty()) {
        None => create(ctx, request, push).await,
        Some(raw) => {
            let task_id = actable(ctx, raw).await?;
            let push = push
                .map(|p| super::push::config_of(task_id, p))
                .transpose()?;
            reach(ctx, task_id, request).await?;
            // Stored once the message is taken (a refused message writes nothing).
            if let Some(push) = push {
                super::push::put(ctx, push).await?;
            }
            Ok(task_id)
        }
    }
}

fn check_message(message: &Message) -> Result<(), A2aError> {
    if message.role != Role::User {
        return Err(A2aError::invalid_params(
            "a message to the agent has role ROLE_USER",
        ));
    }
    if message.message_id.trim().is_empty() || message.message_id.len() > 255 {
        return Err(A2aError::invalid_params("messageId is 1 to 255 characters"));
    }
    if message.parts.is_empty() {
        return Err(A2aError::invalid_params("a message has at least one part"));
    }
    for part in &message.parts {
        let media = part.media_type.as_deref().filter(|m| !m.is_empty());
        if let Some(media) = media
            && !INPUT_MODES.contains(&media)
            && part.text.is_none()
        {
            return Err(A2aError::new(
                ErrorKind::ContentTypeNotSupported,
                format!(
                    "parts of type {media} are not accepted; send {}",
                    INPUT_MODES.join(" or ")
                ),
            ));
        }
        if part.raw.is_some() {
            return Err(A2aError::new(
                ErrorKind::ContentTypeNotSupported,
                "inline file bytes are not accepted; send text, data, or a file by URL",
            ));
        }
    }
    Ok(())
}

/// The instruction a message carries: its text, then its data and file references.
fn instruction_of(message: &Message) -> String {
    let mut lines = Vec::new();
    for part in &message.parts {
        if let Some(text) = &part.text {
            lines.push(text.clone());
        } else if let Some(data) = &part.data {
            lines.push(format!("```json\n{data}\n```"));
        } else if let Some(url) = &part.url {
            let name = part.filename.as_deref().unwrap_or("a file");
            lines.push(format!("[attached: {name} at {url}]"));
        }
    }
    lines.join("\n\n")
}

/// A metadata string from the message or the request.
fn meta<'a>(request: &'a SendMessageRequest, key: &str) -> Option<&'a Value> {
    let on_message = request.message.metadata.as_ref().and_then(|m| m.get(key));
    on_message.or_else(|| request.metadata.as_ref().and_then(|m| m.get(key)))
}

async fn create(
    ctx: Ctx<'_>,
    request: &SendMessageRequest,
    push: Option<&TaskPushNotificationConfig>,
) -> Result<TaskId, A2aError> {
    let message = &request.message;
    let text = |key: &str| match meta(request, key) {
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(A2aError::invalid_params(format!(
            "metadata.{key} is a string"
        ))),
        None => Ok(None),
    };
    let space_id = text(SPACE_KEY)?
        .map(|id| {
            id.parse().map_err(|_| {
                A2aError::invalid_params(format!("metadata.{SPACE_KEY} is a space id"))
            })
        })
        .transpose()?;
    let body = maestro_api::CreateTask {
        instruction: instruction_of(message),
        piece: text(SKILL_KEY)?,
        model: text(MODEL_KEY)?,
        space_id,
        ..Default::default()
    };
    // The same defaults and checks as a REST create: the space's and the piece's.
    let valid = crate::routes::tasks::resolve(ctx.state, ctx.owner, body)
        .await
        .map_err(from_api)?;
    let given = message.context_id.clone().filter(|c| !c.is_empty());
    let key = format!("a2a:{}", message.message_id);
    let space = valid.space.map(|s| s.to_string()).unwrap_or_default();
    let hash = validate::request_hash(&[
        "a2a",
        &valid.instruction,
        &valid.piece,
        given.as_deref().unwrap_or(""),
        valid.model.as_deref().unwrap_or(""),
        &space,
    ]);
    let context = given.unwrap_or_else(maestro_db::a2a::new_context);
    let (task_id, job_id) = (TaskId::new(), JobId::new());
    let push = push
        .map(|p| super::push::config_of(task_id, p))
        .transpose()?;
    let new = NewTask {
        id: task_id,
        job_id,
        owner: ctx.owner,
        instruction: &valid.instruction,
        piece: &valid.piece,
        start_movement: None,
        model: valid.model.as_deref(),
        idempotency_key: Some(&key),
        request_hash: &hash,
        profile: &valid.profile,
        space_id: valid.space,
        visibility: valid.visibility,
        max_attempts: ctx.state.settings.job_max_attempts,
        context_id: Some(&context),
        message_id: Some(&message.message_id),
        push: push.as_ref(),
        attachments: &[],
    };
    let created = maestro_db::tasks::create_publishing(&ctx.state.pool, &new, Publish::Directly)
        .await
        .map_err(db)?;
    let Some((task, queued)) = created else {
        return repeated_creation(ctx, &key, &hash).await;
    };
    tracing::info!(%task_id, %job_id, piece = %valid.piece, "task created over A2A");
    maestro_runtime::metrics::task_created("a2a");
    let fresh = valid.space.is_none();
    let carried = fresh && maestro_messaging::payloads::Opening::fits(&valid.instruction);
    let opening = carried.then(|| maestro_messaging::payloads::Opening {
        owner: ctx.owner.as_str().to_owned(),
        instruction: valid.instruction.clone(),
        piece: valid.piece.clone(),
        start_movement: None,
        model: valid.model.clone(),
        created_at: task.created_at,
        a2a_message_id: Some(message.message_id.clone()),
        a2a_context_id: Some(context.clone()),
    });
    crate::usecases::announce_new_task(
        &ctx.state.bus,
        (&valid.profile, fresh),
        (task_id, job_id),
        opening,
        queued,
    )
    .await;
    Ok(task_id)
}

/// The same `messageId` again: the task it created, if it was the same message.
async fn repeated_creation(ctx: Ctx<'_>, key: &str, hash: &str) -> Result<TaskId, A2aError> {
    let found = maestro_db::tasks::find_by_idempotency_key(&ctx.state.pool, ctx.owner, key)
        .await
        .map_err(db)?;
    match found {
        Some((task_id, stored)) if stored.as_deref() == Some(hash) => Ok(task_id),
        _ => Err(A2aError::invalid_params(
            "this messageId was used for a different message",
        )),
    }
}

/// A message to an existing task: an interjection, an addition, an answer, decisions, or (as
/// the Continue extension) a continuation of a finished task.
async fn reach(
    ctx: Ctx<'_>,
    task_id: TaskId,
    request: &SendMessageRequest,
) -> Result<TaskId, A2aError> {
    let message = &request.message;
    let pool = &ctx.state.pool;
    let task = record(ctx, task_id).await?;
    let context = task
        .context_id
        .clone()
        .unwrap_or_else(|| task_id.to_string());
    if let Some(given) = message.context_id.as_deref().filter(|c| !c.is_empty())
        && given != context
    {
        return Err(A2aError::invalid_params(format!(
            "contextId {given} is not the task's ({context})"
        )));
    }
    if maestro_db::comments::has_message(pool, task_id, &message.message_id)
        .await
        .map_err(db)?
    {
        return Ok(task_id);
    }
    let Some(job) = task.latest_job.as_ref() else {
        return Err(A2aError::internal("the task has no job"));
    };
    let state = map::state_of(job.status, job.wait_reason);
    if state.is_terminal() {
        return continue_finished(ctx, task_id, request, state)
            .await
            .map(|()| task_id);
    }
    let decisions = decisions_of(message)?;
    if !decisions.is_empty() {
        for decision in decisions {
            let reply = usecases::decide(
                ctx.state,
                ctx.owner,
                (task_id, decision.id),
                &decision.body,
                (&WaitReason::ALL, Some(&message.message_id)),
            );
            reply.await.map_err(from_api)?;
        }
        return Ok(task_id);
    }
    let text = instruction_of(message);
    let text = validate::instruction(&ctx.state.settings, &text).map_err(from_api)?;
    let said = Said {
        author: ctx.owner,
        body: &text,
        message_id: Some(&message.message_id),
    };
    routing::comment(ctx.state, task_id, said)
        .await
        .map_err(from_api)?;
    Ok(task_id)
}

/// A message to a finished task: refused, as A2A says, unless it asks for a Continue.
async fn continue_finished(
    ctx: Ctx<'_>,
    task_id: TaskId,
    request: &SendMessageRequest,
    state: TaskState,
) -> Result<(), A2aError> {
    if meta(request, CONTINUE_KEY) != Some(&Value::Bool(true)) {
        return Err(A2aError::unsupported(format!(
            "Task {task_id} is in terminal state: {}; start a new task in the same context \
             (referenceTaskIds), or continue this one with metadata {{\"{CONTINUE_KEY}\": true}}",
            state.name()
        )));
    }
    let message = &request.message;
    let text =
        validate::instruction(&ctx.state.settings, &instruction_of(message)).map_err(from_api)?;
    let piece = match meta(request, SKILL_KEY) {
        Some(Value::String(piece)) => {
            validate::piece(&ctx.state.settings, piece, None).map_err(from_api)?;
            Some(piece.as_str())
        }
        _ => None,
    };
    let key = format!("a2a:{}", message.message_id);
    let body = maestro_api::ContinueTask {
        instruction: text,
        piece: piece.map(str::to_owned),
        model: None,
    };
    let asked = usecases::Asked {
        key: Some(key),
        message_id: Some(&message.message_id),
    };
    usecases::continue_task(ctx.state, ctx.owner, task_id, body, asked)
        .await
        .map(|_| ())
        .map_err(from_api)
}

/// One decision in a message's data part.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DecisionPart {
    required_action_id: String,
    decision: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    arguments_hash: Option<String>,
}

struct Decision {
    id: ActionId,
    body: DecideRequest,
}

/// The decisions a message carries: a data part `{"decisions": [...]}` (or one decision).
fn decisions_of(message: &Message) -> Result<Vec<Decision>, A2aError> {
    let mut decisions = Vec::new();
    for data in message.parts.iter().filter_map(|p| p.data.as_ref()) {
        let items = match data.get("decisions") {
            Some(list) => list.clone(),
            None if data.get("requiredActionId").is_some() => Value::Array(vec![data.clone()]),
            None => continue,
        };
        let parsed: Vec<DecisionPart> = serde_json::from_value(items).map_err(|e| {
            A2aError::invalid_params(format!(
                "a decision is {{requiredActionId, decision, scope?, note?, argumentsHash?}}: {e}"
            ))
        })?;
        for d in parsed {
            let id = d.required_action_id.parse().map_err(|_| {
                A2aError::invalid_params(format!("no required action {}", d.required_action_id))
            })?;
            decisions.push(Decision {
                id,
                body: DecideRequest {
                    decision: d.decision,
                    scope: d.scope,
                    note: d.note,
                    arguments_hash: d.arguments_hash,
                },
            });
        }
    }
    Ok(decisions)
}

/// A task of the caller's, as MAESTRO records it.
pub async fn record(ctx: Ctx<'_>, task_id: TaskId) -> Result<TaskRecord, A2aError> {
    maestro_db::tasks::get(&ctx.state.pool, ctx.owner, task_id)
        .await
        .map_err(db)?
        .ok_or_else(A2aError::task_not_found)
}

/// A task as A2A shows it, and whether its latest job ended with a direct answer
/// ([`map::replied`]), read from the same events.
#[derive(Debug, Clone)]
pub struct View {
    pub task: Task,
    pub replied: bool,
}

/// Tasks of the caller's as A2A shows them, in the order of `ids`.
pub async fn tasks(ctx: Ctx<'_>, ids: &[TaskId], shape: Shape) -> Result<Vec<Task>, A2aError> {
    let views = views(ctx, ids, shape).await?;
    Ok(views.into_iter().map(|v| v.task).collect())
}

async fn views(ctx: Ctx<'_>, ids: &[TaskId], shape: Shape) -> Result<Vec<View>, A2aError> {
    let pool = &ctx.state.pool;
    let records = maestro_db::tasks::many(pool, ctx.owner, ids)
        .await
        .map_err(db)?;
    let comments = maestro_db::comments::of_tasks(pool, ids)
        .await
        .map_err(db)?;
    let events = maestro_db::events::replies_and_states(pool, ids)
        .await
        .map_err(db)?;
    let files = if shape.include_artifacts {
        maestro_db::events::files_written(pool, ids)
            .await
            .map_err(db)?
    } else {
        Vec::new()
    };
    let mut tasks = Vec::with_capacity(ids.len());
    for id in ids {
        let Some(record) = records.iter().find(|r| r.id == *id) else {
            continue;
        };
        let context = record.context_id.clone().unwrap_or_else(|| id.to_string());
        let comments: Vec<_> = comments
            .iter()
            .filter(|c| c.task_id == *id)
            .cloned()
            .collect();
        let creator = record.owner == ctx.owner.as_str();
        let events: Vec<_> = events
            .iter()
            .filter(|e| e.task_id == *id)
            .map(|e| e.clone().for_reader(creator))
            .collect();
        let files: Vec<String> = files
            .iter()
            .filter(|(task, _)| task == id)
            .map(|(_, path)| path.clone())
            .collect();
        let files_url = format!("{}/api/local/tasks/{id}/files/", ctx.base);
        let parts = TaskParts {
            record,
            context_id: &context,
            comments: &comments,
            events: &events,
            files: &files,
            files_url: &files_url,
        };
        tasks.push(View {
            task: map::task(parts, shape),
            replied: map::replied(&events),
        });
    }
    Ok(tasks)
}

/// One task of the caller's as A2A shows it.
pub async fn task(ctx: Ctx<'_>, task_id: TaskId, shape: Shape) -> Result<Task, A2aError> {
    view(ctx, task_id, shape).await.map(|v| v.task)
}

/// [`task`], with whether its agent answered directly.
pub async fn view(ctx: Ctx<'_>, task_id: TaskId, shape: Shape) -> Result<View, A2aError> {
    views(ctx, &[task_id], shape)
        .await?
        .pop()
        .ok_or_else(A2aError::task_not_found)
}

/// How much history a request asks for (`None`: all); a negative length is refused.
pub fn history_length(asked: Option<i32>) -> Result<Option<usize>, A2aError> {
    match asked {
        None => Ok(None),
        Some(n) if n < 0 => Err(A2aError::invalid_params(
            "historyLength must not be negative",
        )),
        Some(n) => Ok(Some(n as usize)),
    }
}

/// Wait (at most `limit`) until the task is over or waits for the client, and show it.
pub async fn settle(
    ctx: Ctx<'_>,
    task_id: TaskId,
    limit: Duration,
    shape: Shape,
) -> Result<View, A2aError> {
    let state = ctx.state;
    let subject = state.bus.subjects.events_of_task(task_id);
    let mut changes = state
        .bus
        .nats
        .subscribe(subject)
        .await
        .map_err(|e| A2aError::internal(format!("cannot follow the task: {e}")))?;
    // Subscribed on the server before the first read: no change falls between them.
    state
        .bus
        .nats
        .flush()
        .await
        .map_err(|e| A2aError::internal(format!("cannot follow the task: {e}")))?;
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let record = record(ctx, task_id).await?;
        let settled = record
            .latest_job
            .as_ref()
            .is_some_and(|j| map::state_of(j.status, j.wait_reason).is_interrupted());
        if settled {
            break;
        }
        // Any event may be the one; the record is read again either way (a lost message only
        // costs the poll interval).
        let wait = tokio::time::sleep_until(
            deadline.min(tokio::time::Instant::now() + Duration::from_secs(1)),
        );
        tokio::select! {
            _ = changes.next() => {}
            () = wait => {}
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
    }
    view(ctx, task_id, shape).await
}

/// `ListTasks`: the caller's tasks by last change, newest first.
pub async fn list(ctx: Ctx<'_>, request: &ListTasksRequest) -> Result<ListTasksResponse, A2aError> {
    let page_size = request.page_size.unwrap_or(50);
    if !(1..=100).contains(&page_size) {
        return Err(A2aError::invalid_params("pageSize is 1 to 100"));
    }
    let after = match request.page_token.as_deref().filter(|t| !t.is_empty()) {
        None => None,
        Some(token) => Some(parse_page_token(token)?),
    };
    let filter = request.status.map(map::jobs_in);
    let query = maestro_db::a2a::TaskQuery {
        context_id: request.context_id.as_deref().filter(|c| !c.is_empty()),
        statuses: filter.as_ref().map(|f| f.statuses.clone()),
        waiting_for: filter.and_then(|f| f.waiting_for),
        changed_after: request.status_timestamp_after,
        after,
        limit: i64::from(page_size),
    };
    let page = maestro_db::a2a::page(&ctx.state.pool, ctx.owner, &query)
        .await
        .map_err(db)?;
    let ids: Vec<TaskId> = page.tasks.iter().map(|(id, _)| *id).collect();
    let shape = Shape {
        history_length: history_length(request.history_length)?,
        include_artifacts: request.include_artifacts.unwrap_or(false),
    };
    let mut tasks = tasks(ctx, &ids, shape).await?;
    if shape.include_artifacts {
        tasks.iter_mut().for_each(|t| t.artifacts.shrink_to_fit());
    }
    let next_page_token = match page.tasks.last() {
        Some((id, at)) if page.tasks.len() == page_size as usize => page_token(*at, *id),
        _ => String::new(),
    };
    Ok(ListTasksResponse {
        tasks,
        next_page_token,
        page_size,
        total_size: page.total as i32,
    })
}

fn page_token(at: DateTime<Utc>, id: TaskId) -> String {
    format!("{}_{id}", at.timestamp_micros())
}

fn parse_page_token(token: &str) -> Result<(DateTime<Utc>, TaskId), A2aError> {
    let invalid = || A2aError::invalid_params("pageToken is not one this server gave");
    let (micros, id) = token.split_once('_').ok_or_else(invalid)?;
    let at = micros
        .parse::<i64>()
        .ok()
        .and_then(DateTime::from_timestamp_micros)
        .ok_or_else(invalid)?;
    Ok((at, id.parse().map_err(|_| invalid())?))
}

/// `CancelTask`: a task that is over cannot be cancelled.
pub async fn cancel(ctx: Ctx<'_>, raw: &str) -> Result<Task, A2aError> {
    let task_id = actable(ctx, raw).await?;
    match usecases::cancel(ctx.state, ctx.owner, task_id).await {
        Ok(()) => {}
        Err(ApiError::Conflict { .. }) => {
            return Err(A2aError::new(
                ErrorKind::TaskNotCancelable,
                format!("Task {task_id} is over and cannot be canceled"),
            ));
        }
        Err(other) => return Err(from_api(other)),
    }
    task(ctx, task_id, Shape::default()).await
}
