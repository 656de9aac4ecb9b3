//! Comments on a task: its instruction, interjections into a running job, follow-ups that
//! start a new job.

use maestro_domain::{Comment, CommentKind, JobId, Owner, TaskId};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::DbError;

/// Add an interjection for `job_id`, if the job can still take one (queued, running, waiting
/// to retry or for subtasks); `None` otherwise. Counting it on the job row makes the job
/// unable to succeed until it is delivered.
pub async fn interject(
    pool: &PgPool,
    task_id: TaskId,
    job_id: JobId,
    author: &Owner,
    body: &str,
) -> Result<Option<Comment>, DbError> {
    let row = sqlx::query!(
        r#"
        WITH j AS (
            UPDATE jobs SET pending_interjections = pending_interjections + 1, updated_at = now()
             WHERE id = $2 AND task_id = $1
               AND status IN ('queued', 'running', 'retry', 'waiting_subtasks')
         RETURNING id
        )
        INSERT INTO comments (id, task_id, author, kind, body, job_id)
        SELECT $3, $1, $4, 'interjection', $5, j.id FROM j
        RETURNING id, created_at
        "#,
        task_id.0,
        job_id.0,
        Uuid::now_v7(),
        author.as_str(),
        body
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| Comment {
        id: r.id,
        task_id,
        job_id: Some(job_id),
        author: author.to_string(),
        kind: CommentKind::Interjection,
        body: body.to_owned(),
        created_at: r.created_at,
        delivered_at: None,
    }))
}

/// Interjections of a job not delivered yet, oldest first: `(id, body)`.
pub async fn pending(pool: &PgPool, job_id: JobId) -> Result<Vec<(Uuid, String)>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT id, body FROM comments
         WHERE job_id = $1 AND kind = 'interjection' AND delivered_at IS NULL
         ORDER BY id
        "#,
        job_id.0
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.body)).collect())
}

/// The follow-up comments a job was created for (kind `instruction`, after the first job).
pub async fn follow_ups(pool: &PgPool, job_id: JobId) -> Result<Vec<String>, DbError> {
    let bodies = sqlx::query_scalar!(
        "SELECT body FROM comments WHERE job_id = $1 AND kind IN ('instruction', 'answer') ORDER BY id",
        job_id.0
    )
    .fetch_all(pool)
    .await?;
    Ok(bodies)
}

/// A task's comments, oldest first.
pub async fn list(pool: &PgPool, task_id: TaskId) -> Result<Vec<Comment>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT id, job_id, author, kind, body, created_at, delivered_at
          FROM comments WHERE task_id = $1 ORDER BY id
        "#,
        task_id.0
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(Comment {
                id: r.id,
                task_id,
                job_id: r.job_id.map(JobId),
                author: r.author,
                kind: CommentKind::parse(&r.kind).ok_or_else(|| {
                    DbError::corrupt(format!("unknown comment kind {:?}", r.kind))
                })?,
                body: r.body,
                created_at: r.created_at,
                delivered_at: r.delivered_at,
            })
        })
        .collect()
}

/// Start a follow-up job for a task whose latest job is over: a new `queued` job carrying
/// the comment, its `queued` event, in one statement. `None` when the task has an active job:
/// the one-active-job index refuses the insert and the whole statement rolls back.
pub async fn follow_up(
    pool: &PgPool,
    task_id: TaskId,
    job_id: JobId,
    author: &Owner,
    body: &str,
    max_attempts: i32,
) -> Result<Option<Comment>, DbError> {
    let queued = serde_json::json!({"status": "queued", "attempt": 0});
    let row = sqlx::query!(
        r#"
        WITH t AS (
            UPDATE tasks SET job_count = job_count + 1, last_seq = last_seq + 1, updated_at = now()
             WHERE id = $1
         RETURNING id, job_count, last_seq
        ), j AS (
            INSERT INTO jobs (id, task_id, job_no, status, max_attempts, last_job_seq, ask_count)
            SELECT $2, t.id, t.job_count, 'queued', $6, 1,
                   -- The task's questions so far count against its ask limit.
                   (SELECT COALESCE(max(ask_count), 0) FROM jobs WHERE task_id = $1)
              FROM t
            RETURNING id, task_id
        ), e AS (
            INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
            SELECT t.id, t.last_seq, j.id, 1, 'job_state', $7 FROM t JOIN j ON j.task_id = t.id
        )
        INSERT INTO comments (id, task_id, author, kind, body, job_id)
        SELECT $3, j.task_id, $4, 'instruction', $5, j.id FROM j
        RETURNING id, created_at
        "#,
        task_id.0,
        job_id.0,
        Uuid::now_v7(),
        author.as_str(),
        body,
        max_attempts,
        queued
    )
    .fetch_optional(pool)
    .await;
    let row = match row {
        Ok(row) => row,
        // Another job of the task became active meanwhile.
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(row.map(|r| Comment {
        id: r.id,
        task_id,
        job_id: Some(job_id),
        author: author.to_string(),
        kind: CommentKind::Instruction,
        body: body.to_owned(),
        created_at: r.created_at,
        delivered_at: None,
    }))
}

/// Hand the interjections a job never read to another job (a follow-up that delivers them),
/// in the caller's transaction.
pub async fn move_unread(conn: &mut PgConnection, from: JobId, to: JobId) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        WITH moved AS (
            UPDATE comments SET job_id = $2
             WHERE job_id = $1 AND kind = 'interjection' AND delivered_at IS NULL
         RETURNING id
        )
        UPDATE jobs SET pending_interjections = (SELECT count(*) FROM moved) WHERE id = $2
        "#,
        from.0,
        to.0
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Add a comment for job `job_id` (in the caller's transaction).
pub async fn insert(
    conn: &mut PgConnection,
    task_id: TaskId,
    job_id: JobId,
    author: &Owner,
    kind: CommentKind,
    body: &str,
) -> Result<Comment, DbError> {
    let row = sqlx::query!(
        r#"
        INSERT INTO comments (id, task_id, author, kind, body, job_id)
        VALUES ($1, $2, $3, $4, $5, $6)
        RETURNING id, created_at
        "#,
        Uuid::now_v7(),
        task_id.0,
        author.as_str(),
        kind.as_str(),
        body,
        job_id.0
    )
    .fetch_one(conn)
    .await?;
    Ok(Comment {
        id: row.id,
        task_id,
        job_id: Some(job_id),
        author: author.to_string(),
        kind,
        body: body.to_owned(),
        created_at: row.created_at,
        delivered_at: None,
    })
}
