//! `maestro tasks watch`: the task's live stream in the terminal — the agent's text as it is
//! streamed, its tool calls and results, movements and states — until the task's latest job
//! is over. A dropped connection is resumed with `Last-Event-ID` (the gateway sends every later
//! item once, in order), so nothing is shown twice or lost; long waits show how long.

use std::collections::HashMap;
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use maestro_domain::{Event, EventBody, JobId, JobStatus, Role, TaskId};
use reqwest::Method;
use serde_json::Value;

use crate::api::{Api, ApiError};
use crate::render;

/// How a watched task ended, and the exit code scripts see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
    Cancelled,
    /// It waits for a person (`--exit-on-pause`).
    Paused,
}

impl Outcome {
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Succeeded => 0,
            Outcome::Failed => 3,
            Outcome::Cancelled => 4,
            Outcome::Paused => 5,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::Paused => "waiting_human",
        }
    }

    fn of(status: JobStatus) -> Option<Self> {
        match status {
            JobStatus::Succeeded => Some(Outcome::Succeeded),
            JobStatus::Failed => Some(Outcome::Failed),
            JobStatus::Cancelled => Some(Outcome::Cancelled),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub json: bool,
    pub exit_on_pause: bool,
}

/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Silence longer than this shows a progress line.
const QUIET: Duration = Duration::from_secs(2);

/// Follow `task` until its latest job is over (or waits, with `exit_on_pause`).
pub async fn watch(api: &Api, task: TaskId, options: Options) -> anyhow::Result<Outcome> {
    let mut view = View::new(options.json);
    let mut last_id: Option<String> = None;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let mut heard = false;
        let ended = follow(api, task, &mut last_id, &mut view, options, &mut heard).await;
        // A connection that carried items was healthy: the next drop starts the backoff over.
        if heard {
            backoff = FIRST_BACKOFF;
        }
        let reason = match ended {
            Ok(Some(outcome)) => return Ok(outcome),
            Err(Break::Fatal(e)) => return Err(e.into()),
            Ok(None) => "the stream ended".to_owned(),
            Err(Break::Dropped(reason)) => format!("connection lost ({reason})"),
        };
        view.note(&format!(
            "{reason}; reconnecting in {:.1} s",
            backoff.as_secs_f32()
        ));
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The first wait before reconnecting.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

enum Break {
    /// Not worth retrying: no such task, a bad token.
    Fatal(ApiError),
    /// The connection went away; resume.
    Dropped(String),
}

/// One connection: items until the task is over (`Some`), the stream ends (`None`) or drops
/// (`heard`: it carried items). An item counts as seen (`last_id`, what a reconnection resumes
/// after) only once it is handled: a terminal state whose check failed comes again.
async fn follow(
    api: &Api,
    task: TaskId,
    last_id: &mut Option<String>,
    view: &mut View,
    options: Options,
    heard: &mut bool,
) -> Result<Option<Outcome>, Break> {
    let mut request = api
        .request(Method::GET, &format!("/api/local/tasks/{task}/stream"))
        .header("accept", "text/event-stream");
    if let Some(id) = last_id.as_deref() {
        request = request.header("last-event-id", id);
    }
    let response = request
        .send()
        .await
        .map_err(|e| Break::Dropped(e.to_string()))?;
    let response = match crate::api::refusal(response).await {
        Ok(response) => response,
        Err(e) => return Err(fatal_or_dropped(e)),
    };
    let mut events = response.bytes_stream().eventsource();
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    loop {
        let item = tokio::select! {
            item = events.next() => item,
            _ = ticker.tick() => {
                view.tick();
                continue;
            }
        };
        let item = match item {
            None => return Ok(None),
            Some(Err(e)) => return Err(Break::Dropped(e.to_string())),
            Some(Ok(item)) => item,
        };
        *heard = true;
        let data: Value = serde_json::from_str(&item.data).unwrap_or(Value::Null);
        let event = if item.event == "delta" {
            None
        } else {
            serde_json::from_value::<Event>(data.clone())
                .ok()
                .and_then(|e| e.body().ok().map(|body| (e, body)))
        };
        // Whether this item ends the watch: asked before it is shown, so a failed check leaves
        // it unseen, to come again after the reconnection.
        let ending = match &event {
            Some((event, EventBody::JobState(change))) => {
                ends(api, task, event.job_id, change, options).await?
            }
            _ => None,
        };
        if options.json {
            render::json_line(
                &serde_json::json!({"id": item.id, "event": item.event, "data": data}),
            );
        }
        match &event {
            None if item.event == "delta" => view.delta(&data),
            Some((event, body)) => view.event(event, body),
            None => {}
        }
        if !item.id.is_empty() {
            *last_id = Some(item.id.clone());
        }
        if ending.is_some() {
            return Ok(ending);
        }
    }
}

/// Whether a job's state change ends the watch: the task's latest job is over (and no later
/// job carries the task on: an answered question's follow-up), or it waits for a person and
/// the watch stops there.
async fn ends(
    api: &Api,
    task: TaskId,
    job: JobId,
    change: &maestro_domain::JobStateChange,
    options: Options,
) -> Result<Option<Outcome>, Break> {
    if change.status == JobStatus::WaitingHuman && options.exit_on_pause {
        let latest = latest_job(api, task).await?;
        return Ok((latest == Some((job, JobStatus::WaitingHuman))).then_some(Outcome::Paused));
    }
    let Some(outcome) = Outcome::of(change.status) else {
        return Ok(None);
    };
    if change.followed_by.is_some() {
        return Ok(None);
    }
    let latest = latest_job(api, task).await?;
    let over =
        latest.is_some_and(|(latest, status)| latest == job && Outcome::of(status).is_some());
    Ok(over.then_some(outcome))
}

/// A refusal that retrying cannot change (no such task, a bad token) ends the watch; anything
/// else (a 5xx, a timeout, 408 and 429 included) is waited out.
fn fatal_or_dropped(e: ApiError) -> Break {
    match e {
        ApiError::Refused { status, .. }
            if status.is_client_error()
                && status != reqwest::StatusCode::REQUEST_TIMEOUT
                && status != reqwest::StatusCode::TOO_MANY_REQUESTS =>
        {
            Break::Fatal(e)
        }
        e => Break::Dropped(e.to_string()),
    }
}

/// The task's latest job and its status.
async fn latest_job(api: &Api, task: TaskId) -> Result<Option<(JobId, JobStatus)>, Break> {
    let task: maestro_api::Task = api
        .get(&format!("/api/local/tasks/{task}"))
        .await
        .map_err(fatal_or_dropped)?;
    Ok(task.task.latest_job.map(|job| (job.id, job.status)))
}

/// What the terminal shows.
struct View {
    json: bool,
    tty: bool,
    /// The assistant text streamed so far for the message being generated: its job and the
    /// text printed.
    open: Option<(JobId, String)>,
    /// Reasoning being streamed (printed dimmed).
    thinking: bool,
    /// The job whose message being generated streamed reasoning deltas (so its message's
    /// reasoning has been shown).
    reasoned: Option<JobId>,
    /// Job numbers in the order the jobs were first seen.
    jobs: HashMap<JobId, usize>,
    /// What the task is doing, for the progress line.
    state: String,
    last_output: Instant,
    /// The last character written to stdout was a newline (or nothing was written).
    at_line_start: bool,
    /// A progress line is on the screen (stderr) and must be cleared before output.
    progress_shown: bool,
    /// When the last progress line was printed without a terminal.
    last_progress: Instant,
}

impl View {
    fn new(json: bool) -> Self {
        Self {
            json,
            tty: std::io::stderr().is_terminal(),
            open: None,
            thinking: false,
            reasoned: None,
            jobs: HashMap::new(),
            state: "connecting".to_owned(),
            last_output: Instant::now(),
            at_line_start: true,
            progress_shown: false,
            last_progress: Instant::now(),
        }
    }

    fn out(&mut self, text: &str) {
        self.clear_progress();
        self.last_output = Instant::now();
        if let Some(last) = text.chars().last() {
            self.at_line_start = last == '\n';
        }
        if !self.json {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
        }
    }

    /// End streamed text with a newline before anything else is printed.
    fn close_text(&mut self) {
        if self.thinking {
            self.thinking = false;
            self.out(if self.tty { "\x1b[0m\n" } else { "\n" });
        }
        if !self.at_line_start {
            self.out("\n");
        }
    }

    fn line(&mut self, text: &str) {
        self.close_text();
        self.out(&format!("{text}\n"));
    }

    /// A remark about the connection, on stderr.
    fn note(&mut self, text: &str) {
        self.clear_progress();
        eprintln!("maestro: {text}");
    }

    fn clear_progress(&mut self) {
        if self.progress_shown {
            eprint!("\r\x1b[2K");
            self.progress_shown = false;
        }
    }

    /// Once a second: after a quiet spell, say what the task is doing and for how long.
    fn tick(&mut self) {
        let quiet = self.last_output.elapsed();
        if quiet < QUIET {
            return;
        }
        let text = format!("… {} ({} s)", self.state, quiet.as_secs());
        if self.tty {
            eprint!("\r\x1b[2K{text}");
            self.progress_shown = true;
        } else if self.last_progress.elapsed() >= Duration::from_secs(30) {
            eprintln!("{text}");
            self.last_progress = Instant::now();
        }
    }

    /// The message being streamed will not be committed as it is (the attempt ended).
    fn forget_stream(&mut self) {
        self.close_text();
        self.open = None;
        self.reasoned = None;
    }

    fn job_no(&mut self, job: JobId) -> usize {
        let next = self.jobs.len() + 1;
        *self.jobs.entry(job).or_insert(next)
    }

    fn delta(&mut self, delta: &Value) {
        let Some(job) = delta["job_id"]
            .as_str()
            .and_then(|j| j.parse::<JobId>().ok())
        else {
            return;
        };
        let text = delta["text"].as_str().unwrap_or_default();
        match delta["type"].as_str() {
            Some("reasoning") => {
                if !self.thinking {
                    self.close_text();
                    self.out(if self.tty {
                        "\x1b[2mthinking: "
                    } else {
                        "thinking: "
                    });
                    self.thinking = true;
                }
                self.reasoned = Some(job);
                self.out(text);
            }
            Some("text") => {
                if self.thinking {
                    self.thinking = false;
                    self.out(if self.tty { "\x1b[0m\n" } else { "\n" });
                }
                match &mut self.open {
                    Some((open, printed)) if *open == job => printed.push_str(text),
                    _ => self.open = Some((job, text.to_owned())),
                }
                self.out(text);
            }
            _ => {}
        }
    }

    fn event(&mut self, event: &Event, body: &EventBody) {
        let no = self.job_no(event.job_id);
        match body {
            EventBody::Message(message) => match message.message.role {
                Role::Assistant => {
                    let content = message.message.content.clone().unwrap_or_default();
                    let printed = match self.open.take() {
                        Some((job, printed)) if job == event.job_id => printed,
                        _ => String::new(),
                    };
                    if self.thinking {
                        self.thinking = false;
                        self.out(if self.tty { "\x1b[0m\n" } else { "\n" });
                    }
                    let reasoned = self.reasoned.take() == Some(event.job_id);
                    if !reasoned && let Some(reasoning) = &message.reasoning {
                        self.line(&format!("thinking: {}", render::clip(reasoning, 400)));
                    }
                    // The deltas showed a prefix of the message (or all of it): the rest. Text
                    // printed since (a movement, say) put it on a line of its own already.
                    match content.strip_prefix(printed.as_str()) {
                        Some(rest) if !printed.is_empty() => self.out(rest),
                        _ if content.is_empty() => {}
                        _ => {
                            self.close_text();
                            self.out(&content);
                        }
                    }
                    self.close_text();
                }
                Role::User => {
                    let content = message.message.content.clone().unwrap_or_default();
                    self.line(&format!("> {}", render::clip(render::said(&content), 300)));
                }
                _ => {}
            },
            EventBody::ToolCall(call) => {
                let arguments = serde_json::from_str::<Value>(&call.arguments)
                    .map_or_else(|_| call.arguments.clone(), |v| v.to_string());
                self.line(&format!(
                    "  → {}({})",
                    call.name,
                    render::clip(&arguments, 200)
                ));
            }
            EventBody::ToolResult(result) => {
                let mark = if result.is_error { "✗" } else { "←" };
                let first = result.content.lines().next().unwrap_or_default();
                self.line(&format!(
                    "  {mark} {}: {}",
                    result.name,
                    render::clip(first, 160)
                ));
            }
            EventBody::Movement(movement) => {
                let reason = movement
                    .reason
                    .as_deref()
                    .map(|r| format!(" — {r}"))
                    .unwrap_or_default();
                self.line(&format!("── movement {}{reason}", movement.name));
            }
            EventBody::JobState(change) => {
                // Whatever was being streamed is over (a retry streams its reply afresh).
                self.forget_stream();
                self.state = change.status.as_str().to_owned();
                let mut text = format!(
                    "[job {no} · {} · attempt {}]",
                    change.status.as_str(),
                    change.attempt
                );
                if let Some(reason) = &change.wait_reason {
                    text.push_str(&format!(" waiting for {}", reason.as_str()));
                }
                if let Some(at) = change.next_retry_at {
                    text.push_str(&format!(" next try at {}", at.format("%H:%M:%S")));
                }
                if let Some(error) = &change.error {
                    text.push_str(&format!(" error: {}", render::clip(error, 300)));
                }
                if let Some(result) = &change.result {
                    text.push_str(&format!("\nresult: {result}"));
                }
                self.line(&text);
                for item in &change.required_actions {
                    let shown = render::action_line(&event.task_id.to_string(), item);
                    self.line(&shown);
                }
            }
            EventBody::Decision(decision) => {
                self.line(&format!(
                    "✓ {} {} by {}",
                    decision.kind.as_str(),
                    decision.decision,
                    decision.by
                ));
            }
            EventBody::JobContinued(_) => self.line(&format!("── job {no}: continued")),
            EventBody::Redispatch(redispatch) => {
                self.forget_stream();
                self.line(&format!("  (dispatched again: {})", redispatch.reason));
            }
            EventBody::Rewrite(_) | EventBody::Replay(_) => {}
        }
    }
}
