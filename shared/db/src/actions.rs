//! Required actions: the items a paused job waits for (SPEC §3.2, §6.2), as stored.
//!
//! A worker records the items (idempotently, keyed by the call) before it commits the pause,
//! so a worker that dies in between records the same items again. A decision is composed by
//! the caller inside its own transaction (`maestro_pauses`): it locks the job row first
//! ([`lock_job`]), so decisions on one job are serialized, stores the decision
//! ([`store_decision`]) and reads what is still pending ([`outstanding`]).

use chrono::{DateTime, Utc};
use maestro_domain::action::Outstanding;
use maestro_domain::{
    Action, ActionDetail, ActionId, Decision, JobId, JobStatus, NewAction, Owner, TaskId,
    WaitReason,
};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::DbError;
use crate::jobs::Fence;

/// A stored item, before it is read into an [`Action`].
struct Row {
    id: Uuid,
    task_id: Uuid,
    job_id: Uuid,
    key: String,
    kind: String,
    status: String,
    movement: String,
    source_seq: Option<i64>,
    detail: Value,
    decision: Option<Value>,
    created_at: DateTime<Utc>,
    decided_at: Option<DateTime<Utc>>,
}

impl TryFrom<Row> for Action {
    type Error = DbError;
    fn try_from(r: Row) -> Result<Self, DbError> {
        let kind = crate::parse::wait_reason(&r.kind)?;
        let decision = r
            .decision
            .map(serde_json::from_value::<Decision>)
            .transpose()
            .map_err(|e| DbError::corrupt(format!("decision of item {}: {e}", r.id)))?;
        Ok(Action {
            id: ActionId(r.id),
            task_id: TaskId(r.task_id),
            job_id: JobId(r.job_id),
            status: crate::parse::action_status(&r.status)?,
            key: r.key,
            movement: r.movement,
            source_seq: r.source_seq,
            detail: ActionDetail::parse(kind, r.detail).map_err(DbError::corrupt)?,
            decision,
            created_at: r.created_at,
            decided_at: r.decided_at,
        })
    }
}

fn actions(rows: Vec<Row>) -> Result<Vec<Action>, DbError> {
    rows.into_iter().map(Action::try_from).collect()
}

/// Record the items a held job is about to pause for (fenced: `None` when `fence` no longer
/// holds the job, and nothing is written). An item recorded before (same key) keeps its id
/// and state — except an MCP login, which is pending again (the job found no token again),
/// and a superseded item, which is pending again (the job came back to the call).
/// Any other item of the job still `pending` is stale (a running job waits for nothing; a
/// worker died between recording and pausing, and the job went another way): it becomes
/// `superseded`, so the new pause does not wait for it. Returns the items, in the given order.
pub async fn record(
    pool: &PgPool,
    task_id: TaskId,
    fence: Fence,
    items: &[NewAction],
) -> Result<Option<Vec<Action>>, DbError> {
    let mut recorded = Vec::with_capacity(items.len());
    for item in items {
        let row = sqlx::query_as!(
            Row,
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
                                      OR required_actions.status = 'superseded'
                                 THEN 'pending' ELSE required_actions.status END,
                   decision = CASE WHEN required_actions.kind = 'mcp_auth_required'
                                        OR required_actions.status = 'superseded'
                                   THEN NULL ELSE required_actions.decision END,
                   decided_at = CASE WHEN required_actions.kind = 'mcp_auth_required'
                                          OR required_actions.status = 'superseded'
                                     THEN NULL ELSE required_actions.decided_at END
            RETURNING id, task_id, job_id, key, kind, status, movement, source_seq, detail,
                      decision, created_at, decided_at
            "#,
            Uuid::now_v7(),
            task_id.0,
            fence.job_id.0,
            item.key,
            item.kind().as_str(),
            item.movement,
            item.source_seq,
            item.detail.to_value(),
            item.key.rsplit('/').next().unwrap_or_default(),
            fence.attempt,
            item.detail.subtask().map(|t| t.0),
        )
        .fetch_optional(pool)
        .await?;
        match row {
            Some(row) => recorded.push(Action::try_from(row)?),
            None => return Ok(None),
        }
    }
    let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
    sqlx::query!(
        r#"
        UPDATE required_actions
           SET status = 'superseded', decided_at = now(), decision = NULL
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
    let rows = sqlx::query_as!(
        Row,
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
    actions(rows)
}

/// One item of a task.
pub async fn get(pool: &PgPool, task_id: TaskId, id: ActionId) -> Result<Option<Action>, DbError> {
    let row = sqlx::query_as!(
        Row,
        r#"
        SELECT id, task_id, job_id, key, kind, status, movement, source_seq, detail, decision,
               created_at, decided_at
          FROM required_actions WHERE id = $1 AND task_id = $2
        "#,
        id.0,
        task_id.0
    )
    .fetch_optional(pool)
    .await?;
    row.map(Action::try_from).transpose()
}

/// Every item of a job (the worker reads the decisions when it resumes).
pub async fn of_job(pool: &PgPool, job_id: JobId) -> Result<Vec<Action>, DbError> {
    let rows = sqlx::query_as!(
        Row,
        r#"
        SELECT id, task_id, job_id, key, kind, status, movement, source_seq, detail, decision,
               created_at, decided_at
          FROM required_actions WHERE job_id = $1 ORDER BY created_at, id
        "#,
        job_id.0
    )
    .fetch_all(pool)
    .await?;
    actions(rows)
}

/// The job an item belongs to, locked for a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedJob {
    pub id: JobId,
    pub status: JobStatus,
    /// Its claim count (the dispatch of a resumed job carries it).
    pub attempt: i32,
    /// The workers that run it.
    pub profile: String,
}

/// Lock the job row of item `action_id` of `task_id`, if the item is one of `kinds`.
pub async fn lock_job(
    conn: &mut PgConnection,
    task_id: TaskId,
    action_id: ActionId,
    kinds: &[WaitReason],
) -> Result<Option<LockedJob>, DbError> {
    let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
    let row = sqlx::query!(
        r#"
        SELECT j.id, j.status, j.attempt, j.profile FROM jobs j
         WHERE j.id = (SELECT job_id FROM required_actions
                        WHERE id = $1 AND task_id = $2 AND kind = ANY($3))
           FOR UPDATE
        "#,
        action_id.0,
        task_id.0,
        &kinds as &[&str]
    )
    .fetch_optional(conn)
    .await?;
    row.map(|r| {
        Ok(LockedJob {
            id: JobId(r.id),
            status: crate::parse::status(&r.status)?,
            attempt: r.attempt,
            profile: r.profile,
        })
    })
    .transpose()
}

/// Read one item (after its job row is locked, so no decision can come in between).
pub async fn load(conn: &mut PgConnection, id: ActionId) -> Result<Action, DbError> {
    let row = sqlx::query_as!(
        Row,
        r#"
        SELECT id, task_id, job_id, key, kind, status, movement, source_seq, detail, decision,
               created_at, decided_at
          FROM required_actions WHERE id = $1
        "#,
        id.0
    )
    .fetch_one(conn)
    .await?;
    Action::try_from(row)
}

/// Store `decision` on an item: its status follows the verdict. Returns the item as it is now.
pub async fn store_decision(
    conn: &mut PgConnection,
    id: ActionId,
    decision: &Decision,
) -> Result<Action, DbError> {
    let stored = serde_json::to_value(decision).map_err(DbError::corrupt)?;
    let row = sqlx::query_as!(
        Row,
        r#"
        UPDATE required_actions SET status = $2, decision = $3, decided_at = now()
         WHERE id = $1
        RETURNING id, task_id, job_id, key, kind, status, movement, source_seq, detail,
                  decision, created_at, decided_at
        "#,
        id.0,
        decision.verdict.status().as_str(),
        stored
    )
    .fetch_one(conn)
    .await?;
    Action::try_from(row)
}

/// What a job still waits for: its pending items, by who answers them.
pub async fn outstanding(conn: &mut PgConnection, job_id: JobId) -> Result<Outstanding, DbError> {
    let row = sqlx::query!(
        r#"
        SELECT count(*) FILTER (WHERE kind <> 'subtask') AS "people!",
               count(*) FILTER (WHERE kind = 'subtask') AS "children!"
          FROM required_actions WHERE job_id = $1 AND status = 'pending'
        "#,
        job_id.0
    )
    .fetch_one(conn)
    .await?;
    Ok(Outstanding {
        people: usize::try_from(row.people).unwrap_or_default(),
        children: usize::try_from(row.children).unwrap_or_default(),
    })
}

/// The oldest pending question of a job (its `ask` item), if it has one.
pub async fn pending_question(
    conn: &mut PgConnection,
    job_id: JobId,
) -> Result<Option<ActionId>, DbError> {
    let id = sqlx::query_scalar!(
        r#"
        SELECT id FROM required_actions
         WHERE job_id = $1 AND kind = 'ask' AND status = 'pending'
         ORDER BY created_at LIMIT 1
        "#,
        job_id.0
    )
    .fetch_optional(conn)
    .await?;
    Ok(id.map(ActionId))
}

/// The pending `mcp_auth_required` items for `server` of `owner`'s paused jobs: `(task, item)`.
pub async fn waiting_for_token(
    pool: &PgPool,
    owner: &Owner,
    server: &str,
) -> Result<Vec<(TaskId, ActionId)>, DbError> {
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
        .map(|r| (TaskId(r.task_id), ActionId(r.id)))
        .collect())
}

/// Tell `owner`'s pending `mcp_auth_required` items for `server` why the last login failed
/// (`login_error` in their detail), so the person sees it where they look.
pub async fn note_login_error(
    pool: &PgPool,
    owner: &str,
    server: &str,
    error: &str,
) -> Result<u64, DbError> {
    let done = sqlx::query!(
        r#"
        UPDATE required_actions a SET detail = a.detail || jsonb_build_object('login_error', $3::text)
          FROM tasks t
         WHERE t.id = a.task_id AND t.owner = $1 AND a.kind = 'mcp_auth_required'
           AND a.status = 'pending' AND a.detail ->> 'server' = $2
        "#,
        owner,
        server,
        error
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
