//! `maestro-bench subtasks [--tasks N] [--fanout K]`: what delegation costs. Each task's first
//! reply makes K `delegate` calls; each child finishes at once; the parent then completes.
//! Tasks run one at a time. Printed: the parent's end-to-end latency (request sent → its
//! `succeeded` event on NATS) and the join latency (its last child's `succeeded` event → the
//! parent's), p50 and p99.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use maestro_testkit::{Stack, StackOptions};
use serde_json::{Value, json};

pub struct Args {
    tasks: usize,
    fanout: usize,
}

pub fn parse(mut args: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut parsed = Args {
        tasks: 100,
        fanout: 4,
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--tasks" => parsed.tasks = value.parse()?,
            "--fanout" => parsed.fanout = value.parse()?,
            other => anyhow::bail!("unknown flag {other}; flags: --tasks N --fanout K"),
        }
    }
    anyhow::ensure!(
        (1..=8).contains(&parsed.fanout),
        "--fanout is 1 to 8 (MAX_SUBTASKS_PER_TURN)"
    );
    Ok(parsed)
}

/// When each task's job succeeded, by task id (filled from the `job_state` events on NATS).
type Successes = Arc<Mutex<HashMap<String, Instant>>>;

pub async fn run(args: Args) -> anyhow::Result<()> {
    let delegates: Vec<Value> = (0..args.fanout)
        .map(|i| json!({"name": "delegate", "arguments": {"instruction": format!("CHILD part {i}")}}))
        .collect();
    let scenario = json!({"scenarios": [
        {"name": "child", "match": "CHILD", "turns": [
            {"tool_calls": [{"name": "complete", "arguments": {"result": "part done"}}]}
        ]},
        {"name": "parent", "turns": [
            {"tool_calls": delegates},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "all parts done"}}]}
        ]}
    ]});
    let options = StackOptions::new(scenario)
        .env("RUST_LOG", "warn")
        .policy(r#"{"allowed_tools": ["*", "delegate"]}"#);
    let stack = Stack::spawn(options).await?;
    let succeeded = listen(&stack).await?;
    let mut total = Vec::with_capacity(args.tasks);
    let mut join = Vec::with_capacity(args.tasks);
    for i in 0..args.tasks + 5 {
        let (end_to_end, joined) = one(&stack, &succeeded, i, args.fanout).await?;
        if i >= 5 {
            // The first five warm the stack up.
            total.push(end_to_end);
            join.push(joined);
        }
    }
    report(&args, &mut total, &mut join);
    Ok(())
}

/// Record every task's success as its event arrives.
async fn listen(stack: &Stack) -> anyhow::Result<Successes> {
    let succeeded: Successes = Arc::default();
    let nats = stack.nats.client().await?;
    let mut events = nats
        .subscribe(format!("{}.events.*.job_state", stack.prefix))
        .await?;
    nats.flush().await?;
    tokio::spawn({
        let succeeded = succeeded.clone();
        async move {
            while let Some(message) = events.next().await {
                let now = Instant::now();
                let Ok(event) = serde_json::from_slice::<Value>(&message.payload) else {
                    continue;
                };
                if event["payload"]["status"] == "succeeded"
                    && let Some(task) = event["task_id"].as_str()
                {
                    succeeded.lock().expect("lock").insert(task.to_owned(), now);
                }
            }
        }
    });
    Ok(succeeded)
}

/// One task: its end-to-end latency, and the join's (its last child's success → its own).
async fn one(
    stack: &Stack,
    succeeded: &Successes,
    i: usize,
    fanout: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let sent = Instant::now();
    let body = json!({"instruction": format!("PARENT {i}"), "piece": "chat"});
    let id = stack.create(&body).await.id().to_string();
    let done = loop {
        if let Some(at) = succeeded.lock().expect("lock").get(&id) {
            break *at;
        }
        anyhow::ensure!(
            sent.elapsed() < Duration::from_secs(60),
            "task {id} is late"
        );
        tokio::time::sleep(Duration::from_micros(200)).await;
    };
    let children = stack.subtasks(&id).await;
    anyhow::ensure!(children.len() == fanout, "{id} has {children:?}");
    let last_child = {
        let board = succeeded.lock().expect("lock");
        children
            .iter()
            .filter_map(|c| board.get(&c.id.to_string()).copied())
            .max()
            .context("a child's succeeded event")?
    };
    Ok((done - sent, done.saturating_duration_since(last_child)))
}

fn report(args: &Args, total: &mut [Duration], join: &mut [Duration]) {
    total.sort();
    join.sort();
    let pct = |v: &[Duration], p: f64| {
        v[((v.len() as f64 * p) as usize).min(v.len() - 1)].as_secs_f64() * 1000.0
    };
    println!(
        "tasks:        {} (one at a time), {} subtasks each",
        args.tasks, args.fanout
    );
    println!(
        "end to end:   p50 {:.1} ms, p99 {:.1} ms",
        pct(total, 0.5),
        pct(total, 0.99)
    );
    println!(
        "join:         p50 {:.1} ms, p99 {:.1} ms (last child's success → the parent's)",
        pct(join, 0.5),
        pct(join, 0.99)
    );
}
