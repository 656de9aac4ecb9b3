//! Pauses and human answers through the HTTP API, with the scripted LLM: tool requests
//! (approve once / for the task, deny, two in one pause, a race of decisions), a comment during
//! an approval wait, ASK answered by a comment (a follow-up job in the same movement, with the
//! ask limit), package requests installed with real `pip install` / `npm install` runs into the
//! workspace (and a failed install reported to the model), and a cancelled pause.

use std::time::Duration;

use maestro_testkit::script::{call, complete, turn};
use maestro_testkit::{Stack, StackOptions};
use reqwest::Method;
use serde_json::{Value, json};

const PIECE: &str = "
name: twostep
description: Look around, then write.
start_movement: look
movements:
  - name: look
    guidance: Look around.
    transitions: [{condition: You have looked., target: write}]
  - name: write
    guidance: Write what is needed.
";

/// Files may be read freely; writing needs a person's approval (not in the allowed tools).
const POLICY: &str = r#"{"allowed_tools": ["read_file", "list_files", "glob", "grep", "shell"]}"#;

struct Setup {
    stack: Stack,
    _dir: tempfile::TempDir,
}

async fn setup(scenarios: Value, env: &[(&str, &str)]) -> Setup {
    let dir = tempfile::tempdir().expect("dir");
    let pieces = dir.path().join("pieces");
    std::fs::create_dir(&pieces).expect("pieces dir");
    std::fs::write(pieces.join("twostep.yaml"), PIECE).expect("piece");
    let mut options = StackOptions::new(scenarios)
        .policy(POLICY)
        .env("PIECES_DIR", pieces.to_str().expect("utf-8"));
    for (key, value) in env {
        options = options.env(key, value);
    }
    Setup {
        stack: Stack::spawn(options).await.expect("the stack starts"),
        _dir: dir,
    }
}

fn write(path: &str, content: &str) -> Value {
    call("write_file", json!({"path": path, "content": content}))
}

fn to_write() -> Value {
    turn(&[call(
        "transition",
        json!({"target": "write", "reason": "looked"}),
    )])
}

async fn start(stack: &Stack, instruction: &str) -> String {
    let task = stack
        .create_task(json!({"instruction": instruction, "piece": "twostep"}))
        .await
        .expect("task");
    task["id"].as_str().expect("id").to_owned()
}

async fn wait(stack: &Stack, id: &str, statuses: &[&str]) -> Value {
    stack
        .wait_for_status(id, statuses, Duration::from_secs(60))
        .await
        .expect("the job gets there")
}

async fn pending(stack: &Stack, id: &str) -> Vec<Value> {
    let path = format!("/api/local/tasks/{id}/required-actions");
    let (status, body) = stack.api(Method::GET, &path, None).await.expect("list");
    assert_eq!(status, 200, "{body}");
    body["required_actions"].as_array().cloned().expect("items")
}

async fn decide(stack: &Stack, id: &str, kind: &str, rid: &str, body: Value) -> (u16, Value) {
    let path = format!("/api/local/tasks/{id}/{kind}/{rid}/decide");
    stack
        .api(Method::POST, &path, Some(&body))
        .await
        .expect("decide")
}

async fn comments(stack: &Stack, id: &str) -> usize {
    let path = format!("/api/local/tasks/{id}/comments");
    let (_, body) = stack.api(Method::GET, &path, None).await.expect("comments");
    body["comments"].as_array().map_or(0, Vec::len)
}

/// Approve a package request (expecting 200).
async fn approve_package(stack: &Stack, id: &str, item: &Value) {
    let rid = item["id"].as_str().expect("id");
    let approve = json!({"decision": "approve"});
    let (status, _) = decide(stack, id, "package-requests", rid, approve).await;
    assert_eq!(status, 200);
}

/// The content of the tool message answering `call_id` in the LLM's last request.
async fn tool_answer(stack: &Stack, call_id: &str) -> String {
    let requests = stack.llm.requests().await.expect("requests");
    let last = requests.last().expect("a request");
    last["body"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no answer to {call_id} in {last}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_tool_request_runs_exactly_the_reviewed_call_in_the_same_movement() {
    let scenarios = json!({"scenarios": [{"name": "approve", "turns": [
        to_write(),
        turn(&[write("note.txt", "approved")]),
        turn(&[write("second.txt", "granted for the task")]),
        complete("written"),
    ]}]});
    let Setup { stack, _dir } = setup(scenarios, &[]).await;
    let id = start(&stack, "write the note").await;
    let paused = wait(&stack, &id, &["waiting_human", "succeeded", "failed"]).await;
    assert_eq!(
        paused["latest_job"]["wait_reason"], "tool_request",
        "{paused}"
    );

    let items = pending(&stack, &id).await;
    assert_eq!(items.len(), 1, "{items:?}");
    let item = &items[0];
    assert_eq!(item["kind"], "tool_request");
    assert_eq!(item["status"], "pending");
    assert_eq!(item["tool"], "write_file");
    assert_eq!(
        item["arguments"],
        json!({"path": "note.txt", "content": "approved"})
    );
    assert_eq!(item["movement"], "write");
    let rid = item["id"].as_str().expect("id");
    let hash = item["arguments_hash"].as_str().expect("hash");
    // The item links to the assistant message that proposed the call.
    let events = stack.events(&id).await.expect("events");
    let source = events
        .iter()
        .find(|e| e["seq"] == item["source_seq"])
        .expect("source event");
    assert_eq!(source["kind"], "message");
    assert_eq!(
        source["payload"]["tool_calls"][0]["function"]["name"],
        "write_file"
    );
    // The pause event names the items (the notification carries the same).
    let pause = events
        .iter()
        .rev()
        .find(|e| e["kind"] == "job_state" && e["payload"]["status"] == "waiting_human")
        .expect("pause event");
    assert_eq!(pause["payload"]["required_actions"][0]["id"], rid);
    assert!(
        !stack.workspace(&id).join("note.txt").exists(),
        "nothing ran yet"
    );

    // A comment during the wait is refused and writes nothing.
    let before = comments(&stack, &id).await;
    let path = format!("/api/local/tasks/{id}/comments");
    let (status, body) = stack
        .api(Method::POST, &path, Some(&json!({"body": "hurry up"})))
        .await
        .expect("comment");
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "decision_pending");
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("tool request")
    );
    assert_eq!(comments(&stack, &id).await, before, "nothing written");

    // Bad decisions change nothing.
    let (status, _) = decide(
        &stack,
        &id,
        "tool-requests",
        rid,
        json!({"decision": "maybe"}),
    )
    .await;
    assert_eq!(status, 422);
    let stale = json!({"decision": "approve", "arguments_hash": "0000"});
    let (status, body) = decide(&stack, &id, "tool-requests", rid, stale).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("arguments_changed"))
    );
    let (status, _) = decide(
        &stack,
        &id,
        "package-requests",
        rid,
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(status, 404, "not a package request");
    assert_eq!(pending(&stack, &id).await.len(), 1);

    let approve = json!({"decision": "approve", "scope": "task", "arguments_hash": hash});
    let (status, body) = decide(&stack, &id, "tool-requests", rid, approve.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["resumed"], true);
    assert_eq!(body["required_action"]["status"], "approved");
    let (status, body) = decide(&stack, &id, "tool-requests", rid, approve).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("already_decided"))
    );

    let done = wait(&stack, &id, &["succeeded", "failed", "waiting_human"]).await;
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    let workspace = stack.workspace(&id);
    assert_eq!(
        std::fs::read_to_string(workspace.join("note.txt")).expect("note"),
        "approved"
    );
    // Granted for the task: the next write ran without another pause.
    assert_eq!(
        std::fs::read_to_string(workspace.join("second.txt")).expect("second"),
        "granted for the task"
    );
    let events = stack.events(&id).await.expect("events");
    let movements: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "movement")
        .map(|e| &e["payload"]["name"])
        .collect();
    assert_eq!(
        movements,
        [&json!("look"), &json!("write")],
        "resumed in the same movement"
    );
    let pauses = events
        .iter()
        .filter(|e| e["kind"] == "job_state" && e["payload"]["status"] == "waiting_human")
        .count();
    assert_eq!(pauses, 1);
    assert!(events.iter().any(|e| e["kind"] == "decision"
        && e["payload"]["decision"] == "approve"
        && e["payload"]["resumed"] == true));
    let ids: Vec<&Value> = events.iter().map(|e| &e["job_id"]).collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one job throughout");

    // The pause and the decision are notifications (webhooks), the pause with its items.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let notifications: Vec<(String, Value)> = loop {
        let rows: Vec<(String, Value)> =
            sqlx::query_as("SELECT kind, payload FROM notifications ORDER BY event_seq")
                .fetch_all(&stack.db.pool)
                .await
                .expect("notifications");
        if rows.iter().any(|(k, _)| k == "task.succeeded") || tokio::time::Instant::now() > deadline
        {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let kinds: Vec<&str> = notifications.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        ["task.waiting_human", "task.decided", "task.succeeded"]
    );
    let waiting = &notifications[0].1["data"];
    assert_eq!(waiting["wait_reason"], "tool_request");
    assert_eq!(waiting["required_actions"][0]["id"], rid);
    assert_eq!(waiting["required_actions"][0]["tool"], "write_file");
    let decided = &notifications[1].1["data"];
    assert_eq!(decided["decision"]["decision"], "approve");
    assert_eq!(decided["decision"]["scope"], "task");
    assert_eq!(decided["status"], "queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_tool_request_becomes_a_tool_error_and_the_job_goes_on() {
    let scenarios = json!({"scenarios": [{"name": "deny", "turns": [
        turn(&[write("x.txt", "no")]),
        complete("gave up on x"),
    ]}]});
    let Setup { stack, _dir } = setup(scenarios, &[]).await;
    let id = start(&stack, "write x").await;
    wait(&stack, &id, &["waiting_human"]).await;
    let items = pending(&stack, &id).await;
    let rid = items[0]["id"].as_str().expect("id");
    let deny = json!({"decision": "deny", "note": "not in this repository"});
    let (status, body) = decide(&stack, &id, "tool-requests", rid, deny).await;
    assert_eq!((status, &body["resumed"]), (200, &json!(true)), "{body}");
    let done = wait(&stack, &id, &["succeeded", "failed"]).await;
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    assert!(!stack.workspace(&id).join("x.txt").exists());
    let answer = tool_answer(&stack, "call_0_0").await;
    assert!(
        answer.contains("a person denied this call of `write_file`: not in this repository"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_requests_in_one_pause_resume_the_job_only_when_both_are_decided() {
    let scenarios = json!({"scenarios": [{"name": "two", "turns": [
        turn(&[call("glob", json!({"pattern": "*"})), write("a.txt", "A"), write("b.txt", "B")]),
        complete("both decided"),
    ]}]});
    let Setup { stack, _dir } = setup(scenarios, &[]).await;
    let id = start(&stack, "write two files").await;
    wait(&stack, &id, &["waiting_human"]).await;
    let items = pending(&stack, &id).await;
    assert_eq!(items.len(), 2, "{items:?}");
    let (a, b) = (
        items[0]["id"].as_str().expect("id"),
        items[1]["id"].as_str().expect("id"),
    );
    assert_eq!(items[0]["arguments"]["path"], "a.txt");
    assert_eq!(items[1]["arguments"]["path"], "b.txt");
    // The call that needed nobody ran before the pause.
    let events = stack.events(&id).await.expect("events");
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "tool_result" && e["payload"]["name"] == "glob")
    );

    let (status, body) = decide(
        &stack,
        &id,
        "tool-requests",
        a,
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!((status, &body["resumed"]), (200, &json!(false)), "{body}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let task = stack.get_task(&id).await.expect("task");
    assert_eq!(
        task["latest_job"]["status"], "waiting_human",
        "one item is still open"
    );
    assert_eq!(pending(&stack, &id).await.len(), 1);

    let (status, body) = decide(&stack, &id, "tool-requests", b, json!({"decision": "deny"})).await;
    assert_eq!((status, &body["resumed"]), (200, &json!(true)), "{body}");
    let (status, _) = decide(&stack, &id, "tool-requests", a, json!({"decision": "deny"})).await;
    assert_eq!(status, 409, "a third answer is rejected");
    let unknown = uuid::Uuid::now_v7().to_string();
    let (status, _) = decide(
        &stack,
        &id,
        "tool-requests",
        &unknown,
        json!({"decision": "deny"}),
    )
    .await;
    assert_eq!(status, 404, "an unknown item is rejected");
    let (status, _) = decide(
        &stack,
        &id,
        "tool-requests",
        "nope",
        json!({"decision": "deny"}),
    )
    .await;
    assert_eq!(status, 404);

    let done = wait(&stack, &id, &["succeeded", "failed"]).await;
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    let workspace = stack.workspace(&id);
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.txt")).expect("a"),
        "A"
    );
    assert!(!workspace.join("b.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_decisions_on_one_request_have_exactly_one_winner() {
    let scenarios = json!({"scenarios": [{"name": "race", "turns": [
        turn(&[write("r.txt", "raced")]),
        complete("raced"),
    ]}]});
    let Setup { stack, _dir } = setup(scenarios, &[]).await;
    let id = start(&stack, "race for it").await;
    wait(&stack, &id, &["waiting_human"]).await;
    let items = pending(&stack, &id).await;
    let rid = items[0]["id"].as_str().expect("id").to_owned();
    let decisions = (0..24).map(|i| {
        let verdict = if i % 2 == 0 { "approve" } else { "deny" };
        decide(
            &stack,
            &id,
            "tool-requests",
            &rid,
            json!({"decision": verdict}),
        )
    });
    let outcomes = futures::future::join_all(decisions).await;
    let winners: Vec<&(u16, Value)> = outcomes.iter().filter(|(s, _)| *s == 200).collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .filter(|(s, _)| *s != 200)
            .all(|(s, b)| *s == 409 && b["error"]["code"] == "already_decided"),
        "{outcomes:?}"
    );
    let done = wait(&stack, &id, &["succeeded", "failed"]).await;
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    let events = stack.events(&id).await.expect("events");
    assert_eq!(events.iter().filter(|e| e["kind"] == "decision").count(), 1);
    let approved = winners[0].1["required_action"]["status"] == "approved";
    assert_eq!(stack.workspace(&id).join("r.txt").exists(), approved);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_is_answered_by_a_comment_and_a_follow_up_resumes_in_the_same_movement() {
    let scenarios = json!({"scenarios": [
        {"name": "answered", "match": "The user answered", "turns": [
            turn(&[call("ask", json!({"question": "And the shade?"}))]),
            complete("painted blue"),
        ]},
        {"name": "ask", "turns": [
            to_write(),
            turn(&[call("ask", json!({"question": "Which colour?"}))]),
        ]},
    ]});
    let Setup { stack, _dir } = setup(scenarios, &[("MAX_ASKS", "1")]).await;
    let id = start(&stack, "paint the fence").await;
    let paused = wait(&stack, &id, &["waiting_human", "failed"]).await;
    assert_eq!(paused["latest_job"]["wait_reason"], "ask", "{paused}");
    let items = pending(&stack, &id).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["kind"], "ask");
    assert_eq!(items[0]["question"], "Which colour?");
    assert_eq!(items[0]["movement"], "write");
    let rid = items[0]["id"].as_str().expect("id");
    let (status, _) = decide(
        &stack,
        &id,
        "required-actions",
        rid,
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(status, 409, "an ask is answered with a comment");

    let path = format!("/api/local/tasks/{id}/comments");
    let (status, body) = stack
        .api(Method::POST, &path, Some(&json!({"body": "Blue, please."})))
        .await
        .expect("comment");
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["routed_to"], "answer");
    let done = wait(&stack, &id, &["succeeded", "failed"]).await;
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    assert_eq!(done["latest_job"]["job_no"], 2, "a follow-up job: {done}");
    assert_eq!(done["latest_job"]["result"], "painted blue");

    let requests = stack.llm.requests().await.expect("requests");
    let follow_up: Vec<&Value> = requests
        .iter()
        .filter(|r| r["scenario"] == "answered")
        .collect();
    let opening = follow_up[0]["body"]["messages"][1]["content"]
        .as_str()
        .expect("user message");
    assert!(
        opening.contains("Which colour?") && opening.contains("Blue, please."),
        "{opening}"
    );
    let system = follow_up[0]["body"]["messages"][0]["content"]
        .as_str()
        .expect("system");
    assert!(
        system.contains("## Movement: write"),
        "resumes in the asking movement"
    );
    // The ask limit (1) is reached: the second question is a tool error, not a pause.
    let answer = tool_answer(&stack, "call_0_0").await;
    assert!(answer.contains("the most allowed"), "{answer}");
    let events = stack.events(&id).await.expect("events");
    let first_job = &events[0]["job_id"];
    assert!(events.iter().any(|e| e["job_id"] == *first_job
        && e["kind"] == "job_state"
        && e["payload"]["status"] == "succeeded"));
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "decision" && e["payload"]["decision"] == "answer")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_package_is_installed_into_the_workspace_and_a_failure_is_reported() {
    let scenarios = json!({"scenarios": [{"name": "package", "turns": [
        turn(&[call("request_package", json!({"name": "six", "manager": "pip", "version": "1.16.0", "reason": "compat"}))]),
        turn(&[call("shell", json!({"command": "PYTHONPATH=.maestro/pip python3 -c 'import six; print(six.__version__)'"}))]),
        turn(&[call("request_package", json!({"name": "maestro-no-such-package-4821", "manager": "pip"}))]),
        turn(&[call("request_package", json!({"name": "is-number", "manager": "npm", "version": "7.0.0"}))]),
        complete("installed"),
    ]}]});
    let Setup { stack, _dir } = setup(scenarios, &[("TOOL_TIMEOUT_MS", "180000")]).await;
    let id = start(&stack, "install six").await;
    let paused = wait(&stack, &id, &["waiting_human", "failed"]).await;
    assert_eq!(
        paused["latest_job"]["wait_reason"], "package_request",
        "{paused}"
    );
    let items = pending(&stack, &id).await;
    assert_eq!(
        items[0]["package"],
        json!({"name": "six", "manager": "pip", "version": "1.16.0"})
    );
    let rid = items[0]["id"].as_str().expect("id");
    let (status, _) = decide(
        &stack,
        &id,
        "tool-requests",
        rid,
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(status, 404, "not a tool request");
    let (status, body) = decide(
        &stack,
        &id,
        "package-requests",
        rid,
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let paused = stack
        .wait_for_status(
            &id,
            &["waiting_human", "failed", "succeeded"],
            Duration::from_secs(240),
        )
        .await
        .expect("second request");
    assert_eq!(paused["latest_job"]["status"], "waiting_human", "{paused}");
    let installed = tool_answer(&stack, "call_0_0").await;
    assert!(installed.contains("installed six 1.16.0"), "{installed}");
    let imported = tool_answer(&stack, "call_1_0").await;
    assert!(imported.contains("1.16.0"), "{imported}");
    assert!(stack.workspace(&id).join(".maestro/pip/six.py").exists());

    let items = pending(&stack, &id).await;
    approve_package(&stack, &id, &items[0]).await;
    // The failed install is reported to the model, which asks for an npm package next.
    let paused = stack
        .wait_for_status(
            &id,
            &["waiting_human", "failed", "succeeded"],
            Duration::from_secs(240),
        )
        .await
        .expect("npm request");
    assert_eq!(paused["latest_job"]["status"], "waiting_human", "{paused}");
    let failed = tool_answer(&stack, "call_2_0").await;
    assert!(
        failed.starts_with("Error:")
            && failed.contains("installing maestro-no-such-package-4821 failed"),
        "{failed}"
    );
    let items = pending(&stack, &id).await;
    assert_eq!(items[0]["package"]["manager"], "npm");
    approve_package(&stack, &id, &items[0]).await;
    let done = stack
        .wait_for_status(&id, &["succeeded", "failed"], Duration::from_secs(240))
        .await
        .expect("done");
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    let npm = tool_answer(&stack, "call_3_0").await;
    assert!(npm.contains("installed is-number 7.0.0 with npm"), "{npm}");
    let manifest = stack
        .workspace(&id)
        .join(".maestro/npm/node_modules/is-number/package.json");
    assert!(manifest.exists(), "installed into the workspace only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_pause_waits_for_nothing_and_takes_no_decision() {
    let scenarios = json!({"scenarios": [{"name": "cancel", "turns": [
        turn(&[write("c.txt", "never")]),
        complete("not reached"),
    ]}]});
    let Setup { stack, _dir } = setup(scenarios, &[]).await;
    let id = start(&stack, "write c").await;
    wait(&stack, &id, &["waiting_human"]).await;
    let rid = pending(&stack, &id).await[0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let cancel = format!("/api/local/tasks/{id}/cancel");
    let (status, _) = stack
        .api(Method::POST, &cancel, None)
        .await
        .expect("cancel");
    assert_eq!(status, 200);
    assert!(
        pending(&stack, &id).await.is_empty(),
        "nothing is waited for"
    );
    let (status, body) = decide(
        &stack,
        &id,
        "tool-requests",
        &rid,
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("not_waiting")),
        "{body}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let task = stack.get_task(&id).await.expect("task");
    assert_eq!(task["latest_job"]["status"], "cancelled");
    assert!(!stack.workspace(&id).join("c.txt").exists());
}
