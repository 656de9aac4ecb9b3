//! Subtasks (SPEC §3.4, §3.5): child tasks a job starts with `delegate`, the join that queues
//! the waiting parent again once every child is over, and cancellation of a task's tree.
//!
//! A child is created idempotently (its idempotency key is the parent job and the call's
//! item key), so a parent job resumed after a crash finds the children it started instead of
//! starting them twice. The parent records one `subtask` item per child and commits
//! `waiting_subtasks`; [`join`] resolves an item when its child's latest job is over and
//! queues every waiting parent with nothing left pending, in one transaction.

use chrono::{DateTime, Utc};
use maestro_domain::{
    DecisionEvent, EventBody, JobId, JobStateChange, JobStatus, TaskId, WaitReason,
};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::DbError;
use crate::jobs::Fence;
use crate::tasks::parse_status;

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

/// Start a child task (queued, with its instruction comment and first event) unless the
/// parent started it before. `None` when the parent job is no longer held by `fence`
/// (nothing written).
pub async fn spawn(
    pool: &PgPool,
    parent: &Parent<'_>,
    new: &NewSubtask<'_>,
) -> Result<Option<Spawned>, DbError> {
    let key = format!("{KEY_PREFIX}{}:{}", parent.fence.job_id, new.key);
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
            INSERT INTO tasks (id, owner, instruction, piece, model, idempotency_key,
                               request_hash, last_seq, job_count, parent_task_id, parent_job_id,
                               workspace_id, depth, max_attempts)
            SELECT $3, $4, $5, $6, $7, $8, 'subtask', 1, 1, $9, $1, $10, $11, $15 FROM held
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
        key,
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
    if !row.held {
        return Ok(None);
    }
    if row.created.is_some() {
        return Ok(Some(Spawned {
            task_id: TaskId(task_id),
            job_id: JobId(job_id),
            created: true,
        }));
    }
    let existing = sqlx::query!(
        r#"
        SELECT t.id, j.id AS job_id FROM tasks t JOIN jobs j ON j.task_id = t.id AND j.job_no = 1
         WHERE t.owner = $1 AND t.idempotency_key = $2 AND t.parent_job_id = $3
        "#,
        parent.owner,
        key,
        parent.fence.job_id.0
    )
    .fetch_one(pool)
    .await?;
    Ok(Some(Spawned {
        task_id: TaskId(existing.id),
        job_id: JobId(existing.job_id),
        created: false,
    }))
}

/// A parent job the join queued again: dispatch it with `attempt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resumed {
    pub job_id: JobId,
    pub task_id: TaskId,
    pub attempt: i32,
    pub profile: String,
}

/// Resolve the `subtask` items whose child is over (its latest job succeeded, failed or was
/// cancelled: the child's status, result and error become the item's decision, with a
/// `decision` event on the parent unless the parent's job is over itself), then queue again
/// every `waiting_subtasks` job with no item left pending (with its `queued` event), in one
/// transaction. Safe to run at any time and from several schedulers at once.
pub async fn join(pool: &PgPool, limit: i64) -> Result<Vec<Resumed>, DbError> {
    let mut tx = pool.begin().await?;
    let resolved = sqlx::query!(
        r#"
        WITH done AS (
            SELECT a.id, a.subtask_id, c.status, c.result, c.error
              FROM required_actions a
             CROSS JOIN LATERAL (SELECT status, result, error FROM jobs
                                  WHERE task_id = a.subtask_id
                                  ORDER BY job_no DESC LIMIT 1) c
             WHERE a.kind = 'subtask' AND a.status = 'pending'
               AND c.status IN ('succeeded', 'failed', 'cancelled')
             LIMIT $1
               FOR UPDATE OF a SKIP LOCKED
        )
        UPDATE required_actions a
           SET status = 'resolved', decided_at = now(),
               decision = jsonb_build_object('decision', done.status, 'by', 'scheduler',
                                             'result', done.result, 'error', done.error)
          FROM done, jobs p
         WHERE a.id = done.id AND p.id = a.job_id
        RETURNING a.id, a.job_id, done.subtask_id AS "subtask_id!", done.status,
                  p.status AS parent_status
        "#,
        limit
    )
    .fetch_all(&mut *tx)
    .await?;
    let queued = sqlx::query!(
        r#"
        UPDATE jobs SET status = 'queued', max_attempts = max_attempts + 1, updated_at = now()
         WHERE status = 'waiting_subtasks'
           AND NOT EXISTS (SELECT 1 FROM required_actions a
                            WHERE a.job_id = jobs.id AND a.status = 'pending')
        RETURNING id, task_id, attempt, profile
        "#
    )
    .fetch_all(&mut *tx)
    .await?;
    let resumed: Vec<Resumed> = queued
        .into_iter()
        .map(|r| Resumed {
            job_id: JobId(r.id),
            task_id: TaskId(r.task_id),
            attempt: r.attempt,
            profile: r.profile,
        })
        .collect();
    // A parent that is over (cancelled with its tree) is told nothing more.
    let mut jobs: Vec<JobId> = resolved
        .iter()
        .filter(|r| {
            !matches!(
                r.parent_status.as_str(),
                "succeeded" | "failed" | "cancelled"
            )
        })
        .map(|r| JobId(r.job_id))
        .collect();
    jobs.extend(resumed.iter().map(|r| r.job_id));
    jobs.sort_by_key(|j| j.0);
    jobs.dedup();
    for job in jobs {
        let again = resumed.iter().find(|r| r.job_id == job);
        let mut events = Vec::new();
        for r in resolved.iter().filter(|r| r.job_id == job.0) {
            let status = match again {
                Some(_) => JobStatus::Queued,
                None => parse_status(&r.parent_status)?,
            };
            events.push(EventBody::Decision(DecisionEvent {
                action_id: r.id,
                kind: WaitReason::Subtask,
                decision: r.status.clone(),
                by: "scheduler".to_owned(),
                scope: None,
                note: Some(format!("subtask {}", r.subtask_id)),
                resumed: again.is_some(),
                status: Some(status),
            }));
        }
        if let Some(again) = again {
            let mut change = JobStateChange::new(JobStatus::Queued, again.attempt);
            change.reason = Some("every subtask the job waited for is over".to_owned());
            events.push(EventBody::JobState(change));
        }
        crate::actions::push_events(&mut tx, job, &events).await?;
    }
    tx.commit().await?;
    Ok(resumed)
}

/// A child task as its parent's API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Child {
    pub id: TaskId,
    pub parent_job_id: Option<JobId>,
    pub instruction: String,
    pub piece: String,
    pub depth: i32,
    pub status: JobStatus,
    pub result: Option<String>,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// The children of a task (oldest first), each with its latest job's state.
pub async fn children(pool: &PgPool, task_id: TaskId) -> Result<Vec<Child>, DbError> {
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
            Ok(Child {
                id: TaskId(r.id),
                parent_job_id: r.parent_job_id.map(JobId),
                instruction: r.instruction,
                piece: r.piece,
                depth: r.depth,
                status: parse_status(&r.status)?,
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
            Err(DbError::Sqlx(sqlx::Error::Database(e)))
                if e.code().as_deref() == Some("40P01") && deadlocks < 5 =>
            {
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
