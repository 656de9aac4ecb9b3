//! Continue (SPEC §3.3): a task whose latest job is over carries on in a new job with a new
//! instruction (a `handoff` comment), which replays the task's transcript when it opens. The
//! new job, its comment and its first events are one statement; the one-unfinished-job index
//! refuses a second job, so a Continue racing another Continue or a comment never leaves the
//! task with two.

use chrono::{DateTime, Utc};
use maestro_domain::event::{ContinuedEvent, JobStateChange};
use maestro_domain::{JobId, JobStatus, Owner, TaskId};
use sqlx::PgPool;
use uuid::Uuid;

use crate::DbError;

/// A Continue to record.
#[derive(Debug, Clone)]
pub struct NewContinue<'a> {
    pub task_id: TaskId,
    /// The new job.
    pub job_id: JobId,
    /// The task's latest job, over: the one the new job carries on from.
    pub from: JobId,
    pub author: &'a Owner,
    pub instruction: &'a str,
    /// The piece to run (`None`: the one `from` ran).
    pub piece: Option<&'a str>,
    /// The model to use (`None`: the one `from` used).
    pub model: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    pub request_hash: &'a str,
    pub max_attempts: i32,
    /// The A2A `messageId` the instruction came as.
    pub message_id: Option<&'a str>,
}

/// What recording a Continue came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Continued {
    /// The new job, queued.
    Created {
        job_no: i32,
        comment_id: Uuid,
        created_at: DateTime<Utc>,
    },
    /// `from` is no longer the task's latest job, or not over, or another job of the task is
    /// unfinished: nothing was written.
    Busy,
    /// The task has a job continued under this Idempotency-Key: nothing was written.
    KeyUsed,
}

/// Record a Continue: the new `queued` job (continuing `from`, with the piece and model it
/// runs when they differ from the task's), its `handoff` comment and its `job_continued` and
/// `queued` events, in one statement.
pub async fn insert(pool: &PgPool, new: &NewContinue<'_>) -> Result<Continued, DbError> {
    let comment_id = Uuid::now_v7();
    let continued = ContinuedEvent {
        from_job_id: new.from,
        comment_id,
        piece: new.piece.map(str::to_owned),
        model: new.model.map(str::to_owned),
    };
    let queued = JobStateChange::new(JobStatus::Queued, 0);
    let row = sqlx::query!(
        r#"
        WITH prev AS (
            SELECT p.id, p.task_id, p.model,
                   -- The piece the job ran (a routed task's job records its choice).
                   COALESCE((SELECT e.payload->>'piece' FROM events e
                              WHERE e.job_id = p.id AND e.kind = 'movement' AND e.payload ? 'piece'
                              ORDER BY e.job_seq DESC LIMIT 1), p.piece) AS ran
              FROM jobs p
             WHERE p.id = $2 AND p.task_id = $1
               AND p.status IN ('succeeded', 'failed', 'cancelled')
               AND p.job_no = (SELECT max(job_no) FROM jobs WHERE task_id = $1)
        ), t AS (
            UPDATE tasks SET job_count = job_count + 1, last_seq = last_seq + 2, updated_at = now()
              FROM prev WHERE tasks.id = prev.task_id
         RETURNING tasks.id, tasks.job_count, tasks.last_seq, tasks.piece
        ), j AS (
            INSERT INTO jobs (id, task_id, job_no, status, max_attempts, last_job_seq, ask_count,
                              continued_from_job_id, piece, model, idempotency_key, request_hash)
            SELECT $3, t.id, t.job_count, 'queued', $4, 2,
                   (SELECT COALESCE(max(ask_count), 0) FROM jobs WHERE task_id = $1),
                   prev.id, NULLIF(COALESCE($5, prev.ran), t.piece), COALESCE($6, prev.model),
                   $7, $8
              FROM t, prev
         RETURNING id, task_id, job_no, created_at
        ), c AS (
            INSERT INTO comments (id, task_id, author, kind, body, job_id, message_id)
            SELECT $9, j.task_id, $10, 'handoff', $11, j.id, $14 FROM j
        ), e AS (
            INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
            SELECT t.id, t.last_seq - 1, j.id, 1, 'job_continued', $12::jsonb FROM t, j
            UNION ALL
            SELECT t.id, t.last_seq, j.id, 2, 'job_state', $13::jsonb FROM t, j
        )
        SELECT job_no, created_at FROM j
        "#,
        new.task_id.0,
        new.from.0,
        new.job_id.0,
        new.max_attempts,
        new.piece,
        new.model,
        new.idempotency_key,
        new.request_hash,
        comment_id,
        new.author.as_str(),
        new.instruction,
        serde_json::to_value(&continued).expect("a plain struct serializes"),
        serde_json::to_value(&queued).expect("a plain struct serializes"),
        new.message_id,
    )
    .fetch_optional(pool)
    .await;
    match row {
        Ok(Some(r)) => Ok(Continued::Created {
            job_no: r.job_no,
            comment_id,
            created_at: r.created_at,
        }),
        Ok(None) => Ok(Continued::Busy),
        Err(sqlx::Error::Database(e)) if e.constraint() == Some("jobs_continue_key") => {
            Ok(Continued::KeyUsed)
        }
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(Continued::Busy),
        Err(e) => Err(e.into()),
    }
}

/// The job a Continue of task `task_id` created under `key`, and its request's hash.
pub async fn find_by_key(
    pool: &PgPool,
    task_id: TaskId,
    key: &str,
) -> Result<Option<(JobId, Option<String>)>, DbError> {
    let row = sqlx::query!(
        "SELECT id, request_hash FROM jobs WHERE task_id = $1 AND idempotency_key = $2",
        task_id.0,
        key
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| (JobId(r.id), r.request_hash)))
}

/// A job's terminal outcome as a continuation's handoff shows it when nothing of the task's
/// transcript replays: `(status, result, error)`.
pub async fn outcome(
    pool: &PgPool,
    job_id: JobId,
) -> Result<Option<(JobStatus, Option<String>, Option<String>)>, DbError> {
    let row = sqlx::query!(
        "SELECT status, result, error FROM jobs WHERE id = $1",
        job_id.0
    )
    .fetch_optional(pool)
    .await?;
    row.map(|r| Ok((crate::parse::status(&r.status)?, r.result, r.error)))
        .transpose()
}
