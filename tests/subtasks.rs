//! Subtasks through the HTTP API, with the scripted LLM: `delegate` calls start child tasks
//! that run in parallel in the parent's workspace; the parent waits (`waiting_subtasks`) and
//! resumes with each child's result as the result of its call, then the subtask resume
//! notice. A child's pause for a person shows on its parent; a comment to a waiting parent is
//! an interjection; cancelling a parent cancels its children; the join survives a scheduler
//! that was down while the children finished, and the children a worker killed mid-run.

use std::time::Duration;

use maestro_testkit::script::{call, complete, turn};
use maestro_testkit::{Service, Stack, StackOptions};
use reqwest::Method;
use serde_json::{Value, json};

/// Every built-in tool, and sub-agents.
const POLICY: &str = r#"{"allowed_tools": ["*", "delegate"]}"#;

async fn setup(scenarios: Value, env: &[(&str, &str)]) -> Stack {
    setup_with(scenarios, env, POLICY).await
}

async fn setup_with(scenarios: Value, env: &[(&str, &str)], policy: &str) -> Stack {
    let mut options = StackOptions::new(scenarios)
        .policy(policy)
        .env("MAX_SUBTASK_DEPTH", "1");
    for (key, value) in env {
        options = options.env(key, value);
    }
    Stack::spawn(options).await.expect("the stack starts")
}

fn delegate(instruction: &str) -> Value {
    call("delegate", json!({"instruction": instruction}))
}

async fn start(stack: &Stack, instruction: &str) -> String {
    let task = stack
        .create_task(json!({"instruction": instruction, "piece": "chat"}))
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

async fn get(stack: &Stack, path: &str) -> Value {
    let (status, body) = stack.api(Method::GET, path, None).await.expect("get");
    assert_eq!(status, 200, "{path}: {body}");
    body
}

async fn subtasks(stack: &Stack, id: &str) -> Vec<Value> {
    let body = get(stack, &format!("/api/local/tasks/{id}/subtasks")).await;
    body["subtasks"].as_array().cloned().expect("subtasks")
}

/// Wait until the task has `n` subtasks.
async fn children(stack: &Stack, id: &str, n: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let children = subtasks(stack, id).await;
        if children.len() >= n {
            return children;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id} has {children:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
    let stack = setup(scenarios, &[]).await;
    let id = start(&stack, "PARENT-WORK: split the work").await;

    let waiting = wait(&stack, &id, &["waiting_subtasks", "succeeded", "failed"]).await;
    assert_eq!(
        waiting["latest_job"]["status"], "waiting_subtasks",
        "{waiting}"
    );
    assert_eq!(waiting["latest_job"]["wait_reason"], Value::Null);
    let items = get(&stack, &format!("/api/local/tasks/{id}/required-actions")).await;
    let items = items["required_actions"]
        .as_array()
        .cloned()
        .expect("items");
    assert_eq!(items.len(), 2, "one item per child: {items:?}");
    assert!(items.iter().all(|i| i["kind"] == "subtask"), "{items:?}");
    // Subtask items are not a person's to decide.
    let rid = items[0]["id"].as_str().expect("id");
    let path = format!("/api/local/tasks/{id}/required-actions/{rid}/decide");
    let (status, body) = stack
        .api(Method::POST, &path, Some(&json!({"decision": "approve"})))
        .await
        .expect("decide");
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "decided_by_the_subtask");

    let done = wait(&stack, &id, &["succeeded", "failed"]).await;
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    assert_eq!(done["latest_job"]["result"], "parent done");
    assert_eq!(done["latest_job"]["job_no"], 1, "the same job resumed");

    // The children: one level down, in the parent's workspace, run at the same time.
    let children = subtasks(&stack, &id).await;
    assert_eq!(children.len(), 2, "{children:?}");
    let a = children
        .iter()
        .find(|c| c["instruction"] == "CHILD-A: write a.txt")
        .expect("child a");
    let b = children
        .iter()
        .find(|c| c["instruction"] == "CHILD-B: give up")
        .expect("child b");
    assert_eq!(a["status"], "succeeded");
    assert_eq!(a["result"], "a wrote a.txt");
    assert_eq!(b["status"], "failed");
    assert_eq!(a["depth"], 1);
    assert_eq!(a["piece"], "chat", "the default subtask piece");
    assert_eq!(a["parent_job_id"], done["latest_job"]["id"]);
    let a_id = a["id"].as_str().expect("id");
    let b_id = b["id"].as_str().expect("id");
    let a_task = stack.get_task(a_id).await.expect("child a");
    let b_task = stack.get_task(b_id).await.expect("child b");
    assert_eq!(a_task["parent_task_id"], json!(id));
    assert_eq!(a_task["depth"], 1);
    let span = |t: &Value| {
        let at = |k: &str| {
            chrono::DateTime::parse_from_rfc3339(t["latest_job"][k].as_str().expect(k))
                .expect("time")
        };
        (at("started_at"), at("finished_at"))
    };
    let ((a_start, a_end), (b_start, b_end)) = (span(&a_task), span(&b_task));
    assert!(
        a_start < b_end && b_start < a_end,
        "the subtasks ran at the same time: a {a_start}..{a_end}, b {b_start}..{b_end}"
    );
    assert_eq!(
        std::fs::read_to_string(stack.workspace(&id).join("a.txt")).expect("a.txt"),
        "from a",
        "the child wrote into its parent's workspace"
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
        format!("Subtask {a_id} succeeded. Its result:\na wrote a.txt")
    );
    assert!(
        answer("call_0_1").starts_with(&format!("Error: subtask {b_id} failed: aborted")),
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
    let events = stack.events(&id).await.expect("events");
    let wait_event = events
        .iter()
        .find(|e| e["kind"] == "job_state" && e["payload"]["status"] == "waiting_subtasks")
        .expect("the wait");
    let waited: Vec<&Value> = wait_event["payload"]["required_actions"]
        .as_array()
        .expect("items")
        .iter()
        .collect();
    assert_eq!(waited.len(), 2);
    let decisions: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "decision" && e["payload"]["kind"] == "subtask")
        .collect();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert!(
        decisions.iter().any(|d| d["payload"]["resumed"] == true),
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
    let stack = setup(scenarios, &[]).await;
    let id = start(&stack, "PARENT-ASKS: ask through a child").await;
    let child = children(&stack, &id, 1).await.remove(0);
    let child_id = child["id"].as_str().expect("id").to_owned();
    wait(&stack, &child_id, &["waiting_human"]).await;
    wait(&stack, &id, &["waiting_subtasks"]).await;

    // The parent lists everything it waits for: its subtask item and the child's question.
    let items = get(&stack, &format!("/api/local/tasks/{id}/required-actions")).await;
    let items = items["required_actions"]
        .as_array()
        .cloned()
        .expect("items");
    let kinds: Vec<(&str, &str)> = items
        .iter()
        .map(|i| {
            (
                i["kind"].as_str().expect("kind"),
                i["task_id"].as_str().expect("task"),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [("subtask", id.as_str()), ("ask", child_id.as_str())],
        "{items:?}"
    );
    assert_eq!(items[1]["question"], "which colour?");

    // A comment to the waiting parent is an interjection, delivered when it resumes.
    let path = format!("/api/local/tasks/{id}/comments");
    let (status, body) = stack
        .api(
            Method::POST,
            &path,
            Some(&json!({"body": "PS: keep it short"})),
        )
        .await
        .expect("comment");
    assert_eq!(status, 201, "{body}");
    // The child's question is answered on the child; then the child finishes, and so does
    // the parent.
    let path = format!("/api/local/tasks/{child_id}/comments");
    let (status, body) = stack
        .api(Method::POST, &path, Some(&json!({"body": "blue"})))
        .await
        .expect("answer");
    assert_eq!(status, 201, "{body}");
    let done = wait(&stack, &id, &["succeeded", "failed"]).await;
    assert_eq!(done["latest_job"]["result"], "the colour is blue", "{done}");
    let parent = requests_of(&stack, "parent").await;
    let last = messages(parent.last().expect("request"));
    assert!(
        last.iter().any(|m| m["role"] == "user"
            && m["content"]
                .as_str()
                .is_some_and(|c| c.contains("PS: keep it short"))),
        "the interjection reached the parent: {last:?}"
    );
    assert!(
        last.iter().any(|m| m["role"] == "tool"
            && m["content"]
                .as_str()
                .is_some_and(|c| c.ends_with("Its result:\nblue"))),
        "{last:?}"
    );

    // Cancelling a waiting parent cancels its running child.
    let slow = start(&stack, "SLOW-PARENT: wait a long time").await;
    let slow_child = children(&stack, &slow, 1).await.remove(0);
    let slow_child = slow_child["id"].as_str().expect("id").to_owned();
    wait(&stack, &slow, &["waiting_subtasks"]).await;
    wait(&stack, &slow_child, &["running"]).await;
    let path = format!("/api/local/tasks/{slow}/cancel");
    let (status, body) = stack.api(Method::POST, &path, None).await.expect("cancel");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["latest_job"]["status"], "cancelled");
    let child = stack.get_task(&slow_child).await.expect("child");
    assert_eq!(child["latest_job"]["status"], "cancelled", "{child}");
    let events = stack.events(&slow_child).await.expect("events");
    let cancelled = events.last().expect("an event");
    assert!(
        cancelled["payload"]["reason"]
            .as_str()
            .expect("reason")
            .contains("a task above it was cancelled"),
        "{cancelled}"
    );
    let (status, _) = stack.api(Method::POST, &path, None).await.expect("cancel");
    assert_eq!(status, 409, "nothing left to cancel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_join_happens_when_the_scheduler_comes_back() {
    let scenarios = json!({"scenarios": [
        {"name": "parent", "match": "PARENT-JOIN", "turns": [
            turn(&[delegate("CHILD-QUICK: say hi")]),
            complete("joined"),
        ]},
        {"name": "child", "match": "CHILD-QUICK", "turns": [complete("hi")]},
    ]});
    let mut stack = setup(scenarios, &[]).await;
    stack.kill("scheduler").await;
    let id = start(&stack, "PARENT-JOIN: delegate once").await;
    let child = children(&stack, &id, 1).await.remove(0);
    let child_id = child["id"].as_str().expect("id").to_owned();
    wait(&stack, &child_id, &["succeeded"]).await;
    let waiting = wait(&stack, &id, &["waiting_subtasks"]).await;
    assert_eq!(waiting["latest_job"]["status"], "waiting_subtasks");
    // Nobody joins while the scheduler is down; once it is back, its first join does.
    stack
        .start(Service::Scheduler, "scheduler", &[])
        .await
        .expect("the scheduler starts again");
    let done = wait(&stack, &id, &["succeeded", "failed"]).await;
    assert_eq!(done["latest_job"]["result"], "joined", "{done}");
}

/// The crash windows, on the database alone: a parent that dies after starting a child and
/// is claimed again finds the same child; a stale claim starts nothing; a pause does not wait
/// for a stale item left by a dead attempt; the join resolves and queues the parent in one go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_a_child_is_idempotent_and_fenced_and_a_pause_ignores_stale_items() {
    use maestro_db::jobs::{self, Transition};
    use maestro_db::subtasks::{self, Inserted, NewSubtask, Parent};
    use maestro_db::tasks::{self, NewTask};
    use maestro_db::{actions, claims};
    use maestro_domain::{
        ActionDetail, ActionStatus, JobId, JobStatus, NewAction, Owner, TaskId, Verdict,
    };
    use maestro_scheduler::joiner::join;

    let db = maestro_testkit::TestDb::create().await.expect("db");
    let pool = &db.pool;
    let owner = Owner::parse("alice").expect("owner");
    let (task_id, job_id) = (TaskId::new(), JobId::new());
    let new = NewTask {
        id: task_id,
        job_id,
        owner: &owner,
        instruction: "split it",
        piece: "chat",
        start_movement: None,
        model: None,
        idempotency_key: None,
        request_hash: "h",
        profile: "default",
        max_attempts: 3,
    };
    tasks::create(pool, &new)
        .await
        .expect("create")
        .expect("new");
    let lease = Duration::ZERO; // expires at once: the next claim takes over
    let first = claims::claim(pool, job_id, "w1", lease)
        .await
        .expect("claim")
        .expect("claimed");
    let parent = |attempt: i32| Parent {
        fence: jobs::Fence { job_id, attempt },
        task_id,
        owner: "alice",
        model: None,
        profile: "default",
        max_attempts: first.task_max_attempts,
        depth: 0,
        workspace_id: first.workspace_id,
    };
    let call = NewSubtask {
        key: "work/1/call_0_0",
        instruction: "CHILD: do a part",
        piece: "chat",
    };
    let Inserted::Created(started) = subtasks::insert_child(pool, &parent(1), &call)
        .await
        .expect("spawn")
    else {
        panic!("the child is created")
    };
    assert!(started.created);
    // A stale item of this attempt, never resolved (the worker died before its pause).
    let stale = NewAction {
        key: "work/0/call_9".into(),
        movement: "work".into(),
        source_seq: None,
        detail: ActionDetail::ToolRequest {
            tool: "write_file".into(),
            arguments: json!({}),
            arguments_hash: "h".into(),
            reason: "not allowed".into(),
        },
    };
    actions::record(
        pool,
        task_id,
        jobs::Fence { job_id, attempt: 1 },
        std::slice::from_ref(&stale),
    )
    .await
    .expect("record")
    .expect("held");

    // The worker dies; another claims the job and reaches the same call.
    let second = claims::claim(pool, job_id, "w2", Duration::from_secs(30))
        .await
        .expect("claim")
        .expect("claimed again");
    assert_eq!(second.attempt, 2);
    assert_eq!(
        subtasks::insert_child(pool, &parent(1), &call)
            .await
            .expect("spawn"),
        Inserted::NotHeld,
        "the stale attempt starts nothing"
    );
    assert_eq!(
        subtasks::insert_child(pool, &parent(2), &call)
            .await
            .expect("spawn"),
        Inserted::Existed,
        "started before"
    );
    let again = subtasks::find_child(pool, &parent(2), call.key)
        .await
        .expect("found");
    assert_eq!((again.task_id, again.created), (started.task_id, false));
    let child_job = again.job_id;
    let item = NewAction {
        key: call.key.into(),
        movement: "work".into(),
        source_seq: None,
        detail: ActionDetail::Subtask {
            subtask_id: again.task_id,
            instruction: call.instruction.into(),
            piece: call.piece.into(),
        },
    };
    let fence = jobs::Fence { job_id, attempt: 2 };
    actions::record(pool, task_id, fence, &[item])
        .await
        .expect("record")
        .expect("held");
    let wait = Transition::to(JobStatus::WaitingSubtasks);
    jobs::append(pool, fence, &[], Some(&wait))
        .await
        .expect("append")
        .expect("held");
    let items = actions::of_job(pool, job_id).await.expect("items");
    let status = |key: &str| {
        items
            .iter()
            .find(|a| a.key == key)
            .map(|a| a.status)
            .expect("item")
    };
    assert_eq!(
        status("work/0/call_9"),
        ActionStatus::Superseded,
        "the stale item is superseded"
    );
    assert!(
        items
            .iter()
            .all(|a| a.key != "work/0/call_9" || !a.is_decided()),
        "superseded is nobody's answer"
    );
    assert_eq!(status("work/1/call_0_0"), ActionStatus::Pending);

    // Nothing to join while the child runs; once it is over, the parent is queued again.
    assert_eq!(join(pool, 100).await.expect("join"), None);
    let child = claims::claim(pool, child_job, "w3", Duration::from_secs(30))
        .await
        .expect("claim")
        .expect("child claimed");
    assert_eq!(child.parent_task_id, Some(task_id));
    assert_eq!(child.depth, 1);
    assert_eq!(
        child.workspace_id, task_id,
        "the child works in its parent's workspace"
    );
    assert_eq!(
        child.task_max_attempts, 3,
        "the task's limit, not the resumed job's"
    );
    let done = Transition {
        result: Some("part done".into()),
        ..Transition::to(JobStatus::Succeeded)
    };
    let child_fence = jobs::Fence {
        job_id: child.job_id,
        attempt: child.attempt,
    };
    jobs::append(pool, child_fence, &[], Some(&done))
        .await
        .expect("append")
        .expect("held");
    let resumed = join(pool, 100).await.expect("join").expect("joined");
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].job_id, job_id);
    assert_eq!(join(pool, 100).await.expect("join"), None, "once");
    let items = actions::of_job(pool, job_id).await.expect("items");
    let decided = items
        .iter()
        .find(|a| a.detail.subtask().is_some())
        .expect("item");
    assert_eq!(decided.status, ActionStatus::Resolved);
    assert_eq!(
        decided.verdict(),
        Some(&Verdict::Succeeded {
            result: Some("part done".into())
        })
    );
    let (_, status, _) = jobs::latest(pool, task_id)
        .await
        .expect("latest")
        .expect("job");
    assert_eq!(status, JobStatus::Queued);

    // The job comes back to the superseded call: its item is pending again.
    let third = claims::claim(pool, job_id, "w4", Duration::from_secs(30))
        .await
        .expect("claim")
        .expect("claimed");
    let fence = jobs::Fence {
        job_id,
        attempt: third.attempt,
    };
    let again = actions::record(pool, task_id, fence, &[stale])
        .await
        .expect("record")
        .expect("held");
    assert_eq!(again[0].status, ActionStatus::Pending);
}

/// A worker killed while it runs the subtasks (the parent waiting): another worker takes the
/// children over once their leases expire, they finish, and the parent resumes with both
/// results — no child started twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subtasks_survive_a_killed_worker() {
    let scenarios = json!({"scenarios": [
        {"name": "parent", "match": "PARENT-CRASH", "turns": [
            turn(&[delegate("CHILD-ONE: slow part"), delegate("CHILD-TWO: slow part")]),
            complete("both parts done"),
        ]},
        {"name": "child", "match": "slow part", "turns": [
            json!({"delay_ms": 1500, "tool_calls": [call("complete", json!({"result": "part"}))]}),
        ]},
    ]});
    let mut stack = setup(scenarios, &[("JOB_ACK_WAIT_MS", "1500")]).await;
    let id = start(&stack, "PARENT-CRASH: two slow parts").await;
    let kids = children(&stack, &id, 2).await;
    for kid in &kids {
        wait(&stack, kid["id"].as_str().expect("id"), &["running"]).await;
    }
    stack.kill("worker").await;
    stack
        .start(Service::Worker, "worker-b", &[])
        .await
        .expect("another worker starts");
    let done = wait(&stack, &id, &["succeeded", "failed"]).await;
    assert_eq!(done["latest_job"]["result"], "both parts done", "{done}");
    let kids = subtasks(&stack, &id).await;
    assert_eq!(kids.len(), 2, "no child started twice: {kids:?}");
    for kid in &kids {
        assert_eq!(kid["status"], "succeeded", "{kid}");
        let task = stack
            .get_task(kid["id"].as_str().expect("id"))
            .await
            .expect("child");
        assert!(
            task["latest_job"]["attempt"].as_i64().expect("attempt") >= 2,
            "taken over after the crash: {task}"
        );
    }
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
    let stack = setup_with(scenarios, &[], policy).await;
    let id = start(&stack, "PARENT-APPROVE: write, then hand over").await;
    let paused = wait(
        &stack,
        &id,
        &["waiting_human", "waiting_subtasks", "failed"],
    )
    .await;
    assert_eq!(
        paused["latest_job"]["wait_reason"], "tool_request",
        "{paused}"
    );
    assert!(
        subtasks(&stack, &id).await.is_empty(),
        "no child before the approval"
    );
    let items = get(&stack, &format!("/api/local/tasks/{id}/required-actions")).await;
    let rid = items["required_actions"][0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let path = format!("/api/local/tasks/{id}/tool-requests/{rid}/decide");
    let (status, body) = stack
        .api(Method::POST, &path, Some(&json!({"decision": "approve"})))
        .await
        .expect("decide");
    assert_eq!(status, 200, "{body}");
    let done = wait(&stack, &id, &["succeeded", "failed"]).await;
    assert_eq!(done["latest_job"]["result"], "done", "{done}");
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
