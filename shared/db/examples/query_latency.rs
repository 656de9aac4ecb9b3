//! Round-trip latency of small queries through the pool, the way services issue them.
//!
//! `cargo run --release -p maestro-db --example query_latency -- postgres://postgres@127.0.0.1/postgres`

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1/postgres".to_owned());
    let pool = maestro_db::connect(&url, 4).await?;
    let mut samples = Vec::new();
    for _ in 0..2000 {
        let started = Instant::now();
        let _: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await?;
        samples.push(started.elapsed());
    }
    report("pool SELECT 1", &mut samples);
    let mut conn = pool.acquire().await?;
    let mut samples = Vec::new();
    for _ in 0..2000 {
        let started = Instant::now();
        let _: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&mut *conn).await?;
        samples.push(started.elapsed());
    }
    report("one connection SELECT 1", &mut samples);
    Ok(())
}

fn report(what: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |p: f64| {
        samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)].as_secs_f64() * 1e3
    };
    println!("{what}: p50 {:.3} ms, p99 {:.3} ms", at(0.5), at(0.99));
}
