//! `maestro-bench timeline [--jobs N]`: every hop and statement of one reference job at
//! concurrency 1, in order. The services run with `sqlx::query=debug` (each statement logged
//! with its duration) and `info`; after N jobs one at a time, the last one's window — from the
//! client sending `POST /api/local/tasks` to it receiving the `succeeded` event on NATS — is
//! cut from every service's log, merged with the client's own marks and the scripted LLM's
//! request arrivals, and printed as offsets from the `POST`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use futures::StreamExt as _;
use maestro_testkit::{Service, Stack, StackOptions};
use serde_json::{Value, json};

pub struct Args {
    pub jobs: usize,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args { jobs: 20 };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--jobs" => args.jobs = value.parse()?,
            other => anyhow::bail!("unknown flag {other}; flags: --jobs N"),
        }
    }
    anyhow::ensure!(args.jobs >= 1, "--jobs ≥ 1");
    Ok(args)
}

/// One line of the timeline: when (µs since the epoch), who, what.
struct Mark {
    at_us: i64,
    who: String,
    what: String,
}

fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let options = StackOptions::new(crate::reference::scenario())
        // `TIMELINE_RUST_LOG` shows more of a service's own steps (each log line is a mark).
        .env(
            "RUST_LOG",
            &std::env::var("TIMELINE_RUST_LOG").unwrap_or_else(|_| {
                "info,sqlx::query=debug,maestro_worker::handler=debug".to_owned()
            }),
        )
        .env("RELAY_POLL_MS", "1000");
    let mut stack = Stack::spawn(options).await?;
    let nats = stack.nats.client().await?;
    let mut subscription = nats
        .subscribe(format!("{}.events.*.job_state", stack.prefix))
        .await?;
    nats.flush().await?;
    // When each dispatch passes through the server (a core subscriber of the work queue's
    // subjects gets it as it is published, before JetStream hands it to a worker).
    let mut dispatches = nats
        .subscribe(format!("{}.jobs.dispatch.>", stack.prefix))
        .await?;
    nats.flush().await?;
    let seen_dispatches = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = seen_dispatches.clone();
    tokio::spawn(async move {
        while dispatches.next().await.is_some() {
            seen.lock().expect("lock").push(unix_us());
        }
    });
    // Each state change with the time it arrived (read at once, not when the loop gets to it).
    let (arrived, mut events) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(message) = subscription.next().await {
            let at = unix_us();
            if let Ok(event) = serde_json::from_slice::<Value>(&message.payload)
                && arrived.send((at, event)).is_err()
            {
                return;
            }
        }
    });

    let mut window = (0, 0);
    let mut client = Vec::new();
    for i in 0..args.jobs {
        client.clear();
        let sent = unix_us();
        client.push((sent, "POST /api/local/tasks sent".to_owned()));
        let task = stack
            .create(&json!({"instruction": format!("job {i}")}))
            .await;
        client.push((unix_us(), "201 Created received".to_owned()));
        let id = task.id().to_string();
        let done = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some((at, event)) = events.recv().await {
                if event["task_id"] != id.as_str() {
                    continue;
                }
                match event["payload"]["status"].as_str() {
                    Some("succeeded") => return Ok(at),
                    Some(status) => client.push((at, format!("`{status}` event received"))),
                    None => {}
                }
            }
            anyhow::bail!("the events subscription ended")
        })
        .await
        .context("the job did not succeed within 30 s")??;
        client.push((done, "`succeeded` event received on NATS".to_owned()));
        window = (sent, done);
    }
    // Let the last lines reach the logs.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let dispatched = seen_dispatches.lock().expect("lock").clone();
    client.extend(
        dispatched
            .into_iter()
            .map(|at| (at, "dispatch passes through NATS".to_owned())),
    );
    let mut marks: Vec<Mark> = client
        .into_iter()
        .map(|(at_us, what)| Mark {
            at_us,
            who: "client".to_owned(),
            what,
        })
        .collect();
    for request in stack.llm.requests().await? {
        let at_us = request["received_at_us"].as_i64().unwrap_or(0);
        marks.push(Mark {
            at_us,
            who: "scripted LLM".to_owned(),
            what: "chat completion request received".to_owned(),
        });
    }
    for service in Service::ALL {
        let log = std::fs::read_to_string(stack.process(service.name()).log_path())?;
        marks.extend(
            log.lines()
                .filter_map(|line| log_mark(service.name(), line)),
        );
    }
    marks.retain(|m| m.at_us >= window.0 && m.at_us <= window.1 + 2_000);
    marks.sort_by_key(|m| m.at_us);
    print(&marks, window.0);
    Ok(())
}

/// A service's JSON log line as a mark: a statement with its duration, or the message.
fn log_mark(service: &str, line: &str) -> Option<Mark> {
    let v: Value = serde_json::from_str(line).ok()?;
    let at = chrono::DateTime::parse_from_rfc3339(v["timestamp"].as_str()?).ok()?;
    let what = match v["summary"].as_str() {
        Some(summary) => format!(
            "SQL {} ({:.2} ms{})",
            summary.trim(),
            v["elapsed_secs"].as_f64().unwrap_or(0.0) * 1000.0,
            v["rows_affected"]
                .as_u64()
                .filter(|n| *n > 0)
                .map(|n| format!(", {n} rows"))
                .unwrap_or_default()
        ),
        None => v["message"].as_str()?.to_owned(),
    };
    Some(Mark {
        at_us: at.timestamp_micros(),
        who: service.to_owned(),
        what,
    })
}

fn print(marks: &[Mark], start_us: i64) {
    println!("{:>9}  {:<13} what", "ms", "who");
    for m in marks {
        println!(
            "{:>9.2}  {:<13} {}",
            (m.at_us - start_us) as f64 / 1000.0,
            m.who,
            m.what
        );
    }
    let commits = marks
        .iter()
        .filter(|m| m.what.starts_with("SQL COMMIT"))
        .count();
    println!("{commits} commits in the window");
}
