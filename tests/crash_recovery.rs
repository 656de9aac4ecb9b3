//! Durability of the job path: a worker process killed in the middle of a job loses nothing
//! (JetStream redelivers the dispatch after `ack_wait`, a second worker claims the job once
//! the first one's lease expired, and resumes from the last committed step, so no event is
//! duplicated and no committed LLM turn is asked again); a turn's results wait at most
//! `WORKER_RESULTS_COMMIT_WAIT_MS` to be committed with the next reply, and a worker killed
//! inside that wait costs exactly that turn asked again; and a job committed but never
//! dispatched is dispatched by the scheduler.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use maestro_domain::{Event, EventKind, JobStatus, TaskId};
use maestro_testkit::{Service, Stack, StackOptions, TaskExt, of_kind};
use serde_json::{Value, json};

fn slow_scenario() -> Value {
    json!({"scenarios": [{
        "name": "slow-second-turn",
        "match": "crash test",
        "turns": [
            {
                "delay_ms": 300,
                "text": "Writing the file.",
                "tool_calls": [{"name": "write_file", "arguments": {"path": "out.txt", "content": "once"}}]
            },
            {
                // About four seconds of streaming: the worker is killed in the middle of it.
                "text": "Now I am thinking about it for a long while before finishing up.",
                "chunk_chars": 1,
                "chunk_delay_ms": 60,
                "tool_calls": [{"name": "complete", "arguments": {"result": "done after a crash"}}]
            }
        ]
    }]})
}

/// Kill `worker-a` and start `worker-b`, which takes the job over once the lease runs out: it
/// succeeds on its second claim. The task's events.
async fn replace_the_worker(stack: &mut Stack, task_id: TaskId) -> Vec<Event> {
    stack.kill("worker-a").await;
    stack.add(Service::Worker, "worker-b").await;
    let over = [JobStatus::Succeeded, JobStatus::Failed];
    let done = stack
        .wait_within(task_id, &over, Duration::from_secs(40))
        .await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.job().attempt, 2, "claimed twice: once per worker");
    stack.events(task_id).await
}

/// A stack whose one worker, `worker-a`, is in the middle of a task's second turn (the slow
/// scenario's long stream), deliveries redelivered after 1.5 s, with `env`; and that task.
async fn mid_second_turn(env: &[(&str, &str)]) -> (Stack, TaskId) {
    let mut options = StackOptions::new(slow_scenario())
        .env("JOB_ACK_WAIT_MS", "1500")
        .worker_named("worker-a");
    for (key, value) in env {
        options = options.env(key, value);
    }
    let stack = Stack::up(options).await;
    let task_id = stack
        .new_task(&json!({"instruction": "crash test: write out.txt"}))
        .await;
    // The second turn is streaming: a text delta after the tool result.
    stack.wait_for_next_turn(task_id).await;
    (stack, task_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_job_is_replaced_and_the_job_completes_without_duplicates() {
    let (mut stack, task_id) = mid_second_turn(&[]).await;

    let events = replace_the_worker(&mut stack, task_id).await;
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "no seq duplicated or skipped"
    );
    let job_seqs: Vec<i64> = events.iter().map(|e| i64::from(e.job_seq)).collect();
    assert_eq!(job_seqs, seqs, "one job: job_seq matches seq");

    let states: Vec<(String, Option<String>)> = of_kind(&events, EventKind::JobState)
        .map(|e| {
            let p = &e.payload;
            (
                p["status"].as_str().unwrap_or_default().to_owned(),
                p["worker_id"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("queued".to_owned(), None),
            ("running".to_owned(), Some("worker-a".to_owned())),
            ("running".to_owned(), Some("worker-b".to_owned())),
            ("succeeded".to_owned(), None),
        ],
        "the second worker took over the first one's job"
    );

    let mut per_kind: HashMap<String, usize> = HashMap::new();
    for e in &events {
        let key = match e.kind {
            EventKind::Message => {
                format!("message:{}", e.payload["role"].as_str().unwrap_or_default())
            }
            kind => kind.as_str().to_owned(),
        };
        *per_kind.entry(key).or_default() += 1;
    }
    assert_eq!(
        per_kind.get("message:system"),
        Some(&1),
        "one system message: {per_kind:?}"
    );
    assert_eq!(
        per_kind.get("message:user"),
        Some(&1),
        "one user message: {per_kind:?}"
    );
    assert_eq!(
        per_kind.get("message:assistant"),
        Some(&2),
        "one message per LLM turn: {per_kind:?}"
    );
    assert_eq!(
        per_kind.get("tool_call"),
        Some(&2),
        "write_file and complete, once each: {per_kind:?}"
    );
    assert_eq!(
        per_kind.get("tool_result"),
        Some(&2),
        "one result per call: {per_kind:?}"
    );

    let turns = stack.llm.turns().await.expect("LLM requests");
    assert_eq!(
        turns.iter().filter(|t| **t == 0).count(),
        1,
        "the committed first turn was not asked again: {turns:?}"
    );
    assert_eq!(
        turns.iter().filter(|t| **t == 1).count(),
        2,
        "the interrupted turn was asked again: {turns:?}"
    );
    let file = std::fs::read_to_string(stack.workspace(task_id).join("out.txt")).expect("file");
    assert_eq!(file, "once");
}

/// A reference job: `list_files` (which only reads), then `complete`; the second reply comes
/// after `second_delay_ms`, streaming `chunk_delay_ms` apart.
/// A job whose last attempt a crash spent fails at its next claim, before any work: the
/// `failed` state is committed and published, its `task.failed` notice reaches the inbox and
/// the bus once, and the LLM is asked nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_attempts_a_crash_spent_fails_at_its_next_claim() {
    use futures::StreamExt as _;
    use maestro_domain::notification::NotificationType;

    let (mut stack, task_id) = mid_second_turn(&[("JOB_MAX_ATTEMPTS", "1")]).await;

    let subjects = maestro_messaging::Subjects::new(&stack.prefix).expect("the prefix");
    let nats = stack.nats.client().await.expect("connect to NATS");
    let mut states = nats
        .subscribe(subjects.event(task_id, EventKind::JobState))
        .await
        .expect("subscribe");
    let mut notices = nats
        .subscribe(subjects.notify(NotificationType::TaskFailed))
        .await
        .expect("subscribe");
    nats.flush().await.expect("flush");

    stack.kill("worker-a").await;
    stack.add(Service::Worker, "worker-b").await;
    let done = stack
        .wait_within(task_id, &[JobStatus::Failed], Duration::from_secs(40))
        .await;
    let job = done.job();
    assert_eq!(job.attempt, 2, "{done:?}");
    assert_eq!(
        job.error.as_deref(),
        Some("gave up after 1 attempts"),
        "{done:?}"
    );
    let events = stack.events(task_id).await;
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    let last = events.last().expect("events");
    assert_eq!(last.payload["status"], "failed", "{last:?}");

    // On the bus: the state, and its notice.
    let within = Duration::from_secs(10);
    let failed = loop {
        let message = tokio::time::timeout(within, states.next())
            .await
            .expect("the failed state on the bus")
            .expect("a message");
        let event: Value = serde_json::from_slice(&message.payload).expect("JSON");
        if event["payload"]["status"] == "failed" {
            break event;
        }
    };
    assert_eq!(failed["seq"], last.seq, "{failed}");
    let notice = tokio::time::timeout(within, notices.next())
        .await
        .expect("the task.failed notice on the bus")
        .expect("a message");
    let notice: Value = serde_json::from_slice(&notice.payload).expect("JSON");
    assert_eq!(notice["data"]["task_id"], task_id.to_string(), "{notice}");
    assert_eq!(notice["data"]["event_seq"], last.seq, "{notice}");

    // Once: nothing left for the relay to publish again after its grace.
    let rows = || {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox WHERE task_id = $1")
            .bind(task_id.0)
            .fetch_one(&stack.db.pool)
    };
    let deadline = tokio::time::Instant::now() + within;
    while rows().await.expect("outbox rows") > 0 {
        assert!(tokio::time::Instant::now() < deadline, "outbox rows left");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        tokio::time::timeout(Duration::ZERO, notices.next())
            .await
            .is_err(),
        "the notice was published once"
    );
    let inbox: Value = stack
        .call(
            reqwest::Method::GET,
            &format!("/api/local/inbox?task_id={task_id}&type=task.failed"),
            None::<&Value>,
        )
        .await
        .expect("the inbox");
    assert_eq!(inbox["items"].as_array().map(Vec::len), Some(1), "{inbox}");

    let turns = stack.llm.turns().await.expect("LLM requests");
    assert_eq!(turns, [0, 1], "worker-b asked nothing: {turns:?}");
}

fn list_then_complete(second_delay_ms: u64, chunk_delay_ms: u64) -> Value {
    json!({"scenarios": [{
        "name": "list-then-complete",
        "match": "commit wait",
        "turns": [
            // Gives a test time to open its stream before the first delta.
            {"delay_ms": 400, "text": "Looking.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {
                "delay_ms": second_delay_ms,
                "text": "Done looking around, and that is all for now.",
                "chunk_chars": 1,
                "chunk_delay_ms": chunk_delay_ms,
                "tool_calls": [{"name": "complete", "arguments": {"result": "listed"}}]
            }
        ]
    }]})
}

/// The transaction time of the event of `kind` (and `status`, for job states) in `events`.
fn committed_at(events: &[Event], kind: EventKind, status: Option<&str>) -> DateTime<Utc> {
    of_kind(events, kind)
        .find(|e| status.is_none_or(|s| e.payload["status"] == s))
        .unwrap_or_else(|| panic!("no {kind:?} {status:?} event: {events:#?}"))
        .created_at
}

/// Run the reference job with `commit_wait_ms` and a second reply after `second_delay_ms`:
/// whether the tool's result was committed by the statement that ended the job.
async fn results_committed_with_the_end(commit_wait_ms: &str, second_delay_ms: u64) -> bool {
    let options = StackOptions::new(list_then_complete(second_delay_ms, 0))
        .env("WORKER_RESULTS_COMMIT_WAIT_MS", commit_wait_ms);
    let stack = Stack::up(options).await;
    let task_id = stack
        .new_task(&json!({"instruction": "commit wait: list the files"}))
        .await;
    let mut stream = stack.stream(task_id, None).await;
    let items = stream
        .read_until(Duration::from_secs(20), |item| {
            item.event == "job_state" && item.data["payload"]["status"] == "succeeded"
        })
        .await;
    let done = stack.wait_over(task_id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.job().result.as_deref(), Some("listed"));
    let events = stack.events(task_id).await;
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    let result = committed_at(&events, EventKind::ToolResult, None);
    let end = committed_at(&events, EventKind::JobState, Some("succeeded"));
    // What streamed live: the first reply's deltas, and the second's unless it came within
    // the wait (then it came whole, with its commit).
    let streamed: String = items
        .iter()
        .filter(|i| i.event == "delta" && i.data["type"] == "text")
        .map(|i| i.data["text"].as_str().unwrap_or_default())
        .collect();
    let second = "Done looking around, and that is all for now.";
    let expected = match result == end {
        true => "Looking.".to_owned(),
        false => format!("Looking.{second}"),
    };
    assert_eq!(streamed, expected, "the deltas streamed");
    if result != end {
        // Committed while the second request ran, once the wait was over: long before its
        // reply came.
        let gap = (end - result).to_std().expect("the result first");
        let wait = Duration::from_millis(commit_wait_ms.parse().expect("a number"));
        let reply = Duration::from_millis(second_delay_ms);
        assert!(
            gap + wait + Duration::from_millis(250) >= reply,
            "committed {gap:?} before the end, the wait {wait:?}, the reply took {reply:?}"
        );
    }
    result == end
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_within_the_commit_wait_is_committed_with_the_results_it_saw() {
    // A wait far longer than the instant reply: one statement carries both turns.
    assert!(results_committed_with_the_end("60000", 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_committed_once_the_commit_wait_is_over() {
    // The reply takes 1.5 s; the results are committed 200 ms after its request went out.
    assert!(!results_committed_with_the_end("200", 1500).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_commit_wait_results_are_committed_before_the_reply_is_read() {
    assert!(!results_committed_with_the_end("0", 0).await);
}

/// What the commit wait costs: a worker killed while the results wait for the next reply
/// leaves them uncommitted, so the job's next claim asks that turn again and runs its
/// (read-only) call again — and still nothing is duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_inside_the_commit_wait_asks_that_turn_again() {
    // The second reply streams for about four seconds; the results wait for all of it.
    let options = StackOptions::new(list_then_complete(0, 80))
        .env("WORKER_RESULTS_COMMIT_WAIT_MS", "60000")
        .env("JOB_ACK_WAIT_MS", "1500")
        .worker_named("worker-a");
    let mut stack = Stack::up(options).await;
    let task_id = stack
        .new_task(&json!({"instruction": "commit wait: list the files"}))
        .await;
    // The second request is in: its reply streams.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while stack.llm.requests().await.expect("requests").len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no second request");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = stack.events(task_id).await;
    assert_eq!(
        of_kind(&before, EventKind::ToolResult).count(),
        0,
        "the results wait for the reply: {before:#?}"
    );

    let events = replace_the_worker(&mut stack, task_id).await;
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    let count = |kind| of_kind(&events, kind).count();
    assert_eq!(
        count(EventKind::ToolCall),
        2,
        "list_files and complete, once each"
    );
    assert_eq!(count(EventKind::ToolResult), 2, "one result per call");
    let assistant = of_kind(&events, EventKind::Message)
        .filter(|e| e.payload["role"] == "assistant")
        .count();
    assert_eq!(assistant, 2, "one message per LLM turn");

    let turns = stack.llm.turns().await.expect("LLM requests");
    assert_eq!(
        turns,
        [0, 1, 0, 1],
        "the uncommitted first turn was asked again, then the second"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_committed_but_never_dispatched_is_dispatched_by_the_scheduler() {
    let scenario = json!({"scenarios": [{
        "name": "finish",
        "turns": [{"tool_calls": [{"name": "complete", "arguments": {"result": "finished"}}]}]
    }]});
    let options = StackOptions::new(scenario).env("REDISPATCH_GRACE_MS", "500");
    let stack = Stack::up(options).await;

    // Commit a task and its job the way the gateway does, but never publish the dispatch:
    // what a gateway crash between commit and publish leaves behind.
    let (task_id, _) = stack
        .db
        .queued_task("alice", "finish at once")
        .await
        .expect("insert");

    // The scheduler dispatched the job and a worker ran it.
    let done = stack
        .wait_within(task_id, &[JobStatus::Succeeded], Duration::from_secs(20))
        .await;
    assert_eq!(done.job().result.as_deref(), Some("finished"));
    let events = stack.events(task_id).await;
    let redispatch = of_kind(&events, EventKind::Redispatch)
        .next()
        .expect("the re-dispatch is an event");
    assert_eq!(redispatch.payload["reason"], "queued_undelivered");
    assert_eq!(
        redispatch.seq, 2,
        "recorded between the queued and running states"
    );
    assert_eq!(done.job().attempt, 1, "dispatched once more, claimed once");
}

/// A job that stays queued (no worker takes it: a backlog, not a lost dispatch) is re-dispatched
/// with backoff — grace, then 2×, 4×, … — not every grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_left_queued_is_redispatched_with_backoff() {
    let scenario = json!({"scenarios": [{"name": "any", "turns": [
        {"tool_calls": [{"name": "complete", "arguments": {"result": "x"}}]}
    ]}]});
    let mut options = StackOptions::new(scenario)
        .env("REDISPATCH_GRACE_MS", "300")
        .env("REDISPATCH_INTERVAL_MS", "50");
    options.services.retain(|s| *s != Service::Worker);
    let stack = Stack::up(options).await;
    let id = stack
        .new_task(&json!({"instruction": "nobody takes this"}))
        .await;
    // Without backoff about ten re-dispatches fit in 3.3 s; with it, those at 0.3, 0.9 and 2.1 s
    // (the next is due at 4.5 s).
    tokio::time::sleep(Duration::from_millis(3300)).await;
    let events = stack.events(id).await;
    let redispatches = of_kind(&events, EventKind::Redispatch).count();
    assert!(
        (2..=4).contains(&redispatches),
        "backed off: {redispatches} re-dispatches"
    );
}
