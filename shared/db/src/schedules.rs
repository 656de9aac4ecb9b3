//! Schedules and their runs (docs/schedules.md). The schedulers lock due schedules with
//! `SKIP LOCKED` and fire them in one statement per batch; the run's key
//! `(schedule_id, fire_time)` makes each fire time happen once, whoever fires it.

use chrono::{DateTime, Utc};
use maestro_domain::schedule::{Missed, Overlap, RunStatus};
use maestro_domain::{JobId, JobStatus, Owner, ScheduleId, SpaceId, TaskId, Visibility};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::DbError;

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub id: ScheduleId,
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub instruction: String,
    pub piece: String,
    pub model: Option<String>,
    /// Where its tasks go, resolved when it was written (as a task's are when it is made).
    pub space_id: Option<SpaceId>,
    pub visibility: Visibility,
    pub profile: String,
    pub overlap: Overlap,
    pub missed: Missed,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub paused: bool,
    pub next_fire_at: Option<DateTime<Utc>>,
    pub last_fire_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

struct Row {
    id: Uuid,
    name: String,
    cron: String,
    timezone: String,
    instruction: String,
    piece: String,
    model: Option<String>,
    space_id: Option<Uuid>,
    visibility: String,
    profile: String,
    overlap: String,
    missed: String,
    starts_at: Option<DateTime<Utc>>,
    ends_at: Option<DateTime<Utc>>,
    paused: bool,
    next_fire_at: Option<DateTime<Utc>>,
    last_fire_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<Row> for Schedule {
    type Error = DbError;
    fn try_from(r: Row) -> Result<Self, DbError> {
        Ok(Schedule {
            id: ScheduleId(r.id),
            overlap: Overlap::parse(&r.overlap)
                .ok_or_else(|| DbError::corrupt(format!("unknown overlap {:?}", r.overlap)))?,
            missed: Missed::parse(&r.missed)
                .ok_or_else(|| DbError::corrupt(format!("unknown missed {:?}", r.missed)))?,
            visibility: Visibility::parse(&r.visibility).ok_or_else(|| {
                DbError::corrupt(format!("unknown visibility {:?}", r.visibility))
            })?,
            space_id: r.space_id.map(SpaceId),
            profile: r.profile,
            name: r.name,
            cron: r.cron,
            timezone: r.timezone,
            instruction: r.instruction,
            piece: r.piece,
            model: r.model,
            starts_at: r.starts_at,
            ends_at: r.ends_at,
            paused: r.paused,
            next_fire_at: r.next_fire_at,
            last_fire_at: r.last_fire_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// Store a new schedule (its `next_fire_at` computed by the caller).
pub async fn create(pool: &PgPool, owner: &Owner, s: &Schedule) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        INSERT INTO schedules (id, owner, name, cron, timezone, instruction, piece, model,
                               overlap, missed, starts_at, ends_at, paused, next_fire_at,
                               created_at, updated_at, space_id, visibility, profile)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15, $16,
                $17, $18)
        "#,
        s.id.0,
        owner.as_str(),
        s.name,
        s.cron,
        s.timezone,
        s.instruction,
        s.piece,
        s.model,
        s.overlap.as_str(),
        s.missed.as_str(),
        s.starts_at,
        s.ends_at,
        s.paused,
        s.next_fire_at,
        s.created_at,
        s.space_id.map(|id| id.0),
        s.visibility.as_str(),
        s.profile,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Replace a schedule's definition (and its next fire time); `false` if the owner has no
/// such schedule. A fire time already taken stays taken: the run key refuses it twice.
pub async fn update(pool: &PgPool, owner: &Owner, s: &Schedule) -> Result<bool, DbError> {
    let done = sqlx::query!(
        r#"
        UPDATE schedules
           SET name = $3, cron = $4, timezone = $5, instruction = $6, piece = $7, model = $8,
               overlap = $9, missed = $10, starts_at = $11, ends_at = $12, paused = $13,
               next_fire_at = $14, space_id = $15, visibility = $16, profile = $17,
               updated_at = now()
         WHERE id = $1 AND owner = $2
        "#,
        s.id.0,
        owner.as_str(),
        s.name,
        s.cron,
        s.timezone,
        s.instruction,
        s.piece,
        s.model,
        s.overlap.as_str(),
        s.missed.as_str(),
        s.starts_at,
        s.ends_at,
        s.paused,
        s.next_fire_at,
        s.space_id.map(|id| id.0),
        s.visibility.as_str(),
        s.profile,
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Delete a schedule and its runs (its tasks stay, without the link); `false` if the owner
/// has no such schedule.
pub async fn delete(pool: &PgPool, owner: &Owner, id: ScheduleId) -> Result<bool, DbError> {
    let done = sqlx::query!(
        "DELETE FROM schedules WHERE id = $1 AND owner = $2",
        id.0,
        owner.as_str()
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub async fn get(
    pool: &PgPool,
    owner: &Owner,
    id: ScheduleId,
) -> Result<Option<Schedule>, DbError> {
    Ok(list_rows(pool, owner, Some(id), None, 1).await?.pop())
}

/// A page of the owner's schedules, newest first, strictly older than `before` when given.
pub async fn list(
    pool: &PgPool,
    owner: &Owner,
    before: Option<ScheduleId>,
    limit: i64,
) -> Result<Vec<Schedule>, DbError> {
    list_rows(pool, owner, None, before, limit).await
}

async fn list_rows(
    pool: &PgPool,
    owner: &Owner,
    only: Option<ScheduleId>,
    before: Option<ScheduleId>,
    limit: i64,
) -> Result<Vec<Schedule>, DbError> {
    let rows = sqlx::query_as!(
        Row,
        r#"
        SELECT id, name, cron, timezone, instruction, piece, model, space_id, visibility,
               profile, overlap, missed, starts_at, ends_at, paused, next_fire_at,
               last_fire_at, created_at, updated_at
          FROM schedules
         WHERE owner = $1 AND ($2::uuid IS NULL OR id = $2) AND ($3::uuid IS NULL OR id < $3)
         ORDER BY id DESC
         LIMIT $4
        "#,
        owner.as_str(),
        only.map(|id| id.0),
        before.map(|id| id.0),
        limit
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(Schedule::try_from).collect()
}

/// One fire time of a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub fire_time: DateTime<Utc>,
    pub status: RunStatus,
    pub task_id: Option<TaskId>,
    pub manual: bool,
    pub missed_count: i32,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    /// The status of the run's task's latest job, when it has a task.
    pub task_status: Option<JobStatus>,
}

/// A page of a schedule's runs, latest fire time first, strictly before `before`.
pub async fn runs(
    pool: &PgPool,
    owner: &Owner,
    id: ScheduleId,
    before: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<Run>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT r.fire_time, r.status, r.task_id, r.manual, r.missed_count, r.created_at,
               r.started_at,
               (SELECT j.status FROM jobs j WHERE j.task_id = r.task_id
                 ORDER BY j.job_no DESC LIMIT 1) AS task_status
          FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
         WHERE s.id = $1 AND s.owner = $2 AND ($3::timestamptz IS NULL OR r.fire_time < $3)
         ORDER BY r.fire_time DESC
         LIMIT $4
        "#,
        id.0,
        owner.as_str(),
        before,
        limit
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(Run {
                fire_time: r.fire_time,
                status: RunStatus::parse(&r.status).ok_or_else(|| {
                    DbError::corrupt(format!("unknown run status {:?}", r.status))
                })?,
                task_id: r.task_id.map(TaskId),
                manual: r.manual,
                missed_count: r.missed_count,
                created_at: r.created_at,
                started_at: r.started_at,
                task_status: r
                    .task_status
                    .as_deref()
                    .map(crate::parse::status)
                    .transpose()?,
            })
        })
        .collect()
}

/// The earliest time any schedule is due (`None`: none will be until one changes).
pub async fn next_due(pool: &PgPool) -> Result<Option<DateTime<Utc>>, DbError> {
    Ok(sqlx::query_scalar!(
        "SELECT min(next_fire_at) FROM schedules WHERE next_fire_at IS NOT NULL"
    )
    .fetch_one(pool)
    .await?)
}

/// Whether any run waits in a queue.
pub async fn any_queued(pool: &PgPool) -> Result<bool, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM schedule_runs WHERE status = 'queued') AS "any!""#
    )
    .fetch_one(pool)
    .await?)
}

/// A due schedule, locked for firing.
#[derive(Debug, Clone)]
pub struct Due {
    pub id: ScheduleId,
    pub owner: String,
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub overlap: Overlap,
    pub missed: Missed,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub due: DateTime<Utc>,
    /// The latest started run's task is still active.
    pub active: bool,
    /// Runs waiting in its queue.
    pub queued: i64,
}

/// Lock up to `limit` schedules due at `now`, earliest first (rows another scheduler holds
/// are passed over), with what their earlier runs are doing.
pub async fn lock_due(
    conn: &mut PgConnection,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<Due>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT s.id, s.owner, s.name, s.cron, s.timezone, s.overlap, s.missed, s.starts_at,
               s.ends_at, s.next_fire_at AS "due!",
               EXISTS (SELECT 1 FROM jobs j WHERE j.task_id = s.last_task_id
                          AND j.status NOT IN ('succeeded', 'failed', 'cancelled')) AS "active!",
               (SELECT count(*) FROM schedule_runs r
                 WHERE r.schedule_id = s.id AND r.status = 'queued') AS "queued!"
          FROM schedules s
         WHERE s.next_fire_at <= $1
         ORDER BY s.next_fire_at
         LIMIT $2
           FOR UPDATE OF s SKIP LOCKED
        "#,
        now,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(Due {
                id: ScheduleId(r.id),
                overlap: Overlap::parse(&r.overlap)
                    .ok_or_else(|| DbError::corrupt(format!("unknown overlap {:?}", r.overlap)))?,
                missed: Missed::parse(&r.missed)
                    .ok_or_else(|| DbError::corrupt(format!("unknown missed {:?}", r.missed)))?,
                owner: r.owner,
                name: r.name,
                cron: r.cron,
                timezone: r.timezone,
                starts_at: r.starts_at,
                ends_at: r.ends_at,
                due: r.due,
                active: r.active,
                queued: r.queued,
            })
        })
        .collect()
}

/// Lock up to `limit` schedules whose oldest queued run may start (the run before it is
/// over); returns each with that run's fire time.
pub async fn lock_queued_ready(
    conn: &mut PgConnection,
    limit: i64,
) -> Result<Vec<(ScheduleId, DateTime<Utc>)>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT s.id, q.fire_time AS "fire_time!"
          FROM (SELECT schedule_id, min(fire_time) AS fire_time FROM schedule_runs
                 WHERE status = 'queued' GROUP BY schedule_id) q
          JOIN schedules s ON s.id = q.schedule_id
         WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.task_id = s.last_task_id
                              AND j.status NOT IN ('succeeded', 'failed', 'cancelled'))
         LIMIT $1
           FOR UPDATE OF s SKIP LOCKED
        "#,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (ScheduleId(r.id), r.fire_time))
        .collect())
}

/// One run to record: a fire time's outcome, with the ids of its task when it starts one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewRun {
    pub schedule_id: ScheduleId,
    pub fire_time: DateTime<Utc>,
    pub status: RunStatus,
    /// Ids for the task, its job and its instruction comment when `status` is `started`.
    pub task: Option<(TaskId, JobId)>,
    pub manual: bool,
    pub missed: i32,
}

impl NewRun {
    /// A run of `status`; a started one gets fresh task and job ids.
    pub fn new(schedule_id: ScheduleId, fire_time: DateTime<Utc>, status: RunStatus) -> Self {
        let task = (status == RunStatus::Started).then(|| (TaskId::new(), JobId::new()));
        Self {
            schedule_id,
            fire_time,
            status,
            task,
            manual: false,
            missed: 0,
        }
    }
}

/// Where a fired schedule goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advance {
    pub schedule_id: ScheduleId,
    /// Its next due time (`None`: its window is over).
    pub next: Option<DateTime<Utc>>,
}

/// A task a fire created: its first job is queued and must be dispatched after the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub schedule_id: ScheduleId,
    pub task_id: TaskId,
    pub job_id: JobId,
    /// The worker profile its job goes to.
    pub profile: String,
}

/// Record `runs` and create the task of each started one (with its instruction comment,
/// queued first job and first event, from the schedule's template), then move each
/// schedule of `advance` to its next due time, in one statement. A run whose fire time is
/// already recorded changes nothing and starts nothing, except a `queued` run that now
/// starts. Returns the tasks created.
pub async fn fire(
    conn: &mut PgConnection,
    runs: &[NewRun],
    advance: &[Advance],
    max_attempts: i32,
) -> Result<Vec<Started>, DbError> {
    let queued = serde_json::json!({"status": JobStatus::Queued, "attempt": 0});
    let rows = sqlx::query!(
        r#"
        WITH r AS (
            SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::uuid[],
                                 $5::uuid[], $6::uuid[], $7::bool[], $8::int[])
                AS r(schedule_id, fire_time, status, task_id, job_id, comment_id, manual, missed)
        ), run AS (
            INSERT INTO schedule_runs (schedule_id, fire_time, status, task_id, manual,
                                       missed_count, started_at)
            SELECT schedule_id, fire_time, status, task_id, manual, missed,
                   CASE WHEN task_id IS NOT NULL THEN now() END
              FROM r
            ON CONFLICT (schedule_id, fire_time) DO UPDATE
               SET status = 'started', task_id = EXCLUDED.task_id, started_at = now()
             WHERE schedule_runs.status = 'queued' AND EXCLUDED.status = 'started'
            RETURNING schedule_id, fire_time, task_id
        ), src AS (
            SELECT run.schedule_id, run.fire_time, run.task_id, r.job_id, r.comment_id,
                   s.owner, s.instruction, s.piece, s.model, s.space_id, s.visibility, s.profile
              FROM run
              JOIN r ON r.schedule_id = run.schedule_id AND r.fire_time = run.fire_time
              JOIN schedules s ON s.id = run.schedule_id
             WHERE run.task_id IS NOT NULL
        ), task AS (
            INSERT INTO tasks (id, owner, instruction, piece, model, last_seq, job_count,
                               max_attempts, schedule_id, scheduled_for, space_id, visibility,
                               profile)
            SELECT task_id, owner, instruction, piece, model, 1, 1, $9, schedule_id, fire_time,
                   space_id, visibility, profile
              FROM src
        ), comment AS (
            INSERT INTO comments (id, task_id, author, kind, body, job_id)
            SELECT comment_id, task_id, owner, 'instruction', instruction, job_id FROM src
        ), job AS (
            INSERT INTO jobs (id, task_id, job_no, status, profile, max_attempts, last_job_seq)
            SELECT job_id, task_id, 1, 'queued', profile, $9, 1 FROM src
        ), event AS (
            INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
            SELECT task_id, 1, job_id, 1, 'job_state', $10 FROM src
        ), latest AS (
            SELECT DISTINCT ON (schedule_id) schedule_id, task_id, fire_time
              FROM src ORDER BY schedule_id, fire_time DESC
        ), moved AS (
            UPDATE schedules s
               SET next_fire_at = CASE WHEN a.id IS NULL THEN s.next_fire_at ELSE a.next END,
                   last_task_id = coalesce(l.task_id, s.last_task_id),
                   last_fire_at = greatest(s.last_fire_at, l.fire_time),
                   updated_at = now()
              FROM (SELECT id FROM unnest($11::uuid[]) AS u(id)
                    UNION SELECT schedule_id FROM latest) AS touched(id)
              LEFT JOIN unnest($11::uuid[], $12::timestamptz[]) AS a(id, next)
                     ON a.id = touched.id
              LEFT JOIN latest l ON l.schedule_id = touched.id
             WHERE s.id = touched.id
        )
        SELECT schedule_id AS "schedule_id!", task_id AS "task_id!", job_id AS "job_id!",
               profile AS "profile!"
          FROM src
        "#,
        &runs.iter().map(|r| r.schedule_id.0).collect::<Vec<_>>(),
        &runs.iter().map(|r| r.fire_time).collect::<Vec<_>>(),
        &runs
            .iter()
            .map(|r| r.status.as_str().to_owned())
            .collect::<Vec<_>>(),
        &runs
            .iter()
            .map(|r| r.task.map(|t| t.0.0))
            .collect::<Vec<_>>() as &[Option<Uuid>],
        &runs
            .iter()
            .map(|r| r.task.map(|t| t.1.0))
            .collect::<Vec<_>>() as &[Option<Uuid>],
        &runs
            .iter()
            .map(|r| r.task.map(|_| Uuid::now_v7()))
            .collect::<Vec<_>>() as &[Option<Uuid>],
        &runs.iter().map(|r| r.manual).collect::<Vec<_>>(),
        &runs.iter().map(|r| r.missed).collect::<Vec<_>>(),
        max_attempts,
        queued,
        &advance.iter().map(|a| a.schedule_id.0).collect::<Vec<_>>(),
        &advance.iter().map(|a| a.next).collect::<Vec<_>>() as &[Option<DateTime<Utc>>],
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Started {
            schedule_id: ScheduleId(r.schedule_id),
            task_id: TaskId(r.task_id),
            job_id: JobId(r.job_id),
            profile: r.profile,
        })
        .collect())
}

/// Pause a schedule whose fire failed for good, and tell its owner (`schedule.failed`).
pub async fn pause_failed(
    conn: &mut PgConnection,
    id: ScheduleId,
    notice: &serde_json::Value,
    notice_id: Uuid,
) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        WITH paused AS (
            UPDATE schedules SET paused = true, next_fire_at = NULL, updated_at = now()
             WHERE id = $1
         RETURNING owner
        )
        SELECT record_notice($2, owner, 'schedule.failed',
                             jsonb_set($3, '{data,owner}', to_jsonb(owner)), $4)
          FROM paused
        "#,
        id.0,
        notice_id,
        notice,
        format!("schedule.failed:{id}:{notice_id}"),
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(())
}

/// Tell the owners of schedules that missed fire times (`schedule.missed`), once per
/// schedule and fire time: `(schedule, fire time, notification id, notice)`.
pub async fn notify_missed(
    conn: &mut PgConnection,
    notices: &[(ScheduleId, DateTime<Utc>, Uuid, serde_json::Value)],
) -> Result<(), DbError> {
    if notices.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        r#"
        SELECT record_notice(n.notice_id, s.owner, 'schedule.missed',
                             jsonb_set(n.notice, '{data,owner}', to_jsonb(s.owner)),
                             'schedule.missed:' || s.id || ':' || n.fire_time)
          FROM unnest($1::uuid[], $2::timestamptz[], $3::uuid[], $4::jsonb[])
               AS n(id, fire_time, notice_id, notice)
          JOIN schedules s ON s.id = n.id
        "#,
        &notices.iter().map(|n| n.0.0).collect::<Vec<_>>(),
        &notices.iter().map(|n| n.1).collect::<Vec<_>>(),
        &notices.iter().map(|n| n.2).collect::<Vec<_>>(),
        &notices.iter().map(|n| n.3.clone()).collect::<Vec<_>>(),
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(())
}
