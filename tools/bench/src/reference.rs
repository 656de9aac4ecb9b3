//! The reference job — LLM call (text + a `list_files` call) → the tool through the
//! tool-runner → LLM call (`complete`) → finish — N times through the whole stack, at most C at
//! a time. Latency is from sending `POST /api/local/tasks` to receiving the job's `succeeded`
//! event on NATS (the outbox relay hop included). Besides throughput and latency: Postgres
//! commits, writing transactions and WAL flushes per job, and the CPU time of every process on
//! the machine per job (`/proc`), so nothing else should run meanwhile.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use maestro_testkit::{Stack, StackOptions};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, oneshot};

pub struct Args {
    pub jobs: usize,
    pub concurrency: usize,
    pub warmup: usize,
    /// Export every service's spans to an OTLP receiver in the bench (`--export-traces`).
    pub export_traces: bool,
    /// `--cluster N`: run the same load on one nats-server and then on an N-node JetStream
    /// cluster (streams with min(N, 3) replicas), and print both.
    pub cluster: Option<usize>,
    /// `--workers N`: this many workers on the one profile (1 by default).
    pub workers: usize,
    /// `--chunks N`: the first reply's text streamed as N one-character deltas, as a real
    /// model streams its tokens (the reference job's own reply is one delta).
    pub chunks: Option<usize>,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args {
        jobs: 2000,
        concurrency: 64,
        warmup: 100,
        export_traces: false,
        cluster: None,
        workers: 1,
        chunks: None,
    };
    while let Some(flag) = it.next() {
        if flag == "--export-traces" {
            args.export_traces = true;
            continue;
        }
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--jobs" => args.jobs = value.parse()?,
            "--concurrency" => args.concurrency = value.parse()?,
            "--warmup" => args.warmup = value.parse()?,
            "--cluster" => args.cluster = Some(value.parse()?),
            "--workers" => args.workers = value.parse()?,
            "--chunks" => args.chunks = Some(value.parse()?),
            other => {
                anyhow::bail!(
                    "unknown flag {other}; flags: --jobs N --concurrency C --warmup N --export-traces --cluster N --workers N --chunks N"
                )
            }
        }
    }
    anyhow::ensure!(
        args.jobs >= 1 && args.concurrency >= 1 && args.workers >= 1,
        "--jobs, --concurrency, --workers ≥ 1"
    );
    Ok(args)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    if let Some(nodes) = args.cluster {
        return side_by_side(&args, nodes).await;
    }
    let receiver = match args.export_traces {
        true => Some(maestro_testkit::OtlpSink::start().await),
        false => None,
    };
    let otlp = receiver.as_ref().map(|r| r.url.as_str());
    let scenario = match args.chunks {
        Some(chunks) => streaming_scenario(chunks),
        None => scenario(),
    };
    let bench = Bench::start_playing(otlp, 1, args.workers, scenario).await?;
    println!("warming up with {} jobs", args.warmup);
    bench.jobs(args.warmup, args.concurrency).await?;
    println!("running {} jobs, {} at a time", args.jobs, args.concurrency);
    let figures = bench.measure(args.jobs, args.concurrency).await?;
    figures.print();
    if let Some(receiver) = &receiver {
        let (exports, bytes) = receiver.received();
        println!(
            "traces exported: {exports} OTLP exports, {:.1} MiB, to the bench's counting receiver",
            bytes as f64 / 1024.0 / 1024.0
        );
    }
    bench.stages(figures.from).await?;
    bench.worker_paths().await;
    Ok(())
}

/// The same load on one nats-server, then on a cluster of `nodes`: each measured after its
/// own warm-up, on a stack of its own.
async fn side_by_side(args: &Args, nodes: usize) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for nodes in [1, nodes] {
        let label = match nodes {
            1 => "one nats-server".to_owned(),
            n => format!("{n}-node JetStream cluster, R{}", n.min(3)),
        };
        println!("== {label}");
        let bench = Bench::start_on(None, nodes).await?;
        bench.jobs(args.warmup, args.concurrency).await?;
        let figures = bench.measure(args.jobs, args.concurrency).await?;
        figures.print();
        rows.push((label, figures));
    }
    println!(
        "\n| NATS ({} jobs, {} at a time) | jobs/s | p50 ms | p99 ms | CPU ms/job |",
        args.jobs, args.concurrency
    );
    println!("|---|---|---|---|---|");
    for (label, f) in &rows {
        println!(
            "| {label} | {:.0} | {:.1} | {:.1} | {:.2} |",
            f.jobs_per_s(),
            f.pct(0.5),
            f.pct(0.99),
            f.per_job(f.cpu_ms)
        );
    }
    Ok(())
}

/// The reference job: LLM call (text + a `list_files` call) → the tool → LLM call (`complete`).
pub fn scenario() -> Value {
    json!({"scenarios": [{
        "name": "reference-job",
        "turns": [
            {"text": "Looking.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "Done.", "tool_calls": [{"name": "complete", "arguments": {"result": "ok"}}]}
        ]
    }]})
}

/// The reference job with its first reply's text streamed in `chunks` one-character deltas.
fn streaming_scenario(chunks: usize) -> Value {
    let mut scenario = scenario();
    let first = &mut scenario["scenarios"][0]["turns"][0];
    first["text"] = Value::from("x".repeat(chunks));
    first["chunk_chars"] = Value::from(1);
    scenario
}

/// Jobs waiting for their end (a `job_state` event: succeeded, failed or cancelled), and ends
/// that came before their waiter.
#[derive(Default)]
struct Board {
    waiting: HashMap<String, oneshot::Sender<End>>,
    finished: HashMap<String, End>,
    /// From each create's request to its answer (`201 Created` read), since the last take.
    answered: Vec<Duration>,
}

/// How a job ended, as its `job_state` event said.
#[derive(Debug, Clone, Copy)]
enum End {
    /// When its `succeeded` event arrived.
    Succeeded(Instant),
    /// Failed or cancelled.
    Unsuccessful,
}

/// A stack running the reference job, and the jobs waiting for their end.
pub struct Bench {
    stack: Stack,
    target: Target,
    /// The workers' instance names.
    workers: Vec<String>,
}

/// The client's side of a run: where jobs are created (`POST` of `{"instruction"}` with a
/// bearer token), how their ends are heard (`<prefix>.events.*.job_state` on NATS), and the
/// database whose commits are counted.
#[derive(Clone)]
pub struct Target {
    http: reqwest::Client,
    tasks_url: String,
    token: String,
    pool: sqlx::PgPool,
    board: Arc<Mutex<Board>>,
}

/// What one measured run showed.
pub struct Figures {
    pub from: chrono::DateTime<chrono::Utc>,
    pub elapsed: Duration,
    /// Sorted.
    pub latencies: Vec<Duration>,
    /// From each create's request to its `201 Created` read; sorted.
    pub answered: Vec<Duration>,
    pub pg: Counters,
    pub cpu_ms: i64,
    /// CPU ms by command name, largest first.
    pub by_process: Vec<(String, i64)>,
}

impl Figures {
    pub fn jobs_per_s(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    /// The `p` quantile of the latencies, in ms.
    pub fn pct(&self, p: f64) -> f64 {
        quantile(&self.latencies, p)
    }

    pub fn per_job(&self, n: i64) -> f64 {
        n as f64 / self.latencies.len() as f64
    }

    pub fn print(&self) {
        println!("jobs:        {}", self.latencies.len());
        println!("elapsed:     {:.2} s", self.elapsed.as_secs_f64());
        println!("throughput:  {:.0} jobs/s", self.jobs_per_s());
        println!(
            "latency:     p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            self.pct(0.5),
            self.pct(0.9),
            self.pct(0.99),
            self.pct(1.0)
        );
        println!(
            "answered:    p50 {:.2} ms, p99 {:.2} ms (create request → 201 read)",
            quantile(&self.answered, 0.5),
            quantile(&self.answered, 0.99)
        );
        println!(
            "commits:     {:.1} per job (pg_stat_database.xact_commit, reads included); \
             {:.1} writing transactions, {:.1} WAL flushes per job",
            self.per_job(self.pg.commits),
            self.per_job(self.pg.writes),
            self.per_job(self.pg.flushes)
        );
        let top: Vec<String> = self
            .by_process
            .iter()
            .take(8)
            .map(|(name, ms)| format!("{name} {:.2}", self.per_job(*ms)))
            .collect();
        println!(
            "cpu:         {:.2} ms per job, all processes on the machine (/proc/stat): {}",
            self.per_job(self.cpu_ms),
            top.join(", ")
        );
    }
}

impl Bench {
    /// The five services, their own database and nats-server, and the scripted LLM.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(None).await
    }

    /// [`Bench::start`], the services exporting their spans to `otlp` when given.
    pub async fn start_with(otlp: Option<&str>) -> anyhow::Result<Self> {
        Self::start_on(otlp, 1).await
    }

    /// [`Bench::start_with`] on a JetStream cluster of `nats_nodes` (one server: 1).
    pub async fn start_on(otlp: Option<&str>, nats_nodes: usize) -> anyhow::Result<Self> {
        Self::start_playing(otlp, nats_nodes, 1, scenario()).await
    }

    /// [`Bench::start_on`] with `workers` workers and the scripted LLM playing `scenario`.
    pub async fn start_playing(
        otlp: Option<&str>,
        nats_nodes: usize,
        workers: usize,
        scenario: Value,
    ) -> anyhow::Result<Self> {
        let mut options = StackOptions::new(scenario)
            .nats_cluster(nats_nodes)
            // `BENCH_RUST_LOG=info TEST_LOG=1` keeps the services' logs.
            .env(
                "RUST_LOG",
                &std::env::var("BENCH_RUST_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .env("WORKER_CONCURRENCY", "256")
            .env("DB_MAX_CONNECTIONS", "16")
            .env("RELAY_POLL_MS", "1000");
        if let Some(url) = otlp {
            options = options.env("OTEL_EXPORTER_OTLP_ENDPOINT", url);
        }
        let mut stack = Stack::spawn(options).await?;
        let mut names = vec!["worker".to_owned()];
        for n in 2..=workers {
            let name = format!("worker-{n}");
            stack
                .start(maestro_testkit::Service::Worker, &name, &[])
                .await?;
            names.push(name);
        }
        let target = Target::listen(
            stack.http.clone(),
            stack.url("/api/local/tasks"),
            stack.token.clone(),
            &stack.nats.client().await?,
            &stack.prefix,
            stack.db.pool.clone(),
        )
        .await?;
        Ok(Self {
            stack,
            target,
            workers: names,
        })
    }

    /// Run `n` jobs, at most `concurrency` in flight, and measure.
    pub async fn measure(&self, n: usize, concurrency: usize) -> anyhow::Result<Figures> {
        self.target.measure(n, concurrency).await
    }

    /// Run `n` jobs, at most `concurrency` in flight; returns each job's latency.
    pub async fn jobs(&self, n: usize, concurrency: usize) -> anyhow::Result<Vec<Duration>> {
        self.target.jobs(n, concurrency).await
    }

    /// Create `n` jobs, at most `creators` requests at a time and without waiting for any job
    /// to end before creating the next, and measure until the last one has succeeded.
    pub async fn backlog(&self, n: usize, creators: usize) -> anyhow::Result<Figures> {
        self.target.backlog(n, creators).await
    }

    /// The client's side of its runs.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// [`Target::stages`].
    pub async fn stages(&self, from: chrono::DateTime<chrono::Utc>) -> anyhow::Result<()> {
        self.target.stages(from).await
    }

    /// Every chat request the scripted LLM has received: `[{scenario, turn, body}]`.
    pub async fn llm_requests(&self) -> anyhow::Result<Vec<Value>> {
        self.stack.llm.requests().await
    }
}

impl Target {
    /// The database whose commits are counted.
    pub fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }

    /// Jobs created at `tasks_url` with `token`, their ends heard on `nats` under `prefix`.
    pub async fn listen(
        http: reqwest::Client,
        tasks_url: String,
        token: String,
        nats: &async_nats::Client,
        prefix: &str,
        pool: sqlx::PgPool,
    ) -> anyhow::Result<Self> {
        let board: Arc<Mutex<Board>> = Arc::default();
        listen_for_ends(nats, prefix, board.clone()).await?;
        Ok(Self {
            http,
            tasks_url,
            token,
            pool,
            board,
        })
    }

    /// Run `n` jobs, at most `concurrency` in flight, and measure.
    pub async fn measure(&self, n: usize, concurrency: usize) -> anyhow::Result<Figures> {
        self.measured(|| self.jobs(n, concurrency)).await
    }

    /// Measure what `work` does; it returns each job's latency.
    async fn measured<F, Fut>(&self, work: F) -> anyhow::Result<Figures>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<Vec<Duration>>>,
    {
        let pg_before = counters(&self.pool).await?;
        let cpu_before = cpu_busy_ms()?;
        let by_process_before = cpu_by_process();
        let from: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
            .fetch_one(&self.pool)
            .await?;
        let started = Instant::now();
        self.board.lock().expect("lock").answered.clear();
        let mut latencies = work().await?;
        let elapsed = started.elapsed();
        let mut answered = std::mem::take(&mut self.board.lock().expect("lock").answered);
        answered.sort();
        let pg = counters(&self.pool).await? - pg_before;
        let cpu_ms = cpu_busy_ms()? - cpu_before;
        let mut by_process: Vec<(String, i64)> = cpu_by_process()
            .into_iter()
            .map(|(name, ms)| {
                let before = by_process_before.get(&name).copied().unwrap_or(0);
                (name, ms - before)
            })
            .filter(|(_, ms)| *ms > 0)
            .collect();
        by_process.sort_by_key(|(_, ms)| -ms);
        latencies.sort();
        Ok(Figures {
            from,
            elapsed,
            latencies,
            answered,
            pg,
            cpu_ms,
            by_process,
        })
    }

    /// Run `n` jobs, at most `concurrency` in flight; returns each job's latency.
    pub async fn jobs(&self, n: usize, concurrency: usize) -> anyhow::Result<Vec<Duration>> {
        self.spawn(n, concurrency, true).await
    }

    /// Create `n` jobs, at most `creators` requests at a time and without waiting for any job
    /// to end before creating the next, and measure until the last one has succeeded.
    pub async fn backlog(&self, n: usize, creators: usize) -> anyhow::Result<Figures> {
        self.measured(|| self.spawn(n, creators, false)).await
    }

    /// `n` jobs; a permit bounds the jobs in flight (`whole`) or only their create requests.
    async fn spawn(&self, n: usize, permits: usize, whole: bool) -> anyhow::Result<Vec<Duration>> {
        let permits = Arc::new(Semaphore::new(permits));
        // Once a job has failed no more are created, so a stack that stopped working ends the
        // run within one job's timeout instead of one timeout per job still to create.
        let failed = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let permit = permits.clone().acquire_owned().await?;
            if failed.load(Ordering::SeqCst) {
                break;
            }
            let (target, failed) = (self.clone(), failed.clone());
            handles.push(tokio::spawn(async move {
                let mut permit = Some(permit);
                let outcome = async {
                    let (sent, done) = target.create(i).await?;
                    if !whole {
                        permit.take();
                    }
                    let end = target.finish(done).await?;
                    Ok::<_, anyhow::Error>(end.saturating_duration_since(sent))
                }
                .await;
                if outcome.is_err() {
                    failed.store(true, Ordering::SeqCst);
                }
                drop(permit);
                outcome
            }));
        }
        let mut latencies = Vec::with_capacity(n);
        for handle in handles {
            latencies.push(handle.await??);
        }
        Ok(latencies)
    }

    /// Where a job's time goes, from its events' timestamps (each the start of the transaction
    /// that wrote it): p50 of each step of the reference job, over the jobs created since
    /// `from`, and how many committed the tool's result with their end (the second reply came
    /// within the worker's `WORKER_RESULTS_COMMIT_WAIT_MS`).
    pub async fn stages(&self, from: chrono::DateTime<chrono::Utc>) -> anyhow::Result<()> {
        let row: (f64, f64, f64, f64, f64) = sqlx::query_as(
            r#"
            WITH t AS (
                SELECT e.task_id,
                       min(e.created_at) FILTER (WHERE e.payload->>'status' = 'queued') AS queued,
                       min(e.created_at) FILTER (WHERE e.payload->>'status' = 'running') AS running,
                       min(e.created_at) FILTER (WHERE e.kind = 'tool_result') AS tool,
                       max(e.created_at) FILTER (WHERE e.payload->>'status' = 'succeeded') AS done
                  FROM events e JOIN tasks k ON k.id = e.task_id AND k.created_at >= $1
                 GROUP BY e.task_id
            )
            SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM running - queued)),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM tool - running)),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM done - tool)),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM done - queued)),
                   avg((tool = done)::int)::float8
              FROM t
            "#,
        )
        .bind(from)
        .fetch_one(&self.pool)
        .await?;
        println!(
            "stages p50:  create → claimed {:.1} ms, claimed → tool result {:.1} ms (LLM call, tool call), \
             tool result → succeeded {:.1} ms (LLM call, final commit); create → succeeded {:.1} ms \
             (by the events' transaction start times); the tool result committed with the end \
             in {:.0} % of jobs (then its stage runs to the final commit)",
            row.0 * 1000.0,
            row.1 * 1000.0,
            row.2 * 1000.0,
            row.3 * 1000.0,
            row.4 * 100.0
        );
        Ok(())
    }
}

impl Bench {
    /// How the worker took its jobs (by hint or by JetStream delivery) and what became of the
    /// first LLM calls it sent while claiming (its counters since it started, the warm-up's
    /// jobs included).
    pub async fn worker_paths(&self) {
        for worker in &self.workers {
            self.worker_path(worker).await;
        }
    }

    async fn worker_path(&self, worker: &str) {
        let text = self.stack.scrape(worker).await;
        let of = |metric: &str, label: &str| -> String {
            let prefix = format!("{metric}{{");
            let pairs: Vec<String> = text
                .lines()
                .filter_map(|line| line.strip_prefix(&prefix))
                .filter_map(|rest| {
                    let value = rest
                        .split(&format!("{label}=\""))
                        .nth(1)?
                        .split('"')
                        .next()?;
                    let n: f64 = rest.rsplit(' ').next()?.parse().ok()?;
                    Some(format!("{value} {n:.0}"))
                })
                .collect();
            if pairs.is_empty() {
                "none".to_owned()
            } else {
                pairs.join(", ")
            }
        };
        println!(
            "{worker}: dispatches taken by {}; deliveries handed over: {}; early first LLM calls {}; \
             early reads {}",
            of("maestro_dispatches_total", "via"),
            of("maestro_dispatch_handovers_total", "outcome"),
            of("maestro_llm_early_first_calls_total", "outcome"),
            of("maestro_tool_early_reads_total", "outcome")
        );
    }
}

impl Target {
    /// Create job `i`: when the request was sent, and where its end will be told.
    async fn create(&self, i: usize) -> anyhow::Result<(Instant, Ending)> {
        let sent = Instant::now();
        let response = self
            .http
            .post(&self.tasks_url)
            .bearer_auth(&self.token)
            .json(&json!({"instruction": format!("job {i}")}))
            .send()
            .await?;
        let task: Value = response.error_for_status()?.json().await?;
        let id = task["id"].as_str().context("task id")?.to_owned();
        let mut board = self.board.lock().expect("lock");
        board.answered.push(sent.elapsed());
        let ending = match board.finished.remove(&id) {
            Some(end) => Ending::Over(id, end),
            None => {
                let (tx, rx) = oneshot::channel();
                board.waiting.insert(id.clone(), tx);
                Ending::Waiting(id, rx)
            }
        };
        Ok((sent, ending))
    }

    /// When the job's `succeeded` event arrived; when it failed, or had not succeeded 120 s
    /// after its create, an error saying where the job stands (its status, attempt and error,
    /// from the database).
    async fn finish(&self, ending: Ending) -> anyhow::Result<Instant> {
        let (id, end) = match ending {
            Ending::Over(id, end) => (id, Some(end)),
            Ending::Waiting(id, rx) => {
                let end = tokio::time::timeout(Duration::from_secs(120), rx).await;
                (id, end.ok().and_then(Result::ok))
            }
        };
        let what = match end {
            Some(End::Succeeded(at)) => return Ok(at),
            Some(End::Unsuccessful) => "ended without success",
            None => "did not succeed within 120 s",
        };
        let job: Result<Option<(String, i32, Option<String>)>, _> = sqlx::query_as(
            "SELECT status, attempt, error FROM jobs WHERE task_id = $1::uuid \
             ORDER BY job_no DESC LIMIT 1",
        )
        .bind(&id)
        .fetch_optional(&self.pool)
        .await;
        let stands = match job {
            Ok(Some((status, attempt, error))) => format!(
                "its job is {status} (attempt {attempt}{})",
                error.map(|e| format!(", error: {e}")).unwrap_or_default()
            ),
            Ok(None) => "it has no job".to_owned(),
            Err(e) => format!("its job's state cannot be read ({e})"),
        };
        anyhow::bail!("job of task {id} {what}: {stands}")
    }
}

/// A created job's end: seen already, or to come.
enum Ending {
    Over(String, End),
    Waiting(String, oneshot::Receiver<End>),
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Resolve waiters when their task's job ends (its `succeeded`, `failed` or `cancelled` event).
async fn listen_for_ends(
    nats: &async_nats::Client,
    prefix: &str,
    board: Arc<Mutex<Board>>,
) -> anyhow::Result<()> {
    let mut events = nats
        .subscribe(format!("{prefix}.events.*.job_state"))
        .await?;
    // The client lives as long as the listener.
    let client = nats.clone();
    tokio::spawn(async move {
        let _client = client;
        while let Some(message) = events.next().await {
            let now = Instant::now();
            let Ok(event) = serde_json::from_slice::<Value>(&message.payload) else {
                continue;
            };
            let end = match event["payload"]["status"].as_str() {
                Some("succeeded") => End::Succeeded(now),
                Some("failed" | "cancelled") => End::Unsuccessful,
                _ => continue,
            };
            let task = event["task_id"].as_str().unwrap_or_default().to_owned();
            let mut board = board.lock().expect("lock");
            match board.waiting.remove(&task) {
                Some(tx) => {
                    let _ = tx.send(end);
                }
                None => {
                    board.finished.insert(task, end);
                }
            }
        }
    });
    nats.flush().await?;
    Ok(())
}

/// CPU time every process on the machine has used (ms; `/proc/stat` counts in 1/100 s).
pub fn cpu_busy_ms() -> anyhow::Result<i64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let cpu = stat.lines().next().context("empty /proc/stat")?;
    // user nice system idle iowait irq softirq steal
    let ticks: Vec<i64> = cpu
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let busy: i64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    Ok(busy * 10)
}

/// CPU time (ms) used so far by the processes alive now, summed by command name.
fn cpu_by_process() -> HashMap<String, i64> {
    let mut sums = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return sums;
    };
    for entry in dir.flatten() {
        if let Some((name, ms)) = process_cpu(&entry.path().join("stat")) {
            // A kernel worker's name changes with its work item (`kworker/u8:3-flush-254:0`,
            // then `kworker/u8:3-events_unbound`): they are counted together, or a before and
            // an after would not meet.
            let name = if name.starts_with("kworker/") {
                "kworker (all)".to_owned()
            } else {
                name
            };
            *sums.entry(name).or_insert(0) += ms;
        }
    }
    sums
}

/// A process's command name and the CPU time (ms) it has used, from its `/proc/<pid>/stat`.
pub fn process_cpu(stat: &std::path::Path) -> Option<(String, i64)> {
    let stat = std::fs::read_to_string(stat).ok()?;
    // pid (comm) state ppid … utime stime: fields 14 and 15, counted after the `)`.
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<i64>().ok())
            .unwrap_or(0)
    };
    Some((
        stat[open + 1..close].to_owned(),
        (ticks(11) + ticks(12)) * 10,
    ))
}

/// Postgres counters: commits in the bench's database (reads included), transactions that
/// wrote (transaction ids handed out, cluster-wide) and WAL flushes to disk (cluster-wide, so
/// nothing else should run on the server meanwhile).
#[derive(Debug, Clone, Copy)]
pub struct Counters {
    pub commits: i64,
    pub writes: i64,
    pub flushes: i64,
}

impl std::ops::Sub for Counters {
    type Output = Counters;

    fn sub(self, before: Counters) -> Counters {
        Counters {
            commits: self.commits - before.commits,
            writes: self.writes - before.writes,
            flushes: self.flushes - before.flushes,
        }
    }
}

async fn counters(pool: &sqlx::PgPool) -> anyhow::Result<Counters> {
    let (commits, writes, flushes): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
                pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
                (SELECT wal_sync FROM pg_stat_wal)",
    )
    .fetch_one(pool)
    .await?;
    Ok(Counters {
        commits,
        writes,
        flushes,
    })
}

/// The `p` quantile of sorted `durations`, in ms (0 for none).
fn quantile(durations: &[Duration], p: f64) -> f64 {
    match durations.len() {
        0 => 0.0,
        n => ms(durations[((n as f64 * p) as usize).min(n - 1)]),
    }
}
