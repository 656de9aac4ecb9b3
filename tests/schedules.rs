//! Schedules (docs/schedules.md) against the whole stack: managed over the API with bad input
//! refused, fired exactly once per fire time by three racing schedulers (one of them killed
//! again and again), the overlap policies `skip` and `queue` under a run that takes longer
//! than the interval, and both missed-run policies after downtime.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use maestro_testkit::{Service, Stack, StackOptions};
use reqwest::Method;
use serde_json::{Value, json};

fn scenarios() -> Value {
    json!({"scenarios": [
        {
            "name": "quick",
            "match": "quick",
            "turns": [{"text": "Done.", "tool_calls": [{"name": "complete", "arguments": {"result": "ok"}}]}]
        },
        {
            "name": "slow",
            "match": "slow",
            "turns": [{"delay_ms": 2500, "text": "Done.", "tool_calls": [{"name": "complete", "arguments": {"result": "ok"}}]}]
        }
    ]})
}

async fn call(stack: &Stack, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    stack
        .api(method.clone(), path, body.as_ref())
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"))
}

async fn create(stack: &Stack, body: Value) -> Value {
    let (status, schedule) = call(stack, Method::POST, "/api/local/schedules", Some(body)).await;
    assert_eq!(status, 201, "created: {schedule}");
    schedule
}

async fn runs(stack: &Stack, id: &str) -> Vec<Value> {
    let path = format!("/api/local/schedules/{id}/runs?limit=100");
    let (status, page) = call(stack, Method::GET, &path, None).await;
    assert_eq!(status, 200, "{page}");
    page["runs"].as_array().cloned().unwrap_or_default()
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a time: {v}"))
}

async fn pause(stack: &Stack, id: &str) {
    let path = format!("/api/local/schedules/{id}/pause");
    let (status, body) = call(stack, Method::POST, &path, None).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("paused")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_managed_over_the_api_and_bad_input_changes_nothing() {
    let stack = Stack::up(StackOptions::new(scenarios())).await;
    let refusals = [
        (
            json!({"task": {"instruction": "quick"}}),
            422,
            "invalid_cron",
        ),
        (
            json!({"cron": "* * * *", "task": {"instruction": "quick"}}),
            422,
            "invalid_cron",
        ),
        (
            json!({"cron": "0 0 30 2 *", "task": {"instruction": "quick"}}),
            422,
            "invalid_cron",
        ),
        (
            json!({"cron": "* * * * *", "timezone": "Mars/Base", "task": {"instruction": "quick"}}),
            422,
            "invalid_timezone",
        ),
        (json!({"cron": "* * * * *"}), 422, "invalid_task"),
        (
            json!({"cron": "* * * * *", "task": {"instruction": "  "}}),
            422,
            "invalid_instruction",
        ),
        (
            json!({"cron": "* * * * *", "task": {"instruction": "quick", "piece": "nope"}}),
            422,
            "unknown_piece",
        ),
        (
            json!({"cron": "* * * * *", "overlap": "sometimes", "task": {"instruction": "quick"}}),
            422,
            "",
        ),
        (
            json!({"cron": "* * * * *", "task": {"instruction": "quick"}, "starts_at": "2030-01-02T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"}),
            422,
            "invalid_window",
        ),
        (
            json!({"cron": "* * * * *", "task": {"instruction": "quick"}, "color": "red"}),
            422,
            "",
        ),
    ];
    for (body, status, code) in refusals {
        let (got, answer) = call(
            &stack,
            Method::POST,
            "/api/local/schedules",
            Some(body.clone()),
        )
        .await;
        if code.is_empty() {
            assert!((400..=status).contains(&got), "{body} → {got} {answer}");
        } else {
            assert_eq!(got, status, "{body} → {answer}");
            assert_eq!(answer["error"]["code"], code, "{body} → {answer}");
        }
    }
    let (_, page) = call(&stack, Method::GET, "/api/local/schedules", None).await;
    assert_eq!(page["schedules"], json!([]), "refused input stored nothing");

    let schedule = create(
        &stack,
        json!({"name": "morning report", "cron": "0 9 * * 1-5", "timezone": "Asia/Tokyo",
               "task": {"instruction": "quick report"}, "overlap": "queue", "missed": "run_once"}),
    )
    .await;
    let id = schedule["id"].as_str().expect("id").to_owned();
    assert_eq!(schedule["status"], "active");
    assert_eq!(schedule["overlap"], "queue");
    assert_eq!(schedule["missed"], "run_once");
    assert!(!schedule["description"].as_str().unwrap_or("").is_empty());
    let next = time(&schedule["next_fire_at"]);
    assert!(next > Utc::now(), "the next fire time is ahead");
    let tokyo = next.with_timezone(&chrono_tz::Asia::Tokyo);
    assert_eq!(
        tokyo.format("%H:%M").to_string(),
        "09:00",
        "read in its zone"
    );

    let path = format!("/api/local/schedules/{id}");
    let (status, changed) = call(
        &stack,
        Method::PATCH,
        &path,
        Some(json!({"cron": "*/5 * * * *", "timezone": "UTC"})),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["name"], "morning report", "what is not given stays");
    assert!(time(&changed["next_fire_at"]) - Utc::now() <= chrono::TimeDelta::minutes(5));
    let (status, _) = call(
        &stack,
        Method::PATCH,
        &path,
        Some(json!({"cron": "nonsense"})),
    )
    .await;
    assert_eq!(status, 422);
    let (_, unchanged) = call(&stack, Method::GET, &path, None).await;
    assert_eq!(
        unchanged["cron"], "*/5 * * * *",
        "a refused change changes nothing"
    );

    pause(&stack, &id).await;
    let (_, paused) = call(&stack, Method::GET, &path, None).await;
    assert!(
        paused.get("next_fire_at").is_none(),
        "a paused schedule is not due: {paused}"
    );
    let (status, resumed) = call(&stack, Method::POST, &format!("{path}/resume"), None).await;
    assert_eq!((status, resumed["status"].as_str()), (200, Some("active")));

    let bob = stack.bob();
    let (status, _) = bob.api(Method::GET, &path, None).await.expect("answer");
    assert_eq!(status, 404, "another owner's schedule is not there");
    let (status, _) = bob
        .api(Method::POST, &format!("{path}/run"), None)
        .await
        .expect("answer");
    assert_eq!(status, 404);

    // Fire it by hand: a task of the template, a run marked manual.
    let (status, run) = call(&stack, Method::POST, &format!("{path}/run"), None).await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["manual"], true);
    let task_id = run["task_id"].as_str().expect("a task").to_owned();
    let task = stack.wait_over(&task_id).await;
    assert_eq!(task.task.instruction, "quick report");
    let listed = runs(&stack, &id).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["task_status"], "succeeded");

    let (status, _) = call(&stack, Method::DELETE, &path, None).await;
    assert_eq!(status, 204);
    let (status, _) = call(&stack, Method::GET, &path, None).await;
    assert_eq!(status, 404);
    let task = stack.task(&task_id).await;
    assert_eq!(task.task.instruction, "quick report", "its tasks stay");
}

/// Started runs of a schedule and their tasks, straight from the database.
async fn fired(stack: &Stack, id: &str) -> (Vec<DateTime<Utc>>, i64) {
    let id: uuid::Uuid = id.parse().expect("uuid");
    let times: Vec<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT fire_time FROM schedule_runs WHERE schedule_id = $1 AND status = 'started' ORDER BY fire_time",
    )
    .bind(id)
    .fetch_all(&stack.db.pool)
    .await
    .expect("runs");
    let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE schedule_id = $1")
        .bind(id)
        .fetch_one(&stack.db.pool)
        .await
        .expect("tasks");
    (times, tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_racing_schedulers_fire_each_second_once_and_a_killed_one_loses_nothing() {
    let mut stack = Stack::up(StackOptions::new(scenarios())).await;
    stack.add(Service::Scheduler, "scheduler-2").await;
    stack.add(Service::Scheduler, "scheduler-3").await;
    let schedule = create(
        &stack,
        json!({"cron": "* * * * * *", "overlap": "allow", "task": {"instruction": "quick tick"}}),
    )
    .await;
    let id = schedule["id"].as_str().expect("id").to_owned();
    // Kill and restart one scheduler, then another, while the schedule fires every second.
    for victim in ["scheduler-2", "scheduler-3", "scheduler-2"] {
        tokio::time::sleep(Duration::from_millis(1300)).await;
        stack.kill(victim).await;
        stack.add(Service::Scheduler, victim).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    pause(&stack, &id).await;
    // A fire in flight when the pause landed commits or rolls back within a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (times, tasks) = fired(&stack, &id).await;
    assert!(times.len() >= 4, "it fired: {times:?}");
    assert_eq!(tasks, times.len() as i64, "one task per started run");
    let distinct: BTreeSet<_> = times.iter().collect();
    assert_eq!(distinct.len(), times.len(), "no fire time twice");
    for pair in times.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            chrono::TimeDelta::seconds(1),
            "no second lost between {} and {}",
            pair[0],
            pair[1]
        );
    }
    let id_uuid: uuid::Uuid = id.parse().expect("uuid");
    let others: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM schedule_runs WHERE schedule_id = $1 AND status <> 'started'",
    )
    .bind(id_uuid)
    .fetch_one(&stack.db.pool)
    .await
    .expect("runs");
    assert_eq!(others, 0, "nothing skipped or missed under `allow`");
    let listed = runs(&stack, &id).await;
    for run in listed.iter().take(3) {
        let task = run["task_id"].as_str().expect("task");
        let done = stack.wait_over(task).await;
        assert_eq!(done.task.instruction, "quick tick");
        let fire_time = time(&run["fire_time"]);
        assert_eq!(
            done.task.schedule_id.map(|s| s.to_string()),
            Some(id.clone())
        );
        assert_eq!(
            done.task.scheduled_for,
            Some(fire_time),
            "the task names its fire time"
        );
        assert_eq!(
            fire_time.timestamp_subsec_nanos(),
            0,
            "fire times are whole seconds"
        );
        let late = time(&run["started_at"]) - fire_time;
        assert!(
            late >= chrono::TimeDelta::zero() && late < chrono::TimeDelta::seconds(1),
            "started at its instant, not before, within a second: {late}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_runs_are_skipped_or_queued_as_the_policy_says() {
    let stack = Stack::up(StackOptions::new(scenarios())).await;
    let skip = create(
        &stack,
        json!({"cron": "* * * * * *", "overlap": "skip", "task": {"instruction": "slow skip"}}),
    )
    .await;
    let queue = create(
        &stack,
        json!({"cron": "* * * * * *", "overlap": "queue", "task": {"instruction": "slow queue"}}),
    )
    .await;
    let (skip, queue) = (
        skip["id"].as_str().expect("id"),
        queue["id"].as_str().expect("id"),
    );
    tokio::time::sleep(Duration::from_millis(4200)).await;
    pause(&stack, skip).await;
    pause(&stack, queue).await;

    let skipped = runs(&stack, skip).await;
    let statuses: Vec<&str> = skipped
        .iter()
        .rev()
        .map(|r| r["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses.first(), Some(&"started"), "{statuses:?}");
    assert!(
        statuses.contains(&"skipped"),
        "fires during a run are skipped: {statuses:?}"
    );
    assert!(statuses.iter().all(|s| *s == "started" || *s == "skipped"));

    // Queued runs start one after another, in fire-time order, each after the one before.
    let queued = runs(&stack, queue).await;
    assert!(queued.iter().any(|r| r["status"] == "queued"), "{queued:?}");
    let mut started = Vec::new();
    for _ in 0..60 {
        let now = runs(&stack, queue).await;
        started = now
            .iter()
            .filter(|r| r["status"] == "started")
            .map(|r| {
                (
                    time(&r["fire_time"]),
                    r["task_id"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        if started.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(started.len() >= 3, "queued runs started: {started:?}");
    started.sort();
    let mut previous_end = None;
    for (fire_time, task) in started.iter().take(3) {
        let done = stack.wait_over(task).await;
        let job = done.task.latest_job.clone().expect("a job");
        let began = job.started_at.expect("started");
        if let Some(end) = previous_end {
            assert!(
                began >= end,
                "the run of {fire_time} began after the one before ended"
            );
        }
        previous_end = job.finished_at;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_times_missed_while_no_scheduler_ran_follow_the_missed_run_policy() {
    let mut options = StackOptions::new(scenarios());
    options.services.retain(|s| *s != Service::Scheduler);
    let mut stack = Stack::up(options).await;
    let skip = create(
        &stack,
        json!({"name": "skipper", "cron": "*/10 * * * *", "missed": "skip", "task": {"instruction": "quick missed"}}),
    )
    .await;
    let once = create(
        &stack,
        json!({"name": "once", "cron": "*/10 * * * *", "missed": "run_once", "task": {"instruction": "quick once"}}),
    )
    .await;
    // Down for an hour: the last hour's six fire times passed.
    sqlx::query(
        "UPDATE schedules SET next_fire_at = date_trunc('hour', now()) - interval '1 hour'",
    )
    .execute(&stack.db.pool)
    .await
    .expect("rewind");
    stack.add(Service::Scheduler, "scheduler").await;

    let (skip, once) = (
        skip["id"].as_str().expect("id"),
        once["id"].as_str().expect("id"),
    );
    let mut skip_runs = Vec::new();
    let mut once_runs = Vec::new();
    for _ in 0..40 {
        skip_runs = runs(&stack, skip).await;
        once_runs = runs(&stack, once).await;
        if !skip_runs.is_empty() && !once_runs.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        skip_runs.len(),
        1,
        "one record for the missed ones: {skip_runs:?}"
    );
    assert_eq!(skip_runs[0]["status"], "missed");
    assert!(skip_runs[0].get("task_id").is_none());
    let missed = skip_runs[0]["missed_count"].as_i64().unwrap_or(0);
    // The last hour's six, and this hour's up to now.
    let expected = 6 + i64::from(chrono::Timelike::minute(&Utc::now())) / 10 + 1;
    assert!(
        (expected - 1..=expected).contains(&missed),
        "every fire time since is counted: {missed}, expected {expected}"
    );

    assert_eq!(once_runs.len(), 1, "{once_runs:?}");
    assert_eq!(once_runs[0]["status"], "started", "the latest one runs");
    let ran = time(&once_runs[0]["fire_time"]);
    assert!(
        Utc::now() - ran < chrono::TimeDelta::minutes(10),
        "it is the latest: {ran}"
    );
    assert_eq!(once_runs[0]["missed_count"].as_i64(), Some(missed - 1));
    let task = once_runs[0]["task_id"].as_str().expect("a task");
    assert_eq!(stack.wait_over(task).await.task.instruction, "quick once");
    for id in [skip, once] {
        let (_, schedule) = call(
            &stack,
            Method::GET,
            &format!("/api/local/schedules/{id}"),
            None,
        )
        .await;
        assert!(
            time(&schedule["next_fire_at"]) > Utc::now(),
            "back on the clock"
        );
    }

    // Each owner hears of it in the inbox.
    let mut notices = Vec::new();
    for _ in 0..40 {
        let (_, page) = call(
            &stack,
            Method::GET,
            "/api/local/inbox?type=schedule.missed",
            None,
        )
        .await;
        notices = page["items"].as_array().cloned().unwrap_or_default();
        if notices.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(notices.len(), 2, "{notices:?}");
    let by_name = |name: &str| {
        notices
            .iter()
            .find(|n| n["notification"]["data"]["name"] == name)
            .unwrap_or_else(|| panic!("a notice for {name}: {notices:?}"))
            .clone()
    };
    assert_eq!(
        by_name("skipper")["notification"]["data"]["ran_latest"],
        false
    );
    assert_eq!(by_name("once")["notification"]["data"]["ran_latest"], true);
    assert_eq!(by_name("once")["notification"]["data"]["owner"], "alice");
}
