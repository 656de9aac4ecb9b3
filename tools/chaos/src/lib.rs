//! The chaos harness. It runs jobs through the whole stack (five services as processes, two
//! workers, a private Postgres server and nats-server, the scripted LLM streaming slowly) while
//! it kills random services with SIGKILL, pauses a worker (SIGSTOP) past its lease, and
//! restarts NATS and Postgres; then it checks the invariants:
//!
//! - every job the API accepted exists and reached a terminal state (none lost, none stuck);
//! - every task's event `seq` and every job's `job_seq` is gap-free from 1 (none duplicated or
//!   skipped);
//! - no tool call has two results, every succeeded job committed each LLM turn exactly once and
//!   has exactly one `succeeded` event.
//!
//! Clients create tasks with an `Idempotency-Key` and retry until answered, as a careful client
//! of a flaky network would; a retry must never create a second task.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use maestro_testkit::{Service, Stack, StackOptions};
use serde_json::{Value, json};

mod cluster;
pub use cluster::{ClusterOptions, ClusterReport, run_cluster};

/// How much chaos.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    pub jobs: usize,
    /// Disruptions: kills, pauses and (with `restart_infrastructure`) NATS and Postgres restarts.
    pub actions: usize,
    /// Include NATS and Postgres restarts among the disruptions.
    pub restart_infrastructure: bool,
    pub seed: u64,
    /// Time allowed for every job to settle after the last disruption.
    pub settle_timeout: Duration,
}

impl ChaosOptions {
    /// The form CI runs: 20 jobs, 10 disruptions.
    pub fn short() -> Self {
        Self {
            jobs: 20,
            actions: 10,
            restart_infrastructure: true,
            seed: 7,
            settle_timeout: Duration::from_secs(90),
        }
    }

    /// The documented long run: 120 jobs, 60 disruptions.
    pub fn long() -> Self {
        Self {
            jobs: 120,
            actions: 60,
            restart_infrastructure: true,
            seed: 42,
            settle_timeout: Duration::from_secs(300),
        }
    }
}

/// What happened and what held.
#[derive(Debug, Default)]
pub struct ChaosReport {
    pub jobs: usize,
    /// Jobs a comment started after its task's job had ended (docs/api.md: a comment that the
    /// harness retried while a gateway was down can arrive after the job succeeded).
    pub follow_ups: i64,
    pub kills: usize,
    pub pauses: usize,
    pub nats_restarts: usize,
    pub postgres_restarts: usize,
    pub succeeded: i64,
    pub failed: Vec<String>,
    pub lost: usize,
    pub stuck: i64,
    pub seq_violations: i64,
    pub duplicate_results: i64,
    pub repeated_turns: i64,
    pub duplicate_successes: i64,
    pub duplicate_tasks: i64,
    /// Side effects that happened more than once (should be none).
    pub duplicate_effects: usize,
    /// Succeeded jobs whose side effect did not happen exactly once.
    pub missing_effects: usize,
    /// Jobs paused because a side effect's outcome was unknown (the effect happened at most once).
    pub paused_unknown: i64,
    /// Interjections posted, and how many were not read exactly once.
    pub interjections: usize,
    pub interjection_violations: usize,
    pub chaos_duration: Duration,
    /// From the last disruption until every job had settled.
    pub recovery: Duration,
    /// Job durations (created → finished), median and longest.
    pub job_p50: Duration,
    pub job_max: Duration,
}

impl ChaosReport {
    /// Every invariant held.
    pub fn holds(&self) -> bool {
        self.lost == 0
            && self.stuck == 0
            && self.failed.is_empty()
            && self.seq_violations == 0
            && self.duplicate_results == 0
            && self.repeated_turns == 0
            && self.duplicate_successes == 0
            && self.duplicate_tasks == 0
            && self.duplicate_effects == 0
            && self.missing_effects == 0
            && self.interjection_violations == 0
    }
}

impl fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "jobs:                 {} (+ {} follow-ups started by a late comment)",
            self.jobs, self.follow_ups
        )?;
        writeln!(
            f,
            "disruptions:          {} kills, {} worker pauses, {} NATS restarts, {} Postgres restarts over {:.1} s",
            self.kills,
            self.pauses,
            self.nats_restarts,
            self.postgres_restarts,
            self.chaos_duration.as_secs_f64()
        )?;
        writeln!(f, "succeeded:            {}", self.succeeded)?;
        writeln!(
            f,
            "failed:               {} {:?}",
            self.failed.len(),
            self.failed
        )?;
        writeln!(f, "lost:                 {}", self.lost)?;
        writeln!(f, "stuck:                {}", self.stuck)?;
        writeln!(f, "seq violations:       {}", self.seq_violations)?;
        writeln!(f, "duplicate results:    {}", self.duplicate_results)?;
        writeln!(f, "repeated LLM turns:   {}", self.repeated_turns)?;
        writeln!(f, "duplicate successes:  {}", self.duplicate_successes)?;
        writeln!(f, "duplicate tasks:      {}", self.duplicate_tasks)?;
        writeln!(
            f,
            "interjections:        {} posted, {} not read exactly once",
            self.interjections, self.interjection_violations
        )?;
        writeln!(f, "side effects twice:   {}", self.duplicate_effects)?;
        writeln!(
            f,
            "side effects missing: {} (of succeeded jobs)",
            self.missing_effects
        )?;
        writeln!(
            f,
            "paused (unknown):     {} (side effect at most once, a person decides)",
            self.paused_unknown
        )?;
        writeln!(
            f,
            "recovery:             {:.1} s after the last disruption",
            self.recovery.as_secs_f64()
        )?;
        writeln!(
            f,
            "job duration:         p50 {:.1} s, max {:.1} s (created → finished)",
            self.job_p50.as_secs_f64(),
            self.job_max.as_secs_f64()
        )?;
        write!(
            f,
            "invariants:           {}",
            if self.holds() { "hold" } else { "BROKEN" }
        )
    }
}

/// A small deterministic generator (xorshift64*), so a seed replays the same chaos.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }
}

/// Each job: write a file, read it back, finish — three LLM turns, streamed slowly enough
/// that disruptions land in the middle of jobs.
fn scenarios(counter_url: &str) -> Value {
    json!({"scenarios": [{
        "name": "chaos",
        "repeat_last": true,
        "turns": [
            {"text": "Writing the file.", "chunk_chars": 2, "chunk_delay_ms": 25,
             "tool_calls": [{"name": "write_file", "arguments": {"path": "note.txt", "content": "x"}}]},
            {"text": "Recording it.", "chunk_chars": 2, "chunk_delay_ms": 25,
             "tool_calls": [{"name": "http_fetch", "arguments": {"url": counter_url, "method": "POST"}}]},
            {"text": "Done.", "tool_calls": [{"name": "complete", "arguments": {"result": "ok"}}]}
        ]
    }]})
}

/// The external side effect: an HTTP server counting POSTs per `Idempotency-Key` (the
/// operation id MAESTRO sends), i.e. per tool call.
async fn side_effect_counter() -> anyhow::Result<(String, Arc<Mutex<HashMap<String, usize>>>)> {
    let counts: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let recorded = counts.clone();
    let app = axum::Router::new().route(
        "/effect",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let recorded = recorded.clone();
            async move {
                let key = headers
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("?")
                    .to_owned();
                *recorded.lock().expect("lock").entry(key).or_default() += 1;
                "recorded"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/effect", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, counts))
}

const INSTANCES: [(Service, &str); 6] = [
    (Service::ApiGateway, "api-gateway"),
    (Service::Scheduler, "scheduler"),
    (Service::Notifier, "notifier"),
    (Service::ToolRunner, "tool-runner"),
    (Service::Worker, "worker-1"),
    (Service::Worker, "worker-2"),
];
const LEASE: Duration = Duration::from_secs(2);

/// The stack both forms run: the chaos scenario against `counter_url`, a policy that reaches
/// it (written to a file named by `tag`, returned to be removed), a private Postgres, a short
/// lease and quick retries.
fn stack_options(
    counter_url: &str,
    tag: u16,
) -> anyhow::Result<(StackOptions, std::path::PathBuf)> {
    let policy = std::env::temp_dir().join(format!("maestro-chaos-policy-{tag}.json"));
    std::fs::write(
        &policy,
        json!({"network": true, "allowed_hosts": ["127.0.0.1"]}).to_string(),
    )?;
    let options = StackOptions::new(scenarios(counter_url))
        .env("WORKSPACE_POLICY", &policy.display().to_string())
        .private_postgres()
        .env("JOB_ACK_WAIT_MS", &LEASE.as_millis().to_string())
        .env("JOB_MAX_ATTEMPTS", "25")
        .env("JOB_MAX_DELIVER", "100")
        .env("REDISPATCH_GRACE_MS", "1500")
        .env("RETRY_BASE_MS", "200")
        .env("RETRY_MAX_MS", "1000")
        .env("SHUTDOWN_GRACE_MS", "200")
        .env("TOOL_TIMEOUT_MS", "3000");
    Ok((options, policy))
}

/// Run the harness.
pub async fn run(options: ChaosOptions) -> anyhow::Result<ChaosReport> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let (counter_url, effects) = side_effect_counter().await?;
    let (stack_options, policy) = stack_options(&counter_url, port)?;
    let mut stack_options = stack_options.env("GATEWAY_ADDR", &format!("127.0.0.1:{port}"));
    stack_options.services = vec![
        Service::ApiGateway,
        Service::Scheduler,
        Service::Notifier,
        Service::ToolRunner,
    ];
    let mut stack = Stack::spawn(stack_options).await?;
    for (service, instance) in &INSTANCES[4..] {
        stack.start(*service, instance, &[]).await?;
    }
    let base = stack.url("");
    let token = stack.token.clone();
    let mut rng = Rng(options.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // Spread the jobs over the expected length of the chaos (about 1.5 s per disruption).
    let spacing =
        Duration::from_millis((options.actions as u64 * 1500) / options.jobs.max(1) as u64);
    let creator = tokio::spawn(create_tasks(vec![base], token, options.jobs, spacing));

    let mut report = ChaosReport {
        jobs: options.jobs,
        ..Default::default()
    };
    let started = Instant::now();
    for _ in 0..options.actions {
        tokio::time::sleep(rng.millis(200, 1200)).await;
        disrupt(&mut stack, &mut rng, &options, &mut report).await?;
    }
    report.chaos_duration = started.elapsed();
    let calm = Instant::now();
    let accepted = creator.await.context("the task creator panicked")??;
    settle(&stack, options.settle_timeout).await?;
    report.recovery = calm.elapsed();
    check(&stack, &accepted, &mut report).await?;
    check_effects(&stack, &effects, &mut report).await?;
    let _ = std::fs::remove_file(&policy);
    Ok(report)
}

async fn disrupt(
    stack: &mut Stack,
    rng: &mut Rng,
    options: &ChaosOptions,
    report: &mut ChaosReport,
) -> anyhow::Result<()> {
    let roll = rng.below(100);
    match roll {
        0..15 if options.restart_infrastructure => {
            stack.nats.kill().await;
            tokio::time::sleep(rng.millis(200, 1000)).await;
            stack.nats.restart().await?;
            report.nats_restarts += 1;
        }
        15..30 if options.restart_infrastructure => {
            let postgres = stack.postgres.as_ref().context("a private Postgres")?;
            postgres.stop()?;
            tokio::time::sleep(rng.millis(200, 1000)).await;
            postgres.start_again()?;
            report.postgres_restarts += 1;
        }
        30..45 => {
            let worker = if rng.below(2) == 0 {
                "worker-1"
            } else {
                "worker-2"
            };
            stack.process(worker).signal("STOP");
            tokio::time::sleep(LEASE + rng.millis(500, 1500)).await;
            stack.process(worker).signal("CONT");
            report.pauses += 1;
        }
        _ => {
            let (service, instance) = INSTANCES[rng.below(INSTANCES.len() as u64) as usize];
            stack.kill(instance).await;
            tokio::time::sleep(rng.millis(100, 800)).await;
            stack.start(service, instance, &[]).await?;
            report.kills += 1;
        }
    }
    Ok(())
}

/// Each side effect at most once; exactly once for every succeeded job.
async fn check_effects(
    stack: &Stack,
    effects: &Mutex<HashMap<String, usize>>,
    report: &mut ChaosReport,
) -> anyhow::Result<()> {
    let counts = effects.lock().expect("lock").clone();
    report.duplicate_effects = counts.values().filter(|n| **n > 1).count();
    let succeeded: Vec<String> =
        sqlx::query_scalar("SELECT id::text FROM jobs WHERE status = 'succeeded'")
            .fetch_all(&stack.db.pool)
            .await?;
    report.missing_effects = succeeded
        .iter()
        .filter(|job| {
            counts
                .iter()
                .filter(|(key, _)| key.starts_with(job.as_str()))
                .map(|(_, n)| *n)
                .sum::<usize>()
                != 1
        })
        .count();
    report.paused_unknown =
        scalar(stack, "SELECT count(*) FROM jobs WHERE status = 'waiting_human' AND wait_reason = 'side_effect_unknown'")
            .await?;
    Ok(())
}

/// Create `n` tasks, each with its own idempotency key, retrying each until it is answered.
/// Several gateways (`bases`) take turns, and a create that fails is retried on the next.
async fn create_tasks(
    bases: Vec<String>,
    token: String,
    n: usize,
    spacing: Duration,
) -> anyhow::Result<Vec<String>> {
    let http = maestro_testkit::http_client();
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(create_task(&http, &bases, &token, i).await?);
        tokio::time::sleep(spacing).await;
    }
    Ok(ids)
}

/// Create task `i` (idempotency key `chaos-<i>`) through one of `bases`, retried on the next
/// until it is answered, and comment on it at once (an interjection).
async fn create_task(
    http: &reqwest::Client,
    bases: &[String],
    token: &str,
    i: usize,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut turn = i;
    let (id, base) = loop {
        let base = &bases[turn % bases.len()];
        turn += 1;
        let response = http
            .post(format!("{base}/api/local/tasks"))
            .bearer_auth(token)
            .header("idempotency-key", format!("chaos-{i}"))
            .timeout(Duration::from_secs(15))
            .json(&json!({"instruction": format!("chaos job {i}")}))
            .send()
            .await;
        if let Ok(response) = response
            && response.status().is_success()
            && let Ok(task) = response.json::<Value>().await
            && let Some(id) = task["id"].as_str()
        {
            break (id.to_owned(), base);
        }
        anyhow::ensure!(Instant::now() < deadline, "task {i} was never accepted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    interject(http, base, token, &id, i).await;
    Ok(id)
}

/// Comment on a task just created, so it arrives while the job is queued or running: an
/// interjection. Retried while the gateway is unreachable; each attempt's text is unique, so
/// a comment posted twice (an answer lost) is two interjections, each to be delivered once.
async fn interject(http: &reqwest::Client, base: &str, token: &str, task: &str, i: usize) {
    for attempt in 0..50 {
        let body = format!("Note {i}.{attempt} from the user: keep going.");
        let response = http
            .post(format!("{base}/api/local/tasks/{task}/comments"))
            .bearer_auth(token)
            .timeout(Duration::from_secs(15))
            .json(&json!({"body": body}))
            .send()
            .await;
        if response.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Wait until no job is queued, running or waiting to retry.
async fn settle(stack: &Stack, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let open: Result<i64, _> = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE status NOT IN ('succeeded', 'failed', 'cancelled', 'waiting_human')",
        )
        .fetch_one(&stack.db.pool)
        .await;
        if matches!(open, Ok(0)) || Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn scalar(stack: &Stack, sql: &'static str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sql).fetch_one(&stack.db.pool).await?)
}

async fn check(stack: &Stack, accepted: &[String], report: &mut ChaosReport) -> anyhow::Result<()> {
    let stored: Vec<String> = sqlx::query_scalar("SELECT id::text FROM tasks")
        .fetch_all(&stack.db.pool)
        .await?;
    report.lost = accepted.iter().filter(|id| !stored.contains(id)).count();
    report.duplicate_tasks = stored.len() as i64 - accepted.len() as i64;
    report.stuck = scalar(
        stack,
        "SELECT count(*) FROM jobs WHERE status NOT IN ('succeeded', 'failed', 'cancelled', 'waiting_human')",
    )
    .await?;
    report.succeeded = scalar(
        stack,
        "SELECT count(*) FROM jobs WHERE status = 'succeeded'",
    )
    .await?;
    // The harness never continues a task: any later job of one is a comment's follow-up.
    report.follow_ups = scalar(stack, "SELECT count(*) FROM jobs WHERE job_no > 1").await?;
    report.failed =
        sqlx::query_scalar("SELECT coalesce(error, '?') FROM jobs WHERE status = 'failed'")
            .fetch_all(&stack.db.pool)
            .await?;
    report.seq_violations = scalar(
        stack,
        "SELECT (SELECT count(*) FROM (SELECT task_id FROM events GROUP BY task_id
                                       HAVING count(*) <> max(seq) OR min(seq) <> 1) t)
              + (SELECT count(*) FROM (SELECT job_id FROM events GROUP BY job_id
                                       HAVING count(*) <> max(job_seq) OR min(job_seq) <> 1) j)",
    )
    .await?;
    report.duplicate_results = scalar(
        stack,
        "SELECT count(*) FROM (SELECT job_id, payload->>'call_id' FROM events WHERE kind = 'tool_result'
                                GROUP BY 1, 2 HAVING count(*) > 1) d",
    )
    .await?;
    check_turns_and_interjections(stack, report).await?;
    let durations: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM finished_at - created_at)::float8 FROM jobs
          WHERE finished_at IS NOT NULL ORDER BY 1",
    )
    .fetch_all(&stack.db.pool)
    .await?;
    if let (Some(max), false) = (durations.last(), durations.is_empty()) {
        report.job_p50 = Duration::from_secs_f64(durations[durations.len() / 2]);
        report.job_max = Duration::from_secs_f64(*max);
    }
    report.duplicate_successes = scalar(
        stack,
        "SELECT count(*) FROM (SELECT job_id FROM events WHERE kind = 'job_state'
                                 AND payload->>'status' = 'succeeded'
                               GROUP BY job_id HAVING count(*) > 1) s",
    )
    .await?;
    Ok(())
}

/// Every LLM turn committed once, and every interjection read exactly once.
async fn check_turns_and_interjections(
    stack: &Stack,
    report: &mut ChaosReport,
) -> anyhow::Result<()> {
    // Each turn's message committed once: a succeeded job's assistant messages are the
    // scenario's turns in order (the last one twice when an interjection beat `complete`).
    let turns: Vec<String> = sqlx::query_scalar(
        "SELECT string_agg(e.payload->>'content', '|' ORDER BY e.seq)
           FROM jobs j JOIN events e ON e.job_id = j.id
          WHERE j.status = 'succeeded' AND e.kind = 'message' AND e.payload->>'role' = 'assistant'
          GROUP BY j.id",
    )
    .fetch_all(&stack.db.pool)
    .await?;
    let expected = [
        "Writing the file.|Recording it.|Done.",
        "Writing the file.|Recording it.|Done.|Done.",
    ];
    report.repeated_turns = turns
        .iter()
        .filter(|t| !expected.contains(&t.as_str()))
        .count() as i64;
    // Every interjection read exactly once; by a succeeded job always.
    let interjections: Vec<(String, bool, i64)> = sqlx::query_as(
        "SELECT j.status, c.delivered_at IS NOT NULL,
                (SELECT count(*) FROM events e WHERE e.job_id = c.job_id AND e.kind = 'message'
                    AND e.payload->>'role' = 'user' AND strpos(e.payload->>'content', c.body) > 0)
           FROM comments c JOIN jobs j ON j.id = c.job_id WHERE c.kind = 'interjection'",
    )
    .fetch_all(&stack.db.pool)
    .await?;
    report.interjections = interjections.len();
    report.interjection_violations = interjections
        .iter()
        .filter(|(status, delivered, seen)| {
            let read_once = *seen == 1;
            let twice = *seen > 1;
            let marked_wrongly = *delivered && !read_once;
            let succeeded_unread = status == "succeeded" && !*delivered;
            twice || marked_wrongly || succeeded_unread
        })
        .count();
    Ok(())
}
