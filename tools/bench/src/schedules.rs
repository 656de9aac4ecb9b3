//! `maestro-bench schedules [--schedules N] [--schedulers K] [--batch B]`: how fast the
//! schedulers fire when N schedules (default 10,000) are due at the same minute. The schedules
//! are inserted straight into the database (`* * * * *`, due at the next whole minute at
//! least 10 s away), K schedulers (default 2) race for them, and the bench prints the time
//! from the fire instant until the last task exists, the schedules fired per second, and the
//! Postgres commits it took. Only schedulers run: the tasks' jobs stay queued.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{DateTime, TimeDelta, Timelike, Utc};
use maestro_testkit::{Service, Stack, StackOptions};
use serde_json::json;

pub struct Args {
    pub schedules: i64,
    pub schedulers: usize,
    pub batch: i64,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args {
        schedules: 10_000,
        schedulers: 2,
        batch: 200,
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--schedules" => args.schedules = value.parse()?,
            "--schedulers" => args.schedulers = value.parse()?,
            "--batch" => args.batch = value.parse()?,
            other => {
                anyhow::bail!("unknown flag {other}; flags: --schedules N --schedulers K --batch B")
            }
        }
    }
    anyhow::ensure!(
        args.schedules >= 1 && args.schedulers >= 1 && args.batch >= 1,
        "every figure ≥ 1"
    );
    Ok(args)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let mut options = StackOptions::new(json!({"scenarios": []}))
        .env("RUST_LOG", "warn")
        .env("SCHEDULE_BATCH", &args.batch.to_string())
        .env("DB_MAX_CONNECTIONS", "8")
        // The tasks' jobs stay queued (no worker): do not dispatch them again and again.
        .env("REDISPATCH_GRACE_MS", "3600000");
    options.services = vec![Service::Scheduler];
    let mut stack = Stack::spawn(options).await?;
    for k in 1..args.schedulers {
        stack
            .add(Service::Scheduler, &format!("scheduler-{k}"))
            .await;
    }
    let now = Utc::now();
    let mut fire_at = now
        .with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .context("minute")?
        + TimeDelta::minutes(1);
    if fire_at - now < TimeDelta::seconds(10) {
        fire_at += TimeDelta::minutes(1);
    }
    sqlx::query(
        "INSERT INTO schedules (id, owner, name, cron, timezone, instruction, piece, overlap,
                                missed, next_fire_at)
         SELECT gen_random_uuid(), 'bench', 'bench ' || n, '* * * * *', 'UTC',
                'scheduled bench task ' || n, 'chat', 'allow', 'skip', $2
           FROM generate_series(1, $1) AS n",
    )
    .bind(args.schedules)
    .bind(fire_at)
    .execute(&stack.db.pool)
    .await?;
    // The schedulers computed their sleep before these rows existed: wake them.
    let nats = stack.nats.client().await?;
    nats.publish(format!("{}.schedules.wake", stack.prefix), "".into())
        .await?;
    nats.flush().await?;
    println!(
        "{} schedules due at {fire_at}, {} schedulers, batches of {}",
        args.schedules, args.schedulers, args.batch
    );
    let commits_before = commits(&stack).await?;
    let wait = (fire_at - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait).await;
    let fired_from = Instant::now();
    let deadline = fired_from + Duration::from_secs(600);
    let (first, last) = loop {
        let (count, first, last): (i64, Option<DateTime<Utc>>, Option<DateTime<Utc>>) =
            sqlx::query_as(
                "SELECT count(*), min(created_at), max(created_at) FROM tasks
                  WHERE schedule_id IS NOT NULL",
            )
            .fetch_one(&stack.db.pool)
            .await?;
        if count >= args.schedules {
            break (first, last);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {count} tasks after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let observed = fired_from.elapsed();
    let commits = commits(&stack).await? - commits_before;
    let (first, last) = (first.context("a task")?, last.context("a task")?);
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM schedule_runs")
        .fetch_one(&stack.db.pool)
        .await?;
    let span = (last - fire_at).to_std().unwrap_or_default();
    println!(
        "tasks:                 {} ({runs} runs recorded)",
        args.schedules
    );
    println!(
        "first task:            {:.1} ms after the fire time",
        (first - fire_at).num_microseconds().unwrap_or(0) as f64 / 1000.0
    );
    println!(
        "last task:             {:.2} s after the fire time (transaction start); seen after {:.2} s",
        span.as_secs_f64(),
        observed.as_secs_f64()
    );
    println!(
        "fired:                 {:.0} schedules/s",
        args.schedules as f64 / observed.as_secs_f64().max(1e-9)
    );
    println!(
        "commits:               {commits} ({:.3} per schedule)",
        commits as f64 / args.schedules as f64
    );
    Ok(())
}

async fn commits(stack: &Stack) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&stack.db.pool)
    .await?)
}
