//! Subtasks (SPEC §3.4, §3.5): child tasks a job starts with `delegate`, the join that queues
//! the waiting parent again once every child is over, and cancellation of a task's tree.
//!
//! A child is created idempotently (its idempotency key is the parent job and the call's
//! item key), so a parent job resumed after a crash finds the children it started instead of
//! starting them twice ([`insert_child`], then [`find_child`]). The parent records one
//! `subtask` item per child and commits `waiting_subtasks`; the scheduler's join, in one
//! transaction it owns, takes the items whose child is over ([`finished`]), stores their
//! decisions ([`resolve`]) and queues every waiting parent with nothing left pending
//! ([`queue_ready`]).

use maestro_domain::task::ChildTask;
use maestro_domain::{ActionId, Decision, JobId, JobStatus, TaskId};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::DbError;
use crate::jobs::{Fence, ToDispatch};

/// The start of the idempotency keys of subtasks (`subtask:<parent job>:<item key>`), which
/// the API refuses in requests.
pub const KEY_PREFIX: &str = "subtask:";

/// The job starting a subtask, and what its children inherit.
#[derive(Debug, Clone)]
pub struct Parent<'a> {
    pub fence: Fence,
    pub task_id: TaskId,
    pub owner: &'a str,
    pub model: Option<&'a str>,
    pub profile: &'a str,
    /// The task's attempt limit per job (not its job's, which grows with every resume).
    pub max_attempts: i32,
    /// The parent's depth (0 for a task nobody delegated).
    pub depth: i32,
    /// The task whose workspace the tree works in.
    pub workspace_id: TaskId,
}

/// A child to start.
#[derive(Debug, Clone)]
pub struct NewSubtask<'a> {
    /// The parent's item key for the call: the same on every claim that reaches it.
    pub key: &'a str,
    pub instruction: &'a str,
    pub piece: &'a str,
}

/// A child task and its first job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spawned {
    pub task_id: TaskId,
    pub job_id: JobId,
    /// Created by this call (else an earlier claim of the parent created it).
    pub created: bool,
}

/// What [`insert_child`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// The child, just created.
    Created(Spawned),
    /// The parent started this child before ([`find_child`] finds it).
    Existed,
    /// The parent job is no longer held by the fence: nothing was written.
    NotHeld,
}

/// The idempotency key of the child a parent job starts for the call with item key `key`.
fn child_key(parent: &Parent<'_>, key: &str) -> String {
    format!("{KEY_PREFIX}{}:{key}", parent.fence.job_id)
}

/// Start a child task (queued, with its instruction comment and first event) unless the
/// parent started it before, in one statement.
pub async fn insert_child(
    pool: &PgPool,
    parent: &Parent<'_>,
    new: &NewSubtask<'_>,
) -> Result<Inserted, DbError> {
    let (task_id, job_id) = (Uuid::now_v7(), Uuid::now_v7());
    let queued = serde_json::json!({"status": JobStatus::Queued, "attempt": 0});
    let row = sqlx::query!(
        r#"
        WITH held AS (
            -- Shared lock: a cancel of the parent waits for this statement, and a spawn after
            -- the cancel finds the parent no longer held.
            SELECT 1 AS one FROM jobs WHERE id = $1 AND attempt = $2 AND status = 'running'
               FOR SHARE
        ), task AS (
            -- A subtask belongs where its parent does, seen by whom its parent is.
            INSERT INTO tasks (id, owner, instruction, piece, model, idempotency_key,
                               request_hash, last_seq, job_count, parent_task_id, parent_job_id,
                               workspace_id, depth, max_attempts, space_id, visibility, profile)
            SELECT $3, $4, $5, $6, $7, $8, 'subtask', 1, 1, $9, $1, $10, $11, $15,
                   p.space_id, p.visibility, $14
              FROM held, tasks p WHERE p.id = $9
            ON CONFLICT (owner, idempotency_key) DO NOTHING
            RETURNING id
        ), comment AS (
            INSERT INTO comments (id, task_id, author, kind, body, job_id)
            SELECT $12, task.id, $4, 'instruction', $5, $13 FROM task
        ), job AS (
            INSERT INTO jobs (id, task_id, job_no, status, profile, max_attempts, last_job_seq)
            SELECT $13, task.id, 1, 'queued', $14, $15, 1 FROM task
            RETURNING id, task_id
        ), event AS (
            INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
            SELECT job.task_id, 1, job.id, 1, 'job_state', $16 FROM job
        )
        SELECT EXISTS (SELECT 1 FROM held) AS "held!", (SELECT id FROM task) AS created
        "#,
        parent.fence.job_id.0,
        parent.fence.attempt,
        task_id,
        parent.owner,
        new.instruction,
        new.piece,
        parent.model,
        child_key(parent, new.key),
        parent.task_id.0,
        parent.workspace_id.0,
        parent.depth + 1,
        Uuid::now_v7(),
        job_id,
        parent.profile,
        parent.max_attempts,
        queued,
    )
    .fetch_one(pool)
    .await?;
    Ok(match (row.held, row.created) {
        (false, _) => Inserted::NotHeld,
        (true, Some(_)) => Inserted::Created(Spawned {
            task_id: TaskId(task_id),
            job_id: JobId(job_id),
            created: true,
        }),
        (true, None) => Inserted::Existed,
    })
}

/// The child the parent started before for the call with item key `key`.
pub async fn find_child(pool: &PgPool, parent: &Parent<'_>, key: &str) -> Result<Spawned, DbError> {
    let existing = sqlx::query!(
        r#"
        SELECT t.id, j.id AS job_id FROM tasks t JOIN jobs j ON j.task_id = t.id AND j.job_no = 1
         WHERE t.owner = $1 AND t.idempotency_key = $2 AND t.parent_job_id = $3
        "#,
        parent.owner,
        child_key(parent, key),
        parent.fence.job_id.0
    )
    .fetch_one(pool)
    .await?;
    Ok(Spawned {
        task_id: TaskId(existing.id),
        job_id: JobId(existing.job_id),
        created: false,
    })
}

/// A `subtask` item whose child is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub action_id: ActionId,
    /// The parent job that waits for it, and that job's status.
    pub job_id: JobId,
    pub job_status: JobStatus,
    pub subtask_id: TaskId,
    /// The child's latest job: its status (terminal), result and error.
    pub status: JobStatus,
    pub result: Option<String>,
    pub error: Option<String>,
}

/// Lock (skipping those another join holds) up to `limit` pending `subtask` items whose
/// child's latest job is over.
pub async fn finished(conn: &mut PgConnection, limit: i64) -> Result<Vec<Finished>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT a.id, a.job_id, p.status AS job_status, a.subtask_id AS "subtask_id!",
               c.status, c.result, c.error
          FROM required_actions a
          JOIN jobs p ON p.id = a.job_id
         CROSS JOIN LATERAL (SELECT status, result, error FROM jobs
                              WHERE task_id = a.subtask_id
                              ORDER BY job_no DESC LIMIT 1) c
         WHERE a.kind = 'subtask' AND a.status = 'pending'
           AND c.status IN ('succeeded', 'failed', 'cancelled')
         LIMIT $1
           FOR UPDATE OF a SKIP LOCKED
        "#,
        limit
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(Finished {
                action_id: ActionId(r.id),
                job_id: JobId(r.job_id),
                job_status: crate::parse::status(&r.job_status)?,
                subtask_id: TaskId(r.subtask_id),
                status: crate::parse::status(&r.status)?,
                result: r.result,
                error: r.error,
            })
        })
        .collect()
}

/// Store the decisions on items (their status follows each verdict), in one statement.
pub async fn resolve(
    conn: &mut PgConnection,
    decisions: &[(ActionId, Decision)],
) -> Result<(), DbError> {
    let ids: Vec<Uuid> = decisions.iter().map(|(id, _)| id.0).collect();
    let statuses: Vec<&str> = decisions
        .iter()
        .map(|(_, d)| d.verdict.status().as_str())
        .collect();
    let stored = decisions
        .iter()
        .map(|(_, d)| serde_json::to_value(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(DbError::corrupt)?;
    sqlx::query!(
        r#"
        UPDATE required_actions a
           SET status = x.status, decision = x.decision, decided_at = now()
          FROM unnest($1::uuid[], $2::text[], $3::jsonb[]) AS x(id, status, decision)
         WHERE a.id = x.id
        "#,
        &ids,
        &statuses as &[&str],
        &stored
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Queue again every `waiting_subtasks` job with no item left pending (one more claim each:
/// the next claim is a continuation). Their `queued` events are the caller's.
pub async fn queue_ready(conn: &mut PgConnection) -> Result<Vec<ToDispatch>, DbError> {
    let queued = sqlx::query!(
        r#"
        UPDATE jobs SET status = 'queued', max_attempts = max_attempts + 1, updated_at = now()
         WHERE status = 'waiting_subtasks'
           AND NOT EXISTS (SELECT 1 FROM required_actions a
                            WHERE a.job_id = jobs.id AND a.status = 'pending')
        RETURNING id, task_id, attempt, profile
        "#
    )
    .fetch_all(conn)
    .await?;
    Ok(queued
        .into_iter()
        .map(|r| ToDispatch {
            job_id: JobId(r.id),
            task_id: TaskId(r.task_id),
            attempt: r.attempt,
            profile: r.profile,
        })
        .collect())
}

/// The children of a task (oldest first), each with its latest job's state.
pub async fn children(pool: &PgPool, task_id: TaskId) -> Result<Vec<ChildTask>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT t.id, t.parent_job_id, t.instruction, t.piece, t.depth, t.created_at,
               j.status, j.result, j.error
          FROM tasks t
         CROSS JOIN LATERAL (SELECT status, result, error FROM jobs
                              WHERE task_id = t.id ORDER BY job_no DESC LIMIT 1) j
         WHERE t.parent_task_id = $1
         ORDER BY t.created_at, t.id
        "#,
        task_id.0
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(ChildTask {
                id: TaskId(r.id),
                parent_job_id: r.parent_job_id.map(JobId),
                instruction: r.instruction,
                piece: r.piece,
                depth: r.depth,
                status: crate::parse::status(&r.status)?,
                result: r.result,
                error: r.error,
                created_at: r.created_at,
            })
        })
        .collect()
}

/// A job [`cancel_tree`] cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled {
    pub job_id: JobId,
    pub task_id: TaskId,
}

/// Cancel the latest job of a task and of every task below it (its subtasks, theirs...)
/// unless it is over, each with its `cancelled` event. Workers still running one are fenced:
/// their next write matches nothing. A child being started while the cancel runs is caught:
/// the statement runs again until it finds nothing more (a start waits for, or is refused
/// by, its parent's cancellation).
pub async fn cancel_tree(
    pool: &PgPool,
    task_id: TaskId,
    reason: &str,
) -> Result<Vec<Cancelled>, DbError> {
    let mut all = Vec::new();
    let mut deadlocks = 0;
    loop {
        let cancelled = match cancel_tree_once(pool, task_id, reason).await {
            Ok(cancelled) => cancelled,
            // Locks taken in another order by a concurrent join: Postgres picked this one.
            Err(DbError::Contention(_)) if deadlocks < 5 => {
                deadlocks += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        if cancelled.is_empty() {
            break;
        }
        all.extend(cancelled);
    }
    Ok(all)
}

/// Cancel the children a job started that are not over (whether or not an item for them was
/// recorded) and their trees: the job failed, so nobody will read their results.
pub async fn cancel_children(
    pool: &PgPool,
    job_id: JobId,
    reason: &str,
) -> Result<Vec<Cancelled>, DbError> {
    let children = sqlx::query_scalar!(
        r#"
        SELECT t.id FROM tasks t
         CROSS JOIN LATERAL (SELECT status FROM jobs WHERE task_id = t.id
                              ORDER BY job_no DESC LIMIT 1) j
         WHERE t.parent_job_id = $1 AND j.status NOT IN ('succeeded', 'failed', 'cancelled')
        "#,
        job_id.0
    )
    .fetch_all(pool)
    .await?;
    let mut all = Vec::new();
    for child in children {
        all.extend(cancel_tree(pool, TaskId(child), reason).await?);
    }
    Ok(all)
}

async fn cancel_tree_once(
    pool: &PgPool,
    task_id: TaskId,
    reason: &str,
) -> Result<Vec<Cancelled>, DbError> {
    let below = format!("{reason} (a task above it was cancelled)");
    let rows = sqlx::query!(
        r#"
        WITH RECURSIVE tree AS (
            SELECT id FROM tasks WHERE id = $1
            UNION ALL
            SELECT t.id FROM tasks t JOIN tree ON t.parent_task_id = tree.id
        ), latest AS (
            SELECT DISTINCT ON (task_id) id FROM jobs
             WHERE task_id IN (SELECT id FROM tree) ORDER BY task_id, job_no DESC
        ), j AS (
            UPDATE jobs
               SET status = 'cancelled', wait_reason = NULL, lease_expires_at = NULL,
                   finished_at = now(), last_job_seq = last_job_seq + 1, updated_at = now()
              FROM latest
             WHERE jobs.id = latest.id AND jobs.status NOT IN ('succeeded', 'failed', 'cancelled')
         RETURNING jobs.id, jobs.task_id, jobs.attempt, jobs.last_job_seq
        ), t AS (
            UPDATE tasks SET last_seq = last_seq + 1, updated_at = now()
              FROM j WHERE tasks.id = j.task_id
         RETURNING tasks.id, tasks.last_seq
        ), e AS (
            INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
            SELECT t.id, t.last_seq, j.id, j.last_job_seq, 'job_state',
                   jsonb_build_object('status', 'cancelled', 'attempt', j.attempt,
                                      'reason', CASE WHEN j.task_id = $1 THEN $2 ELSE $3 END)
              FROM j JOIN t ON t.id = j.task_id
        )
        SELECT j.id, j.task_id FROM j
        "#,
        task_id.0,
        reason,
        below,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Cancelled {
            job_id: JobId(r.id),
            task_id: TaskId(r.task_id),
        })
        .collect())
}
