//! The cluster form (issue 19): a 3-node NATS JetStream cluster (R3 streams) and several
//! copies of every service — 2 gateways, 2 schedulers, 3 workers, 2 tool-runners, 2 notifiers
//! — against one database, under a steady load of jobs, while a fixed script of faults hits
//! it: the JOBS stream's leader killed (SIGKILL) with a gateway and a worker, then the meta
//! leader with a scheduler, a notifier and a tool-runner, then a whole node down for 30 s, then
//! a Postgres restart. Besides the single-server invariants ([`ChaosReport`]) it counts:
//!
//! - SSE: clients following tasks through either gateway, reconnecting with `Last-Event-ID`
//!   (to the other gateway when theirs is down), saw every event once, in order, no gap;
//! - webhooks: every succeeded task's `task.succeeded` was delivered, and a redelivery
//!   carried the same `webhook-id`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use maestro_testkit::{Next, Service, SseClient, Stack};
use serde_json::{Value, json};

use super::{ChaosReport, check, check_effects, create_task, settle};

/// How much load.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub jobs: usize,
    /// How long the whole node stays down.
    pub node_down: Duration,
    /// Time allowed for every job to settle after the last fault.
    pub settle_timeout: Duration,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            jobs: 40,
            node_down: Duration::from_secs(30),
            settle_timeout: Duration::from_secs(120),
        }
    }
}

/// What happened and what held.
#[derive(Debug, Default)]
pub struct ClusterReport {
    pub base: ChaosReport,
    /// The faults, in order, as they were done.
    pub faults: Vec<String>,
    pub sse_clients: usize,
    /// Reconnections the SSE clients made (each resumed with `Last-Event-ID`).
    pub sse_reconnects: usize,
    /// Clients that saw an event twice, out of order, or missed one.
    pub sse_violations: Vec<String>,
    pub webhook_deliveries: usize,
    /// Succeeded jobs whose `task.succeeded` never arrived.
    pub webhooks_missing: usize,
    /// Succeeded jobs whose `task.succeeded` deliveries carried different `webhook-id`s.
    pub webhook_id_violations: usize,
}

impl ClusterReport {
    pub fn holds(&self) -> bool {
        self.base.holds()
            && self.sse_violations.is_empty()
            && self.webhooks_missing == 0
            && self.webhook_id_violations == 0
    }
}

impl fmt::Display for ClusterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "faults:               {}", self.faults.join("; "))?;
        writeln!(f, "{}", self.base)?;
        writeln!(
            f,
            "SSE clients:          {} ({} reconnects), {} saw a gap, a duplicate or disorder {:?}",
            self.sse_clients,
            self.sse_reconnects,
            self.sse_violations.len(),
            self.sse_violations
        )?;
        writeln!(
            f,
            "webhooks:             {} deliveries, {} succeeded jobs never told, {} with two webhook-ids",
            self.webhook_deliveries, self.webhooks_missing, self.webhook_id_violations
        )?;
        write!(
            f,
            "cluster invariants:   {}",
            if self.holds() { "hold" } else { "BROKEN" }
        )
    }
}

/// The copies of each service, by instance name.
const COPIES: [(Service, &str); 11] = [
    (Service::ApiGateway, "gateway-1"),
    (Service::ApiGateway, "gateway-2"),
    (Service::Scheduler, "scheduler-1"),
    (Service::Scheduler, "scheduler-2"),
    (Service::Notifier, "notifier-1"),
    (Service::Notifier, "notifier-2"),
    (Service::ToolRunner, "tool-runner-1"),
    (Service::ToolRunner, "tool-runner-2"),
    (Service::Worker, "worker-1"),
    (Service::Worker, "worker-2"),
    (Service::Worker, "worker-3"),
];

/// Run the cluster form.
pub async fn run_cluster(options: ClusterOptions) -> anyhow::Result<ClusterReport> {
    let (counter_url, effects) = super::side_effect_counter().await?;
    let (hook_url, hooks) = webhook_sink().await?;
    let tag = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let (stack_options, policy) = super::stack_options(&counter_url, tag)?;
    let mut stack_options = stack_options.nats_cluster(3);
    stack_options.services = Vec::new();
    let mut stack = Stack::spawn(stack_options).await?;
    let gateways: Gateways = Arc::new(Mutex::new(vec![String::new(); 2]));
    for (service, instance) in COPIES {
        start(&mut stack, &gateways, service, instance).await?;
    }
    let bases = gateways.lock().expect("lock").clone();
    let token = stack.token.clone();
    let http = maestro_testkit::http_client();
    let webhook = http
        .post(format!("{}/api/webhooks", bases[0]))
        .bearer_auth(&token)
        .json(&json!({"url": hook_url, "event_types": ["task.succeeded"]}))
        .send()
        .await?;
    anyhow::ensure!(
        webhook.status().is_success(),
        "the webhook: {}",
        webhook.text().await?
    );

    // A steady load over the faults (about 14 s plus the node's time down), every third task
    // followed by an SSE client.
    let span = Duration::from_secs(14) + options.node_down;
    let spacing = span / options.jobs.max(1) as u32;
    let load = {
        let (gateways, token) = (gateways.clone(), token.clone());
        let jobs = options.jobs;
        tokio::spawn(async move {
            let http = maestro_testkit::http_client();
            let mut ids = Vec::with_capacity(jobs);
            let mut watchers = Vec::new();
            for i in 0..jobs {
                let bases = gateways.lock().expect("lock").clone();
                let id = create_task(&http, &bases, &token, i).await?;
                if i % 3 == 0 {
                    let watch = watch(http.clone(), gateways.clone(), token.clone(), id.clone(), i);
                    watchers.push(tokio::spawn(watch));
                }
                ids.push(id);
                tokio::time::sleep(spacing).await;
            }
            anyhow::Ok((ids, watchers))
        })
    };

    let mut report = ClusterReport::default();
    let started = Instant::now();
    let record = (&mut report.faults, &mut report.base);
    faults(&mut stack, &gateways, &options, record).await?;
    report.base.chaos_duration = started.elapsed();
    let calm = Instant::now();
    let (accepted, watchers) = load.await.context("the load panicked")??;
    settle(&stack, options.settle_timeout).await?;
    report.base.recovery = calm.elapsed();
    report.base.jobs = options.jobs;
    check(&stack, &accepted, &mut report.base).await?;
    check_effects(&stack, &effects, &mut report.base).await?;
    for watcher in watchers {
        let watched = watcher.await.context("an SSE client panicked")?;
        report.sse_clients += 1;
        report.sse_reconnects += watched.reconnects;
        if let Some(violation) = watched.violation() {
            report.sse_violations.push(violation);
        }
    }
    check_webhooks(&stack, &hooks, &mut report).await?;
    let _ = std::fs::remove_file(&policy);
    Ok(report)
}

/// The gateways' current base URLs (`gateway-1`, `gateway-2`): a restarted gateway listens on
/// a new port (a fixed one could be taken meanwhile), and clients look here again.
type Gateways = Arc<Mutex<Vec<String>>>;

/// Start (again) one copy; a gateway's new address goes to `gateways`.
async fn start(
    stack: &mut Stack,
    gateways: &Gateways,
    service: Service,
    instance: &str,
) -> anyhow::Result<()> {
    stack.start(service, instance, &[]).await?;
    let slot = match instance {
        "gateway-1" => 0,
        "gateway-2" => 1,
        _ => return Ok(()),
    };
    gateways.lock().expect("lock")[slot] = stack.gateway_url(instance);
    Ok(())
}

async fn restart(stack: &mut Stack, gateways: &Gateways, instances: &[&str]) -> anyhow::Result<()> {
    for instance in instances {
        let (service, _) = COPIES
            .iter()
            .find(|(_, name)| name == instance)
            .context("no such copy")?;
        start(stack, gateways, *service, instance).await?;
    }
    Ok(())
}

/// The fault script.
async fn faults(
    stack: &mut Stack,
    gateways: &Gateways,
    options: &ClusterOptions,
    (done, report): (&mut Vec<String>, &mut ChaosReport),
) -> anyhow::Result<()> {
    let brief = Duration::from_secs(2);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The JOBS stream's leader, and with it a gateway (its SSE clients move) and a worker.
    let leader = stack.nats_stream_leader("JOBS").await?;
    let with = ["gateway-1", "worker-1"];
    done.push(
        outage(
            stack,
            gateways,
            (&leader, "JOBS leader"),
            &with,
            brief,
            report,
        )
        .await?,
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The meta leader, with a scheduler, a notifier and a tool-runner.
    let meta = stack.nats_meta_leader().await?;
    let with = ["scheduler-1", "notifier-1", "tool-runner-1"];
    done.push(
        outage(
            stack,
            gateways,
            (&meta, "meta leader"),
            &with,
            brief,
            report,
        )
        .await?,
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    // A whole node, for a while: the EVENTS stream's leader.
    let node = stack.nats_stream_leader("EVENTS").await?;
    let down = options.node_down;
    done.push(outage(stack, gateways, (&node, "EVENTS leader"), &[], down, report).await?);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Postgres, once.
    let postgres = stack.postgres.as_ref().context("a private Postgres")?;
    postgres.stop()?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    postgres.start_again()?;
    done.push("restarted Postgres".to_owned());
    report.postgres_restarts += 1;
    Ok(())
}

/// SIGKILL NATS node `node` (`role` says why it was chosen) and the copies `with`, bring them
/// back after `down`; what was done, in words.
async fn outage(
    stack: &mut Stack,
    gateways: &Gateways,
    (node, role): (&str, &str),
    with: &[&str],
    down: Duration,
    report: &mut ChaosReport,
) -> anyhow::Result<String> {
    stack.nats_node(node).kill().await;
    for instance in with {
        stack.kill(instance).await;
    }
    tokio::time::sleep(down).await;
    stack.nats_node(node).restart().await?;
    restart(stack, gateways, with).await?;
    report.nats_restarts += 1;
    report.kills += with.len();
    let also = with.iter().map(|i| format!(", {i}")).collect::<String>();
    Ok(format!("{node} ({role}) down {} s{also}", down.as_secs()))
}

/// What one SSE client saw of one task.
#[derive(Debug, Default)]
struct Watched {
    task: String,
    /// Every item's position, `(seq, delta)`, as it came.
    seen: Vec<(u64, u64)>,
    reconnects: usize,
    /// It saw the task's job end (or pause for a person).
    ended: bool,
}

impl Watched {
    /// Why what it saw is wrong, if it is.
    fn violation(&self) -> Option<String> {
        let task = &self.task;
        if !self.ended {
            return Some(format!("{task}: never saw the job end"));
        }
        if let Some(pair) = self.seen.windows(2).find(|w| w[1] <= w[0]) {
            return Some(format!("{task}: {:?} came after {:?}", pair[1], pair[0]));
        }
        let events: Vec<u64> = self
            .seen
            .iter()
            .filter(|(_, delta)| *delta == 0)
            .map(|(seq, _)| *seq)
            .collect();
        let expected: Vec<u64> = (1..=events.len() as u64).collect();
        (events != expected).then(|| format!("{task}: events {events:?}, not 1 to the last"))
    }
}

fn position(id: &str) -> Option<(u64, u64)> {
    match id.split_once('.') {
        Some((seq, delta)) => Some((seq.parse().ok()?, delta.parse().ok()?)),
        None => Some((id.parse().ok()?, 0)),
    }
}

/// Follow task `task`'s SSE stream until its job ends, through gateway `i % 2` first, and on
/// any break (a killed gateway, a stall) through the other, resuming after the last id.
async fn watch(
    http: reqwest::Client,
    gateways: Gateways,
    token: String,
    task: String,
    i: usize,
) -> Watched {
    let mut watched = Watched {
        task: task.clone(),
        ..Default::default()
    };
    let mut last: Option<String> = None;
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut turn = i;
    while Instant::now() < deadline {
        let base = {
            let bases = gateways.lock().expect("lock");
            bases[turn % bases.len()].clone()
        };
        let url = format!("{base}/api/local/tasks/{task}/stream");
        turn += 1;
        let Ok(mut stream) = SseClient::connect(&http, &url, &token, last.as_deref()).await else {
            watched.reconnects += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        // Until the stream ends or stalls (a killed gateway, a node down): then the other.
        while let Next::Item(item) = stream.next_or_end(Duration::from_secs(10)).await {
            if let Some(at) = position(&item.id) {
                watched.seen.push(at);
                last = Some(item.id.clone());
            }
            let status = item.data["payload"]["status"].as_str().unwrap_or("");
            if item.event == "job_state"
                && ["succeeded", "failed", "cancelled", "waiting_human"].contains(&status)
            {
                watched.ended = true;
                return watched;
            }
        }
        watched.reconnects += 1;
    }
    watched
}

/// Every delivery: `(webhook-id, type, job_id)`.
type Deliveries = Arc<Mutex<Vec<(String, String, String)>>>;

async fn webhook_sink() -> anyhow::Result<(String, Deliveries)> {
    let deliveries: Deliveries = Arc::default();
    let recorded = deliveries.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let recorded = recorded.clone();
                async move {
                    let id = headers
                        .get("webhook-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    let payload: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let kind = payload["type"].as_str().unwrap_or("").to_owned();
                    let job = payload["data"]["job_id"].as_str().unwrap_or("").to_owned();
                    recorded.lock().expect("lock").push((id, kind, job));
                    "ok"
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, deliveries))
}

/// Every succeeded job's task told once or more, always under one `webhook-id` per job
/// (waiting up to 60 s for deliveries the faults delayed). A comment on a finished task starts
/// a follow-up job, whose success is a notice of its own.
async fn check_webhooks(
    stack: &Stack,
    hooks: &Deliveries,
    report: &mut ClusterReport,
) -> anyhow::Result<()> {
    let succeeded: Vec<String> =
        sqlx::query_scalar("SELECT id::text FROM jobs WHERE status = 'succeeded'")
            .fetch_all(&stack.db.pool)
            .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let deliveries = hooks.lock().expect("lock").clone();
        let mut ids: HashMap<&str, BTreeMap<&str, usize>> = HashMap::new();
        for (id, kind, job) in &deliveries {
            if kind == "task.succeeded" {
                *ids.entry(job.as_str())
                    .or_default()
                    .entry(id.as_str())
                    .or_default() += 1;
            }
        }
        report.webhook_deliveries = deliveries.len();
        report.webhooks_missing = succeeded
            .iter()
            .filter(|job| !ids.contains_key(job.as_str()))
            .count();
        report.webhook_id_violations = ids.values().filter(|by_id| by_id.len() > 1).count();
        if report.webhooks_missing == 0 || Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
