//! The inbox, the activity feed and webhooks under failure (docs/notifications.md), against
//! the whole stack: task outcomes reach their owner's inbox only, pages and filters and read
//! marks work, the inbox stream resumes after `Last-Event-ID` without repeating or skipping;
//! a receiver that answers 500, asks to wait with `Retry-After`, times out or is down gets
//! retries, then the delivery is dead-lettered where its owner sees it and can be redelivered,
//! and a subscription that keeps failing is disabled with an inbox item saying so.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use maestro_testkit::{SseClient, Stack, StackOptions};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::Mutex;

fn scenarios() -> Value {
    json!({"scenarios": [
        {
            "name": "quick",
            "match": "quick",
            "turns": [{"text": "Done.", "tool_calls": [{"name": "complete", "arguments": {"result": "ok"}}]}]
        }
    ]})
}

async fn call(stack: &Stack, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    stack
        .api(method.clone(), path, body.as_ref())
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"))
}

/// The inbox page at `path`, once it holds `n` items.
async fn inbox_with(stack: &Stack, path: &str, n: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, page) = call(stack, Method::GET, path, None).await;
        assert_eq!(status, 200, "{page}");
        let listed = page["items"].as_array().map_or(0, Vec::len);
        // The unread count is read just after the page: wait until it caught up too.
        let unread = page["unread"].as_u64().unwrap_or(0) as usize;
        if (listed >= n && (unread >= n || path.contains("type="))) || Instant::now() > deadline {
            return page;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| i["id"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_pages_filters_marks_and_streams_an_owners_notifications() {
    let stack = Stack::up(StackOptions::new(scenarios())).await;
    let url = stack.url("/api/local/inbox/stream");
    let mut live = SseClient::connect(&stack.http, &url, &stack.token, None)
        .await
        .expect("stream");
    let mut tasks = Vec::new();
    for n in 0..3 {
        let task = stack
            .run(&json!({"instruction": format!("quick {n}")}))
            .await;
        tasks.push(task.task.id.to_string());
    }
    let page = inbox_with(&stack, "/api/local/inbox", 3).await;
    assert_eq!(page["unread"], 3, "{page}");
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 3);
    let order: Vec<&str> = items
        .iter()
        .map(|i| i["task_id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(order, [&tasks[2], &tasks[1], &tasks[0]], "newest first");
    assert!(
        items
            .iter()
            .all(|i| i["type"] == "task.succeeded" && i["read"] == false)
    );

    // The stream told the same three, in order.
    let mut streamed = Vec::new();
    while streamed.len() < 3 {
        let item = live
            .next(Duration::from_secs(10))
            .await
            .expect("a streamed item");
        assert_eq!(item.event, "notification");
        assert_eq!(
            item.id, item.data["stream_id"],
            "the SSE id is the item's stream_id"
        );
        streamed.push(item);
    }
    let streamed_tasks: Vec<&str> = streamed
        .iter()
        .map(|i| i.data["task_id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(streamed_tasks, [&tasks[0], &tasks[1], &tasks[2]]);

    // Pages, filters.
    let (_, first) = call(&stack, Method::GET, "/api/local/inbox?limit=2", None).await;
    assert_eq!(ids(&first).len(), 2);
    let before = first["next_before"].as_str().expect("a next page");
    let (_, second) = call(
        &stack,
        Method::GET,
        &format!("/api/local/inbox?limit=2&before={before}"),
        None,
    )
    .await;
    assert_eq!(ids(&second), [items[2]["id"].as_str().unwrap_or("")]);
    assert!(second.get("next_before").is_none());
    let (_, one) = call(
        &stack,
        Method::GET,
        &format!("/api/local/inbox?task_id={}", tasks[1]),
        None,
    )
    .await;
    assert_eq!(ids(&one), [items[1]["id"].as_str().unwrap_or("")]);
    let (_, none) = call(
        &stack,
        Method::GET,
        "/api/local/inbox?type=task.failed",
        None,
    )
    .await;
    assert_eq!(ids(&none).len(), 0);
    for bad in [
        "?type=nope",
        "?limit=0",
        "?task_id=x",
        "?before=x",
        "?colour=red",
    ] {
        let (status, body) =
            call(&stack, Method::GET, &format!("/api/local/inbox{bad}"), None).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_query")),
            "{bad}"
        );
    }

    // Another owner sees none of it and cannot mark it.
    let bob = stack.bob();
    let (_, bobs) = bob
        .api(Method::GET, "/api/local/inbox", None)
        .await
        .expect("answer");
    assert_eq!(
        (bobs["items"].clone(), bobs["unread"].clone()),
        (json!([]), json!(0))
    );
    let first_id = items[2]["id"].as_str().expect("id");
    let (status, _) = bob
        .api(
            Method::POST,
            &format!("/api/local/inbox/{first_id}/read"),
            None,
        )
        .await
        .expect("answer");
    assert_eq!(status, 404);

    // Read marks.
    let (status, marked) = call(
        &stack,
        Method::POST,
        &format!("/api/local/inbox/{first_id}/read"),
        None,
    )
    .await;
    assert_eq!((status, marked["unread"].clone()), (200, json!(2)));
    let (_, again) = call(
        &stack,
        Method::POST,
        &format!("/api/local/inbox/{first_id}/read"),
        None,
    )
    .await;
    assert_eq!(
        (again["marked"].clone(), again["unread"].clone()),
        (json!(0), json!(2)),
        "marking twice changes nothing"
    );
    let (_, unread) = call(&stack, Method::GET, "/api/local/inbox?unread=true", None).await;
    assert_eq!(ids(&unread).len(), 2);
    let up_to = items[1]["id"].as_str().expect("id");
    let (_, some) = call(
        &stack,
        Method::POST,
        "/api/local/inbox/read-all",
        Some(json!({"up_to": up_to})),
    )
    .await;
    assert_eq!(
        (some["marked"].clone(), some["unread"].clone()),
        (json!(1), json!(1)),
        "only up to the one seen"
    );
    let (_, all) = call(&stack, Method::POST, "/api/local/inbox/read-all", None).await;
    assert_eq!(
        (all["marked"].clone(), all["unread"].clone()),
        (json!(1), json!(0))
    );

    // Resume after the second streamed item: the third, then a new one, and nothing twice.
    drop(live);
    let resume = streamed[1].id.clone();
    let mut resumed = SseClient::connect(&stack.http, &url, &stack.token, Some(&resume))
        .await
        .expect("stream");
    let third = resumed
        .next(Duration::from_secs(10))
        .await
        .expect("the third again");
    assert_eq!(third.id, streamed[2].id);
    let fourth = stack.run(&json!({"instruction": "quick 3"})).await;
    let next = resumed
        .next(Duration::from_secs(10))
        .await
        .expect("the new one");
    assert_eq!(next.data["task_id"], fourth.task.id.to_string());
    assert!(
        resumed.next(Duration::from_millis(600)).await.is_none(),
        "nothing repeated"
    );
    let mut bobs = SseClient::connect(&stack.http, &url, &stack.other_token, None)
        .await
        .expect("bob's stream");
    stack.run(&json!({"instruction": "quick 4"})).await;
    assert!(
        bobs.next(Duration::from_millis(1500)).await.is_none(),
        "bob hears nothing of alice's"
    );
    let (status, _) = call(
        &stack,
        Method::GET,
        "/api/local/inbox/stream?after=garbage",
        None,
    )
    .await;
    assert_eq!(status, 400);

    // The activity feed: the tasks' lives across tasks, newest first.
    let (_, activity) = call(&stack, Method::GET, "/api/local/activity?limit=100", None).await;
    let feed = activity["items"].as_array().expect("items");
    let of_first: Vec<&str> = feed
        .iter()
        .filter(|i| i["task_id"] == tasks[0].as_str())
        .map(|i| i["what"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(of_first, ["succeeded", "started", "created"], "{feed:?}");
    let (_, page) = call(&stack, Method::GET, "/api/local/activity?limit=2", None).await;
    let before = page["next_before"].as_str().expect("a next page");
    let (_, next) = call(
        &stack,
        Method::GET,
        &format!("/api/local/activity?limit=2&before={before}"),
        None,
    )
    .await;
    assert_eq!(
        next["items"][0], feed[2],
        "pages continue where they stopped"
    );
    let (_, none) = bob
        .api(Method::GET, "/api/local/activity", None)
        .await
        .expect("answer");
    assert_eq!(none["items"], json!([]));
}

/// What the receiver does with the requests it gets, in order; then it answers 200.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Status(u16),
    RetryAfter(u64),
    Hang,
    /// Answer 200 after this many milliseconds.
    Slow(u64),
}

struct Receiver {
    url: String,
    hits: Arc<Mutex<Vec<Instant>>>,
}

async fn receiver(script: Vec<Answer>) -> Receiver {
    let hits = Arc::new(Mutex::new(Vec::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let (h, c) = (hits.clone(), count.clone());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let (hits, count, script) = (h.clone(), c.clone(), script.clone());
            async move {
                hits.lock().await.push(Instant::now());
                let n = count.fetch_add(1, Ordering::SeqCst);
                match script.get(n) {
                    Some(Answer::Status(code)) => answer(*code, None),
                    Some(Answer::RetryAfter(seconds)) => answer(429, Some(seconds.to_string())),
                    Some(Answer::Hang) => {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        answer(200, None)
                    }
                    Some(Answer::Slow(ms)) => {
                        tokio::time::sleep(Duration::from_millis(*ms)).await;
                        answer(200, None)
                    }
                    None => answer(200, None),
                }
            }
        }),
    );
    let url = format!("{}/hook", maestro_testkit::serve(app).await);
    Receiver { url, hits }
}

fn answer(status: u16, retry_after: Option<String>) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match retry_after {
        Some(value) => (status, [("retry-after", value)]).into_response(),
        None => status.into_response(),
    }
}

async fn deliveries(stack: &Stack, webhook: &str) -> Vec<Value> {
    let (status, page) = call(
        stack,
        Method::GET,
        &format!("/api/webhooks/{webhook}/deliveries"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["deliveries"].as_array().cloned().unwrap_or_default()
}

/// The subscription's deliveries once the first one is no longer pending.
async fn settled(stack: &Stack, webhook: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = deliveries(stack, webhook).await;
        if let Some(d) = found.first()
            && (d["status"] != "pending" || Instant::now() > deadline)
        {
            return d.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_receivers_get_retries_then_dead_letters_redelivery_and_disabling() {
    let options = StackOptions::new(scenarios())
        .env("WEBHOOK_MAX_ATTEMPTS", "3")
        .env("WEBHOOK_RETRY_BASE_MS", "100")
        .env("WEBHOOK_RETRY_MAX_MS", "2000")
        .env("WEBHOOK_TIMEOUT_MS", "500")
        .env("WEBHOOK_DISABLE_AFTER", "2");
    let stack = Stack::up(options).await;
    let subscribe = |url: String| {
        let stack = &stack;
        async move {
            let body = json!({"url": url, "event_types": ["task.succeeded"]});
            let (status, hook) = call(stack, Method::POST, "/api/webhooks", Some(body)).await;
            assert_eq!(status, 201, "{hook}");
            hook["id"].as_str().expect("id").to_owned()
        }
    };

    // 500, then a timeout, then 200: delivered on the third attempt.
    let flaky = receiver(vec![Answer::Status(500), Answer::Hang]).await;
    let flaky_hook = subscribe(flaky.url.clone()).await;
    stack.run(&json!({"instruction": "quick one"})).await;
    let delivered = settled(&stack, &flaky_hook).await;
    assert_eq!(
        (delivered["status"].as_str(), delivered["attempts"].as_i64()),
        (Some("delivered"), Some(3)),
        "{delivered}"
    );
    assert_eq!(flaky.hits.lock().await.len(), 3);
    call(
        &stack,
        Method::DELETE,
        &format!("/api/webhooks/{flaky_hook}"),
        None,
    )
    .await;

    // Retry-After: the next attempt waits as long as asked.
    let patient = receiver(vec![Answer::RetryAfter(2)]).await;
    let patient_hook = subscribe(patient.url.clone()).await;
    stack.run(&json!({"instruction": "quick two"})).await;
    let delivered = settled(&stack, &patient_hook).await;
    assert_eq!(delivered["status"], "delivered", "{delivered}");
    let hits = patient.hits.lock().await.clone();
    assert_eq!(hits.len(), 2);
    assert!(
        hits[1] - hits[0] >= Duration::from_millis(1900),
        "waited {:?}",
        hits[1] - hits[0]
    );
    call(
        &stack,
        Method::DELETE,
        &format!("/api/webhooks/{patient_hook}"),
        None,
    )
    .await;

    // A receiver that is down: three attempts, then dead-lettered (failed) with the reason.
    let down_url = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
        format!("http://{}/hook", listener.local_addr().expect("addr"))
    };
    let down_hook = subscribe(down_url).await;
    stack.run(&json!({"instruction": "quick three"})).await;
    let dead = settled(&stack, &down_hook).await;
    assert_eq!(
        (dead["status"].as_str(), dead["attempts"].as_i64()),
        (Some("failed"), Some(3)),
        "{dead}"
    );
    assert!(
        dead["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{dead}"
    );
    let (_, failed) = call(
        &stack,
        Method::GET,
        &format!("/api/webhooks/{down_hook}/deliveries?status=failed"),
        None,
    )
    .await;
    assert_eq!(failed["deliveries"].as_array().map(Vec::len), Some(1));
    let (_, hooks) = call(&stack, Method::GET, "/api/webhooks", None).await;
    let hook = hooks["webhooks"]
        .as_array()
        .expect("list")
        .iter()
        .find(|h| h["id"] == down_hook.as_str())
        .cloned()
        .expect("listed");
    assert_eq!(
        (
            hook["status"].as_str(),
            hook["consecutive_failures"].as_i64()
        ),
        (Some("active"), Some(1))
    );

    // A second failure in a row disables it, and the owner's inbox says so.
    stack.run(&json!({"instruction": "quick four"})).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let disabled = loop {
        let (_, hooks) = call(&stack, Method::GET, "/api/webhooks", None).await;
        let hook = hooks["webhooks"]
            .as_array()
            .expect("list")
            .iter()
            .find(|h| h["id"] == down_hook.as_str())
            .cloned()
            .expect("listed");
        if hook["status"] == "disabled" || Instant::now() > deadline {
            break hook;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(disabled["status"], "disabled", "{disabled}");
    assert!(
        disabled["disabled_reason"]
            .as_str()
            .is_some_and(|r| r.contains("2 deliveries")),
        "{disabled}"
    );
    let notice = inbox_with(&stack, "/api/local/inbox?type=webhook.disabled", 1).await;
    assert_eq!(
        notice["items"][0]["notification"]["data"]["webhook_id"],
        down_hook.as_str(),
        "{notice}"
    );

    // Bad redeliveries are refused; a good one, once the receiver is back, is delivered.
    let delivery = dead["id"].as_str().expect("id");
    let bob = stack.bob();
    let path = format!("/api/webhooks/{down_hook}/deliveries/{delivery}/redeliver");
    let (status, _) = bob.api(Method::POST, &path, None).await.expect("answer");
    assert_eq!(status, 404, "not bob's");
    let (status, _) = call(
        &stack,
        Method::POST,
        &format!(
            "/api/webhooks/{down_hook}/deliveries/{}/redeliver",
            uuid::Uuid::now_v7()
        ),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = call(
        &stack,
        Method::POST,
        &format!("/api/webhooks/{down_hook}/enable"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    // The same address, now answering.
    let back = receiver(vec![]).await;
    sqlx::query("UPDATE webhook_subscriptions SET url = $1 WHERE id = $2::uuid")
        .bind(&back.url)
        .bind(&down_hook)
        .execute(&stack.db.pool)
        .await
        .expect("point the subscription at the receiver");
    let (status, _) = call(&stack, Method::POST, &path, None).await;
    assert_eq!(status, 202);
    let deadline = Instant::now() + Duration::from_secs(20);
    let redelivered = loop {
        let found = deliveries(&stack, &down_hook).await;
        let d = found
            .iter()
            .find(|d| d["id"] == delivery)
            .cloned()
            .expect("the delivery");
        if d["status"] == "delivered" || Instant::now() > deadline {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (
            redelivered["status"].as_str(),
            redelivered["redeliveries"].as_i64()
        ),
        (Some("delivered"), Some(1)),
        "{redelivered}"
    );
    assert_eq!(back.hits.lock().await.len(), 1);
}

/// A second copy of a delivery's message — what the relay publishes when it sends a batch
/// again after Postgres came back, past the stream's duplicate window — is not POSTed while
/// the first is being sent, nor after it was delivered: the delivery is held by its sender
/// (docs/notifications.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_copy_of_a_delivery_is_not_posted_while_the_first_is_sent() {
    let stack = Stack::up(StackOptions::new(scenarios()).env("WEBHOOK_TIMEOUT_MS", "3000")).await;
    let slow = receiver(vec![Answer::Slow(1500)]).await;
    let body = json!({"url": slow.url, "event_types": ["task.succeeded"]});
    let (status, hook) = call(&stack, Method::POST, "/api/webhooks", Some(body)).await;
    assert_eq!(status, 201, "{hook}");
    let hook = hook["id"].as_str().expect("id").to_owned();
    stack.run(&json!({"instruction": "quick copy"})).await;

    // The first POST is in flight (the receiver takes 1.5 s to answer) ...
    let deadline = Instant::now() + Duration::from_secs(20);
    while slow.hits.lock().await.is_empty() {
        assert!(Instant::now() < deadline, "the delivery never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let found = deliveries(&stack, &hook).await;
    assert_eq!(found.len(), 1, "{found:?}");
    let delivery_id = found[0]["id"].as_str().expect("id").to_owned();
    // ... when a copy of its message arrives under another message id.
    let subjects = maestro_messaging::Subjects::new(&stack.prefix).expect("the prefix");
    let js = async_nats::jetstream::new(stack.nats.client().await.expect("connect to NATS"));
    maestro_messaging::publish::publish_json(
        &js,
        subjects.webhook_deliver(),
        &format!("copy:{delivery_id}"),
        &json!({"delivery_id": delivery_id}),
    )
    .await
    .expect("the copy is stored");

    let delivered = settled(&stack, &hook).await;
    assert_eq!(
        (delivered["status"].as_str(), delivered["attempts"].as_i64()),
        (Some("delivered"), Some(1)),
        "{delivered}"
    );
    // The copy was handled (acknowledged: the work queue is empty), after the hold of the
    // first (3 s timeout and 2 s) at the latest, and sent nothing.
    let mut stream = js
        .get_stream(subjects.stream(maestro_messaging::setup::WEBHOOKS))
        .await
        .expect("the webhooks stream");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = stream.info().await.expect("stream info").state.messages;
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} delivery messages never acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(slow.hits.lock().await.len(), 1, "the copy was POSTed too");
    let again = deliveries(&stack, &hook).await;
    assert_eq!(again[0]["attempts"], 1, "{again:?}");
}
