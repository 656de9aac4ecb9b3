//! `maestro-bench sse [--clients N] [--parse-all]`: the latency a token takes from the LLM
//! server to an SSE client (the scripted LLM stamps each chunk with the time it sent it), and
//! what the gateway spends (memory, CPU) with N clients following one streaming job.
//!
//! Every client measures each stamped delta it gets; the figures are given over all of them
//! and for the last client to connect alone (the last the gateway serves; 2026-12-04's and
//! earlier figures were this one's). That one parses every event as a real client would; the
//! other N − 1 only look for the stamps and the job's end in the bytes they read (no JSON
//! parsing), so the bench, which shares the two cores with the gateway, costs less of them
//! (`--parse-all`: they parse every event too).

use std::time::{Duration, Instant};

use maestro_testkit::{SseClient, Stack, StackOptions};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

pub(crate) const CHUNKS: usize = 400;

pub async fn run(clients: usize, parse_all: bool) -> anyhow::Result<()> {
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
    let path = format!("/api/local/tasks/{id}/stream");
    for _ in 1..clients {
        followers.push(if parse_all {
            let mut client = stack.stream(id, None).await;
            tokio::spawn(async move { measure(&mut client, None).await })
        } else {
            let socket = drain_open(&stack, &path).await?;
            tokio::spawn(drain(socket))
        });
    }
    let gateway = stack.url("");
    let pid = gateway_pid(&stack);
    let rss_before = usage(pid).0;
    // The figures while streaming: from the first stamped delta to the job's end.
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let mut measured = stack.stream(id, None).await;
    let measured = tokio::spawn(async move { measure(&mut measured, Some(first_tx)).await });
    first_rx.await?;
    let (_, cpu_before) = usage(pid);
    let own_before = own_cpu_ms();
    let machine_before = crate::reference::cpu_busy_ms()?;
    let started = Instant::now();
    let last = measured.await?;
    let elapsed = started.elapsed();
    let (rss_during, cpu_after) = usage(pid);
    let own_after = own_cpu_ms();
    let machine_after = crate::reference::cpu_busy_ms()?;
    anyhow::ensure!(!last.is_empty(), "no stamped delta arrived");
    let mut everyone = last.clone();
    for follower in followers {
        everyone.extend(follower.await?);
    }
    let deltas = last.len();
    let elapsed_ms = elapsed.as_secs_f64() * 1000.0;
    let gateway_ms = (cpu_after - cpu_before) as f64 * 1000.0 / sysconf_ticks();
    let own_ms = (own_after - own_before) as f64;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let busy = (machine_after - machine_before) as f64 / (elapsed_ms * cores) * 100.0;
    let followers = if parse_all {
        "every client parses every event"
    } else {
        "one client parses, the others scan their bytes"
    };
    println!(
        "gateway {gateway}, {clients} SSE clients on one job ({followers}), {deltas} stamped deltas"
    );
    let [p50, p99, max] = percentiles(everyone.iter().map(|s| s.latency).collect());
    println!(
        "token → SSE client, all {clients} clients ({} deltas received): p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms",
        everyone.len()
    );
    let [p50, p99, max] = percentiles(last.iter().map(|s| s.latency).collect());
    println!(
        "token → SSE client, the last to connect: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms"
    );
    // Per delta: when its first and its last client had it (how long the fan-out took).
    let mut by_delta: std::collections::HashMap<u64, (u64, u64)> = Default::default();
    for s in &everyone {
        let (first, last) = by_delta.entry(s.sent).or_insert((u64::MAX, 0));
        *first = (*first).min(s.latency);
        *last = (*last).max(s.latency);
    }
    let [first50, _, _] = percentiles(by_delta.values().map(|d| d.0).collect());
    let [last50, last99, _] = percentiles(by_delta.values().map(|d| d.1).collect());
    println!(
        "per delta: its first client had it after {first50:.2} ms (p50), its last after {last50:.2} ms (p50), {last99:.2} ms (p99)"
    );
    println!(
        "gateway memory: {:.1} MiB before the stream, {:.1} MiB with {clients} clients streaming",
        rss_before / 1024.0,
        rss_during / 1024.0
    );
    // The clients are this process: what it spends reading the streams, on the same cores, is
    // in the latencies above.
    println!(
        "CPU while streaming, per delta: gateway {:.2} ms ({:.0} % of a core), this bench (the clients) {:.2} ms ({:.0} %); all cores {busy:.0} % busy",
        gateway_ms / deltas as f64,
        gateway_ms / elapsed_ms * 100.0,
        own_ms / deltas as f64,
        own_ms / elapsed_ms * 100.0,
    );
    Ok(())
}

/// One stamped text delta a client received: when the LLM server sent it (µs since the epoch)
/// and how long it took to reach the client (µs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) sent: u64,
    pub(crate) latency: u64,
}

impl Sample {
    fn of(sent: u64) -> Self {
        Self {
            sent,
            latency: micros_now().saturating_sub(sent),
        }
    }
}

/// A follower's stream, opened by hand over HTTP/1.1 (its response head checked), to be read
/// by [`drain`].
async fn drain_open(stack: &Stack, path: &str) -> anyhow::Result<tokio::net::TcpStream> {
    let base = stack.url("");
    let host = base.trim_start_matches("http://").trim_end_matches('/');
    let mut socket = tokio::net::TcpStream::connect(host).await?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {}\r\n\
         accept: text/event-stream\r\n\r\n",
        stack.token
    );
    socket.write_all(request.as_bytes()).await?;
    let mut head = [0u8; 12];
    socket.read_exact(&mut head).await?;
    anyhow::ensure!(
        head.starts_with(b"HTTP/1.1 200"),
        "a follower's stream answered {:?}",
        String::from_utf8_lossy(&head)
    );
    Ok(socket)
}

/// Read a stream, noting each stamped text delta, until the job succeeds. Only what that
/// needs is looked at: each SSE event (the text between blank lines) is searched for its kind
/// and the stamp; nothing is parsed as JSON.
pub(crate) async fn drain(mut socket: tokio::net::TcpStream) -> Vec<Sample> {
    let mut latencies = Vec::with_capacity(CHUNKS);
    let mut buffer = Vec::with_capacity(16 * 1024);
    let mut read = vec![0u8; 16 * 1024];
    while let Ok(n) = socket.read(&mut read).await {
        if n == 0 {
            break;
        }
        buffer.extend_from_slice(&read[..n]);
        let mut start = 0;
        while let Some(end) = find(&buffer[start..], b"\n\n") {
            let event = &buffer[start..start + end];
            start += end + 2;
            if find(event, b"event: delta").is_some() {
                if let Some(sent) = stamp(event) {
                    latencies.push(Sample::of(sent));
                }
            } else if find(event, b"event: job_state").is_some()
                && find(event, b"\"succeeded\"").is_some()
            {
                return latencies;
            }
        }
        buffer.drain(..start);
    }
    latencies
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The send time a stamped text delta carries (`"text":"<µs> "`).
fn stamp(event: &[u8]) -> Option<u64> {
    let at = find(event, b"\"text\":\"")? + 8;
    let digits = event[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    std::str::from_utf8(&event[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

pub(crate) fn micros_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// p50, p99 and the maximum of `latencies` (µs), in ms.
pub(crate) fn percentiles(mut latencies: Vec<u64>) -> [f64; 3] {
    latencies.sort_unstable();
    let at = |p: f64| {
        let i = ((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(i).map_or(0.0, |&l| l as f64 / 1000.0)
    };
    [at(0.5), at(0.99), at(1.0)]
}

/// Every stamped text delta, until the job succeeds; `first` is told when the first arrives.
async fn measure(
    client: &mut SseClient,
    mut first: Option<tokio::sync::oneshot::Sender<()>>,
) -> Vec<Sample> {
    let mut latencies = Vec::with_capacity(CHUNKS);
    while let Some(item) = client.next(Duration::from_secs(30)).await {
        if item.event == "delta" && item.data["type"] == "text" {
            let now = micros_now();
            if let Some(sent) = item.data["text"]
                .as_str()
                .and_then(|t| t.trim().parse::<u64>().ok())
            {
                latencies.push(Sample {
                    sent,
                    latency: now.saturating_sub(sent),
                });
                if let Some(first) = first.take() {
                    let _ = first.send(());
                }
            }
        }
        if item.event == "job_state" && item.data["payload"]["status"] == "succeeded" {
            break;
        }
    }
    latencies
}

/// CPU time (ms) this process — the clients — has used so far.
pub(crate) fn own_cpu_ms() -> i64 {
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
