//! Subtasks through the HTTP API, with the scripted LLM: `delegate` calls start child tasks
//! that run in parallel in the parent's workspace; the parent waits (`waiting_subtasks`) and
//! resumes with each child's result as the result of its call, then the subtask resume
//! notice. A child's pause for a person shows on its parent; a comment to a waiting parent is
//! an interjection; cancelling a parent cancels its children; a `delegate` next to a call that
//! waits for an approval waits too. (Recovery: `tests/subtask_recovery.rs`.)

use maestro_api::{DecideRequest, RoutedTo};
use maestro_domain::{EventKind, JobStatus, TaskId, WaitReason};
use maestro_testkit::script::{call, complete, delegate, turn};
use maestro_testkit::{Stack, StackOptions, TaskExt, of_kind};
use serde_json::{Value, json};

/// Every built-in tool, and sub-agents.
const POLICY: &str = r#"{"allowed_tools": ["*", "delegate"]}"#;

async fn setup(scenarios: Value, policy: &str) -> Stack {
    let options = StackOptions::new(scenarios)
        .policy(policy)
        .env("MAX_SUBTASK_DEPTH", "1");
    Stack::up(options).await
}

async fn start(stack: &Stack, instruction: &str) -> TaskId {
    let body = json!({"instruction": instruction, "piece": "chat"});
    stack.create(&body).await.id()
}

/// The LLM requests made for one scenario.
async fn requests_of(stack: &Stack, scenario: &str) -> Vec<Value> {
    let requests = stack.llm.requests().await.expect("requests");
    requests
        .into_iter()
        .filter(|r| r["scenario"] == scenario)
        .collect()
}

fn tool_names(request: &Value) -> Vec<String> {
    request["body"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name").to_owned())
        .collect()
}

fn messages(request: &Value) -> Vec<Value> {
    request["body"]["messages"]
        .as_array()
        .cloned()
        .expect("messages")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegated_subtasks_run_in_parallel_and_answer_their_calls() {
    let scenarios = json!({"scenarios": [
        {"name": "parent", "match": "PARENT-WORK", "turns": [
            turn(&[
                delegate("CHILD-A: write a.txt"),
                delegate("CHILD-B: give up"),
                // Finishing in the reply that delegates is refused: the results come first.
                call("complete", json!({"result": "too early"})),
            ]),
            turn(&[call("read_file", json!({"path": "a.txt"}))]),
            complete("parent done"),
        ]},
        {"name": "child-a", "match": "CHILD-A", "turns": [
            json!({"delay_ms": 1500, "tool_calls": [
                call("write_file", json!({"path": "a.txt", "content": "from a"}))
            ]}),
            complete("a wrote a.txt"),
        ]},
        {"name": "child-b", "match": "CHILD-B", "turns": [
            json!({"delay_ms": 1500, "tool_calls": [
                call("complete", json!({"result": "cannot", "status": "abort"}))
            ]}),
        ]},
    ]});
    let stack = setup(scenarios, POLICY).await;
    let id = start(&stack, "PARENT-WORK: split the work").await;

    let waiting = stack.settle(id).await;
    assert_eq!(
        waiting.job().status,
        JobStatus::WaitingSubtasks,
        "{waiting:?}"
    );
    assert_eq!(waiting.job().wait_reason, None);
    let items = stack.required_actions(id).await;
    assert_eq!(items.len(), 2, "one item per child: {items:?}");
    assert!(
        items.iter().all(|i| i.kind == WaitReason::Subtask),
        "{items:?}"
    );
    // Subtask items are not a person's to decide.
    let refused = stack
        .decide(id, items[0].id, &DecideRequest::new("approve"))
        .await
        .expect_err("refused");
    assert_eq!(refused.pair(), (409, "decided_by_the_subtask"), "{refused}");

    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.job().result.as_deref(), Some("parent done"));
    assert_eq!(done.job().job_no, 1, "the same job resumed");

    // The children: one level down, in the parent's workspace, run at the same time.
    let children = stack.subtasks(id).await;
    assert_eq!(children.len(), 2, "{children:?}");
    let child = |instruction: &str| {
        children
            .iter()
            .find(|c| c.instruction == instruction)
            .expect("the child")
    };
    let (a, b) = (child("CHILD-A: write a.txt"), child("CHILD-B: give up"));
    assert_eq!(a.status, JobStatus::Succeeded);
    assert_eq!(a.result.as_deref(), Some("a wrote a.txt"));
    assert_eq!(b.status, JobStatus::Failed);
    assert_eq!(a.depth, 1);
    assert_eq!(a.piece, "chat", "the default subtask piece");
    assert_eq!(a.parent_job_id, Some(done.job().id));
    let (a_task, b_task) = (stack.task(a.id).await, stack.task(b.id).await);
    assert_eq!(a_task.task.parent_task_id, Some(id));
    assert_eq!(a_task.task.depth, 1);
    let span = |t: &maestro_api::Task| {
        let job = t.job();
        (
            job.started_at.expect("started"),
            job.finished_at.expect("finished"),
        )
    };
    let ((a_start, a_end), (b_start, b_end)) = (span(&a_task), span(&b_task));
    assert!(
        a_start < b_end && b_start < a_end,
        "the subtasks ran at the same time: a {a_start}..{a_end}, b {b_start}..{b_end}"
    );
    assert_eq!(
        std::fs::read_to_string(stack.workspace(id).join("a.txt")).expect("a.txt"),
        "from a",
        "the child wrote into its parent's workspace"
    );
    assert!(
        !stack.workspace(a.id).exists() && !stack.workspace(b.id).exists(),
        "a subtask gets no workspace directory of its own"
    );

    // What the parent's model saw when it resumed: each call answered by its child, the
    // early `complete` refused, then the notice; and the child's file.
    let parent = requests_of(&stack, "parent").await;
    assert_eq!(parent.len(), 3, "{parent:?}");
    let resumed = messages(&parent[1]);
    let answer = |call_id: &str| {
        resumed
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_else(|| panic!("no answer to {call_id}"))
            .to_owned()
    };
    assert_eq!(
        answer("call_0_0"),
        format!("Subtask {} succeeded. Its result:\na wrote a.txt", a.id)
    );
    assert!(
        answer("call_0_1").starts_with(&format!("Error: subtask {} failed: aborted", b.id)),
        "{}",
        answer("call_0_1")
    );
    assert!(answer("call_0_2").starts_with("Error: not done yet"));
    let notice = resumed.last().expect("a last message");
    assert_eq!(notice["role"], "user");
    assert!(
        notice["content"].as_str().expect("text").starts_with(
            "[Subtasks finished] The 2 subtask(s) you started are over: 1 succeeded, 1 failed"
        ),
        "{notice}"
    );
    let read = messages(&parent[2]);
    let read = read
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .expect("read");
    assert_eq!(read["content"], "from a");
    // The parent's conversation only grew (the prompt cache holds across the wait), and the
    // tools stayed the same bytes.
    let first = messages(&parent[0]);
    assert_eq!(&resumed[..first.len()], &first[..]);
    assert_eq!(parent[0]["raw_tools"], parent[2]["raw_tools"]);
    assert!(tool_names(&parent[0]).contains(&"delegate".to_owned()));
    // At MAX_SUBTASK_DEPTH the children are not offered `delegate`.
    for child in requests_of(&stack, "child-a").await {
        assert!(!tool_names(&child).contains(&"delegate".to_owned()));
    }

    // The parent's events: the wait with its items, then one decision per child.
    let events = stack.events(id).await;
    let wait_event = of_kind(&events, EventKind::JobState)
        .find(|e| e.payload["status"] == "waiting_subtasks")
        .expect("the wait");
    let waited = wait_event.payload["required_actions"]
        .as_array()
        .expect("items");
    assert_eq!(waited.len(), 2);
    let decisions: Vec<&Value> = of_kind(&events, EventKind::Decision)
        .filter(|e| e.payload["kind"] == "subtask")
        .map(|e| &e.payload)
        .collect();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert!(
        decisions.iter().any(|d| d["resumed"] == true),
        "the last one queued the parent again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_waiting_for_a_person_shows_on_its_parent_and_cancel_reaches_the_whole_tree() {
    let scenarios = json!({"scenarios": [
        // The child's follow-up job, once its question is answered.
        {"name": "child-answered", "match": "The user answered", "turns": [complete("blue")]},
        {"name": "parent", "match": "PARENT-ASKS", "turns": [
            turn(&[delegate("CHILD-ASK: pick a colour")]),
            complete("the colour is blue"),
        ]},
        {"name": "child", "match": "CHILD-ASK", "turns": [
            turn(&[call("ask", json!({"question": "which colour?"}))]),
        ]},
        {"name": "slow-parent", "match": "SLOW-PARENT", "turns": [
            turn(&[delegate("SLOW-CHILD: take your time")]),
        ]},
        {"name": "slow-child", "match": "SLOW-CHILD", "turns": [
            json!({"delay_ms": 60000, "tool_calls": [call("complete", json!({"result": "late"}))]}),
        ]},
    ]});
    let stack = setup(scenarios, POLICY).await;
    let id = start(&stack, "PARENT-ASKS: ask through a child").await;
    let child_id = stack.wait_for_subtasks(id, 1).await[0].id;
    stack.wait(child_id, &[JobStatus::WaitingHuman]).await;
    stack.wait(id, &[JobStatus::WaitingSubtasks]).await;

    // The parent lists everything it waits for: its subtask item and the child's question.
    let items = stack.required_actions(id).await;
    let kinds: Vec<(WaitReason, TaskId)> = items.iter().map(|i| (i.kind, i.task_id)).collect();
    assert_eq!(
        kinds,
        [(WaitReason::Subtask, id), (WaitReason::Ask, child_id)],
        "{items:?}"
    );
    assert_eq!(items[1].text("question"), Some("which colour?"));

    // A comment to the waiting parent is an interjection, delivered when it resumes.
    let ps = stack
        .comment(id, "PS: keep it short")
        .await
        .expect("posted");
    assert_eq!(ps.routed_to, RoutedTo::Interjection);
    // The child's question is answered on the child; then the child finishes, and so does
    // the parent.
    stack.comment(child_id, "blue").await.expect("answered");
    let done = stack.wait_over(id).await;
    assert_eq!(
        done.job().result.as_deref(),
        Some("the colour is blue"),
        "{done:?}"
    );
    let parent = requests_of(&stack, "parent").await;
    let last = messages(parent.last().expect("request"));
    let said = |role: &str, check: &dyn Fn(&str) -> bool| {
        last.iter()
            .any(|m| m["role"] == role && m["content"].as_str().is_some_and(check))
    };
    assert!(
        said("user", &|c| c.contains("PS: keep it short")),
        "the interjection reached the parent: {last:?}"
    );
    assert!(
        said("tool", &|c| c.ends_with("Its result:\nblue")),
        "{last:?}"
    );

    // Cancelling a waiting parent cancels its running child.
    let slow = start(&stack, "SLOW-PARENT: wait a long time").await;
    let slow_child = stack.wait_for_subtasks(slow, 1).await[0].id;
    stack.wait(slow, &[JobStatus::WaitingSubtasks]).await;
    stack.wait(slow_child, &[JobStatus::Running]).await;
    let cancelled = stack.cancel(slow).await.expect("cancelled");
    assert_eq!(cancelled.job().status, JobStatus::Cancelled);
    let child = stack.task(slow_child).await;
    assert_eq!(child.job().status, JobStatus::Cancelled, "{child:?}");
    let events = stack.events(slow_child).await;
    let cancelled = events.last().expect("an event");
    assert!(
        cancelled.payload["reason"]
            .as_str()
            .expect("reason")
            .contains("a task above it was cancelled"),
        "{cancelled:?}"
    );
    let again = stack.cancel(slow).await.expect_err("refused");
    assert_eq!(again.status, 409, "nothing left to cancel");
}

/// A `delegate` next to a call that waits for a person's approval waits too: the child starts
/// only after the approved call ran, and sees what it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegates_wait_for_an_approval_in_the_same_reply() {
    let scenarios = json!({"scenarios": [
        {"name": "child", "match": "CHILD-READ", "turns": [
            turn(&[call("read_file", json!({"path": "spec.md"}))]),
            complete("read it"),
        ]},
        {"name": "parent", "match": "PARENT-APPROVE", "turns": [
            turn(&[
                call("write_file", json!({"path": "spec.md", "content": "the spec"})),
                delegate("CHILD-READ: read spec.md"),
            ]),
            complete("done"),
        ]},
    ]});
    let policy = r#"{"allowed_tools": ["*", "delegate"], "gated_tools": ["write_file"]}"#;
    let stack = setup(scenarios, policy).await;
    let id = start(&stack, "PARENT-APPROVE: write, then hand over").await;
    let paused = stack.settle(id).await;
    assert_eq!(
        paused.job().wait_reason,
        Some(WaitReason::ToolRequest),
        "{paused:?}"
    );
    assert!(
        stack.subtasks(id).await.is_empty(),
        "no child before the approval"
    );
    let rid = stack.required_actions(id).await[0].id;
    stack
        .decide_via(id, "tool-requests", rid, &DecideRequest::new("approve"))
        .await
        .expect("approved");
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().result.as_deref(), Some("done"), "{done:?}");
    let child = requests_of(&stack, "child").await;
    let read = messages(child.last().expect("a request"));
    let read = read
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .expect("read");
    assert_eq!(
        read["content"], "the spec",
        "the child saw the approved write"
    );
}
