//! How the CLI prints what the API answers: one JSON document (or line) each with `--json`,
//! short aligned text otherwise.

use maestro_api::Task;
use serde_json::Value;

/// One JSON value on its own line (`--json`, and each stream item of `watch --json`).
pub fn json_line(value: &Value) {
    println!("{value}");
}

/// A JSON answer, pretty-printed (`--json` of a one-shot command).
pub fn json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("maestro: cannot print the answer: {e}"),
    }
}

/// At most `max` characters of `text` on one line, `…` when cut.
pub fn clip(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// What a person said in a user message the worker built: the `<instruction>` (or
/// `<comment>`…) inside it, without the `<context>` block; the whole text otherwise.
pub fn said(content: &str) -> &str {
    for tag in ["instruction", "interjection", "comment", "answer"] {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        if let Some(start) = content.find(&open) {
            let body = &content[start + open.len()..];
            return body.find(&close).map_or(body, |end| &body[..end]).trim();
        }
    }
    content.trim()
}

/// A task's state as one word: its latest job's status (`-` without a job).
pub fn state(task: &Task) -> &'static str {
    task.status().map_or("-", |s| s.as_str())
}

/// The task list: id, state, piece, updated, instruction.
pub fn task_table(tasks: &[Task]) {
    if tasks.is_empty() {
        println!("no tasks");
        return;
    }
    println!(
        "{:<36}  {:<16}  {:<10}  {:<16}  INSTRUCTION",
        "ID", "STATE", "PIECE", "UPDATED"
    );
    for task in tasks {
        println!(
            "{:<36}  {:<16}  {:<10}  {:<16}  {}",
            task.id(),
            state(task),
            clip(&task.task.piece, 10),
            task.task.updated_at.format("%Y-%m-%d %H:%M"),
            clip(&task.task.instruction, 60)
        );
    }
}

/// One task, with its latest job.
pub fn task(task: &Task) {
    let record = &task.task;
    println!("task        {}", record.id);
    println!("instruction {}", clip(&record.instruction, 200));
    println!("piece       {}", record.piece);
    if let Some(model) = &record.model {
        println!("model       {model}");
    }
    if let Some(space) = &record.space_id {
        println!("space       {space} ({})", record.visibility.as_str());
    }
    if let Some(parent) = &record.parent_task_id {
        println!("parent      {parent}");
    }
    println!("updated     {}", record.updated_at.to_rfc3339());
    let Some(job) = &record.latest_job else {
        return;
    };
    let mut state = job.status.as_str().to_owned();
    if let Some(reason) = &job.wait_reason {
        state.push_str(&format!(" ({})", reason.as_str()));
    }
    println!(
        "job         #{} {state}, attempt {}/{}",
        job.job_no, job.attempt, job.max_attempts
    );
    if let Some(at) = job.next_retry_at {
        println!("next try    {}", at.to_rfc3339());
    }
    if let Some(reason) = &job.queued_reason {
        println!("queued      {reason}");
    }
    if let Some(result) = &job.result {
        println!("result      {result}");
    }
    if let Some(error) = &job.error {
        println!("error       {error}");
    }
    if let Some(commit) = &job.commit {
        println!("commit      {commit}");
    }
    for attachment in &record.attachments {
        println!("attachment  {}", attachment.name);
    }
}

/// A pending item, with the command that answers it (on the item's own task: a subtask's
/// item is answered there).
pub fn action_line(task: &str, item: &Value) -> String {
    let id = item["id"].as_str().unwrap_or("?");
    let status = item["status"].as_str().unwrap_or("pending");
    let own = item["task_id"].as_str().unwrap_or(task);
    // What was reviewed: the start of the arguments hash, checked again when deciding.
    let hash = item["arguments_hash"]
        .as_str()
        .map(|h| format!(" --arguments-hash {}", &h[..h.len().min(12)]))
        .unwrap_or_default();
    let decide = format!(
        "maestro actions approve {own} {id}{hash}  |  maestro actions deny {own} {id}{hash}"
    );
    let (what, answer) = match item["kind"].as_str().unwrap_or_default() {
        "tool_request" => (
            format!(
                "tool {} {}",
                item["tool"].as_str().unwrap_or("?"),
                clip(&item["arguments"].to_string(), 160)
            ),
            decide,
        ),
        "package_request" => (
            format!(
                "package {} {} {}",
                item["package"]["manager"].as_str().unwrap_or("?"),
                item["package"]["name"].as_str().unwrap_or("?"),
                item["package"]["version"].as_str().unwrap_or("")
            ),
            decide,
        ),
        "ask" => (
            format!(
                "question: {}",
                clip(item["question"].as_str().unwrap_or("?"), 200)
            ),
            format!("maestro actions answer {own} \"<your answer>\""),
        ),
        "mcp_auth_required" => (
            format!(
                "MCP server {} needs your token{}",
                item["server"].as_str().unwrap_or("?"),
                item["login_url"]
                    .as_str()
                    .map(|u| format!(" (or log in: {u})"))
                    .unwrap_or_default()
            ),
            format!(
                "maestro actions token {} < token.txt",
                item["server"].as_str().unwrap_or("?")
            ),
        ),
        "side_effect_unknown" => (
            format!(
                "did {} {} take effect?",
                item["tool"].as_str().unwrap_or("?"),
                clip(&item["arguments"].to_string(), 120)
            ),
            format!("maestro actions resolve {own} {id} happened  |  … {id} not-happened"),
        ),
        "subtask" => (
            format!(
                "subtask {}: {}",
                item["subtask_id"].as_str().unwrap_or("?"),
                clip(item["instruction"].as_str().unwrap_or(""), 100)
            ),
            String::new(),
        ),
        other => (other.to_owned(), String::new()),
    };
    let below = if own == task {
        String::new()
    } else {
        format!(" [task {own}]")
    };
    if status == "pending" && !answer.is_empty() {
        format!("  ? {id} {what}{below}\n      answer: {answer}")
    } else {
        format!("  ? {id} [{status}] {what}{below}")
    }
}
