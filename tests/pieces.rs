//! The piece engine end to end: a three-movement piece from `PIECES_DIR` runs against the
//! scripted LLM, and the requests the LLM received prove the prompt layout keeps its cache
//! warm (identical tools, each request extending the previous, one system message, ≥ 95 %
//! reuse after every transition); the router picks pieces (and falls back); and the guards
//! and final mappings end jobs the way they should.

use maestro_domain::{EventKind, JobStatus, WaitReason};
use maestro_testkit::{Stack, StackOptions, TaskExt};
use serde_json::{Value, json};

const TRIPLE: &str = r#"
name: triple
description: Three steps in a row, for the tests.
initial_movement: gather
max_movements: 6
steps:
  - name: gather
    persona: You gather.
    instruction: Read what is there.
    allowed_tools: [list_files, read_file]
    rules:
      - condition: You know what is there.
        next: write
  - name: write
    guidance: Write the note.
    checklist: [The note exists.]
    transitions:
      - condition: The note is written.
        target: check
  - name: check
    guidance: Check the note, then complete.
    edit: false
    transitions:
      - condition: The note is wrong.
        target: write
"#;

const PINGPONG: &str = r#"
name: pingpong
description: Two movements that can send the work back and forth.
start_movement: ping
max_visits: 2
movements:
  - name: ping
    transitions: [{condition: always, target: pong}]
  - name: pong
    transitions: [{condition: always, target: ping}, {condition: never, target: ABORT}]
"#;

fn transition(target: &str, reason: &str) -> Value {
    json!({"tool_calls": [{"name": "transition", "arguments": {"target": target, "reason": reason}}]})
}

const TIGHT: &str = r#"
name: tight
description: Two movements with small limits, for the guard tests.
start_movement: a
max_movements: 3
max_iterations: 5
movements:
  - name: a
    transitions: [{condition: always, target: b}]
  - name: b
    transitions: [{condition: always, target: a}]
"#;

/// Run a task whose job must fail: the task, and its job's error.
async fn fails(stack: &Stack, body: &Value) -> (maestro_api::Task, String) {
    let task = stack.run(body).await;
    assert_eq!(task.job().status, JobStatus::Failed, "{task:?}");
    let error = task.job().error.clone().unwrap_or_default();
    (task, error)
}

/// A stack with the test pieces, the scripted LLM's `scenarios` and `env`.
async fn stack(scenarios: Value, env: &[(&str, &str)]) -> Stack {
    let mut options = StackOptions::new(scenarios)
        .piece("tight", TIGHT)
        .piece("triple", TRIPLE)
        .piece("pingpong.yml", PINGPONG);
    for (key, value) in env {
        options = options.env(key, value);
    }
    Stack::up(options).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_movement_piece_keeps_the_prompt_cache_warm() {
    let scenarios = json!({"scenarios": [{
        "name": "triple",
        "match": "leave a note",
        "turns": [
            {"text": "Looking.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            // Not a way out of `gather`: an error result, and the movement goes on.
            transition("check", "skip ahead"),
            transition("write", "the workspace is empty"),
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "note.txt", "content": "hi\n"}}]},
            transition("check", "note.txt is written"),
            // `check` may not write: refused by the movement, reported to the model.
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "x.txt", "content": "x"}}]},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "note.txt"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "note.txt says hi"}}]}
        ]
    }]});
    let stack = stack(scenarios, &[]).await;
    // A realistic prompt: the tools, the system message and a detailed instruction (about
    // 3,000 tokens of background), as a job has by the time it changes movement.
    let background = "Background: the team keeps short notes in the workspace root, one per \
                      topic, plain text, ending with a newline. "
        .repeat(120);
    let task = stack.run(&json!({"instruction": format!("Please leave a note.\n\n{background}"), "piece": "triple"})).await;
    assert_eq!(task.job().status, JobStatus::Succeeded, "{task:?}");
    assert_eq!(task.task.piece, "triple");
    let id = task.id();

    let recorded = stack.llm.requests().await.expect("requests");
    let requests: Vec<Value> = recorded.iter().map(|r| r["body"].clone()).collect();
    assert_eq!(requests.len(), 8, "one request per turn");
    // The bytes on the wire, as the LLM server received them.
    let raw = |i: usize, key: &str| {
        recorded[i][key]
            .as_str()
            .unwrap_or_else(|| panic!("request {i} has {key}"))
            .to_owned()
    };
    for i in 1..recorded.len() {
        assert_eq!(
            raw(i, "raw_tools"),
            raw(0, "raw_tools"),
            "request {i} sends the very same tools bytes"
        );
        let (before, now) = (raw(i - 1, "raw_messages"), raw(i, "raw_messages"));
        let open = before.strip_suffix(']').expect("a JSON array");
        assert!(
            now.starts_with(open) && now.len() > before.len(),
            "request {i}'s messages bytes extend request {}'s",
            i - 1
        );
    }
    let tools = serde_json::to_string(&requests[0]["tools"]).expect("json");
    let names: Vec<&str> = requests[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(
        &names[names.len() - 2..],
        ["transition", "complete"],
        "transition, then complete, after the regular tools"
    );
    let targets = &requests[0]["tools"][names.len() - 2]["function"]["parameters"]["properties"]["target"]
        ["enum"];
    assert_eq!(
        targets,
        &json!(["check", "write"]),
        "the union of the piece's targets"
    );
    for (i, request) in requests.iter().enumerate() {
        let these = serde_json::to_string(&request["tools"]).expect("json");
        assert_eq!(these, tools, "request {i} offers the same tools bytes");
        let messages = request["messages"].as_array().expect("messages");
        let systems: Vec<usize> = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m["role"] == "system")
            .map(|(i, _)| i)
            .collect();
        assert_eq!(
            systems,
            [0],
            "request {i}: exactly one system message, first"
        );
        if i > 0 {
            let before = requests[i - 1]["messages"].as_array().expect("messages");
            assert!(
                messages.len() > before.len() && messages[..before.len()] == before[..],
                "request {i} extends request {} without changing it",
                i - 1
            );
        }
    }
    let system = requests[0]["messages"][0]["content"]
        .as_str()
        .expect("system");
    assert!(system.contains("## Movement: gather") && system.contains("You gather."));
    assert!(
        !system.contains(&id.to_string()),
        "no per-task data in the system message"
    );

    let events = stack.events(id).await;
    let movements: Vec<(String, Value)> = events
        .iter()
        .filter(|e| e.kind == EventKind::Movement)
        .map(|e| {
            (
                e.payload["name"].as_str().unwrap_or_default().to_owned(),
                e.payload["reason"].clone(),
            )
        })
        .collect();
    assert_eq!(
        movements,
        [
            ("gather".to_owned(), Value::Null),
            ("write".to_owned(), json!("the workspace is empty")),
            ("check".to_owned(), json!("note.txt is written")),
        ]
    );
    let results: Vec<(&str, bool)> = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .map(|e| {
            (
                e.payload["content"].as_str().unwrap_or_default(),
                e.payload["is_error"].as_bool().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        results[1].1 && results[1].0.contains("not a way out of movement `gather`"),
        "{results:?}"
    );
    assert!(
        results[5].1
            && results[5]
                .0
                .contains("movement `check` does not change files"),
        "{results:?}"
    );
    assert!(!stack.workspace(id).join("x.txt").exists());
    assert_eq!(
        std::fs::read_to_string(stack.workspace(id).join("note.txt")).expect("note"),
        "hi\n"
    );

    // The cache reuse the server reported for the first request of each later movement.
    let usages: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind == EventKind::Message && e.payload["role"] == "assistant")
        .map(|e| &e.payload["usage"])
        .collect();
    for turn in [3, 5] {
        let usage = usages[turn];
        let (cached, prompt) = (
            usage["cachedPromptTokens"].as_f64().expect("cached"),
            usage["promptTokens"].as_f64().expect("prompt"),
        );
        assert!(
            cached / prompt >= 0.95,
            "turn {turn}, after a transition: {cached} of {prompt} cached"
        );
    }

    let transcript: Value = stack
        .http
        .get(stack.url(&format!("/api/local/tasks/{id}/transcript")))
        .bearer_auth(&stack.token)
        .send()
        .await
        .expect("transcript")
        .json()
        .await
        .expect("json");
    let lines = transcript["messages"].as_array().expect("messages");
    let last_request = requests[7]["messages"].as_array().expect("messages");
    assert_eq!(
        lines.len(),
        last_request.len() + 2,
        "the transcript is the conversation: the last request, its answer and result"
    );
    assert_eq!(lines[0]["role"], "system");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_picks_a_piece_and_falls_back_to_the_default() {
    let scenarios = json!({"scenarios": [
        {"name": "route-to-triple", "match": "Choose the piece for this task.\n\nPieces:\n- chat", "turns": [{"text": "triple"}],
         "repeat_last": true},
        {"name": "triple-work", "match": "leave a note", "turns": [
            transition("write", "ok"),
            {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
        ]},
        {"name": "chat-work", "match": "answer me", "turns": [
            {"tool_calls": [{"name": "complete", "arguments": {"result": "answered"}}]}
        ]}
    ]});
    let stack = stack(scenarios, &[("PIECE_SELECTION", "router")]).await;
    let routed = stack
        .run(&json!({"instruction": "Please leave a note."}))
        .await;
    assert_eq!(routed.job().status, JobStatus::Succeeded, "{routed:?}");
    assert_eq!(routed.task.piece, "triple", "the router's choice is stored");

    // The router's answer names no piece: the default piece runs.
    stack
        .llm
        .load(&json!({"scenarios": [
            {"name": "route-nowhere", "match": "Choose the piece for this task.", "turns": [{"text": "banana"}]},
            {"name": "chat-work", "match": "answer me", "turns": [
                {"tool_calls": [{"name": "complete", "arguments": {"result": "answered"}}]}
            ]}
        ]}))
        .await
        .expect("load");
    let fallback = stack
        .run(&json!({"instruction": "Please answer me."}))
        .await;
    assert_eq!(fallback.job().status, JobStatus::Succeeded, "{fallback:?}");
    assert_eq!(fallback.task.piece, "chat");

    let explicit = stack
        .try_create(&json!({"instruction": "x", "piece": "pingpong", "start_movement": "nope"}))
        .await
        .expect_err("an unknown start movement is refused");
    assert_eq!(explicit.code, "invalid_start_movement", "{explicit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_and_final_calls_end_jobs_as_they_should() {
    let scenarios = json!({"scenarios": [
        {"name": "bounce", "match": "bounce", "repeat_last": false, "turns": [
            transition("pong", "1"), transition("ping", "2"), transition("pong", "3"),
            transition("ping", "4"), transition("pong", "5")
        ]},
        {"name": "ask", "match": "ask me", "turns": [
            {"tool_calls": [{"name": "complete", "arguments": {"result": "Which file?", "status": "needs_user_input"}}]}
        ]},
        {"name": "give-up", "match": "give up", "turns": [
            transition("pong", "go"), transition("ABORT", "cannot be done safely")
        ]},
        {"name": "repeat", "match": "repeat yourself", "repeat_last": true, "turns": [
            {"tool_calls": [{"name": "list_files", "arguments": {}}]}
        ]}
    ]});
    let stack = stack(scenarios, &[]).await;

    let (_, error) = fails(
        &stack,
        &json!({"instruction": "bounce", "piece": "pingpong"}),
    )
    .await;
    assert!(error.contains("revisit guard"), "{error}");

    let asked = stack
        .run(&json!({"instruction": "ask me", "piece": "chat"}))
        .await;
    assert_eq!(asked.job().status, JobStatus::WaitingHuman);
    assert_eq!(asked.job().wait_reason, Some(WaitReason::Ask));

    let (_, error) = fails(
        &stack,
        &json!({"instruction": "give up", "piece": "pingpong"}),
    )
    .await;
    assert_eq!(error, "aborted in movement `pong`: cannot be done safely");

    let (looped, error) = fails(&stack, &json!({"instruction": "repeat yourself"})).await;
    assert!(error.contains("loop detected"), "{error}");
    let id = looped.id();
    let warned = stack.events(id).await.iter().any(|e| {
        e.payload["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[Loop guard]"))
    });
    assert!(warned, "a warning came before the end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_that_cannot_fit_fails_with_context_overflow() {
    let scenarios = json!({"scenarios": [{"name": "any", "turns": [
        {"tool_calls": [{"name": "complete", "arguments": {"result": "never"}}]}
    ]}]});
    let stack = stack(scenarios, &[("MAX_PROMPT_TOKENS", "200")]).await;
    let (_, error) = fails(&stack, &json!({"instruction": "anything"})).await;
    assert!(error.starts_with("context overflow"), "{error}");
    assert!(
        stack.llm.requests().await.expect("requests").is_empty(),
        "no request that cannot fit is sent"
    );
}

/// The other guards: text-only replies, the per-movement watchdog (with its warning), the
/// `max_movements` loop guard, a start movement given by the task, the job deadline,
/// `MAX_ITERATIONS`, and the grounded piece selection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_text_only_limit_loop_guard_start_override_and_deadline_hold() {
    let glob = |n: usize| json!({"tool_calls": [{"name": "glob", "arguments": {"pattern": format!("d{n}/*")}}]});
    let scenarios = json!({"scenarios": [
        {"name": "chatter", "match": "chatter", "repeat_last": true, "turns": [{"text": "Hmm."}]},
        {"name": "spin", "match": "spin", "turns": (0..8).map(glob).collect::<Vec<_>>()},
        {"name": "swing", "match": "swing", "repeat_last": false, "turns": [
            transition("b", "1"), transition("a", "2"), transition("b", "3"), transition("a", "4")
        ]},
        {"name": "start", "match": "start at b", "turns": [
            {"tool_calls": [{"name": "complete", "arguments": {"result": "started in b"}}]}
        ]},
        {"name": "many", "match": "many steps", "turns": (10..16).map(glob).collect::<Vec<_>>()},
        {"name": "slow", "match": "slow", "turns": [
            {"delay_ms": 600, "tool_calls": [{"name": "glob", "arguments": {"pattern": "*"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "too late"}}]}
        ]}
    ]});
    let main = stack(scenarios.clone(), &[]).await;

    let (chatter, error) = fails(&main, &json!({"instruction": "chatter", "piece": "tight"})).await;
    assert!(
        error.contains("replied 3 times without calling a tool"),
        "{chatter:?}"
    );
    let id = chatter.id();
    let warnings = main
        .events(id)
        .await
        .iter()
        .filter(|e| {
            e.payload["role"] == "user"
                && e.payload["content"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("Your last reply called no tool"))
        })
        .count();
    assert_eq!(
        warnings, 2,
        "a warning after each of the allowed text-only replies"
    );

    let (spin, error) = fails(&main, &json!({"instruction": "spin", "piece": "tight"})).await;
    assert!(
        error.contains("movement `a` took 5 LLM iterations"),
        "{spin:?}"
    );
    let id = spin.id();
    let watched = main.events(id).await.iter().any(|e| {
        e.payload["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[Watchdog] 2 LLM iterations are left in movement `a`"))
    });
    assert!(watched, "the watchdog warned first");

    let (swing, error) = fails(&main, &json!({"instruction": "swing", "piece": "tight"})).await;
    assert!(error.contains("may enter 3 movements in all"), "{swing:?}");

    let start = main
        .run(&json!({"instruction": "start at b", "piece": "tight", "start_movement": "b"}))
        .await;
    assert_eq!(start.job().status, JobStatus::Succeeded, "{start:?}");
    let id = start.id();
    let events = main.events(id).await;
    let first = events
        .iter()
        .find(|e| e.kind == EventKind::Movement)
        .expect("movement");
    assert_eq!(first.payload["name"], "b", "the task's start movement wins");

    // Another stack: a 300 ms job deadline, 3 LLM iterations per job, and every task
    // without a piece on `tight`.
    let strict = stack(
        scenarios,
        &[
            ("JOB_DEADLINE_MS", "300"),
            ("MAX_ITERATIONS", "3"),
            ("PIECE_SELECTION", "grounded"),
            ("GROUNDED_PIECE", "tight"),
        ],
    )
    .await;
    let slow = strict.run(&json!({"instruction": "slow"})).await;
    assert_eq!(slow.task.piece, "tight", "the grounded piece was chosen");
    let error = slow.job().error.as_deref().unwrap_or_default();
    assert!(error.contains("deadline exceeded"), "{slow:?}");
    // MAX_ITERATIONS (3) ends the job before the piece's own limit (5) would.
    let (many, error) = fails(&strict, &json!({"instruction": "many steps"})).await;
    assert!(
        error.contains("no `complete` after 3 LLM iterations"),
        "{many:?}"
    );
}
