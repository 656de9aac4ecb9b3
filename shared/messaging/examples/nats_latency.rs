//! Round-trip latencies of the NATS operations the job path uses: a JetStream publish awaited
//! until stored, and a core request/reply.
//!
//! `cargo run --release -p maestro-messaging --example nats_latency -- nats://127.0.0.1:4222`

use std::time::{Duration, Instant};

use futures::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned());
    let client = async_nats::connect(&url).await?;
    let js = async_nats::jetstream::new(client.clone());
    let stream = "LATENCY_PROBE";
    let _ = js.delete_stream(stream).await;
    js.create_stream(async_nats::jetstream::stream::Config {
        name: stream.to_owned(),
        subjects: vec!["latency.probe".to_owned()],
        ..Default::default()
    })
    .await?;
    let mut samples = Vec::new();
    for i in 0..500 {
        let started = Instant::now();
        js.publish("latency.probe", format!("{i}").into())
            .await?
            .await?;
        samples.push(started.elapsed());
    }
    report("jetstream publish + ack", &mut samples);

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
    let mut samples = Vec::new();
    for _ in 0..500 {
        let started = Instant::now();
        client.request("latency.echo", "ping".into()).await?;
        samples.push(started.elapsed());
    }
    report("core request/reply", &mut samples);
    js.delete_stream(stream).await?;
    Ok(())
}

fn report(what: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |p: f64| {
        samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)].as_secs_f64() * 1e3
    };
    println!("{what}: p50 {:.3} ms, p99 {:.3} ms", at(0.5), at(0.99));
}
