//! Subtasks when things fail: the join catches up when the scheduler was down while the
//! children finished; a worker killed while the children run hands them to another, none
//! started twice; and the crash windows of starting a child and joining it, on the database
//! alone.

use std::time::Duration;

use maestro_domain::JobStatus;
use maestro_testkit::script::{call, complete, delegate, turn};
use maestro_testkit::{Service, Stack, StackOptions, TaskExt};
use serde_json::{Value, json};

async fn setup(scenarios: Value, env: &[(&str, &str)]) -> Stack {
    let mut options = StackOptions::new(scenarios)
        .policy(r#"{"allowed_tools": ["*", "delegate"]}"#)
        .env("MAX_SUBTASK_DEPTH", "1");
    for (key, value) in env {
        options = options.env(key, value);
    }
    Stack::up(options).await
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
    let id = stack
        .new_task(&json!({"instruction": "PARENT-JOIN: delegate once", "piece": "chat"}))
        .await;
    let child_id = stack.wait_for_subtasks(id, 1).await[0].id;
    stack.wait(child_id, &[JobStatus::Succeeded]).await;
    let waiting = stack.wait(id, &[JobStatus::WaitingSubtasks]).await;
    assert_eq!(waiting.job().status, JobStatus::WaitingSubtasks);
    // Nobody joins while the scheduler is down; once it is back, its first join does.
    stack.add(Service::Scheduler, "scheduler").await;
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().result.as_deref(), Some("joined"), "{done:?}");
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
    let id = stack
        .new_task(&json!({"instruction": "PARENT-CRASH: two slow parts", "piece": "chat"}))
        .await;
    for kid in stack.wait_for_subtasks(id, 2).await {
        stack.wait(kid.id, &[JobStatus::Running]).await;
    }
    stack.kill("worker").await;
    stack.add(Service::Worker, "worker-b").await;
    let done = stack.wait_over(id).await;
    assert_eq!(
        done.job().result.as_deref(),
        Some("both parts done"),
        "{done:?}"
    );
    let kids = stack.subtasks(id).await;
    assert_eq!(kids.len(), 2, "no child started twice: {kids:?}");
    for kid in &kids {
        assert_eq!(kid.status, JobStatus::Succeeded, "{kid:?}");
        let task = stack.task(kid.id).await;
        assert!(
            task.job().attempt >= 2,
            "taken over after the crash: {task:?}"
        );
    }
}

/// The crash windows, on the database alone: a parent that dies after starting a child and
/// is claimed again finds the same child; a stale claim starts nothing; a pause does not wait
/// for a stale item left by a dead attempt; the join resolves and queues the parent in one go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_a_child_is_idempotent_and_fenced_and_a_pause_ignores_stale_items() {
    use maestro_db::jobs::{self, Transition};
    use maestro_db::subtasks::{self, Inserted, NewSubtask, Parent};
    use maestro_db::{actions, claims};
    use maestro_domain::{ActionDetail, ActionStatus, JobStatus, NewAction, Verdict};
    use maestro_scheduler::joiner::join;

    let db = maestro_testkit::TestDb::create().await.expect("db");
    let pool = &db.pool;
    let (task_id, job_id) = db.queued_task("alice", "split it").await.expect("task");
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
