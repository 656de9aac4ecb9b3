//! A2A 1.0 end to end, over raw HTTP as any client would speak it (the official SDKs' own
//! runs are `a2a_sdk.rs`): the agent card; a message that becomes a task and reads back;
//! questions and tool approvals answered through `input-required`; every error the spec
//! names, each writing nothing; the HTTP+JSON binding; cancel; the Continue extension; push
//! notifications received by a small server; the 0.3 names and shapes; the JSON-RPC binding
//! over NATS; and streams that resume after any event — hundreds of reconnects, nothing lost
//! or repeated.

use std::collections::BTreeSet;
use std::time::Duration;

use maestro_testkit::a2a::{self, A2a, message};
use maestro_testkit::{Next, SseItem, Stack, StackOptions};
use reqwest::Method;
use serde_json::{Value, json};

async fn stack() -> Stack {
    Stack::up(StackOptions::new(a2a::scenarios()).policy(a2a::POLICY)).await
}

async fn count_tasks(stack: &Stack) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&stack.db.pool)
        .await
        .expect("count")
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_names_the_bindings_and_is_cached() {
    let stack = stack().await;
    let url = stack.url("/.well-known/agent-card.json");
    let response = stack.http.get(&url).send().await.expect("card");
    assert_eq!(response.status(), 200, "no auth needed");
    let etag = response.headers()["etag"]
        .to_str()
        .expect("etag")
        .to_owned();
    let cache = response.headers()["cache-control"]
        .to_str()
        .expect("cache")
        .to_owned();
    assert!(cache.contains("max-age="), "{cache}");
    let card: Value = response.json().await.expect("json");
    let interfaces = card["supportedInterfaces"].as_array().expect("interfaces");
    let bindings: Vec<&str> = interfaces
        .iter()
        .map(|i| i["protocolBinding"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(bindings, ["JSONRPC", "HTTP+JSON", "JSONRPC"]);
    let versions: Vec<&str> = interfaces
        .iter()
        .map(|i| i["protocolVersion"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        versions,
        ["1.0", "1.0", "0.3"],
        "1.0 first; 0.3 for older clients"
    );
    assert_eq!(
        card["protocolVersion"], "0.3.0",
        "0.3 clients find their fields too"
    );
    assert!(card["url"].as_str().expect("url").ends_with("/a2a/v1"));
    assert!(
        interfaces[0]["url"]
            .as_str()
            .expect("url")
            .ends_with("/a2a/v1")
    );
    assert_eq!(card["capabilities"]["streaming"], true);
    let skills: Vec<&str> = card["skills"]
        .as_array()
        .expect("skills")
        .iter()
        .map(|s| s["id"].as_str().unwrap_or_default())
        .collect();
    assert!(
        skills.contains(&"chat") && skills.contains(&"coding") && skills.contains(&"auto"),
        "{skills:?}"
    );
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    let again = stack
        .http
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("card");
    assert_eq!(again.status(), 304, "unchanged");
    let extended = stack
        .a2a(false)
        .result("GetExtendedAgentCard", json!({}))
        .await;
    assert_eq!(extended["name"], "MAESTRO");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_becomes_a_task_that_completes_and_reads_back() {
    let stack = stack().await;
    let a2a = stack.a2a(false);
    let sent = a2a
        .result("SendMessage", message("m-1", "finish now, please"))
        .await;
    let task = &sent["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{sent}");
    let id = task["id"].as_str().expect("id").to_owned();
    let context = task["contextId"]
        .as_str()
        .expect("a context is made")
        .to_owned();
    assert_eq!(task["artifacts"][0]["artifactId"], "result");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "finished");
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "finished");
    let history = task["history"].as_array().expect("history");
    assert_eq!(history[0]["messageId"], "m-1");
    assert_eq!(history[0]["role"], "ROLE_USER");
    assert!(
        history
            .iter()
            .any(|m| m["role"] == "ROLE_AGENT" && m["parts"][0]["text"] == "Done already.")
    );

    // The same message again is the same task.
    let before = count_tasks(&stack).await;
    let again = a2a
        .result("SendMessage", message("m-1", "finish now, please"))
        .await;
    assert_eq!(again["task"]["id"], id.as_str());
    assert_eq!(count_tasks(&stack).await, before, "no second task");

    let got = a2a
        .result("GetTask", json!({"id": id, "historyLength": 0}))
        .await;
    assert_eq!(state(&got), "TASK_STATE_COMPLETED");
    assert!(
        got.get("history").is_none(),
        "historyLength 0 leaves the history out"
    );

    // Another task in the same context, and lists by context, state and page.
    let mut second = message("m-2", "finish now, too");
    second["message"]["contextId"] = json!(context);
    let second = a2a.result("SendMessage", second).await;
    assert_eq!(second["task"]["contextId"], context.as_str());
    a2a.result("SendMessage", message("m-3", "finish now, elsewhere"))
        .await;
    let in_context = a2a.result("ListTasks", json!({"contextId": context})).await;
    assert_eq!(in_context["totalSize"], 2);
    assert_eq!(in_context["nextPageToken"], "");
    assert!(
        in_context["tasks"][0].get("artifacts").is_none(),
        "no artifacts unless asked"
    );
    let first_page = a2a
        .result(
            "ListTasks",
            json!({"pageSize": 2, "status": "TASK_STATE_COMPLETED"}),
        )
        .await;
    assert_eq!(
        (
            first_page["totalSize"].as_i64(),
            first_page["tasks"].as_array().map(Vec::len)
        ),
        (Some(3), Some(2))
    );
    let token = first_page["nextPageToken"].as_str().expect("a next page");
    let second_page = a2a
        .result(
            "ListTasks",
            json!({"pageSize": 2, "pageToken": token, "status": "TASK_STATE_COMPLETED"}),
        )
        .await;
    assert_eq!(second_page["tasks"].as_array().map(Vec::len), Some(1));
    assert_eq!(second_page["nextPageToken"], "");
    let working = a2a
        .result("ListTasks", json!({"status": "TASK_STATE_WORKING"}))
        .await;
    assert_eq!(working["totalSize"], 0);

    // The REST binding reads the same task.
    let (status, rest) = a2a
        .rest(Method::GET, &format!("/tasks/{id}?historyLength=1"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(rest["history"].as_array().map(Vec::len), Some(1));
    let (status, sent) = a2a
        .rest(
            Method::POST,
            "/message:send",
            Some(message("m-4", "finish now, by REST")),
        )
        .await;
    assert_eq!(
        (status, state(&sent["task"])),
        (200, "TASK_STATE_COMPLETED")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_and_approvals_are_answered_through_input_required() {
    let stack = stack().await;
    let a2a = stack.a2a(false);
    let asked = a2a
        .result("SendMessage", message("q-1", "ask me something"))
        .await;
    let task = &asked["task"];
    assert_eq!(state(task), "TASK_STATE_INPUT_REQUIRED", "{asked}");
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        "Which colour?"
    );
    let id = task["id"].as_str().expect("id");
    let mut answer = message("q-2", "Blue.");
    answer["message"]["taskId"] = json!(id);
    let answered = a2a.result("SendMessage", answer).await;
    assert_eq!(
        state(&answered["task"]),
        "TASK_STATE_COMPLETED",
        "{answered}"
    );
    assert_eq!(
        answered["task"]["artifacts"][0]["parts"][0]["text"],
        "blue it is"
    );
    let users: Vec<&str> = answered["task"]["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|m| m["role"] == "ROLE_USER")
        .map(|m| m["messageId"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(users, ["q-1", "q-2"]);

    // A tool call that needs approval: the item is in the status message's data part.
    let waiting = a2a
        .result("SendMessage", message("w-1", "write the note"))
        .await;
    let task = &waiting["task"];
    assert_eq!(state(task), "TASK_STATE_INPUT_REQUIRED", "{waiting}");
    let items = &task["status"]["message"]["parts"][1]["data"]["requiredActions"];
    let rid = items[0]["id"].as_str().expect("an item").to_owned();
    let id = task["id"].as_str().expect("id").to_owned();
    let decide = |message_id: &str, rid: &str| {
        json!({"message": {"messageId": message_id, "role": "ROLE_USER", "taskId": id,
               "parts": [{"data": {"decisions": [{"requiredActionId": rid, "decision": "approve"}]}}]}})
    };
    let unknown = a2a
        .rpc(
            "SendMessage",
            decide("w-2", &uuid::Uuid::now_v7().to_string()),
        )
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let still = a2a.result("GetTask", json!({"id": id})).await;
    assert_eq!(
        state(&still),
        "TASK_STATE_INPUT_REQUIRED",
        "nothing changed"
    );
    let text = {
        let mut m = message("w-3", "just do it");
        m["message"]["taskId"] = json!(id);
        a2a.rpc("SendMessage", m).await
    };
    assert_eq!(
        text["error"]["code"], -32602,
        "a decision is pending: {text}"
    );
    let approved = a2a.result("SendMessage", decide("w-4", &rid)).await;
    assert_eq!(
        state(&approved["task"]),
        "TASK_STATE_COMPLETED",
        "{approved}"
    );
    // The same decision message again (a client retrying) is taken once: the same answer.
    let again = a2a.result("SendMessage", decide("w-4", &rid)).await;
    assert_eq!(again["task"]["id"], id.as_str(), "{again}");
    assert_eq!(state(&again["task"]), "TASK_STATE_COMPLETED");
    let written = std::fs::read_to_string(stack.workspace(&id).join("note.txt")).expect("written");
    assert_eq!(written, "hi\n");

    // The file it wrote is an artifact, served by URL to its owner only.
    let artifacts = approved["task"]["artifacts"].as_array().expect("artifacts");
    let file = artifacts
        .iter()
        .find(|a| a["artifactId"] == "file:note.txt")
        .unwrap_or_else(|| panic!("a file artifact: {artifacts:?}"));
    let part = &file["parts"][0];
    assert_eq!(
        (&part["filename"], &part["mediaType"]),
        (&json!("note.txt"), &json!("text/plain"))
    );
    let url = part["url"].as_str().expect("a URL");
    assert_eq!(
        url,
        stack.url(&format!("/api/local/tasks/{id}/files/note.txt"))
    );
    let fetch = |token: &str, url: String| {
        let request = stack.http.get(url).bearer_auth(token);
        async move { request.send().await.expect("an answer") }
    };
    let served = fetch(&stack.token, url.to_owned()).await;
    assert_eq!(served.status(), 200);
    assert_eq!(served.headers()["content-type"], "text/plain");
    assert_eq!(served.headers()["content-security-policy"], "sandbox");
    assert_eq!(served.text().await.expect("body"), "hi\n");
    assert_eq!(
        fetch(&stack.other_token, url.to_owned()).await.status(),
        404,
        "not bob's"
    );
    let missing = stack.url(&format!("/api/local/tasks/{id}/files/nope.txt"));
    assert_eq!(fetch(&stack.token, missing).await.status(), 404);
    let outside = stack.url(&format!(
        "/api/local/tasks/{id}/files/..%2F..%2Fetc%2Fpasswd"
    ));
    assert_eq!(
        fetch(&stack.token, outside).await.status(),
        422,
        "nothing outside the workspace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_the_spec_code_and_writes_nothing() {
    let stack = stack().await;
    let a2a = stack.a2a(false);
    let done = a2a
        .result("SendMessage", message("e-1", "finish now"))
        .await;
    let done_id = done["task"]["id"].as_str().expect("id").to_owned();
    let before = count_tasks(&stack).await;
    let url = stack.url("/a2a/v1");
    let raw = |body: &'static str, version: Option<&'static str>, content_type: &'static str| {
        let mut request = stack
            .http
            .post(&url)
            .bearer_auth(&stack.token)
            .header("content-type", content_type)
            .body(body);
        if let Some(v) = version {
            request = request.header("a2a-version", v);
        }
        async move {
            let response = request.send().await.expect("answer");
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let get = r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#;
    let cases: Vec<(&str, (u16, Value), i64)> = vec![
        (
            "no A2A-Version means 0.3",
            raw(get, None, "application/json").await,
            -32009,
        ),
        (
            "an unknown version",
            raw(get, Some("99.0"), "application/json").await,
            -32009,
        ),
        (
            "not JSON",
            raw("{oops", Some("1.0"), "application/json").await,
            -32700,
        ),
        (
            "not a JSON content type",
            raw(get, Some("1.0"), "text/plain").await,
            -32005,
        ),
        (
            "an unknown method",
            raw(
                r#"{"jsonrpc":"2.0","id":1,"method":"Nope"}"#,
                Some("1.0"),
                "application/json",
            )
            .await,
            -32601,
        ),
        (
            "a batch",
            raw("[]", Some("1.0"), "application/json").await,
            -32600,
        ),
    ];
    for (what, (status, answer), code) in cases {
        assert_eq!(status, 200, "{what}: JSON-RPC errors are HTTP 200");
        assert_eq!(answer["error"]["code"], code, "{what}: {answer}");
    }
    let stranger = A2a::new(stack.http.clone(), &stack.url(""), "wrong-token-123");
    let (status, _) = stranger
        .rpc_with("GetTask", json!({"id": done_id}), &[])
        .await;
    assert_eq!(status, 401);
    let bob = stack.a2a(true);
    let calls: Vec<(&str, Value, i64)> = vec![
        ("a task that does not exist", a2a.rpc("GetTask", json!({"id": uuid::Uuid::now_v7()})).await, -32001),
        ("someone else's task", bob.rpc("GetTask", json!({"id": done_id})).await, -32001),
        ("missing params", a2a.rpc("SendMessage", json!({})).await, -32602),
        ("a message from the agent", a2a.rpc("SendMessage", json!({"message": {"messageId": "x", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}})).await, -32602),
        ("inline bytes", a2a.rpc("SendMessage", json!({"message": {"messageId": "x", "role": "ROLE_USER", "parts": [{"raw": "aGk=", "mediaType": "image/png"}]}})).await, -32005),
        ("an empty instruction", a2a.rpc("SendMessage", message("x", "   ")).await, -32602),
        ("an unknown skill", a2a.rpc("SendMessage", json!({"message": {"messageId": "x", "role": "ROLE_USER", "parts": [{"text": "hi"}]}, "metadata": {"skill": "nope"}})).await, -32602),
        ("a message to a finished task", a2a.rpc("SendMessage", json!({"message": {"messageId": "x", "role": "ROLE_USER", "taskId": done_id, "parts": [{"text": "more"}]}})).await, -32004),
        ("a context that is not the task's", a2a.rpc("SendMessage", json!({"message": {"messageId": "x", "role": "ROLE_USER", "taskId": done_id, "contextId": "other", "parts": [{"text": "more"}]}})).await, -32602),
        ("cancelling a finished task", a2a.rpc("CancelTask", json!({"id": done_id})).await, -32002),
        ("subscribing to a finished task", a2a.rpc("SubscribeToTask", json!({"id": done_id})).await, -32004),
        ("a push config on someone else's task", bob.rpc("CreateTaskPushNotificationConfig", json!({"taskId": done_id, "url": "https://example.com/hook"})).await, -32001),
        ("someone else's push configs", bob.rpc("ListTaskPushNotificationConfigs", json!({"taskId": done_id})).await, -32001),
        ("a push URL that is not http", a2a.rpc("CreateTaskPushNotificationConfig", json!({"taskId": done_id, "url": "file:///etc/passwd"})).await, -32602),
        ("a push authentication without a scheme", a2a.rpc("CreateTaskPushNotificationConfig", json!({"taskId": done_id, "url": "https://example.com/hook", "authentication": {"scheme": " "}})).await, -32602),
        ("a push config that does not exist", a2a.rpc("GetTaskPushNotificationConfig", json!({"taskId": done_id, "id": "nope"})).await, -32001),
        ("a new task with a bad push URL", a2a.rpc("SendMessage", json!({"message": {"messageId": "x", "role": "ROLE_USER", "parts": [{"text": "finish now"}]}, "configuration": {"taskPushNotificationConfig": {"url": "nope"}}})).await, -32602),
        ("a negative history length", a2a.rpc("GetTask", json!({"id": done_id, "historyLength": -1})).await, -32602),
        ("a page size out of range", a2a.rpc("ListTasks", json!({"pageSize": 1000})).await, -32602),
        ("a page token not given out", a2a.rpc("ListTasks", json!({"pageToken": "nope"})).await, -32602),
    ];
    for (what, answer, code) in calls {
        assert_eq!(answer["error"]["code"], code, "{what}: {answer}");
        assert_eq!(
            answer["error"]["data"][0]["domain"], "a2a-protocol.org",
            "{what}"
        );
    }
    let (status, body) = a2a
        .rest(
            Method::GET,
            &format!("/tasks/{}", uuid::Uuid::now_v7()),
            None,
        )
        .await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!(404)));
    assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_FOUND");
    let (status, body) = a2a
        .rest(Method::POST, &format!("/tasks/{done_id}:cancel"), None)
        .await;
    assert_eq!(
        (status, &body["error"]["details"][0]["reason"]),
        (400, &json!("TASK_NOT_CANCELABLE"))
    );
    assert_eq!(count_tasks(&stack).await, before, "no refusal wrote a task");
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&stack.db.pool)
        .await
        .expect("count");
    assert_eq!(jobs, before, "nor a job");
    let configs: i64 = sqlx::query_scalar("SELECT count(*) FROM a2a_push_configs")
        .fetch_one(&stack.db.pool)
        .await
        .expect("count");
    assert_eq!(configs, 0, "nor a push config");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_is_canceled_and_its_subscribers_see_it() {
    let stack = stack().await;
    let a2a = stack.a2a(false);
    let mut params = message("c-1", "slow work");
    params["configuration"] = json!({"returnImmediately": true});
    let sent = a2a.result("SendMessage", params).await;
    let id = sent["task"]["id"].as_str().expect("id").to_owned();
    assert!(
        matches!(
            state(&sent["task"]),
            "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"
        ),
        "{sent}"
    );
    let mut subscription = a2a.stream("SubscribeToTask", json!({"id": id}), None).await;
    let Next::Item(first) = subscription.next_or_end(Duration::from_secs(10)).await else {
        panic!("a snapshot first");
    };
    assert!(
        first.data["result"]["task"]["id"] == id.as_str(),
        "{first:?}"
    );
    let canceled = a2a.result("CancelTask", json!({"id": id})).await;
    assert_eq!(state(&canceled), "TASK_STATE_CANCELED");
    let rest = subscription.to_end(Duration::from_secs(20)).await;
    let last = rest.last().expect("events");
    assert_eq!(
        last.data["result"]["statusUpdate"]["status"]["state"], "TASK_STATE_CANCELED",
        "{last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_with_the_continue_extension_carries_a_finished_task_on() {
    let stack = stack().await;
    let a2a = stack.a2a(false);
    let done = a2a
        .result("SendMessage", message("k-1", "finish now"))
        .await;
    let id = done["task"]["id"].as_str().expect("id");
    let more = json!({"message": {"messageId": "k-2", "role": "ROLE_USER", "taskId": id,
                      "parts": [{"text": "carry on with it"}], "metadata": {"maestro/continue": true}}});
    let continued = a2a.result("SendMessage", more.clone()).await;
    assert_eq!(
        state(&continued["task"]),
        "TASK_STATE_COMPLETED",
        "{continued}"
    );
    assert_eq!(
        continued["task"]["artifacts"][0]["parts"][0]["text"],
        "carried on"
    );
    let again = a2a.result("SendMessage", more).await;
    assert_eq!(
        again["task"]["id"], id,
        "the same message again changes nothing"
    );
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&stack.db.pool)
        .await
        .expect("count");
    assert_eq!(jobs, 2);
}

/// Items of a stream without the snapshots (which have no id).
fn events(items: &[SseItem]) -> Vec<&SseItem> {
    items.iter().filter(|i| !i.id.is_empty()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumed_after_hundreds_of_disconnects_loses_and_repeats_nothing() {
    let stack = stack().await;
    let a2a = stack.a2a(false);
    // The reference: one client streams the task start to end without a break.
    let mut reference = a2a
        .stream("SendStreamingMessage", message("r-1", "slow work"), None)
        .await;
    let Next::Item(snapshot) = reference.next_or_end(Duration::from_secs(10)).await else {
        panic!("a snapshot first");
    };
    let id = snapshot.data["result"]["task"]["id"]
        .as_str()
        .expect("task")
        .to_owned();
    // Another reconnects after every few events, resuming after the last id it got.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut random = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut got: Vec<SseItem> = Vec::new();
    let mut reconnects = 0;
    // From the very start: every event of the task.
    let mut last: Option<String> = Some("0".to_owned());
    'outer: loop {
        let mut stream = a2a
            .stream("SubscribeToTask", json!({"id": id}), last.as_deref())
            .await;
        reconnects += 1;
        let take = 1 + random(2);
        let mut taken = 0;
        loop {
            match stream.next_or_end(Duration::from_secs(20)).await {
                Next::Item(item) if item.id.is_empty() => continue,
                Next::Item(item) => {
                    last = Some(item.id.clone());
                    got.push(item);
                    taken += 1;
                    if taken == take {
                        break;
                    }
                }
                Next::End => break 'outer,
                Next::Timeout => panic!("the stream stalled after {} events", got.len()),
            }
        }
    }
    let all = reference.to_end(Duration::from_secs(60)).await;
    let ids: Vec<&str> = got.iter().map(|i| i.id.as_str()).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "no event twice");
    // Persisted events' ids (`<seq>` or `<seq>/<k>`), from the reference's first on.
    let persisted = |items: Vec<&SseItem>| -> Vec<(i64, u32)> {
        items
            .into_iter()
            .filter(|i| !i.id.contains('.'))
            .map(|i| {
                let (seq, sub) = i.id.split_once('/').unwrap_or((&i.id, "0"));
                (seq.parse().expect("seq"), sub.parse().expect("sub"))
            })
            .collect()
    };
    let expected = persisted(events(&all));
    let from = expected.first().copied().expect("the reference got events");
    let resumed: Vec<(i64, u32)> = persisted(got.iter().collect())
        .into_iter()
        .filter(|id| *id >= from)
        .collect();
    assert_eq!(
        resumed, expected,
        "every event the uninterrupted client got, in order, after {reconnects} reconnects"
    );
    assert!(
        reconnects >= 100,
        "the task ran long enough for many reconnects: {reconnects}"
    );
    let last = got.last().expect("events");
    assert_eq!(
        last.data["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let replies = |items: &[SseItem]| -> Vec<String> {
        items
            .iter()
            .filter(|i| i.data["result"]["artifactUpdate"]["lastChunk"] == true)
            .map(|i| {
                i.data["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(
        replies(&got),
        replies(&all),
        "every reply's whole text, as the reference got it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_on_0_3_get_0_3_shapes_from_the_same_operations() {
    let stack = stack().await;
    let url = stack.url("/a2a/v1");
    // A 0.3 client sends no A2A-Version and the 0.3 method names.
    let call = |method: &'static str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": "old", "method": method, "params": params});
        let request = stack.http.post(&url).bearer_auth(&stack.token).json(&body);
        async move {
            request
                .send()
                .await
                .expect("answer")
                .json::<Value>()
                .await
                .expect("json")
        }
    };
    let text = |message_id: &str, text: &str, task: Option<&str>| {
        let mut message = json!({"kind": "message", "messageId": message_id, "role": "user",
                                 "parts": [{"kind": "text", "text": text}]});
        if let Some(task) = task {
            message["taskId"] = json!(task);
        }
        json!({"message": message, "configuration": {"blocking": true}})
    };
    let asked = call("message/send", text("o-1", "ask me something", None)).await;
    let task = &asked["result"];
    assert_eq!(task["kind"], "task", "not wrapped: {asked}");
    assert_eq!(task["status"]["state"], "input-required");
    assert_eq!(task["status"]["message"]["role"], "agent");
    assert_eq!(task["status"]["message"]["parts"][0]["kind"], "text");
    assert_eq!(task["history"][0]["role"], "user");
    let id = task["id"].as_str().expect("id").to_owned();
    let answered = call("message/send", text("o-2", "Blue.", Some(&id))).await;
    assert_eq!(
        answered["result"]["status"]["state"], "completed",
        "{answered}"
    );
    assert_eq!(
        answered["result"]["artifacts"][0]["parts"][0],
        json!({"kind": "text", "text": "blue it is"})
    );
    let got = call("tasks/get", json!({"id": id})).await;
    assert_eq!(
        (
            got["result"]["kind"].clone(),
            got["result"]["status"]["state"].clone()
        ),
        (json!("task"), json!("completed"))
    );
    let refused = call("tasks/cancel", json!({"id": id})).await;
    assert_eq!(refused["error"]["code"], -32002);
    assert_eq!(
        refused["error"]["data"],
        Value::Null,
        "0.3 errors carry no details"
    );
    let unknown = call("tasks/get", json!({"id": uuid::Uuid::now_v7()})).await;
    assert_eq!(unknown["error"]["code"], -32001);

    // Push configs in 0.3 shapes.
    let config = json!({"id": "old-push", "url": "https://example.com/hook", "token": "t",
                        "authentication": {"schemes": ["Bearer"], "credentials": "c"}});
    let set = call(
        "tasks/pushNotificationConfig/set",
        json!({"taskId": id, "pushNotificationConfig": config}),
    )
    .await;
    assert_eq!(
        set["result"],
        json!({"taskId": id, "pushNotificationConfig": config}),
        "{set}"
    );
    let got = call(
        "tasks/pushNotificationConfig/get",
        json!({"id": id, "pushNotificationConfigId": "old-push"}),
    )
    .await;
    assert_eq!(
        got["result"]["pushNotificationConfig"]["authentication"]["schemes"],
        json!(["Bearer"])
    );
    let listed = call("tasks/pushNotificationConfig/list", json!({"id": id})).await;
    assert_eq!(
        listed["result"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let deleted = call(
        "tasks/pushNotificationConfig/delete",
        json!({"id": id, "pushNotificationConfigId": "old-push"}),
    )
    .await;
    assert_eq!(deleted["result"], Value::Null, "{deleted}");
    let listed = call("tasks/pushNotificationConfig/list", json!({"id": id})).await;
    assert_eq!(listed["result"], json!([]));

    // message/stream: 0.3 events, the last one final.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "message/stream", "params": text("o-3", "finish now", None)});
    let response = stack
        .http
        .post(&url)
        .bearer_auth(&stack.token)
        .json(&body)
        .send()
        .await
        .expect("stream");
    let items = maestro_testkit::SseClient::from_response(response)
        .to_end(Duration::from_secs(30))
        .await;
    let kinds: Vec<&str> = items
        .iter()
        .map(|i| i.data["result"]["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds[0], "task", "{kinds:?}");
    let last = &items.last().expect("events").data;
    assert_eq!(last["id"], 9, "the request's id on every event");
    let final_state = last["result"]["status"]["state"].clone();
    assert!(
        (last["result"]["kind"] == "status-update"
            && last["result"]["final"] == true
            && final_state == "completed")
            || (last["result"]["kind"] == "task" && final_state == "completed"),
        "{last}"
    );
    // A 0.3 method with a 1.0 header is refused, and so is a 1.0 method without one.
    let (_, mixed) = stack
        .a2a(false)
        .rpc_with("tasks/get", json!({"id": id}), &[])
        .await;
    assert_eq!(mixed["error"]["code"], -32009);
}

/// A small push receiver: every POST it gets, with its path and headers.
async fn push_receiver() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<(String, axum::http::HeaderMap, Value)>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/{*path}",
        axum::routing::post(
            move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let tx = tx.clone();
                async move {
                    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let _ = tx.send((uri.path().to_owned(), headers, body));
                    "ok"
                }
            },
        ),
    );
    (maestro_testkit::serve(app).await, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_notifications_reach_the_client_with_its_token_and_every_state() {
    let stack = stack().await;
    let a2a = stack.a2a(false);
    let (receiver, mut pushes) = push_receiver().await;
    let mut ask = message("p-1", "ask me about colours");
    ask["configuration"] = json!({"taskPushNotificationConfig": {
        "url": format!("{receiver}/main"), "token": "tok-1",
        "authentication": {"scheme": "Bearer", "credentials": "cred-1"}}});
    let sent = a2a.result("SendMessage", ask).await;
    assert_eq!(state(&sent["task"]), "TASK_STATE_INPUT_REQUIRED", "{sent}");
    let id = sent["task"]["id"].as_str().expect("id").to_owned();

    // The config it came with, one more over HTTP+JSON, listed, read, one deleted.
    let (status, created) = a2a
        .rest(
            Method::POST,
            &format!("/tasks/{id}/pushNotificationConfigs"),
            Some(json!({"id": "second", "url": format!("{receiver}/second")})),
        )
        .await;
    assert_eq!(
        (status, &created["id"]),
        (200, &json!("second")),
        "{created}"
    );
    let listed = a2a
        .result("ListTaskPushNotificationConfigs", json!({"taskId": id}))
        .await;
    let ids: Vec<&str> = listed["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [id.as_str(), "second"],
        "the first one's id is the task's"
    );
    let got = a2a
        .result(
            "GetTaskPushNotificationConfig",
            json!({"taskId": id, "id": id}),
        )
        .await;
    assert_eq!(got["token"], "tok-1");
    assert_eq!(got["authentication"]["scheme"], "Bearer");
    let (status, _) = a2a
        .rest(
            Method::DELETE,
            &format!("/tasks/{id}/pushNotificationConfigs/second"),
            None,
        )
        .await;
    assert_eq!(status, 200);

    // Answered, it completes; the pushes tell every state, the result before the end.
    let mut answer = message("p-2", "Blue.");
    answer["message"]["taskId"] = json!(id);
    let done = a2a.result("SendMessage", answer).await;
    assert_eq!(state(&done["task"]), "TASK_STATE_COMPLETED", "{done}");
    let mut got: Vec<(i64, Value)> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !got
        .iter()
        .any(|(_, p)| p["task"]["status"]["state"] == "TASK_STATE_COMPLETED")
    {
        let (path, headers, body) = tokio::time::timeout_at(deadline, pushes.recv())
            .await
            .expect("the completion is pushed")
            .expect("receiver open");
        assert_eq!(path, "/main", "a deleted config gets nothing: {body}");
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        assert_eq!(header("x-a2a-notification-token"), Some("tok-1"));
        assert_eq!(header("authorization"), Some("Bearer cred-1"));
        let (item, task) = match body.get("statusUpdate") {
            Some(update) => (update, &update["taskId"]),
            None => (&body["task"], &body["task"]["id"]),
        };
        assert_eq!(task, id.as_str(), "{body}");
        let seq = item["metadata"]["maestro/seq"]
            .as_i64()
            .expect("its position");
        got.push((seq, body));
    }
    got.sort_by_key(|(seq, _)| *seq);
    let states: Vec<&str> = got
        .iter()
        .filter_map(|(_, p)| p["statusUpdate"]["status"]["state"].as_str())
        .collect();
    for expected in [
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
        "TASK_STATE_INPUT_REQUIRED",
    ] {
        assert!(states.contains(&expected), "{expected} pushed: {states:?}");
    }
    let (_, end) = got.last().expect("the end");
    assert_eq!(
        end["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "the end is last"
    );
    assert_eq!(end["task"]["artifacts"][0]["artifactId"], "result");
    assert_eq!(
        end["task"]["artifacts"][0]["parts"][0]["text"],
        "blue it is"
    );
    let input = got
        .iter()
        .find(|(_, p)| p["statusUpdate"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED")
        .expect("input-required");
    assert_eq!(
        input.1["statusUpdate"]["status"]["message"]["parts"][0]["text"],
        "Which colour?"
    );
    let keys: BTreeSet<String> = got.iter().map(|(seq, p)| format!("{seq}:{p}")).collect();
    assert_eq!(keys.len(), got.len(), "no push twice");
    // The notifier records a delivery once the receiver has answered.
    let delivered = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM a2a_push_deliveries WHERE status = 'delivered'",
        )
        .fetch_one(&stack.db.pool)
        .await
        .expect("count")
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while delivered().await < got.len() as i64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "deliveries recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_calls_over_nats_get_the_same_answers() {
    let stack = stack().await;
    let nats = async_nats::connect(&stack.nats.url).await.expect("NATS");
    let subject = format!("{}.a2a.rpc", stack.prefix);
    let call = |token: Option<&str>, version: Option<&str>, method: &str, params: Value| {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(token) = token {
            headers.insert("Authorization", format!("Bearer {token}").as_str());
        }
        if let Some(version) = version {
            headers.insert("A2A-Version", version);
        }
        let body = json!({"jsonrpc": "2.0", "id": "n", "method": method, "params": params});
        let (nats, subject) = (nats.clone(), subject.clone());
        async move {
            let reply = nats
                .request_with_headers(subject, headers, body.to_string().into())
                .await
                .expect("an answer over NATS");
            serde_json::from_slice::<Value>(&reply.payload).expect("JSON")
        }
    };
    let me = Some(stack.token.as_str());
    let sent = call(
        me,
        Some("1.0"),
        "SendMessage",
        message("n-1", "finish now, on the bus"),
    )
    .await;
    let task = &sent["result"]["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{sent}");
    let id = task["id"].as_str().expect("id").to_owned();

    // The same answer as over HTTP.
    let over_nats = call(me, Some("1.0"), "GetTask", json!({"id": id})).await;
    let over_http = stack.a2a(false).rpc("GetTask", json!({"id": id})).await;
    assert_eq!(over_nats["result"], over_http["result"]);
    let listed = call(me, Some("1.0"), "ListTasks", json!({})).await;
    assert_eq!(listed["result"]["totalSize"], 1);
    let old = call(me, None, "tasks/get", json!({"id": id})).await;
    assert_eq!(old["result"]["status"]["state"], "completed", "0.3 too");

    // The same refusals, writing nothing.
    let before = count_tasks(&stack).await;
    let refusals = [
        (
            "no token",
            call(None, Some("1.0"), "GetTask", json!({"id": id})).await,
            -32600,
        ),
        (
            "a wrong token",
            call(
                Some("nope-nope-nope"),
                Some("1.0"),
                "GetTask",
                json!({"id": id}),
            )
            .await,
            -32600,
        ),
        (
            "someone else's task",
            call(
                Some(stack.other_token.as_str()),
                Some("1.0"),
                "GetTask",
                json!({"id": id}),
            )
            .await,
            -32001,
        ),
        (
            "a stream",
            call(
                me,
                Some("1.0"),
                "SendStreamingMessage",
                message("n-2", "finish now"),
            )
            .await,
            -32004,
        ),
        (
            "a subscription",
            call(me, Some("1.0"), "SubscribeToTask", json!({"id": id})).await,
            -32004,
        ),
        (
            "an unknown method",
            call(me, Some("1.0"), "Nope", json!({})).await,
            -32601,
        ),
        (
            "an unserved version",
            call(me, Some("2.0"), "GetTask", json!({"id": id})).await,
            -32009,
        ),
    ];
    for (what, answer, code) in refusals {
        assert_eq!(answer["error"]["code"], code, "{what}: {answer}");
    }
    let junk = nats
        .request(subject.clone(), "not json".into())
        .await
        .expect("an answer");
    let junk: Value = serde_json::from_slice(&junk.payload).expect("JSON");
    assert_eq!(junk["error"]["code"], -32700);
    assert_eq!(count_tasks(&stack).await, before, "no refusal wrote a task");
}

/// The conformance mode's scenarios (`deploy/a2a-conformance`), as `scripts/a2a-conformance`
/// runs them.
fn conformance_file(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/a2a-conformance")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_scenarios_drive_every_state_through_the_agent() {
    let scenarios: Value =
        serde_json::from_str(&conformance_file("scenarios.json")).expect("scenarios");
    let policy = conformance_file("policy.json");
    let stack = Stack::up(StackOptions::new(scenarios).policy(&policy)).await;
    let a2a = stack.a2a(false);
    let send = |id: &str, text: &str| a2a.result("SendMessage", message(id, text));

    let done = send("tck-complete-task-1", "Complete this").await;
    assert_eq!(state(&done["task"]), "TASK_STATE_COMPLETED", "{done}");

    let asked = send("tck-input-required-1", "Ask me").await;
    assert_eq!(
        state(&asked["task"]),
        "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let mut answer = message("tck-input-required-2", "Use this input.");
    answer["message"]["taskId"] = asked["task"]["id"].clone();
    let answered = a2a.result("SendMessage", answer).await;
    assert_eq!(
        state(&answered["task"]),
        "TASK_STATE_COMPLETED",
        "{answered}"
    );

    let rejected = send("tck-reject-task-1", "Reject this").await;
    assert_eq!(
        state(&rejected["task"]),
        "TASK_STATE_REJECTED",
        "{rejected}"
    );
    assert!(
        rejected["task"]["status"]["message"]["parts"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("declined: ")),
        "{rejected}"
    );
    let listed = a2a
        .result("ListTasks", json!({"status": "TASK_STATE_REJECTED"}))
        .await;
    assert!(
        listed["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .any(|t| t["id"] == rejected["task"]["id"] && state(t) == "TASK_STATE_REJECTED")
    );

    let replied = send("tck-message-response-1", "Just answer").await;
    let reply = &replied["message"];
    assert_eq!(
        reply["role"], "ROLE_AGENT",
        "a message, not a task: {replied}"
    );
    assert_eq!(reply["parts"][0]["text"], "Direct message response.");

    let failed = send("tck-task-failure-1", "Fail this").await;
    assert_eq!(state(&failed["task"]), "TASK_STATE_FAILED", "{failed}");

    let data = send("tck-artifact-data-1", "Data please").await;
    assert_eq!(
        data["task"]["artifacts"][0]["parts"][1]["data"]["key"], "value",
        "{data}"
    );
    let file = send("tck-artifact-file-url-1", "A file please").await;
    let artifacts = file["task"]["artifacts"].as_array().expect("artifacts");
    assert!(
        artifacts
            .iter()
            .any(|a| a["artifactId"] == "file:output.txt" && a["parts"][0]["url"].is_string()),
        "{file}"
    );

    let items = a2a
        .stream(
            "SendStreamingMessage",
            message("tck-stream-basic-1", "Stream"),
            None,
        )
        .await
        .to_end(Duration::from_secs(30))
        .await;
    let chunks = items
        .iter()
        .filter(|i| i.data["result"]["artifactUpdate"]["append"] == true)
        .count();
    assert!(chunks >= 5, "many events before the end: {chunks}");
    let last = &items.last().expect("events").data["result"];
    assert_eq!(
        last["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    // A task that works for a few seconds, and one canceled while it works.
    let started = std::time::Instant::now();
    let mut long = message("test-resubscribe-message-id-1", "Take your time");
    long["configuration"] = json!({"returnImmediately": true});
    let long = a2a.result("SendMessage", long).await;
    let long_id = long["task"]["id"].clone();
    let mut plain = message("plain-1", "Anything else");
    plain["configuration"] = json!({"returnImmediately": true});
    let plain = a2a.result("SendMessage", plain).await;
    let canceled = a2a
        .result("CancelTask", json!({"id": plain["task"]["id"]}))
        .await;
    assert_eq!(state(&canceled), "TASK_STATE_CANCELED", "{canceled}");
    loop {
        let got = a2a.result("GetTask", json!({"id": long_id})).await;
        if state(&got) == "TASK_STATE_COMPLETED" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{got}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it worked a while: {:?}",
        started.elapsed()
    );
}
