//! Jobs: fenced appends of events with an optional state change, lease extension, the
//! scans the scheduler uses, and the writes a decision or an answer composes. The claim is in
//! [`crate::claims`].
//!
//! Fencing: every claim increments `attempt`; a worker writes only with the attempt it
//! claimed and only while the job is `running`. A worker that lost its lease (and so its
//! attempt) to another cannot write anything for the job any more.

use std::time::Duration;

use chrono::{DateTime, Utc};
use maestro_domain::storable;
use maestro_domain::topic::Direct;
use maestro_domain::{EventBody, EventKind, JobId, JobStatus, TaskId, WaitReason};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use crate::DbError;

/// The holder of a job: only writes made with the claimed attempt are accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub job_id: JobId,
    pub attempt: i32,
}

/// A state change to commit together with events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub to: JobStatus,
    pub wait_reason: Option<WaitReason>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub next_retry_at: Option<DateTime<Utc>>,
    /// Give the job one more claim: the next claim is not a new attempt at the work (a
    /// worker handing the job back as it shuts down).
    pub refund_attempt: bool,
    /// A space's task's failed job: the branch its changes stay on.
    pub branch: Option<String>,
}

impl Transition {
    pub fn to(to: JobStatus) -> Self {
        Self {
            to,
            wait_reason: None,
            result: None,
            error: None,
            next_retry_at: None,
            refund_attempt: false,
            branch: None,
        }
    }
}

/// The job is no longer held under this fence (another worker claimed it, or it was
/// cancelled): the caller must stop working on it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("job {0} is no longer held by this attempt")]
pub struct Fenced(pub JobId);

/// Append events (and optionally change the job's state) in one statement, fenced by the
/// claim. Returns the task-wide seq of the first appended event. A `tool_call` event's
/// `message_seq` is filled in here: the seq of the `message` event before it in `events`.
pub async fn append(
    pool: &PgPool,
    fence: Fence,
    events: &[EventBody],
    transition: Option<&Transition>,
) -> Result<Result<i64, Fenced>, DbError> {
    append_delivering(pool, fence, events, transition, &[]).await
}

/// [`append`], also marking the interjections `delivered` (whose user messages are among
/// `events`) as delivered. A job cannot become `succeeded` while an interjection is pending:
/// then nothing is written and `Err(Fenced)` comes back, with the job still held (check with
/// [`held`]).
pub async fn append_delivering(
    pool: &PgPool,
    fence: Fence,
    events: &[EventBody],
    transition: Option<&Transition>,
    delivered: &[uuid::Uuid],
) -> Result<Result<i64, Fenced>, DbError> {
    let appended =
        append_publishing(pool, fence, events, transition, delivered, Publish::ByRelay).await?;
    Ok(appended.map(|a| a.first_seq))
}

/// Who publishes the appended events: the relay (woken by the writer) or the writer itself
/// right after the commit, the relay taking over only if it does not say it did (migration
/// `0021`, docs/architecture.md#the-outbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    ByRelay,
    Directly,
}

/// What an append committed.
#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    /// The task-wide seq of the first appended event.
    pub first_seq: i64,
    /// With [`Publish::Directly`]: the events, then the notices the statement wrote, for the
    /// writer to publish.
    pub direct: Vec<Direct>,
    /// The statement left rows for the relay to publish (a signal, a webhook delivery; with
    /// [`Publish::ByRelay`], everything): the writer wakes it.
    pub relayed: bool,
}

/// What the turn's statement returns.
struct TurnRow {
    base: i64,
    job_base: i32,
    task_id: uuid::Uuid,
    traceparent: Option<String>,
    now: chrono::DateTime<chrono::Utc>,
    a2a_push: bool,
    /// The notices the statement wrote (`[{id, kind, payload}]`).
    notices: Value,
    /// It wrote webhook deliveries for the relay to publish.
    deliveries: bool,
}

/// [`append_delivering`], saying who publishes the events.
pub async fn append_publishing(
    pool: &PgPool,
    fence: Fence,
    events: &[EventBody],
    transition: Option<&Transition>,
    delivered: &[uuid::Uuid],
    publish: Publish,
) -> Result<Result<Appended, Fenced>, DbError> {
    let kinds: Vec<String> = events
        .iter()
        .map(|e| e.kind().as_str().to_owned())
        .collect();
    let payloads: Vec<serde_json::Value> = events.iter().map(EventBody::payload).collect();
    let to = transition.map(|t| t.to.as_str());
    // The model's result or a tool's error text may carry a NUL (see `storable`).
    let result = transition.and_then(|t| t.result.as_deref().map(storable::text));
    let error = transition.and_then(|t| t.error.as_deref().map(storable::text));
    // A writer publishing its events itself writes their notices too, and publishes them
    // (migration `0026`); otherwise the `events_to_notices` trigger writes them for the relay.
    let notices = publish == Publish::Directly && events.iter().any(EventBody::has_notice);
    let writes_notices = if notices { "on" } else { "" };
    // Four statements: with or without marking delivered comments, and with or without the
    // notices' CTEs. A data-modifying CTE is set up at every execution (its table and indexes
    // opened and locked) even when nothing passes its condition, and almost every turn
    // delivers nothing and ends nothing
    // (docs/performance.md#2026-12-04-the-turn-without-the-comment-update).
    macro_rules! turn {
        (@statement $deliver:literal, $notices:literal, $returned:literal) => {
            sqlx::query_as!(
                TurnRow,
                r#"
                WITH j AS (
                    UPDATE jobs
                       SET last_job_seq = last_job_seq + cardinality($3::text[]),
                           status = COALESCE($5, status),
                           wait_reason = CASE WHEN $5::text IS NULL THEN wait_reason ELSE $6 END,
                           result = COALESCE($7, result),
                           error = COALESCE($8, error),
                           branch = COALESCE($12, branch),
                           next_retry_at = CASE WHEN $5::text IS NULL THEN next_retry_at ELSE $9 END,
                           lease_expires_at = CASE WHEN $5::text IS NULL THEN lease_expires_at END,
                           max_attempts = max_attempts + CASE WHEN $10 THEN 1 ELSE 0 END,
                           pending_interjections = pending_interjections - cardinality($11::uuid[]),
                           finished_at = CASE WHEN $5 IN ('succeeded', 'failed', 'cancelled') THEN now()
                                              ELSE finished_at END,
                           -- A turn that changes no state moves no indexed column: a HOT update.
                           updated_at = CASE WHEN $5::text IS NULL THEN updated_at ELSE now() END
                     WHERE id = $1 AND attempt = $2 AND status = 'running'
                       AND ($5::text IS DISTINCT FROM 'succeeded'
                            OR pending_interjections = cardinality($11::uuid[]))
                 RETURNING id, task_id, traceparent, last_job_seq - cardinality($3::text[]) AS base
                ), d AS (
                    -- Read by the outbox and notice triggers as each event is inserted
                    -- (migrations 0024, 0026): the event insert reads it, so it is set first.
                    SELECT set_config('maestro.writes_range_row', $13, true) AS grace,
                           set_config('maestro.writes_notices', $14, true) AS notices
                "# + $deliver + r#"
                ), t AS (
                    -- `updated_at` is when the task's state last changed (docs/api.md).
                    UPDATE tasks SET last_seq = last_seq + cardinality($3::text[]),
                                     updated_at = CASE WHEN $5::text IS NULL THEN updated_at ELSE now() END
                      FROM j WHERE tasks.id = j.task_id
                 RETURNING tasks.id, tasks.last_seq - cardinality($3::text[]) AS base,
                           tasks.owner, tasks.schedule_id
                ), e AS (
                    INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
                    SELECT t.id, t.base + x.ord, j.id, j.base + x.ord, x.kind,
                           -- A tool call links to the assistant message before it in the batch.
                           CASE WHEN x.kind = 'tool_call' THEN x.payload || jsonb_build_object(
                                    'message_seq', COALESCE(
                                        t.base + (SELECT max(m.ord)
                                                    FROM unnest($3::text[]) WITH ORDINALITY AS m(kind, ord)
                                                   WHERE m.kind = 'message' AND m.ord < x.ord),
                                        (x.payload ->> 'message_seq')::bigint))
                                ELSE x.payload END
                      FROM j, t, d,
                           unnest($3::text[], $4::jsonb[]) WITH ORDINALITY AS x(kind, payload, ord)
                ), range AS (
                    -- Published directly: the statement's events are one range
                    -- (`outbox::Written`), and it stands for their notices too.
                    INSERT INTO outbox (topic, task_id, msg_id, payload, relay_after)
                    SELECT 'events', t.id, 'events:' || t.id || ':' || (t.base + 1),
                           jsonb_build_object('first', t.base + 1,
                                              'last', t.base + cardinality($3::text[])),
                           now() + d.grace::interval
                      FROM t, d WHERE d.grace <> '' AND cardinality($3::text[]) > 0
                "# + $notices + r#"
                )
                SELECT t.base AS "base!", j.base AS "job_base!", t.id AS "task_id!", j.traceparent,
                       now() AS "now!",
                       d.grace <> '' AND EXISTS (SELECT 1 FROM a2a_push_configs c
                                                  WHERE c.task_id = t.id) AS "a2a_push!",
                "# + $returned + r#"
                  FROM t, j, d
                "#,
                fence.job_id.0,
                fence.attempt,
                &kinds,
                &payloads,
                to,
                transition.and_then(|t| t.wait_reason).map(|w| w.as_str()),
                result.as_deref(),
                error.as_deref(),
                transition.and_then(|t| t.next_retry_at),
                transition.is_some_and(|t| t.refund_attempt),
                delivered,
                transition.and_then(|t| t.branch.as_deref()),
                publish.grace(),
                writes_notices,
            )
            .fetch_optional(pool)
            .await?
        };
        // Marks the delivered interjections, through `comments_undelivered` (a generic plan of
        // `id = ANY($11)` alone scans every comment of every task).
        (deliver, $notices:ident) => {
            turn!(@notices r#"
            ), c AS (
                UPDATE comments SET delivered_at = now()
                  FROM j WHERE comments.job_id = j.id AND comments.id = ANY($11)
                           AND comments.kind IN ('interjection', 'addition')
                           AND comments.delivered_at IS NULL
            "#, $notices)
        };
        (none, $notices:ident) => {
            turn!(@notices "", $notices)
        };
        // The notices of the statement's notice-worthy events (`notice_kind`), as the trigger
        // writes them, with one pending delivery per webhook subscription of the owner that
        // wants the type and its outbox row (`publish_notice`).
        (@notices $deliver:literal, notices) => {
            turn!(@statement $deliver, r#"
            ), n AS (
                INSERT INTO notifications (id, owner, kind, task_id, job_id, event_seq, payload)
                SELECT x.id, t.owner, x.notice, t.id, j.id, t.base + x.ord,
                       notice_payload(x.notice, x.kind, x.payload, x.id, t.id, j.id,
                                      t.base + x.ord, t.owner, t.schedule_id, now())
                  FROM j, t, (SELECT uuid_v7() AS id, notice_kind(u.kind, u.payload) AS notice,
                                     u.kind, u.payload, u.ord
                                FROM unnest($3::text[], $4::jsonb[]) WITH ORDINALITY
                                     AS u(kind, payload, ord)
                               WHERE notice_kind(u.kind, u.payload) IS NOT NULL) x
                ON CONFLICT (task_id, event_seq) DO NOTHING
             RETURNING id, kind, payload
            ), wd AS (
                INSERT INTO webhook_deliveries (id, subscription_id, notification_id, status)
                SELECT gen_random_uuid(), s.id, n.id, 'pending'
                  FROM n, t, webhook_subscriptions s
                 WHERE s.owner = t.owner AND s.deleted_at IS NULL AND s.disabled_at IS NULL
                   AND n.kind = ANY (s.event_types)
             RETURNING id
            ), wo AS (
                INSERT INTO outbox (topic, kind, msg_id, payload, traceparent)
                SELECT 'webhook_delivery', NULL, 'delivery:' || wd.id,
                       jsonb_build_object('delivery_id', wd.id), j.traceparent
                  FROM wd, j
            "#, r#"
                       (SELECT COALESCE(jsonb_agg(jsonb_build_object('id', n.id, 'kind', n.kind,
                                                                     'payload', n.payload)), '[]')
                          FROM n) AS "notices!",
                       EXISTS (SELECT 1 FROM wd) AS "deliveries!"
            "#)
        };
        (@notices $deliver:literal, none) => {
            turn!(@statement $deliver, "", r#"'[]'::jsonb AS "notices!", false AS "deliveries!""#)
        };
    }
    let row = match (delivered.is_empty(), notices) {
        (true, false) => turn!(none, none),
        (true, true) => turn!(none, notices),
        (false, false) => turn!(deliver, none),
        (false, true) => turn!(deliver, notices),
    };
    let Some(r) = row else {
        return Ok(Err(Fenced(fence.job_id)));
    };
    let (direct, relayed) = match publish {
        Publish::ByRelay => (Vec::new(), true),
        Publish::Directly => {
            let written = crate::outbox::Written {
                task_id: TaskId(r.task_id),
                job_id: fence.job_id,
                created_at: r.now,
                traceparent: r.traceparent,
                a2a_push: r.a2a_push,
            };
            let stored = as_stored(events, payloads, r.base + 1);
            let first = (r.base + 1, r.job_base + 1);
            let mut direct = written.events(first, events.iter().map(EventBody::kind).zip(stored));
            direct.extend(written.notices(r.notices)?);
            let signals = events.iter().any(EventBody::has_signal);
            (direct, signals || r.deliveries)
        }
    };
    Ok(Ok(Appended {
        first_seq: r.base + 1,
        direct,
        relayed,
    }))
}

/// The payloads as the append statement stores them, its events starting at `first_seq`: a
/// `tool_call` links to the message before it in the batch (`message_seq`), else keeps its
/// own (null when it has none).
fn as_stored(events: &[EventBody], payloads: Vec<Value>, first_seq: i64) -> Vec<Value> {
    let mut last_message = None;
    events
        .iter()
        .zip(payloads)
        .enumerate()
        .map(|(i, (event, mut payload))| {
            match event.kind() {
                EventKind::Message => last_message = Some(first_seq + i as i64),
                EventKind::ToolCall => {
                    let own = payload.get("message_seq").and_then(Value::as_i64);
                    if let Some(fields) = payload.as_object_mut() {
                        fields.insert("message_seq".to_owned(), last_message.or(own).into());
                    }
                }
                _ => {}
            }
            payload
        })
        .collect()
}

impl Publish {
    /// The `maestro.writes_range_row` setting the outbox trigger reads: the relay's grace
    /// before it takes over, or empty (publish at once).
    pub(crate) fn grace(self) -> &'static str {
        match self {
            Publish::ByRelay => "",
            Publish::Directly => crate::outbox::DIRECT_GRACE,
        }
    }
}

/// Push the lease of a held job forward. `Err(Fenced)` when it is no longer held.
pub async fn extend_lease(
    pool: &PgPool,
    fence: Fence,
    lease: Duration,
) -> Result<Result<(), Fenced>, DbError> {
    let done = sqlx::query!(
        r#"
        UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $3), updated_at = now()
         WHERE id = $1 AND attempt = $2 AND status = 'running'
        "#,
        fence.job_id.0,
        fence.attempt,
        lease.as_secs_f64(),
    )
    .execute(pool)
    .await?;
    Ok(if done.rows_affected() == 1 {
        Ok(())
    } else {
        Err(Fenced(fence.job_id))
    })
}

/// A job to dispatch (again): its claim count is the dispatch's `attempt`, its profile says to
/// which workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToDispatch {
    pub job_id: JobId,
    pub task_id: TaskId,
    pub attempt: i32,
    pub profile: String,
}

/// A job the scheduler should dispatch again, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stalled {
    pub job: ToDispatch,
    /// `queued_undelivered`, `retry_due` or `lease_expired`.
    pub reason: String,
}

/// Jobs that should be running but have not been picked up for `grace`: `queued` ones whose
/// dispatch may never have reached the stream, `retry` ones whose time has come, and
/// `running` ones whose lease expired. Each gets a `redispatch` event and is marked as seen
/// (its `updated_at` moves, so the next scan skips it for another `grace`), in one statement.
pub async fn take_stalled(
    pool: &PgPool,
    grace: Duration,
    limit: i64,
) -> Result<Vec<Stalled>, DbError> {
    let rows = sqlx::query!(
        r#"
        WITH s AS (
            SELECT id,
                   CASE status WHEN 'queued' THEN 'queued_undelivered'
                               WHEN 'retry' THEN 'retry_due'
                               ELSE 'lease_expired' END AS reason
              FROM jobs
             -- A queued job's dispatch may still be waiting in a backlog: back off (grace,
             -- then 2x, 4x, ... at most 64x) rather than re-dispatch it every grace period.
             WHERE (status = 'queued' AND updated_at < now()
                        - make_interval(secs => $1 * power(2, LEAST(redispatches, 6))))
                OR (status = 'retry' AND next_retry_at < now() - make_interval(secs => $1)
                    AND updated_at < now() - make_interval(secs => $1))
                OR (status = 'running' AND lease_expires_at < now() - make_interval(secs => $1)
                    AND updated_at < now() - make_interval(secs => $1))
             ORDER BY updated_at
             LIMIT $2
             FOR UPDATE SKIP LOCKED
        ), j AS (
            UPDATE jobs SET updated_at = now(), last_job_seq = last_job_seq + 1,
                            redispatches = redispatches + 1
              FROM s WHERE jobs.id = s.id
         RETURNING jobs.id, jobs.task_id, jobs.attempt, jobs.profile, jobs.last_job_seq, s.reason
        ), t AS (
            UPDATE tasks SET last_seq = last_seq + 1, updated_at = now()
              FROM j WHERE tasks.id = j.task_id
         RETURNING tasks.id, tasks.last_seq
        ), e AS (
            INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
            SELECT t.id, t.last_seq, j.id, j.last_job_seq, 'redispatch',
                   jsonb_build_object('reason', j.reason, 'attempt', j.attempt)
              FROM j JOIN t ON t.id = j.task_id
        )
        SELECT j.id AS "id!", j.task_id AS "task_id!", j.attempt AS "attempt!",
               j.profile AS "profile!", j.reason AS "reason!"
          FROM j
        "#,
        grace.as_secs_f64(),
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Stalled {
            job: ToDispatch {
                job_id: JobId(r.id),
                task_id: TaskId(r.task_id),
                attempt: r.attempt,
                profile: r.profile,
            },
            reason: r.reason,
        })
        .collect())
}

/// Whether job `job_id` belongs to task `task_id`.
pub async fn belongs_to(pool: &PgPool, job_id: JobId, task_id: TaskId) -> Result<bool, DbError> {
    let row = sqlx::query!(
        "SELECT 1 AS one FROM jobs WHERE id = $1 AND task_id = $2",
        job_id.0,
        task_id.0
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.is_some())
}

/// Whether the job is still running under this fence.
pub async fn held(pool: &PgPool, fence: Fence) -> Result<bool, DbError> {
    let row = sqlx::query!(
        "SELECT 1 AS one FROM jobs WHERE id = $1 AND attempt = $2 AND status = 'running'",
        fence.job_id.0,
        fence.attempt
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.is_some())
}

/// The latest job of a task: its id, status and wait reason.
pub async fn latest(
    pool: &PgPool,
    task_id: TaskId,
) -> Result<Option<(JobId, JobStatus, Option<WaitReason>)>, DbError> {
    let row = sqlx::query!(
        "SELECT id, status, wait_reason FROM jobs WHERE task_id = $1 ORDER BY job_no DESC LIMIT 1",
        task_id.0
    )
    .fetch_optional(pool)
    .await?;
    row.map(|r| {
        let wait_reason = r.wait_reason.as_deref().map(crate::parse::wait_reason);
        Ok((
            JobId(r.id),
            crate::parse::status(&r.status)?,
            wait_reason.transpose()?,
        ))
    })
    .transpose()
}

/// Move a paused job on after a decision: to `status` (queued again, or waiting for its
/// subtasks alone), without a wait reason. Queued again, it gets one more claim: the next
/// claim is a continuation, not another attempt at the work.
pub async fn move_on(
    conn: &mut PgConnection,
    job_id: JobId,
    status: JobStatus,
) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        UPDATE jobs SET status = $2, wait_reason = NULL, updated_at = now(),
                        max_attempts = max_attempts + CASE WHEN $2 = 'queued' THEN 1 ELSE 0 END
         WHERE id = $1
        "#,
        job_id.0,
        status.as_str()
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A task's latest job while it waits for the answer to its question, locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asking {
    pub id: JobId,
    pub attempt: i32,
    pub job_no: i32,
    /// Questions asked in the task before this one.
    pub ask_count: i32,
}

/// Lock the task's latest job if it waits for an answer (`waiting_human: ask`).
pub async fn lock_asking(
    conn: &mut PgConnection,
    task_id: TaskId,
) -> Result<Option<Asking>, DbError> {
    let row = sqlx::query!(
        r#"
        SELECT id, attempt, job_no, ask_count FROM jobs
         WHERE task_id = $1 AND status = 'waiting_human' AND wait_reason = 'ask'
           AND job_no = (SELECT max(job_no) FROM jobs WHERE task_id = $1)
           FOR UPDATE
        "#,
        task_id.0
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| Asking {
        id: JobId(r.id),
        attempt: r.attempt,
        job_no: r.job_no,
        ask_count: r.ask_count,
    }))
}

/// End a job no worker holds (an answered question's job) with `status` and `result`.
pub async fn settle(
    conn: &mut PgConnection,
    job_id: JobId,
    status: JobStatus,
    result: &str,
) -> Result<(), DbError> {
    let result = storable::text(result);
    sqlx::query!(
        r#"
        UPDATE jobs SET status = $2, wait_reason = NULL, result = $3,
                        finished_at = now(), updated_at = now()
         WHERE id = $1
        "#,
        job_id.0,
        status.as_str(),
        result.as_ref()
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A job to add to a task after its first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextJob<'a> {
    pub id: JobId,
    pub task_id: TaskId,
    pub max_attempts: i32,
    /// Where it starts and what it resumes with (an answered question).
    pub resume_movement: Option<&'a str>,
    pub resume_question: Option<&'a str>,
    /// Questions asked in the task before it.
    pub ask_count: i32,
}

/// Where a space task's job's changes are: the commit of `main` they were merged in, or the
/// branch they are kept on.
pub async fn record_commit(
    pool: &PgPool,
    job_id: JobId,
    commit: Option<&str>,
    branch: Option<&str>,
) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE jobs SET commit = $2, branch = $3 WHERE id = $1",
        job_id.0,
        commit,
        branch
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Add a `queued` job to the task (the next `job_no`, running the piece and model of the
/// latest job), in the caller's transaction; its
/// `queued` event is the caller's ([`crate::events::push`]). Returns its `job_no` and the
/// worker profile it goes to (its task's).
pub async fn insert_next(
    conn: &mut PgConnection,
    job: &NextJob<'_>,
) -> Result<(i32, String), DbError> {
    let row = sqlx::query!(
        r#"
        WITH t AS (
            UPDATE tasks SET job_count = job_count + 1, updated_at = now() WHERE id = $2
         RETURNING job_count
        )
        INSERT INTO jobs (id, task_id, job_no, status, max_attempts, resume_movement,
                          resume_question, ask_count, piece, model)
        SELECT $1, $2, t.job_count, 'queued', $3, $4, $5, $6, latest.piece, latest.model
          FROM t LEFT JOIN LATERAL (SELECT piece, model FROM jobs WHERE task_id = $2
                                     ORDER BY job_no DESC LIMIT 1) latest ON true
        RETURNING job_no, profile
        "#,
        job.id.0,
        job.task_id.0,
        job.max_attempts,
        job.resume_movement,
        job.resume_question,
        job.ask_count
    )
    .fetch_one(conn)
    .await?;
    Ok((row.job_no, row.profile))
}
