//! `maestro-bench signals [--rounds N]`: how fast what a person says reaches a running job.
//!
//! - **Interjection**: a job takes quick turns (a 25 ms LLM reply, a `list_files` call, again);
//!   a comment is posted; measured until the first LLM request that carries it arrives at the
//!   scripted LLM (its `received_at_us`), and until its `comment` signal is seen on the bus
//!   (when the deployment publishes signals).
//! - **Cancel**: a job streams a long reply (one letter per 10 ms); the task is cancelled;
//!   measured until the API answers (the job is `cancelled`, committed), and until the `cancel`
//!   signal is seen on the bus (what the worker running it acts on). A client's stream shows
//!   no delta after the answer either way: the gateway sends no text past a committed end.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use futures::StreamExt as _;
use maestro_testkit::{Stack, StackOptions};
use serde_json::{Value, json};

pub struct Args {
    pub rounds: usize,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args { rounds: 30 };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--rounds" => args.rounds = value.parse()?,
            other => anyhow::bail!("unknown flag {other}; flags: --rounds N"),
        }
    }
    anyhow::ensure!(args.rounds >= 1, "--rounds ≥ 1");
    Ok(args)
}

fn scenarios() -> Value {
    // Different arguments each turn: the worker's loop guard stops a job repeating one call.
    let quick = |i: usize| json!({"delay_ms": 25, "tool_calls": [{"name": "glob", "arguments": {"pattern": format!("d{i}/*")}}]});
    let mut turns: Vec<Value> = (0..60).map(quick).collect();
    turns.push(json!({"tool_calls": [{"name": "complete", "arguments": {"result": "ok"}}]}));
    let long = "x".repeat(3000);
    json!({"scenarios": [
        {"name": "chatty", "match": "chatty", "turns": turns},
        {"name": "long", "match": "long reply", "turns": [
            {"text": long, "chunk_chars": 1, "chunk_delay_ms": 10,
             "tool_calls": [{"name": "complete", "arguments": {"result": "never"}}]}
        ]}
    ]})
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let options = StackOptions::new(scenarios()).env("RUST_LOG", "warn");
    let stack = Stack::spawn(options).await?;
    let nats = stack.nats.client().await?;
    let mut signals = nats
        .subscribe(format!("{}.signals.>", stack.prefix))
        .await?;
    let (mut reached, mut signalled, mut stopped, mut cancel_signalled) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.rounds {
        stack.llm.reset().await?;
        let id = stack
            .new_task(&json!({"instruction": format!("chatty {round}")}))
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let marker = format!("marker {round}: look again");
        let sent_us = unix_us();
        let sent = Instant::now();
        let routed = stack
            .comment(id, &marker)
            .await
            .map_err(|e| anyhow::anyhow!("comment refused: {e:?}"))?;
        anyhow::ensure!(
            routed.routed_to == maestro_api::RoutedTo::Interjection,
            "the job was not running: {:?}",
            routed.routed_to
        );
        if let Some(after) = next_signal(&mut signals, "comment", sent).await {
            signalled.push(after);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let arrived = loop {
            let requests = stack.llm.requests().await?;
            let first = requests
                .iter()
                .find(|r| r["body"]["messages"].to_string().contains(&marker));
            if let Some(r) = first {
                break r["received_at_us"].as_u64().context("received_at_us")?;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the comment never reached the LLM"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        reached.push(Duration::from_micros(arrived.saturating_sub(sent_us)));
        let _ = stack.cancel(id).await;
        while let Ok(Some(_)) =
            tokio::time::timeout(Duration::from_millis(50), signals.next()).await
        {}

        let id = stack
            .new_task(&json!({"instruction": format!("long reply {round}")}))
            .await;
        let mut stream = stack.stream(id, None).await;
        stream
            .read_until(Duration::from_secs(10), |i| i.event == "delta")
            .await;
        let cancelled = Instant::now();
        stack
            .cancel(id)
            .await
            .map_err(|e| anyhow::anyhow!("cancel refused: {e:?}"))?;
        stopped.push(cancelled.elapsed());
        if let Some(after) = next_signal(&mut signals, "cancel", cancelled).await {
            cancel_signalled.push(after);
        }
    }
    println!("rounds: {}", args.rounds);
    report("comment → next LLM request carrying it", &mut reached);
    report("comment → `comment` signal on the bus", &mut signalled);
    report("cancel → answered (job `cancelled`)", &mut stopped);
    report("cancel → `cancel` signal on the bus", &mut cancel_signalled);
    Ok(())
}

/// The time from `since` until the next signal of `kind` (`None`: none within 2 s).
async fn next_signal(
    signals: &mut async_nats::Subscriber,
    kind: &str,
    since: Instant,
) -> Option<Duration> {
    let deadline = since + Duration::from_secs(2);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = tokio::time::timeout(left, signals.next()).await.ok()??;
        if message.subject.as_str().ends_with(&format!(".{kind}")) {
            return Some(since.elapsed());
        }
    }
}

fn report(what: &str, times: &mut [Duration]) {
    if times.is_empty() {
        println!("{what:42} n/a (none seen)");
        return;
    }
    times.sort();
    let pct = |p: f64| times[((times.len() as f64 * p) as usize).min(times.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what:42} p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(pct(0.5)),
        ms(pct(0.99)),
        ms(times[times.len() - 1])
    );
}
