//! Events their writer publishes itself (docs/architecture.md#the-outbox): a worker's claim and
//! turns leave one outbox row per statement that waits for the writer instead of a row per
//! event for the relay, a turn's notices are the writer's too, everything else the same
//! statements write is the relay's at once, the relay deletes what the writer says it
//! published without publishing it again, and takes over what the writer never published,
//! rendering the same events and notices the writer would.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use maestro_db::claims;
use maestro_db::jobs::{self, Fence, Publish, Transition};
use maestro_domain::notification::NotificationType;
use maestro_domain::topic::Topic;
use maestro_domain::{
    DecisionEvent, Event, EventBody, EventKind, JobStateChange, JobStatus, Message, MessageEvent,
    TaskId, ToolCallEvent, WaitReason,
};
use maestro_messaging::{Bus, Subjects};
use maestro_testkit::TestDb;
use maestro_testkit::{Stack, StackOptions};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(60);

/// Claim `job_id` as the worker does (publishing its events itself); the claim.
async fn claim(pool: &sqlx::PgPool, job_id: maestro_domain::JobId) -> claims::Claimed {
    let mut claimed = claims::claim_many_traced(
        pool,
        &[job_id],
        &[String::new()],
        "w1",
        LEASE,
        &[],
        Publish::Directly,
    )
    .await
    .expect("claim");
    claimed.pop().expect("claimed")
}

/// Outbox rows of `task_id`'s events (one per event, or one per range of a statement's
/// events): (msg_id, waits for its writer).
async fn rows(pool: &sqlx::PgPool, task_id: TaskId) -> Vec<(String, bool)> {
    sqlx::query_as(
        "SELECT msg_id, relay_after IS NOT NULL FROM outbox
          WHERE task_id = $1 AND topic IN ('event', 'events') ORDER BY id",
    )
    .bind(task_id.0)
    .fetch_all(pool)
    .await
    .expect("outbox")
}

/// Rows of any topic the relay publishes at once.
async fn relayed_now(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox WHERE relay_after IS NULL")
        .fetch_one(pool)
        .await
        .expect("outbox")
}

/// What the relay would publish for the range row `key` once its grace is over (the row is
/// made overdue and locked in a transaction that is rolled back).
async fn overdue(pool: &sqlx::PgPool, key: &str) -> Vec<maestro_db::outbox::OutboxRow> {
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("UPDATE outbox SET relay_after = now() - interval '1 second' WHERE msg_id = $1")
        .bind(key)
        .execute(&mut *tx)
        .await
        .expect("overdue");
    let rows = maestro_db::outbox::lock_overdue(&mut tx, 100)
        .await
        .expect("lock");
    tx.rollback().await.expect("rollback");
    rows
}

/// Append one event, no state change, under `fence`.
async fn append_one(
    pool: &sqlx::PgPool,
    fence: Fence,
    body: &EventBody,
    publish: Publish,
) -> jobs::Appended {
    jobs::append_publishing(pool, fence, std::slice::from_ref(body), None, &[], publish)
        .await
        .expect("append")
        .expect("held")
}

/// The notice recorded for the event `seq` of `task_id`: (id, kind, payload).
async fn notice_of(
    pool: &sqlx::PgPool,
    task_id: TaskId,
    seq: i64,
) -> Option<(uuid::Uuid, String, serde_json::Value)> {
    sqlx::query_as(
        "SELECT id, kind, payload FROM notifications WHERE task_id = $1 AND event_seq = $2",
    )
    .bind(task_id.0)
    .bind(seq)
    .fetch_optional(pool)
    .await
    .expect("notifications")
}

fn decision(status: JobStatus) -> EventBody {
    EventBody::Decision(DecisionEvent {
        action_id: uuid::Uuid::now_v7(),
        kind: WaitReason::Ask,
        decision: "answer".into(),
        by: "alice".into(),
        scope: None,
        note: None,
        resumed: false,
        status: Some(status),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_publishing_itself_publishes_its_notices_and_leaves_only_signals_to_the_relay() {
    let db = TestDb::create().await.expect("database");
    let pool = &db.pool;
    let (task_id, job_id) = db.queued_task("alice", "direct").await.expect("task");
    sqlx::query("DELETE FROM outbox")
        .execute(pool)
        .await
        .expect("clear");

    let claimed = claim(pool, job_id).await;
    let running = claimed
        .running
        .clone()
        .expect("the running event to publish");
    let event: Event = serde_json::from_str(&running.payload).expect("an event");
    assert_eq!((event.task_id, event.seq), (task_id, claimed.claim_seq));
    assert_eq!(event.kind, EventKind::JobState);
    assert_eq!(
        running.msg_id,
        format!("event:{task_id}:{}", claimed.claim_seq)
    );
    let key = maestro_domain::topic::range_key(task_id, claimed.claim_seq);
    assert_eq!(running.outbox_key.as_ref(), Some(&key));
    assert_eq!(rows(pool, task_id).await, vec![(key, true)]);
    assert_eq!(relayed_now(pool).await, 0);

    // Each kind of event a job writes: its own row waits for the writer, and so does its
    // notice, which the statement writes and returns for the writer to publish (migration
    // 0026); what else it writes (a signal) is the relay's, exactly when the worker expects
    // (`Appended::relayed`, which decides whether it wakes the relay).
    let fence = Fence {
        job_id,
        attempt: claimed.attempt,
    };
    let (other_task, other_job) = db
        .queued_task("alice", "by the trigger")
        .await
        .expect("task");
    let other = Fence {
        job_id: other_job,
        attempt: claim(pool, other_job).await.attempt,
    };
    let mut bodies: Vec<EventBody> = JobStatus::ALL
        .iter()
        .map(|s| EventBody::JobState(JobStateChange::new(*s, claimed.attempt)))
        .collect();
    bodies.push(decision(JobStatus::Queued));
    bodies.push(EventBody::Message(MessageEvent::plain(Message::assistant(
        Some("hello".into()),
        Vec::new(),
    ))));
    for body in bodies {
        let before = relayed_now(pool).await;
        let appended = append_one(pool, fence, &body, Publish::Directly).await;
        assert_eq!(
            appended.direct.len(),
            1 + usize::from(body.has_notice()),
            "{body:?}"
        );
        let direct = &appended.direct[0];
        let key = maestro_domain::topic::range_key(task_id, appended.first_seq);
        assert_eq!(direct.outbox_key.as_ref(), Some(&key));
        let event: Event = serde_json::from_str(&direct.payload).expect("an event");
        assert_eq!(event.seq, appended.first_seq);
        assert_eq!(event.body().expect("body"), body, "the event as stored");
        let added = relayed_now(pool).await - before;
        assert_eq!(
            (added > 0, appended.relayed),
            (body.has_signal(), body.has_signal()),
            "{body:?}: {added} rows for the relay"
        );
        let recorded = notice_of(pool, task_id, appended.first_seq).await;
        assert_eq!(recorded.is_some(), body.has_notice(), "{body:?}");
        let Some((id, kind, payload)) = recorded else {
            continue;
        };
        // The notice the writer publishes is the one recorded, and the one the relay would
        // publish for the range had the writer not.
        let notice = &appended.direct[1];
        assert_eq!(notice.msg_id, format!("notification:{id}"));
        assert_eq!(
            notice.topic,
            Topic::Notification(NotificationType::parse(&kind).expect("a notice type"))
        );
        assert_eq!(notice.outbox_key, None);
        let published: serde_json::Value = serde_json::from_str(&notice.payload).expect("JSON");
        assert_eq!(published, payload);
        let relayed = overdue(pool, &key).await;
        let relayed_notice = relayed
            .iter()
            .find(|r| r.msg_id == notice.msg_id)
            .expect("the relay's takeover publishes the notice");
        assert_eq!(
            (relayed_notice.topic, &relayed_notice.payload),
            (notice.topic, &payload)
        );
        assert_eq!(relayed.len(), 2, "the event and its notice");
        // The same notice as the trigger writes for every other writer: the same body by
        // the relay's way (on a task of its own) differs only in its ids, seq and time.
        let by_relay = append_one(pool, other, &body, Publish::ByRelay).await;
        let (_, trigger_kind, triggered) = notice_of(pool, other_task, by_relay.first_seq)
            .await
            .expect("the trigger's notice");
        assert_eq!(trigger_kind, kind);
        let same = |mut v: serde_json::Value| {
            v["timestamp"] = json!(null);
            for volatile in ["notification_id", "event_seq", "task_id", "job_id"] {
                v["data"][volatile] = json!(null);
            }
            v
        };
        assert_eq!(same(triggered), same(payload), "{body:?}");
        assert!(
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM outbox WHERE topic = 'notification' AND msg_id LIKE '%' || $1"
            )
            .bind(id.to_string())
            .fetch_one(pool)
            .await
            .expect("outbox")
                == 0,
            "no outbox row of its own for the writer's notice"
        );
    }
    assert!(
        rows(pool, task_id).await.iter().all(|(_, waits)| *waits),
        "every event's own row waits for its writer"
    );

    // What the writer publishes is what the relay would publish for the statement's range row
    // had the writer not (its events, read back from `events`), a tool call's link to its
    // message (filled in by the statement) included. One row stands for the three events.
    let call = |message_seq| {
        EventBody::ToolCall(ToolCallEvent {
            call_id: "c1".into(),
            name: "list_files".into(),
            arguments: "{}".into(),
            message_seq,
        })
    };
    let turn = [
        call(7),
        EventBody::Message(MessageEvent::plain(Message::assistant(
            Some("calling".into()),
            Vec::new(),
        ))),
        call(0),
    ];
    let appended = jobs::append_publishing(pool, fence, &turn, None, &[], Publish::Directly)
        .await
        .expect("append")
        .expect("held");
    let key = maestro_domain::topic::range_key(task_id, appended.first_seq);
    let keys: Vec<_> = appended
        .direct
        .iter()
        .map(|d| d.outbox_key.clone())
        .collect();
    assert_eq!(keys, vec![Some(key.clone()), None, None]);
    let relayed = overdue(pool, &key).await;
    assert_eq!(relayed.len(), appended.direct.len());
    for (direct, relayed) in appended.direct.iter().zip(&relayed) {
        assert_eq!(direct.msg_id, relayed.msg_id);
        assert_eq!(direct.topic, relayed.topic);
        assert_eq!(direct.a2a_push, relayed.a2a_push);
        let relayed: Event = serde_json::from_value(relayed.payload.clone()).expect("event");
        let published: Event = serde_json::from_str(&direct.payload).expect("published event");
        assert_eq!(published, relayed, "{}", direct.msg_id);
    }
    let linked: Event = serde_json::from_str(&appended.direct[2].payload).expect("event");
    assert_eq!(linked.payload["message_seq"], appended.first_seq + 1);
    let own: Event = serde_json::from_str(&appended.direct[0].payload).expect("event");
    assert_eq!(own.payload["message_seq"], 7);

    // The relay's way, as every other writer does it: nothing waits.
    let appended = jobs::append_publishing(
        pool,
        fence,
        &[EventBody::Message(MessageEvent::plain(Message::assistant(
            Some("by the relay".into()),
            Vec::new(),
        )))],
        Some(&Transition::to(JobStatus::Succeeded)),
        &[],
        Publish::ByRelay,
    )
    .await
    .expect("append")
    .expect("held");
    assert!(appended.direct.is_empty());
    let last = rows(pool, task_id).await;
    assert_eq!(
        last.last(),
        Some(&(format!("event:{task_id}:{}", appended.first_seq), false))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_created_by_a_writer_publishing_itself_leaves_one_range_row() {
    let db = TestDb::create().await.expect("database");
    let pool = &db.pool;
    let (task_id, job_id, direct) = db
        .queued_task_publishing("alice", "created", Publish::Directly)
        .await
        .expect("task");
    let key = maestro_domain::topic::range_key(task_id, 1);
    assert_eq!(direct.len(), 1);
    assert_eq!(direct[0].outbox_key.as_ref(), Some(&key));
    assert_eq!(rows(pool, task_id).await, vec![(key.clone(), true)]);
    assert_eq!(relayed_now(pool).await, 0);
    let relayed = overdue(pool, &key).await;
    assert_eq!(relayed.len(), 1);
    assert_eq!(relayed[0].msg_id, direct[0].msg_id);
    let relayed: Event = serde_json::from_value(relayed[0].payload.clone()).expect("event");
    let published: Event = serde_json::from_str(&direct[0].payload).expect("published event");
    assert_eq!(published, relayed);
    assert_eq!(
        (published.kind, published.job_id),
        (EventKind::JobState, job_id)
    );

    // Created the relay's way: the event's own row, at once.
    let (other, other_job) = db.queued_task("alice", "relayed").await.expect("task");
    assert_eq!(
        rows(pool, other).await,
        vec![(format!("event:{other}:1"), false)]
    );

    // A statement of a binary from before migration 0024 (a rolling upgrade) says it publishes
    // directly by the old setting and writes no range row: its event still gets the relay's row.
    sqlx::query(
        "WITH d AS (SELECT set_config('maestro.publish_directly', '2 seconds', true) AS grace)
         INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
         SELECT $1, 2, $2, 2, 'message', '{}' FROM d",
    )
    .bind(other.0)
    .bind(other_job.0)
    .execute(pool)
    .await
    .expect("an old writer's event");
    assert_eq!(
        rows(pool, other).await,
        vec![
            (format!("event:{other}:1"), false),
            (format!("event:{other}:2"), false)
        ]
    );
}

async fn bus(stack: &Stack) -> Bus {
    let nats = async_nats::connect(&stack.nats.url).await.expect("NATS");
    Bus::new(nats, Subjects::new(&stack.prefix).expect("prefix"))
}

/// The ids of every message on the task's event subjects from now on (core NATS: repeats
/// included).
async fn heard(bus: &Bus, task_id: TaskId) -> Arc<Mutex<Vec<String>>> {
    let mut messages = bus
        .nats
        .subscribe(bus.subjects.events_of_task(task_id))
        .await
        .expect("subscribe");
    bus.nats.flush().await.expect("flush");
    let ids = Arc::new(Mutex::new(Vec::new()));
    let seen = ids.clone();
    tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            let id = message
                .headers
                .as_ref()
                .and_then(|h| h.get("Nats-Msg-Id"))
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default();
            seen.lock().expect("lock").push(id);
        }
    });
    ids
}

/// A stack whose worker is the test.
async fn without_worker() -> Stack {
    let mut stack = Stack::up(StackOptions::new(json!({"scenarios": []}))).await;
    stack.kill("worker").await;
    stack
}

/// A queued task of alice's, its events' rows already published by the relay.
async fn queued(stack: &Stack, instruction: &str) -> (TaskId, maestro_domain::JobId) {
    let (task, job) = stack
        .db
        .queued_task("alice", instruction)
        .await
        .expect("task");
    wait_outbox_empty(&stack.db.pool, task).await;
    (task, job)
}

async fn wait_outbox_empty(pool: &sqlx::PgPool, task_id: TaskId) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !rows(pool, task_id).await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the rows are gone: {:?}",
            rows(pool, task_id).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_forgets_what_the_writer_published_and_publishes_what_it_did_not() {
    let stack = without_worker().await;
    let bus = bus(&stack).await;
    let pool = stack.db.pool.clone();
    let (published, _) = queued(&stack, "published").await;
    let (abandoned, abandoned_job) = queued(&stack, "abandoned").await;

    // Published by its writer: on the bus once (the relay does not repeat it), then gone.
    let job = sqlx::query_scalar::<_, uuid::Uuid>("SELECT id FROM jobs WHERE task_id = $1")
        .bind(published.0)
        .fetch_one(&pool)
        .await
        .expect("job");
    let listening = heard(&bus, published).await;
    let running = claim(&pool, maestro_domain::JobId(job))
        .await
        .running
        .expect("running");
    let msg_id = running.msg_id.clone();
    bus.publish_direct(vec![running]).await;
    wait_outbox_empty(&pool, published).await;
    // Past the relay's grace and its next poll: had it kept the row, it would have sent it.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        *listening.lock().expect("lock"),
        vec![msg_id],
        "published once, by its writer"
    );

    // Never published (its writer died after the commit): the relay publishes it once its
    // grace is over.
    let listening = heard(&bus, abandoned).await;
    let running = claim(&pool, abandoned_job).await.running.expect("running");
    wait_outbox_empty(&pool, abandoned).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while listening.lock().expect("lock").is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        *listening.lock().expect("lock"),
        vec![running.msg_id],
        "published by the relay, once"
    );

    // A turn that ends the job, never published: the relay publishes its events and its
    // notice, which has no outbox row of its own.
    let mut notices = bus
        .nats
        .subscribe(bus.subjects.notify(NotificationType::TaskSucceeded))
        .await
        .expect("subscribe");
    bus.nats.flush().await.expect("flush");
    let fence = Fence {
        job_id: abandoned_job,
        attempt: 1,
    };
    let end = EventBody::JobState(JobStateChange::new(JobStatus::Succeeded, 1));
    let appended = jobs::append_publishing(
        &pool,
        fence,
        &[end],
        Some(&Transition::to(JobStatus::Succeeded)),
        &[],
        Publish::Directly,
    )
    .await
    .expect("append")
    .expect("held");
    let notice = appended.direct[1].clone();
    wait_outbox_empty(&pool, abandoned).await;
    let heard = tokio::time::timeout(Duration::from_secs(10), notices.next())
        .await
        .expect("the notice in time")
        .expect("a notice");
    let id = heard
        .headers
        .as_ref()
        .and_then(|h| h.get("Nats-Msg-Id"))
        .map(|v| v.as_str().to_owned());
    assert_eq!(id.as_deref(), Some(notice.msg_id.as_str()));
    assert_eq!(heard.subject.as_str(), bus.subjects.of_topic(notice.topic));
    let payload: serde_json::Value = serde_json::from_slice(&heard.payload).expect("JSON");
    assert_eq!(payload["type"], "task.succeeded");
    assert_eq!(payload["data"]["task_id"], json!(abandoned.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_stops_tells_the_relay_what_it_published_before_it_goes() {
    let stack = without_worker().await;
    let listener = bus(&stack).await;
    let pool = stack.db.pool.clone();
    let (task, job) = queued(&stack, "stopping").await;
    let mut told = listener
        .nats
        .subscribe(listener.subjects.outbox_published())
        .await
        .expect("subscribe");
    listener.nats.flush().await.expect("flush");
    let running = claim(&pool, job).await.running.expect("running");
    let key = running
        .outbox_key
        .clone()
        .expect("a row that waits for its writer");

    // A writer process of its own (runtime, connection and bus) that publishes the claim's
    // events, finishes as a stopping service does, and is gone at once: nothing of it runs
    // on after `finish` returns, so the relay hears of the row only if `finish` told it.
    let url = stack.nats.url.clone();
    let prefix = stack.prefix.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let nats = async_nats::connect(&url).await.expect("NATS");
            let writer = Bus::new(nats, Subjects::new(&prefix).expect("prefix"));
            writer.publish_direct(vec![running]).await;
            writer.finish().await;
        });
    })
    .join()
    .expect("the writer");

    let message = tokio::time::timeout(Duration::from_secs(10), told.next())
        .await
        .expect("told in time")
        .expect("a message");
    let keys = String::from_utf8(message.payload.to_vec()).expect("UTF-8");
    assert_eq!(keys.lines().collect::<Vec<_>>(), [key.as_str()]);
    wait_outbox_empty(&pool, task).await;
}
