//! Durability of the job path: a worker process killed in the middle of a job loses nothing
//! (JetStream redelivers the dispatch after `ack_wait`, a second worker claims the job once
//! the first one's lease expired, and resumes from the last committed step, so no event is
//! duplicated and no committed LLM turn is asked again); and a job committed but never
//! dispatched is dispatched by the scheduler.

use std::collections::HashMap;
use std::time::Duration;

use maestro_domain::{EventKind, JobStatus};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_job_is_replaced_and_the_job_completes_without_duplicates() {
    let options = StackOptions::new(slow_scenario())
        .env("JOB_ACK_WAIT_MS", "1500")
        .worker_named("worker-a");
    let mut stack = Stack::up(options).await;

    let task_id = stack
        .new_task(&json!({"instruction": "crash test: write out.txt"}))
        .await;
    // Wait until the second turn is streaming: a text delta after the tool result.
    stack.wait_for_next_turn(task_id).await;

    stack.kill("worker-a").await;
    stack.add(Service::Worker, "worker-b").await;
    let over = [JobStatus::Succeeded, JobStatus::Failed];
    let done = stack
        .wait_within(task_id, &over, Duration::from_secs(40))
        .await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.job().attempt, 2, "claimed twice: once per worker");

    let events = stack.events(task_id).await;
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

    let requests = stack.llm.requests().await.expect("LLM requests");
    let turns: Vec<i64> = requests
        .iter()
        .map(|r| r["turn"].as_i64().unwrap_or(-1))
        .collect();
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
