//! `maestro-bench sse [--clients N]`: the latency a token takes from the LLM server to an SSE
//! client (the scripted LLM stamps each chunk with the time it sent it), and what the
//! gateway spends (memory, CPU) with N clients following one streaming job.

use std::time::{Duration, Instant};

use maestro_testkit::{SseClient, Stack, StackOptions};
use serde_json::json;

const CHUNKS: usize = 400;

pub async fn run(clients: usize) -> anyhow::Result<()> {
    // Everyone connects during the first turn's delay (3 s, and 3 ms more per client).
    let delay_ms = 3000 + 3 * clients;
    let scenario = json!({"scenarios": [{"name": "stamped", "turns": [
        {"delay_ms": delay_ms, "stamp_chunks": CHUNKS, "chunk_delay_ms": 10,
         "tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
    ]}]});
    let options = StackOptions::new(scenario).env("RUST_LOG", "warn");
    let stack = Stack::spawn(options).await?;
    let id = stack.create(&json!({"instruction": "stream"})).await.id();
    let mut followers = Vec::with_capacity(clients.saturating_sub(1));
    for _ in 1..clients {
        let mut client = stack.stream(id, None).await;
        followers.push(tokio::spawn(async move {
            while let Some(item) = client.next(Duration::from_secs(30)).await {
                if item.event == "job_state" && item.data["payload"]["status"] == "succeeded" {
                    break;
                }
            }
        }));
    }
    let gateway = stack.url("");
    let pid = gateway_pid(&stack);
    let (rss_before, cpu_before) = usage(pid);
    let own_before = own_cpu_ms();
    let machine_before = crate::reference::cpu_busy_ms()?;
    let started = Instant::now();
    let mut measured = stack.stream(id, None).await;
    let latencies = measure(&mut measured).await;
    let elapsed = started.elapsed();
    let (rss_during, cpu_after) = usage(pid);
    let own_after = own_cpu_ms();
    let machine_after = crate::reference::cpu_busy_ms()?;
    for follower in followers {
        let _ = follower.await;
    }
    let mut latencies = latencies;
    latencies.sort();
    anyhow::ensure!(!latencies.is_empty(), "no stamped delta arrived");
    let at = |p: f64| {
        latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)] as f64 / 1000.0
    };
    let ticks = sysconf_ticks();
    let cpu = (cpu_after - cpu_before) as f64 / ticks / elapsed.as_secs_f64() * 100.0;
    let elapsed_ms = elapsed.as_secs_f64() * 1000.0;
    let own = (own_after - own_before) as f64 / elapsed_ms * 100.0;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let busy = (machine_after - machine_before) as f64 / (elapsed_ms * cores) * 100.0;
    println!(
        "gateway {gateway}, {clients} SSE clients on one job, {} stamped deltas",
        latencies.len()
    );
    println!(
        "token → SSE client: p50 {:.2} ms, p99 {:.2} ms",
        at(0.5),
        at(0.99)
    );
    println!(
        "gateway memory: {:.1} MiB before the stream, {:.1} MiB with {clients} clients streaming",
        rss_before / 1024.0,
        rss_during / 1024.0
    );
    println!("gateway CPU while streaming: {cpu:.0} % of one core");
    // The clients are this process: what it spends parsing every stream, on the same cores, is
    // in the latencies above.
    println!(
        "this bench (the {clients} clients) while streaming: {own:.0} % of one core; all cores {busy:.0} % busy"
    );
    Ok(())
}

/// Latency in µs of every stamped text delta, until the job succeeds.
async fn measure(client: &mut SseClient) -> Vec<u64> {
    let mut latencies = Vec::new();
    while let Some(item) = client.next(Duration::from_secs(30)).await {
        if item.event == "delta" && item.data["type"] == "text" {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as u64)
                .unwrap_or(0);
            if let Some(sent) = item.data["text"]
                .as_str()
                .and_then(|t| t.trim().parse::<u64>().ok())
            {
                latencies.push(now.saturating_sub(sent));
            }
        }
        if item.event == "job_state" && item.data["payload"]["status"] == "succeeded" {
            break;
        }
    }
    latencies
}

/// CPU time (ms) this process — the clients — has used so far.
fn own_cpu_ms() -> i64 {
    crate::reference::process_cpu("/proc/self/stat".as_ref()).map_or(0, |(_, ms)| ms)
}

fn gateway_pid(stack: &Stack) -> u32 {
    stack.pid("api-gateway").unwrap_or(0)
}

/// `(resident KiB, utime + stime in clock ticks)` of a process.
fn usage(pid: u32) -> (f64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = fields
        .get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
    (rss, ticks)
}

fn sysconf_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}
