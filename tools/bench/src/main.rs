//! `maestro-bench`: runs N agent jobs (LLM call → tool call → LLM call → finish) through the
//! whole stack — the five services as processes, a Postgres database and a nats-server of its
//! own, the scripted LLM answering at once — and prints throughput, end-to-end latency
//! (request sent → `succeeded` event received on NATS) and Postgres commits per job.
//!
//! `cargo build --release --workspace --bins && target/release/maestro-bench [--jobs N] [--concurrency C]`
//!
//! `maestro-bench tools [--calls N]` measures tool-call round trips instead (see `tools.rs`),
//! `maestro-bench sse [--clients N]` token-to-client latency and the gateway's cost (`sse.rs`),
//! `maestro-bench iterations [--jobs N] [--turns T] [--upstream URL] [--background BYTES]`: the
//! worker's own overhead per LLM iteration and the prompt-cache reuse after movement
//! transitions (`iterations.rs`), `maestro-bench subtasks [--tasks N] [--fanout K]` what
//! delegating to K subtasks costs end to end and at the join (`subtasks.rs`), `maestro-bench
//! latency [--database URL] [--nats URL]` the round trips under every hop (`latency.rs`),
//! `maestro-bench continue [--tasks N] [--turns T] [--upstream URL] [--background BYTES]` the
//! prompt cache a same-piece Continue keeps (`continues.rs`), `maestro-bench a2a [--tasks N]
//! [--concurrency C] [--chunks N]` A2A's send→completed latency and stream events/s next to the
//! REST API's (`a2a.rs`), `maestro-bench schedules [--schedules N] [--schedulers K] [--batch B]`
//! how fast N schedules due at the same minute are fired (`schedules.rs`), `maestro-bench
//! signals [--rounds N]` how fast a comment and a cancel reach a running job (`signals.rs`).

mod a2a;
mod continues;
mod iterations;
mod latency;
mod schedules;
mod signals;
mod sse;
mod subtasks;
mod tools;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use maestro_testkit::{Stack, StackOptions};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, oneshot};

struct Args {
    jobs: usize,
    concurrency: usize,
    warmup: usize,
}

fn args() -> anyhow::Result<Args> {
    let mut args = Args {
        jobs: 2000,
        concurrency: 64,
        warmup: 100,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--jobs" => args.jobs = value.parse()?,
            "--concurrency" => args.concurrency = value.parse()?,
            "--warmup" => args.warmup = value.parse()?,
            other => {
                anyhow::bail!("unknown flag {other}; flags: --jobs N --concurrency C --warmup N")
            }
        }
    }
    Ok(args)
}

/// Jobs waiting for their `succeeded` event, and events that came before their waiter.
#[derive(Default)]
struct Board {
    waiting: HashMap<String, oneshot::Sender<Instant>>,
    finished: HashMap<String, Instant>,
}

type Waiters = Arc<Mutex<Board>>;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("sse") {
        let clients = std::env::args()
            .skip_while(|a| a != "--clients")
            .nth(1)
            .map_or(Ok(1000), |n| n.parse())?;
        return sse::run(clients).await;
    }
    if std::env::args().nth(1).as_deref() == Some("subtasks") {
        return subtasks::run(subtasks::parse(std::env::args().skip(2))?).await;
    }
    if std::env::args().nth(1).as_deref() == Some("latency") {
        return latency::run(latency::parse(std::env::args().skip(2))?).await;
    }
    if std::env::args().nth(1).as_deref() == Some("a2a") {
        return a2a::run(a2a::parse(std::env::args().skip(2))?).await;
    }
    if std::env::args().nth(1).as_deref() == Some("continue") {
        return continues::run(continues::parse(std::env::args().skip(2))?).await;
    }
    if std::env::args().nth(1).as_deref() == Some("signals") {
        return signals::run(signals::parse(std::env::args().skip(2))?).await;
    }
    if std::env::args().nth(1).as_deref() == Some("schedules") {
        return schedules::run(schedules::parse(std::env::args().skip(2))?).await;
    }
    if std::env::args().nth(1).as_deref() == Some("iterations") {
        return iterations::run(iterations::parse(std::env::args().skip(2))?).await;
    }
    if std::env::args().nth(1).as_deref() == Some("tools") {
        let calls = std::env::args()
            .skip_while(|a| a != "--calls")
            .nth(1)
            .map_or(Ok(1000), |n| n.parse())?;
        return tools::run(calls).await;
    }
    let args = args()?;
    let scenario = json!({"scenarios": [{
        "name": "reference-job",
        "turns": [
            {"text": "Looking.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "Done.", "tool_calls": [{"name": "complete", "arguments": {"result": "ok"}}]}
        ]
    }]});
    let options = StackOptions::new(scenario)
        // `BENCH_RUST_LOG=info TEST_LOG=1` keeps the services' logs for a timeline.
        .env(
            "RUST_LOG",
            &std::env::var("BENCH_RUST_LOG").unwrap_or_else(|_| "warn".to_owned()),
        )
        .env("WORKER_CONCURRENCY", "256")
        .env("DB_MAX_CONNECTIONS", "16")
        .env("RELAY_POLL_MS", "1000");
    let stack = Arc::new(Stack::spawn(options).await?);
    let waiters: Waiters = Arc::default();
    listen_for_success(&stack, waiters.clone()).await?;

    println!("warming up with {} jobs", args.warmup);
    run(&stack, &waiters, args.warmup, args.concurrency).await?;
    let commits_before = commits(&stack).await?;
    let measured_from: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&stack.db.pool)
        .await?;
    println!("running {} jobs, {} at a time", args.jobs, args.concurrency);
    let started = Instant::now();
    let mut latencies = run(&stack, &waiters, args.jobs, args.concurrency).await?;
    let elapsed = started.elapsed();
    let commits = commits(&stack).await? - commits_before;
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!("jobs:        {}", latencies.len());
    println!("elapsed:     {:.2} s", elapsed.as_secs_f64());
    println!(
        "throughput:  {:.0} jobs/s",
        latencies.len() as f64 / elapsed.as_secs_f64()
    );
    println!(
        "latency:     p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(pct(0.5)),
        ms(pct(0.9)),
        ms(pct(0.99)),
        ms(pct(1.0))
    );
    println!(
        "commits:     {:.1} per job (pg_stat_database.xact_commit, reads included)",
        commits as f64 / latencies.len() as f64
    );
    stages(&stack, measured_from).await?;
    Ok(())
}

/// Where a job's time goes, from its events' timestamps (each the start of the transaction
/// that wrote it): p50 of each step of the reference job, over the measured jobs.
async fn stages(stack: &Stack, from: chrono::DateTime<chrono::Utc>) -> anyhow::Result<()> {
    let row: (f64, f64, f64, f64) = sqlx::query_as(
        r#"
        WITH t AS (
            SELECT e.task_id,
                   min(e.created_at) FILTER (WHERE e.payload->>'status' = 'queued') AS queued,
                   min(e.created_at) FILTER (WHERE e.payload->>'status' = 'running') AS running,
                   min(e.created_at) FILTER (WHERE e.kind = 'tool_result') AS tool,
                   max(e.created_at) FILTER (WHERE e.payload->>'status' = 'succeeded') AS done
              FROM events e JOIN tasks k ON k.id = e.task_id AND k.created_at >= $1
             GROUP BY e.task_id
        )
        SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM running - queued)),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM tool - running)),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM done - tool)),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM done - queued))
          FROM t
        "#,
    )
    .bind(from)
    .fetch_one(&stack.db.pool)
    .await?;
    println!(
        "stages p50:  create → claimed {:.1} ms, claimed → tool result {:.1} ms (LLM call, tool call), \
         tool result → succeeded {:.1} ms (LLM call, final commit); create → succeeded {:.1} ms \
         (by the events' transaction start times)",
        row.0 * 1000.0,
        row.1 * 1000.0,
        row.2 * 1000.0,
        row.3 * 1000.0
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Resolve waiters when their task's `succeeded` event is published.
async fn listen_for_success(stack: &Stack, waiters: Waiters) -> anyhow::Result<()> {
    let nats = stack.nats.client().await?;
    let mut events = nats
        .subscribe(format!("{}.events.*.job_state", stack.prefix))
        .await?;
    tokio::spawn(async move {
        while let Some(message) = events.next().await {
            let now = Instant::now();
            let Ok(event) = serde_json::from_slice::<Value>(&message.payload) else {
                continue;
            };
            if event["payload"]["status"] != "succeeded" {
                continue;
            }
            let task = event["task_id"].as_str().unwrap_or_default().to_owned();
            let mut board = waiters.lock().expect("lock");
            match board.waiting.remove(&task) {
                Some(tx) => {
                    let _ = tx.send(now);
                }
                None => {
                    board.finished.insert(task, now);
                }
            }
        }
    });
    nats.flush().await?;
    Ok(())
}

/// Run `n` jobs, at most `concurrency` in flight; returns each job's latency.
async fn run(
    stack: &Arc<Stack>,
    waiters: &Waiters,
    n: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<Duration>> {
    let permits = Arc::new(Semaphore::new(concurrency));
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let permit = permits.clone().acquire_owned().await?;
        let (stack, waiters) = (stack.clone(), waiters.clone());
        handles.push(tokio::spawn(async move {
            let _permit = permit;
            let sent = Instant::now();
            let response = stack
                .http
                .post(stack.url("/api/local/tasks"))
                .bearer_auth(&stack.token)
                .json(&json!({"instruction": format!("job {i}")}))
                .send()
                .await?;
            let task: Value = response.error_for_status()?.json().await?;
            let id = task["id"].as_str().context("task id")?.to_owned();
            let (tx, rx) = oneshot::channel();
            let early = {
                let mut board = waiters.lock().expect("lock");
                let early = board.finished.remove(&id);
                if early.is_none() {
                    board.waiting.insert(id.clone(), tx);
                }
                early
            };
            let done = match early {
                Some(at) => at,
                None => match tokio::time::timeout(Duration::from_secs(60), rx).await {
                    Ok(Ok(at)) => at,
                    _ => anyhow::bail!(
                        "job {id} did not succeed within 60 s: {:?}",
                        stack.task(&id).await
                    ),
                },
            };
            Ok::<_, anyhow::Error>(done.saturating_duration_since(sent))
        }));
    }
    let mut latencies = Vec::with_capacity(n);
    for handle in handles {
        latencies.push(handle.await??);
    }
    Ok(latencies)
}

async fn commits(stack: &Stack) -> anyhow::Result<i64> {
    let n: i64 = sqlx::query_scalar(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&stack.db.pool)
    .await?;
    Ok(n)
}
