//! `maestro-bench compare [--jobs N] [--levels C,C,…] [--peers dbos,langgraph,restate]`:
//! MAESTRO next to the systems a user could pick instead, on this machine in one sitting. The
//! peers (`tools/bench/peers/`: DBOS, LangGraph with its Postgres checkpointer, Restate, and
//! Temporal on request) are installed at pinned versions outside the clone
//! (`compare.py install`, into `$MAESTRO_PEERS_DIR` or `/var/tmp/maestro-peers`), they share one
//! instant OpenAI-compatible server (`instant_llm.py`), and each runs the same job shape — LLM
//! call asking for a tool, the tool, LLM call that finishes, every step durable — N jobs at
//! concurrency 1 and at each level, one system at a time. MAESTRO runs it through its five
//! services with its own scripted LLM (as instant). CPU is that of every process on the
//! machine during the measured run, per job. The table shows each system at concurrency 1 and
//! at its best level, under Postgres's commit rates timed before the runs and after them.
//! `--peers ''` runs MAESTRO alone.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use serde::Deserialize;

use crate::reference::Bench;

pub struct Args {
    pub jobs: usize,
    pub levels: Vec<usize>,
    pub peers: Vec<String>,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args {
        jobs: 1000,
        levels: vec![8, 64],
        peers: ["dbos", "langgraph", "restate"].map(str::to_owned).to_vec(),
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--jobs" => args.jobs = value.parse()?,
            "--levels" => {
                args.levels = value.split(',').map(str::parse).collect::<Result<_, _>>()?
            }
            // `--peers ''`: MAESTRO alone.
            "--peers" => {
                args.peers = value
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect()
            }
            other => anyhow::bail!(
                "unknown flag {other}; flags: --jobs N --levels C,C --peers dbos,langgraph,restate,temporal"
            ),
        }
    }
    anyhow::ensure!(args.jobs >= 1, "--jobs ≥ 1");
    Ok(args)
}

/// One system at one concurrency, as `compare.py run` prints it.
#[derive(Debug, Clone, Deserialize)]
struct Row {
    system: String,
    concurrency: usize,
    jobs_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_ms_per_job: f64,
}

/// The peer harnesses and scripts, in the source tree.
pub fn peers_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/peers"))
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let dir = peers_dir();
    let script = dir.join("compare.py");
    eprintln!("installing the peers (pinned; once)");
    let installed = tokio::process::Command::new("python3")
        .arg(&script)
        .arg("install")
        .status()
        .await?;
    anyhow::ensure!(installed.success(), "installing the peers failed");

    let port = free_port()?;
    let mut llm = tokio::process::Command::new("python3")
        .arg(dir.join("instant_llm.py"))
        .arg(port.to_string())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    wait_for_port(port).await?;
    let llm_url = format!("http://127.0.0.1:{port}/v1");

    quiet_machine().await?;
    let before = commit_rates().await?;
    eprintln!("before the runs: {before}");
    let levels: Vec<usize> = std::iter::once(1).chain(args.levels.clone()).collect();
    let mut rows = Vec::new();
    {
        let bench = Bench::start().await?;
        for &c in &levels {
            bench.jobs(100.min(args.jobs), c).await?;
            let figures = bench.measure(args.jobs, c).await?;
            let row = Row {
                system: "maestro".to_owned(),
                concurrency: c,
                jobs_per_s: figures.jobs_per_s(),
                p50_ms: figures.pct(0.5),
                p99_ms: figures.pct(0.99),
                cpu_ms_per_job: figures.per_job(figures.cpu_ms),
            };
            eprintln!("{row:?}");
            rows.push(row);
        }
    }
    for peer in &args.peers {
        for &c in &levels {
            let row = peer_run(&script, peer, &llm_url, args.jobs, c).await?;
            eprintln!("{row:?}");
            rows.push(row);
        }
    }
    llm.kill().await.ok();
    // The VM's speed can drift over the minutes the runs take (and the systems run one after
    // another): the same figure after them says by how much.
    let after = commit_rates().await?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "\nthis machine: {cores} cores; Postgres one-row commits before the runs {before}; after \
         them {after}"
    );
    print(&rows);
    verdict(&rows);
    Ok(())
}

/// How fast this machine's Postgres commits, so a run's figures can be set beside another
/// machine's (and the runs' start beside their end): one-row inserts, each its own
/// transaction, from one client and from eight, 2 s each, in a scratch database.
async fn commit_rates() -> anyhow::Result<CommitRates> {
    let db = maestro_testkit::TestDb::create().await?;
    sqlx::query("CREATE TABLE commit_rate (x integer)")
        .execute(&db.pool)
        .await?;
    let url = db.url.clone();
    let rate = |clients: usize| {
        let url = url.clone();
        async move {
            let window = Duration::from_secs(2);
            let mut runs = Vec::with_capacity(clients);
            for _ in 0..clients {
                let url = url.clone();
                runs.push(tokio::spawn(async move {
                    use sqlx::Connection as _;
                    let mut conn = sqlx::PgConnection::connect(&url).await?;
                    let start = std::time::Instant::now();
                    let mut commits = 0u64;
                    while start.elapsed() < window {
                        sqlx::query("INSERT INTO commit_rate VALUES (1)")
                            .execute(&mut conn)
                            .await?;
                        commits += 1;
                    }
                    anyhow::Ok(commits)
                }));
            }
            let mut commits = 0;
            for run in runs {
                commits += run.await??;
            }
            anyhow::Ok(commits as f64 / window.as_secs_f64())
        }
    };
    Ok(CommitRates {
        one: rate(1).await?,
        eight: rate(8).await?,
    })
}

/// One-row commits per second from one client and from eight.
struct CommitRates {
    one: f64,
    eight: f64,
}

impl std::fmt::Display for CommitRates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0}/s from one client ({:.2} ms each), {:.0}/s from eight",
            self.one,
            1000.0 / self.one,
            self.eight
        )
    }
}

/// MAESTRO against each peer on the two figures: throughput at each system's best
/// level, and p50 at concurrency 1.
fn verdict(rows: &[Row]) {
    let best = |system: &str| {
        rows.iter()
            .filter(|r| r.system == system)
            .max_by(|a, b| a.jobs_per_s.total_cmp(&b.jobs_per_s))
    };
    let single = |system: &str| {
        rows.iter()
            .find(|r| r.system == system && r.concurrency == 1)
    };
    let (Some(ours), Some(our_single)) = (best("maestro"), single("maestro")) else {
        return;
    };
    let mut peers: Vec<&str> = rows
        .iter()
        .map(|r| r.system.as_str())
        .filter(|s| *s != "maestro")
        .collect();
    peers.dedup();
    let mut ahead = true;
    println!();
    for peer in peers {
        let (Some(theirs), Some(their_single)) = (best(peer), single(peer)) else {
            continue;
        };
        let throughput = ours.jobs_per_s / theirs.jobs_per_s;
        let p50 = our_single.p50_ms / their_single.p50_ms;
        ahead &= throughput > 1.0 && p50 < 1.0;
        println!(
            "MAESTRO against {peer}: {throughput:.2}x its best throughput, {p50:.2}x its p50 at concurrency 1"
        );
    }
    println!(
        "MAESTRO ahead of every peer on both: {}",
        if ahead { "yes" } else { "no" }
    );
}

/// Run one peer at one concurrency through `compare.py run`; its last stdout line is the row.
async fn peer_run(
    script: &std::path::Path,
    peer: &str,
    llm: &str,
    jobs: usize,
    concurrency: usize,
) -> anyhow::Result<Row> {
    let output = tokio::process::Command::new("python3")
        .arg(script)
        .args(["run", "--system", peer, "--llm", llm])
        .args(["--jobs", &jobs.to_string()])
        .args(["--concurrency", &concurrency.to_string()])
        .args([
            "--db-url",
            &format!("postgresql://postgres@127.0.0.1:5432/maestro_peer_{peer}"),
        ])
        .stderr(Stdio::inherit())
        .output()
        .await?;
    anyhow::ensure!(
        output.status.success(),
        "{peer} at concurrency {concurrency} failed"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().context("the peer printed nothing")?;
    serde_json::from_str(line).with_context(|| format!("{peer} printed {line:?}"))
}

fn print(rows: &[Row]) {
    println!();
    println!(
        "| system | concurrency 1: jobs/s, p50, p99, CPU/job | best: concurrency, jobs/s, p50, p99, CPU/job |"
    );
    println!("|---|---|---|");
    let mut systems: Vec<&str> = rows.iter().map(|r| r.system.as_str()).collect();
    systems.dedup();
    for system in systems {
        let of: Vec<&Row> = rows.iter().filter(|r| r.system == system).collect();
        let single = of.iter().find(|r| r.concurrency == 1);
        let best = of
            .iter()
            .max_by(|a, b| a.jobs_per_s.total_cmp(&b.jobs_per_s));
        let cell = |r: Option<&&Row>, with_c: bool| match r {
            Some(r) => format!(
                "{}{:.0} jobs/s, {:.1} ms, {:.1} ms, {:.2} ms",
                if with_c {
                    format!("c={}, ", r.concurrency)
                } else {
                    String::new()
                },
                r.jobs_per_s,
                r.p50_ms,
                r.p99_ms,
                r.cpu_ms_per_job
            ),
            None => "—".to_owned(),
        };
        println!(
            "| {system} | {} | {} |",
            cell(single, false),
            cell(best, true)
        );
    }
}

/// CPU per job counts every process on the machine: say so when something else is busy (a
/// build, another benchmark) before the figures are taken.
async fn quiet_machine() -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let before = crate::reference::cpu_busy_ms()?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let busy = (crate::reference::cpu_busy_ms()? - before) as f64 / (2000.0 * cores);
    if busy > 0.1 {
        eprintln!(
            "warning: the machine was {:.0} % busy before the runs; throughput and CPU per job \
             will be off (stop other work and run again)",
            busy * 100.0
        );
    }
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

async fn wait_for_port(port: u16) -> anyhow::Result<()> {
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("the instant LLM did not listen on {port}")
}
