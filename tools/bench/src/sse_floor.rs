//! `maestro-bench sse-floor [--clients N]`: the floor under `maestro-bench sse` on this
//! machine. A bare fan-out server — no HTTP framework, no NATS, no gateway: raw TCP sockets
//! on loopback, a response head written once, then an SSE event of a real delta's size every
//! 10 ms (400 of them, each stamped with the time its fan-out began) — writes to N clients
//! that read exactly as `maestro-bench sse`'s followers do ([`crate::sse::drain`]), in this
//! process, on the same two cores, as the bench's clients share them with the gateway.
//!
//! Two servers, one after the other, each on a runtime of two worker threads of its own (as
//! the gateway's): `one writer` writes each event to every socket in turn from one task (no
//! wake-ups: the least any fan-out can do), `a task per client` hands each event to one task
//! per connection through a broadcast channel (the gateway's shape). What the latencies are
//! under these is what the machine, not MAESTRO, costs a token's way to 1,000 clients.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::sse::{CHUNKS, Sample, drain, micros_now, own_cpu_ms, percentiles};

const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n";

/// How the server hands each event to its clients.
#[derive(Debug, Clone, Copy)]
enum Fanout {
    OneWriter,
    TaskPerClient,
}

pub async fn run(clients: usize) -> anyhow::Result<()> {
    println!(
        "{clients} clients on loopback, {CHUNKS} events 10 ms apart; the clients scan their bytes as `maestro-bench sse`'s followers do"
    );
    for fanout in [Fanout::OneWriter, Fanout::TaskPerClient] {
        once(clients, fanout).await?;
    }
    Ok(())
}

async fn once(clients: usize, fanout: Fanout) -> anyhow::Result<()> {
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let listener = {
        let _server = server.enter();
        TcpListener::from_std(listener)?
    };
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let serving = server.spawn(serve(listener, clients, fanout, ready_rx));
    let mut readers = Vec::with_capacity(clients);
    for _ in 0..clients {
        let mut socket = TcpStream::connect(addr).await?;
        socket.set_nodelay(true)?;
        let mut head = vec![0u8; HEAD.len()];
        socket.read_exact(&mut head).await?;
        anyhow::ensure!(head == HEAD, "an unexpected head");
        readers.push(tokio::spawn(drain(socket)));
    }
    let cpu_before = own_cpu_ms();
    let machine_before = crate::reference::cpu_busy_ms()?;
    let started = Instant::now();
    let _ = ready_tx.send(());
    let mut everyone: Vec<Sample> = Vec::with_capacity(clients * CHUNKS);
    for reader in readers {
        everyone.extend(reader.await?);
    }
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    let cpu_ms = (own_cpu_ms() - cpu_before) as f64;
    let machine_ms = (crate::reference::cpu_busy_ms()? - machine_before) as f64;
    serving.await??;
    server.shutdown_background();
    anyhow::ensure!(
        everyone.len() == clients * CHUNKS,
        "{} of {} events arrived",
        everyone.len(),
        clients * CHUNKS
    );
    let [p50, p99, max] = percentiles(everyone.iter().map(|s| s.latency).collect());
    let mut by_event: std::collections::HashMap<u64, (u64, u64)> = Default::default();
    for s in &everyone {
        let (first, last) = by_event.entry(s.sent).or_insert((u64::MAX, 0));
        *first = (*first).min(s.latency);
        *last = (*last).max(s.latency);
    }
    let [first50, _, _] = percentiles(by_event.values().map(|d| d.0).collect());
    let [last50, last99, _] = percentiles(by_event.values().map(|d| d.1).collect());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let name = match fanout {
        Fanout::OneWriter => "one writer",
        Fanout::TaskPerClient => "a task per client",
    };
    println!(
        "{name}: event → client p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms; per event its first client after {first50:.2} ms (p50), its last after {last50:.2} ms (p50), {last99:.2} ms (p99); CPU per event {:.2} ms (server and clients), all cores {:.0} % busy",
        cpu_ms / CHUNKS as f64,
        machine_ms / (elapsed_ms * cores) * 100.0
    );
    Ok(())
}

/// Accept `clients` connections, write each the head, wait for `start`, then fan out the
/// events and the job's end.
async fn serve(
    listener: TcpListener,
    clients: usize,
    fanout: Fanout,
    start: tokio::sync::oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let mut sockets = Vec::with_capacity(clients);
    while sockets.len() < clients {
        let (mut socket, _) = listener.accept().await?;
        socket.set_nodelay(true)?;
        socket.write_all(HEAD).await?;
        sockets.push(socket);
    }
    let _ = start.await;
    let mut ticks = tokio::time::interval(Duration::from_millis(10));
    ticks.tick().await;
    match fanout {
        Fanout::OneWriter => {
            for _ in 0..CHUNKS {
                ticks.tick().await;
                let event = delta(micros_now());
                for socket in &mut sockets {
                    socket.write_all(&event).await?;
                }
            }
            for socket in &mut sockets {
                socket.write_all(END).await?;
            }
        }
        Fanout::TaskPerClient => {
            let (events, _) = tokio::sync::broadcast::channel::<Arc<Vec<u8>>>(CHUNKS + 1);
            let mut writers = Vec::with_capacity(clients);
            for mut socket in sockets {
                let mut events = events.subscribe();
                writers.push(tokio::spawn(async move {
                    while let Ok(event) = events.recv().await {
                        socket.write_all(&event).await?;
                    }
                    anyhow::Ok(())
                }));
            }
            for _ in 0..CHUNKS {
                ticks.tick().await;
                let _ = events.send(Arc::new(delta(micros_now())));
            }
            let _ = events.send(Arc::new(END.to_vec()));
            drop(events);
            for writer in writers {
                writer.await??;
            }
        }
    }
    Ok(())
}

/// The job's end, as the followers look for it.
const END: &[u8] = b"event: job_state\ndata: {\"payload\":{\"status\":\"succeeded\"}}\n\n";

/// A text delta event the size of the gateway's, stamped with `sent` (µs since the epoch).
fn delta(sent: u64) -> Vec<u8> {
    format!(
        "id: 4.{sent}\nevent: delta\ndata: {{\"id\":\"4.2\",\"task_id\":\"01a24977-53b3-70fa-9c7f-2807f76e429f\",\"job_id\":\"01a24977-53b3-70fa-9c7f-2807f76e42a0\",\"type\":\"text\",\"text\":\"{sent} \"}}\n\n"
    )
    .into_bytes()
}
