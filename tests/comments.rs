//! The two ways a person reaches a task's job while it works: a comment and a cancel.
//!
//! - A comment on a running job reaches the very next LLM request as the last `user` message,
//!   once; a comment racing `complete` is read before the job finishes; a comment on a finished
//!   task starts a follow-up job (and the per-job stream shows only that job).
//! - Cancelling stops a streaming job and kills a running tool's processes, and works on a
//!   queued job without any worker.

use std::time::Duration;

use maestro_api::RoutedTo;
use maestro_domain::{CommentKind, EventKind, JobStatus};
use maestro_testkit::{Service, Stack, StackOptions, TaskExt, WAIT, job_states, of_kind};
use serde_json::{Value, json};

fn user_messages(request: &Value) -> Vec<String> {
    request["body"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn wait_for_delta(stack: &Stack, id: impl std::fmt::Display) {
    let mut stream = stack.stream(id, None).await;
    let items = stream.read_until(WAIT, |i| i.event == "delta").await;
    assert_eq!(
        items.last().map(|i| i.event.as_str()),
        Some("delta"),
        "the model is streaming"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comment_on_a_running_job_is_the_next_user_message_of_the_very_next_request_once() {
    let scenario = json!({"scenarios": [{
        "name": "interject",
        "turns": [
            {"text": "Thinking slowly about what to do first, one letter at a time.", "chunk_chars": 1, "chunk_delay_ms": 40,
             "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "heard you"}}]}
        ]
    }]});
    let stack = Stack::up(StackOptions::new(scenario)).await;
    let id = stack
        .new_task(&json!({"instruction": "interject me"}))
        .await;
    wait_for_delta(&stack, id).await;
    let posted = stack
        .comment(id, "Also mention the weather, please.")
        .await
        .expect("comment accepted");
    assert_eq!(posted.routed_to, RoutedTo::Interjection);
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");

    let requests = stack.llm.requests().await.expect("requests");
    assert_eq!(requests.len(), 3);
    let is_it = |m: &String| m.contains("Also mention the weather, please.");
    assert!(
        !user_messages(&requests[0]).iter().any(is_it),
        "not before it was posted"
    );
    let second = &requests[1]["body"]["messages"];
    let last = second
        .as_array()
        .expect("messages")
        .last()
        .expect("a message");
    assert_eq!(
        last["role"], "user",
        "appended after the tool result, never earlier"
    );
    assert!(
        is_it(&last["content"].as_str().unwrap_or_default().to_owned()),
        "{last}"
    );
    for request in &requests[1..] {
        assert_eq!(
            user_messages(request).iter().filter(|m| is_it(m)).count(),
            1,
            "exactly once"
        );
    }
    let events = stack.events(id).await;
    let delivered = of_kind(&events, EventKind::Message)
        .filter(|e| e.payload["role"] == "user")
        .count();
    assert_eq!(delivered, 2, "the instruction and the interjection");
    let comments = stack.comments(id).await;
    let interjection = comments
        .iter()
        .find(|c| c.kind == CommentKind::Interjection)
        .expect("kept");
    assert!(
        interjection.delivered_at.is_some(),
        "marked delivered: {interjection:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comment_racing_complete_is_read_before_the_job_finishes() {
    let scenario = json!({"scenarios": [{
        "name": "race",
        "turns": [
            {"delay_ms": 1500, "tool_calls": [{"name": "complete", "arguments": {"result": "too early"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "after reading it"}}]}
        ]
    }]});
    let stack = Stack::up(StackOptions::new(scenario)).await;
    let id = stack.new_task(&json!({"instruction": "race me"})).await;
    // The LLM is answering turn 0 (the job looked for interjections just before).
    tokio::time::sleep(Duration::from_millis(700)).await;
    stack
        .comment(id, "Wait, one more thing!")
        .await
        .expect("comment accepted");
    let done = stack.wait_over(id).await;
    assert_eq!(
        done.job().result.as_deref(),
        Some("after reading it"),
        "the first complete did not win"
    );
    let events = stack.events(id).await;
    let results: Vec<&str> = of_kind(&events, EventKind::ToolResult)
        .map(|e| e.payload["content"].as_str().unwrap_or_default())
        .collect();
    assert!(
        results[0].contains("sent a message before the task was complete"),
        "{results:?}"
    );
    let requests = stack.llm.requests().await.expect("requests");
    assert!(
        user_messages(&requests[1])
            .iter()
            .any(|m| m.contains("Wait, one more thing!")),
        "the model read it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comment_on_a_finished_task_starts_a_follow_up_job() {
    let scenario = json!({"scenarios": [{"name": "any", "repeat_last": true,
        "turns": [{"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}]}]});
    let stack = Stack::up(StackOptions::new(scenario)).await;
    let id = stack.new_task(&json!({"instruction": "first"})).await;
    stack.wait_within(id, &[JobStatus::Succeeded], WAIT).await;
    let posted = stack
        .comment(id, "Now do the second part.")
        .await
        .expect("comment accepted");
    assert_eq!(posted.routed_to, RoutedTo::FollowUp);
    let done = stack.wait_within(id, &[JobStatus::Succeeded], WAIT).await;
    assert_eq!(done.job().job_no, 2, "a second job ran");
    let requests = stack.llm.requests().await.expect("requests");
    let follow_up = user_messages(&requests[1]).join("\n");
    assert!(
        follow_up.contains("first") && follow_up.contains("Now do the second part."),
        "{follow_up}"
    );

    // The per-job stream shows only the second job's items.
    let job = done.job().id.to_string();
    let url = stack.url(&format!("/api/local/tasks/{id}/jobs/{job}/stream"));
    let mut stream = maestro_testkit::SseClient::connect(&stack.http, &url, &stack.token, None)
        .await
        .expect("job stream");
    let items = stream
        .read_until(WAIT, |i| {
            i.event == "job_state" && i.data["payload"]["status"] == "succeeded"
        })
        .await;
    assert!(items.len() >= 5, "{items:#?}");
    assert!(
        items.iter().all(|i| i.data["job_id"] == job.as_str()),
        "only job 2's items"
    );
    assert_eq!(
        items[0].data["payload"]["status"], "queued",
        "from the job's first event"
    );
}

fn running(marker: &str) -> bool {
    std::process::Command::new("pgrep")
        .args(["-f", marker])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_stops_a_streaming_job_and_kills_a_running_tool() {
    let scenario = json!({"scenarios": [
        {"name": "stream", "match": "stream", "turns": [
            {"text": "A very long answer that takes its time to arrive, letter by letter.", "chunk_chars": 1, "chunk_delay_ms": 100,
             "tool_calls": [{"name": "complete", "arguments": {"result": "never"}}]}
        ]},
        {"name": "tool", "match": "sleep", "turns": [
            {"tool_calls": [{"name": "shell", "arguments": {"command": "sleep 3030"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "never"}}]}
        ]}
    ]});
    let stack = Stack::up(StackOptions::new(scenario)).await;

    let id = stack
        .new_task(&json!({"instruction": "stream forever"}))
        .await;
    wait_for_delta(&stack, id).await;
    let cancelled = stack.cancel(id).await.expect("cancelled");
    assert_eq!(cancelled.job().status, JobStatus::Cancelled);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events = stack.events(id).await;
    let last = events.last().expect("events");
    assert_eq!(
        last.payload["status"], "cancelled",
        "nothing was written after the cancellation: {last:?}"
    );
    assert!(
        last.payload["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("alice")
    );

    let id = stack
        .new_task(&json!({"instruction": "sleep please"}))
        .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while !running("sleep 3030") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tool never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let started = tokio::time::Instant::now();
    stack.cancel(id).await.expect("cancelled");
    while running("sleep 3030") {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the sleeping process was killed within 2 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let events = stack.events(id).await;
    assert_eq!(
        events.last().expect("events").payload["status"],
        "cancelled",
        "no tool result after it"
    );
    assert_eq!(
        of_kind(&events, EventKind::ToolResult).count(),
        0,
        "the killed call's result was not written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_is_cancelled_without_any_worker() {
    let mut options = StackOptions::new(json!({"scenarios": []}));
    options.services.retain(|s| *s != Service::Worker);
    let stack = Stack::up(options).await;
    let id = stack.new_task(&json!({"instruction": "never run"})).await;
    let cancelled = stack.cancel(id).await.expect("cancelled");
    assert_eq!(cancelled.job().status, JobStatus::Cancelled);
    let again = stack.cancel(id).await.expect_err("refused");
    assert_eq!(
        again.status, 409,
        "a finished job cannot be cancelled again"
    );
    let states = job_states(&stack.events(id).await);
    assert_eq!(states, ["queued", "cancelled"]);
}
