//! `maestro-bench floor`: the reference job's floor on this machine, next to MAESTRO.
//!
//! The floor is the job path as the architecture lays it out — five processes, one
//! nats-server, Postgres and the scripted LLM, with the same hops — carried by the least code
//! that can move a job along them: a gateway that creates the task, a worker that claims it,
//! asks the LLM, calls the tool-runner and commits the turns (the first with the second when
//! the second reply comes within `WORKER_RESULTS_COMMIT_WAIT_MS`, as MAESTRO's worker does),
//! a tool-runner, a relay and a
//! notifier. Its Postgres statements are MAESTRO's own (`maestro_db`'s create, claim, turn and
//! relay statements, the relay's drain being the scheduler's own `Relay::drain`, the turns'
//! events being the rows MAESTRO's worker wrote for its last
//! warm-up job), its messages MAESTRO's subjects, streams, consumers and tool protocol
//! (`maestro_messaging`, `ToolExecRequest`), its LLM requests the bytes MAESTRO's worker sent
//! (recorded from MAESTRO's scripted LLM during its warm-up). Everything MAESTRO does around
//! them is left out: validation, authentication, the agent's conversation and piece, prompt
//! rendering, tool sandboxing, leases, signals, dispatch hand-overs, metrics and tracing.
//!
//! So the floor's CPU per job is what this machine charges for the architecture's hops and
//! MAESTRO's Postgres work alone; MAESTRO's figures beside it, in the same sitting, show what
//! its services add, and `--keep` runs chosen MAESTRO services among the floor's roles to
//! show what each adds alone. The two stacks run side by side, each idle while the other is
//! measured, and the rounds alternate which goes first.
//!
//! Each role is this binary started again (`maestro-bench floor-role <role>`) through a
//! symlink named `floor-<role>`, so the CPU table tells the processes apart.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt as _;
use maestro_db::claims::Claimed;
use maestro_db::jobs::{Fence, Publish, Transition};
use maestro_db::tasks::NewTask;
use maestro_domain::tools::{ToolExecReply, ToolExecRequest};
use maestro_domain::{EventBody, EventKind, JobId, JobStatus, Owner, TaskId};
use maestro_messaging::payloads::{JobDispatch, Opening};
use maestro_messaging::setup::{self, ConsumerSettings, StreamSettings};
use maestro_messaging::{AfterCommit, Bus, Subjects};
use maestro_testkit::{Process, Service, Stack, StackOptions};
use serde_json::{Value, json};

use crate::reference::{Bench, Figures, Target};

pub struct Args {
    pub jobs: usize,
    pub concurrency: usize,
    pub rounds: usize,
    /// `--keep worker,tool-runner`: these MAESTRO services run in the floor's stack in place
    /// of their floor roles, to see what each adds.
    pub keep: Vec<Service>,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args {
        jobs: 2000,
        concurrency: 64,
        rounds: 2,
        keep: Vec::new(),
    };
    while let Some(flag) = it.next() {
        let mut value = || -> anyhow::Result<usize> {
            Ok(it.next().context("a value after the flag")?.parse()?)
        };
        match flag.as_str() {
            "--jobs" => args.jobs = value()?,
            "--concurrency" => args.concurrency = value()?,
            "--rounds" => args.rounds = value()?,
            "--keep" => {
                let list = it.next().context("a list of services after --keep")?;
                for name in list.split(',').filter(|n| !n.is_empty()) {
                    let service = Service::ALL
                        .into_iter()
                        .find(|s| s.name() == name)
                        .with_context(|| format!("no service {name}"))?;
                    args.keep.push(service);
                }
            }
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    anyhow::ensure!(
        args.jobs >= 1 && args.concurrency >= 1 && args.rounds >= 1,
        "--jobs, --concurrency, --rounds ≥ 1"
    );
    Ok(args)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let maestro = Bench::start().await?;
    let warmup = (args.jobs / 4).clamp(50, 500);
    println!("MAESTRO: warming up with {warmup} jobs");
    maestro.jobs(warmup, args.concurrency).await?;
    let bodies = recorded_bodies(&maestro.llm_requests().await?)?;
    let turns = Turns::recorded(maestro.target().pool()).await?;
    let floor = Floor::start(bodies, &turns, &args.keep).await?;
    println!("floor: warming up with {warmup} jobs");
    floor.target.jobs(warmup, args.concurrency).await?;
    let mut rows: Vec<(String, Figures)> = Vec::new();
    for round in 0..args.rounds {
        println!(
            "round {}: {} jobs, {} at a time",
            round + 1,
            args.jobs,
            args.concurrency
        );
        let maestro_first = round % 2 == 0;
        for which in [maestro_first, !maestro_first] {
            let (name, target) = match which {
                true => ("MAESTRO", maestro.target()),
                false => (floor.name.as_str(), &floor.target),
            };
            let figures = target.measure(args.jobs, args.concurrency).await?;
            println!("--- {name}");
            figures.print();
            target.stages(figures.from).await?;
            let requests = match which {
                true => maestro.llm_requests().await?,
                false => floor.stack.llm.requests().await?,
            };
            // Each job's two LLM requests are known only when jobs run one at a time.
            if args.concurrency == 1
                && let Some(split) = around_llm(target.pool(), &requests, figures.from).await?
            {
                println!(
                    "LLM:         first request → second request p50 {:.2} ms \
                     (the first reply, the tool call, the turn's events and the second request)",
                    split.first_to_second
                );
                println!(
                    "             claim's start → first request p50 {:.2} ms; \
                     second request → the end's commit start p50 {:.2} ms",
                    split.claim_to_first, split.second_to_end
                );
            }
            rows.push((name.to_owned(), figures));
        }
    }
    println!();
    println!("| run | jobs/s | p50 ms | p99 ms | CPU ms per job | writing transactions per job |");
    println!("|---|---|---|---|---|---|");
    for (name, f) in &rows {
        println!(
            "| {name} | {:.0} | {:.1} | {:.1} | {:.2} | {:.1} |",
            f.jobs_per_s(),
            f.pct(0.5),
            f.pct(0.99),
            f.per_job(f.cpu_ms),
            f.per_job(f.pg.writes)
        );
    }
    Ok(())
}

/// The first and the second chat request (turns 0 and 1) of the last reference job MAESTRO ran.
fn recorded_bodies(requests: &[Value]) -> anyhow::Result<[Bytes; 2]> {
    let last_of_turn = |turn: i64| -> anyhow::Result<Bytes> {
        let request = requests
            .iter()
            .rev()
            .find(|r| r["turn"].as_i64() == Some(turn))
            .with_context(|| format!("no recorded request of turn {turn}"))?;
        Ok(Bytes::from(serde_json::to_vec(&request["body"])?))
    };
    Ok([last_of_turn(0)?, last_of_turn(1)?])
}

/// The p50s (ms) of a job's stretches around its two LLM calls, at concurrency 1.
struct LlmSplit {
    /// From the claim (its `running` event's transaction start) to the first chat request
    /// reaching the scripted LLM.
    claim_to_first: f64,
    /// From the first request to the second (the first reply, the tool call, the turn's events).
    first_to_second: f64,
    /// From the second request to the start of the transaction that ends the job.
    second_to_end: f64,
}

/// [`LlmSplit`] over the jobs of tasks created since `from`, run one at a time: a job's
/// requests are the ones that came after the end of the job before (the first job: after
/// `from`) and by its own end; `None` when no job had exactly its two.
async fn around_llm(
    pool: &sqlx::PgPool,
    requests: &[Value],
    from: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<Option<LlmSplit>> {
    let jobs: Vec<(i64, i64)> = sqlx::query_as(
        r#"
        SELECT (extract(epoch FROM min(e.created_at) FILTER (WHERE e.payload->>'status' = 'running')) * 1e6)::int8,
               (extract(epoch FROM max(e.created_at) FILTER (WHERE e.payload->>'status' = 'succeeded')) * 1e6)::int8
          FROM events e JOIN tasks k ON k.id = e.task_id AND k.created_at >= $1
         GROUP BY e.task_id
        HAVING count(*) FILTER (WHERE e.payload->>'status' IN ('running', 'succeeded')) = 2
         ORDER BY 1
        "#,
    )
    .bind(from)
    .fetch_all(pool)
    .await?;
    let mut arrivals: Vec<(i64, i64)> = requests
        .iter()
        .filter_map(|r| Some((r["received_at_us"].as_i64()?, r["turn"].as_i64()?)))
        .collect();
    arrivals.sort_unstable();
    let ms = |us: i64| us as f64 / 1000.0;
    let (mut claim_to_first, mut first_to_second, mut second_to_end) =
        (Vec::new(), Vec::new(), Vec::new());
    let mut next = arrivals.partition_point(|(at, _)| *at < from.timestamp_micros());
    for (claimed, ended) in jobs {
        let taken = arrivals[next..].partition_point(|(at, _)| *at <= ended);
        if let [(first, 0), (second, 1)] = arrivals[next..next + taken] {
            claim_to_first.push(ms(first - claimed));
            first_to_second.push(ms(second - first));
            second_to_end.push(ms(ended - second));
        }
        next += taken;
    }
    if claim_to_first.is_empty() {
        return Ok(None);
    }
    let p50 = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(Some(LlmSplit {
        claim_to_first: p50(claim_to_first),
        first_to_second: p50(first_to_second),
        second_to_end: p50(second_to_end),
    }))
}

/// The floor's stack: a testkit stack (its own database, nats-server and scripted LLM) with
/// the kept MAESTRO services, and floor roles for the others.
struct Floor {
    /// `floor`, or `floor + worker, …` with the services kept.
    name: String,
    target: Target,
    _processes: Vec<Process>,
    stack: Stack,
    _dir: tempfile::TempDir,
}

impl Floor {
    async fn start(bodies: [Bytes; 2], turns: &Turns, keep: &[Service]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut options = StackOptions::new(crate::reference::scenario())
            .env("RUST_LOG", "warn")
            .env("WORKER_CONCURRENCY", "256")
            .env("DB_MAX_CONNECTIONS", "16")
            .env("RELAY_POLL_MS", "1000");
        options.services = keep.to_vec();
        let stack = Stack::spawn(options).await?;
        let client = stack.nats.client().await?;
        let subjects = Subjects::new(&stack.prefix)?;
        let js = async_nats::jetstream::new(client.clone());
        setup::ensure_streams(&js, &subjects, &StreamSettings::default()).await?;
        std::fs::write(dir.path().join("turns.json"), serde_json::to_vec(turns)?)?;
        for (turn, body) in bodies.iter().enumerate() {
            std::fs::write(dir.path().join(format!("turn-{}.json", turn + 1)), body)?;
        }
        let env: Vec<(String, String)> = [
            ("DATABASE_URL", stack.db.url.as_str()),
            ("NATS_URL", stack.nats.url.as_str()),
            ("SUBJECT_PREFIX", stack.prefix.as_str()),
            ("LLM_BASE_URL", stack.llm.base_url.as_str()),
            ("WORKSPACES_DIR", &stack.workspaces.display().to_string()),
            ("FLOOR_DIR", &dir.path().display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let exe = std::env::current_exe()?;
        let mut processes = Vec::new();
        let mut gateway = None;
        for (service, role) in ROLES {
            if keep.contains(&service) {
                continue;
            }
            let link = dir.path().join(format!("floor-{role}"));
            std::os::unix::fs::symlink(&exe, &link)?;
            let args = ["floor-role".to_owned(), role.to_owned()];
            let process = Process::start(role, &link, &args, &env, dir.path()).await?;
            if service == Service::ApiGateway {
                gateway = process.addr();
            }
            processes.push(process);
        }
        let tasks_url = match gateway {
            Some(addr) => format!("http://{addr}/api/local/tasks"),
            None => stack.url("/api/local/tasks"),
        };
        let target = Target::listen(
            maestro_testkit::http_client(),
            tasks_url,
            stack.token.clone(),
            &client,
            &stack.prefix,
            stack.db.pool.clone(),
        )
        .await?;
        let kept: Vec<&str> = keep.iter().map(|s| s.name()).collect();
        let name = match kept.is_empty() {
            true => "floor".to_owned(),
            false => format!("floor + {}", kept.join(", ")),
        };
        Ok(Self {
            name,
            target,
            _processes: processes,
            stack,
            _dir: dir,
        })
    }
}

/// Each MAESTRO service and the floor's role in its place.
const ROLES: [(Service, &str); 5] = [
    (Service::ApiGateway, "gateway"),
    (Service::Worker, "worker"),
    (Service::ToolRunner, "tools"),
    (Service::Scheduler, "relay"),
    (Service::Notifier, "notifier"),
];

/// What every role connects to.
#[derive(Clone)]
struct Env {
    pool: maestro_db::PgPool,
    bus: Bus,
    llm: String,
    dir: std::path::PathBuf,
    workspaces: std::path::PathBuf,
}

impl Env {
    async fn connect(role: &str) -> anyhow::Result<Self> {
        let var = |name: &str| std::env::var(name).with_context(|| format!("{name} is not set"));
        let pool = maestro_db::connect(&var("DATABASE_URL")?, 16).await?;
        let nats = maestro_messaging::connect(&var("NATS_URL")?, role).await?;
        let subjects = Subjects::new(&var("SUBJECT_PREFIX")?)?;
        Ok(Self {
            pool,
            bus: Bus::new(nats, subjects),
            llm: var("LLM_BASE_URL")?,
            dir: var("FLOOR_DIR")?.into(),
            workspaces: var("WORKSPACES_DIR")?.into(),
        })
    }
}

/// `maestro-bench floor-role <role>`: one of the floor's processes, until it is killed.
pub async fn role(role: &str) -> anyhow::Result<()> {
    let env = Env::connect(&format!("floor-{role}")).await?;
    match role {
        "gateway" => gateway(env).await,
        "worker" => worker(env).await,
        "tools" => tools(env).await,
        "relay" => relay(env).await,
        "notifier" => notifier(env).await,
        other => anyhow::bail!("no floor role {other}"),
    }
}

/// Announce readiness the way the testkit waits for it.
fn ready(addr: Option<std::net::SocketAddr>) {
    match addr {
        Some(addr) => println!("MAESTRO_READY addr={addr}"),
        None => println!("MAESTRO_READY floor"),
    }
}

const PROFILE: &str = "default";

/// The gateway: `POST /api/local/tasks` creates the task and its queued job in MAESTRO's
/// statement, publishes the `queued` event and the dispatch (with the opening), answers 201.
async fn gateway(env: Env) -> anyhow::Result<()> {
    let app = axum::Router::new()
        .route("/api/local/tasks", axum::routing::post(create))
        .with_state(Arc::new(env));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    ready(Some(listener.local_addr()?));
    axum::serve(listener, app).await?;
    Ok(())
}

async fn create(State(env): State<Arc<Env>>, body: Bytes) -> Response {
    #[derive(serde::Deserialize)]
    struct Create {
        instruction: String,
    }
    let Ok(Create { instruction }) = serde_json::from_slice(&body) else {
        let error =
            json!({"error": {"code": "invalid_body", "message": "expected {\"instruction\"}"}});
        return (StatusCode::UNPROCESSABLE_ENTITY, axum::Json(error)).into_response();
    };
    let owner = Owner::parse("bench").expect("a valid owner");
    let (task_id, job_id) = (TaskId::new(), JobId::new());
    let new = NewTask {
        id: task_id,
        job_id,
        owner: &owner,
        instruction: &instruction,
        piece: "chat",
        start_movement: None,
        model: None,
        idempotency_key: None,
        request_hash: "floor",
        profile: PROFILE,
        space_id: None,
        visibility: Default::default(),
        max_attempts: 3,
        context_id: None,
        message_id: None,
        push: None,
        attachments: &[],
    };
    match maestro_db::tasks::create_publishing(&env.pool, &new, Publish::Directly).await {
        Ok(Some((task, queued))) => {
            env.bus.publish_direct(queued).await;
            let dispatch = JobDispatch::new_task(task_id, job_id, true).with_opening(Opening {
                owner: owner.as_str().to_owned(),
                instruction,
                piece: "chat".to_owned(),
                start_movement: None,
                model: None,
                created_at: task.created_at,
                a2a_message_id: None,
                a2a_context_id: None,
            });
            env.bus
                .after_commit(AfterCommit::none().dispatch(PROFILE, dispatch))
                .await;
            (StatusCode::CREATED, axum::Json(json!({"id": task_id}))).into_response()
        }
        Ok(None) => StatusCode::CONFLICT.into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

/// The two turns' events, as MAESTRO's worker committed them for its last reference job
/// (read from its database after the warm-up): `[{kind, payload}]` of each turn's statement.
#[derive(serde::Serialize, serde::Deserialize)]
struct Turns {
    first: Vec<(EventKind, Value)>,
    last: Vec<(EventKind, Value)>,
}

impl Turns {
    /// The events of MAESTRO's last succeeded job: those after its `running` event up to its
    /// first `tool_result` are the first turn's, the rest up to `succeeded` the last turn's.
    async fn recorded(pool: &maestro_db::PgPool) -> anyhow::Result<Self> {
        let rows: Vec<(String, Value)> = sqlx::query_as(
            "SELECT kind, payload FROM events
              WHERE task_id = (SELECT task_id FROM jobs WHERE status = 'succeeded'
                                ORDER BY finished_at DESC LIMIT 1)
              ORDER BY seq",
        )
        .fetch_all(pool)
        .await?;
        let mut events = Vec::new();
        for (kind, payload) in rows {
            let kind = EventKind::parse(&kind).with_context(|| format!("event kind {kind}"))?;
            events.push((kind, payload));
        }
        let running = events
            .iter()
            .position(|(k, p)| *k == EventKind::JobState && p["status"] == "running")
            .context("no running event")?;
        let result = running
            + events[running..]
                .iter()
                .position(|(k, _)| *k == EventKind::ToolResult)
                .context("no tool result")?;
        let last: Vec<(EventKind, Value)> = events[result + 1..].to_vec();
        anyhow::ensure!(
            last.last()
                .is_some_and(|(k, p)| *k == EventKind::JobState && p["status"] == "succeeded"),
            "the last job did not end with `succeeded`"
        );
        Ok(Self {
            first: events[running + 1..=result].to_vec(),
            last,
        })
    }

    /// As event bodies, for the turns' statements.
    fn bodies(&self) -> anyhow::Result<[Vec<EventBody>; 2]> {
        let parts = |list: &[(EventKind, Value)]| -> anyhow::Result<Vec<EventBody>> {
            list.iter()
                .map(|(kind, payload)| Ok(EventBody::from_parts(*kind, payload.clone())?))
                .collect()
        };
        Ok([parts(&self.first)?, parts(&self.last)?])
    }
}

/// The worker's part of the floor.
struct Work {
    env: Env,
    http: reqwest::Client,
    bodies: [Bytes; 2],
    turns: [Vec<EventBody>; 2],
    /// Both turns' events, for one statement when the second reply comes within the commit
    /// wait.
    both: Vec<EventBody>,
    /// MAESTRO's worker's `WORKER_RESULTS_COMMIT_WAIT_MS`: how long the first turn's commit
    /// waits for the second reply, to be committed with it.
    commit_wait: Duration,
    /// Jobs run to their end whose dispatch delivery has not come yet, and deliveries whose
    /// job is still running: each delivery is acknowledged once its job has ended.
    deliveries: Mutex<Deliveries>,
    claims: tokio::sync::mpsc::UnboundedSender<ClaimRequest>,
}

type ClaimRequest = (JobId, tokio::sync::oneshot::Sender<Option<Claimed>>);

/// Make the claims that come in, those waiting together in one statement.
async fn claimer(env: Env, mut requests: tokio::sync::mpsc::UnboundedReceiver<ClaimRequest>) {
    while let Some(first) = requests.recv().await {
        let mut batch = vec![first];
        while batch.len() < 32 {
            match requests.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let ids: Vec<JobId> = batch.iter().map(|(id, _)| *id).collect();
        let claimed = maestro_db::claims::claim_many_traced(
            &env.pool,
            &ids,
            &[],
            "floor-worker",
            Duration::from_secs(30),
            &[],
            Publish::Directly,
        )
        .await;
        let mut claimed: HashMap<JobId, Claimed> = match claimed {
            Ok(claimed) => claimed.into_iter().map(|c| (c.job_id, c)).collect(),
            Err(e) => {
                eprintln!("claim: {e}");
                HashMap::new()
            }
        };
        for (id, tx) in batch {
            let _ = tx.send(claimed.remove(&id));
        }
    }
}

#[derive(Default)]
struct Deliveries {
    ended: HashSet<JobId>,
    waiting: HashMap<JobId, async_nats::jetstream::Message>,
}

/// The worker: starts each job at the dispatch's core copy (the hint), claims it while its
/// first LLM request is out (claims waiting together share a statement), streams the replies' deltas, calls the tool-runner, commits each
/// turn (the first turn's commit beside the second request), publishes the events, wakes the
/// relay for the notice, and acknowledges the JetStream delivery once the job is over.
async fn worker(env: Env) -> anyhow::Result<()> {
    let bodies = [
        Bytes::from(std::fs::read(env.dir.join("turn-1.json"))?),
        Bytes::from(std::fs::read(env.dir.join("turn-2.json"))?),
    ];
    let consumer = setup::jobs_consumer(
        &env.bus.js,
        &env.bus.subjects,
        PROFILE,
        &ConsumerSettings {
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            max_ack_pending: 10_000,
        },
    )
    .await?;
    let mut hints = env
        .bus
        .nats
        .subscribe(env.bus.subjects.dispatch(PROFILE))
        .await?;
    let turns =
        serde_json::from_slice::<Turns>(&std::fs::read(env.dir.join("turns.json"))?)?.bodies()?;
    let (claims, requests) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(claimer(env.clone(), requests));
    let work = Arc::new(Work {
        claims,
        env,
        http: maestro_testkit::http_client(),
        bodies,
        both: turns.concat(),
        turns,
        commit_wait: Duration::from_millis(
            std::env::var("WORKER_RESULTS_COMMIT_WAIT_MS").map_or(Ok(25), |v| v.parse())?,
        ),
        deliveries: Mutex::default(),
    });
    let mut deliveries = consumer.messages().await?;
    ready(None);
    let pulled = work.clone();
    tokio::spawn(async move {
        while let Some(Ok(message)) = deliveries.next().await {
            let Ok(dispatch) = serde_json::from_slice::<JobDispatch>(&message.payload) else {
                let _ = message.ack().await;
                continue;
            };
            let ended = {
                let mut d = pulled.deliveries.lock().expect("lock");
                let ended = d.ended.remove(&dispatch.job_id);
                if !ended {
                    d.waiting.insert(dispatch.job_id, message.clone());
                }
                ended
            };
            if ended {
                let _ = message.ack().await;
            }
        }
    });
    while let Some(hint) = hints.next().await {
        let Ok(dispatch) = serde_json::from_slice::<JobDispatch>(&hint.payload) else {
            continue;
        };
        let work = work.clone();
        tokio::spawn(async move {
            if let Err(e) = work.run(dispatch.task_id, dispatch.job_id).await {
                eprintln!("job {}: {e:#}", dispatch.job_id);
            }
        });
    }
    Ok(())
}

impl Work {
    async fn run(&self, task_id: TaskId, job_id: JobId) -> anyhow::Result<()> {
        let (claimed, first) = tokio::join!(self.claim(job_id), self.ask(&self.bodies[0]));
        let Some(Claimed {
            attempt, running, ..
        }) = claimed?
        else {
            return Ok(());
        };
        self.env
            .bus
            .publish_direct(running.into_iter().collect())
            .await;
        let fence = Fence { job_id, attempt };
        let (call, _) = self.reply(first?, task_id, job_id, 1, false).await?;
        let mut request =
            ToolExecRequest::internal((task_id, job_id), "call_0_0", &call, json!({}), 30_000);
        request.attempt = attempt;
        let result = self
            .env
            .bus
            .nats
            .request(
                self.env.bus.subjects.tools_exec(),
                Bytes::from(serde_json::to_vec(&request)?),
            )
            .await?;
        let reply: ToolExecReply = serde_json::from_slice(&result.payload)?;
        anyhow::ensure!(reply.ok, "the tool failed: {}", reply.output);
        // The turn's commit beside the next request, as MAESTRO's worker makes it: waiting for
        // the reply, to be committed with it, when there is a commit wait (its deltas held
        // back meanwhile: dropped when it comes within the wait, else published once the turn
        // is committed); else at once, the reply read after the commit.
        let second = async {
            let response = self.ask(&self.bodies[1]).await?;
            self.reply(response, task_id, job_id, 2, true).await
        };
        let commit_first = async {
            let appended = maestro_db::jobs::append_publishing(
                &self.env.pool,
                fence,
                &self.turns[0],
                None,
                &[],
                Publish::Directly,
            )
            .await?
            .map_err(|_| anyhow::anyhow!("fenced"))?;
            self.env.bus.publish_direct(appended.direct).await;
            anyhow::Ok(())
        };
        let both = if self.commit_wait.is_zero() {
            let (committed, second) =
                tokio::join!(commit_first, async { self.ask(&self.bodies[1]).await });
            committed?;
            self.reply(second?, task_id, job_id, 2, false).await?;
            false
        } else {
            tokio::pin!(second);
            tokio::select! {
                replied = &mut second => {
                    replied?;
                    true
                }
                () = tokio::time::sleep(self.commit_wait) => {
                    let (committed, replied) = tokio::join!(commit_first, second);
                    committed?;
                    let subject = self.env.bus.subjects.deltas(task_id, job_id, 2);
                    for fragment in replied?.1 {
                        self.env.bus.nats.publish(subject.clone(), fragment).await?;
                    }
                    false
                }
            }
        };
        let done = Transition {
            to: JobStatus::Succeeded,
            wait_reason: None,
            result: Some("ok".to_owned()),
            error: None,
            next_retry_at: None,
            refund_attempt: false,
            branch: None,
        };
        let appended = maestro_db::jobs::append_publishing(
            &self.env.pool,
            fence,
            if both { &self.both } else { &self.turns[1] },
            Some(&done),
            &[],
            Publish::Directly,
        )
        .await?
        .map_err(|_| anyhow::anyhow!("fenced"))?;
        self.env.bus.publish_direct(appended.direct).await;
        // The notice the final statement wrote is the relay's to publish.
        self.env.bus.after_commit(AfterCommit::events()).await;
        let delivery = {
            let mut d = self.deliveries.lock().expect("lock");
            let waiting = d.waiting.remove(&job_id);
            if waiting.is_none() {
                d.ended.insert(job_id);
            }
            waiting
        };
        if let Some(delivery) = delivery {
            delivery.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        Ok(())
    }

    /// Claim the job, in one statement with the claims that wait while one is being made
    /// (as MAESTRO's claimer does, up to 32).
    async fn claim(&self, job_id: JobId) -> anyhow::Result<Option<Claimed>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.claims
            .send((job_id, tx))
            .map_err(|_| anyhow::anyhow!("the claimer is gone"))?;
        Ok(rx.await?)
    }

    /// Send a chat request; the response's head.
    async fn ask(&self, body: &Bytes) -> anyhow::Result<reqwest::Response> {
        Ok(self
            .http
            .post(format!("{}/chat/completions", self.env.llm))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await?
            .error_for_status()?)
    }

    /// Read a streamed reply: publish its text deltas (or, `held`, return them unpublished),
    /// return the name of its tool call.
    async fn reply(
        &self,
        response: reqwest::Response,
        task_id: TaskId,
        job_id: JobId,
        turn: i64,
        hold: bool,
    ) -> anyhow::Result<(String, Vec<Bytes>)> {
        let mut held = Vec::new();
        let mut stream = response.bytes_stream();
        let mut pending = Vec::new();
        let mut call = None;
        let subject = self.env.bus.subjects.deltas(task_id, job_id, turn);
        while let Some(chunk) = stream.next().await {
            pending.extend_from_slice(&chunk?);
            while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = pending.drain(..end + 2).collect();
                let Some(data) = event.strip_prefix(b"data: ") else {
                    continue;
                };
                let Ok(chunk) = serde_json::from_slice::<Value>(data) else {
                    continue; // `[DONE]`
                };
                let delta = &chunk["choices"][0]["delta"];
                if let Some(text) = delta["content"].as_str() {
                    let fragment = json!({"job_id": job_id, "turn": turn, "text": text});
                    let fragment = Bytes::from(fragment.to_string());
                    match hold {
                        true => held.push(fragment),
                        false => self.env.bus.nats.publish(subject.clone(), fragment).await?,
                    }
                }
                if let Some(name) = delta["tool_calls"][0]["function"]["name"].as_str() {
                    call = Some(name.to_owned());
                }
            }
        }
        Ok((call.context("a reply without a tool call")?, held))
    }
}

/// The tool-runner: `list_files` of the task's workspace (made on first use), unconfined.
async fn tools(env: Env) -> anyhow::Result<()> {
    let mut requests = env
        .bus
        .nats
        .queue_subscribe(env.bus.subjects.tools_exec(), "tool-runners".to_owned())
        .await?;
    ready(None);
    while let Some(request) = requests.next().await {
        let (nats, root) = (env.bus.nats.clone(), env.workspaces.clone());
        tokio::spawn(async move {
            let Some(reply) = request.reply else { return };
            let reply_with = |ok: bool, output: String| ToolExecReply {
                ok,
                output,
                not_run: false,
            };
            let answer = match serde_json::from_slice::<ToolExecRequest>(&request.payload) {
                Ok(call) => {
                    let dir = root.join(call.task_id.to_string());
                    match tokio::task::spawn_blocking(move || list(&dir)).await {
                        Ok(Ok(names)) if names.is_empty() => reply_with(true, "(nothing)".into()),
                        Ok(Ok(names)) => reply_with(true, names.join("\n")),
                        Ok(Err(e)) => reply_with(false, e.to_string()),
                        Err(e) => reply_with(false, e.to_string()),
                    }
                }
                Err(e) => reply_with(false, format!("malformed tool request: {e}")),
            };
            let payload = serde_json::to_vec(&answer).unwrap_or_default();
            let _ = nats.publish(reply, Bytes::from(payload)).await;
        });
    }
    Ok(())
}

fn list(dir: &Path) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    std::fs::read_dir(dir)?
        .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// The relay: publishes the outbox rows that are its own (the task's notice) when woken,
/// and deletes the rows whose events their writers published, every 100 ms.
async fn relay(env: Env) -> anyhow::Result<()> {
    let mut wakes = env
        .bus
        .nats
        .subscribe(env.bus.subjects.outbox_wake())
        .await?;
    let mut published = env
        .bus
        .nats
        .subscribe(env.bus.subjects.outbox_published())
        .await?;
    ready(None);
    let forget = env.clone();
    let keys: Arc<Mutex<Vec<String>>> = Arc::default();
    let batch = keys.clone();
    tokio::spawn(async move {
        while let Some(message) = published.next().await {
            let text = String::from_utf8_lossy(&message.payload);
            batch
                .lock()
                .expect("lock")
                .extend(text.lines().map(str::to_owned));
        }
    });
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(100));
        loop {
            every.tick().await;
            let due = std::mem::take(&mut *keys.lock().expect("lock"));
            if !due.is_empty() {
                let _ = maestro_db::outbox::forget_published(&forget.pool, &due).await;
            }
        }
    });
    // MAESTRO's drain: the relay's rows locked, published (acknowledgements awaited) and
    // deleted, batch by batch.
    let relay = maestro_scheduler::relay::Relay {
        pool: env.pool.clone(),
        bus: env.bus.clone(),
        batch: 100,
        poll: Duration::from_secs(1),
    };
    while wakes.next().await.is_some() {
        // Wake-ups that came during a drain count once.
        while let Some(Some(_)) = futures::FutureExt::now_or_never(wakes.next()) {}
        if let Err(e) = relay.drain(false).await {
            eprintln!("drain: {e:#}");
        }
    }
    Ok(())
}

/// The notifier: the job state copies it consumes (none for the reference job, which has no
/// A2A push configs), acknowledged.
async fn notifier(env: Env) -> anyhow::Result<()> {
    let consumer = setup::job_state_consumer(
        &env.bus.js,
        &env.bus.subjects,
        &ConsumerSettings {
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            max_ack_pending: 1000,
        },
    )
    .await?;
    let mut messages = consumer.messages().await?;
    ready(None);
    while let Some(Ok(message)) = messages.next().await {
        let _ = message.ack().await;
    }
    Ok(())
}
