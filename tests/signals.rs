//! Signals on the bus (docs/architecture.md#signals), with a plain NATS client in the test
//! process, not the gateway's code: a comment sent on `<p>.signals.requests` and one sent over
//! REST each reach the running job's next LLM request once, and each is published as a
//! `comment` signal; an approval sent on the bus resumes a paused job and a second one gets
//! the same conflict as over REST; a cancel on the bus stops a streaming job; requests without
//! a token, for another owner's task or malformed get the REST answers.

use std::time::Duration;

use futures::StreamExt as _;
use maestro_domain::JobStatus;
use maestro_testkit::{Stack, StackOptions, TaskExt, WAIT};
use serde_json::{Value, json};

/// Send a command on the bus as the owner of `token`; the reply's `(status, body)`.
async fn send(
    nats: &async_nats::Client,
    stack: &Stack,
    token: Option<&str>,
    command: Value,
) -> (u16, Value) {
    let mut headers = async_nats::HeaderMap::new();
    if let Some(token) = token {
        headers.insert("Authorization", format!("Bearer {token}").as_str());
    }
    let subject = format!("{}.signals.requests", stack.prefix);
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        nats.request_with_headers(subject, headers, command.to_string().into()),
    )
    .await
    .expect("answered in time")
    .expect("a reply");
    let answer: Value = serde_json::from_slice(&reply.payload).expect("JSON");
    (
        answer["status"].as_u64().unwrap_or(0) as u16,
        answer["body"].clone(),
    )
}

/// For each LLM request, how many of its user messages carry `text`.
fn carrying(requests: &[Value], text: &str) -> Vec<usize> {
    requests
        .iter()
        .map(|r| {
            r["body"]["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| {
                    m["role"] == "user" && m["content"].as_str().unwrap_or("").contains(text)
                })
                .count()
        })
        .collect()
}

async fn wait_for_delta(stack: &Stack, id: impl std::fmt::Display) {
    let mut stream = stack.stream(id, None).await;
    let items = stream.read_until(WAIT, |i| i.event == "delta").await;
    assert_eq!(items.last().map(|i| i.event.as_str()), Some("delta"));
}

fn slow_turn() -> Value {
    json!({"text": "Thinking slowly about what to do first, one letter at a time.",
           "chunk_chars": 1, "chunk_delay_ms": 40,
           "tool_calls": [{"name": "list_files", "arguments": {}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comments_from_the_bus_and_from_rest_reach_the_next_request_once_and_are_signalled() {
    let scenario = json!({"scenarios": [{
        "name": "interject",
        "turns": [
            slow_turn(),
            slow_turn(),
            {"tool_calls": [{"name": "complete", "arguments": {"result": "heard you"}}]}
        ]
    }]});
    let stack = Stack::up(StackOptions::new(scenario)).await;
    let nats = stack.nats.client().await.expect("nats");
    let mut signals = nats
        .subscribe(format!("{}.signals.>", stack.prefix))
        .await
        .expect("subscribe");
    let id = stack
        .new_task(&json!({"instruction": "interject me"}))
        .await;
    wait_for_delta(&stack, id).await;
    let (status, routed) = send(
        &nats,
        &stack,
        Some(&stack.token),
        json!({"command": "comment", "task_id": id.to_string(), "body": {"body": "From the bus: mention the sea."}}),
    )
    .await;
    assert_eq!(
        (status, routed["routed_to"].as_str()),
        (201, Some("interjection")),
        "{routed}"
    );
    stack
        .comment(id, "From REST: mention the sky.")
        .await
        .expect("accepted");
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");

    let requests = stack.llm.requests().await.expect("requests");
    for text in [
        "From the bus: mention the sea.",
        "From REST: mention the sky.",
    ] {
        let counts = carrying(&requests, text);
        assert_eq!(
            counts.first(),
            Some(&0),
            "not before it was sent: {counts:?}"
        );
        assert_eq!(counts.last(), Some(&1), "delivered, once: {counts:?}");
        assert!(counts.iter().all(|n| *n <= 1), "never twice: {counts:?}");
    }
    let mut comment_signals = Vec::new();
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(500), signals.next()).await
    {
        let signal: Value = serde_json::from_slice(&message.payload).expect("JSON");
        if signal["kind"] == "comment" {
            assert_eq!(
                message.subject.as_str(),
                format!("{}.signals.{id}.comment", stack.prefix)
            );
            comment_signals.push(signal);
        }
    }
    assert_eq!(comment_signals.len(), 2, "{comment_signals:?}");
    assert!(
        comment_signals
            .iter()
            .all(|s| s["actor"] == "alice" && s["detail"]["kind"] == "interjection")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_on_the_bus_resumes_the_job_and_a_second_one_is_refused_as_over_rest() {
    let scenario = json!({"scenarios": [{
        "name": "gated",
        "turns": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "note.txt", "content": "approved on the bus"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "written"}}]}
        ]
    }]});
    let options =
        StackOptions::new(scenario).policy(r#"{"allowed_tools": ["read_file", "list_files"]}"#);
    let stack = Stack::up(options).await;
    let nats = stack.nats.client().await.expect("nats");
    let id = stack
        .new_task(&json!({"instruction": "write the note"}))
        .await;
    let paused = stack.wait(id, &[JobStatus::WaitingHuman]).await;
    assert_eq!(paused.job().status, JobStatus::WaitingHuman);
    let item = stack.required_actions(id).await.remove(0);
    let decide = json!({"command": "decide", "task_id": id.to_string(), "action_id": item.id.to_string(), "body": {"decision": "approve"}});

    let (status, _) = send(&nats, &stack, None, decide.clone()).await;
    assert_eq!(status, 401, "a token is required");
    let (status, _) = send(&nats, &stack, Some(&stack.other_token), decide.clone()).await;
    assert_eq!(status, 404, "another owner's task is not there");
    let (status, body) = send(
        &nats,
        &stack,
        Some(&stack.token),
        json!({"command": "decide", "task_id": id.to_string()}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_command"))
    );

    let (status, reply) = send(&nats, &stack, Some(&stack.token), decide.clone()).await;
    assert_eq!(
        (status, reply["resumed"].as_bool()),
        (200, Some(true)),
        "{reply}"
    );
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert!(
        stack.workspace(id).join("note.txt").exists(),
        "the approved call ran"
    );

    let (status, again) = send(&nats, &stack, Some(&stack.token), decide).await;
    let rest = stack
        .decide(
            id,
            item.id,
            &serde_json::from_value(json!({"decision": "approve"})).expect("request"),
        )
        .await
        .expect_err("refused over REST too");
    assert_eq!(
        (status, again["error"]["code"].as_str().unwrap_or("")),
        (rest.status, rest.code.as_str()),
        "the same conflict both ways: {again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_the_bus_stops_a_streaming_job_and_is_signalled() {
    let scenario = json!({"scenarios": [{
        "name": "long",
        "turns": [{"text": "A very long answer, streamed one letter at a time so it takes a while to finish.",
                   "chunk_chars": 1, "chunk_delay_ms": 100,
                   "tool_calls": [{"name": "complete", "arguments": {"result": "never"}}]}]
    }]});
    let stack = Stack::up(StackOptions::new(scenario)).await;
    let nats = stack.nats.client().await.expect("nats");
    let mut cancels = nats
        .subscribe(format!("{}.signals.*.cancel", stack.prefix))
        .await
        .expect("subscribe");
    let id = stack
        .new_task(&json!({"instruction": "talk for long"}))
        .await;
    wait_for_delta(&stack, id).await;
    let sent = std::time::Instant::now();
    let (status, _) = send(
        &nats,
        &stack,
        Some(&stack.token),
        json!({"command": "cancel", "task_id": id.to_string()}),
    )
    .await;
    assert_eq!(status, 200);
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Cancelled);
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "stopped long before the reply's end"
    );
    let signal = tokio::time::timeout(Duration::from_secs(5), cancels.next())
        .await
        .expect("a cancel signal")
        .expect("a message");
    let signal: Value = serde_json::from_slice(&signal.payload).expect("JSON");
    assert_eq!(signal["task_id"], id.to_string());
    assert_eq!(signal["actor"], "cancelled by alice");
    let (status, again) = send(
        &nats,
        &stack,
        Some(&stack.token),
        json!({"command": "cancel", "task_id": id.to_string()}),
    )
    .await;
    assert_eq!(
        (status, again["error"]["code"].as_str()),
        (409, Some("nothing_to_cancel"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_after_a_comment_signal_loses_nothing() {
    let scenario = json!({"scenarios": [{
        "name": "interrupted",
        "turns": [
            {"text": "Thinking about it for a long while, one letter at a time, before looking.",
             "chunk_chars": 1, "chunk_delay_ms": 60,
             "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "heard you"}}]}
        ]
    }]});
    let options = StackOptions::new(scenario)
        .env("JOB_ACK_WAIT_MS", "1500")
        .worker_named("worker-a");
    let mut stack = Stack::up(options).await;
    let nats = stack.nats.client().await.expect("nats");
    let mut comments = nats
        .subscribe(format!("{}.signals.*.comment", stack.prefix))
        .await
        .expect("subscribe");
    let id = stack
        .new_task(&json!({"instruction": "interrupt me"}))
        .await;
    wait_for_delta(&stack, id).await;
    let text = "Said just before the crash.";
    let (status, _) = send(
        &nats,
        &stack,
        Some(&stack.token),
        json!({"command": "comment", "task_id": id.to_string(), "body": {"body": text}}),
    )
    .await;
    assert_eq!(status, 201);
    // The signal is out (worker-a has it, or is about to): now it dies before delivering it.
    tokio::time::timeout(Duration::from_secs(5), comments.next())
        .await
        .expect("the comment signal")
        .expect("a message");
    stack.kill("worker-a").await;
    stack
        .add(maestro_testkit::Service::Worker, "worker-b")
        .await;
    let over = [JobStatus::Succeeded, JobStatus::Failed];
    let done = stack.wait_within(id, &over, Duration::from_secs(40)).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.job().attempt, 2, "claimed again by worker-b");
    let requests = stack.llm.requests().await.expect("requests");
    let counts = carrying(&requests, text);
    assert_eq!(
        counts.last(),
        Some(&1),
        "the comment reached the job once: {counts:?}"
    );
    assert!(counts.iter().all(|n| *n <= 1), "never twice: {counts:?}");
}
