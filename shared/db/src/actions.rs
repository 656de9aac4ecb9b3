//! Required actions: the items a paused job waits for (SPEC §3.2, §6.2), the decisions people
//! make on them, task-scoped grants and MCP tokens.
//!
//! A worker records the items (idempotently, keyed by tool call) before it commits the pause,
//! so a worker that dies in between records the same items again. A decision locks the job
//! row first, so decisions on one job are serialized: the first decision on an item wins, a
//! second one sees it decided; the decision that answers the last pending item queues the job
//! again, in the same transaction, with its events.

use chrono::{DateTime, Utc};
use maestro_domain::{
    DecisionEvent, EventBody, JobId, JobStateChange, JobStatus, Owner, TaskId, WaitReason,
};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::DbError;
use crate::comments::Comment;
use crate::jobs::Fence;

/// An item to record for a job about to pause.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAction {
    /// Unique within the job: the tool call id, or `mcp:<server>:<attempt>`.
    pub key: String,
    pub kind: WaitReason,
    pub movement: String,
    pub source_seq: Option<i64>,
    pub detail: Value,
    /// The child task a `subtask` item waits for.
    pub subtask: Option<TaskId>,
}

/// An item as stored and shown by the API.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Action {
    pub id: Uuid,
    pub task_id: TaskId,
    pub job_id: JobId,
    pub kind: String,
    /// `pending`, `approved`, `denied`, `answered` or `resolved`.
    pub status: String,
    #[serde(skip)]
    pub key: String,
    pub movement: String,
    /// `seq` of the event that proposed it (the assistant message with the call).
    pub source_seq: Option<i64>,
    #[serde(flatten)]
    pub detail: Value,
    pub decision: Option<Value>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

impl Action {
    /// Set aside by a later pause of its job as left behind by a dead attempt (never a
    /// person's or a child's answer; recorded again, it is pending again).
    pub fn is_superseded(&self) -> bool {
        self.decision
            .as_ref()
            .is_some_and(|d| d["decision"] == "superseded")
    }

    /// Answered: by a person, or (a subtask) by its child.
    pub fn is_decided(&self) -> bool {
        self.status != "pending" && !self.is_superseded()
    }

    /// The summary carried by the pause event and the notification.
    pub fn summary(&self) -> Value {
        let mut summary = serde_json::json!({
            "id": self.id,
            "kind": self.kind,
            "movement": self.movement,
            "source_seq": self.source_seq,
        });
        if let (Some(summary), Some(detail)) = (summary.as_object_mut(), self.detail.as_object()) {
            summary.extend(detail.clone());
        }
        summary
    }
}

macro_rules! action_from {
    ($r:expr) => {{
        let r = $r;
        Action {
            id: r.id,
            task_id: TaskId(r.task_id),
            job_id: JobId(r.job_id),
            kind: r.kind,
            status: r.status,
            key: r.key,
            movement: r.movement,
            source_seq: r.source_seq,
            detail: r.detail,
            decision: r.decision,
            created_at: r.created_at,
            decided_at: r.decided_at,
        }
    }};
}

/// Record the items a held job is about to pause for (fenced: `None` when `fence` no longer
/// holds the job, and nothing is written). An item recorded before (same key) keeps its id
/// and state — except an MCP login, which is pending again (the job found no token again),
/// and a superseded item, which is pending again (the job came back to the call).
/// Any other item of the job still `pending` is stale (a running job waits for nothing; a
/// worker died between recording and pausing, and the job went another way): it is
/// `resolved` as superseded, so the new pause does not wait for it. Returns the items, in
/// the given order.
pub async fn record(
    pool: &PgPool,
    task_id: TaskId,
    fence: Fence,
    items: &[NewAction],
) -> Result<Option<Vec<Action>>, DbError> {
    let mut recorded = Vec::with_capacity(items.len());
    for item in items {
        let row = sqlx::query!(
            r#"
            INSERT INTO required_actions (id, task_id, job_id, key, kind, movement, source_seq, detail,
                                          subtask_id)
            SELECT $1, $2, $3, $4, $5, $6,
                   -- The message that proposed the call, unless the caller knows better.
                   COALESCE($7, (SELECT (payload ->> 'message_seq')::bigint FROM events
                                  WHERE job_id = $3 AND kind = 'tool_call'
                                    AND payload ->> 'call_id' = $9 LIMIT 1)),
                   $8, $11
             WHERE EXISTS (SELECT 1 FROM jobs
                            WHERE id = $3 AND attempt = $10 AND status = 'running')
            ON CONFLICT (job_id, key) DO UPDATE
               SET key = EXCLUDED.key,
                   status = CASE WHEN required_actions.kind = 'mcp_auth_required'
                                      OR required_actions.decision ->> 'decision' = 'superseded'
                                 THEN 'pending' ELSE required_actions.status END,
                   decision = CASE WHEN required_actions.kind = 'mcp_auth_required'
                                        OR required_actions.decision ->> 'decision' = 'superseded'
                                   THEN NULL ELSE required_actions.decision END,
                   decided_at = CASE WHEN required_actions.kind = 'mcp_auth_required'
                                          OR required_actions.decision ->> 'decision' = 'superseded'
                                     THEN NULL ELSE required_actions.decided_at END
            RETURNING id, task_id, job_id, key, kind, status, movement, source_seq, detail,
                      decision, created_at, decided_at
            "#,
            Uuid::now_v7(),
            task_id.0,
            fence.job_id.0,
            item.key,
            item.kind.as_str(),
            item.movement,
            item.source_seq,
            item.detail,
            item.key.rsplit('/').next().unwrap_or_default(),
            fence.attempt,
            item.subtask.map(|t| t.0),
        )
        .fetch_optional(pool)
        .await?;
        match row {
            Some(row) => recorded.push(action_from!(row)),
            None => return Ok(None),
        }
    }
    let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
    sqlx::query!(
        r#"
        UPDATE required_actions
           SET status = 'resolved', decided_at = now(),
               decision = jsonb_build_object('decision', 'superseded', 'by', 'worker')
         WHERE job_id = $1 AND status = 'pending' AND key <> ALL($2)
           AND EXISTS (SELECT 1 FROM jobs WHERE id = $1 AND attempt = $3 AND status = 'running')
        "#,
        fence.job_id.0,
        &keys as &[&str],
        fence.attempt,
    )
    .execute(pool)
    .await?;
    Ok(Some(recorded))
}

/// A task's items: the pending ones of its waiting job and of the waiting jobs of every task
/// below it (its subtasks, theirs...: a parent shows the whole set it waits for), or (`all`)
/// every item the task itself ever had, oldest first. (A cancelled job's undecided items stay
/// `pending` in the history; they are not waited for.)
pub async fn list(pool: &PgPool, task_id: TaskId, all: bool) -> Result<Vec<Action>, DbError> {
    let rows = sqlx::query!(
        r#"
        WITH RECURSIVE tree AS (
            SELECT id FROM tasks WHERE id = $1
            UNION ALL
            SELECT t.id FROM tasks t JOIN tree ON t.parent_task_id = tree.id WHERE NOT $2
        )
        SELECT a.id, a.task_id, a.job_id, a.key, a.kind, a.status, a.movement, a.source_seq,
               a.detail, a.decision, a.created_at, a.decided_at
          FROM required_actions a JOIN jobs j ON j.id = a.job_id
         WHERE a.task_id IN (SELECT id FROM tree)
           AND ($2 OR (a.status = 'pending'
                       AND j.status IN ('waiting_human', 'waiting_subtasks')))
         ORDER BY a.created_at, a.id
        "#,
        task_id.0,
        all
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| action_from!(r)).collect())
}

/// One item of a task.
pub async fn get(pool: &PgPool, task_id: TaskId, id: Uuid) -> Result<Option<Action>, DbError> {
    let row = sqlx::query!(
        r#"
        SELECT id, task_id, job_id, key, kind, status, movement, source_seq, detail, decision,
               created_at, decided_at
          FROM required_actions WHERE id = $1 AND task_id = $2
        "#,
        id,
        task_id.0
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| action_from!(r)))
}

/// Every item of a job (the worker reads the decisions when it resumes).
pub async fn of_job(pool: &PgPool, job_id: JobId) -> Result<Vec<Action>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT id, task_id, job_id, key, kind, status, movement, source_seq, detail, decision,
               created_at, decided_at
          FROM required_actions WHERE job_id = $1 ORDER BY created_at, id
        "#,
        job_id.0
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| action_from!(r)).collect())
}

/// A decision on one item.
#[derive(Debug, Clone)]
pub struct Decision<'a> {
    /// The item's new status: `approved`, `denied`, `answered` or `resolved`.
    pub status: &'a str,
    /// What the person did: `approve`, `deny`, `answer`, `resolve`.
    pub verb: &'a str,
    /// `once` or `task` (approvals of tools).
    pub scope: Option<&'a str>,
    pub note: Option<&'a str>,
    pub by: &'a Owner,
    /// Recorded with the decision (e.g. the arguments hash the reviewer saw).
    pub extra: Value,
    /// With scope `task`: the tool granted for the rest of the task.
    pub grant: Option<&'a str>,
}

/// What a decision came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// Recorded; `resumed` when it was the last pending item and the job is queued again
    /// (dispatch it with `attempt`, its claim count).
    Done {
        action: Box<Action>,
        resumed: bool,
        attempt: i32,
    },
    /// No such item of this task (or not of the kinds asked for).
    NotFound,
    /// The item was decided before (first decision wins).
    AlreadyDecided(String),
    /// The job no longer waits (cancelled, or in another state): nothing was written.
    NotWaiting(String),
}

/// Decide one item of a task's paused job; see [`Decided`].
pub async fn decide(
    pool: &PgPool,
    task_id: TaskId,
    action_id: Uuid,
    kinds: &[WaitReason],
    decision: &Decision<'_>,
) -> Result<Decided, DbError> {
    let kinds: Vec<String> = kinds.iter().map(|k| k.as_str().to_owned()).collect();
    let mut tx = pool.begin().await?;
    let Some(job) = sqlx::query!(
        r#"
        SELECT j.id, j.status, j.attempt FROM jobs j
         WHERE j.id = (SELECT job_id FROM required_actions
                        WHERE id = $1 AND task_id = $2 AND kind = ANY($3))
           FOR UPDATE
        "#,
        action_id,
        task_id.0,
        &kinds
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(Decided::NotFound);
    };
    let current = sqlx::query_scalar!(
        "SELECT status FROM required_actions WHERE id = $1",
        action_id
    )
    .fetch_one(&mut *tx)
    .await?;
    if current != "pending" {
        return Ok(Decided::AlreadyDecided(current));
    }
    if job.status != JobStatus::WaitingHuman.as_str() {
        return Ok(Decided::NotWaiting(job.status));
    }
    let mut recorded = serde_json::json!({
        "decision": decision.verb,
        "scope": decision.scope,
        "note": decision.note,
        "by": decision.by.as_str(),
    });
    if let (Some(r), Some(extra)) = (recorded.as_object_mut(), decision.extra.as_object()) {
        r.extend(extra.clone());
    }
    let row = sqlx::query!(
        r#"
        UPDATE required_actions SET status = $2, decision = $3, decided_at = now()
         WHERE id = $1
        RETURNING id, task_id, job_id, key, kind, status, movement, source_seq, detail,
                  decision, created_at, decided_at
        "#,
        action_id,
        decision.status,
        recorded
    )
    .fetch_one(&mut *tx)
    .await?;
    let action = action_from!(row);
    if let Some(tool) = decision.grant {
        sqlx::query!(
            r#"
            INSERT INTO task_grants (task_id, tool, granted_by) VALUES ($1, $2, $3)
            ON CONFLICT (task_id, tool) DO NOTHING
            "#,
            task_id.0,
            tool,
            decision.by.as_str()
        )
        .execute(&mut *tx)
        .await?;
    }
    // Subtask items are answered by child tasks, not people: once no person is waited for,
    // a job still waiting for children waits for them alone.
    let remaining = sqlx::query!(
        r#"
        SELECT count(*) FILTER (WHERE kind <> 'subtask') AS "people!",
               count(*) FILTER (WHERE kind = 'subtask') AS "children!"
          FROM required_actions WHERE job_id = $1 AND status = 'pending'
        "#,
        job.id
    )
    .fetch_one(&mut *tx)
    .await?;
    let resumed = remaining.people == 0 && remaining.children == 0;
    let kind = WaitReason::parse(&action.kind)
        .ok_or_else(|| DbError::Corrupt(format!("unknown action kind {:?}", action.kind)))?;
    let status = if resumed {
        JobStatus::Queued
    } else if remaining.people == 0 {
        JobStatus::WaitingSubtasks
    } else {
        JobStatus::WaitingHuman
    };
    let mut events = vec![EventBody::Decision(DecisionEvent {
        action_id,
        kind,
        decision: decision.verb.to_owned(),
        by: decision.by.to_string(),
        scope: decision.scope.map(str::to_owned),
        note: decision.note.map(str::to_owned),
        resumed,
        status: Some(status),
    })];
    let moved = match status {
        JobStatus::Queued => Some("every item the job waited for is decided"),
        JobStatus::WaitingSubtasks => {
            Some("every person's item is decided; subtasks are still running")
        }
        _ => None,
    };
    if let Some(reason) = moved {
        // Queued again: the next claim is a continuation, not another attempt at the work.
        sqlx::query!(
            r#"
            UPDATE jobs SET status = $2, wait_reason = NULL, updated_at = now(),
                            max_attempts = max_attempts + CASE WHEN $2 = 'queued' THEN 1 ELSE 0 END
             WHERE id = $1
            "#,
            job.id,
            status.as_str()
        )
        .execute(&mut *tx)
        .await?;
        let mut change = JobStateChange::new(status, job.attempt);
        change.reason = Some(reason.to_owned());
        events.push(EventBody::JobState(change));
    }
    push_events(&mut tx, JobId(job.id), &events).await?;
    tx.commit().await?;
    Ok(Decided::Done {
        action: Box::new(action),
        resumed,
        attempt: job.attempt,
    })
}

/// Answer the question a task's latest job asked (`waiting_human: ask`): the asking job
/// ends `succeeded` (it did its part), and a follow-up job `new_job` is queued that resumes in
/// the asking movement with the question and `answer`. `None` when the latest job does not
/// wait for an answer (nothing written).
pub async fn answer(
    pool: &PgPool,
    task_id: TaskId,
    by: &Owner,
    answer: &str,
    new_job: JobId,
    max_attempts: i32,
) -> Result<Option<Comment>, DbError> {
    let mut tx = pool.begin().await?;
    let Some(job) = sqlx::query!(
        r#"
        SELECT id, attempt, job_no, ask_count FROM jobs
         WHERE task_id = $1 AND status = 'waiting_human' AND wait_reason = 'ask'
           AND job_no = (SELECT max(job_no) FROM jobs WHERE task_id = $1)
           FOR UPDATE
        "#,
        task_id.0
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    let Some(ask) = sqlx::query!(
        r#"
        UPDATE required_actions
           SET status = 'answered', decided_at = now(),
               decision = jsonb_build_object('decision', 'answer', 'by', $2::text,
                                             'answered_by_job', $3::uuid)
         WHERE id = (SELECT id FROM required_actions
                      WHERE job_id = $1 AND kind = 'ask' AND status = 'pending'
                      ORDER BY created_at LIMIT 1)
        RETURNING id, movement, detail
        "#,
        job.id,
        by.as_str(),
        new_job.0
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        // Waiting for an answer without a question on record: fail closed.
        return Ok(None);
    };
    let question = ask.detail["question"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let result = format!(
        "asked the user; job {} continues with the answer",
        job.job_no + 1
    );
    sqlx::query!(
        r#"
        UPDATE jobs SET status = 'succeeded', wait_reason = NULL, result = $2,
                        finished_at = now(), updated_at = now()
         WHERE id = $1
        "#,
        job.id,
        result
    )
    .execute(&mut *tx)
    .await?;
    let mut done = JobStateChange::new(JobStatus::Succeeded, job.attempt);
    done.result = Some(result);
    let events = [
        EventBody::Decision(DecisionEvent {
            action_id: ask.id,
            kind: WaitReason::Ask,
            decision: "answer".to_owned(),
            by: by.to_string(),
            scope: None,
            note: None,
            resumed: true,
            status: Some(JobStatus::Succeeded),
        }),
        EventBody::JobState(done),
    ];
    push_events(&mut tx, JobId(job.id), &events).await?;
    let job_no = sqlx::query_scalar!(
        r#"
        UPDATE tasks SET job_count = job_count + 1, updated_at = now() WHERE id = $1
        RETURNING job_count
        "#,
        task_id.0
    )
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query!(
        r#"
        INSERT INTO jobs (id, task_id, job_no, status, max_attempts, resume_movement,
                          resume_question, ask_count)
        VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7)
        "#,
        new_job.0,
        task_id.0,
        job_no,
        max_attempts,
        ask.movement,
        question,
        job.ask_count + 1
    )
    .execute(&mut *tx)
    .await?;
    push_events(
        &mut tx,
        new_job,
        &[EventBody::JobState(JobStateChange::new(
            JobStatus::Queued,
            0,
        ))],
    )
    .await?;
    // Interjections the asking job never read go to the follow-up, which delivers them.
    sqlx::query!(
        r#"
        WITH moved AS (
            UPDATE comments SET job_id = $2
             WHERE job_id = $1 AND kind = 'interjection' AND delivered_at IS NULL
         RETURNING id
        )
        UPDATE jobs SET pending_interjections = (SELECT count(*) FROM moved) WHERE id = $2
        "#,
        job.id,
        new_job.0
    )
    .execute(&mut *tx)
    .await?;
    let comment = sqlx::query!(
        r#"
        INSERT INTO comments (id, task_id, author, kind, body, job_id)
        VALUES ($1, $2, $3, 'answer', $4, $5)
        RETURNING id, created_at
        "#,
        Uuid::now_v7(),
        task_id.0,
        by.as_str(),
        answer,
        new_job.0
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(Comment {
        id: comment.id,
        task_id,
        job_id: Some(new_job),
        author: by.to_string(),
        kind: "answer".to_owned(),
        body: answer.to_owned(),
        created_at: comment.created_at,
        delivered_at: None,
    }))
}

/// Append events to a job that no worker holds (a paused job), in the caller's transaction.
pub(crate) async fn push_events(
    conn: &mut PgConnection,
    job_id: JobId,
    events: &[EventBody],
) -> Result<(), DbError> {
    let kinds: Vec<String> = events
        .iter()
        .map(|e| e.kind().as_str().to_owned())
        .collect();
    let payloads: Vec<Value> = events.iter().map(EventBody::payload).collect();
    sqlx::query!(
        r#"
        WITH j AS (
            UPDATE jobs SET last_job_seq = last_job_seq + cardinality($2::text[])
             WHERE id = $1
         RETURNING id, task_id, last_job_seq - cardinality($2::text[]) AS base
        ), t AS (
            UPDATE tasks SET last_seq = last_seq + cardinality($2::text[]), updated_at = now()
              FROM j WHERE tasks.id = j.task_id
         RETURNING tasks.id, tasks.last_seq - cardinality($2::text[]) AS base
        )
        INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
        SELECT t.id, t.base + x.ord, j.id, j.base + x.ord, x.kind, x.payload
          FROM j, t, unnest($2::text[], $3::jsonb[]) WITH ORDINALITY AS x(kind, payload, ord)
        "#,
        job_id.0,
        &kinds,
        &payloads
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Store (or replace) `owner`'s token for the MCP server `server`.
pub async fn put_token(
    pool: &PgPool,
    owner: &Owner,
    server: &str,
    token: &str,
) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        INSERT INTO mcp_tokens (owner, server, token) VALUES ($1, $2, $3)
        ON CONFLICT (owner, server) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
        "#,
        owner.as_str(),
        server,
        token
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// `owner`'s tokens for `servers`: `(server, token)`.
pub async fn tokens(
    pool: &PgPool,
    owner: &str,
    servers: &[String],
) -> Result<Vec<(String, String)>, DbError> {
    let rows = sqlx::query!(
        "SELECT server, token FROM mcp_tokens WHERE owner = $1 AND server = ANY($2)",
        owner,
        servers
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.server, r.token)).collect())
}

/// The pending `mcp_auth_required` items for `server` of `owner`'s paused jobs: `(task, item)`.
pub async fn waiting_for_token(
    pool: &PgPool,
    owner: &Owner,
    server: &str,
) -> Result<Vec<(TaskId, Uuid)>, DbError> {
    let rows = sqlx::query!(
        r#"
        SELECT a.task_id, a.id FROM required_actions a
          JOIN tasks t ON t.id = a.task_id JOIN jobs j ON j.id = a.job_id
         WHERE t.owner = $1 AND a.kind = 'mcp_auth_required' AND a.status = 'pending'
           AND j.status = 'waiting_human' AND a.detail ->> 'server' = $2
        "#,
        owner.as_str(),
        server
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (TaskId(r.task_id), r.id))
        .collect())
}
