//! `maestro`: MAESTRO from a terminal. Tasks (create, list, show, watch, cancel, continue,
//! comment), what paused jobs wait for (list, approve, deny, answer, resolve, token),
//! schedules, webhooks, the inbox and `whoami` — every command a call of the gateway's REST API, with
//! `--json` printing the API's own answers. docs/cli.md.
//!
//! Exit codes: 0 done (a watched task succeeded), 1 an error (the message says which; with
//! `--json` the API's error body is printed), 2 a usage error, and for a watched task 3
//! failed, 4 cancelled, 5 waiting for a person (`--exit-on-pause`).

mod api;
mod config;
mod render;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use maestro_api::{CreateTask, Task, TaskPage};
use maestro_domain::TaskId;
use serde_json::{Value, json};

use crate::api::{Api, ApiError};
use crate::config::Config;

#[derive(Parser)]
#[command(
    name = "maestro",
    version,
    about = "MAESTRO from a terminal: tasks, live streams, approvals, schedules, webhooks, the inbox"
)]
struct Cli {
    /// The gateway's URL [default: from the config file, else http://127.0.0.1:8080].
    #[arg(long, global = true, env = "MAESTRO_URL")]
    url: Option<String>,
    /// An API token (one of API_TOKENS, or one an admin made) [default: from the config file].
    #[arg(long, global = true, env = "MAESTRO_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The config file (TOML: `url`, `token`) [default: ~/.config/maestro/config.toml].
    #[arg(long, global = true, env = "MAESTRO_CONFIG")]
    config: Option<PathBuf>,
    /// Print the API's JSON answers (a stream: one JSON object per line).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Tasks: create, list, show, watch, cancel, continue, comment, file.
    #[command(subcommand)]
    Tasks(TaskCommand),
    /// What paused jobs wait for: list, approve, deny, answer, resolve, token.
    #[command(subcommand)]
    Actions(ActionCommand),
    /// Schedules that start tasks on a cron.
    #[command(subcommand)]
    Schedules(ScheduleCommand),
    /// Webhook subscriptions.
    #[command(subcommand)]
    Webhooks(WebhookCommand),
    /// Notifications: outcomes, pauses and decisions of your tasks, newest first.
    Inbox(InboxArgs),
    /// Who the token stands for (and whether it is an admin's).
    Whoami,
}

#[derive(Subcommand)]
enum TaskCommand {
    /// Create a task (and with --watch follow it to its end).
    Create(CreateArgs),
    /// Your tasks, newest first.
    List(ListArgs),
    /// One task: its latest job, files and what it waits for.
    Show { id: String },
    /// Follow a task's live stream until its latest job is over; the exit code is its outcome.
    Watch(WatchArgs),
    /// Cancel the task's latest job (and its subtasks').
    Cancel { id: String },
    /// Carry a finished task on with a new instruction; the agent remembers what it did.
    Continue(ContinueArgs),
    /// Comment on a task: an interjection while it runs, an answer to its question, or a
    /// follow-up job once it is over.
    Comment { id: String, body: String },
    /// Print a file the task's jobs wrote (`--output` to save it).
    File {
        id: String,
        path: String,
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

#[derive(Args)]
struct CreateArgs {
    instruction: String,
    #[command(flatten)]
    template: Template,
    /// `private`, `space` or `public`.
    #[arg(long)]
    visibility: Option<String>,
    /// The worker profile its jobs go to.
    #[arg(long)]
    profile: Option<String>,
    /// A file to attach (repeatable): placed at attachments/<name> in the workspace.
    #[arg(long = "attach", value_name = "FILE")]
    attachments: Vec<PathBuf>,
    /// Makes a retried create return the task the first one made.
    #[arg(long)]
    idempotency_key: Option<String>,
    #[command(flatten)]
    follow: FollowArgs,
}

/// What a new task runs with, for a create and a schedule's tasks alike.
#[derive(Args)]
struct Template {
    /// A piece, or `auto` for the router [default: the deployment's or the space's].
    #[arg(long)]
    piece: Option<String>,
    /// A model [default: the piece's, the space's or the deployment's].
    #[arg(long)]
    model: Option<String>,
    /// The space the task goes in (a space id).
    #[arg(long)]
    space: Option<String>,
}

#[derive(Args)]
struct FollowArgs {
    /// Follow the task's stream until it is over (exit code: its outcome).
    #[arg(long)]
    watch: bool,
    /// With --watch: stop with exit code 5 when the task waits for a person.
    #[arg(long)]
    exit_on_pause: bool,
}

#[derive(Args)]
struct ListArgs {
    /// Only tasks whose latest job is in this state (queued, running, succeeded, failed,
    /// cancelled, retry, waiting_human, waiting_subtasks).
    #[arg(long)]
    state: Option<String>,
    /// Only tasks of this space.
    #[arg(long)]
    space: Option<String>,
    /// Only tasks whose instruction contains this text (case-insensitive).
    #[arg(long)]
    search: Option<String>,
    /// How many to show.
    #[arg(long, default_value_t = 20)]
    limit: usize,
}

#[derive(Args)]
struct WatchArgs {
    id: String,
    /// Stop with exit code 5 when the task waits for a person.
    #[arg(long)]
    exit_on_pause: bool,
}

#[derive(Args)]
struct ContinueArgs {
    id: String,
    instruction: String,
    #[arg(long)]
    piece: Option<String>,
    #[arg(long)]
    model: Option<String>,
    #[command(flatten)]
    follow: FollowArgs,
}

#[derive(Subcommand)]
enum ActionCommand {
    /// What the task (and every task below it) waits for.
    List {
        task: String,
        /// Every item the task ever had, decided ones too.
        #[arg(long)]
        all: bool,
    },
    /// Approve a tool or package request: exactly the call you were shown runs.
    Approve {
        task: String,
        action: String,
        /// The arguments hash `actions list` showed (or its start): refused if the call changed.
        #[arg(long)]
        arguments_hash: Option<String>,
        /// `once` (this call) or `task` (the tool for every later call of the task).
        #[arg(long, default_value = "once", value_parser = ["once", "task"])]
        scope: String,
        /// A note kept with the decision.
        #[arg(long)]
        note: Option<String>,
    },
    /// Deny a tool or package request; the model is told, with the note.
    Deny {
        task: String,
        action: String,
        /// The arguments hash `actions list` showed (or its start): refused if the call changed.
        #[arg(long)]
        arguments_hash: Option<String>,
        /// Shown to the model with the denial (why, what to do instead).
        #[arg(long)]
        note: Option<String>,
    },
    /// Answer the question the task asks (a comment on the task).
    Answer { task: String, text: String },
    /// Say whether a side effect of unknown outcome took effect.
    Resolve {
        task: String,
        action: String,
        #[arg(value_parser = ["happened", "not-happened"])]
        outcome: String,
    },
    /// Store your token for an MCP server (read from standard input, never an argument) and
    /// resume the jobs that waited for it.
    Token { server: String },
}

#[derive(Subcommand)]
enum ScheduleCommand {
    /// Your schedules.
    List,
    /// One schedule, with its cron in words.
    Show { id: String },
    /// A schedule that starts a task at each time the cron names.
    Create(ScheduleArgs),
    /// Stop it firing until resumed.
    Pause { id: String },
    /// Fire again from the next fire time (the times it missed while paused do not run).
    Resume { id: String },
    /// Start its task now, once.
    Run { id: String },
    /// What each fire did.
    Runs { id: String },
    /// Delete it and its runs (its tasks stay).
    Delete { id: String },
}

#[derive(Args)]
struct ScheduleArgs {
    /// 5 fields (or 6 with seconds), or @hourly, @daily, …
    #[arg(long)]
    cron: String,
    /// What each of its tasks is asked to do.
    #[arg(long)]
    instruction: String,
    /// A name to tell it by.
    #[arg(long)]
    name: Option<String>,
    /// An IANA zone the cron is read in [default: UTC].
    #[arg(long)]
    timezone: Option<String>,
    #[command(flatten)]
    template: Template,
    /// skip, allow or queue.
    #[arg(long)]
    overlap: Option<String>,
}

#[derive(Subcommand)]
enum WebhookCommand {
    /// Your subscriptions.
    List,
    /// Subscribe a URL; the signing secret is shown once.
    Create {
        /// The receiver's URL (named apart from the global `--url`, the gateway's).
        #[arg(value_name = "URL")]
        receiver: String,
        /// An event type (repeatable) [default: all].
        #[arg(long = "event")]
        events: Vec<String>,
    },
    /// What was delivered to it, and how it went.
    Deliveries {
        id: String,
    },
    Delete {
        id: String,
    },
}

#[derive(Args)]
struct InboxArgs {
    /// Only unread items.
    #[arg(long)]
    unread: bool,
    /// Mark everything shown read.
    #[arg(long)]
    mark_read: bool,
    #[arg(long, default_value_t = 20)]
    limit: usize,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    let config = match Config::resolve(cli.url, cli.token, cli.config) {
        Ok(config) => config,
        Err(e) => return fail(json, &e),
    };
    let api = match Api::new(config) {
        Ok(api) => api,
        Err(e) => return fail(json, &e),
    };
    match run(&api, cli.command, json).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => fail(json, &e),
    }
}

fn fail(json: bool, e: &anyhow::Error) -> ExitCode {
    match e.downcast_ref::<ApiError>() {
        Some(api) if json => render::json(&api.to_json()),
        _ => {}
    }
    eprintln!("maestro: {e:#}");
    ExitCode::from(1)
}

async fn run(api: &Api, command: Command, json: bool) -> anyhow::Result<u8> {
    match command {
        Command::Tasks(command) => tasks(api, command, json).await,
        Command::Actions(command) => actions(api, command, json).await,
        Command::Schedules(command) => schedules(api, command, json).await,
        Command::Webhooks(command) => webhooks(api, command, json).await,
        Command::Inbox(args) => inbox(api, args, json).await,
        Command::Whoami => {
            let me: maestro_api::Me = api.get("/api/local/me").await?;
            show(json, &me, |me| {
                let admin = if me.admin { " (admin)" } else { "" };
                println!("{}{admin} at {}", me.owner, api.url(""));
            });
            Ok(0)
        }
    }
}

fn task_id(raw: &str) -> anyhow::Result<TaskId> {
    raw.parse()
        .map_err(|_| anyhow::anyhow!("{raw:?} is not a task id (a UUID)"))
}

/// The answer of a create or continue: with `--json` and a stream to follow, one line like
/// the stream's items (so the whole output is one JSON object per line).
fn announce(
    json: bool,
    follow: &FollowArgs,
    task: &Task,
    human: impl FnOnce(&Task),
) -> anyhow::Result<()> {
    if json && (follow.watch || follow.exit_on_pause) {
        render::json_line(&serde_json::to_value(task)?);
    } else {
        show(json, task, human);
    }
    Ok(())
}

/// Print a one-shot answer: its JSON, or `human` of it.
fn show<T: serde::Serialize>(json: bool, value: &T, human: impl FnOnce(&T)) {
    if json {
        render::json(value);
    } else {
        human(value);
    }
}

async fn tasks(api: &Api, command: TaskCommand, json: bool) -> anyhow::Result<u8> {
    match command {
        TaskCommand::Create(args) => {
            let (task, replayed) = create(api, &args).await?;
            announce(json, &args.follow, &task, |t| {
                if replayed {
                    println!(
                        "task {} already existed for this idempotency key ({}); nothing new made",
                        t.id(),
                        render::state(t)
                    );
                } else {
                    println!("created task {} ({})", t.id(), render::state(t));
                }
            })?;
            follow(api, task.id(), &args.follow, json).await
        }
        TaskCommand::List(args) => {
            let tasks = list(api, &args).await?;
            if json {
                render::json(&json!({"tasks": tasks}));
            } else {
                render::task_table(&tasks);
            }
            Ok(0)
        }
        TaskCommand::Show { id } => {
            let id = task_id(&id)?;
            let task: Task = api.get(&format!("/api/local/tasks/{id}")).await?;
            // Files are the creator's: another reader sees the task without them.
            let files: Value = api
                .get(&format!("/api/local/tasks/{id}/files"))
                .await
                .unwrap_or_else(|_| json!({"files": []}));
            let actions: Value = api
                .get(&format!("/api/local/tasks/{id}/required-actions"))
                .await?;
            if json {
                let mut whole = serde_json::to_value(&task)?;
                whole["files"] = files["files"].clone();
                whole["required_actions"] = actions["required_actions"].clone();
                render::json(&whole);
                return Ok(0);
            }
            render::task(&task);
            for file in files["files"].as_array().into_iter().flatten() {
                println!("file        {}", file["path"].as_str().unwrap_or_default());
            }
            for item in actions["required_actions"].as_array().into_iter().flatten() {
                println!("{}", render::action_line(&id.to_string(), item));
            }
            Ok(0)
        }
        TaskCommand::Watch(args) => {
            let id = task_id(&args.id)?;
            let follow = FollowArgs {
                watch: true,
                exit_on_pause: args.exit_on_pause,
            };
            follow_task(api, id, &follow, json).await
        }
        TaskCommand::Cancel { id } => {
            let id = task_id(&id)?;
            let task: Task = api
                .post(&format!("/api/local/tasks/{id}/cancel"), &json!({}))
                .await?;
            show(json, &task, |t| {
                println!("task {} {}", t.id(), render::state(t))
            });
            Ok(0)
        }
        TaskCommand::Continue(args) => {
            let id = task_id(&args.id)?;
            let body = maestro_api::ContinueTask {
                instruction: args.instruction.clone(),
                piece: args.piece.clone(),
                model: args.model.clone(),
            };
            let task: Task = api
                .post(&format!("/api/local/tasks/{id}/continue"), &body)
                .await?;
            announce(json, &args.follow, &task, |t| {
                let job = t.task.latest_job.as_ref().map_or(0, |j| j.job_no);
                println!("task {} continues with job #{job}", t.id());
            })?;
            follow(api, id, &args.follow, json).await
        }
        TaskCommand::Comment { id, body } => {
            let id = task_id(&id)?;
            let comment: Value = api
                .post(
                    &format!("/api/local/tasks/{id}/comments"),
                    &json!({"body": body}),
                )
                .await?;
            show(json, &comment, |c| {
                println!(
                    "comment {} → {}",
                    c["id"].as_str().unwrap_or("?"),
                    c["routed_to"].as_str().unwrap_or("?")
                );
            });
            Ok(0)
        }
        TaskCommand::File { id, path, output } => {
            let id = task_id(&id)?;
            let encoded: Vec<String> = path.split('/').map(encode).collect();
            let bytes = api
                .bytes(&format!(
                    "/api/local/tasks/{id}/files/{}",
                    encoded.join("/")
                ))
                .await?;
            match output {
                Some(file) => std::fs::write(&file, &bytes)?,
                None => std::io::Write::write_all(&mut std::io::stdout(), &bytes)?,
            }
            Ok(0)
        }
    }
}

/// Percent-encode a path (its `/` kept) or a query value.
fn encode(text: &str) -> String {
    maestro_domain::tools::url_path(text)
}

/// Percent-encode one path segment (an id, a server's name): a `/` in it is `%2F`.
fn segment(text: &str) -> String {
    encode(text).replace('/', "%2F")
}

/// Create the task; whether the gateway answered an earlier create with the same key.
async fn create(api: &Api, args: &CreateArgs) -> anyhow::Result<(Task, bool)> {
    let body = CreateTask {
        instruction: args.instruction.clone(),
        piece: args.template.piece.clone(),
        model: args.template.model.clone(),
        space_id: args
            .template
            .space
            .as_deref()
            .map(|s| {
                s.parse()
                    .map_err(|_| anyhow::anyhow!("{s:?} is not a space id"))
            })
            .transpose()?,
        visibility: args
            .visibility
            .as_deref()
            .map(|v| serde_json::from_value(json!(v)))
            .transpose()
            .map_err(|_| anyhow::anyhow!("--visibility is private, space or public"))?,
        profile: args.profile.clone(),
        start_movement: None,
    };
    let mut request = api.request(reqwest::Method::POST, "/api/local/tasks");
    if let Some(key) = &args.idempotency_key {
        request = request.header("idempotency-key", key);
    }
    let request = if args.attachments.is_empty() {
        request.json(&body)
    } else {
        let part = reqwest::multipart::Part::text(serde_json::to_string(&body)?)
            .mime_str("application/json")?;
        let mut form = reqwest::multipart::Form::new().part("task", part);
        for path in &args.attachments {
            let bytes = std::fs::read(path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "attachment".to_owned());
            let part = reqwest::multipart::Part::bytes(bytes)
                .file_name(name.clone())
                .mime_str(media_type(&name))?;
            form = form.part("file", part);
        }
        request.multipart(form)
    };
    Ok(api.send_replayable(request).await?)
}

/// The media type a file is sent as, from its extension (the gateway accepts a known set).
fn media_type(name: &str) -> &'static str {
    match name
        .rsplit('.')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
        .as_str()
    {
        "txt" | "md" | "csv" | "log" | "rs" | "py" | "js" | "ts" | "sh" | "html" | "css" => {
            "text/plain"
        }
        "json" => "application/json",
        "yaml" | "yml" => "application/yaml",
        "toml" => "application/toml",
        "xml" => "application/xml",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        "tar" => "application/x-tar",
        _ => "application/octet-stream",
    }
}

/// The caller's tasks, newest first, filtered by the gateway, paging until `limit` are found.
async fn list(api: &Api, args: &ListArgs) -> anyhow::Result<Vec<Task>> {
    let mut query = String::new();
    for (key, value) in [
        ("space", &args.space),
        ("state", &args.state),
        ("q", &args.search),
    ] {
        if let Some(value) = value {
            query.push_str(&format!("&{key}={}", encode(value)));
        }
    }
    let mut found: Vec<Task> = Vec::new();
    let mut before: Option<TaskId> = None;
    while found.len() < args.limit {
        let page_size = (args.limit - found.len()).clamp(1, 100);
        let mut path = format!("/api/local/tasks?limit={page_size}{query}");
        if let Some(before) = before {
            path.push_str(&format!("&before={before}"));
        }
        let page: TaskPage = api.get(&path).await?;
        found.extend(page.tasks);
        match page.next_before {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    Ok(found)
}

/// After a create or continue: follow the task when asked to.
async fn follow(api: &Api, id: TaskId, follow: &FollowArgs, json: bool) -> anyhow::Result<u8> {
    if follow.watch || follow.exit_on_pause {
        follow_task(api, id, follow, json).await
    } else {
        Ok(0)
    }
}

async fn follow_task(api: &Api, id: TaskId, follow: &FollowArgs, json: bool) -> anyhow::Result<u8> {
    let options = watch::Options {
        json,
        exit_on_pause: follow.exit_on_pause,
    };
    let outcome = watch::watch(api, id, options).await?;
    if json {
        let task: Value = api.get(&format!("/api/local/tasks/{id}")).await?;
        render::json_line(&json!({"outcome": outcome.name(), "task": task}));
    } else if outcome == watch::Outcome::Paused {
        eprintln!("maestro: the task waits for a person: maestro actions list {id}");
    }
    Ok(outcome.exit_code())
}

async fn actions(api: &Api, command: ActionCommand, json: bool) -> anyhow::Result<u8> {
    match command {
        ActionCommand::List { task, all } => {
            let id = task_id(&task)?;
            let suffix = if all { "?all=true" } else { "" };
            let answer: Value = api
                .get(&format!("/api/local/tasks/{id}/required-actions{suffix}"))
                .await?;
            show(json, &answer, |a| {
                let items = a["required_actions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if items.is_empty() {
                    println!("nothing to decide");
                }
                for item in &items {
                    println!("{}", render::action_line(&id.to_string(), item));
                }
            });
            Ok(0)
        }
        ActionCommand::Approve {
            task,
            action,
            arguments_hash,
            scope,
            note,
        } => {
            let body = json!({"decision": "approve", "scope": scope, "note": note});
            let reviewed = arguments_hash.as_deref();
            decide(api, &task, &action, reviewed, body, json).await
        }
        ActionCommand::Deny {
            task,
            action,
            arguments_hash,
            note,
        } => {
            let body = json!({"decision": "deny", "note": note});
            let reviewed = arguments_hash.as_deref();
            decide(api, &task, &action, reviewed, body, json).await
        }
        ActionCommand::Resolve {
            task,
            action,
            outcome,
        } => {
            let decision = outcome.replace('-', "_");
            decide(
                api,
                &task,
                &action,
                None,
                json!({"decision": decision}),
                json,
            )
            .await
        }
        ActionCommand::Answer { task, text } => {
            let id = task_id(&task)?;
            let comment: Value = api
                .post(
                    &format!("/api/local/tasks/{id}/comments"),
                    &json!({"body": text}),
                )
                .await?;
            show(json, &comment, |c| {
                println!("answered ({})", c["routed_to"].as_str().unwrap_or("?"));
            });
            Ok(0)
        }
        ActionCommand::Token { server } => {
            let mut token = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut token)?;
            let token = token.trim();
            anyhow::ensure!(!token.is_empty(), "no token on standard input");
            let answer: Value = api
                .put(
                    &format!("/api/local/mcp-servers/{}/token", segment(&server)),
                    &json!({"token": token}),
                )
                .await?;
            show(json, &answer, |a| {
                println!(
                    "token stored for {server}; {} job(s) resumed",
                    a["resumed_jobs"].as_u64().unwrap_or(0)
                );
            });
            Ok(0)
        }
    }
}

/// Decide `action` of `task` (or of a task below it: the item's own task is asked). With
/// `reviewed` (the arguments hash, or its start, that `actions list` showed), a call whose
/// arguments changed since is refused here; without it the call as it is now is decided, and
/// said on stderr. Either way the gateway checks the hash it is sent (409 `arguments_changed`).
async fn decide(
    api: &Api,
    task: &str,
    action: &str,
    reviewed: Option<&str>,
    mut body: Value,
    json: bool,
) -> anyhow::Result<u8> {
    let id = task_id(task)?;
    let item = find_item(api, id, action).await?;
    if let Some(hash) = item["arguments_hash"].as_str() {
        match reviewed {
            Some(seen) if !hash.starts_with(seen) => anyhow::bail!(
                "the call changed since you reviewed it (its arguments hash is now {}): \
                 review it again with `maestro actions list {id}`",
                &hash[..hash.len().min(12)]
            ),
            Some(_) => {}
            None if !json => eprintln!(
                "maestro: deciding {}",
                render::action_line(task, &item).trim()
            ),
            None => {}
        }
        body["arguments_hash"] = json!(hash);
    }
    if body["note"].is_null() {
        body.as_object_mut().map(|b| b.remove("note"));
    }
    if item["kind"] == "package_request" {
        body.as_object_mut().map(|b| b.remove("scope"));
    }
    let owner_task = item["task_id"].as_str().unwrap_or(task).to_owned();
    let answer: Value = api
        .post(
            &format!(
                "/api/local/tasks/{}/required-actions/{}/decide",
                segment(&owner_task),
                segment(action)
            ),
            &body,
        )
        .await?;
    show(json, &answer, |a| {
        let status = a["required_action"]["status"].as_str().unwrap_or("?");
        let resumed = if a["resumed"] == true {
            "; the job resumes"
        } else {
            ""
        };
        println!("{action}: {status}{resumed}");
    });
    Ok(0)
}

/// The item `action` among what `task` and the tasks below it wait for, or else among every
/// item the task itself ever had (a decided one, so that deciding it again says so).
async fn find_item(api: &Api, task: TaskId, action: &str) -> anyhow::Result<Value> {
    for query in ["", "?all=true"] {
        let listing: Value = api
            .get(&format!("/api/local/tasks/{task}/required-actions{query}"))
            .await?;
        let found = listing["required_actions"]
            .as_array()
            .and_then(|items| items.iter().find(|i| i["id"] == action));
        if let Some(item) = found {
            return Ok(item.clone());
        }
    }
    anyhow::bail!("task {task} has no item {action} (see `maestro actions list {task}`)")
}

async fn schedules(api: &Api, command: ScheduleCommand, json: bool) -> anyhow::Result<u8> {
    let one = |s: &Value| {
        println!(
            "{}  {:<8}  {:<14}  next {}  {}",
            s["id"].as_str().unwrap_or("?"),
            s["status"].as_str().unwrap_or("?"),
            s["cron"].as_str().unwrap_or("?"),
            s["next_fire_at"].as_str().unwrap_or("-"),
            render::clip(
                s["name"]
                    .as_str()
                    .or(s["task"]["instruction"].as_str())
                    .unwrap_or(""),
                50
            )
        );
    };
    let path = |id: &str, action: &str| format!("/api/local/schedules/{}{action}", segment(id));
    match command {
        ScheduleCommand::List => {
            let answer: Value = api.get("/api/local/schedules?limit=100").await?;
            show(json, &answer, |a| {
                let items = a["schedules"].as_array().cloned().unwrap_or_default();
                if items.is_empty() {
                    println!("no schedules");
                }
                items.iter().for_each(one);
            });
        }
        ScheduleCommand::Show { id } => {
            let answer: Value = api.get(&path(&id, "")).await?;
            show(json, &answer, |s| {
                one(s);
                println!("  {}", s["description"].as_str().unwrap_or(""));
            });
        }
        ScheduleCommand::Create(args) => {
            let mut task = json!({"instruction": args.instruction});
            for (key, value) in [
                ("piece", &args.template.piece),
                ("model", &args.template.model),
                ("space_id", &args.template.space),
            ] {
                if let Some(value) = value {
                    task[key] = json!(value);
                }
            }
            let mut body = json!({"cron": args.cron, "task": task});
            for (key, value) in [
                ("name", &args.name),
                ("timezone", &args.timezone),
                ("overlap", &args.overlap),
            ] {
                if let Some(value) = value {
                    body[key] = json!(value);
                }
            }
            let answer: Value = api.post("/api/local/schedules", &body).await?;
            show(json, &answer, one);
        }
        ScheduleCommand::Pause { id } => {
            let answer: Value = api.post(&path(&id, "/pause"), &json!({})).await?;
            show(json, &answer, one);
        }
        ScheduleCommand::Resume { id } => {
            let answer: Value = api.post(&path(&id, "/resume"), &json!({})).await?;
            show(json, &answer, one);
        }
        ScheduleCommand::Run { id } => {
            let answer: Value = api.post(&path(&id, "/run"), &json!({})).await?;
            show(json, &answer, |a| {
                println!(
                    "run {}: task {}",
                    a["status"]
                        .as_str()
                        .or(a["run"]["status"].as_str())
                        .unwrap_or("started"),
                    a["task_id"]
                        .as_str()
                        .or(a["run"]["task_id"].as_str())
                        .or(a["task"]["id"].as_str())
                        .unwrap_or("-")
                );
            });
        }
        ScheduleCommand::Runs { id } => {
            let answer: Value = api.get(&path(&id, "/runs")).await?;
            show(json, &answer, |a| {
                for run in a["runs"].as_array().into_iter().flatten() {
                    println!(
                        "{}  {:<8}  task {}",
                        run["fire_time"].as_str().unwrap_or("?"),
                        run["status"].as_str().unwrap_or("?"),
                        run["task_id"].as_str().unwrap_or("-")
                    );
                }
            });
        }
        ScheduleCommand::Delete { id } => {
            api.delete(&path(&id, "")).await?;
            show(json, &json!({"deleted": id}), |_| println!("deleted {id}"));
        }
    }
    Ok(0)
}

async fn webhooks(api: &Api, command: WebhookCommand, json: bool) -> anyhow::Result<u8> {
    match command {
        WebhookCommand::List => {
            let answer: Value = api.get("/api/webhooks").await?;
            show(json, &answer, |a| {
                let items = a["webhooks"].as_array().cloned().unwrap_or_default();
                if items.is_empty() {
                    println!("no webhooks");
                }
                for hook in &items {
                    let types: Vec<&str> = hook["event_types"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    println!(
                        "{}  {:<8}  {}  [{}]",
                        hook["id"].as_str().unwrap_or("?"),
                        hook["status"].as_str().unwrap_or("?"),
                        hook["url"].as_str().unwrap_or("?"),
                        types.join(", ")
                    );
                }
            });
        }
        WebhookCommand::Create { receiver, events } => {
            let mut body = json!({"url": receiver});
            if !events.is_empty() {
                body["event_types"] = json!(events);
            }
            let answer: Value = api.post("/api/webhooks", &body).await?;
            show(json, &answer, |a| {
                println!("webhook {}", a["id"].as_str().unwrap_or("?"));
                println!(
                    "secret  {} (shown only now)",
                    a["secret"].as_str().unwrap_or("?")
                );
            });
        }
        WebhookCommand::Deliveries { id } => {
            let answer: Value = api
                .get(&format!("/api/webhooks/{}/deliveries", segment(&id)))
                .await?;
            show(json, &answer, |a| {
                for d in a["deliveries"].as_array().into_iter().flatten() {
                    println!(
                        "{}  {:<10}  {:<20}  attempts {}",
                        d["created_at"].as_str().unwrap_or("?"),
                        d["status"].as_str().unwrap_or("?"),
                        d["event_type"]
                            .as_str()
                            .or(d["type"].as_str())
                            .unwrap_or("?"),
                        d["attempts"].as_i64().unwrap_or(0)
                    );
                }
            });
        }
        WebhookCommand::Delete { id } => {
            api.delete(&format!("/api/webhooks/{}", segment(&id)))
                .await?;
            show(json, &json!({"deleted": id}), |_| println!("deleted {id}"));
        }
    }
    Ok(0)
}

async fn inbox(api: &Api, args: InboxArgs, json: bool) -> anyhow::Result<u8> {
    let mut path = format!("/api/local/inbox?limit={}", args.limit.clamp(1, 100));
    if args.unread {
        path.push_str("&unread=true");
    }
    let mut answer: Value = api.get(&path).await?;
    if args.mark_read
        && let Some(newest) = answer["items"][0]["id"].as_str()
    {
        let marked: Value = api
            .post("/api/local/inbox/read-all", &json!({"up_to": newest}))
            .await?;
        answer["unread"] = marked["unread"].clone();
    }
    show(json, &answer, |a| {
        println!("{} unread", a["unread"].as_i64().unwrap_or(0));
        for item in a["items"].as_array().into_iter().flatten() {
            let mark = if item["read"] == true { " " } else { "•" };
            let notification = &item["notification"];
            let data = &notification["data"];
            let detail = data["result"]
                .as_str()
                .or(data["error"].as_str())
                .or(data["wait_reason"].as_str())
                .or(data["decision"]["decision"].as_str())
                .unwrap_or("");
            println!(
                "{mark} {}  {:<20}  task {}  {}",
                item["created_at"].as_str().unwrap_or("?"),
                item["type"].as_str().unwrap_or("?"),
                item["task_id"].as_str().unwrap_or("-"),
                render::clip(detail, 60)
            );
        }
    });
    Ok(0)
}
