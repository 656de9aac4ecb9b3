//! `maestro-bench`: runs N agent jobs (LLM call → tool call → LLM call → finish) through the
//! whole stack — the five services as processes, a Postgres database and a nats-server of its
//! own, the scripted LLM answering at once — and prints throughput, end-to-end latency
//! (request sent → `succeeded` event received on NATS) and Postgres commits per job.
//!
//! `cargo build --release --workspace --bins && target/release/maestro-bench [--jobs N] [--concurrency C] [--cluster N] [--workers N] [--chunks N]`
//! (`--cluster 3`: the same load on one nats-server and on a 3-node JetStream cluster, R3;
//! `--chunks N`: the first reply streamed as N deltas)
//!
//! `maestro-bench tools [--calls N]` measures tool-call round trips instead (see `tools.rs`),
//! `maestro-bench sse [--clients N] [--parse-all]` token-to-client latency and the gateway's
//! cost (`sse.rs`), `maestro-bench sse-floor [--clients N]` the same fan-out by a bare server
//! (`sse_floor.rs`),
//! `maestro-bench iterations [--jobs N] [--turns T] [--upstream URL] [--background BYTES]`: the
//! worker's own overhead per LLM iteration and the prompt-cache reuse after movement
//! transitions (`iterations.rs`), `maestro-bench subtasks [--tasks N] [--fanout K]` what
//! delegating to K subtasks costs end to end and at the join (`subtasks.rs`), `maestro-bench
//! latency [--database URL] [--nats URL]` the round trips under every hop (`latency.rs`),
//! `maestro-bench continue [--tasks N] [--turns T] [--upstream URL] [--background BYTES]` the
//! prompt cache a same-piece Continue keeps (`continues.rs`), `maestro-bench a2a [--tasks N]
//! [--concurrency C] [--chunks N]` A2A's send→completed latency and stream events/s next to the
//! REST API's (`a2a.rs`), `maestro-bench schedules [--schedules N] [--schedulers K] [--batch B]`
//! how fast N schedules due at the same minute are fired (`schedules.rs`), `maestro-bench
//! signals [--rounds N]` how fast a comment and a cancel reach a running job (`signals.rs`),
//! `maestro-bench timeline [--jobs N]` every hop and statement of one job (`timeline.rs`),
//! `maestro-bench compare` MAESTRO next to its peers in one sitting (`compare.rs`),
//! `maestro-bench floor [--jobs N] [--concurrency C] [--rounds R] [--keep S,…]` MAESTRO next to the least
//! code that carries the reference job along the same hops with the same statements
//! (`floor.rs`).

mod a2a;
mod compare;
mod continues;
mod curve;
mod floor;
mod iterations;
mod latency;
mod reference;
mod schedules;
mod signals;
mod sse;
mod sse_floor;
mod subtasks;
mod timeline;
mod tools;

/// What `maestro-bench --help` prints (the module's doc above says what each measures).
const USAGE: &str = "\
usage: maestro-bench [--jobs N] [--concurrency C] [--cluster N] [--workers N] [--chunks N]   the reference job
       maestro-bench sse [--clients N] [--parse-all]
       maestro-bench sse-floor [--clients N]
       maestro-bench tools [--calls N]
       maestro-bench subtasks [--tasks N] [--fanout K]
       maestro-bench latency [--database URL] [--nats URL]
       maestro-bench a2a [--tasks N] [--concurrency C] [--chunks N]
       maestro-bench continue [--tasks N] [--turns T] [--upstream URL] [--background BYTES]
       maestro-bench signals [--rounds N]
       maestro-bench schedules [--schedules N] [--schedulers K] [--batch B]
       maestro-bench iterations [--jobs N] [--turns T] [--upstream URL] [--background BYTES]
       maestro-bench timeline [--jobs N]
       maestro-bench compare [--jobs N] [--levels 8,64] [--peers dbos,langgraph,restate,temporal | '']
       maestro-bench curve [--jobs N] [--backlog B] [--out DIR]
       maestro-bench floor [--jobs N] [--concurrency C] [--rounds R] [--keep worker,tool-runner,...]
Each starts its own Postgres database, nats-server and services from the release binaries
beside it (MAESTRO_BIN_DIR overrides where); docs/performance.md explains the figures.";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let sub = std::env::args().nth(1);
    let rest = || std::env::args().skip(2);
    let flag = |name: &str, default: usize| {
        std::env::args()
            .skip_while(|a| a != name)
            .nth(1)
            .map_or(Ok(default), |n| n.parse())
    };
    match sub.as_deref() {
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some("sse") => {
            let parse_all = rest().any(|a| a == "--parse-all");
            sse::run(flag("--clients", 1000)?, parse_all).await
        }
        Some("sse-floor") => sse_floor::run(flag("--clients", 1000)?).await,
        Some("tools") => tools::run(flag("--calls", 1000)?).await,
        Some("subtasks") => subtasks::run(subtasks::parse(rest())?).await,
        Some("latency") => latency::run(latency::parse(rest())?).await,
        Some("a2a") => a2a::run(a2a::parse(rest())?).await,
        Some("continue") => continues::run(continues::parse(rest())?).await,
        Some("signals") => signals::run(signals::parse(rest())?).await,
        Some("schedules") => schedules::run(schedules::parse(rest())?).await,
        Some("iterations") => iterations::run(iterations::parse(rest())?).await,
        Some("timeline") => timeline::run(timeline::parse(rest())?).await,
        Some("compare") => compare::run(compare::parse(rest())?).await,
        Some("curve") => curve::run(curve::parse(rest())?).await,
        Some("floor") => floor::run(floor::parse(rest())?).await,
        Some("floor-role") => floor::role(&rest().next().unwrap_or_default()).await,
        _ => reference::run(reference::parse(std::env::args().skip(1))?).await,
    }
}
