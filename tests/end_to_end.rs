//! A task runs end to end through all five services as separate processes: created over
//! HTTP, run by the worker against the scripted LLM (a separate process), its tool call
//! executed by the tool-runner, its stream read over SSE until the job succeeds, its events
//! listed, its file found in the workspace, and its webhook received with a Standard Webhooks
//! signature that verifies — plus the same notification on the NATS notify subject.

use std::time::Duration;

use axum::http::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use futures::StreamExt;
use hmac::{Hmac, KeyInit, Mac};
use maestro_api::CreateWebhook;
use maestro_domain::{EventKind, JobStatus};
use maestro_testkit::{Stack, StackOptions};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const NOTE: &str = "MAESTRO was here.\n";

fn scenarios() -> Value {
    json!({"scenarios": [{
        "name": "write-note",
        "match": "write the note",
        "turns": [
            {
                // Gives the test time to open its stream before the first delta.
                "delay_ms": 400,
                "text": "I will write the note now.",
                "chunk_chars": 3,
                "tool_calls": [{"name": "write_file", "arguments": {"path": "notes/note.txt", "content": NOTE}}]
            },
            {
                // A model's time to its first token: longer than the worker's commit wait, so
                // the first turn's results are committed while this reply comes, which then
                // streams live too (a reply within the wait comes whole: tests/crash_recovery.rs).
                "delay_ms": 100,
                "text": "The note is written.",
                "tool_calls": [{"name": "complete", "arguments": {"result": "Wrote notes/note.txt"}}]
            }
        ]
    }]})
}

/// An HTTP endpoint that records every request it receives.
async fn webhook_receiver() -> (String, mpsc::UnboundedReceiver<(HeaderMap, Bytes)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((headers, body));
                "ok"
            }
        }),
    );
    let url = format!("{}/hook", maestro_testkit::serve(app).await);
    (url, rx)
}

/// Standard Webhooks verification, written from the specification rather than reusing the
/// notifier's code: base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>")) behind "v1,".
fn verify_signature(secret: &str, headers: &HeaderMap, body: &[u8]) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (id, timestamp, signature) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    );
    assert!(!id.is_empty(), "webhook-id header is present");
    let ts: i64 = timestamp
        .parse()
        .expect("webhook-timestamp is unix seconds");
    assert!(
        (chrono::Utc::now().timestamp() - ts).abs() < 300,
        "timestamp is current"
    );
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").expect("whsec_ prefix"))
        .expect("base64 secret");
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).expect("hmac key");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    assert!(
        signature.split(' ').any(|s| s == expected),
        "signature {signature} should contain {expected}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_end_to_end_through_all_five_services() {
    let (hook_url, mut hooks) = webhook_receiver().await;
    let stack = Stack::up(StackOptions::new(scenarios())).await;
    let nats = stack.nats.client().await.expect("connect to NATS");
    let mut notify = nats
        .subscribe(format!("{}.notify.task.succeeded", stack.prefix))
        .await
        .expect("subscribe to notifications");

    let hook = CreateWebhook {
        url: hook_url,
        event_types: Some(vec!["task.succeeded".into(), "task.failed".into()]),
        secret: None,
    };
    let webhook = stack.create_webhook(&hook).await;
    let secret = webhook.secret.expect("the secret is shown once");

    let task = stack
        .create(&json!({"instruction": "Please write the note into notes/note.txt"}))
        .await;
    let task_id = task.id().to_string();
    assert_eq!(
        task.status(),
        Some(JobStatus::Queued),
        "a new task has a queued job"
    );
    assert_eq!(task.task.piece, "chat", "the default piece");

    // The live stream, read until the job succeeds.
    let mut stream = stack.stream(&task_id, None).await;
    let items = stream
        .read_until(Duration::from_secs(30), |item| {
            item.event == "job_state" && item.data["payload"]["status"] == "succeeded"
        })
        .await;
    let last = items.last().expect("the stream delivered items");
    assert_eq!(
        last.data["payload"]["status"], "succeeded",
        "the stream ends with success: {items:#?}"
    );
    let ids: Vec<maestro_domain::StreamId> = items
        .iter()
        .map(|i| i.id.parse().expect("stream id"))
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "stream ids strictly increase: {ids:?}"
    );
    let streamed: String = items
        .iter()
        .filter(|i| i.event == "delta" && i.data["type"] == "text")
        .map(|i| i.data["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        streamed, "I will write the note now.The note is written.",
        "every text delta of both turns arrived live, in order"
    );
    assert!(
        items
            .iter()
            .any(|i| i.event == "delta" && i.data["type"] == "tool_call"),
        "tool-call deltas are streamed too"
    );

    // The persisted events tell the whole story, merged.
    let events = stack.events(&task_id).await;
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "seq is gap-free from 1"
    );
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "job_state",
            "job_state",
            "movement",
            "message",
            "message",
            "message",
            "tool_call",
            "tool_result",
            "message",
            "tool_call",
            "tool_result",
            "job_state"
        ],
        "queued, running, movement, system, user, assistant+call, result, assistant+complete, result, succeeded"
    );
    let first_answer = &events[5].payload;
    assert_eq!(first_answer["role"], "assistant");
    assert_eq!(
        first_answer["content"], "I will write the note now.",
        "the message event holds the merged text"
    );
    assert_eq!(
        first_answer["tool_calls"][0]["function"]["name"],
        "write_file"
    );
    assert!(
        first_answer["usage"]["promptTokens"].as_u64().unwrap_or(0) > 0,
        "usage is recorded"
    );
    let call = &events[6].payload;
    assert_eq!(call["name"], "write_file");
    assert_eq!(
        call["message_seq"], events[5].seq,
        "the tool call links to the message that proposed it"
    );
    let result = &events[7].payload;
    assert_eq!(result["call_id"], call["call_id"]);
    assert_eq!(result["is_error"], false);
    assert_eq!(
        result["content"],
        format!("wrote {} bytes to notes/note.txt", NOTE.len())
    );
    assert_eq!(events[11].payload["result"], "Wrote notes/note.txt");
    assert_eq!(events[11].kind, EventKind::JobState);
    let second_request_cache = events[8].payload["usage"]["cachedPromptTokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        second_request_cache > 0,
        "the second request reused the first one's prefix"
    );

    let done = stack.task(&task_id).await.task.latest_job.expect("a job");
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(done.result.as_deref(), Some("Wrote notes/note.txt"));
    assert_eq!(done.attempt, 1);

    let written = std::fs::read_to_string(stack.workspace(&task_id).join("notes/note.txt"))
        .expect("the file exists");
    assert_eq!(
        written, NOTE,
        "the tool-runner wrote the file in the task's workspace"
    );

    let (headers, body) = tokio::time::timeout(Duration::from_secs(15), hooks.recv())
        .await
        .expect("a webhook arrives")
        .expect("receiver open");
    verify_signature(&secret, &headers, &body);
    let payload: Value = serde_json::from_slice(&body).expect("webhook body is JSON");
    assert_eq!(payload["type"], "task.succeeded");
    assert_eq!(payload["data"]["task_id"], task_id.as_str());
    assert_eq!(payload["data"]["result"], "Wrote notes/note.txt");
    assert_eq!(payload["data"]["owner"], "alice");
    let typed: maestro_domain::notification::Notification =
        serde_json::from_value(payload.clone()).expect("the documented notification shape");
    assert_eq!(typed.data.status, JobStatus::Succeeded);
    assert_eq!(typed.data.task_id.to_string(), task_id);
    assert!(
        typed.data.event_seq > 0 && typed.data.attempt == 1,
        "{typed:?}"
    );
    assert!(
        (chrono::Utc::now() - typed.timestamp).num_seconds().abs() < 300,
        "the timestamp is the event's: {typed:?}"
    );

    let message = tokio::time::timeout(Duration::from_secs(10), notify.next())
        .await
        .expect("a notification on NATS")
        .expect("subscription open");
    let published: Value = serde_json::from_slice(&message.payload).expect("notification JSON");
    assert_eq!(
        published, payload,
        "NATS subscribers get the same notification as webhooks"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), hooks.recv())
            .await
            .is_err(),
        "exactly one webhook for one notification"
    );
}
