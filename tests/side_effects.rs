//! Side effects and the tool policy through the whole stack. An external effect (a counter
//! kept by an HTTP server of the test's own, reached with `http_fetch`) happens exactly once
//! whatever crashes around it: a tool-runner killed mid-effect leaves the job paused
//! (`side_effect_unknown`), a worker killed mid-effect is replaced by one that learns the
//! recorded outcome. Calls the workspace policy refuses outright are answered with an error;
//! read-only results are reused until the workspace changes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use maestro_testkit::{Service, Stack, StackOptions};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);

/// An HTTP server counting `POST /count`; it answers `delay` after counting.
async fn counter(delay: Duration) -> (String, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    let app = axum::Router::new().route(
        "/count",
        axum::routing::post(move || {
            let counted = counted.clone();
            async move {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(delay).await;
                format!("counted {n}")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/count", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
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

/// A policy file granting network, for the whole stack.
fn policy(stack_dir: &std::path::Path, policy: Value) -> String {
    let path = stack_dir.join(format!("policy-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, policy.to_string()).expect("write policy");
    path.display().to_string()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_runner_killed_mid_effect_leaves_the_job_paused_not_repeated() {
    let (url, count) = counter(Duration::from_secs(3)).await;
    let dir = tempfile::tempdir().expect("dir");
    let policy = policy(
        dir.path(),
        json!({"network": true, "allowed_hosts": ["127.0.0.1"]}),
    );
    let options = StackOptions::new(effect_scenario(&url))
        .env("WORKSPACE_POLICY", &policy)
        .env("TOOL_TIMEOUT_MS", "3000")
        .env("RETRY_BASE_MS", "200");
    let mut stack = Stack::spawn(options).await.expect("the stack starts");
    let task = stack
        .create_task(json!({"instruction": "count once"}))
        .await
        .expect("task");
    let id = task["id"].as_str().expect("id").to_owned();
    wait_for_count(&count, 1).await;
    stack.kill("tool-runner").await;
    stack
        .start(Service::ToolRunner, "tool-runner", &[])
        .await
        .expect("tool-runner again");

    let done = stack
        .wait_for_status(&id, &["waiting_human", "succeeded", "failed"], WAIT)
        .await
        .expect("settles");
    assert_eq!(done["latest_job"]["status"], "waiting_human", "{done}");
    assert_eq!(done["latest_job"]["wait_reason"], "side_effect_unknown");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "the effect was not repeated"
    );
    let events = stack.events(&id).await.expect("events");
    let pause = events.last().expect("events");
    let reason = pause["payload"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("http_fetch") && reason.contains("outcome is unknown"),
        "the pause says what: {pause}"
    );
    assert_eq!(
        operation_status(&stack).await,
        ["started"],
        "the ledger shows it started, outcome unknown"
    );

    // A person looks at the counter and says the call took effect: the job goes on without
    // running it again, and the ledger records it as committed.
    let path = format!("/api/local/tasks/{id}/required-actions");
    let (_, pending) = stack
        .api(reqwest::Method::GET, &path, None)
        .await
        .expect("list");
    let item = &pending["required_actions"][0];
    assert_eq!(item["kind"], "side_effect_unknown", "{pending}");
    assert_eq!(item["tool"], "http_fetch");
    let decide = format!("{path}/{}/decide", item["id"].as_str().expect("id"));
    let (status, _) = stack
        .api(
            reqwest::Method::POST,
            &decide,
            Some(&json!({"decision": "approve"})),
        )
        .await
        .expect("decide");
    assert_eq!(status, 422, "this kind takes happened / not_happened");
    let (status, body) = stack
        .api(
            reqwest::Method::POST,
            &decide,
            Some(&json!({"decision": "happened"})),
        )
        .await
        .expect("decide");
    assert_eq!((status, &body["resumed"]), (200, &json!(true)), "{body}");
    let done = stack
        .wait_for_status(&id, &["succeeded", "failed"], WAIT)
        .await
        .expect("ends");
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    assert_eq!(count.load(Ordering::SeqCst), 1, "still exactly once");
    assert_eq!(operation_status(&stack).await, ["committed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_effect_is_replaced_by_one_that_learns_the_outcome() {
    let (url, count) = counter(Duration::from_secs(2)).await;
    let dir = tempfile::tempdir().expect("dir");
    let policy = policy(
        dir.path(),
        json!({"network": true, "allowed_hosts": ["127.0.0.1"]}),
    );
    let mut options = StackOptions::new(effect_scenario(&url))
        .env("WORKSPACE_POLICY", &policy)
        .env("JOB_ACK_WAIT_MS", "1500");
    options.services.retain(|s| *s != Service::Worker);
    let mut stack = Stack::spawn(options).await.expect("the stack starts");
    stack
        .start(Service::Worker, "worker-a", &[])
        .await
        .expect("worker a");
    let task = stack
        .create_task(json!({"instruction": "count once"}))
        .await
        .expect("task");
    let id = task["id"].as_str().expect("id").to_owned();
    wait_for_count(&count, 1).await;
    stack.kill("worker-a").await;
    stack
        .start(Service::Worker, "worker-b", &[])
        .await
        .expect("worker b");

    let done = stack
        .wait_for_status(&id, &["succeeded", "failed", "waiting_human"], WAIT)
        .await
        .expect("settles");
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    assert_eq!(count.load(Ordering::SeqCst), 1, "exactly once");
    let events = stack.events(&id).await.expect("events");
    let result = events
        .iter()
        .find(|e| e["kind"] == "tool_result" && e["payload"]["name"] == "http_fetch")
        .expect("result");
    assert!(
        result["payload"]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("counted 1"),
        "{result}"
    );
    assert_eq!(
        operation_status(&stack).await,
        ["committed"],
        "the ledger holds the recorded outcome"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_outside_the_policy_are_refused_and_read_only_results_are_reused() {
    let dir = tempfile::tempdir().expect("dir");
    let policy = policy(
        dir.path(),
        json!({"allowed_tools": ["read_file", "write_file", "shell", "http_fetch"], "command_deny": ["*rm *"]}),
    );
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
    let stack = Stack::spawn(StackOptions::new(scenario).env("WORKSPACE_POLICY", &policy))
        .await
        .expect("stack");
    let task = stack
        .create_task(json!({"instruction": "policy"}))
        .await
        .expect("task");
    let id = task["id"].as_str().expect("id").to_owned();
    // Change the file behind the agent's back while turn 3 waits: a cached read does not see it.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let events = stack.events(&id).await.expect("events");
        if events.iter().filter(|e| e["kind"] == "tool_result").count() >= 4 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "turn 2 never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::write(stack.workspace(&id).join("a.txt"), "two").expect("outside change");
    let done = stack
        .wait_for_status(&id, &["succeeded", "failed"], WAIT)
        .await
        .expect("settles");
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");

    let results: Vec<(String, bool)> = stack
        .events(&id)
        .await
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "tool_result")
        .map(|e| {
            (
                e["payload"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e["payload"]["is_error"] == true,
            )
        })
        .collect();
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
    assert!(stack.workspace(&id).join("a.txt").exists(), "rm never ran");
}
