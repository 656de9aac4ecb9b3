//! `maestro-bench continue`: what a same-piece Continue (SPEC §3.3, §5) keeps of the LLM's
//! prompt cache. Each task runs a job of T LLM turns (read-only calls, then `complete`), is
//! continued once with the same piece, and the Continue's first request is compared with the
//! previous job's last one: the `tools` bytes, whether its messages extend the previous
//! request's byte for byte, and the cached prompt tokens the LLM reported for it over the
//! previous request's prompt tokens. Also the end-to-end time of the Continue (request sent →
//! the job's `succeeded` state read back).
//!
//! `--upstream URL` makes the scripted LLM send every request to a real OpenAI-compatible
//! server too and report that server's usage, so the cache ratio is the real server's
//! `cached_tokens` (e.g. `../shared/tools/llama-server start`).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use maestro_api::ContinueTask;
use maestro_domain::{Event, EventKind, JobId, JobStatus, Usage};
use maestro_testkit::{Stack, StackOptions};
use serde_json::{Value, json};

pub struct Args {
    pub tasks: usize,
    pub turns: usize,
    pub upstream: Option<String>,
    /// Bytes of background text in each task's instruction.
    pub background: usize,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args {
        tasks: 20,
        turns: 4,
        upstream: None,
        background: 0,
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--tasks" => args.tasks = value.parse()?,
            "--turns" => args.turns = value.parse()?,
            "--upstream" => args.upstream = Some(value),
            "--background" => args.background = value.parse()?,
            other => anyhow::bail!(
                "unknown flag {other}; flags: --tasks N --turns T --upstream URL --background BYTES"
            ),
        }
    }
    anyhow::ensure!(
        args.tasks >= 1 && args.turns >= 1,
        "--tasks ≥ 1, --turns ≥ 1"
    );
    Ok(args)
}

/// The first job: `turns - 1` read-only calls, then `complete`; the Continue: one call, then
/// `complete`.
fn scenarios(turns: usize) -> Value {
    let glob = |pattern: String| json!({"tool_calls": [{"name": "glob", "arguments": {"pattern": pattern}}]});
    let complete = |result: &str| json!({"tool_calls": [{"name": "complete", "arguments": {"result": result}}]});
    let mut first: Vec<Value> = (0..turns - 1).map(|t| glob(format!("t{t}/*"))).collect();
    first.push(complete("first job done"));
    json!({"scenarios": [
        {"name": "continued", "match": "continue bench", "after": "Carry on",
         "turns": [glob("more/*".to_owned()), complete("continued")]},
        {"name": "first", "match": "continue bench", "turns": first}
    ]})
}

/// One task's figures.
struct Measured {
    same_tools: bool,
    extends: bool,
    /// Cached tokens of the Continue's first request, over the previous request's prompt.
    ratio: f64,
    previous_prompt: u64,
    took: Duration,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let mut options = StackOptions::new(scenarios(args.turns))
        .env("RUST_LOG", "warn")
        .env("LLM_IDLE_TIMEOUT_MS", "600000");
    options.llm_upstream = args.upstream.clone();
    let stack = Stack::spawn(options).await?;
    let timeout = if args.upstream.is_some() {
        Duration::from_secs(900)
    } else {
        Duration::from_secs(60)
    };
    let background = crate::iterations::background(args.background);
    let mut measured = Vec::new();
    for i in 0..args.tasks {
        stack.llm.reset().await?;
        let instruction = format!("continue bench {i}\n\n{background}");
        measured.push(one(&stack, &instruction, timeout).await?);
    }
    print(&args, &measured);
    Ok(())
}

/// Run a task, continue it, and measure the Continue's first request.
async fn one(stack: &Stack, instruction: &str, timeout: Duration) -> anyhow::Result<Measured> {
    let over = [JobStatus::Succeeded, JobStatus::Failed];
    let id = stack
        .create(&json!({"instruction": instruction}))
        .await
        .id();
    let first = stack.wait_within(id, &over, timeout).await;
    anyhow::ensure!(first.status() == Some(JobStatus::Succeeded), "{first:?}");
    let started = Instant::now();
    let continued = stack
        .continue_task(id, &ContinueTask::new("Carry on: look further."))
        .await
        .map_err(|e| anyhow::anyhow!("continue refused: {e:?}"))?;
    let done = stack.wait_within(id, &over, timeout).await;
    let took = started.elapsed();
    anyhow::ensure!(done.status() == Some(JobStatus::Succeeded), "{done:?}");
    let requests = stack.llm.requests().await?;
    let of = |name: &'static str| requests.iter().filter(move |r| r["scenario"] == name);
    let previous = of("first")
        .next_back()
        .context("the first job's requests")?;
    let now = of("continued").next().context("the Continue's requests")?;
    let raw = |r: &Value, key: &str| r[key].as_str().unwrap_or_default().to_owned();
    let open = raw(previous, "raw_messages");
    let open = open.strip_suffix(']').unwrap_or(&open);
    let events = stack.events(id).await;
    let first_job = first.task.latest_job.as_ref().context("a job")?.id;
    let continued_job = continued.task.latest_job.as_ref().context("a job")?.id;
    let previous_usage = usage(&events, first_job, true)?;
    let continue_usage = usage(&events, continued_job, false)?;
    Ok(Measured {
        same_tools: raw(previous, "raw_tools") == raw(now, "raw_tools"),
        extends: raw(now, "raw_messages").starts_with(&format!("{open},")),
        ratio: continue_usage.cached_prompt_tokens as f64 / previous_usage.prompt_tokens as f64,
        previous_prompt: previous_usage.prompt_tokens,
        took,
    })
}

/// The usage of a job's last (or first) assistant message.
fn usage(events: &[Event], job: JobId, last: bool) -> anyhow::Result<Usage> {
    let mut answers = events.iter().filter(|e| {
        e.job_id == job && e.kind == EventKind::Message && e.payload["role"] == "assistant"
    });
    let event = if last {
        answers.next_back()
    } else {
        answers.next()
    };
    let event = event.context("an assistant message")?;
    Ok(serde_json::from_value(event.payload["usage"].clone())?)
}

fn print(args: &Args, measured: &[Measured]) {
    let n = measured.len();
    println!(
        "LLM: {}",
        args.upstream.as_deref().map_or(
            "scripted (4-byte token accounting)".to_owned(),
            |u| format!("scripted turns, usage from {u}")
        )
    );
    println!(
        "tasks:       {n}, each a job of {} LLM calls continued once with the same piece",
        args.turns
    );
    println!(
        "layout:      tools bytes identical in {}/{n}, messages extend the previous request byte for byte in {}/{n}",
        measured.iter().filter(|m| m.same_tools).count(),
        measured.iter().filter(|m| m.extends).count()
    );
    let ratios: Vec<f64> = measured.iter().map(|m| m.ratio * 100.0).collect();
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "cache:       Continue's cached prompt tokens / previous request's prompt: mean {:.1} %, min {min:.1} % (previous prompt {:.0} tokens on average)",
        ratios.iter().sum::<f64>() / n as f64,
        measured
            .iter()
            .map(|m| m.previous_prompt as f64)
            .sum::<f64>()
            / n as f64
    );
    let mut took: Vec<Duration> = measured.iter().map(|m| m.took).collect();
    took.sort_unstable();
    println!(
        "continue:    request → succeeded p50 {:.1} ms, max {:.1} ms (polling the task)",
        took[n / 2].as_secs_f64() * 1000.0,
        took[n - 1].as_secs_f64() * 1000.0
    );
}
