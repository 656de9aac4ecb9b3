//! Failure handling through the whole stack: retries that honour `Retry-After`, attempts that
//! run out, the last JetStream delivery failing the job, a missing tool-runner waited for in
//! `retry`, a paused ("zombie") worker that is fenced when it wakes, a worker drained by
//! SIGTERM that hands its job over at once, every service exiting 0 on SIGTERM (and at once on
//! a second one), the stack riding out a NATS restart and a Postgres restart without
//! losing anything it accepted, and dispatch hints: a job started as its dispatch is
//! published, its JetStream delivery settled with that run's outcome (handed over to the
//! hint's worker when another worker got it), and early first LLM calls off while another
//! worker serves the profile.

use std::time::Duration;

use chrono::{DateTime, Utc};
use maestro_api::Task;
use maestro_domain::{Event, EventKind, JobStatus};
use maestro_testkit::{Service, Stack, StackOptions, TaskExt, job_states, of_kind, state_change};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a timestamp")
}

/// Every event has a seq and a job_seq, gap-free from 1, and no tool call got two results.
fn assert_consistent(events: &[Event]) {
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "seq gap-free and unique"
    );
    let mut results: Vec<&str> = of_kind(events, EventKind::ToolResult)
        .map(|e| e.payload["call_id"].as_str().unwrap_or_default())
        .collect();
    let total = results.len();
    results.sort();
    results.dedup();
    assert_eq!(results.len(), total, "no tool call has two results");
}

/// A scenario whose second turn streams slowly for a few seconds.
fn slow_second_turn(matches: &str) -> Value {
    json!({
        "name": format!("slow-{matches}"),
        "match": matches,
        "turns": [
            {"delay_ms": 200, "tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "a"}}]},
            {
                "text": "Taking my time over this answer, one character after another.",
                "chunk_chars": 1,
                "chunk_delay_ms": 70,
                "tool_calls": [{"name": "complete", "arguments": {"result": "slow but done"}}]
            }
        ]
    })
}

async fn readiness(stack: &Stack) -> (u16, Value) {
    let response = stack
        .http
        .get(stack.url("/readyz"))
        .send()
        .await
        .expect("readyz answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn wait_for_readiness(stack: &Stack, want: u16) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, body) = readiness(stack).await;
        if status == want {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "readyz stayed {status}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_llm_call_waits_for_retry_after_then_succeeds() {
    let scenario = json!({"scenarios": [{
        "name": "rate-limited",
        "turns": [{
            "fail": {"status": 429, "body": "slow down", "retry_after": 2, "times": 1},
            "tool_calls": [{"name": "complete", "arguments": {"result": "after the wait"}}]
        }]
    }]});
    let options = StackOptions::new(scenario).retry_backoff(100, 200);
    let stack = Stack::up(options).await;
    let id = stack.new_task(&json!({"instruction": "be patient"})).await;
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");

    let events = stack.events(id).await;
    assert_eq!(
        job_states(&events),
        ["queued", "running", "retry", "running", "succeeded"]
    );
    let retry = state_change(&events, "retry");
    let next_retry_at = time(&retry.payload["next_retry_at"]);
    let waited = next_retry_at - retry.created_at;
    assert!(
        waited >= chrono::Duration::milliseconds(1900),
        "Retry-After (2 s) wins over the 100 ms backoff: waited {waited}"
    );
    let reclaimed = events
        .iter()
        .filter(|e| e.payload["status"] == "running")
        .nth(1)
        .expect("second claim");
    assert!(
        reclaimed.created_at >= next_retry_at - chrono::Duration::milliseconds(100),
        "not claimed before its time: {reclaimed:?} vs {next_retry_at}"
    );
    assert!(
        retry.payload["error"]
            .as_str()
            .unwrap_or_default()
            .contains("429")
    );
}

/// A stack whose LLM fails every call with `status`, with `env`, and a task run on it until
/// it is over.
async fn doomed(status: u16, body: &str, env: &[(&str, &str)]) -> (Stack, Task) {
    let scenario = json!({"scenarios": [{
        "name": "broken",
        "turns": [{"fail": {"status": status, "body": body, "times": 0}}]
    }]});
    let mut options = StackOptions::new(scenario).retry_backoff(100, 200);
    for (key, value) in env {
        options = options.env(key, value);
    }
    let stack = Stack::up(options).await;
    let done = stack.run(&json!({"instruction": "doomed"})).await;
    (stack, done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_server_errors_fail_the_job_after_its_attempts_are_spent() {
    let (stack, done) = doomed(500, "it is broken", &[("JOB_MAX_ATTEMPTS", "3")]).await;
    let id = done.id();
    let job = done.job();
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.attempt, 3, "three attempts, counted");
    let error = job.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("500") && error.contains("gave up after 3 attempts"),
        "{error}"
    );
    let events = stack.events(id).await;
    assert_eq!(
        job_states(&events),
        [
            "queued", "running", "retry", "running", "retry", "running", "failed"
        ]
    );
    assert_eq!(
        stack.llm.requests().await.expect("requests").len(),
        3,
        "one LLM call per attempt"
    );
    let letters: Vec<String> =
        sqlx::query_scalar("SELECT reason FROM dead_letters WHERE consumer = 'jobs'")
            .fetch_all(&stack.db.pool)
            .await
            .expect("dead letters");
    assert_eq!(
        letters.len(),
        1,
        "the dispatch is terminated and kept: {letters:?}"
    );
    assert!(
        letters[0].contains("gave up after 3 attempts"),
        "{letters:?}"
    );
}

/// JetStream's `max_deliver` ends the job too: on the last delivery a recoverable error
/// fails the job at once, with the error, even though attempts are left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_delivery_fails_the_job_even_with_attempts_left() {
    let env = [("JOB_MAX_ATTEMPTS", "10"), ("JOB_MAX_DELIVER", "2")];
    let (stack, done) = doomed(503, "overloaded", &env).await;
    let id = done.id();
    let job = done.job();
    assert_eq!(job.status, JobStatus::Failed, "{done:?}");
    assert_eq!(job.attempt, 2, "two deliveries, two attempts");
    let error = job.error.as_deref().unwrap_or_default();
    assert!(error.contains("503"), "{error}");
    let events = stack.events(id).await;
    assert_eq!(
        job_states(&events),
        ["queued", "running", "retry", "running", "failed"]
    );
}

/// No tool-runner answering is recoverable: the job waits in `retry` and finishes once one
/// is up, without running the LLM turn again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_tool_runner_is_waited_for() {
    let scenario = json!({"scenarios": [{"name": "tools", "turns": [
        {"tool_calls": [{"name": "glob", "arguments": {"pattern": "*"}}]},
        {"tool_calls": [{"name": "complete", "arguments": {"result": "listed"}}]}
    ]}]});
    let mut options = StackOptions::new(scenario)
        .retry_backoff(300, 600)
        .env("JOB_MAX_ATTEMPTS", "50")
        .env("JOB_MAX_DELIVER", "60");
    options.services.retain(|s| *s != Service::ToolRunner);
    let mut stack = Stack::up(options).await;
    let id = stack
        .new_task(&json!({"instruction": "list the files"}))
        .await;
    let waiting = stack
        .wait_within(
            id,
            &[JobStatus::Retry, JobStatus::Failed, JobStatus::Succeeded],
            WAIT,
        )
        .await;
    assert_eq!(waiting.job().status, JobStatus::Retry, "{waiting:?}");
    assert!(
        waiting.job().next_retry_at.is_some(),
        "the retry time is visible: {waiting:?}"
    );
    stack.add(Service::ToolRunner, "tool-runner").await;
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(
        stack.llm.requests().await.expect("requests").len(),
        2,
        "the first turn was committed and not asked again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_is_fenced_when_it_wakes_up() {
    let scenarios = json!({"scenarios": [slow_second_turn("zombie")]});
    let options = StackOptions::new(scenarios)
        .env("JOB_ACK_WAIT_MS", "1500")
        .worker_named("worker-a");
    let mut stack = Stack::up(options).await;
    let id = stack.new_task(&json!({"instruction": "zombie test"})).await;
    stack.wait_for_next_turn(id).await;

    stack.process("worker-a").signal("STOP");
    stack.add(Service::Worker, "worker-b").await;
    let done = stack.wait_over(id).await;
    assert_eq!(
        done.job().status,
        JobStatus::Succeeded,
        "worker b finished the job: {done:?}"
    );
    stack.process("worker-a").signal("CONT");
    // Worker a wakes mid-stream with a job it no longer holds.
    let deadline = tokio::time::Instant::now() + WAIT;
    while !stack
        .process("worker-a")
        .log_tail(200)
        .contains("lost the job to another attempt")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "worker a never noticed it was fenced"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !stack.process("worker-a").has_exited(),
        "the fenced worker keeps serving"
    );

    let events = stack.events(id).await;
    assert_consistent(&events);
    assert_eq!(
        job_states(&events),
        ["queued", "running", "running", "succeeded"]
    );
    let workers: Vec<&str> = events
        .iter()
        .filter_map(|e| e.payload["worker_id"].as_str())
        .collect();
    assert_eq!(workers, ["worker-a", "worker-b"]);
    let assistant = events
        .iter()
        .filter(|e| e.kind == EventKind::Message && e.payload["role"] == "assistant")
        .count();
    assert_eq!(assistant, 2, "the zombie's late answer was not written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_worker_and_another_takes_its_job_over_at_once() {
    let scenarios = json!({"scenarios": [slow_second_turn("drain")]});
    // The default 30 s ack_wait: a handover that waited for redelivery would miss the deadline.
    let options = StackOptions::new(scenarios)
        .env("SHUTDOWN_GRACE_MS", "300")
        .worker_named("worker-a");
    let mut stack = Stack::up(options).await;
    let id = stack.new_task(&json!({"instruction": "drain test"})).await;
    stack.wait_for_next_turn(id).await;
    stack.add(Service::Worker, "worker-b").await;

    let exit = stack
        .process("worker-a")
        .terminate(Duration::from_secs(10))
        .await
        .expect("worker a exits");
    assert!(exit.success(), "a drained worker exits 0: {exit:?}");
    let done = stack
        .wait_within(
            id,
            &[JobStatus::Succeeded, JobStatus::Failed],
            Duration::from_secs(15),
        )
        .await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.job().attempt, 2);
    assert_eq!(
        done.job().max_attempts,
        6,
        "the handover did not use up an attempt"
    );

    let events = stack.events(id).await;
    assert_consistent(&events);
    assert_eq!(
        job_states(&events),
        ["queued", "running", "queued", "running", "succeeded"]
    );
    let released = of_kind(&events, EventKind::JobState)
        .nth(2)
        .expect("release");
    assert_eq!(released.payload["reason"], "the worker is shutting down");
    let results = of_kind(&events, EventKind::ToolResult).count();
    assert_eq!(
        results, 2,
        "the committed write was not repeated by worker b"
    );

    // Every other service exits 0 on SIGTERM too, the gateway with an SSE client attached.
    let _open_stream = stack.stream(id, None).await;
    for instance in [
        "api-gateway",
        "scheduler",
        "notifier",
        "tool-runner",
        "worker-b",
    ] {
        let exit = stack
            .process(instance)
            .terminate(Duration::from_secs(15))
            .await;
        assert!(
            exit.is_some_and(|e| e.success()),
            "{instance} exits 0 on SIGTERM: {exit:?}"
        );
    }
}

/// A second SIGTERM does not wait for the drain: the service exits at once (130).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_exits_at_once() {
    let scenario = json!({"scenarios": [{"name": "slow", "turns": [
        {"delay_ms": 30000, "tool_calls": [{"name": "complete", "arguments": {"result": "late"}}]}
    ]}]});
    let options = StackOptions::new(scenario).env("SHUTDOWN_GRACE_MS", "30000");
    let mut stack = Stack::up(options).await;
    let id = stack
        .new_task(&json!({"instruction": "take your time"}))
        .await;
    stack.wait_within(id, &[JobStatus::Running], WAIT).await;
    let worker = stack.process("worker");
    worker.signal("TERM");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !worker.has_exited(),
        "the first signal drains (the job is mid-call)"
    );
    let started = std::time::Instant::now();
    let exit = worker
        .terminate(Duration::from_secs(5))
        .await
        .expect("the second signal ends it");
    assert_eq!(exit.code(), Some(130), "{exit:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stack_rides_out_a_nats_restart() {
    let scenario = json!({"scenarios": [{
        "name": "quick",
        "turns": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "a"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
        ]
    }]});
    let options = StackOptions::new(scenario).env("REDISPATCH_GRACE_MS", "1000");
    let mut stack = Stack::up(options).await;
    let before = stack.create(&json!({"instruction": "before"})).await;
    stack
        .wait_within(before.id(), &[JobStatus::Succeeded], WAIT)
        .await;

    stack.nats.kill().await;
    let body = wait_for_readiness(&stack, 503).await;
    assert_eq!(body["checks"]["nats"], false, "{body}");
    assert_eq!(body["checks"]["postgres"], true, "{body}");
    // Accepted while NATS is down: committed now, dispatched once NATS is back. The answer
    // does not wait for JetStream to store the dispatch (it would wait out the publish's
    // acknowledgement timeout, 5 s): the scheduler's re-dispatch is what makes it certain.
    let asked = std::time::Instant::now();
    let during = stack
        .try_create(&json!({"instruction": "during"}))
        .await
        .expect("accepted without NATS");
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "the create waited {:?} for NATS",
        asked.elapsed()
    );
    stack.nats.restart().await.expect("NATS restarts");
    wait_for_readiness(&stack, 200).await;

    for task in [
        &during,
        &stack.create(&json!({"instruction": "after"})).await,
    ] {
        let id = task.id();
        let done = stack.wait_over(id).await;
        assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
        assert_consistent(&stack.events(id).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stack_rides_out_a_postgres_restart_even_mid_job() {
    let scenarios = json!({"scenarios": [
        slow_second_turn("mid-job"),
        {"name": "quick", "turns": [{"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}]}
    ]});
    let options = StackOptions::new(scenarios)
        .private_postgres()
        .env("JOB_ACK_WAIT_MS", "2000")
        .env("REDISPATCH_GRACE_MS", "1000");
    let stack = Stack::up(options).await;
    let first = stack.create(&json!({"instruction": "first"})).await;
    stack
        .wait_within(first.id(), &[JobStatus::Succeeded], WAIT)
        .await;

    let slow_id = stack.new_task(&json!({"instruction": "mid-job"})).await;
    stack.wait_for_next_turn(slow_id).await;
    let postgres = stack.postgres.as_ref().expect("private postgres");
    postgres.stop().expect("Postgres stops");
    let body = wait_for_readiness(&stack, 503).await;
    assert_eq!(body["checks"]["postgres"], false, "{body}");
    let refused = stack
        .try_create(&json!({"instruction": "while the database is down"}))
        .await
        .expect_err("refused");
    assert_eq!(refused.status, 503, "not accepted, so not lost");
    assert_eq!(refused.code, "unavailable");
    tokio::time::sleep(Duration::from_secs(1)).await;
    postgres.start_again().expect("Postgres starts again");
    wait_for_readiness(&stack, 200).await;

    let done = stack.wait_over(slow_id).await;
    assert_eq!(
        done.job().status,
        JobStatus::Succeeded,
        "the job in flight survived: {done:?}"
    );
    assert_consistent(&stack.events(slow_id).await);
    let after = stack.create(&json!({"instruction": "after"})).await;
    stack
        .wait_within(after.id(), &[JobStatus::Succeeded], WAIT)
        .await;
}

/// Claims made together (the worker's claimer puts the claims that wait into one statement):
/// each claimable job is taken once, with its own `running` event at its task's next seq; a
/// job that is missing or already held is left out; a lease that ran out is taken over with
/// the next attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_made_together_take_each_job_once_with_its_own_event() {
    use maestro_db::claims;
    use maestro_domain::JobId;

    let db = maestro_testkit::TestDb::create().await.expect("db");
    let pool = &db.pool;
    let mut jobs = Vec::new();
    for n in 0..3 {
        let instruction = format!("job {n}");
        let (task_id, job_id) = db.queued_task("alice", &instruction).await.expect("task");
        jobs.push((task_id, job_id, instruction));
    }
    let (first, rest) = (jobs[0].1, [jobs[1].1, jobs[2].1]);
    let held = claims::claim(pool, first, "w1", Duration::from_secs(60))
        .await
        .expect("claim")
        .expect("claimed");
    assert_eq!(held.attempt, 1);

    let mut asked = vec![first, JobId::new()];
    asked.extend(rest);
    let together = claims::claim_many(pool, &asked, "w2", Duration::ZERO)
        .await
        .expect("claims");
    let mut taken: Vec<JobId> = together.iter().map(|c| c.job_id).collect();
    taken.sort();
    let mut expected = rest.to_vec();
    expected.sort();
    assert_eq!(
        taken, expected,
        "the held job and the missing one are left out"
    );
    for claimed in &together {
        let (task_id, _, instruction) = jobs
            .iter()
            .find(|(_, j, _)| *j == claimed.job_id)
            .expect("ours");
        assert_eq!(
            (&claimed.task_id, &claimed.instruction),
            (task_id, instruction),
            "each claim reads its own task"
        );
        assert_eq!((claimed.attempt, claimed.claim_seq), (1, 2), "{claimed:?}");
        let running: (i64, String) = sqlx::query_as(
            "SELECT seq, payload->>'worker_id' FROM events
              WHERE task_id = $1 AND kind = 'job_state' AND payload->>'status' = 'running'",
        )
        .bind(task_id.0)
        .fetch_one(pool)
        .await
        .expect("the running event");
        assert_eq!(running, (2, "w2".to_owned()));
    }

    // Their leases ran out at once: taken over together, as the next attempt.
    let again = claims::claim_many(pool, &rest, "w3", Duration::from_secs(60))
        .await
        .expect("claims");
    assert_eq!(again.len(), 2);
    assert!(
        again.iter().all(|c| c.attempt == 2 && c.claim_seq == 3),
        "{again:?}"
    );
    assert!(
        claims::claim_many(pool, &rest, "w4", Duration::from_secs(60))
            .await
            .expect("claims")
            .is_empty(),
        "held jobs are not taken"
    );
}

/// The worker's claimer: a claim made alone runs at once, on its own; the claims made while it
/// runs wait, and go together in the next statement; each gets its own answer; and a claim whose
/// caller gives up mid-statement leaves the claimer working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claimer_runs_a_lone_claim_at_once_and_the_ones_behind_it_together() {
    use maestro_worker::claimer::{ClaimSettings, Claimer};

    let db = maestro_testkit::TestDb::create().await.expect("db");
    let pool = &db.pool;
    let claimer = Claimer::new(
        pool.clone(),
        ClaimSettings {
            worker_id: "w1".to_owned(),
            lease: Duration::from_secs(60),
            most: 8,
            models: Vec::new(),
        },
    );
    let mut jobs = Vec::new();
    for n in 0..8 {
        jobs.push(
            db.queued_task("alice", &format!("job {n}"))
                .await
                .expect("task"),
        );
    }
    // The first claim's statement waits on its task's row, held by another transaction.
    let holder = lock_task(pool, jobs[0].0).await;
    let first = tokio::spawn({
        let claimer = claimer.clone();
        let job_id = jobs[0].1;
        async move { claimer.claim(job_id).await }
    });
    // It is running (waiting for the lock) once Postgres shows its statement waiting.
    let waiting = "SELECT count(*) FROM pg_stat_activity
                    WHERE datname = current_database() AND wait_event_type = 'Lock'";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sqlx::query_scalar::<_, i64>(waiting)
        .fetch_one(pool)
        .await
        .expect("activity")
        == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the first claim never ran"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let behind: Vec<_> = jobs[1..5]
        .iter()
        .map(|(_, job_id)| {
            let (claimer, job_id) = (claimer.clone(), *job_id);
            tokio::spawn(async move { (job_id, claimer.claim(job_id).await) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        behind.iter().all(|claim| !claim.is_finished()),
        "claims behind a running one wait for it"
    );
    holder.commit().await.expect("release");
    let claimed = first.await.expect("join").expect("claim").expect("claimed");
    assert_eq!(claimed.job_id, jobs[0].1);
    for claim in behind {
        let (job_id, answer) = tokio::time::timeout(Duration::from_secs(10), claim)
            .await
            .expect("the claims behind the first are made once it is answered")
            .expect("join");
        let claimed = answer.expect("claim").expect("claimed");
        assert_eq!(claimed.job_id, job_id, "each claim gets its own answer");
    }
    let statements: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT xmin::text) FROM events
          WHERE kind = 'job_state' AND payload->>'status' = 'running'",
    )
    .fetch_one(pool)
    .await
    .expect("statements");
    assert_eq!(
        statements, 2,
        "the first alone, the four behind it together"
    );
    assert!(
        claimer.claim(jobs[0].1).await.expect("claim").is_none(),
        "a held job is not taken again"
    );

    // A caller that gives up while its claim's statement waits: the claims behind it still go,
    // and so do later ones.
    let holder = lock_task(pool, jobs[5].0).await;
    let given_up = tokio::time::timeout(Duration::from_millis(200), claimer.claim(jobs[5].1));
    let behind = tokio::spawn({
        let (claimer, job_id) = (claimer.clone(), jobs[6].1);
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            claimer.claim(job_id).await
        }
    });
    assert!(given_up.await.is_err(), "the lock holds the claim");
    let claimed = tokio::time::timeout(Duration::from_secs(10), behind)
        .await
        .expect("the claim behind the dropped one is made")
        .expect("join")
        .expect("claim")
        .expect("claimed");
    assert_eq!(claimed.job_id, jobs[6].1);
    holder.commit().await.expect("release");
    let later = tokio::time::timeout(Duration::from_secs(10), claimer.claim(jobs[7].1))
        .await
        .expect("a later claim is made")
        .expect("claim");
    assert_eq!(later.map(|c| c.job_id), Some(jobs[7].1));
}

/// A transaction holding task `task_id`'s row: a claim of its job waits until it ends.
async fn lock_task(
    pool: &sqlx::PgPool,
    task_id: maestro_domain::TaskId,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut holder = pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE")
        .bind(task_id.0)
        .execute(&mut *holder)
        .await
        .expect("lock");
    holder
}

/// How many dispatches `instance` took by path `via` (`hint`, `jetstream`).
async fn dispatches(stack: &Stack, instance: &str, via: &str) -> u64 {
    counter(
        stack,
        instance,
        "maestro_dispatches_total",
        &format!("via=\"{via}\""),
    )
    .await
}

/// The value of `instance`'s counter `name` in its series labelled `label` (0 when absent).
async fn counter(stack: &Stack, instance: &str, name: &str, label: &str) -> u64 {
    let series = format!("{name}{{");
    stack
        .scrape(instance)
        .await
        .lines()
        .filter(|line| line.starts_with(&series) && line.contains(label))
        .find_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map_or(0, |n| n as u64)
}

fn log_lines(stack: &mut Stack, instance: &str) -> Vec<Value> {
    std::fs::read_to_string(stack.process(instance).log_path())
        .expect("the log")
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Wait until `instance`'s log has `times` lines whose message is `message`.
async fn wait_for_log(stack: &mut Stack, instance: &str, message: &str, times: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while log_lines(stack, instance)
        .iter()
        .filter(|line| line["message"] == message)
        .count()
        < times
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{instance} never logged {message:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait until the jobs work queue holds nothing: every dispatch was acknowledged.
async fn wait_for_settled_dispatches(stack: &Stack) {
    let nats = stack.nats.client().await.expect("connect to NATS");
    let js = async_nats::jetstream::new(nats);
    let name = maestro_messaging::Subjects::new(&stack.prefix)
        .expect("the prefix")
        .stream(maestro_messaging::setup::JOBS);
    let mut stream = js.get_stream(&name).await.expect("the jobs stream");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = stream.info().await.expect("stream info").state.messages;
        if left == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{left} dispatches never acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every job calls a read-only tool, then completes.
fn quick_jobs() -> Value {
    json!({"scenarios": [{
        "name": "quick",
        "turns": [
            {"tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
        ]
    }]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_hint_starts_the_job_and_its_delivery_settles_with_it() {
    let stack = Stack::up(StackOptions::new(quick_jobs())).await;
    for n in 0..3 {
        let task = stack
            .run(&json!({"instruction": format!("hinted {n}")}))
            .await;
        assert_eq!(task.job().status, JobStatus::Succeeded, "{task:?}");
        assert_eq!(task.job().attempt, 1);
        // Its one dispatch was acknowledged, whichever path brought it first.
        wait_for_settled_dispatches(&stack).await;
        let events = stack.events(task.id()).await;
        assert_consistent(&events);
        assert_eq!(job_states(&events), ["queued", "running", "succeeded"]);
    }
    let (hinted, delivered) = (
        dispatches(&stack, "worker", "hint").await,
        dispatches(&stack, "worker", "jetstream").await,
    );
    assert_eq!(hinted + delivered, 3, "each job taken once");
    // The hint comes as the dispatch is published, before JetStream delivers it.
    assert!(hinted > 0, "no job was started by its hint");
}

/// A hinted new task's first LLM request goes out while its job is claimed, and the claimed
/// job takes that answer (its own first request being the same bytes): the model is asked
/// once per turn, never twice, and the job's events are those of any job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hinted_new_tasks_first_llm_call_goes_out_beside_the_claim_and_counts_once() {
    let mut stack = Stack::up(StackOptions::new(quick_jobs())).await;
    wait_for_log(&mut stack, "worker", "early first LLM calls on", 1).await;
    for n in 0..4 {
        let task = stack
            .run(&json!({"instruction": format!("early {n}")}))
            .await;
        assert_eq!(task.job().status, JobStatus::Succeeded, "{task:?}");
        let events = stack.events(task.id()).await;
        assert_consistent(&events);
        assert_eq!(job_states(&events), ["queued", "running", "succeeded"]);
    }
    // Over A2A too, whose prompt names the message and its context.
    let message = json!({"kind": "message", "messageId": "early-a2a", "role": "user",
                         "parts": [{"kind": "text", "text": "early over A2A"}]});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send",
                      "params": {"message": message, "configuration": {"blocking": true}}});
    let answer: Value = (stack.http.post(stack.url("/a2a/v1")))
        .bearer_auth(&stack.token)
        .json(&body)
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(answer["result"]["status"]["state"], "completed", "{answer}");
    wait_for_settled_dispatches(&stack).await;
    let requests = stack.llm.requests().await.expect("requests");
    assert_eq!(requests.len(), 10, "two turns per job, each asked once");
    for n in 0..4 {
        let instruction = format!("<instruction>\nearly {n}\n</instruction>");
        let first: Vec<&Value> = requests
            .iter()
            .filter(|r| {
                r["body"]["messages"][1]["content"]
                    .as_str()
                    .is_some_and(|u| u.contains(&instruction))
            })
            .filter(|r| r["turn"] == 0)
            .collect();
        assert_eq!(first.len(), 1, "job {n}'s first turn asked once");
    }
    let early = |outcome: &'static str| {
        let label = format!("outcome=\"{outcome}\"");
        let stack = &stack;
        async move {
            counter(
                stack,
                "worker",
                "maestro_llm_early_first_calls_total",
                &label,
            )
            .await
        }
    };
    let hinted = dispatches(&stack, "worker", "hint").await;
    assert!(hinted > 0, "no job was started by its hint");
    assert_eq!(
        early("used").await,
        hinted,
        "each hinted job took its early answer"
    );
    assert_eq!(early("asked_again").await + early("unused").await, 0);
    // Each job's first call, `list_files`, only reads: it went out with the early answer, and
    // the job took its reply instead of asking again.
    let reads = |outcome: &'static str| {
        let label = format!("outcome=\"{outcome}\"");
        let stack = &stack;
        async move { counter(stack, "worker", "maestro_tool_early_reads_total", &label).await }
    };
    assert_eq!(
        reads("used").await,
        hinted,
        "each hinted job took its early read"
    );
    assert_eq!(reads("unused").await, 0);
}

/// A first answer whose calls do more than read sends nothing early: the job runs them in
/// order, and its read sees what the write before it wrote. On a job whose early answer is
/// taken and whose calls all read, the reads sent early are the job's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_first_answer_whose_calls_all_read_sends_them_early() {
    let scenario = json!({"scenarios": [
        {"name": "write then read",
         "match": "write then read",
         "turns": [
             {"tool_calls": [
                 {"name": "write_file", "arguments": {"path": "a.txt", "content": "written"}},
                 {"name": "read_file", "arguments": {"path": "a.txt"}}]},
             {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
         ]},
        {"name": "at once",
         "match": "done at once",
         "turns": [{"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}]},
        {"name": "two reads",
         "match": "two reads",
         "turns": [
             {"tool_calls": [
                 {"name": "list_files", "arguments": {}},
                 {"name": "read_file", "arguments": {"path": "missing.txt"}}]},
             {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
         ]}
    ]});
    let mut stack = Stack::up(StackOptions::new(scenario)).await;
    wait_for_log(&mut stack, "worker", "early first LLM calls on", 1).await;
    let written = stack.run(&json!({"instruction": "write then read"})).await;
    assert_eq!(written.job().status, JobStatus::Succeeded, "{written:?}");
    let results = tool_results(&stack.events(written.id()).await);
    assert_eq!(results.len(), 3, "two calls and `complete`: {results:?}");
    assert!(
        results[1].contains("written"),
        "the read ran after the write: {results:?}"
    );
    let reads = |outcome: &'static str| {
        let label = format!("outcome=\"{outcome}\"");
        let stack = &stack;
        async move { counter(stack, "worker", "maestro_tool_early_reads_total", &label).await }
    };
    assert_eq!(
        reads("used").await + reads("unused").await,
        0,
        "nothing went early"
    );
    // `complete` is read-only too, but the job answers it itself: nothing goes to the
    // tool-runner for it.
    let done = stack.run(&json!({"instruction": "done at once"})).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    let early = reads("used").await + reads("unused").await;
    assert_eq!(early, 0, "nothing went early for `complete`");
    let hinted = dispatches(&stack, "worker", "hint").await;
    let read = stack.run(&json!({"instruction": "two reads"})).await;
    assert_eq!(read.job().status, JobStatus::Succeeded, "{read:?}");
    let results = tool_results(&stack.events(read.id()).await);
    assert_eq!(results.len(), 3, "two calls and `complete`: {results:?}");
    assert!(results[1].contains("missing.txt"), "{results:?}");
    // Reads go early only beside a hinted claim; its JetStream delivery can win the race on a
    // loaded machine, and then the job reads in order.
    if dispatches(&stack, "worker", "hint").await == hinted + 1 {
        assert_eq!(
            reads("used").await,
            2,
            "both reads went early and were taken"
        );
        assert_eq!(reads("unused").await, 0);
    }
}

/// A read the tool policy leaves to a person's approval is not sent early, though the early
/// answer that asks for it is taken: the job pauses for the approval with nothing read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_the_policy_leaves_to_a_person_is_not_sent_early() {
    let options = StackOptions::new(quick_jobs()).policy(r#"{"allowed_tools": ["read_file"]}"#);
    let mut stack = Stack::up(options).await;
    wait_for_log(&mut stack, "worker", "early first LLM calls on", 1).await;
    let task = stack.run(&json!({"instruction": "look"})).await;
    assert_eq!(task.job().status, JobStatus::WaitingHuman, "{task:?}");
    let used = "outcome=\"used\"";
    let early = counter(
        &stack,
        "worker",
        "maestro_llm_early_first_calls_total",
        used,
    )
    .await;
    assert_eq!(early, 1, "the early answer was taken");
    let reads = counter(&stack, "worker", "maestro_tool_early_reads_total", "").await;
    assert_eq!(reads, 0, "nothing was read early");
}

/// The tool results' payloads, in order.
fn tool_results(events: &[Event]) -> Vec<String> {
    of_kind(events, EventKind::ToolResult)
        .map(|e| e.payload.to_string())
        .collect()
}

/// A first request the prompt guard would refuse is not sent early either: the job fails with
/// a context overflow and the model is never asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_early_first_call_goes_out_that_the_prompt_guard_would_refuse() {
    let options = StackOptions::new(quick_jobs()).env("MAX_PROMPT_TOKENS", "200");
    let mut stack = Stack::up(options).await;
    wait_for_log(&mut stack, "worker", "early first LLM calls on", 1).await;
    let task = stack.run(&json!({"instruction": "too big"})).await;
    assert_eq!(task.job().status, JobStatus::Failed, "{task:?}");
    let error = task.job().error.clone().unwrap_or_default();
    assert!(error.starts_with("context overflow"), "{error}");
    assert!(
        dispatches(&stack, "worker", "hint").await > 0,
        "taken by its hint"
    );
    let requests = stack.llm.requests().await.expect("requests");
    assert!(requests.is_empty(), "nothing was sent: {requests:?}");
    // Nothing was paid for, so nothing is counted as an early call that went unused.
    let early = counter(&stack, "worker", "maestro_llm_early_first_calls_total", "").await;
    assert_eq!(early, 0, "an early call never sent is not counted");
}

/// With another worker on the profile, hints are still followed. A hinted job's JetStream
/// delivery that reaches the other worker while the hint's run goes on finds the job leased
/// there and is handed over to the hint's worker, which settles it with the run's outcome: a
/// retry comes after its own delay (100–200 ms here), not after the lease (two minutes here,
/// longer than the test waits). Early first LLM calls are off while the other worker is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_another_worker_a_hinted_jobs_delivery_is_handed_to_the_hints_worker() {
    let scenario = json!({"scenarios": [{
        "name": "flaky once",
        "turns": [
            {"fail": {"status": 500, "times": 1},
             "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
        ]
    }]});
    let options = StackOptions::new(scenario)
        .retry_backoff(100, 200)
        .env("JOB_ACK_WAIT_MS", "120000")
        .env("REDISPATCH_GRACE_MS", "120000");
    let mut stack = Stack::up(options).await;
    wait_for_log(&mut stack, "worker", "early first LLM calls on", 1).await;
    stack.add(Service::Worker, "worker-b").await;
    wait_for_log(&mut stack, "worker", "early first LLM calls off", 1).await;

    // Each hint goes to one of the two and each delivery to one of the two, independently:
    // over 16 jobs, some delivery reaches the worker its hint did not.
    const JOBS: usize = 16;
    for n in 0..JOBS {
        let id = stack
            .new_task(&json!({"instruction": format!("shared {n}")}))
            .await;
        let task = stack.wait_over(id).await;
        assert_eq!(task.job().status, JobStatus::Succeeded, "{task:?}");
        assert_eq!(task.job().attempt, 2, "one retry: {task:?}");
        let events = stack.events(id).await;
        assert_consistent(&events);
        assert_eq!(
            job_states(&events),
            ["queued", "running", "retry", "running", "succeeded"]
        );
    }
    wait_for_settled_dispatches(&stack).await;
    let (mut hinted, mut delivered, mut handed) = (0, 0, 0);
    for instance in ["worker", "worker-b"] {
        hinted += dispatches(&stack, instance, "hint").await;
        delivered += dispatches(&stack, instance, "jetstream").await;
        handed += counter(
            &stack,
            instance,
            "maestro_dispatch_handovers_total",
            "outcome=\"taken\"",
        )
        .await;
    }
    // Every claim counted once by its path: the first attempts (hint or delivery) and the
    // retries (redeliveries, which no hint announces).
    assert_eq!(
        hinted + delivered,
        2 * JOBS as u64,
        "each attempt claimed once"
    );
    assert!(hinted > 0, "no job was started by its hint");
    assert!(handed > 0, "no delivery was handed over");
    let requests = stack.llm.requests().await.expect("requests");
    assert_eq!(requests.len(), 3 * JOBS, "no early first call with company");

    // Alone again once the other has stopped (it says so as it exits).
    let exit = stack
        .process("worker-b")
        .terminate(Duration::from_secs(10))
        .await
        .expect("worker b exits");
    assert!(exit.success(), "{exit:?}");
    wait_for_log(&mut stack, "worker", "early first LLM calls on", 2).await;
}
