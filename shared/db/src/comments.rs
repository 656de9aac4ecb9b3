//! Comments on a task: its instruction, interjections into a running job, additions to a
//! queued job's instruction, follow-ups that start a new job, and the handoffs of Continues
//! (`continues.rs`).

use maestro_domain::{Comment, CommentKind, JobId, Owner, TaskId};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::DbError;

/// What a person said: the comment's author and text, and the A2A `messageId` it came as
/// (unique per task: the same message twice is refused by the database).
#[derive(Debug, Clone, Copy)]
pub struct Said<'a> {
    pub author: &'a Owner,
    pub body: &'a str,
    pub message_id: Option<&'a str>,
}

impl<'a> Said<'a> {
    pub fn new(author: &'a Owner, body: &'a str) -> Self {
        Self {
            author,
            body,
            message_id: None,
        }
    }

    /// The comment this became (of `kind`, for job `job_id`), with its stored id and time.
    fn comment(
        &self,
        (id, created_at): (Uuid, chrono::DateTime<chrono::Utc>),
        task_id: TaskId,
        job_id: JobId,
        kind: CommentKind,
    ) -> Comment {
        Comment {
            id,
            task_id,
            job_id: Some(job_id),
            author: self.author.to_string(),
            kind,
            body: self.body.to_owned(),
            created_at,
            delivered_at: None,
            message_id: self.message_id.map(str::to_owned),
        }
    }
}

/// Whether A2A message `message_id` already reached task `task_id`: as a comment, or as a
/// decision of one of its items.
pub async fn has_message(
    pool: &PgPool,
    task_id: TaskId,
    message_id: &str,
) -> Result<bool, DbError> {
    let row = sqlx::query_scalar!(
        r#"
        SELECT 1 AS one FROM comments WHERE task_id = $1 AND message_id = $2
        UNION ALL
        SELECT 1 FROM required_actions WHERE task_id = $1 AND decision->>'message_id' = $2
        LIMIT 1
        "#,
        task_id.0,
        message_id
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.is_some())
}

/// Add a comment job `job_id` takes into its conversation, while the job is still in a state
/// for it: an interjection while it runs or waits for its subtasks, an addition (to its
/// instruction) while it is queued or waits to retry; `None` otherwise (nothing written).
/// Counting it on the job row makes the job unable to succeed until it is delivered, and the
/// row lock orders it against the claim: a claim after it sees it counted.
pub async fn add_to_job(
    pool: &PgPool,
    task_id: TaskId,
    job_id: JobId,
    kind: CommentKind,
    said: Said<'_>,
) -> Result<Option<Comment>, DbError> {
    let statuses: &[&str] = match kind {
        CommentKind::Addition => &["queued", "retry"],
        _ => &["running", "waiting_subtasks"],
    };
    let row = sqlx::query!(
        r#"
        WITH j AS (
            UPDATE jobs SET pending_interjections = pending_interjections + 1, updated_at = now()
             WHERE id = $2 AND task_id = $1 AND status = ANY($6::text[])
         RETURNING id
        )
        INSERT INTO comments (id, task_id, author, kind, body, job_id, message_id)
        SELECT $3, $1, $4, $5, $7, j.id, $8 FROM j
        RETURNING id, created_at
        "#,
        task_id.0,
        job_id.0,
        Uuid::now_v7(),
        said.author.as_str(),
        kind.as_str(),
        statuses as &[&str],
        said.body,
        said.message_id
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| said.comment((r.id, r.created_at), task_id, job_id, kind)))
}

/// A comment a job takes in: what opens it, or what it has not read yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForJob {
    pub id: Uuid,
    pub kind: CommentKind,
    pub body: String,
}

/// Interjections and additions of a job not delivered yet, oldest first.
pub async fn pending(pool: &PgPool, job_id: JobId) -> Result<Vec<ForJob>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT id, kind, body FROM comments
         WHERE job_id = $1 AND kind IN ('interjection', 'addition') AND delivered_at IS NULL
         ORDER BY id
        "#,
        job_id.0
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| for_job(r.id, &r.kind, r.body))
        .collect()
}

/// What a new job opens with besides the task's instruction: the comments it was created
/// for (a follow-up's `instruction`, an `answer`, a Continue's `handoff`) and the additions and
/// interjections not delivered yet, oldest first.
pub async fn opening(
    pool: &PgPool,
    task_id: TaskId,
    job_id: JobId,
) -> Result<Vec<ForJob>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT id, kind, body FROM comments
         WHERE task_id = $1 AND job_id = $2
           AND (kind IN ('instruction', 'answer', 'handoff') OR delivered_at IS NULL)
         ORDER BY id
        "#,
        task_id.0,
        job_id.0
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| for_job(r.id, &r.kind, r.body))
        .collect()
}

fn for_job(id: Uuid, kind: &str, body: String) -> Result<ForJob, DbError> {
    let kind = CommentKind::parse(kind)
        .ok_or_else(|| DbError::corrupt(format!("unknown comment kind {kind:?}")))?;
    Ok(ForJob { id, kind, body })
}

/// A task's comments, oldest first.
pub async fn list(pool: &PgPool, task_id: TaskId) -> Result<Vec<Comment>, DbError> {
    of_tasks(pool, &[task_id]).await
}

/// The comments of tasks `task_ids`, by task, oldest first.
pub async fn of_tasks(pool: &PgPool, task_ids: &[TaskId]) -> Result<Vec<Comment>, DbError> {
    let ids: Vec<Uuid> = task_ids.iter().map(|t| t.0).collect();
    let rows = sqlx::query!(
        r#"
        SELECT id, task_id, job_id, author, kind, body, created_at, delivered_at, message_id
          FROM comments WHERE task_id = ANY($1) ORDER BY task_id, id
        "#,
        &ids
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(Comment {
                id: r.id,
                task_id: TaskId(r.task_id),
                job_id: r.job_id.map(JobId),
                author: r.author,
                kind: CommentKind::parse(&r.kind).ok_or_else(|| {
                    DbError::corrupt(format!("unknown comment kind {:?}", r.kind))
                })?,
                body: r.body,
                created_at: r.created_at,
                delivered_at: r.delivered_at,
                message_id: r.message_id,
            })
        })
        .collect()
}

/// Start a follow-up job for a task whose latest job is over: a new `queued` job carrying
/// the comment (running the latest job's piece and model), its `queued` event, in one
/// statement. `None` when the task has an unfinished job: the one-unfinished-job index refuses
/// the insert and the whole statement rolls back.
pub async fn follow_up(
    pool: &PgPool,
    task_id: TaskId,
    job_id: JobId,
    said: Said<'_>,
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
            INSERT INTO jobs (id, task_id, job_no, status, max_attempts, last_job_seq, ask_count,
                              piece, model)
            SELECT $2, t.id, t.job_count, 'queued', $6, 1,
                   -- The task's questions so far count against its ask limit.
                   (SELECT COALESCE(max(ask_count), 0) FROM jobs WHERE task_id = $1),
                   latest.piece, latest.model
              FROM t LEFT JOIN LATERAL (SELECT piece, model FROM jobs WHERE task_id = $1
                                         ORDER BY job_no DESC LIMIT 1) latest ON true
            RETURNING id, task_id
        ), e AS (
            INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
            SELECT t.id, t.last_seq, j.id, 1, 'job_state', $7 FROM t JOIN j ON j.task_id = t.id
        )
        INSERT INTO comments (id, task_id, author, kind, body, job_id, message_id)
        SELECT $3, j.task_id, $4, 'instruction', $5, j.id, $8 FROM j
        RETURNING id, created_at
        "#,
        task_id.0,
        job_id.0,
        Uuid::now_v7(),
        said.author.as_str(),
        said.body,
        max_attempts,
        queued,
        said.message_id
    )
    .fetch_optional(pool)
    .await;
    let row = match row {
        Ok(row) => row,
        // Another job of the task became active meanwhile.
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(row.map(|r| {
        said.comment(
            (r.id, r.created_at),
            task_id,
            job_id,
            CommentKind::Instruction,
        )
    }))
}

/// Hand the interjections and additions a job never read to another job (a follow-up that
/// delivers them), in the caller's transaction.
pub async fn move_unread(conn: &mut PgConnection, from: JobId, to: JobId) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        WITH moved AS (
            UPDATE comments SET job_id = $2
             WHERE job_id = $1 AND kind IN ('interjection', 'addition') AND delivered_at IS NULL
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
    kind: CommentKind,
    said: Said<'_>,
) -> Result<Comment, DbError> {
    let row = sqlx::query!(
        r#"
        INSERT INTO comments (id, task_id, author, kind, body, job_id, message_id)
        VALUES ($1, $2, $3, $4, $5, $6, $7)
        RETURNING id, created_at
        "#,
        Uuid::now_v7(),
        task_id.0,
        said.author.as_str(),
        kind.as_str(),
        said.body,
        job_id.0,
        said.message_id
    )
    .fetch_one(conn)
    .await?;
    Ok(said.comment((row.id, row.created_at), task_id, job_id, kind))
}
