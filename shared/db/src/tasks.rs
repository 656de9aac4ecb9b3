//! Tasks: creation (with their first job, in one statement), lookup and listing, always
//! scoped to what the caller may see: their own tasks, the non-private tasks of their spaces,
//! public ones (docs/spaces.md).

use chrono::{DateTime, Utc};
use maestro_domain::topic::Direct;
use maestro_domain::{
    Access, EventKind, JobId, JobRecord, JobStatus, Owner, SpaceId, SpaceRole, TaskId, TaskRecord,
    Visibility,
};
use sqlx::PgPool;
use uuid::Uuid;

use crate::DbError;
use crate::jobs::Publish;

/// What a new task is made of.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    pub id: TaskId,
    pub job_id: JobId,
    pub owner: &'a Owner,
    pub instruction: &'a str,
    pub piece: &'a str,
    /// Where the piece starts, when not at its start movement.
    pub start_movement: Option<&'a str>,
    pub model: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    /// Hash of the request that created the task, to tell a retry from a conflicting reuse
    /// of the same idempotency key.
    pub request_hash: &'a str,
    pub profile: &'a str,
    pub space_id: Option<SpaceId>,
    pub visibility: Visibility,
    pub max_attempts: i32,
    /// The A2A context it belongs to (`None`: its own).
    pub context_id: Option<&'a str>,
    /// The A2A `messageId` its instruction came as.
    pub message_id: Option<&'a str>,
    /// An A2A push notification config to store with it (its `task_id` is ignored), so the
    /// task's first events are pushed too.
    pub push: Option<&'a crate::a2a::PushConfig>,
    /// Files attached to it.
    pub attachments: &'a [crate::attachments::NewAttachment],
}

/// Record the piece the router chose for a task created for it (piece `auto`); a task
/// whose piece is already set keeps it. Returns the task's piece.
pub async fn resolve_piece(pool: &PgPool, id: TaskId, piece: &str) -> Result<String, DbError> {
    let row = sqlx::query_scalar!(
        r#"
        UPDATE tasks SET piece = CASE WHEN piece = 'auto' THEN $2 ELSE piece END
         WHERE id = $1
     RETURNING piece
        "#,
        id.0,
        piece,
    )
    .fetch_one(pool)
    .await?;
    Ok(row)
}

/// Insert the task, its instruction comment, its first job (`queued`), that job's first
/// event and the push config it came with, in one statement, and return the new task. Returns `None`, writing nothing, when
/// the owner already used this idempotency key.
pub async fn create(pool: &PgPool, new: &NewTask<'_>) -> Result<Option<TaskRecord>, DbError> {
    let created = create_publishing(pool, new, Publish::ByRelay).await?;
    Ok(created.map(|(record, _)| record))
}

/// [`create`], saying who publishes the `queued` event; with [`Publish::Directly`] its
/// outbox row comes back for the caller to publish.
pub async fn create_publishing(
    pool: &PgPool,
    new: &NewTask<'_>,
    publish: Publish,
) -> Result<Option<(TaskRecord, Vec<Direct>)>, DbError> {
    let queued = serde_json::json!({"status": JobStatus::Queued, "attempt": 0});
    let names: Vec<&str> = new.attachments.iter().map(|a| a.name.as_str()).collect();
    let types: Vec<&str> = new
        .attachments
        .iter()
        .map(|a| a.content_type.as_str())
        .collect();
    let shas: Vec<&str> = new.attachments.iter().map(|a| a.sha256.as_str()).collect();
    let datas: Vec<&[u8]> = new.attachments.iter().map(|a| a.data.as_slice()).collect();
    let (push_token, push_credentials) = new.push.map(|p| p.sealed_for(new.id)).unwrap_or_default();
    let row = sqlx::query!(
        r#"
        WITH task AS (
            INSERT INTO tasks (id, owner, instruction, piece, model, idempotency_key,
                               request_hash, last_seq, job_count, start_movement, max_attempts,
                               context_id, profile, space_id, visibility)
            VALUES ($1, $2, $3, $4, $5, $6, $7, 1, 1, $13, $11, $14, $10, $21, $22)
            ON CONFLICT (owner, idempotency_key) DO NOTHING
            RETURNING id, created_at
        ), comment AS (
            INSERT INTO comments (id, task_id, author, kind, body, job_id, message_id)
            SELECT $8, task.id, $2, 'instruction', $3, $9, $15 FROM task
        ), job AS (
            INSERT INTO jobs (id, task_id, job_no, status, profile, max_attempts, last_job_seq)
            SELECT $9, task.id, 1, 'queued', $10, $11, 1 FROM task
            RETURNING id, task_id
        ), d AS (
            -- Read by the outbox trigger as each event is inserted (migration 0024): the
            -- event insert reads it, so it is set first.
            SELECT set_config('maestro.writes_range_row', $27, true) AS grace
        ), event AS (
            INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
            SELECT job.task_id, 1, job.id, 1, 'job_state', $12 FROM job, d
        ), range AS (
            -- Published directly: the event's outbox row is its range (`outbox::Written`).
            INSERT INTO outbox (topic, task_id, msg_id, payload, relay_after)
            SELECT 'events', job.task_id, 'events:' || job.task_id || ':1',
                   '{"first": 1, "last": 1}', now() + d.grace::interval
              FROM job, d WHERE d.grace <> ''
        ), push AS (
            INSERT INTO a2a_push_configs (task_id, id, url, token, auth_scheme, auth_credentials)
            SELECT task.id, $16, $17, $18, $19, $20 FROM task WHERE $17::text IS NOT NULL
        ), attached AS (
            INSERT INTO task_attachments (task_id, name, content_type, size, sha256, data)
            SELECT task.id, a.name, a.content_type, octet_length(a.data), a.sha256, a.data
              FROM task, unnest($23::text[], $24::text[], $25::text[], $26::bytea[])
                         AS a (name, content_type, sha256, data)
        )
        SELECT task.created_at, d.grace <> '' AS "direct!" FROM task, d
        "#,
        new.id.0,
        new.owner.as_str(),
        new.instruction,
        new.piece,
        new.model,
        new.idempotency_key,
        new.request_hash,
        Uuid::now_v7(),
        new.job_id.0,
        new.profile,
        new.max_attempts,
        queued,
        new.start_movement,
        new.context_id,
        new.message_id,
        new.push.map(|p| p.id.as_str()),
        new.push.map(|p| p.url.as_str()),
        push_token,
        new.push.and_then(|p| p.auth_scheme.as_deref()),
        push_credentials,
        new.space_id.map(|s| s.0),
        new.visibility.as_str(),
        &names as &[&str],
        &types as &[&str],
        &shas as &[&str],
        &datas as &[&[u8]],
        publish.grace(),
    )
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let written = crate::outbox::Written {
        task_id: new.id,
        job_id: new.job_id,
        created_at: row.created_at,
        traceparent: None,
        a2a_push: new.push.is_some(),
    };
    let direct = row
        .direct
        .then(|| written.event(EventKind::JobState, 1, 1, queued));
    let record = TaskRecord {
        id: new.id,
        owner: new.owner.as_str().to_owned(),
        space_id: new.space_id,
        visibility: new.visibility,
        profile: new.profile.to_owned(),
        instruction: new.instruction.to_owned(),
        piece: new.piece.to_owned(),
        model: new.model.map(str::to_owned),
        created_at: row.created_at,
        updated_at: row.created_at,
        latest_job: Some(JobRecord {
            id: new.job_id,
            job_no: 1,
            status: JobStatus::Queued,
            wait_reason: None,
            attempt: 0,
            max_attempts: new.max_attempts,
            next_retry_at: None,
            result: None,
            error: None,
            created_at: row.created_at,
            started_at: None,
            finished_at: None,
            continued_from_job_id: None,
            piece: None,
            model: None,
            queued_reason: None,
            commit: None,
            branch: None,
        }),
        parent_task_id: None,
        depth: 0,
        context_id: new.context_id.map(str::to_owned),
        schedule_id: None,
        scheduled_for: None,
        attachments: new
            .attachments
            .iter()
            .map(|a| maestro_domain::task::Attachment {
                name: a.name.clone(),
                content_type: a.content_type.clone(),
                size: a.data.len() as i64,
                sha256: a.sha256.clone(),
            })
            .collect(),
    };
    Ok(Some((record, direct.into_iter().collect())))
}

/// The task an owner created with `key`, and the hash of the request that created it.
pub async fn find_by_idempotency_key(
    pool: &PgPool,
    owner: &Owner,
    key: &str,
) -> Result<Option<(TaskId, Option<String>)>, DbError> {
    let row = sqlx::query!(
        "SELECT id, request_hash FROM tasks WHERE owner = $1 AND idempotency_key = $2",
        owner.as_str(),
        key
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| (TaskId(r.id), r.request_hash)))
}

/// What `caller` may do with task `id`: `None` when they may not even see it (or it does not
/// exist).
pub async fn access(pool: &PgPool, caller: &Owner, id: TaskId) -> Result<Option<Access>, DbError> {
    Ok(reach(pool, caller, id).await?.map(|(access, _)| access))
}

/// What `caller` may do with task `id`, and whether they created it (`None`: they may not
/// even see it).
pub async fn reach(
    pool: &PgPool,
    caller: &Owner,
    id: TaskId,
) -> Result<Option<(Access, bool)>, DbError> {
    let row = sqlx::query!(
        r#"
        SELECT t.owner = $2 AS "creator!", t.space_id IS NOT NULL AS "in_space!", t.visibility,
               m.role AS "role?"
          FROM tasks t
          LEFT JOIN space_members m ON m.space_id = t.space_id AND m.member = $2
         WHERE t.id = $1
        "#,
        id.0,
        caller.as_str()
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.and_then(|r| {
        let visibility = Visibility::parse(&r.visibility).unwrap_or_default();
        let role = r.role.as_deref().and_then(SpaceRole::parse);
        Access::of(r.creator, r.in_space, visibility, role).map(|access| (access, r.creator))
    }))
}

/// The worker profile task `id`'s jobs go to (`None`: no such task).
pub async fn profile(pool: &PgPool, id: TaskId) -> Result<Option<String>, DbError> {
    let row = sqlx::query_scalar!("SELECT profile FROM tasks WHERE id = $1", id.0)
        .fetch_optional(pool)
        .await?;
    Ok(row)
}

/// The workspace of a task `caller` may see (its own, or its top task's); `None` when there
/// is no such task.
pub async fn workspace_of(
    pool: &PgPool,
    caller: &Owner,
    id: TaskId,
) -> Result<Option<TaskId>, DbError> {
    if access(pool, caller, id).await?.is_none() {
        return Ok(None);
    }
    let row = sqlx::query_scalar!(
        r#"SELECT COALESCE(workspace_id, id) AS "workspace!" FROM tasks WHERE id = $1"#,
        id.0,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(TaskId))
}

/// One task `caller` may see, with its latest job.
pub async fn get(pool: &PgPool, caller: &Owner, id: TaskId) -> Result<Option<TaskRecord>, DbError> {
    let filter = Filter {
        ids: Some(&[id]),
        ..Filter::default()
    };
    Ok(query_records(pool, caller, &filter, 1).await?.pop())
}

/// Tasks `ids` that `caller` may see (those that are), with their latest jobs, newest first.
pub async fn many(
    pool: &PgPool,
    caller: &Owner,
    ids: &[TaskId],
) -> Result<Vec<TaskRecord>, DbError> {
    let filter = Filter {
        ids: Some(ids),
        ..Filter::default()
    };
    query_records(pool, caller, &filter, ids.len() as i64).await
}

/// Which tasks a listing shows, besides what the caller may see.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter<'a> {
    pub ids: Option<&'a [TaskId]>,
    /// Strictly older than this one.
    pub before: Option<TaskId>,
    /// In this space only.
    pub space: Option<SpaceId>,
    /// Whose latest job has this status.
    pub status: Option<JobStatus>,
    /// Whose instruction contains this text, case-insensitively.
    pub text: Option<&'a str>,
}

/// A page of the tasks `caller` may see, newest first: their own and the non-private tasks of
/// their spaces (with a `space` filter, also that space's public tasks).
pub async fn list(
    pool: &PgPool,
    caller: &Owner,
    filter: &Filter<'_>,
    limit: i64,
) -> Result<Vec<TaskRecord>, DbError> {
    query_records(pool, caller, filter, limit).await
}

/// A task row with its latest job's columns (all null when it has none).
struct Row {
    id: uuid::Uuid,
    owner: String,
    space_id: Option<uuid::Uuid>,
    visibility: String,
    profile: String,
    instruction: String,
    piece: String,
    model: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    parent_task_id: Option<uuid::Uuid>,
    depth: i32,
    context_id: Option<String>,
    schedule_id: Option<uuid::Uuid>,
    scheduled_for: Option<DateTime<Utc>>,
    job_id: Option<uuid::Uuid>,
    job_no: Option<i32>,
    status: Option<String>,
    wait_reason: Option<String>,
    attempt: Option<i32>,
    max_attempts: Option<i32>,
    next_retry_at: Option<DateTime<Utc>>,
    result: Option<String>,
    error: Option<String>,
    job_created_at: Option<DateTime<Utc>>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    continued_from_job_id: Option<uuid::Uuid>,
    job_piece: Option<String>,
    job_model: Option<String>,
    queued_reason: Option<String>,
    job_commit: Option<String>,
    job_branch: Option<String>,
    attachments: serde_json::Value,
}

impl TryFrom<Row> for TaskRecord {
    type Error = DbError;
    fn try_from(r: Row) -> Result<Self, DbError> {
        let latest_job = match (r.job_id, r.job_no, r.status, r.attempt, r.max_attempts) {
            (Some(id), Some(job_no), Some(status), Some(attempt), Some(max_attempts)) => {
                let wait_reason = r.wait_reason.as_deref().map(crate::parse::wait_reason);
                Some(JobRecord {
                    id: JobId(id),
                    job_no,
                    status: crate::parse::status(&status)?,
                    wait_reason: wait_reason.transpose()?,
                    attempt,
                    max_attempts,
                    next_retry_at: r.next_retry_at,
                    result: r.result,
                    error: r.error,
                    created_at: r.job_created_at.unwrap_or(r.created_at),
                    started_at: r.started_at,
                    finished_at: r.finished_at,
                    continued_from_job_id: r.continued_from_job_id.map(JobId),
                    piece: r.job_piece,
                    model: r.job_model,
                    queued_reason: r.queued_reason,
                    commit: r.job_commit,
                    branch: r.job_branch,
                })
            }
            _ => None,
        };
        Ok(TaskRecord {
            id: TaskId(r.id),
            owner: r.owner,
            space_id: r.space_id.map(SpaceId),
            visibility: Visibility::parse(&r.visibility).unwrap_or_default(),
            profile: r.profile,
            instruction: r.instruction,
            piece: r.piece,
            model: r.model,
            created_at: r.created_at,
            updated_at: r.updated_at,
            latest_job,
            parent_task_id: r.parent_task_id.map(TaskId),
            depth: r.depth,
            context_id: r.context_id,
            schedule_id: r.schedule_id.map(maestro_domain::ScheduleId),
            scheduled_for: r.scheduled_for,
            attachments: serde_json::from_value(r.attachments)
                .map_err(|e| DbError::corrupt(format!("task {}: attachments: {e}", r.id)))?,
        })
    }
}

async fn query_records(
    pool: &PgPool,
    caller: &Owner,
    filter: &Filter<'_>,
    limit: i64,
) -> Result<Vec<TaskRecord>, DbError> {
    let ids: Option<Vec<Uuid>> = filter.ids.map(|ids| ids.iter().map(|i| i.0).collect());
    // The text as an ILIKE pattern: its own `%`, `_` and `\` match themselves.
    let pattern = filter.text.map(|text| {
        let escaped = text
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        format!("%{escaped}%")
    });
    // A queued job says why it waits when no worker that is up (seen in the last 30 s) serves
    // its profile, or none of those serves its model.
    let rows = sqlx::query_as!(
        Row,
        r#"
        SELECT t.id, t.owner, t.space_id, t.visibility, t.profile,
               t.instruction, t.piece, t.model, t.created_at, t.updated_at,
               t.parent_task_id, t.depth, t.context_id, t.schedule_id, t.scheduled_for,
               j.id AS "job_id?", j.job_no AS "job_no?",
               j.status AS "status?", j.wait_reason AS "wait_reason?", j.attempt AS "attempt?",
               j.max_attempts AS "max_attempts?", j.next_retry_at AS "next_retry_at?",
               j.result AS "result?", j.error AS "error?", j.created_at AS "job_created_at?",
               j.started_at AS "started_at?", j.finished_at AS "finished_at?",
               j.continued_from_job_id AS "continued_from_job_id?", j.piece AS "job_piece?",
               j.model AS "job_model?", j.commit AS "job_commit?", j.branch AS "job_branch?",
               (SELECT COALESCE(jsonb_agg(jsonb_build_object(
                           'name', a.name, 'content_type', a.content_type, 'size', a.size,
                           'sha256', a.sha256) ORDER BY a.name), '[]')
                  FROM task_attachments a WHERE a.task_id = t.id) AS "attachments!",
               CASE WHEN j.status = 'queued' THEN (
                   SELECT CASE
                       WHEN count(*) = 0 THEN format('no worker serving profile %L is up', j.profile)
                       WHEN COALESCE(j.model, t.model) IS NOT NULL
                            AND NOT bool_or(cardinality(w.models) = 0
                                            OR COALESCE(j.model, t.model) = ANY(w.models))
                           THEN format('no worker of profile %L that is up serves model %L',
                                       j.profile, COALESCE(j.model, t.model))
                       END
                     FROM workers w
                    WHERE j.profile = ANY(w.profiles) AND w.seen_at > now() - interval '30 seconds'
               ) END AS "queued_reason?"
          FROM tasks t
          LEFT JOIN LATERAL (SELECT * FROM jobs WHERE jobs.task_id = t.id
                              ORDER BY job_no DESC LIMIT 1) j ON true
         WHERE ($2::uuid[] IS NULL OR t.id = ANY($2))
           AND ($3::uuid IS NULL OR t.id < $3)
           AND ($5::uuid IS NULL OR t.space_id = $5)
           AND ($6::text IS NULL OR j.status = $6)
           AND ($7::text IS NULL OR t.instruction ILIKE $7 ESCAPE '\')
           AND ((t.owner = $1 AND t.space_id IS NULL)
                OR ((t.visibility <> 'private' OR t.owner = $1)
                    AND t.space_id IN (SELECT space_id FROM space_members WHERE member = $1))
                OR (t.visibility = 'public' AND ($2::uuid[] IS NOT NULL OR $5::uuid IS NOT NULL)))
         ORDER BY t.id DESC
         LIMIT $4
        "#,
        caller.as_str(),
        ids.as_deref(),
        filter.before.map(|b| b.0),
        limit,
        filter.space.map(|s| s.0),
        filter.status.map(JobStatus::as_str),
        pattern,
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(TaskRecord::try_from).collect()
}
