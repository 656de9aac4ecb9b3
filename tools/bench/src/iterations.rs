//! `maestro-bench iterations`: the worker's own overhead per LLM iteration — the time of an
//! iteration minus the time it waited on the LLM and on tools — over jobs of a four-movement
//! piece run one after another through the whole stack, with the scripted LLM answering at
//! once. The worker logs each iteration's figures (`maestro_worker::overhead` at debug); this
//! reads them from its log. Also prints the prompt-cache reuse the LLM reported for the first
//! request after each movement transition.
//!
//! `--upstream URL` makes the scripted LLM send every request to a real OpenAI-compatible
//! server too (one generated token) and report that server's usage, so the cache figures are
//! the real server's (e.g. `../shared/tools/llama-server start`); the LLM wait then includes
//! the real server's time.

use std::time::Duration;

use anyhow::Context as _;
use maestro_domain::{Event, EventKind, JobStatus, TaskId};
use maestro_testkit::{Stack, StackOptions};
use serde_json::{Value, json};

/// The bench piece: four movements in a row.
const PIECE: &str = "name: bench
description: Four movements in a row, for the iteration benchmark.
start_movement: m0
max_movements: 10
max_iterations: 200
movements:
  - name: m0
    guidance: Look around.
    transitions: [{condition: You have looked., target: m1}]
  - name: m1
    guidance: Look closer.
    transitions: [{condition: You have looked closer., target: m2}]
  - name: m2
    guidance: Check again.
    checklist: [Nothing was missed.]
    transitions: [{condition: Checked., target: m3}]
  - name: m3
    guidance: Finish.
";

pub struct Args {
    pub jobs: usize,
    pub turns: usize,
    pub upstream: Option<String>,
    /// Bytes of background text in each task's instruction (a realistic prompt is several
    /// thousand tokens: project notes, pasted files).
    pub background: usize,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args {
        jobs: 30,
        turns: 10,
        upstream: None,
        background: 0,
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--jobs" => args.jobs = value.parse()?,
            "--turns" => args.turns = value.parse()?,
            "--upstream" => args.upstream = Some(value),
            "--background" => args.background = value.parse()?,
            other => anyhow::bail!(
                "unknown flag {other}; flags: --jobs N --turns PER_MOVEMENT --upstream URL \
                 --background BYTES"
            ),
        }
    }
    anyhow::ensure!(args.jobs >= 2 && args.turns >= 1, "--jobs ≥ 2, --turns ≥ 1");
    Ok(args)
}

/// Each movement: `turns - 1` read-only calls (all different), then `transition`; the last
/// movement ends with `complete`.
fn scenario(turns: usize) -> Value {
    let mut script = Vec::new();
    for movement in 0..4 {
        for turn in 0..turns - 1 {
            script.push(json!({"tool_calls": [{"name": "glob", "arguments": {"pattern": format!("m{movement}/t{turn}/*")}}]}));
        }
        if movement < 3 {
            script.push(json!({"tool_calls": [{"name": "transition", "arguments": {"target": format!("m{}", movement + 1), "reason": "done here"}}]}));
        }
    }
    script.push(
        json!({"tool_calls": [{"name": "complete", "arguments": {"result": "benchmarked"}}]}),
    );
    json!({"scenarios": [{"name": "bench", "turns": script}]})
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let mut options = StackOptions::new(scenario(args.turns))
        .piece("bench", PIECE)
        .env(
            "RUST_LOG",
            "warn,maestro_worker::overhead=debug,maestro_worker::agent::llm=info",
        )
        .env("LOG_FORMAT", "json")
        .env("MAX_ITERATIONS", "1000")
        .env("LLM_IDLE_TIMEOUT_MS", "600000");
    options.llm_upstream = args.upstream.clone();
    let mut stack = Stack::spawn(options).await?;
    let (tasks, warm_lines) = run_jobs(&mut stack, &args).await?;
    let lines = overhead_lines(&mut stack)?;
    println!(
        "LLM: {}",
        args.upstream
            .as_deref()
            .map_or("scripted, answering at once".to_owned(), |u| format!(
                "scripted turns, usage from {u}"
            ))
    );
    print_overhead(&lines[warm_lines..], tasks.len(), args.turns)?;
    let mut events = Vec::with_capacity(tasks.len());
    for id in &tasks {
        events.push(stack.events(id).await);
    }
    print_cache(&events);
    Ok(())
}

/// Run the jobs one after another; returns the counted ones and how many overhead lines the
/// first (warm-up) job logged.
async fn run_jobs(stack: &mut Stack, args: &Args) -> anyhow::Result<(Vec<TaskId>, usize)> {
    let timeout = if args.upstream.is_some() {
        Duration::from_secs(900)
    } else {
        Duration::from_secs(60)
    };
    let over = [JobStatus::Succeeded, JobStatus::Failed];
    let background = background(args.background);
    let mut tasks = Vec::new();
    let mut warm_lines = 0;
    for i in 0..args.jobs {
        let instruction = format!("bench job {i}\n\n{background}");
        let body = json!({"instruction": instruction, "piece": "bench"});
        let id = stack.create(&body).await.id();
        let done = stack.wait_within(id, &over, timeout).await;
        anyhow::ensure!(
            done.status() == Some(JobStatus::Succeeded),
            "job {i} did not succeed: {done:?}"
        );
        if i == 0 {
            // The first job warms caches and connections; it is not counted.
            warm_lines = overhead_lines(stack)?.len();
        } else {
            tasks.push(id);
        }
    }
    Ok((tasks, warm_lines))
}

/// The worker's overhead per iteration, from its log lines.
fn print_overhead(counted: &[Value], jobs: usize, turns: usize) -> anyhow::Result<()> {
    let field = |line: &Value, key: &str| line[key].as_u64().unwrap_or(0);
    let mut overhead: Vec<u64> = counted.iter().map(|l| field(l, "overhead_us")).collect();
    overhead.sort_unstable();
    let n = overhead.len();
    anyhow::ensure!(n > 0, "the worker logged no iteration");
    let pct = |p: f64| overhead[((n as f64 * p) as usize).min(n - 1)];
    let mean = |key: &str| counted.iter().map(|l| field(l, key)).sum::<u64>() as f64 / n as f64;
    println!(
        "iterations:  {n} (over {jobs} jobs of {} LLM calls each, after one warm-up job)",
        4 * turns
    );
    println!(
        "overhead:    p50 {} µs, p90 {} µs, p99 {} µs, max {} µs per iteration",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    );
    println!(
        "waiting:     LLM {:.0} µs, tools {:.0} µs per iteration (mean)",
        mean("llm_us"),
        mean("tools_us")
    );
    Ok(())
}

/// The prompt-cache reuse the LLM reported: after each movement transition, and overall.
fn print_cache(jobs: &[Vec<Event>]) {
    let mut after_transition = Vec::new();
    let mut all = Vec::new();
    for events in jobs {
        let mut entered = 0;
        let mut fresh = false;
        for event in events {
            if event.kind == EventKind::Movement {
                entered += 1;
                fresh = entered > 1;
            }
            if event.kind == EventKind::Message && event.payload["role"] == "assistant" {
                let usage = &event.payload["usage"];
                let prompt = usage["promptTokens"].as_f64().unwrap_or(0.0);
                let cached = usage["cachedPromptTokens"].as_f64().unwrap_or(0.0);
                if prompt > 0.0 {
                    all.push(cached / prompt);
                    if fresh {
                        after_transition.push((cached, prompt));
                    }
                }
                fresh = false;
            }
        }
    }
    let ratio = |pairs: &[(f64, f64)]| {
        pairs.iter().map(|p| p.0).sum::<f64>() / pairs.iter().map(|p| p.1).sum::<f64>()
    };
    let min = after_transition
        .iter()
        .map(|p| p.0 / p.1)
        .fold(f64::INFINITY, f64::min);
    println!(
        "prompt cache after a movement transition: {:.1} % of the prompt (min {:.1} %, {} requests, \
         mean prompt {:.0} tokens)",
        ratio(&after_transition) * 100.0,
        min * 100.0,
        after_transition.len(),
        after_transition.iter().map(|p| p.1).sum::<f64>() / after_transition.len().max(1) as f64
    );
    println!(
        "prompt cache, every request: {:.1} % mean",
        all.iter().sum::<f64>() * 100.0 / all.len().max(1) as f64
    );
}

/// About `bytes` of varied project notes (varied so that a tokenizer does not compress them).
pub(crate) fn background(bytes: usize) -> String {
    let mut text = String::new();
    let mut n = 0;
    while text.len() < bytes {
        n += 1;
        text.push_str(&format!(
            "Note {n}: module {} keeps its state in table t{} and logs under target m{}; \
             change it only with a migration and a test.\n",
            n * 7 % 97,
            n * 13 % 89,
            n * 3 % 41
        ));
    }
    text
}

/// The worker's per-iteration lines so far.
fn overhead_lines(stack: &mut Stack) -> anyhow::Result<Vec<Value>> {
    let path = stack.process("worker").log_path().to_owned();
    let text = std::fs::read_to_string(&path)?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["target"] == "maestro_worker::overhead")
        .collect())
}
