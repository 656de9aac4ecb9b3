//! `/api/local/schedules`: the caller's schedules (docs/schedules.md). The gateway validates
//! and stores a schedule with its next fire time and wakes the schedulers; they fire it.
//! `POST …/run` fires one now, here.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use maestro_api::ErrorBody;
use maestro_api::{
    CreateSchedule, Schedule as ScheduleView, SchedulePage, ScheduleRun, ScheduleRunPage,
    TaskTemplate,
};
use maestro_db::schedules::{self, NewRun, Schedule};
use maestro_domain::schedule::{CronSpec, RunStatus, Timing};
use maestro_domain::{Owner, ScheduleId};
use maestro_messaging::AfterCommit;

use super::{PageQuery, before, page_limit, parse_id, query};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::json::ApiJson;
use crate::state::AppState;

/// A schedule's name when none is given: its cron expression.
const NAME_MAX_CHARS: usize = 200;

/// `POST /api/local/schedules`
#[utoipa::path(
    post,
    path = "/api/local/schedules",
    tag = "schedules",
    summary = "Create a schedule: a task template run on a cron expression",
    request_body = CreateSchedule,
    responses(
        (status = 201, body = ScheduleView),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Caller(owner): Caller,
    ApiJson(body): ApiJson<CreateSchedule>,
) -> Result<(StatusCode, Json<ScheduleView>), ApiError> {
    let cron = body
        .cron
        .clone()
        .ok_or_else(|| ApiError::invalid("invalid_cron", "cron is required"))?;
    let task = body
        .task
        .clone()
        .ok_or_else(|| ApiError::invalid("invalid_task", "task (the template) is required"))?;
    let now = Utc::now();
    let blank = Schedule {
        id: ScheduleId::new(),
        name: cron.clone(),
        cron,
        timezone: "UTC".to_owned(),
        instruction: task.instruction.clone(),
        piece: String::new(),
        model: None,
        space_id: None,
        visibility: Default::default(),
        profile: maestro_domain::job::DEFAULT_PROFILE.to_owned(),
        overlap: Default::default(),
        missed: Default::default(),
        starts_at: None,
        ends_at: None,
        paused: false,
        next_fire_at: None,
        last_fire_at: None,
        created_at: now,
        updated_at: now,
    };
    let schedule = apply(&state, &owner, blank, body, now).await?;
    schedules::create(&state.pool, &owner, &schedule).await?;
    tracing::info!(schedule_id = %schedule.id, cron = %schedule.cron, next = ?schedule.next_fire_at, "schedule created");
    wake(&state).await;
    Ok((StatusCode::CREATED, Json(view(schedule))))
}

/// `PATCH /api/local/schedules/{id}`: change what is given; the next fire time is computed
/// again from now.
#[utoipa::path(
    patch,
    path = "/api/local/schedules/{id}",
    tag = "schedules",
    summary = "Change a schedule (the fields given)",
    params(("id" = String, Path, description = "The schedule id")),
    request_body = CreateSchedule,
    responses(
        (status = 200, body = ScheduleView),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn update(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CreateSchedule>,
) -> Result<Json<ScheduleView>, ApiError> {
    let current = owned(&state, &owner, &id).await?;
    let schedule = apply(&state, &owner, current, body, Utc::now()).await?;
    if !schedules::update(&state.pool, &owner, &schedule).await? {
        return Err(ApiError::NotFound("schedule"));
    }
    wake(&state).await;
    Ok(Json(view(schedule)))
}

/// `POST /api/local/schedules/{id}/pause`
#[utoipa::path(
    post,
    path = "/api/local/schedules/{id}/pause",
    tag = "schedules",
    summary = "Pause a schedule",
    params(("id" = String, Path, description = "The schedule id")),
    responses(
        (status = 200, body = ScheduleView),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn pause(
    state: State<AppState>,
    caller: Caller,
    id: Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(state, caller, id, true).await
}

/// `POST /api/local/schedules/{id}/resume`: fire times that passed while paused are not run.
#[utoipa::path(
    post,
    path = "/api/local/schedules/{id}/resume",
    tag = "schedules",
    summary = "Resume a paused schedule",
    params(("id" = String, Path, description = "The schedule id")),
    responses(
        (status = 200, body = ScheduleView),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn resume(
    state: State<AppState>,
    caller: Caller,
    id: Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(state, caller, id, false).await
}

async fn set_paused(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    paused: bool,
) -> Result<Json<ScheduleView>, ApiError> {
    let current = owned(&state, &owner, &id).await?;
    let change = CreateSchedule {
        paused: Some(paused),
        ..CreateSchedule::default()
    };
    let schedule = apply(&state, &owner, current, change, Utc::now()).await?;
    if !schedules::update(&state.pool, &owner, &schedule).await? {
        return Err(ApiError::NotFound("schedule"));
    }
    wake(&state).await;
    Ok(Json(view(schedule)))
}

/// `GET /api/local/schedules/{id}`
#[utoipa::path(
    get,
    path = "/api/local/schedules/{id}",
    tag = "schedules",
    summary = "A schedule",
    params(("id" = String, Path, description = "The schedule id")),
    responses(
        (status = 200, body = ScheduleView),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    Ok(Json(view(owned(&state, &owner, &id).await?)))
}

/// `DELETE /api/local/schedules/{id}`: its runs go with it; their tasks stay.
#[utoipa::path(
    delete,
    path = "/api/local/schedules/{id}",
    tag = "schedules",
    summary = "Remove a schedule",
    params(("id" = String, Path, description = "The schedule id")),
    responses(
        (status = 204, description = "Removed"),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id: ScheduleId = parse_id(&id, "schedule")?;
    if schedules::delete(&state.pool, &owner, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("schedule"))
    }
}

/// `GET /api/local/schedules?limit=&before=`: newest first.
#[utoipa::path(
    get,
    path = "/api/local/schedules",
    tag = "schedules",
    summary = "Your schedules",
    params(super::PageQuery),
    responses(
        (status = 200, body = SchedulePage),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(owner): Caller,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SchedulePage>, ApiError> {
    let q = query(q)?;
    let limit = page_limit(q.limit)?;
    let before = before::<ScheduleId>(q.before.as_deref(), "a schedule id")?;
    let found = schedules::list(&state.pool, &owner, before, limit).await?;
    let next_before = (found.len() as i64 == limit)
        .then(|| found.last().map(|s| s.id))
        .flatten();
    Ok(Json(SchedulePage {
        schedules: found.into_iter().map(view).collect(),
        next_before,
    }))
}

/// `GET /api/local/schedules/{id}/runs?limit=&before=`: latest fire time first.
#[utoipa::path(
    get,
    path = "/api/local/schedules/{id}/runs",
    tag = "schedules",
    summary = "A schedule's runs, newest first",
    params(("id" = String, Path, description = "The schedule id"), super::PageQuery),
    responses(
        (status = 200, body = ScheduleRunPage),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn runs(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ScheduleRunPage>, ApiError> {
    let q = query(q)?;
    let limit = page_limit(q.limit)?;
    let before = before::<DateTime<Utc>>(q.before.as_deref(), "an RFC 3339 fire time")?;
    let schedule = owned(&state, &owner, &id).await?;
    let found = schedules::runs(&state.pool, &owner, schedule.id, before, limit).await?;
    let next_before = (found.len() as i64 == limit)
        .then(|| found.last().map(|r| r.fire_time))
        .flatten();
    Ok(Json(ScheduleRunPage {
        runs: found.into_iter().map(run_view).collect(),
        next_before,
    }))
}

/// `POST /api/local/schedules/{id}/run`: start a run now, whatever the overlap policy and
/// even while paused (the clock's fire times are not moved).
#[utoipa::path(
    post,
    path = "/api/local/schedules/{id}/run",
    tag = "schedules",
    summary = "Run a schedule now",
    params(("id" = String, Path, description = "The schedule id")),
    responses(
        (status = 201, body = ScheduleRun),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn run_now(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<ScheduleRun>), ApiError> {
    let schedule = owned(&state, &owner, &id).await?;
    if let Some(space) = schedule.space_id {
        super::tasks::space_for_task(&state, &owner, Some(space)).await?;
    }
    let mut run = NewRun::new(schedule.id, Utc::now(), RunStatus::Started);
    run.manual = true;
    let max_attempts = state.settings.job_max_attempts;
    let mut tx = maestro_db::begin(&state.pool).await?;
    let started = schedules::fire(&mut tx, &[run], &[], max_attempts).await?;
    maestro_db::commit(tx).await?;
    let Some(started) = started.first() else {
        return Err(ApiError::Conflict {
            code: "busy",
            message: "a run was started at this very instant; retry".to_owned(),
        });
    };
    tracing::info!(schedule_id = %schedule.id, task_id = %started.task_id, "schedule run by hand");
    let after = AfterCommit::new_job(&started.profile, started.task_id, started.job_id);
    state.bus.after_commit(after).await;
    let now = Utc::now();
    Ok((
        StatusCode::CREATED,
        Json(ScheduleRun {
            fire_time: run.fire_time,
            status: RunStatus::Started,
            task_id: Some(started.task_id),
            task_status: Some(maestro_domain::JobStatus::Queued),
            manual: true,
            missed_count: 0,
            created_at: now,
            started_at: Some(now),
        }),
    ))
}

async fn owned(state: &AppState, owner: &Owner, raw: &str) -> Result<Schedule, ApiError> {
    let id: ScheduleId = parse_id(raw, "schedule")?;
    schedules::get(&state.pool, owner, id)
        .await?
        .ok_or(ApiError::NotFound("schedule"))
}

async fn wake(state: &AppState) {
    state
        .bus
        .after_commit(AfterCommit::none().wake_schedulers())
        .await;
}

/// `schedule` with what `change` gives, checked, and its next fire time computed from
/// `now` (none while paused or once its window is over). A template is resolved as a task
/// created now by `owner` would be (its space's and piece's defaults).
async fn apply(
    state: &AppState,
    owner: &Owner,
    mut schedule: Schedule,
    change: CreateSchedule,
    now: DateTime<Utc>,
) -> Result<Schedule, ApiError> {
    let resolved = change.task.is_some();
    if let Some(name) = change.name {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > NAME_MAX_CHARS {
            let message = format!("name is 1 to {NAME_MAX_CHARS} characters");
            return Err(ApiError::invalid("invalid_name", message));
        }
        schedule.name = name.to_owned();
    }
    if let Some(cron) = change.cron {
        schedule.cron = cron.trim().to_owned();
    }
    if let Some(tz) = change.timezone {
        schedule.timezone = tz;
    }
    if let Some(task) = change.task {
        let body = maestro_api::CreateTask {
            instruction: task.instruction,
            piece: task.piece,
            start_movement: None,
            model: task.model,
            space_id: task.space_id,
            visibility: task.visibility,
            profile: task.profile,
        };
        let valid = super::tasks::resolve(state, owner, body).await?;
        schedule.instruction = valid.instruction;
        schedule.piece = valid.piece;
        schedule.model = valid.model;
        schedule.space_id = valid.space;
        schedule.visibility = valid.visibility;
        schedule.profile = valid.profile;
    }
    if let Some(overlap) = change.overlap {
        schedule.overlap = overlap;
    }
    if let Some(missed) = change.missed {
        schedule.missed = missed;
    }
    if let Some(starts_at) = change.starts_at {
        schedule.starts_at = starts_at;
    }
    if let Some(ends_at) = change.ends_at {
        schedule.ends_at = ends_at;
    }
    if let Some(paused) = change.paused {
        schedule.paused = paused;
    }
    if let Some(space) = schedule.space_id
        && !schedule.paused
        && !resolved
    {
        // One who may no longer add tasks to the space does not start its schedules there.
        super::tasks::space_for_task(state, owner, Some(space)).await?;
    }
    if let (Some(start), Some(end)) = (schedule.starts_at, schedule.ends_at)
        && start >= end
    {
        return Err(ApiError::invalid(
            "invalid_window",
            "starts_at must be before ends_at",
        ));
    }
    let spec = CronSpec::parse_firing(&schedule.cron, &schedule.timezone, now).map_err(|e| {
        let code = match e {
            maestro_domain::schedule::InvalidSchedule::Timezone(_) => "invalid_timezone",
            _ => "invalid_cron",
        };
        ApiError::invalid(code, e.to_string())
    })?;
    let timing = Timing {
        spec,
        overlap: schedule.overlap,
        missed: schedule.missed,
        starts_at: schedule.starts_at,
        ends_at: schedule.ends_at,
    };
    schedule.next_fire_at = if schedule.paused {
        None
    } else {
        timing.next_after(now)
    };
    Ok(schedule)
}

fn view(s: Schedule) -> ScheduleView {
    let description = CronSpec::parse(&s.cron, &s.timezone)
        .map(|spec| spec.describe())
        .unwrap_or_default();
    let status = match (s.paused, s.next_fire_at) {
        (true, _) => "paused",
        (false, Some(_)) => "active",
        (false, None) => "ended",
    };
    ScheduleView {
        id: s.id,
        name: s.name,
        cron: s.cron,
        timezone: s.timezone,
        description,
        task: TaskTemplate {
            instruction: s.instruction,
            piece: Some(s.piece),
            model: s.model,
            space_id: s.space_id,
            visibility: Some(s.visibility),
            profile: Some(s.profile),
        },
        overlap: s.overlap,
        missed: s.missed,
        starts_at: s.starts_at,
        ends_at: s.ends_at,
        status: status.to_owned(),
        next_fire_at: s.next_fire_at,
        last_fire_at: s.last_fire_at,
        created_at: s.created_at,
        updated_at: s.updated_at,
    }
}

fn run_view(r: schedules::Run) -> ScheduleRun {
    ScheduleRun {
        fire_time: r.fire_time,
        status: r.status,
        task_id: r.task_id,
        task_status: r.task_status,
        manual: r.manual,
        missed_count: r.missed_count,
        created_at: r.created_at,
        started_at: r.started_at,
    }
}
