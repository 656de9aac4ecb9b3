//! The `maestro` CLI run as a process against a real stack, as a person or a script uses it:
//! create a task and watch it to the end through a connection the test cuts (a TCP proxy of
//! the test's own between the CLI and the gateway), approve a paused tool call from the CLI,
//! exit codes that follow the outcome, and `--json` output that parses.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use maestro_domain::{EventKind, JobStatus};
use maestro_testkit::{Stack, StackOptions};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(60);

/// `edit_file` needs a person's approval of each call.
const POLICY: &str = r#"{"allowed_tools": ["*", "delegate"], "gated_tools": ["edit_file"]}"#;

fn scenarios() -> Value {
    let long = "Durable agents keep every step they take. ".repeat(6);
    json!({"scenarios": [
        {"name": "stream", "match": "cli-stream", "turns": [
            {"reasoning": "The user wants out.txt.", "text": long, "chunk_chars": 3, "chunk_delay_ms": 25,
             "tool_calls": [{"name": "write_file", "arguments": {"path": "out.txt", "content": "streamed"}}]},
            {"text": "Done.", "tool_calls": [{"name": "complete", "arguments": {"result": "wrote out.txt"}}]}
        ]},
        {"name": "gate", "match": "cli-gate", "turns": [
            {"text": "Writing, then editing.", "tool_calls": [
                {"name": "write_file", "arguments": {"path": "note.txt", "content": "hello world"}},
                {"name": "edit_file", "arguments": {"path": "note.txt", "old": "world", "new": "maestro"}}
            ]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "edited note.txt"}}]}
        ]},
        {"name": "fail", "match": "cli-fail", "turns": []},
        {"name": "child", "match": "cli-child", "turns": [
            {"tool_calls": [
                {"name": "write_file", "arguments": {"path": "c.txt", "content": "one"}},
                {"name": "edit_file", "arguments": {"path": "c.txt", "old": "one", "new": "two"}}
            ]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "child edited"}}]}
        ]},
        {"name": "parent", "match": "cli-parent", "turns": [
            {"tool_calls": [{"name": "delegate", "arguments": {"instruction": "cli-child: edit c.txt"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "parent done"}}]}
        ]}
    ]})
}

async fn tasks(stack: &Stack) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&stack.db.pool)
        .await
        .expect("the task count")
}

async fn stack() -> Stack {
    Stack::up(StackOptions::new(scenarios()).policy(POLICY)).await
}

/// `maestro --url <url> --token <alice> ARGS…` as a child process.
fn cli(url: &str, token: &str, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(maestro_testkit::binary("maestro"));
    command
        .args(["--url", url, "--token", token])
        .args(args)
        // No config file of the machine's is read.
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .env_remove("MAESTRO_URL")
        .env_remove("MAESTRO_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Run the CLI to its end: exit code, stdout, stderr.
async fn run(stack: &Stack, args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(WAIT, cli(&stack.url(""), &stack.token, args).output())
        .await
        .unwrap_or_else(|_| panic!("maestro {args:?} did not end within {WAIT:?}"))
        .expect("maestro runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `maestro --json tasks create INSTRUCTION FOLLOW` (`--watch` or `--exit-on-pause`): its exit
/// code and the task's id, after checking that the last line names the outcome that code says.
async fn create_and_follow(stack: &Stack, instruction: &str, follow: &str) -> (i32, String) {
    let (code, out, err) = run(stack, &["--json", "tasks", "create", instruction, follow]).await;
    let last = parse(out.lines().last().expect("some output"));
    let outcome = match code {
        0 => "succeeded",
        3 => "failed",
        4 => "cancelled",
        5 => "waiting_human",
        _ => panic!("exit code {code}: {out} {err}"),
    };
    assert_eq!(last["outcome"], outcome, "{err}");
    let task_id = last["task"]["id"].as_str().expect("the task id").to_owned();
    (code, task_id)
}

/// `maestro --json tasks list` against `url` with `token`, which must fail (exit 1): the code
/// of the error it prints.
async fn list_refused(url: &str, token: &str) -> Value {
    let out = cli(url, token, &["--json", "tasks", "list"])
        .output()
        .await
        .expect("maestro runs");
    assert_eq!(out.status.code(), Some(1));
    parse(&String::from_utf8_lossy(&out.stdout))["error"]["code"].clone()
}

fn parse(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("--json output parses ({e}): {stdout}"))
}

/// A TCP proxy to the gateway whose open connections the test can cut at once.
struct Proxy {
    url: String,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    _accept: JoinHandle<()>,
}

impl Proxy {
    async fn to(upstream: &str) -> Self {
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port for the proxy");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let open = connections.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let copy = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                open.lock().expect("the proxy lock").push(copy);
            }
        });
        Self {
            url,
            connections,
            _accept: accept,
        }
    }

    /// Drop every connection open now (both sockets close); new ones are still accepted.
    fn cut(&self) -> usize {
        let open: Vec<_> = self
            .connections
            .lock()
            .expect("the proxy lock")
            .drain(..)
            .collect();
        let live = open.iter().filter(|c| !c.is_finished()).count();
        open.into_iter().for_each(|c| c.abort());
        live
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_then_watch_to_the_end_through_a_cut_connection() {
    let stack = stack().await;
    let proxy = Proxy::to(&stack.url("")).await;
    let mut child = cli(
        &proxy.url,
        &stack.token,
        &[
            "--json",
            "tasks",
            "create",
            "cli-stream: write out.txt",
            "--watch",
        ],
    )
    .spawn()
    .expect("maestro starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    let stderr = child.stderr.take().expect("stderr is piped");
    let stderr = tokio::spawn(async move {
        let mut text = String::new();
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });

    // The create's answer (pretty JSON), then one JSON object per stream item.
    let mut out = Vec::new();
    let mut cut = false;
    let read = async {
        while let Some(line) = lines.next_line().await.expect("stdout reads") {
            let is_delta = line.contains(r#""event":"delta""#);
            out.push(line);
            if is_delta && !cut {
                // Mid-stream: the text is being generated. Cut the connection under the CLI.
                cut = true;
                assert!(proxy.cut() >= 1, "the stream's connection was open");
            }
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the watch ends");
    let status = child.wait().await.expect("maestro ends");
    let stderr = stderr.await.expect("stderr is read");
    assert!(cut, "deltas were streamed: {out:?}");
    assert_eq!(
        status.code(),
        Some(0),
        "a succeeded task exits 0; stderr: {stderr}"
    );
    assert!(
        stderr.contains("reconnecting"),
        "the CLI said it reconnects: {stderr}"
    );

    // One JSON object per line: the created task, then the stream's items, then the outcome.
    let created = parse(&out[0]);
    let task_id = created["id"].as_str().expect("the task's id").to_owned();
    let items: Vec<Value> = out[1..].iter().map(|l| parse(l)).collect();
    let last = items.last().expect("at least one item");
    assert_eq!(last["outcome"], "succeeded");
    assert_eq!(last["task"]["latest_job"]["result"], "wrote out.txt");

    // Every persisted event exactly once, in order, across the cut.
    let seqs: Vec<i64> = items
        .iter()
        .filter(|i| i["event"] != "delta" && i.get("outcome").is_none())
        .map(|i| i["data"]["seq"].as_i64().expect("an event's seq"))
        .collect();
    let persisted: Vec<i64> = stack.events(&task_id).await.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, persisted, "each event once, in order, none lost");
    // The deltas' ids only move forward.
    let ids: Vec<String> = items
        .iter()
        .filter_map(|i| i["id"].as_str().map(str::to_owned))
        .filter(|id| !id.is_empty())
        .collect();
    let mut sorted = ids.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "no item twice: {ids:?}");

    // Reasoning streamed as its own delta kind and kept with the message, apart from its text.
    assert!(
        items
            .iter()
            .any(|i| i["event"] == "delta" && i["data"]["type"] == "reasoning"),
        "reasoning deltas"
    );
    let first_reply = items
        .iter()
        .find(|i| i["event"] == "message" && i["data"]["payload"]["role"] == "assistant")
        .expect("an assistant message");
    assert_eq!(
        first_reply["data"]["payload"]["reasoning"],
        "The user wants out.txt."
    );
    assert!(
        !first_reply["data"]["payload"]["content"]
            .as_str()
            .expect("text")
            .contains("wants")
    );

    // The file the job wrote, through the CLI; the human rendering of the same task.
    let (code, file, _) = run(&stack, &["tasks", "file", &task_id, "out.txt"]).await;
    assert_eq!((code, file.as_str()), (0, "streamed"));
    let (code, text, _) = run(&stack, &["tasks", "watch", &task_id]).await;
    assert_eq!(code, 0);
    assert_eq!(
        text.matches("Durable agents keep every step they take.")
            .count(),
        6,
        "the streamed text is shown once, whole: {text}"
    );
    assert!(
        text.contains("→ write_file") && text.contains("result: wrote out.txt"),
        "{text}"
    );
    let (code, shown, _) = run(&stack, &["--json", "tasks", "show", &task_id]).await;
    assert_eq!(code, 0);
    let shown = parse(&shown);
    assert_eq!(shown["files"][0]["path"], "out.txt");
    let (code, listed, _) = run(
        &stack,
        &[
            "--json",
            "tasks",
            "list",
            "--state",
            "succeeded",
            "--search",
            "CLI-STREAM: write",
        ],
    )
    .await;
    assert_eq!(code, 0);
    assert!(
        parse(&listed)["tasks"]
            .as_array()
            .expect("a task list")
            .iter()
            .any(|t| t["id"] == task_id.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_a_paused_call_from_the_cli() {
    let stack = stack().await;
    // The job pauses for the gated edit: exit code 5 with --exit-on-pause.
    let (code, task_id) =
        create_and_follow(&stack, "cli-gate: edit note.txt", "--exit-on-pause").await;
    assert_eq!(code, 5, "a paused task exits 5 (waiting_human)");

    let (code, listed, _) = run(&stack, &["--json", "actions", "list", &task_id]).await;
    assert_eq!(code, 0);
    let listed = parse(&listed);
    let item = &listed["required_actions"][0];
    assert_eq!(
        (item["kind"].as_str(), item["tool"].as_str()),
        (Some("tool_request"), Some("edit_file"))
    );
    let action = item["id"].as_str().expect("the item id").to_owned();
    let (code, human, _) = run(&stack, &["actions", "list", &task_id]).await;
    assert_eq!(code, 0);
    assert!(
        human.contains(&format!("maestro actions approve {task_id} {action}")),
        "{human}"
    );

    // A comment while a decision is pending: refused with the reason, exit 1.
    let (code, out, err) = run(&stack, &["--json", "tasks", "comment", &task_id, "hurry"]).await;
    assert_eq!(code, 1);
    assert_eq!(parse(&out)["error"]["code"], "decision_pending", "{err}");

    // A hash that is not the call's (it changed since it was reviewed): refused, nothing decided.
    let wrong = [
        "actions",
        "approve",
        &task_id,
        &action,
        "--arguments-hash",
        "00000000",
    ];
    let (code, _, err) = run(&stack, &wrong).await;
    assert_eq!(code, 1);
    assert!(err.contains("changed since you reviewed it"), "{err}");
    let reviewed = item["arguments_hash"].as_str().expect("a hash")[..12].to_owned();
    let approve = [
        "--json",
        "actions",
        "approve",
        &task_id,
        &action,
        "--arguments-hash",
        &reviewed,
    ];
    let (code, decided, err) = run(&stack, &approve).await;
    assert_eq!(code, 0, "{err}");
    let decided = parse(&decided);
    assert_eq!(decided["required_action"]["status"], "approved");
    assert_eq!(decided["resumed"], true);
    // Deciding it again: already decided, exit 1, the error's JSON.
    let (code, again, _) = run(&stack, &["--json", "actions", "deny", &task_id, &action]).await;
    assert_eq!(code, 1);
    assert_eq!(parse(&again)["error"]["code"], "already_decided");

    let (code, text, err) = run(&stack, &["tasks", "watch", &task_id]).await;
    assert_eq!(code, 0, "the approved job finishes: {text} {err}");
    assert!(text.contains("✓ tool_request approve by alice"), "{text}");
    let note = std::fs::read_to_string(stack.workspace(&task_id).join("note.txt"))
        .expect("the edited file");
    assert_eq!(note, "hello maestro", "exactly the approved edit ran");
    let events = stack.events(&task_id).await;
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind == EventKind::ToolResult && e.payload["name"] == "edit_file")
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_follow_the_outcome_and_bad_input_is_refused() {
    let stack = stack().await;
    let (code, task_id) = create_and_follow(&stack, "cli-fail: nothing scripted", "--watch").await;
    assert_eq!(code, 3, "a failed task exits 3");
    assert_eq!(stack.task(&task_id).await.status(), Some(JobStatus::Failed));

    // Cancelled: a continued job cancelled before it runs, watched to its end.
    let (code, out, _) = run(
        &stack,
        &["--json", "tasks", "continue", &task_id, "cli-fail: again"],
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(parse(&out)["id"], task_id.as_str());
    let (code, _, _) = run(&stack, &["tasks", "cancel", &task_id]).await;
    assert!(code == 0 || code == 1, "cancel answers");
    let (code, _, _) = run(&stack, &["tasks", "watch", &task_id]).await;
    let status = stack.wait_over(&task_id).await.status();
    assert_eq!(
        code,
        if status == Some(JobStatus::Cancelled) {
            4
        } else {
            3
        }
    );

    // Bad input: a clear error and nothing created.
    let before = tasks(&stack).await;
    let (code, out, err) = run(&stack, &["--json", "tasks", "create", "  "]).await;
    assert_eq!(code, 1, "{err}");
    assert_eq!(parse(&out)["error"]["code"], "invalid_instruction");
    let (code, _, err) = run(&stack, &["tasks", "show", "not-a-task"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("not a task id"), "{err}");
    let (code, out, _) = run(
        &stack,
        &[
            "--json",
            "tasks",
            "show",
            "01a2337c-a301-71ac-843e-a468a0836713",
        ],
    )
    .await;
    assert_eq!(
        (code, parse(&out)["error"]["code"].as_str()),
        (1, Some("not_found"))
    );
    let (code, _, err) = run(&stack, &["tasks", "list", "--state", "sleeping"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("state is one of"), "{err}");
    let (code, _, _) = run(&stack, &["tasks"]).await;
    assert_eq!(code, 2, "a usage error exits 2");
    assert_eq!(tasks(&stack).await, before, "nothing created");

    // A bad token: 401 as JSON; the gateway down: unreachable, exit 1.
    assert_eq!(list_refused(&stack.url(""), "wrong").await, "unauthorized");
    assert_eq!(
        list_refused("http://127.0.0.1:9", &stack.token).await,
        "unreachable"
    );

    // A retried create with the same key: the same task, and said so.
    let create = [
        "tasks",
        "create",
        "cli-fail: once",
        "--idempotency-key",
        "cli-key-1",
    ];
    let (code, first, _) = run(&stack, &create).await;
    assert_eq!(code, 0);
    let (code, again, _) = run(&stack, &create).await;
    assert_eq!(code, 0);
    let id = |text: &str| {
        text.split_whitespace()
            .find(|word| word.len() == 36 && word.matches('-').count() == 4)
            .map(str::to_owned)
    };
    assert!(first.starts_with("created task "), "{first}");
    assert!(
        again.contains("already existed for this idempotency key"),
        "{again}"
    );
    assert_eq!(id(&first), id(&again));

    let (code, out, _) = run(&stack, &["--json", "whoami"]).await;
    assert_eq!(code, 0);
    assert_eq!(parse(&out), json!({"owner": "alice", "admin": true}));

    // Schedules, webhooks and the inbox answer JSON that parses.
    let (code, out, err) = run(
        &stack,
        &[
            "--json",
            "schedules",
            "create",
            "--cron",
            "0 3 * * *",
            "--instruction",
            "cli-stream nightly",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let schedule = parse(&out)["id"]
        .as_str()
        .expect("the schedule id")
        .to_owned();
    let (code, out, _) = run(&stack, &["--json", "schedules", "list"]).await;
    assert_eq!(code, 0);
    assert_eq!(parse(&out)["schedules"][0]["id"], schedule.as_str());
    let (code, out, _) = run(&stack, &["--json", "schedules", "pause", &schedule]).await;
    assert_eq!((code, parse(&out)["status"].as_str()), (0, Some("paused")));
    let (code, out, _) = run(
        &stack,
        &["--json", "webhooks", "create", "http://127.0.0.1:9/hook"],
    )
    .await;
    assert_eq!(code, 0);
    assert!(
        parse(&out)["secret"]
            .as_str()
            .expect("a webhook list")
            .starts_with("whsec_")
    );
    let (code, out, _) = run(&stack, &["--json", "webhooks", "list"]).await;
    assert_eq!(
        (code, parse(&out)["webhooks"].as_array().map(Vec::len)),
        (0, Some(1))
    );
    let (code, out, _) = run(&stack, &["--json", "inbox"]).await;
    assert_eq!(code, 0);
    assert!(
        parse(&out)["unread"].as_i64().expect("an unread count") >= 1,
        "the failure is in the inbox"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subtasks_call_is_approved_from_its_parent() {
    let stack = stack().await;
    let (code, out, err) = run(
        &stack,
        &["--json", "tasks", "create", "cli-parent: delegate"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let parent = parse(&out)["id"]
        .as_str()
        .expect("the parent's id")
        .to_owned();
    // The parent waits for its child, the child for a person: the parent's list shows the
    // child's item, with the command on the child's task.
    stack.wait(&parent, &[JobStatus::WaitingSubtasks]).await;
    let child = stack.wait_for_subtasks(&parent, 1).await[0].id.to_string();
    stack.wait(&child, &[JobStatus::WaitingHuman]).await;
    let (code, listed, _) = run(&stack, &["--json", "actions", "list", &parent]).await;
    assert_eq!(code, 0);
    let listed = parse(&listed);
    let item = listed["required_actions"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["kind"] == "tool_request")
        .expect("the child's tool request")
        .clone();
    assert_eq!(item["task_id"], child.as_str());
    let action = item["id"].as_str().expect("its id").to_owned();
    let (_, human, _) = run(&stack, &["actions", "list", &parent]).await;
    assert!(
        human.contains(&format!("maestro actions approve {child} {action}")),
        "{human}"
    );
    let (code, _, err) = run(&stack, &["actions", "approve", &parent, &action]).await;
    assert_eq!(code, 0, "approved through the parent: {err}");
    let (code, text, err) = run(&stack, &["tasks", "watch", &parent]).await;
    assert_eq!(code, 0, "{text} {err}");
    let job = stack.task(&parent).await.task.latest_job.expect("a job");
    assert_eq!(job.result.as_deref(), Some("parent done"));
}
