//! `maestro-bench a2a`: what A2A costs next to MAESTRO's own REST API, through the whole stack
//! with the scripted LLM answering at once.
//!
//! - send → completed, the reference job (LLM call → `list_files` → LLM call → `complete`),
//!   as a client sees it: REST (`POST /api/local/tasks`, then the task's SSE stream until its
//!   `succeeded` state), A2A `SendMessage` (blocking: the answer is the completed task) and A2A
//!   `SendStreamingMessage` (until the stream closes at `completed`);
//! - events per second through one stream: a job whose reply streams in many small chunks, read
//!   through MAESTRO's SSE and through A2A's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use maestro_testkit::a2a::message;
use maestro_testkit::{Next, SseClient, Stack, StackOptions};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

pub struct Args {
    pub tasks: usize,
    pub concurrency: usize,
    /// Chunks of the streamed reply, for the events/s figure.
    pub chunks: usize,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args {
        tasks: 200,
        concurrency: 16,
        chunks: 2000,
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--tasks" => args.tasks = value.parse()?,
            "--concurrency" => args.concurrency = value.parse()?,
            "--chunks" => args.chunks = value.parse()?,
            other => {
                anyhow::bail!("unknown flag {other}; flags: --tasks N --concurrency C --chunks N")
            }
        }
    }
    anyhow::ensure!(
        args.tasks >= 1 && args.concurrency >= 1,
        "--tasks ≥ 1, --concurrency ≥ 1"
    );
    Ok(args)
}

fn scenarios(chunks: usize) -> Value {
    json!({"scenarios": [
        {"name": "stream", "match": "stream a lot", "turns": [
            {"text": "x".repeat(chunks), "chunk_chars": 1,
             "tool_calls": [{"name": "complete", "arguments": {"result": "streamed"}}]}
        ]},
        {"name": "reference-job", "turns": [
            {"text": "Looking.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "Done.", "tool_calls": [{"name": "complete", "arguments": {"result": "ok"}}]}
        ]}
    ]})
}

/// How a task is sent and followed to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Rest,
    A2aSend,
    A2aStream,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Rest => "REST: POST /api/local/tasks + SSE until succeeded",
            Path::A2aSend => "A2A SendMessage (blocking)",
            Path::A2aStream => "A2A SendStreamingMessage until completed",
        }
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let options = StackOptions::new(scenarios(args.chunks))
        .env("RUST_LOG", "warn")
        .env("WORKER_CONCURRENCY", "256")
        .env("DB_MAX_CONNECTIONS", "16");
    let stack = Arc::new(Stack::spawn(options).await?);
    println!(
        "{} tasks per path, {} at a time; the reference job, scripted LLM answering at once",
        args.tasks, args.concurrency
    );
    for path in [Path::Rest, Path::A2aSend, Path::A2aStream] {
        measure(&stack, path, args.concurrency.min(4), args.concurrency).await?; // warm-up
        let started = Instant::now();
        let mut latencies = measure(&stack, path, args.tasks, args.concurrency).await?;
        let elapsed = started.elapsed();
        latencies.sort();
        let pct = |p: f64| {
            ms(latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)])
        };
        println!(
            "{:<58} {:>6.0} tasks/s  p50 {:>7.1} ms  p99 {:>7.1} ms",
            path.name(),
            latencies.len() as f64 / elapsed.as_secs_f64(),
            pct(0.5),
            pct(0.99)
        );
    }
    let rest = events_per_second(&stack, false).await?;
    let a2a = events_per_second(&stack, true).await?;
    println!(
        "one stream of a {}-chunk reply: REST SSE {:.0} events/s ({} events), A2A SSE {:.0} events/s ({} events)",
        args.chunks, rest.0, rest.1, a2a.0, a2a.1
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Send `n` reference tasks along `path`, `concurrency` at a time; each one's latency.
async fn measure(
    stack: &Arc<Stack>,
    path: Path,
    n: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<Duration>> {
    let permits = Arc::new(Semaphore::new(concurrency));
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let permit = permits.clone().acquire_owned().await?;
        let stack = stack.clone();
        handles.push(tokio::spawn(async move {
            let _permit = permit;
            let sent = Instant::now();
            one(&stack, path, &format!("task {i} {}", uuid::Uuid::new_v4())).await?;
            Ok::<_, anyhow::Error>(sent.elapsed())
        }));
    }
    let mut latencies = Vec::with_capacity(n);
    for handle in handles {
        latencies.push(handle.await??);
    }
    Ok(latencies)
}

/// One task along `path`, until the client knows it is over.
async fn one(stack: &Stack, path: Path, instruction: &str) -> anyhow::Result<()> {
    let a2a = stack.a2a(false);
    match path {
        Path::Rest => {
            let task = stack.create(&json!({"instruction": instruction})).await;
            let url = stack.url(&format!("/api/local/tasks/{}/stream", task.id()));
            let mut stream = SseClient::connect(&stack.http, &url, &stack.token, None).await?;
            loop {
                match stream.next_or_end(Duration::from_secs(60)).await {
                    Next::Item(item)
                        if item.event == "job_state"
                            && item.data["payload"]["status"] == "succeeded" =>
                    {
                        return Ok(());
                    }
                    Next::Item(_) => {}
                    other => anyhow::bail!("the stream ended first: {other:?}"),
                }
            }
        }
        Path::A2aSend => {
            let id = uuid::Uuid::new_v4().to_string();
            let task = a2a.result("SendMessage", message(&id, instruction)).await;
            anyhow::ensure!(
                task["task"]["status"]["state"] == "TASK_STATE_COMPLETED",
                "{task}"
            );
            Ok(())
        }
        Path::A2aStream => {
            let id = uuid::Uuid::new_v4().to_string();
            let mut stream = a2a
                .stream("SendStreamingMessage", message(&id, instruction), None)
                .await;
            let items = stream.to_end(Duration::from_secs(60)).await;
            let last = items.last().context("events")?;
            let state = &last.data["result"]["statusUpdate"]["status"]["state"];
            let snapshot = &last.data["result"]["task"]["status"]["state"];
            anyhow::ensure!(
                state == "TASK_STATE_COMPLETED" || snapshot == "TASK_STATE_COMPLETED",
                "{last:?}"
            );
            Ok(())
        }
    }
}

/// Stream one long reply to one client: events per second, and how many.
async fn events_per_second(stack: &Stack, a2a: bool) -> anyhow::Result<(f64, usize)> {
    let mut stream = if a2a {
        let id = uuid::Uuid::new_v4().to_string();
        stack
            .a2a(false)
            .stream("SendStreamingMessage", message(&id, "stream a lot"), None)
            .await
    } else {
        let task = stack.create(&json!({"instruction": "stream a lot"})).await;
        let url = stack.url(&format!("/api/local/tasks/{}/stream", task.id()));
        SseClient::connect(&stack.http, &url, &stack.token, None).await?
    };
    let started = Instant::now();
    let mut count = 0;
    loop {
        match stream.next_or_end(Duration::from_secs(120)).await {
            Next::Item(item) => {
                count += 1;
                let over = item.data["payload"]["status"] == "succeeded"
                    || item.data["result"]["statusUpdate"]["status"]["state"]
                        == "TASK_STATE_COMPLETED";
                if over {
                    break;
                }
            }
            Next::End => break,
            Next::Timeout => anyhow::bail!("the stream stalled after {count} events"),
        }
    }
    Ok((count as f64 / started.elapsed().as_secs_f64(), count))
}
