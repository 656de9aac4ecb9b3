//! How a job meets failure: a fatal LLM error fails the job at once with the reason (and a
//! `task.failed` notification); a recoverable one puts the job in `retry` with a time, after
//! which it is redelivered, resumed and finished; a tool that fails is reported to the model,
//! which carries on; a tool output or model text with NUL bytes is stored (as U+FFFD, the
//! count told to the model) and the job goes on.

use std::time::Duration;

use futures::StreamExt;
use maestro_domain::{EventKind, JobStatus};
use maestro_testkit::{
    Stack, StackOptions, TaskExt, job_states, of_kind, state_change, tool_results,
};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_llm_error_fails_the_job_with_the_reason() {
    let scenario = json!({"scenarios": [{
        "name": "unauthorized",
        "turns": [{"fail": {"status": 401, "body": "invalid api key", "times": 0}}]
    }]});
    let stack = Stack::up(StackOptions::new(scenario)).await;
    let nats = stack.nats.client().await.expect("nats");
    let mut failed = nats
        .subscribe(format!("{}.notify.task.failed", stack.prefix))
        .await
        .expect("subscribe");

    let done = stack.run(&json!({"instruction": "anything"})).await;
    let id = done.id().to_string();
    let job = done.job();
    assert_eq!(job.status, JobStatus::Failed);
    let error = job.error.clone().unwrap_or_default();
    assert!(
        error.contains("401") && error.contains("invalid api key"),
        "the reason is kept: {error}"
    );
    assert_eq!(job.attempt, 1, "a fatal error is not retried");
    assert_eq!(
        stack.llm.requests().await.expect("requests").len(),
        1,
        "the LLM was asked once"
    );
    let events = stack.events(&id).await;
    assert_eq!(job_states(&events), ["queued", "running", "failed"]);
    let letters: Vec<String> =
        sqlx::query_scalar("SELECT reason FROM dead_letters WHERE consumer = 'jobs'")
            .fetch_all(&stack.db.pool)
            .await
            .expect("dead letters");
    assert_eq!(
        letters,
        std::slice::from_ref(&error),
        "the dispatch is terminated and kept with the reason"
    );

    let message = tokio::time::timeout(Duration::from_secs(10), failed.next())
        .await
        .expect("a task.failed notification")
        .expect("subscription open");
    let notification: Value = serde_json::from_slice(&message.payload).expect("json");
    assert_eq!(notification["data"]["task_id"], id);
    assert_eq!(notification["data"]["error"], error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recoverable_llm_error_is_retried_later_and_the_job_succeeds() {
    let scenario = json!({"scenarios": [{
        "name": "flaky",
        "turns": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "a"}}]},
            {
                "fail": {"status": 503, "body": "overloaded", "times": 1},
                "tool_calls": [{"name": "complete", "arguments": {"result": "done despite a 503"}}]
            }
        ]
    }]});
    let options = StackOptions::new(scenario).retry_backoff(300, 600);
    let stack = Stack::up(options).await;
    let done = stack.run(&json!({"instruction": "flaky"})).await;
    let job = done.job();
    assert_eq!(job.status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(job.result.as_deref(), Some("done despite a 503"));
    assert_eq!(job.attempt, 2, "claimed again after the retry delay");

    let events = stack.events(done.id()).await;
    assert_eq!(
        job_states(&events),
        ["queued", "running", "retry", "running", "succeeded"]
    );
    let retry = state_change(&events, "retry");
    assert!(
        retry.payload["error"]
            .as_str()
            .unwrap_or_default()
            .contains("503"),
        "{retry:?}"
    );
    assert!(
        retry.payload["next_retry_at"].is_string(),
        "the retry time is recorded: {retry:?}"
    );
    assert_eq!(
        of_kind(&events, EventKind::ToolResult).count(),
        2,
        "write_file ran once before the error, complete once after"
    );
    let turns = stack.llm.turns().await.expect("requests");
    assert_eq!(
        turns,
        [0, 1, 1],
        "the committed first turn was not asked again after the retry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_errors_are_reported_to_the_model_and_the_job_carries_on() {
    let scenario = json!({"scenarios": [{
        "name": "clumsy",
        "turns": [
            {"tool_calls": [
                {"name": "read_file", "arguments": {"path": "../../../etc/passwd"}},
                {"name": "read_file", "arguments": {"path": "missing.txt"}},
                {"name": "launch_rockets", "arguments": {}},
                {"name": "write_file", "arguments": "{not json"}
            ]},
            {"tool_calls": [{"name": "complete", "arguments": {}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "gave up politely"}}]}
        ]
    }]});
    let stack = Stack::up(StackOptions::new(scenario)).await;
    let done = stack.run(&json!({"instruction": "clumsy"})).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");

    let results = tool_results(&stack.events(done.id()).await);
    assert_eq!(
        results.len(),
        6,
        "four calls, an invalid complete, a valid one: {results:#?}"
    );
    let expect = [
        "outside the workspace",
        "no such file",
        "unknown tool \"launch_rockets\"",
        "not valid JSON",
        "needs a non-empty `result`",
    ];
    for (i, fragment) in expect.iter().enumerate() {
        assert!(results[i].1, "result {i} is an error: {results:#?}");
        assert!(
            results[i].0.starts_with("Error"),
            "errors start with Error: {:?}",
            results[i].0
        );
        assert!(
            results[i].0.contains(fragment),
            "result {i} says {fragment:?}: {:?}",
            results[i].0
        );
    }
    assert_eq!(
        results[5],
        ("ok".to_owned(), false),
        "the valid complete ends the job"
    );
    let leaked = std::fs::read_dir(stack.workspace(done.id()))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(leaked, 0, "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_bytes_in_tool_output_and_model_text_are_stored_and_the_job_goes_on() {
    let scenario = json!({"scenarios": [{
        "name": "binary",
        "turns": [
            {"text": "odd \u{0} text", "tool_calls": [
                {"name": "shell", "arguments": {"command": "printf 'a\\0b\\0c'"}},
                {"name": "shell", "arguments": {"command": "head -c 64 /proc/self/environ; printf 'caf\\351'"}}
            ]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "read \u{0} it"}}]}
        ]
    }]});
    let stack = Stack::up(StackOptions::new(scenario)).await;
    let done = stack.run(&json!({"instruction": "read binary"})).await;
    let job = done.job();
    assert_eq!(job.status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(job.attempt, 1, "nothing was retried");
    assert_eq!(job.result.as_deref(), Some("read \u{FFFD} it"));
    let events = stack.events(done.id()).await;
    let results = tool_results(&events);
    assert!(
        results[0].0.contains("a\u{FFFD}b\u{FFFD}c")
            && results[0]
                .0
                .contains("[2 NUL byte(s) in this output are shown as U+FFFD"),
        "the model sees the output and how many NULs it had: {:?}",
        results[0].0
    );
    // A /proc read (NUL-separated) and Latin-1 bytes: shown, and both counts told.
    let proc_read = &results
        .iter()
        .find(|(text, _)| text.contains("PATH="))
        .expect("the /proc read's result")
        .0;
    assert!(
        proc_read.contains("caf\u{FFFD}")
            && proc_read
                .contains("[1 byte(s) of the output were not UTF-8 and are shown as U+FFFD]")
            && proc_read.contains("NUL byte(s) in this output are shown as U+FFFD"),
        "the model sees the output and what was replaced: {proc_read:?}"
    );
    let said = of_kind(&events, EventKind::Message)
        .find(|e| e.payload["role"] == "assistant")
        .expect("the model's message");
    assert_eq!(said.payload["content"], "odd \u{FFFD} text");
}
