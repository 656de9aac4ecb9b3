//! Live streams that survive reconnects.
//!
//! - A client that drops its connection hundreds of times at random and reconnects with
//!   `Last-Event-ID` rebuilds exactly the persisted events (no gap, no duplicate, order kept)
//!   and every streamed message — also when the worker is killed and the job redelivered.
//! - `?after=`, keep-alive comments, resuming from a delta that aged out (the merged message
//!   comes instead), and a client that stops reading being disconnected (bounded memory) and
//!   resuming without a gap.
//! - Many clients of one task share the gateway's one subscription to it; a client that falls
//!   behind that shared feed fills the gap from Postgres and the deltas stream.

use std::collections::BTreeMap;
use std::time::Duration;

use maestro_domain::{Event, EventKind, JobStatus, StreamId};
use maestro_testkit::{Service, SseItem, Stack, StackOptions, TaskExt, WAIT};
use serde_json::{Value, json};

fn text_of(turn: usize) -> String {
    format!("Turn {turn}: ") + &"streaming one character at a time, ".repeat(14)
}

/// Twelve turns of ~500 characters streamed one per delta (over 5,000 deltas), each turn
/// with a tool call (a different one each time: the same call five times in a row is a loop
/// the worker stops), then `complete`.
fn long_scenario() -> Value {
    let mut turns: Vec<Value> = (0..12)
        .map(|i| {
            json!({"text": text_of(i), "chunk_chars": 1, "chunk_delay_ms": 1,
                   "tool_calls": [{"name": "glob", "arguments": {"pattern": format!("turn{i}/*")}}]})
        })
        .collect();
    turns.push(json!({"text": "All done.", "tool_calls": [{"name": "complete", "arguments": {"result": "streamed"}}]}));
    json!({"scenarios": [{"name": "long", "turns": turns}]})
}

/// Read the task's stream to the end of the job, dropping the connection after a random
/// number of items each time and resuming with `Last-Event-ID`. Calls `between` after every
/// reconnect (with the count so far).
async fn read_with_reconnects(
    stack: &mut Stack,
    task_id: impl std::fmt::Display,
    mut between: impl AsyncFnMut(&mut Stack, usize),
) -> (Vec<SseItem>, usize) {
    let mut items: Vec<SseItem> = Vec::new();
    let mut reconnects = 0;
    let mut seed: u64 = 0x5eed_cafe;
    loop {
        let last = items.last().map(|i| i.id.clone());
        let mut stream = stack.stream(&task_id, last.as_deref()).await;
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let take = 1 + (seed % 40) as usize;
        for _ in 0..take {
            let Some(item) = stream.next(Duration::from_secs(20)).await else {
                break;
            };
            let status = item.data["payload"]["status"].clone();
            let done = item.event == "job_state" && status == "succeeded";
            assert!(
                item.event != "job_state" || status != "failed",
                "the job failed: {}",
                item.data
            );
            items.push(item);
            if done {
                return (items, reconnects);
            }
        }
        drop(stream);
        reconnects += 1;
        between(stack, reconnects).await;
        assert!(reconnects < 5000, "the job never finished");
    }
}

/// What a reconnecting client must have seen: ids strictly increasing, exactly the persisted
/// events, and for every message the streamed text a prefix of (`exact`: equal to) its content.
fn check_reconstruction(items: &[SseItem], persisted: &[Event], exact: bool) {
    check_stream(items, persisted, exact, 5000);
}

/// [`check_reconstruction`] with at least `min_deltas` characters of streamed text.
fn check_stream(items: &[SseItem], persisted: &[Event], exact: bool, min_deltas: usize) {
    let ids: Vec<StreamId> = items
        .iter()
        .map(|i| i.id.parse().expect("stream id"))
        .collect();
    for pair in ids.windows(2) {
        assert!(
            pair[0] < pair[1],
            "ids strictly increase: {} then {}",
            pair[0],
            pair[1]
        );
    }
    let received: Vec<&Value> = items
        .iter()
        .filter(|i| i.event != "delta")
        .map(|i| &i.data)
        .collect();
    assert_eq!(
        received.len(),
        persisted.len(),
        "every persisted event, once"
    );
    for (got, want) in received.iter().zip(persisted) {
        let want = serde_json::to_value(want).expect("json");
        assert_eq!(
            **got, want,
            "the stream carries the persisted events exactly"
        );
    }
    let mut texts: BTreeMap<i64, String> = BTreeMap::new();
    for item in items
        .iter()
        .filter(|i| i.event == "delta" && i.data["type"] == "text")
    {
        let after: StreamId = item.id.parse().expect("id");
        texts
            .entry(after.seq)
            .or_default()
            .push_str(item.data["text"].as_str().unwrap_or_default());
    }
    let mut total = 0;
    for (after_seq, text) in &texts {
        let message = persisted
            .iter()
            .find(|e| {
                e.seq > *after_seq
                    && e.kind == EventKind::Message
                    && e.payload["role"] == "assistant"
            })
            .expect("a message follows every delta");
        let content = message.payload["content"].as_str().unwrap_or_default();
        assert!(
            content.starts_with(text.as_str()),
            "deltas after {after_seq} are a prefix of the message"
        );
        if exact {
            assert_eq!(
                text, content,
                "deltas after {after_seq} rebuild the whole message"
            );
        }
        total += text.chars().count();
    }
    assert!(
        total >= min_deltas,
        "at least {min_deltas} deltas were streamed: {total}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reconnecting_hundreds_of_times_misses_nothing_and_sees_nothing_twice() {
    let mut stack = Stack::up(StackOptions::new(long_scenario())).await;
    let id = stack
        .new_task(&json!({"instruction": "stream a lot"}))
        .await;
    let (items, reconnects) = read_with_reconnects(&mut stack, id, async |_, _| {}).await;
    assert!(reconnects >= 200, "reconnected {reconnects} times");
    let persisted = stack.events(id).await;
    check_reconstruction(&items, &persisted, true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_across_a_worker_crash_and_redelivery_misses_nothing() {
    let options = StackOptions::new(long_scenario())
        .env("JOB_ACK_WAIT_MS", "1500")
        .worker_named("worker-a");
    let mut stack = Stack::up(options).await;
    let id = stack
        .new_task(&json!({"instruction": "stream a lot"}))
        .await;
    let (items, reconnects) = read_with_reconnects(&mut stack, id, async |stack: &mut Stack, n| {
        if n == 60 {
            stack.kill("worker-a").await;
            stack.add(Service::Worker, "worker-b").await;
        }
    })
    .await;
    assert!(
        reconnects >= 60,
        "the worker died mid-stream: {reconnects} reconnects"
    );
    let persisted = stack.events(id).await;
    let claims = persisted
        .iter()
        .filter(|e| e.payload["status"] == "running")
        .count();
    assert_eq!(claims, 2, "the job was redelivered to worker b");
    check_reconstruction(&items, &persisted, false);
}

/// The stream ids of the persisted events after `seq`.
fn ids_after(persisted: &[Event], seq: i64) -> Vec<String> {
    persisted
        .iter()
        .filter(|e| e.seq > seq)
        .map(|e| e.seq.to_string())
        .collect()
}

/// The rest of the stream contract: `?after=` for clients that cannot set `Last-Event-ID`,
/// keep-alive comments on an idle stream, and a client resuming from a delta that has aged
/// out of the deltas stream getting the merged message instead (whole, and no delta).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_keep_alives_and_aged_out_deltas() {
    let scenario = json!({"scenarios": [{"name": "short", "turns": [
        {"text": "Looking around the workspace now.", "chunk_chars": 3, "delay_ms": 400, "chunk_delay_ms": 20,
         "tool_calls": [{"name": "glob", "arguments": {"pattern": "*"}}]},
        {"text": "Done.", "tool_calls": [{"name": "complete", "arguments": {"result": "ok"}}]}
    ]}]});
    let options = StackOptions::new(scenario)
        .env("SSE_KEEPALIVE_MS", "200")
        .env("DELTAS_RETENTION_MS", "1000");
    let stack = Stack::up(options).await;
    let id = stack.new_task(&json!({"instruction": "look around"})).await;
    let mut live = stack.stream(id, None).await;
    let items = live
        .read_until(WAIT, |i| {
            i.event == "job_state" && i.data["payload"]["status"] == "succeeded"
        })
        .await;
    let delta = items
        .iter()
        .find(|i| i.event == "delta")
        .expect("a delta was streamed live");
    let persisted = stack.events(id).await;

    // `?after=`: exactly the persisted events after that seq.
    let after = 2;
    let url = stack.url(&format!("/api/local/tasks/{id}/stream?after={after}"));
    let mut resumed = maestro_testkit::SseClient::connect(&stack.http, &url, &stack.token, None)
        .await
        .expect("connect with ?after=");
    let replayed = resumed
        .read_until(Duration::from_secs(3), |i| {
            i.event == "job_state" && i.data["payload"]["status"] == "succeeded"
        })
        .await;
    let ids: Vec<String> = replayed.iter().map(|i| i.id.clone()).collect();
    assert_eq!(
        ids,
        ids_after(&persisted, after),
        "every later event once, in order, and no delta"
    );

    // Keep-alive comments on the idle stream.
    let response = stack
        .http
        .get(stack.url(&format!("/api/local/tasks/{id}/stream?after=1000000")))
        .bearer_auth(&stack.token)
        .send()
        .await
        .expect("raw stream");
    let mut body = response.bytes_stream();
    let mut raw = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(Ok(chunk))) =
        tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut body)).await
    {
        raw.extend_from_slice(&chunk);
    }
    let comments = String::from_utf8_lossy(&raw)
        .lines()
        .filter(|l| l.starts_with(':'))
        .count();
    assert!(comments >= 3, "keep-alive comments every 200 ms: {raw:?}");

    // Resume from a delta after the deltas aged out (1 s retention): the merged message
    // event comes instead, whole, and no delta.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut late = stack.stream(id, Some(&delta.id)).await;
    let rest = late
        .read_until(Duration::from_secs(3), |i| {
            i.event == "job_state" && i.data["payload"]["status"] == "succeeded"
        })
        .await;
    assert!(rest.iter().all(|i| i.event != "delta"), "{rest:?}");
    let after_seq = delta.id.parse::<StreamId>().expect("stream id").seq;
    let ids: Vec<String> = rest.iter().map(|i| i.id.clone()).collect();
    assert_eq!(
        ids,
        ids_after(&persisted, after_seq),
        "the events after the delta's place, once each"
    );
    let message = rest
        .iter()
        .find(|i| i.event == "message" && i.data["payload"]["role"] == "assistant")
        .expect("the message the delta belonged to");
    assert_eq!(
        message.data["payload"]["content"], "Looking around the workspace now.",
        "whole: {message:?}"
    );
}

/// The deltas stream holds at most `DELTAS_MAX_BYTES`, the oldest evicted first. A client
/// that connects while a message streams, after its first deltas were evicted, gets none of
/// that message's text rather than text with its start missing (and the gateway does not
/// replay again at every later delta): the message event brings it whole. A client that
/// followed from the start has every delta live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_first_deltas_were_evicted_comes_whole_from_its_event() {
    // No repeats: text from the middle of it is never a prefix of it.
    let text: String = (0..120).map(|i| format!("w{i} ")).collect();
    let scenario = json!({"scenarios": [{"name": "evicting", "turns": [
        {"text": text, "chunk_chars": 1, "chunk_delay_ms": 4, "delay_ms": 300,
         "tool_calls": [{"name": "complete", "arguments": {"result": "ok"}}]}
    ]}]});
    // About 20 deltas fit: by the 200th the first are gone. The reply starts 300 ms in, when
    // the first client is surely following.
    let stack = Stack::up(StackOptions::new(scenario).env("DELTAS_MAX_BYTES", "8192")).await;
    let id = stack.new_task(&json!({"instruction": "stream"})).await;
    let succeeded =
        |i: &SseItem| i.event == "job_state" && i.data["payload"]["status"] == "succeeded";

    let mut first = stack.stream(id, None).await;
    let mut seen = Vec::new();
    while seen
        .iter()
        .filter(|i: &&SseItem| i.event == "delta")
        .count()
        < 200
    {
        let item = first
            .next(Duration::from_secs(30))
            .await
            .expect("the message streams");
        assert!(!succeeded(&item), "the message ended before 200 deltas");
        seen.push(item);
    }
    let mut late = stack.stream(id, None).await;
    let late_items = late.read_until(WAIT, succeeded).await;
    seen.extend(first.read_until(WAIT, succeeded).await);
    let persisted = stack.events(id).await;

    check_stream(&seen, &persisted, true, text.len());
    check_stream(&late_items, &persisted, false, 0);
    assert!(
        late_items.iter().all(|i| i.event != "delta"),
        "no delta of a message whose start is gone: {:?}",
        late_items.iter().find(|i| i.event == "delta")
    );
    let message = late_items
        .iter()
        .find(|i| i.event == "message" && i.data["payload"]["role"] == "assistant")
        .expect("the message, from its event");
    assert_eq!(message.data["payload"]["content"], text.as_str());
    // Counted once, for the late client's one message (operators see the bound is too small).
    let gaps = stack
        .scrape("api-gateway")
        .await
        .lines()
        .filter(|line| line.starts_with("maestro_sse_delta_gaps_total{"))
        .find_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok());
    assert_eq!(gaps, Some(1.0));
}

/// A client that stops reading does not make the gateway buffer without limit: once the TCP
/// buffers and `SSE_BUFFER` items are full and nothing moves for `SSE_STALL_MS`, it is
/// disconnected — and it resumes from the last item it read, missing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_disconnected_and_can_resume() {
    // ~8 MB of events and deltas (more than the TCP buffers hold): 16 turns of 500 KB text,
    // streamed in 16 KB deltas.
    let text = "A slow reader must not hold the gateway's memory. ".repeat(10_000);
    let mut turns: Vec<Value> = (0..16)
        .map(|i| {
            json!({"text": text, "chunk_chars": 16_384,
                   "tool_calls": [{"name": "glob", "arguments": {"pattern": format!("slow{i}/*")}}]})
        })
        .collect();
    turns.push(json!({"tool_calls": [{"name": "complete", "arguments": {"result": "flooded"}}]}));
    let options = StackOptions::new(json!({"scenarios": [{"name": "flood", "turns": turns}]}))
        .env("SSE_BUFFER", "4")
        .env("SSE_STALL_MS", "1000")
        .env("MAX_PROMPT_TOKENS", "10000000");
    let stack = Stack::up(options).await;
    let id = stack
        .new_task(&json!({"instruction": "flood the stream"}))
        .await;
    // Connect and read nothing while the job floods the stream.
    let response = stack
        .http
        .get(stack.url(&format!("/api/local/tasks/{id}/stream")))
        .bearer_auth(&stack.token)
        .send()
        .await
        .expect("stream");
    let done = stack
        .wait_within(
            id,
            &[JobStatus::Succeeded, JobStatus::Failed],
            Duration::from_secs(120),
        )
        .await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Now read what was buffered: the stream ends (the gateway let go) instead of staying
    // open with keep-alives, and it ends before the job's last event.
    let mut body = response.bytes_stream();
    let mut raw = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let ended = loop {
        match tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut body)).await {
            Ok(Some(Ok(chunk))) => raw.extend_from_slice(&chunk),
            Ok(Some(Err(_)) | None) => break true,
            // Still open (a connection kept alive would go on forever).
            Err(_) => break false,
        }
    };
    assert!(ended, "the stalled client was disconnected");
    let text = String::from_utf8_lossy(&raw);
    assert!(
        !text.contains("\"status\":\"succeeded\""),
        "it was cut off before the end"
    );
    let last_id = text
        .split("\n\n")
        .filter(|block| block.contains("\ndata: ") || block.starts_with("data: "))
        .filter_map(|block| {
            block
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .map(str::to_owned)
        })
        .last()
        .expect("some items arrived before the stall");
    // Resume from there: everything after it, once, to the end.
    let mut resumed = stack.stream(id, Some(&last_id)).await;
    let rest = resumed
        .read_until(Duration::from_secs(60), |i| {
            i.event == "job_state" && i.data["payload"]["status"] == "succeeded"
        })
        .await;
    let persisted = stack.events(id).await;
    let after = last_id.parse::<StreamId>().expect("stream id").seq;
    let expected = ids_after(&persisted, after);
    let got: Vec<String> = rest
        .iter()
        .filter(|i| i.event != "delta")
        .map(|i| i.id.clone())
        .collect();
    assert_eq!(got, expected, "the rest of the events, once each");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_sharing_a_feed_they_keep_falling_behind_miss_nothing() {
    // A backlog of 2: every client lags the shared feed again and again.
    let options = StackOptions::new(long_scenario()).env("SSE_HUB_BACKLOG", "2");
    let stack = Stack::up(options).await;
    let id = stack
        .new_task(&json!({"instruction": "stream a lot"}))
        .await;
    let readers = (0..4).map(|_| {
        let stack = &stack;
        async move {
            let mut stream = stack.stream(&id, None).await;
            let mut items = Vec::new();
            while let Some(item) = stream.next(Duration::from_secs(30)).await {
                let done =
                    item.event == "job_state" && item.data["payload"]["status"] == "succeeded";
                items.push(item);
                if done {
                    break;
                }
            }
            items
        }
    });
    let all = futures::future::join_all(readers).await;
    let persisted = stack.events(id).await;
    // Every event exactly once, in order; the streamed text a prefix of each message (a client
    // always behind skips text past a hole it cannot fill yet: the message event brings it).
    for items in &all {
        check_stream(items, &persisted, false, 1);
    }
}
