//! Side effects and the tool policy through the whole stack. An external effect (a counter
//! kept by an HTTP server of the test's own, reached with `http_fetch`) happens exactly once
//! whatever crashes around it: a tool-runner killed mid-effect leaves the job paused
//! (`side_effect_unknown`) until a person says whether it happened (`happened`: not run again;
//! `not_happened`: run again, once); a worker killed mid-effect is replaced by one that learns
//! the recorded outcome. Calls the workspace policy refuses outright are answered with an
//! error; read-only results are reused until the workspace changes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use maestro_api::DecideRequest;
use maestro_domain::{EventKind, JobStatus, TaskId, WaitReason};
use maestro_testkit::{Service, Stack, StackOptions, TaskExt, of_kind, tool_results};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);

/// Network for the tests' own counter, nothing else.
const NETWORK: &str = r#"{"network": true, "allowed_hosts": ["127.0.0.1"]}"#;

/// An HTTP server counting `POST /count`; the first request is answered `delay` after it is
/// counted, later ones at once.
async fn counter(delay: Duration) -> (String, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    let app = axum::Router::new().route(
        "/count",
        axum::routing::post(move || {
            let counted = counted.clone();
            async move {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                if n == 1 {
                    tokio::time::sleep(delay).await;
                }
                format!("counted {n}")
            }
        }),
    );
    let url = format!("{}/count", maestro_testkit::serve(app).await);
    (url, count)
}

fn effect_scenario(url: &str) -> Value {
    json!({"scenarios": [{
        "name": "effect",
        "turns": [
            {"tool_calls": [{"name": "http_fetch", "arguments": {"url": url, "method": "POST", "body": "once"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "counted"}}]}
        ]
    }]})
}

async fn wait_for_count(count: &AtomicUsize, n: usize) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while count.load(Ordering::SeqCst) < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the effect never happened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn operation_status(stack: &Stack) -> Vec<String> {
    sqlx::query_scalar("SELECT status FROM operations")
        .fetch_all(&stack.db.pool)
        .await
        .expect("operations")
}

/// A task whose effect happened once while its tool-runner was killed mid-call: the job is
/// paused for a person (`side_effect_unknown`), the effect not repeated.
async fn effect_lost() -> (Stack, TaskId, Arc<AtomicUsize>) {
    let (url, count) = counter(Duration::from_secs(3)).await;
    let options = StackOptions::new(effect_scenario(&url))
        .policy(NETWORK)
        .env("TOOL_TIMEOUT_MS", "3000")
        .env("RETRY_BASE_MS", "200");
    let mut stack = Stack::up(options).await;
    let id = stack.new_task(&json!({"instruction": "count once"})).await;
    wait_for_count(&count, 1).await;
    stack.kill("tool-runner").await;
    stack.add(Service::ToolRunner, "tool-runner").await;

    let done = stack.settle(id).await;
    assert_eq!(done.job().status, JobStatus::WaitingHuman, "{done:?}");
    assert_eq!(done.job().wait_reason, Some(WaitReason::SideEffectUnknown));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "the effect was not repeated"
    );
    let events = stack.events(id).await;
    let pause = events.last().expect("events");
    let reason = pause.payload["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("http_fetch") && reason.contains("outcome is unknown"),
        "the pause says what: {pause:?}"
    );
    assert_eq!(
        operation_status(&stack).await,
        ["started"],
        "the ledger shows it started, outcome unknown"
    );
    (stack, id, count)
}

/// Say whether the lost effect happened (`happened` / `not_happened`); the job resumes and
/// succeeds.
async fn settle_lost_effect(stack: &Stack, id: TaskId, verdict: &str) {
    let items = stack.required_actions(id).await;
    let item = &items[0];
    assert_eq!(item.kind, WaitReason::SideEffectUnknown, "{items:?}");
    assert_eq!(item.text("tool"), Some("http_fetch"));
    let refused = stack
        .decide(id, item.id, &DecideRequest::new("approve"))
        .await;
    assert_eq!(
        refused.expect_err("refused").status,
        422,
        "this kind takes happened / not_happened"
    );
    let decided = stack
        .decide(id, item.id, &DecideRequest::new(verdict))
        .await;
    assert!(decided.expect("decided").resumed);
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_runner_killed_mid_effect_leaves_the_job_paused_not_repeated() {
    let (stack, id, count) = effect_lost().await;
    // A person looks at the counter and says the call took effect: the job goes on without
    // running it again, and the ledger records it as committed.
    settle_lost_effect(&stack, id, "happened").await;
    assert_eq!(count.load(Ordering::SeqCst), 1, "still exactly once");
    assert_eq!(operation_status(&stack).await, ["committed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_effect_a_person_says_did_not_happen_runs_again_once() {
    let (stack, id, count) = effect_lost().await;
    settle_lost_effect(&stack, id, "not_happened").await;
    assert_eq!(count.load(Ordering::SeqCst), 2, "run again, once");
    let results = tool_results(&stack.events(id).await);
    assert!(
        results[0].0.ends_with("counted 2") && !results[0].1,
        "the call's result is the second run's: {results:?}"
    );
    assert_eq!(
        operation_status(&stack).await,
        ["committed"],
        "one operation, now with its outcome"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_effect_is_replaced_by_one_that_learns_the_outcome() {
    let (url, count) = counter(Duration::from_secs(2)).await;
    let options = StackOptions::new(effect_scenario(&url))
        .policy(NETWORK)
        .env("JOB_ACK_WAIT_MS", "1500")
        .worker_named("worker-a");
    let mut stack = Stack::up(options).await;
    let id = stack.new_task(&json!({"instruction": "count once"})).await;
    wait_for_count(&count, 1).await;
    stack.kill("worker-a").await;
    stack.add(Service::Worker, "worker-b").await;

    let done = stack.settle(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(count.load(Ordering::SeqCst), 1, "exactly once");
    let events = stack.events(id).await;
    let result = of_kind(&events, EventKind::ToolResult)
        .find(|e| e.payload["name"] == "http_fetch")
        .expect("result");
    assert!(
        result.payload["content"]
            .as_str()
            .unwrap_or_default()
            .contains("counted 1"),
        "{result:?}"
    );
    assert_eq!(
        operation_status(&stack).await,
        ["committed"],
        "the ledger holds the recorded outcome"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_outside_the_policy_are_refused_and_read_only_results_are_reused() {
    let policy = json!({
        "allowed_tools": ["read_file", "write_file", "shell", "http_fetch"],
        "command_deny": ["*rm *"]
    });
    let scenario = json!({"scenarios": [{
        "name": "policy",
        "turns": [
            {"tool_calls": [
                {"name": "http_fetch", "arguments": {"url": "http://127.0.0.1:1/"}},
                {"name": "shell", "arguments": {"command": "rm -rf *"}},
                {"name": "write_file", "arguments": {"path": "a.txt", "content": "one"}}
            ]},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
            {"delay_ms": 1500, "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "b.txt", "content": "b"}}]},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
        ]
    }]});
    let options = StackOptions::new(scenario).policy(&policy.to_string());
    let stack = Stack::up(options).await;
    let id = stack.new_task(&json!({"instruction": "policy"})).await;
    // Change the file behind the agent's back while turn 3 waits: a cached read does not see it.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let events = stack.events(id).await;
        if of_kind(&events, EventKind::ToolResult).count() >= 4 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "turn 2 never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::write(stack.workspace(id).join("a.txt"), "two").expect("outside change");
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");

    let results = tool_results(&stack.events(id).await);
    // Refused outright (no approval can lift these; tools outside the allowed list become
    // tool requests instead: tests/pauses.rs).
    assert!(
        results[0].0.contains("does not grant network access") && results[0].1,
        "{results:?}"
    );
    assert!(
        results[1].0.contains("refuses commands matching `*rm *`"),
        "{results:?}"
    );
    assert_eq!(results[2], ("wrote 3 bytes to a.txt".to_owned(), false));
    assert_eq!(results[3].0, "one", "first read");
    assert_eq!(
        results[4].0, "one",
        "the second identical read is answered from the cache"
    );
    assert_eq!(
        results[6].0, "two",
        "a write empties the cache: the next read sees the file"
    );
    assert!(stack.workspace(id).join("a.txt").exists(), "rm never ran");
}

/// A ledgered request straight to the tool-runners, as a worker of claim `attempt` sends it:
/// the reply's `(ok, not_run)`.
async fn send_ledgered(
    nats: &async_nats::Client,
    stack: &Stack,
    (url, operation_id, attempt): (&str, &str, i32),
) -> (bool, bool) {
    let request = maestro_domain::tools::ToolExecRequest {
        task_id: TaskId::new(),
        job_id: maestro_domain::JobId::new(),
        call_id: "call_1".into(),
        operation_id: operation_id.into(),
        tool: "http_fetch".into(),
        arguments: json!({"url": url, "method": "POST"}),
        timeout_ms: 5000,
        network: true,
        allowed_hosts: vec!["127.0.0.1".into()],
        ledgered: true,
        mcp: None,
        attempt,
    };
    let payload = serde_json::to_vec(&request).expect("json");
    let reply = nats
        .request(format!("{}.tools.exec", stack.prefix), payload.into())
        .await
        .expect("a tool-runner answers");
    let reply: maestro_domain::tools::ToolExecReply =
        serde_json::from_slice(&reply.payload).expect("a reply");
    (reply.ok, reply.not_run)
}

/// However often a ledgered call is sent — twice at once to two tool-runners, again by the
/// same claim, by an earlier claim that woke up late, after it is done — it runs once; a
/// later claim runs a call an earlier one only started (a person said it did not happen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledgered_call_runs_once_however_often_and_by_whom_it_is_sent() {
    let (url, count) = counter(Duration::from_millis(300)).await;
    let mut options = StackOptions::new(json!({"scenarios": []}));
    options.services = vec![Service::ToolRunner];
    let mut stack = Stack::up(options).await;
    stack.add(Service::ToolRunner, "tool-runner-2").await;
    let nats = stack.nats.client().await.expect("NATS");

    let (first, second) = tokio::join!(
        send_ledgered(&nats, &stack, (&url, "op-race", 1)),
        send_ledgered(&nats, &stack, (&url, "op-race", 1)),
    );
    let mut replies = [first, second];
    replies.sort();
    assert_eq!(
        replies,
        [(false, true), (true, false)],
        "one ran, one was refused"
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
    for attempt in [1, 2] {
        let again = send_ledgered(&nats, &stack, (&url, "op-race", attempt)).await;
        assert_eq!(
            again,
            (false, true),
            "done: not run again by claim {attempt}"
        );
    }
    assert_eq!(count.load(Ordering::SeqCst), 1);

    // Started by claim 2 and never finished (its tool-runner died): claims 1 and 2 do not
    // run it, claim 3 does, once.
    let started = json!({"state": "running", "attempt": 2}).to_string();
    let js = async_nats::jetstream::new(nats.clone());
    js.publish(
        format!("{}.operations.op-lost", stack.prefix),
        started.into(),
    )
    .await
    .expect("publish")
    .await
    .expect("stored");
    for attempt in [1, 2] {
        let stale = send_ledgered(&nats, &stack, (&url, "op-lost", attempt)).await;
        assert_eq!(stale, (false, true), "claim {attempt} does not run it");
    }
    assert_eq!(count.load(Ordering::SeqCst), 1);
    let later = send_ledgered(&nats, &stack, (&url, "op-lost", 3)).await;
    assert_eq!(later, (true, false), "a later claim runs it");
    assert_eq!(count.load(Ordering::SeqCst), 2);
}
