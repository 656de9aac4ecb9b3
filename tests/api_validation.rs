//! The API's edge: every request is authenticated, a task is visible to its owner only, and
//! bad input gets a clear 4xx JSON error (`{"error": {"code", "message"}}`) and writes
//! nothing. Also idempotent creation, pagination and webhook subscription management.
//! Only the gateway runs here; no job is executed.

use maestro_testkit::{Service, Stack, StackOptions};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn gateway_only() -> Stack {
    let mut options =
        StackOptions::new(json!({"scenarios": []})).env("MAX_INSTRUCTION_BYTES", "1000");
    options.services = vec![Service::ApiGateway];
    Stack::up(options).await
}

/// Send a request and return the status and JSON body.
async fn call(
    stack: &Stack,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = stack.http.request(method, stack.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_owned());
    }
    let response = request.send().await.expect("request sent");
    let status = response.status();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn assert_error(
    label: &str,
    (status, body): &(StatusCode, Value),
    want_status: u16,
    want_code: &str,
) {
    assert_eq!(status.as_u16(), want_status, "{label}: status ({body})");
    assert_eq!(body["error"]["code"], want_code, "{label}: code ({body})");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{label}: a human-readable message ({body})"
    );
}

async fn count_rows(stack: &Stack) -> i64 {
    let query = "SELECT (SELECT count(*) FROM tasks) + (SELECT count(*) FROM jobs) + \
                 (SELECT count(*) FROM events) + (SELECT count(*) FROM comments) + \
                 (SELECT count(*) FROM outbox) + (SELECT count(*) FROM webhook_subscriptions)";
    sqlx::query_scalar::<_, i64>(query)
        .fetch_one(&stack.db.pool)
        .await
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_json_errors_and_write_nothing() {
    let stack = gateway_only().await;
    let token = Some(stack.token.as_str());
    let tasks = "/api/local/tasks";
    let valid = r#"{"instruction": "hello"}"#;

    for (label, auth) in [
        ("no token", None),
        ("wrong token", Some("not-a-valid-token")),
    ] {
        let answer = call(&stack, Method::POST, tasks, auth, Some(valid)).await;
        assert_error(label, &answer, 401, "unauthorized");
    }
    let no_bearer = stack
        .http
        .post(stack.url(tasks))
        .header("authorization", "Basic eDp5")
        .body(valid)
        .send()
        .await;
    assert_eq!(
        no_bearer.expect("sent").status(),
        401,
        "only bearer tokens are accepted"
    );

    let cases: Vec<(&str, String, u16, &str)> = vec![
        (
            "malformed JSON",
            r#"{"instruction": "#.to_owned(),
            400,
            "invalid_json",
        ),
        (
            "the fields as an array (serde would read a struct from one)",
            r#"["hello"]"#.to_owned(),
            422,
            "invalid_body",
        ),
        (
            "missing instruction",
            "{}".to_owned(),
            422,
            "invalid_request",
        ),
        (
            "instruction of the wrong type",
            r#"{"instruction": 5}"#.to_owned(),
            422,
            "invalid_request",
        ),
        (
            "blank instruction",
            r#"{"instruction": "   "}"#.to_owned(),
            422,
            "invalid_instruction",
        ),
        (
            "a NUL character in the instruction",
            r#"{"instruction": "hello \u0000 world"}"#.to_owned(),
            422,
            "invalid_text",
        ),
        (
            "unknown field",
            r#"{"instruction": "x", "colour": "red"}"#.to_owned(),
            422,
            "invalid_request",
        ),
        (
            "unknown piece",
            r#"{"instruction": "x", "piece": "nope"}"#.to_owned(),
            422,
            "unknown_piece",
        ),
        (
            "malformed model",
            r#"{"instruction": "x", "model": "a b"}"#.to_owned(),
            422,
            "invalid_model",
        ),
        (
            "instruction over the configured limit",
            json!({"instruction": "x".repeat(1001)}).to_string(),
            422,
            "instruction_too_long",
        ),
        (
            "body over 1 MiB",
            json!({"instruction": "x".repeat(1024 * 1024 + 10)}).to_string(),
            413,
            "payload_too_large",
        ),
    ];
    for (label, body, status, code) in &cases {
        let answer = call(&stack, Method::POST, tasks, token, Some(body)).await;
        assert_error(label, &answer, *status, code);
    }
    let nul = call(
        &stack,
        Method::POST,
        tasks,
        token,
        Some(r#"{"instruction": "a\u0000b"}"#),
    )
    .await;
    assert!(
        nul.1["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("instruction contains a NUL")),
        "the field is named: {:?}",
        nul.1
    );
    let no_json = stack
        .http
        .post(stack.url(tasks))
        .bearer_auth(&stack.token)
        .body(valid)
        .send()
        .await
        .expect("sent");
    assert_eq!(
        no_json.status(),
        415,
        "a body without a JSON content type is refused"
    );
    for (key, why) in [
        ("", "an empty Idempotency-Key is refused"),
        (
            "subtask:anything",
            "the keys of subtasks are not the client's",
        ),
    ] {
        let refused = stack
            .http
            .post(stack.url(tasks))
            .bearer_auth(&stack.token)
            .header("idempotency-key", key)
            .json(&json!({"instruction": "x"}))
            .send()
            .await
            .expect("sent");
        assert_eq!(refused.status(), 400, "{why}");
    }

    for path in [
        "/api/local/tasks/0190c0de-0000-7000-8000-000000000000".to_owned(),
        "/api/local/tasks/not-a-uuid".to_owned(),
        "/api/local/tasks/0190c0de-0000-7000-8000-000000000000/events".to_owned(),
        "/api/local/tasks/0190c0de-0000-7000-8000-000000000000/subtasks".to_owned(),
        "/api/local/tasks/0190c0de-0000-7000-8000-000000000000/stream".to_owned(),
        "/api/nothing-here".to_owned(),
    ] {
        let answer = call(&stack, Method::GET, &path, token, None).await;
        assert_error(&path, &answer, 404, "not_found");
    }
    let answer = call(&stack, Method::GET, "/api/local/tasks?limit=0", token, None).await;
    assert_error("limit 0", &answer, 400, "invalid_query");
    let long = "x".repeat(201);
    for query in ["state=sleeping", &format!("q={long}"), "q=a%00b"] {
        let path = format!("/api/local/tasks?{query}");
        let answer = call(&stack, Method::GET, &path, token, None).await;
        assert_error(&path, &answer, 400, "invalid_query");
    }

    assert_eq!(count_rows(&stack).await, 0, "no bad request wrote anything");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_private_idempotent_and_paginated() {
    let stack = gateway_only().await;
    let token = Some(stack.token.as_str());
    let other = Some(stack.other_token.as_str());

    let first = r#"{"instruction": "first"}"#;
    let created = call(&stack, Method::POST, "/api/local/tasks", token, Some(first)).await;
    assert_eq!(created.0, 201, "{}", created.1);
    let id = created.1["id"].as_str().expect("id").to_owned();
    assert_eq!(created.1["latest_job"]["status"], "queued");
    assert_eq!(
        created.1["links"]["stream"],
        format!("/api/local/tasks/{id}/stream")
    );

    for path in [
        format!("/api/local/tasks/{id}"),
        format!("/api/local/tasks/{id}/events"),
    ] {
        let answer = call(&stack, Method::GET, &path, other, None).await;
        assert_error("another owner's task", &answer, 404, "not_found");
        assert_eq!(
            call(&stack, Method::GET, &path, token, None).await.0,
            200,
            "the owner sees it"
        );
    }
    let bobs = call(&stack, Method::GET, "/api/local/tasks", other, None).await;
    assert_eq!(
        bobs.1["tasks"],
        json!([]),
        "bob's list does not show alice's task"
    );

    let events = call(
        &stack,
        Method::GET,
        &format!("/api/local/tasks/{id}/events?after=0"),
        token,
        None,
    )
    .await;
    assert_eq!(events.1["events"][0]["kind"], "job_state");
    assert_eq!(events.1["events"][0]["payload"]["status"], "queued");
    assert_eq!(events.1["next_after"], 1);
    let bad_after = call(
        &stack,
        Method::GET,
        &format!("/api/local/tasks/{id}/events?after=x"),
        token,
        None,
    )
    .await;
    assert_error("after is not a number", &bad_after, 400, "invalid_query");

    // Idempotency-Key: the same request returns the same task, a different one conflicts.
    let send = |body: Value| {
        stack
            .http
            .post(stack.url("/api/local/tasks"))
            .bearer_auth(&stack.token)
            .header("idempotency-key", "k-1")
            .json(&body)
            .send()
    };
    let first = send(json!({"instruction": "once"})).await.expect("sent");
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.expect("json");
    let again = send(json!({"instruction": "once"})).await.expect("sent");
    assert_eq!(
        again.status(),
        200,
        "a repeated request is answered, not re-executed"
    );
    assert_eq!(
        again
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    let again: Value = again.json().await.expect("json");
    assert_eq!(again["id"], first["id"], "same key, same task");
    let conflict = send(json!({"instruction": "something else"}))
        .await
        .expect("sent");
    assert_eq!(
        conflict.status(),
        409,
        "the key was used for another request"
    );
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&stack.db.pool)
        .await
        .expect("count");
    assert_eq!(
        jobs, 2,
        "one job per created task, none for the replay or the conflict"
    );

    // Pagination, newest first.
    let third = r#"{"instruction": "third"}"#;
    call(&stack, Method::POST, "/api/local/tasks", token, Some(third)).await;
    let page = call(&stack, Method::GET, "/api/local/tasks?limit=2", token, None)
        .await
        .1;
    let names: Vec<&str> = page["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["instruction"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, ["third", "once"]);
    let next = page["next_before"].as_str().expect("another page");
    let rest = call(
        &stack,
        Method::GET,
        &format!("/api/local/tasks?limit=2&before={next}"),
        token,
        None,
    )
    .await
    .1;
    assert_eq!(rest["tasks"][0]["instruction"], "first");
    assert!(rest.get("next_before").is_none(), "the last page says so");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_subscriptions_are_validated_private_and_deletable() {
    let stack = gateway_only().await;
    let token = Some(stack.token.as_str());
    let hooks = "/api/webhooks";
    for (label, body, code) in [
        ("not a URL", r#"{"url": "not a url"}"#, "invalid_url"),
        (
            "not http",
            r#"{"url": "ftp://example.com/x"}"#,
            "invalid_url",
        ),
        (
            "unknown type",
            r#"{"url": "http://127.0.0.1:1/h", "event_types": ["task.exploded"]}"#,
            "invalid_event_types",
        ),
        (
            "bad secret",
            r#"{"url": "http://127.0.0.1:1/h", "secret": "hunter2"}"#,
            "invalid_secret",
        ),
    ] {
        assert_error(
            label,
            &call(&stack, Method::POST, hooks, token, Some(body)).await,
            422,
            code,
        );
    }
    assert_eq!(
        count_rows(&stack).await,
        0,
        "refused subscriptions are not stored"
    );

    let created = call(
        &stack,
        Method::POST,
        hooks,
        token,
        Some(r#"{"url": "http://127.0.0.1:1/h"}"#),
    )
    .await;
    assert_eq!(created.0, 201);
    assert!(
        created.1["secret"]
            .as_str()
            .is_some_and(|s| s.starts_with("whsec_")),
        "a secret is generated"
    );
    assert_eq!(
        created.1["event_types"].as_array().map(Vec::len),
        Some(maestro_domain::notification::NotificationType::ALL.len()),
        "all types by default"
    );
    let id = created.1["id"].as_str().expect("id").to_owned();

    let listed = call(&stack, Method::GET, hooks, token, None).await.1;
    assert_eq!(listed["webhooks"][0]["id"], id.as_str());
    assert!(
        listed["webhooks"][0].get("secret").is_none(),
        "the secret is never shown again"
    );
    let bobs = call(
        &stack,
        Method::GET,
        hooks,
        Some(stack.other_token.as_str()),
        None,
    )
    .await
    .1;
    assert_eq!(bobs["webhooks"], json!([]));
    let path = format!("{hooks}/{id}");
    assert_error(
        "bob deletes alice's",
        &call(
            &stack,
            Method::DELETE,
            &path,
            Some(stack.other_token.as_str()),
            None,
        )
        .await,
        404,
        "not_found",
    );
    assert_eq!(
        call(&stack, Method::DELETE, &path, token, None).await.0,
        204
    );
    assert_error(
        "deleted twice",
        &call(&stack, Method::DELETE, &path, token, None).await,
        404,
        "not_found",
    );
    assert_eq!(
        call(&stack, Method::GET, hooks, token, None).await.1["webhooks"],
        json!([])
    );

    let health = call(&stack, Method::GET, "/healthz", None, None).await;
    assert_eq!(health.0, 200, "health needs no token");
    let ready = call(&stack, Method::GET, "/readyz", None, None).await;
    assert_eq!(
        ready.1,
        json!({"status": "ready", "checks": {"postgres": true, "nats": true}})
    );
}

/// A small deterministic generator of hostile JSON: the fields the routes read, with values of
/// every kind — odd text (NUL, control characters, lone surrogates' replacements, right-to-left
/// marks, very long), numbers out of range, nulls, nested arrays and objects.
struct Hostile(u64);

impl Hostile {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }

    fn text(&mut self) -> Value {
        let pieces = [
            "hello",
            "",
            " ",
            "\u{0}",
            "a\u{0}b",
            "\u{7}\u{1b}[2J",
            "\u{202e}evil",
            "\u{fffd}",
            "😀",
            "../../etc/passwd",
            "'; DROP TABLE tasks; --",
            "{\"nested\": 1}",
            "\\u0000",
            "auto",
            "chat",
            "approve",
            "deny",
            "once",
            "task",
            "http://127.0.0.1:1/x",
        ];
        let mut text = String::new();
        for _ in 0..(self.next() % 4) {
            text.push_str(self.pick(&pieces));
        }
        if self.next().is_multiple_of(10) {
            text.push_str(&"x".repeat((self.next() % 5000) as usize));
        }
        Value::String(text)
    }

    fn value(&mut self, depth: u32) -> Value {
        match self.next() % 8 {
            0 => Value::Null,
            1 => json!(self.next().is_multiple_of(2)),
            2 => json!(self.next() as i64),
            3 => json!(-1.5e308),
            4 if depth < 3 => Value::Array(
                (0..self.next() % 4)
                    .map(|_| self.value(depth + 1))
                    .collect(),
            ),
            5 if depth < 3 => self.object(depth + 1),
            _ => self.text(),
        }
    }

    fn object(&mut self, depth: u32) -> Value {
        let fields = [
            "instruction",
            "piece",
            "model",
            "start_movement",
            "body",
            "decision",
            "scope",
            "note",
            "arguments_hash",
            "url",
            "event_types",
            "token",
            "message",
            "parts",
            "text",
            "messageId",
            "role",
            "taskId",
            "contextId",
            "configuration",
            "metadata",
            "id",
        ];
        let mut object = serde_json::Map::new();
        for _ in 0..(self.next() % 6) {
            let key = self.pick(&fields).to_owned();
            object.insert(key, self.value(depth));
        }
        Value::Object(object)
    }
}

/// Hundreds of hostile bodies at every route that reads one: each gets a 2xx or a 4xx with the
/// API's error shape — never a 5xx, never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_never_earn_a_5xx() {
    let stack = gateway_only().await;
    let token = Some(stack.token.as_str());
    let (_, task) = call(
        &stack,
        Method::POST,
        "/api/local/tasks",
        token,
        Some(r#"{"instruction": "a target"}"#),
    )
    .await;
    let id = task["id"].as_str().expect("a task").to_owned();
    let rid = "0190c0de-0000-7000-8000-000000000000";
    let routes = [
        (Method::POST, "/api/local/tasks".to_owned()),
        (Method::POST, format!("/api/local/tasks/{id}/comments")),
        (Method::POST, format!("/api/local/tasks/{id}/continue")),
        (
            Method::POST,
            format!("/api/local/tasks/{id}/required-actions/{rid}/decide"),
        ),
        (Method::POST, format!("/api/local/tasks/{id}/cancel")),
        (Method::POST, "/api/webhooks".to_owned()),
        (Method::PUT, "/api/local/mcp-servers/docs/token".to_owned()),
        (Method::POST, "/a2a/rest/message:send".to_owned()),
    ];
    let mut hostile = Hostile(0x0bad_cafe_f00d);
    for round in 0u32..60 {
        for (method, path) in &routes {
            let body = hostile.object(0).to_string();
            let (status, answer) = call(&stack, method.clone(), path, token, Some(&body)).await;
            assert!(
                status.as_u16() < 500,
                "round {round}: {method} {path} with {body} -> {status} {answer}"
            );
            if status.is_client_error() && !path.starts_with("/a2a") {
                assert!(answer["error"]["code"].is_string(), "{path}: {answer}");
            }
        }
        // JSON-RPC: any method name, any params.
        let method = hostile.pick(&[
            "SendMessage",
            "GetTask",
            "ListTasks",
            "CancelTask",
            "CreateTaskPushNotificationConfig",
            "message/send",
            "tasks/get",
            "Nope",
        ]);
        let body =
            json!({"jsonrpc": "2.0", "id": round, "method": method, "params": hostile.object(0)});
        let response = stack
            .http
            .post(stack.url("/a2a/v1"))
            .bearer_auth(&stack.token)
            .header(
                "a2a-version",
                if round.is_multiple_of(2) {
                    "1.0"
                } else {
                    "0.3"
                },
            )
            .json(&body)
            .send()
            .await
            .expect("an answer");
        assert!(response.status().as_u16() < 500, "{body}");
        let answer: Value = response.json().await.expect("JSON-RPC answers are JSON");
        assert!(
            answer.get("result").is_some() || answer["error"]["code"].as_i64() != Some(-32603),
            "no internal error: {body} -> {answer}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_list_filters_by_state_and_searches_instructions() {
    let stack = gateway_only().await;
    let token = Some(stack.token.as_str());
    for instruction in ["A 50% discount", "Plain words", "snake_case names", "other"] {
        let body = json!({"instruction": instruction}).to_string();
        let created = call(&stack, Method::POST, "/api/local/tasks", token, Some(&body)).await;
        assert_eq!(created.0, 201, "{}", created.1);
    }
    let bob = call(
        &stack,
        Method::POST,
        "/api/local/tasks",
        Some(stack.other_token.as_str()),
        Some(r#"{"instruction": "bob's discount"}"#),
    )
    .await;
    assert_eq!(bob.0, 201);
    let found = |query: &'static str| {
        let stack = &stack;
        async move {
            let (status, body) = call(
                stack,
                Method::GET,
                &format!("/api/local/tasks?{query}"),
                token,
                None,
            )
            .await;
            assert_eq!(status, 200, "{query}: {body}");
            let mut names: Vec<String> = body["tasks"]
                .as_array()
                .expect("tasks")
                .iter()
                .map(|t| t["instruction"].as_str().expect("instruction").to_owned())
                .collect();
            names.sort();
            names
        }
    };
    // Case-insensitive; `%` and `_` are themselves, not wildcards; only the caller's tasks.
    assert_eq!(found("q=DISCOUNT").await, ["A 50% discount"]);
    assert_eq!(found("q=%25").await, ["A 50% discount"]);
    assert_eq!(found("q=_").await, ["snake_case names"]);
    assert_eq!(found("q=nothing%20like%20it").await, Vec::<String>::new());
    // No worker runs here: every job is queued.
    assert_eq!(found("state=queued").await.len(), 4);
    assert_eq!(found("state=running&q=plain").await, Vec::<String>::new());
    assert_eq!(found("state=queued&q=plain&limit=1").await, ["Plain words"]);
}
