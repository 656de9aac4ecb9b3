//! The claim: a worker takes a job in one statement (`queued`, a due `retry`, or `running`
//! under an expired lease becomes `running` under this worker, with a `running` event, its
//! attempt incremented: the fencing token for every later write), reading everything the job
//! needs with it. When nothing is taken, [`state`] tells why (`maestro_domain::job::NotClaimed`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use maestro_domain::job::JobState;
use maestro_domain::topic::Direct;
use maestro_domain::{EventKind, JobId, TaskId};
use sqlx::PgPool;

use crate::DbError;
use crate::jobs::Publish;

/// A job this worker now holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub job_id: JobId,
    pub task_id: TaskId,
    pub job_no: i32,
    /// This claim's attempt number, the fencing token for every later write.
    pub attempt: i32,
    pub max_attempts: i32,
    pub profile: String,
    /// Task-wide seq of the `running` event this claim wrote.
    pub claim_seq: i64,
    pub owner: String,
    /// The task's instruction (a follow-up's or a Continue's own comes from its comments).
    pub instruction: String,
    /// The piece this job runs: its own when a Continue chose one, else the task's.
    pub piece: String,
    /// Where the piece starts, when the task says.
    pub start_movement: Option<String>,
    pub model: Option<String>,
    /// When the job was created (stable across attempts, unlike the claim time).
    pub created_at: DateTime<Utc>,
    /// An ASK follow-up: the movement that asked, and the question the user answered.
    pub resume_movement: Option<String>,
    pub resume_question: Option<String>,
    /// Questions asked of the user in this task before this job.
    pub ask_count: i32,
    /// Tools a person approved for the whole task.
    pub grants: Vec<String>,
    /// The task that delegated this one, if one did.
    pub parent_task_id: Option<TaskId>,
    /// How deep below a task nobody delegated this one is (0: it is such a task).
    pub depth: i32,
    /// The task whose workspace this one works in (its own, or its top task's).
    pub workspace_id: TaskId,
    /// The task's attempt limit per job as created (`max_attempts` grows with resumes).
    pub task_max_attempts: i32,
    /// Interjections and additions waiting for this job when it was claimed.
    pub pending_interjections: i32,
    /// Set on a job a Continue started: the job it carries on from.
    pub continued_from: Option<JobId>,
    /// A task created over A2A: the `messageId` its instruction came as, and its context.
    pub a2a: Option<A2aOrigin>,
    /// The space the task belongs to, and that space's tool policy (`None`: the worker's).
    pub space_id: Option<maestro_domain::SpaceId>,
    pub space_policy: Option<serde_json::Value>,
    /// Files attached to the task that are not in its workspace yet.
    pub unplaced_attachments: bool,
    /// With [`Publish::Directly`]: the `running` event, for the worker to
    /// publish.
    pub running: Option<Direct>,
}

/// Where an A2A task came from: what the agent is told in its dynamic context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct A2aOrigin {
    pub message_id: String,
    pub context_id: Option<String>,
}

/// The claim's row, before it is read into [`Claimed`].
struct Row {
    id: uuid::Uuid,
    task_id: uuid::Uuid,
    job_no: i32,
    attempt: i32,
    max_attempts: i32,
    profile: String,
    created_at: DateTime<Utc>,
    resume_movement: Option<String>,
    resume_question: Option<String>,
    ask_count: i32,
    pending_interjections: i32,
    claim_seq: i64,
    owner: String,
    instruction: String,
    piece: String,
    model: Option<String>,
    start_movement: Option<String>,
    parent_task_id: Option<uuid::Uuid>,
    depth: i32,
    workspace_id: uuid::Uuid,
    task_max_attempts: i32,
    grants: Vec<String>,
    continued_from_job_id: Option<uuid::Uuid>,
    message_id: Option<String>,
    context_id: Option<String>,
    space_id: Option<uuid::Uuid>,
    space_policy: Option<serde_json::Value>,
    unplaced_attachments: bool,
    claim_job_seq: i32,
    now: DateTime<Utc>,
    worker_id: String,
    direct: bool,
    traceparent: Option<String>,
    a2a_push: bool,
}

impl From<Row> for Claimed {
    fn from(r: Row) -> Self {
        let running = r.direct.then(|| {
            let written = crate::outbox::Written {
                task_id: TaskId(r.task_id),
                job_id: JobId(r.id),
                created_at: r.now,
                traceparent: r.traceparent.clone(),
                a2a_push: r.a2a_push,
            };
            // As the statement writes it.
            let payload = serde_json::json!({
                "status": "running", "attempt": r.attempt, "worker_id": r.worker_id,
            });
            written.event(EventKind::JobState, r.claim_seq, r.claim_job_seq, payload)
        });
        Claimed {
            job_id: JobId(r.id),
            task_id: TaskId(r.task_id),
            job_no: r.job_no,
            attempt: r.attempt,
            max_attempts: r.max_attempts,
            profile: r.profile,
            claim_seq: r.claim_seq,
            owner: r.owner,
            instruction: r.instruction,
            piece: r.piece,
            start_movement: r.start_movement,
            model: r.model,
            created_at: r.created_at,
            resume_movement: r.resume_movement,
            resume_question: r.resume_question,
            ask_count: r.ask_count,
            grants: r.grants,
            parent_task_id: r.parent_task_id.map(TaskId),
            depth: r.depth,
            workspace_id: TaskId(r.workspace_id),
            task_max_attempts: r.task_max_attempts,
            pending_interjections: r.pending_interjections,
            continued_from: r.continued_from_job_id.map(JobId),
            a2a: r.message_id.map(|message_id| A2aOrigin {
                message_id,
                context_id: r.context_id,
            }),
            space_id: r.space_id.map(maestro_domain::SpaceId),
            space_policy: r.space_policy,
            unplaced_attachments: r.unplaced_attachments,
            running,
        }
    }
}

/// Claim the job: `queued`, a due `retry`, or `running` under an expired lease becomes
/// `running` under this worker, with a `running` event, in one statement. `None` when there
/// is nothing to take (see [`state`]).
pub async fn claim(
    pool: &PgPool,
    job_id: JobId,
    worker_id: &str,
    lease: Duration,
) -> Result<Option<Claimed>, DbError> {
    let mut claimed = claim_many(pool, &[job_id], worker_id, lease).await?;
    Ok(claimed.pop())
}

/// [`claim`] several jobs in one statement (one commit): those that can be taken are, each
/// as [`claim`] would; the rest are left out of the answer.
pub async fn claim_many(
    pool: &PgPool,
    job_ids: &[JobId],
    worker_id: &str,
    lease: Duration,
) -> Result<Vec<Claimed>, DbError> {
    claim_many_traced(pool, job_ids, &[], worker_id, lease, &[], Publish::ByRelay).await
}

/// [`claim_many`], recording on each job the W3C `traceparent` its dispatch carried
/// (`traceparents[i]` for `job_ids[i]`; empty or missing: none). A job keeps the first one
/// recorded, so every attempt and every event of the job joins one trace. A worker that
/// serves only some `models` (empty: any) takes no job that names another: such a job stays
/// `queued` for a worker that does. With [`Publish::Directly`] the caller publishes each
/// claim's `running` event ([`Claimed::running`]).
pub async fn claim_many_traced(
    pool: &PgPool,
    job_ids: &[JobId],
    traceparents: &[String],
    worker_id: &str,
    lease: Duration,
    models: &[String],
    publish: Publish,
) -> Result<Vec<Claimed>, DbError> {
    let ids: Vec<uuid::Uuid> = job_ids.iter().map(|id| id.0).collect();
    let rows = sqlx::query_as!(
        Row,
        r#"
        WITH j AS (
            UPDATE jobs
               SET status = 'running', attempt = attempt + 1, worker_id = $2,
                   lease_expires_at = now() + make_interval(secs => $3),
                   started_at = COALESCE(started_at, now()), next_retry_at = NULL,
                   wait_reason = NULL, last_job_seq = last_job_seq + 1, updated_at = now(),
                   redispatches = 0,
                   traceparent = COALESCE(jobs.traceparent,
                       (SELECT NULLIF(x.tp, '') FROM unnest($1::uuid[], $4::text[]) AS x(id, tp)
                         WHERE x.id = jobs.id))
             WHERE id = ANY($1)
               AND (cardinality($5::text[]) = 0
                    OR COALESCE(jobs.model, (SELECT model FROM tasks WHERE tasks.id = jobs.task_id))
                       IS NULL
                    OR COALESCE(jobs.model, (SELECT model FROM tasks WHERE tasks.id = jobs.task_id))
                       = ANY($5))
               AND (status = 'queued'
                    OR (status = 'retry' AND next_retry_at <= now() + interval '50 milliseconds')
                    OR (status = 'running' AND lease_expires_at < now()))
         RETURNING id, task_id, job_no, attempt, max_attempts, profile, last_job_seq, created_at,
                   resume_movement, resume_question, ask_count, pending_interjections,
                   piece, model, continued_from_job_id, traceparent
        ), t AS (
            UPDATE tasks SET last_seq = last_seq + 1, updated_at = now()
              FROM j WHERE tasks.id = j.task_id
         RETURNING tasks.id, tasks.last_seq, tasks.owner, tasks.instruction, tasks.piece,
                   tasks.model, tasks.start_movement, tasks.parent_task_id, tasks.depth,
                   COALESCE(tasks.workspace_id, tasks.id) AS workspace_id,
                   tasks.max_attempts AS task_max_attempts, tasks.context_id, tasks.space_id
        ), d AS (
            -- Read by the outbox trigger as each event is inserted (migration 0024): the
            -- event insert reads it, so it is set first.
            SELECT set_config('maestro.writes_range_row', $6, true) AS grace
        ), e AS (
            INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
            SELECT t.id, t.last_seq, j.id, j.last_job_seq, 'job_state',
                   jsonb_build_object('status', 'running', 'attempt', j.attempt, 'worker_id', $2::text)
              FROM j JOIN t ON t.id = j.task_id CROSS JOIN d
        ), range AS (
            -- Published directly: each claim's event is its task's range (`outbox::Written`).
            INSERT INTO outbox (topic, task_id, msg_id, payload, relay_after)
            SELECT 'events', t.id, 'events:' || t.id || ':' || t.last_seq,
                   jsonb_build_object('first', t.last_seq, 'last', t.last_seq),
                   now() + d.grace::interval
              FROM t, d WHERE d.grace <> ''
        )
        SELECT j.id, j.task_id, j.job_no, j.attempt, j.max_attempts, j.profile, j.created_at,
               j.resume_movement AS "resume_movement?", j.resume_question AS "resume_question?", j.ask_count, j.pending_interjections,
               t.last_seq AS claim_seq, t.owner, t.instruction,
               COALESCE(j.piece, t.piece) AS "piece!", COALESCE(j.model, t.model) AS "model?",
               j.continued_from_job_id AS "continued_from_job_id?",
               t.start_movement AS "start_movement?",
               t.parent_task_id AS "parent_task_id?", t.depth, t.workspace_id AS "workspace_id!",
               COALESCE(t.task_max_attempts, j.max_attempts) AS "task_max_attempts!",
               ARRAY(SELECT g.tool FROM task_grants g WHERE g.task_id = j.task_id ORDER BY g.tool)
                   AS "grants!",
               t.context_id AS "context_id?",
               (SELECT c.message_id FROM comments c
                 WHERE c.task_id = j.task_id AND c.kind = 'instruction' AND t.context_id IS NOT NULL
                 LIMIT 1) AS "message_id?",
               t.space_id AS "space_id?",
               (SELECT s.policy FROM spaces s WHERE s.id = t.space_id) AS "space_policy?",
               EXISTS (SELECT 1 FROM task_attachments a
                        WHERE a.task_id = j.task_id AND a.placed_at IS NULL)
                   AS "unplaced_attachments!",
               j.last_job_seq AS claim_job_seq, now() AS "now!", $2::text AS "worker_id!",
               d.grace <> '' AS "direct!",
               j.traceparent AS "traceparent?",
               d.grace <> '' AND EXISTS (SELECT 1 FROM a2a_push_configs c
                                          WHERE c.task_id = j.task_id) AS "a2a_push!"
          FROM j JOIN t ON t.id = j.task_id CROSS JOIN d
        "#,
        &ids,
        worker_id,
        lease.as_secs_f64(),
        traceparents,
        models,
        publish.grace(),
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Claimed::from).collect())
}

/// A job's status, lease and retry time as they are now (`None`: no such job): why a claim
/// took nothing.
pub async fn state(pool: &PgPool, job_id: JobId) -> Result<Option<JobState>, DbError> {
    let row = sqlx::query!(
        "SELECT status, lease_expires_at, next_retry_at, worker_id FROM jobs WHERE id = $1",
        job_id.0
    )
    .fetch_optional(pool)
    .await?;
    row.map(|r| {
        Ok(JobState {
            status: crate::parse::status(&r.status)?,
            lease_expires_at: r.lease_expires_at,
            next_retry_at: r.next_retry_at,
            worker_id: r.worker_id,
        })
    })
    .transpose()
}
