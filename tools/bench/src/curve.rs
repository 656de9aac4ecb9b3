//! `maestro-bench curve [--jobs N] [--backlog B] [--out DIR]`: the cost curve.
//!
//! 1. The reference job at concurrency 1, 8, 64 and 256: throughput, p50/p99, CPU per job.
//! 2. A backlog: B jobs created as fast as 64 clients can (nobody waits for a job before
//!    creating the next), then drained: throughput from the first create to the last
//!    `succeeded`, and each job's create → `succeeded` latency.
//! 3. Conversation length: one job at a time whose conversation grows to M messages (a
//!    `glob` call and its result per LLM turn, then `complete`), for M = 10, 100 and 500:
//!    wall time and CPU per job and per LLM turn (the scripted LLM's own CPU left out), and
//!    the transcript read (`GET …/transcript`) of the finished task. The request resent to the
//!    LLM grows with the conversation, so per turn a cost linear in M is the floor; what is
//!    checked is that nothing grows faster.
//!
//! Figures go to `DIR/curve.csv` (default `target/curve`), and `plot_curve.py` draws
//! `DIR/curve.png` from it when matplotlib can be installed (`compare.py plot`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use maestro_testkit::{Stack, StackOptions};
use serde_json::{Value, json};

use crate::reference::{Bench, cpu_busy_ms};

pub struct Args {
    pub jobs: usize,
    pub backlog: usize,
    pub out: PathBuf,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args {
        jobs: 2000,
        backlog: 10_000,
        out: PathBuf::from("target/curve"),
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--jobs" => args.jobs = value.parse()?,
            "--backlog" => args.backlog = value.parse()?,
            "--out" => args.out = PathBuf::from(value),
            other => anyhow::bail!("unknown flag {other}; flags: --jobs N --backlog B --out DIR"),
        }
    }
    anyhow::ensure!(args.jobs >= 1, "--jobs ≥ 1");
    Ok(args)
}

/// Conversation lengths measured, in messages.
const LENGTHS: [usize; 3] = [10, 100, 500];

pub async fn run(args: Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let mut csv = String::from("series,x,jobs_per_s,p50_ms,p99_ms,cpu_ms_per_job\n");

    println!("| concurrency | jobs/s | p50 | p99 | CPU per job |");
    println!("|---|---|---|---|---|");
    {
        let bench = Bench::start().await?;
        for c in [1, 8, 64, 256] {
            let n = if c == 1 {
                args.jobs / 4
            } else {
                args.jobs.max(8 * c)
            };
            bench.jobs(100.max(c), c).await?;
            let f = bench.measure(n, c).await?;
            let cpu = f.per_job(f.cpu_ms);
            println!(
                "| {c} | {:.0} | {:.1} ms | {:.1} ms | {cpu:.2} ms |",
                f.jobs_per_s(),
                f.pct(0.5),
                f.pct(0.99)
            );
            csv += &format!(
                "concurrency,{c},{:.1},{:.2},{:.2},{cpu:.3}\n",
                f.jobs_per_s(),
                f.pct(0.5),
                f.pct(0.99)
            );
        }
        let f = bench.backlog(args.backlog, 64).await?;
        let cpu = f.per_job(f.cpu_ms);
        println!(
            "| backlog of {} (created by 64 clients) | {:.0} | {:.1} ms | {:.1} ms | {cpu:.2} ms |",
            args.backlog,
            f.jobs_per_s(),
            f.pct(0.5),
            f.pct(0.99)
        );
        csv += &format!(
            "backlog,{},{:.1},{:.2},{:.2},{cpu:.3}\n",
            args.backlog,
            f.jobs_per_s(),
            f.pct(0.5),
            f.pct(0.99)
        );
    }

    println!();
    println!(
        "| messages | LLM turns | job wall time | CPU per job | CPU per turn | transcript read |"
    );
    println!("|---|---|---|---|---|---|");
    let stack = Stack::spawn(conversation_options()).await?;
    for m in LENGTHS {
        let c = conversation(&stack, m).await?;
        println!(
            "| {m} | {} | {:.1} ms | {:.1} ms | {:.3} ms | {:.1} ms |",
            c.turns,
            c.wall_ms,
            c.cpu_ms,
            c.cpu_ms / c.turns as f64,
            c.transcript_ms
        );
        csv += &format!(
            "conversation,{m},{:.3},{:.2},{:.2},{:.3}\n",
            1000.0 / c.wall_ms,
            c.wall_ms,
            c.transcript_ms,
            c.cpu_ms
        );
    }
    let path = args.out.join("curve.csv");
    std::fs::write(&path, csv)?;
    println!("\nwrote {}", path.display());
    let png = args.out.join("curve.png");
    let plotted = tokio::process::Command::new("python3")
        .arg(crate::compare::peers_dir().join("compare.py"))
        .arg("plot")
        .args([&path, &png])
        .status()
        .await?;
    if plotted.success() {
        println!("wrote {}", png.display());
    } else {
        eprintln!("could not draw {} (matplotlib)", png.display());
    }
    Ok(())
}

/// Turns of `glob` calls, each with other arguments (the loop guard stops a job repeating
/// one call), then `complete`: two messages per turn after the system and user messages.
fn conversation_options() -> StackOptions {
    let scenarios: Vec<Value> = LENGTHS
        .iter()
        .map(|&m| {
            let mut turns: Vec<Value> = (0..turns_for(m))
                .map(|i| {
                    json!({"tool_calls": [{"name": "glob", "arguments": {"pattern": format!("d{i}/*")}}]})
                })
                .collect();
            turns.push(json!({"tool_calls": [{"name": "complete", "arguments": {"result": "ok"}}]}));
            json!({"name": format!("conversation-{m}"), "match": format!("conversation of {m} "), "turns": turns})
        })
        .collect();
    StackOptions::new(json!({ "scenarios": scenarios }))
        .piece("long", LONG_PIECE)
        .env("MAX_ITERATIONS", "400")
        .env("RUST_LOG", "warn")
}

fn turns_for(messages: usize) -> usize {
    (messages.saturating_sub(2) / 2).max(1)
}

const LONG_PIECE: &str = r#"
name: long
description: One movement that may take many turns.
start_movement: work
max_movements: 1
max_iterations: 400
movements:
  - name: work
    guidance: Work through the task with the tools, then call `complete`.
"#;

struct Conversation {
    turns: usize,
    wall_ms: f64,
    cpu_ms: f64,
    transcript_ms: f64,
}

/// Jobs of `m` messages one after another (after a warm-up job), each timed from its create
/// to its `succeeded` event on NATS; enough of them for about a second of CPU samples
/// (`/proc/stat` counts in 10 ms ticks). Returns the means, and the median of five transcript
/// reads of the last task.
async fn conversation(stack: &Stack, m: usize) -> anyhow::Result<Conversation> {
    let nats = stack.nats.client().await?;
    let mut states = nats
        .subscribe(format!("{}.events.*.job_state", stack.prefix))
        .await?;
    nats.flush().await?;
    let body =
        |i: usize| json!({"instruction": format!("conversation of {m} #{i}"), "piece": "long"});
    stack.run(&body(0)).await;
    let jobs = (1000 / m).max(2);
    let llm_pid = stack.llm.process.pid();
    let cpu_before = cpu_busy_ms()? - process_cpu_ms(llm_pid);
    let started = Instant::now();
    let mut id = String::new();
    for i in 1..=jobs {
        id = stack.create(&body(i)).await.id().to_string();
        let status = tokio::time::timeout(Duration::from_secs(300), async {
            while let Some(message) = states.next().await {
                let event: Value = serde_json::from_slice(&message.payload)?;
                let status = event["payload"]["status"].as_str().unwrap_or_default();
                if event["task_id"] == id.as_str() && ["succeeded", "failed"].contains(&status) {
                    return Ok(status.to_owned());
                }
            }
            anyhow::bail!("the events subscription ended")
        })
        .await
        .context("the conversation did not end within 300 s")??;
        anyhow::ensure!(
            status == "succeeded",
            "the conversation of {m} messages ended {status}"
        );
    }
    let wall = started.elapsed();
    let cpu = cpu_busy_ms()? - process_cpu_ms(llm_pid) - cpu_before;
    let mut reads = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let transcript = stack
            .http
            .get(stack.url(&format!("/api/local/tasks/{id}/transcript")))
            .bearer_auth(&stack.token)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        reads.push(ms(started.elapsed()));
        anyhow::ensure!(!transcript.is_empty(), "empty transcript");
    }
    reads.sort_by(f64::total_cmp);
    Ok(Conversation {
        turns: turns_for(m) + 1,
        wall_ms: ms(wall) / jobs as f64,
        cpu_ms: cpu as f64 / jobs as f64,
        transcript_ms: reads[2],
    })
}

/// CPU ms a process has used (0 when it cannot be read).
fn process_cpu_ms(pid: Option<u32>) -> i64 {
    pid.and_then(|pid| crate::reference::process_cpu(format!("/proc/{pid}/stat").as_ref()))
        .map_or(0, |(_, ms)| ms)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
