//! Pauses and human answers through the HTTP API, with the scripted LLM: tool requests
//! (approve once / for the task, deny, two in one pause, a race of decisions), a comment during
//! an approval wait, ASK answered by a comment (a follow-up job in the same movement, with the
//! ask limit), package requests installed with real `pip install` / `npm install` runs into the
//! workspace (and a failed install reported to the model), and a cancelled pause.

use std::time::Duration;

use maestro_api::{DecideRequest, RequiredAction, RoutedTo};
use maestro_domain::{ActionStatus, EventKind, JobStatus, TaskId, WaitReason};
use maestro_testkit::script::{call, complete, turn};
use maestro_testkit::{Stack, StackOptions, TaskExt, of_kind};
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

const TOOLS: &str = "tool-requests";
const PACKAGES: &str = "package-requests";

async fn setup(scenarios: Value, env: &[(&str, &str)]) -> Stack {
    let mut options = StackOptions::new(scenarios)
        .policy(POLICY)
        .piece("twostep", PIECE);
    for (key, value) in env {
        options = options.env(key, value);
    }
    Stack::up(options).await
}

fn write(path: &str, content: &str) -> Value {
    call("write_file", json!({"path": path, "content": content}))
}

/// One write (that needs an approval), then `complete` with `result`.
fn write_then(name: &str, path: &str, result: &str) -> Value {
    json!({"scenarios": [{"name": name, "turns": [
        turn(&[write(path, name)]),
        complete(result),
    ]}]})
}

fn to_write() -> Value {
    turn(&[call(
        "transition",
        json!({"target": "write", "reason": "looked"}),
    )])
}

/// Start a task on the two-step piece and wait until its job pauses for `reason`.
async fn paused(stack: &Stack, instruction: &str, reason: WaitReason) -> TaskId {
    let body = json!({"instruction": instruction, "piece": "twostep"});
    let task = stack.settle(stack.new_task(&body).await).await;
    assert_eq!(task.job().status, JobStatus::WaitingHuman, "{task:?}");
    assert_eq!(task.job().wait_reason, Some(reason), "{task:?}");
    task.id()
}

fn verdict(decision: &str) -> DecideRequest {
    DecideRequest::new(decision)
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

/// The notifications recorded for the stack's tasks (kind, payload), once `until` is among
/// them (or 20 s have passed).
async fn notifications(stack: &Stack, until: &str) -> Vec<(String, Value)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let rows: Vec<(String, Value)> =
            sqlx::query_as("SELECT kind, payload FROM notifications ORDER BY event_seq")
                .fetch_all(&stack.db.pool)
                .await
                .expect("notifications");
        if rows.iter().any(|(k, _)| k == until) || tokio::time::Instant::now() > deadline {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_tool_request_runs_exactly_the_reviewed_call_in_the_same_movement() {
    let scenarios = json!({"scenarios": [{"name": "approve", "turns": [
        to_write(),
        turn(&[write("note.txt", "approved")]),
        turn(&[write("second.txt", "granted for the task")]),
        complete("written"),
    ]}]});
    let stack = setup(scenarios, &[]).await;
    let id = paused(&stack, "write the note", WaitReason::ToolRequest).await;

    let items = stack.required_actions(id).await;
    assert_eq!(items.len(), 1, "{items:?}");
    let item = &items[0];
    assert_eq!(item.kind, WaitReason::ToolRequest);
    assert_eq!(item.status, ActionStatus::Pending);
    assert_eq!(item.text("tool"), Some("write_file"));
    assert_eq!(
        item.detail["arguments"],
        json!({"path": "note.txt", "content": "approved"})
    );
    assert_eq!(item.movement, "write");
    let rid = item.id;
    let hash = item.text("arguments_hash").expect("hash").to_owned();
    // The item links to the assistant message that proposed the call.
    let events = stack.events(id).await;
    let source = events
        .iter()
        .find(|e| Some(e.seq) == item.source_seq)
        .expect("source event");
    assert_eq!(source.kind, EventKind::Message);
    assert_eq!(
        source.payload["tool_calls"][0]["function"]["name"],
        "write_file"
    );
    // The pause event names the items (the notification carries the same).
    let pause = of_kind(&events, EventKind::JobState)
        .filter(|e| e.payload["status"] == "waiting_human")
        .last()
        .expect("pause event");
    assert_eq!(pause.payload["required_actions"][0]["id"], json!(rid));
    assert!(
        !stack.workspace(id).join("note.txt").exists(),
        "nothing ran yet"
    );

    // A comment during the wait is refused and writes nothing.
    let before = stack.comments(id).await.len();
    let refused = stack.comment(id, "hurry up").await.expect_err("refused");
    assert_eq!(refused.pair(), (409, "decision_pending"));
    assert!(refused.message.contains("tool request"), "{refused}");
    assert_eq!(stack.comments(id).await.len(), before, "nothing written");

    // Bad decisions change nothing.
    let bad = stack.decide_via(id, TOOLS, rid, &verdict("maybe")).await;
    assert_eq!(bad.expect_err("refused").status, 422);
    let stale = DecideRequest {
        arguments_hash: Some("0000".into()),
        ..verdict("approve")
    };
    let refused = stack
        .decide_via(id, TOOLS, rid, &stale)
        .await
        .expect_err("stale");
    assert_eq!(refused.pair(), (409, "arguments_changed"));
    let wrong = stack
        .decide_via(id, PACKAGES, rid, &verdict("approve"))
        .await;
    assert_eq!(
        wrong.expect_err("refused").status,
        404,
        "not a package request"
    );
    assert_eq!(stack.required_actions(id).await.len(), 1);

    let approve = DecideRequest {
        scope: Some("task".into()),
        arguments_hash: Some(hash),
        ..verdict("approve")
    };
    let decided = stack
        .decide_via(id, TOOLS, rid, &approve)
        .await
        .expect("decided");
    assert!(decided.resumed);
    assert_eq!(decided.required_action.status, ActionStatus::Approved);
    let again = stack
        .decide_via(id, TOOLS, rid, &approve)
        .await
        .expect_err("again");
    assert_eq!(again.pair(), (409, "already_decided"));

    let done = stack
        .wait(
            id,
            &[
                JobStatus::Succeeded,
                JobStatus::Failed,
                JobStatus::WaitingHuman,
            ],
        )
        .await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    let workspace = stack.workspace(id);
    assert_eq!(
        std::fs::read_to_string(workspace.join("note.txt")).expect("note"),
        "approved"
    );
    // Granted for the task: the next write ran without another pause.
    assert_eq!(
        std::fs::read_to_string(workspace.join("second.txt")).expect("second"),
        "granted for the task"
    );
    let events = stack.events(id).await;
    let movements: Vec<&Value> = of_kind(&events, EventKind::Movement)
        .map(|e| &e.payload["name"])
        .collect();
    assert_eq!(
        movements,
        [&json!("look"), &json!("write")],
        "resumed in the same movement"
    );
    let pauses = of_kind(&events, EventKind::JobState)
        .filter(|e| e.payload["status"] == "waiting_human")
        .count();
    assert_eq!(pauses, 1);
    assert!(
        of_kind(&events, EventKind::Decision)
            .any(|e| e.payload["decision"] == "approve" && e.payload["resumed"] == true)
    );
    assert!(
        events.windows(2).all(|w| w[0].job_id == w[1].job_id),
        "one job throughout"
    );

    // The pause and the decision are notifications (webhooks), the pause with its items.
    let notifications = notifications(&stack, "task.succeeded").await;
    let kinds: Vec<&str> = notifications.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        ["task.waiting_human", "task.decided", "task.succeeded"]
    );
    let waiting = &notifications[0].1["data"];
    assert_eq!(waiting["wait_reason"], "tool_request");
    assert_eq!(waiting["required_actions"][0]["id"], json!(rid));
    assert_eq!(waiting["required_actions"][0]["tool"], "write_file");
    let decided = &notifications[1].1["data"];
    assert_eq!(decided["decision"]["decision"], "approve");
    assert_eq!(decided["decision"]["scope"], "task");
    assert_eq!(decided["status"], "queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_tool_request_becomes_a_tool_error_and_the_job_goes_on() {
    let stack = setup(write_then("deny", "x.txt", "gave up on x"), &[]).await;
    let id = paused(&stack, "write x", WaitReason::ToolRequest).await;
    let rid = stack.required_actions(id).await[0].id;
    let deny = DecideRequest {
        note: Some("not in this repository".into()),
        ..verdict("deny")
    };
    let decided = stack
        .decide_via(id, TOOLS, rid, &deny)
        .await
        .expect("decided");
    assert!(decided.resumed, "{decided:?}");
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert!(!stack.workspace(id).join("x.txt").exists());
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
    let stack = setup(scenarios, &[]).await;
    let id = paused(&stack, "write two files", WaitReason::ToolRequest).await;
    let items = stack.required_actions(id).await;
    assert_eq!(items.len(), 2, "{items:?}");
    let (a, b) = (items[0].id, items[1].id);
    assert_eq!(items[0].detail["arguments"]["path"], "a.txt");
    assert_eq!(items[1].detail["arguments"]["path"], "b.txt");
    // The call that needed nobody ran before the pause.
    let events = stack.events(id).await;
    assert!(of_kind(&events, EventKind::ToolResult).any(|e| e.payload["name"] == "glob"));

    let decided = stack.decide_via(id, TOOLS, a, &verdict("approve")).await;
    assert!(!decided.expect("decided").resumed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let task = stack.task(id).await;
    assert_eq!(
        task.job().status,
        JobStatus::WaitingHuman,
        "one item is still open"
    );
    assert_eq!(stack.required_actions(id).await.len(), 1);

    let decided = stack.decide_via(id, TOOLS, b, &verdict("deny")).await;
    assert!(decided.expect("decided").resumed);
    let third = stack.decide_via(id, TOOLS, a, &verdict("deny")).await;
    assert_eq!(
        third.expect_err("refused").status,
        409,
        "a third answer is rejected"
    );
    let unknown = uuid::Uuid::now_v7();
    let refused = stack.decide_via(id, TOOLS, unknown, &verdict("deny")).await;
    assert_eq!(
        refused.expect_err("unknown").status,
        404,
        "an unknown item is rejected"
    );
    let refused = stack.decide_via(id, TOOLS, "nope", &verdict("deny")).await;
    assert_eq!(refused.expect_err("malformed").status, 404);

    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    let workspace = stack.workspace(id);
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.txt")).expect("a"),
        "A"
    );
    assert!(!workspace.join("b.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_decisions_on_one_request_have_exactly_one_winner() {
    let stack = setup(write_then("race", "r.txt", "raced"), &[]).await;
    let id = paused(&stack, "race for it", WaitReason::ToolRequest).await;
    let rid = stack.required_actions(id).await[0].id;
    let requests: Vec<DecideRequest> = (0..24)
        .map(|i| verdict(if i % 2 == 0 { "approve" } else { "deny" }))
        .collect();
    let decisions = requests
        .iter()
        .map(|request| stack.decide_via(id, TOOLS, rid, request));
    let outcomes = futures::future::join_all(decisions).await;
    let winners: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .filter_map(|o| o.as_ref().err())
            .all(|e| e.status == 409 && e.code == "already_decided"),
        "{outcomes:?}"
    );
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    let events = stack.events(id).await;
    assert_eq!(of_kind(&events, EventKind::Decision).count(), 1);
    let approved = winners[0].required_action.status == ActionStatus::Approved;
    assert_eq!(stack.workspace(id).join("r.txt").exists(), approved);
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
    let stack = setup(scenarios, &[("MAX_ASKS", "1")]).await;
    let id = paused(&stack, "paint the fence", WaitReason::Ask).await;
    let items = stack.required_actions(id).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].kind, WaitReason::Ask);
    assert_eq!(items[0].text("question"), Some("Which colour?"));
    assert_eq!(items[0].movement, "write");
    let refused = stack.decide(id, items[0].id, &verdict("approve")).await;
    assert_eq!(
        refused.expect_err("refused").status,
        409,
        "an ask is answered with a comment"
    );

    let posted = stack.comment(id, "Blue, please.").await.expect("answered");
    assert_eq!(posted.routed_to, RoutedTo::Answer);
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.job().job_no, 2, "a follow-up job: {done:?}");
    assert_eq!(done.job().result.as_deref(), Some("painted blue"));

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
    let events = stack.events(id).await;
    let first_job = events[0].job_id;
    assert!(
        of_kind(&events, EventKind::JobState)
            .any(|e| e.job_id == first_job && e.payload["status"] == "succeeded")
    );
    assert!(of_kind(&events, EventKind::Decision).any(|e| e.payload["decision"] == "answer"));
}

/// Approve the task's pending package request (there is one).
async fn approve_package(stack: &Stack, id: TaskId) -> RequiredAction {
    let item = stack.required_actions(id).await.remove(0);
    let decided = stack
        .decide_via(id, PACKAGES, item.id, &verdict("approve"))
        .await;
    decided.expect("approved");
    item
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
    let stack = setup(scenarios, &[("TOOL_TIMEOUT_MS", "180000")]).await;
    let id = paused(&stack, "install six", WaitReason::PackageRequest).await;
    let items = stack.required_actions(id).await;
    assert_eq!(
        items[0].detail["package"],
        json!({"name": "six", "manager": "pip", "version": "1.16.0"})
    );
    let wrong = stack
        .decide_via(id, TOOLS, items[0].id, &verdict("approve"))
        .await;
    assert_eq!(
        wrong.expect_err("refused").status,
        404,
        "not a tool request"
    );
    approve_package(&stack, id).await;

    let installs = Duration::from_secs(240);
    let settled = [
        JobStatus::WaitingHuman,
        JobStatus::Failed,
        JobStatus::Succeeded,
    ];
    let second = stack.wait_within(id, &settled, installs).await;
    assert_eq!(second.job().status, JobStatus::WaitingHuman, "{second:?}");
    let installed = tool_answer(&stack, "call_0_0").await;
    assert!(installed.contains("installed six 1.16.0"), "{installed}");
    let imported = tool_answer(&stack, "call_1_0").await;
    assert!(imported.contains("1.16.0"), "{imported}");
    assert!(stack.workspace(id).join(".maestro/pip/six.py").exists());

    approve_package(&stack, id).await;
    // The failed install is reported to the model, which asks for an npm package next.
    let third = stack.wait_within(id, &settled, installs).await;
    assert_eq!(third.job().status, JobStatus::WaitingHuman, "{third:?}");
    let failed = tool_answer(&stack, "call_2_0").await;
    assert!(
        failed.starts_with("Error:")
            && failed.contains("installing maestro-no-such-package-4821 failed"),
        "{failed}"
    );
    let npm_item = approve_package(&stack, id).await;
    assert_eq!(npm_item.detail["package"]["manager"], "npm");
    let over = [JobStatus::Succeeded, JobStatus::Failed];
    let done = stack.wait_within(id, &over, installs).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    let npm = tool_answer(&stack, "call_3_0").await;
    assert!(npm.contains("installed is-number 7.0.0 with npm"), "{npm}");
    let manifest = stack
        .workspace(id)
        .join(".maestro/npm/node_modules/is-number/package.json");
    assert!(manifest.exists(), "installed into the workspace only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_pause_waits_for_nothing_and_takes_no_decision() {
    let stack = setup(write_then("cancel", "c.txt", "not reached"), &[]).await;
    let id = paused(&stack, "write c", WaitReason::ToolRequest).await;
    let rid = stack.required_actions(id).await[0].id;
    stack.cancel(id).await.expect("cancelled");
    assert!(
        stack.required_actions(id).await.is_empty(),
        "nothing is waited for"
    );
    let refused = stack.decide_via(id, TOOLS, rid, &verdict("approve")).await;
    let refused = refused.expect_err("refused");
    assert_eq!(refused.pair(), (409, "not_waiting"), "{refused}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let task = stack.task(id).await;
    assert_eq!(task.job().status, JobStatus::Cancelled);
    assert!(!stack.workspace(id).join("c.txt").exists());
}
