//! `maestro-bench latency [--database URL] [--nats URL]`: the floor under every hop of the job
//! path, measured in a tight loop — a pooled and a single-connection `SELECT 1`, a JetStream
//! publish awaited until stored, and a core NATS request/reply.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;

pub struct Args {
    database: String,
    nats: String,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args {
        database: "postgres://postgres@127.0.0.1/postgres".to_owned(),
        nats: "nats://127.0.0.1:4222".to_owned(),
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--database" => args.database = value,
            "--nats" => args.nats = value,
            other => anyhow::bail!("unknown flag {other}; flags: --database URL --nats URL"),
        }
    }
    Ok(args)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    postgres(&args.database).await?;
    nats(&args.nats).await
}

/// Time `n` runs of `once`, and print p50 and p99.
async fn measure<F, Fut>(what: &str, n: usize, mut once: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut samples: Vec<Duration> = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        once().await?;
        samples.push(started.elapsed());
    }
    samples.sort();
    let at = |p: f64| {
        samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)].as_secs_f64() * 1e3
    };
    println!("{what}: p50 {:.3} ms, p99 {:.3} ms", at(0.5), at(0.99));
    Ok(())
}

async fn postgres(url: &str) -> anyhow::Result<()> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(url)
        .await?;
    measure("pool SELECT 1", 2000, || async {
        let _: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await?;
        Ok(())
    })
    .await?;
    let conn = tokio::sync::Mutex::new(pool.acquire().await?);
    measure("one connection SELECT 1", 2000, || async {
        let mut conn = conn.lock().await;
        let _: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&mut **conn)
            .await?;
        Ok(())
    })
    .await
}

async fn nats(url: &str) -> anyhow::Result<()> {
    let client = async_nats::connect(url).await?;
    let js = async_nats::jetstream::new(client.clone());
    let stream = "LATENCY_PROBE";
    let _ = js.delete_stream(stream).await;
    js.create_stream(async_nats::jetstream::stream::Config {
        name: stream.to_owned(),
        subjects: vec!["latency.probe".to_owned()],
        ..Default::default()
    })
    .await?;
    measure("jetstream publish + ack", 500, || async {
        js.publish("latency.probe", "x".into()).await?.await?;
        Ok(())
    })
    .await?;
    let mut responder = client.subscribe("latency.echo").await?;
    let echo = client.clone();
    tokio::spawn(async move {
        while let Some(message) = responder.next().await {
            if let Some(reply) = message.reply {
                let _ = echo.publish(reply, message.payload).await;
            }
        }
    });
    client.flush().await?;
    measure("core request/reply", 500, || async {
        client.request("latency.echo", "ping".into()).await?;
        Ok(())
    })
    .await?;
    js.delete_stream(stream).await?;
    pull_delivery(url, &js).await
}

/// A work-queue publish to a waiting pull request (as a job's dispatch reaches a worker),
/// after `idle` without traffic (concurrency 1 leaves every process idle between jobs), from a
/// second connection as the gateway's is.
async fn pull_delivery(url: &str, js: &async_nats::jetstream::Context) -> anyhow::Result<()> {
    use async_nats::jetstream::{consumer, stream};
    let name = "LATENCY_QUEUE";
    let _ = js.delete_stream(name).await;
    let queue = js
        .create_stream(stream::Config {
            name: name.to_owned(),
            subjects: vec!["latency.queue".to_owned()],
            retention: stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await?;
    let consumer = queue
        .create_consumer(consumer::pull::Config {
            durable_name: Some("probe".to_owned()),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await?;
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok(mut batch) = consumer
                .batch()
                .max_messages(32)
                .expires(Duration::from_secs(1))
                .messages()
                .await
            else {
                return;
            };
            while let Some(Ok(message)) = batch.next().await {
                let at = Instant::now();
                let _ = message.ack().await;
                if sent.send(at).is_err() {
                    return;
                }
            }
        }
    });
    let publisher = async_nats::jetstream::new(async_nats::connect(url).await?);
    for idle in [Duration::ZERO, Duration::from_millis(10)] {
        let mut samples = Vec::new();
        for _ in 0..300 {
            tokio::time::sleep(idle).await;
            let started = Instant::now();
            publisher.publish("latency.queue", "x".into()).await?;
            let at = received
                .recv()
                .await
                .ok_or_else(|| anyhow::anyhow!("the pull ended"))?;
            samples.push(at - started);
        }
        samples.sort();
        let at = |p: f64| {
            samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)].as_secs_f64()
                * 1e3
        };
        println!(
            "work-queue publish -> pull delivery, {} ms idle before each: p50 {:.3} ms, p99 {:.3} ms",
            idle.as_millis(),
            at(0.5),
            at(0.99)
        );
    }
    js.delete_stream(name).await?;
    Ok(())
}
