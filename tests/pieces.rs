//! The piece engine end to end: a three-movement piece from `PIECES_DIR` runs against the
//! scripted LLM, and the requests the LLM received prove the prompt layout keeps its cache
//! warm (identical tools, each request extending the previous, one system message, ≥ 95 %
//! reuse after every transition); the router picks pieces (and falls back); and the guards
//! and final mappings end jobs the way they should.

use std::time::Duration;

use maestro_testkit::{Stack, StackOptions};
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

fn pieces_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("pieces dir");
    std::fs::write(dir.path().join("tight.yaml"), TIGHT).expect("write");
    std::fs::write(dir.path().join("triple.yaml"), TRIPLE).expect("write");
    std::fs::write(dir.path().join("pingpong.yml"), PINGPONG).expect("write");
    dir
}

async fn stack(scenarios: Value, pieces: &tempfile::TempDir, env: &[(&str, &str)]) -> Stack {
    let mut options =
        StackOptions::new(scenarios).env("PIECES_DIR", pieces.path().to_str().expect("utf-8 path"));
    for (key, value) in env {
        options = options.env(key, value);
    }
    Stack::spawn(options).await.expect("the stack starts")
}

async fn finish(stack: &Stack, body: Value) -> Value {
    let task = stack.create_task(body).await.expect("task");
    let id = task["id"].as_str().expect("id").to_owned();
    stack
        .wait_for_status(
            &id,
            &["succeeded", "failed", "waiting_human"],
            Duration::from_secs(30),
        )
        .await
        .expect("the job ends")
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
    let pieces = pieces_dir();
    let stack = stack(scenarios, &pieces, &[]).await;
    // A realistic prompt: the tools, the system message and a detailed instruction (about
    // 3,000 tokens of background), as a job has by the time it changes movement.
    let background = "Background: the team keeps short notes in the workspace root, one per \
                      topic, plain text, ending with a newline. "
        .repeat(120);
    let task = finish(
        &stack,
        json!({"instruction": format!("Please leave a note.\n\n{background}"), "piece": "triple"}),
    )
    .await;
    assert_eq!(task["latest_job"]["status"], "succeeded", "{task}");
    assert_eq!(task["piece"], "triple");
    let id = task["id"].as_str().expect("id");

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
        !system.contains(id),
        "no per-task data in the system message"
    );

    let events = stack.events(id).await.expect("events");
    let movements: Vec<(String, Value)> = events
        .iter()
        .filter(|e| e["kind"] == "movement")
        .map(|e| {
            (
                e["payload"]["name"].as_str().unwrap_or_default().to_owned(),
                e["payload"]["reason"].clone(),
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
        .filter(|e| e["kind"] == "tool_result")
        .map(|e| {
            (
                e["payload"]["content"].as_str().unwrap_or_default(),
                e["payload"]["is_error"].as_bool().unwrap_or_default(),
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
        .filter(|e| e["kind"] == "message" && e["payload"]["role"] == "assistant")
        .map(|e| &e["payload"]["usage"])
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
    let pieces = pieces_dir();
    let stack = stack(scenarios, &pieces, &[("PIECE_SELECTION", "router")]).await;
    let routed = finish(&stack, json!({"instruction": "Please leave a note."})).await;
    assert_eq!(routed["latest_job"]["status"], "succeeded", "{routed}");
    assert_eq!(routed["piece"], "triple", "the router's choice is stored");

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
    let fallback = finish(&stack, json!({"instruction": "Please answer me."})).await;
    assert_eq!(fallback["latest_job"]["status"], "succeeded", "{fallback}");
    assert_eq!(fallback["piece"], "chat");

    let explicit = stack
        .create_task(json!({"instruction": "x", "piece": "pingpong", "start_movement": "nope"}))
        .await
        .expect_err("an unknown start movement is refused");
    assert!(
        explicit.to_string().contains("invalid_start_movement"),
        "{explicit}"
    );
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
    let pieces = pieces_dir();
    let stack = stack(scenarios, &pieces, &[]).await;

    let bounced = finish(
        &stack,
        json!({"instruction": "bounce", "piece": "pingpong"}),
    )
    .await;
    assert_eq!(bounced["latest_job"]["status"], "failed");
    let error = bounced["latest_job"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("revisit guard"), "{error}");

    let asked = finish(&stack, json!({"instruction": "ask me", "piece": "chat"})).await;
    assert_eq!(asked["latest_job"]["status"], "waiting_human");
    assert_eq!(asked["latest_job"]["wait_reason"], "ask");

    let aborted = finish(
        &stack,
        json!({"instruction": "give up", "piece": "pingpong"}),
    )
    .await;
    assert_eq!(aborted["latest_job"]["status"], "failed");
    let error = aborted["latest_job"]["error"].as_str().unwrap_or_default();
    assert_eq!(error, "aborted in movement `pong`: cannot be done safely");

    let looped = finish(&stack, json!({"instruction": "repeat yourself"})).await;
    assert_eq!(looped["latest_job"]["status"], "failed");
    let error = looped["latest_job"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("loop detected"), "{error}");
    let id = looped["id"].as_str().expect("id");
    let warned = stack.events(id).await.expect("events").iter().any(|e| {
        e["payload"]["content"]
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
    let pieces = pieces_dir();
    let stack = stack(scenarios, &pieces, &[("MAX_PROMPT_TOKENS", "200")]).await;
    let task = finish(&stack, json!({"instruction": "anything"})).await;
    assert_eq!(task["latest_job"]["status"], "failed");
    let error = task["latest_job"]["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("context overflow"), "{error}");
    assert!(
        stack.llm.requests().await.expect("requests").is_empty(),
        "no request that cannot fit is sent"
    );
}

/// `--upstream`: the scripted LLM forwards every request to another server (here a second
/// scripted LLM standing in for llama.cpp) for one token and reports that server's usage.
#[tokio::test]
async fn scripted_llm_reports_the_upstream_usage() {
    let dir = tempfile::tempdir().expect("dir");
    let upstream = maestro_testkit::ScriptedLlm::start(
        &json!({"scenarios": [{"name": "real", "repeat_last": true, "turns": [{"text": "x"}]}]}),
        dir.path(),
    )
    .await
    .expect("upstream");
    let scenarios = json!({"scenarios": [{"name": "look", "turns": [
        {"tool_calls": [{"name": "glob", "arguments": {"pattern": "*"}}]},
        {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]},
    ]}]});
    let mut options = StackOptions::new(scenarios);
    options.llm_upstream = Some(upstream.base_url.clone());
    let stack = Stack::spawn(options).await.expect("the stack starts");
    let done = finish(&stack, json!({"instruction": "look around"})).await;
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");

    let forwarded = upstream.requests().await.expect("upstream requests");
    let answered = stack.llm.requests().await.expect("requests");
    assert_eq!(
        forwarded.len(),
        answered.len(),
        "every request is forwarded once"
    );
    for (sent, asked) in forwarded.iter().zip(&answered) {
        assert_eq!(sent["body"]["max_tokens"], 1);
        assert_eq!(sent["body"]["stream"], false);
        assert_eq!(sent["body"]["messages"], asked["body"]["messages"]);
        assert_eq!(sent["body"]["tools"], asked["body"]["tools"]);
    }
    // The second request extends the first, so the upstream reports a cached prefix, and the
    // worker recorded the upstream's figures.
    let events = stack
        .events(done["id"].as_str().expect("id"))
        .await
        .expect("events");
    let usage: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "message" && e["payload"]["role"] == "assistant")
        .map(|e| &e["payload"]["usage"])
        .collect();
    assert_eq!(usage.len(), 2, "{events:?}");
    assert!(
        usage[1]["cachedPromptTokens"].as_u64().unwrap_or(0) > 0,
        "{usage:?}"
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
    let pieces = pieces_dir();
    let main = stack(scenarios.clone(), &pieces, &[]).await;

    let chatter = finish(&main, json!({"instruction": "chatter", "piece": "tight"})).await;
    let error = chatter["latest_job"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("replied 3 times without calling a tool"),
        "{chatter}"
    );
    let id = chatter["id"].as_str().expect("id");
    let warnings = main
        .events(id)
        .await
        .expect("events")
        .iter()
        .filter(|e| {
            e["payload"]["role"] == "user"
                && e["payload"]["content"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("Your last reply called no tool"))
        })
        .count();
    assert_eq!(
        warnings, 2,
        "a warning after each of the allowed text-only replies"
    );

    let spin = finish(&main, json!({"instruction": "spin", "piece": "tight"})).await;
    let error = spin["latest_job"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("movement `a` took 5 LLM iterations"),
        "{spin}"
    );
    let id = spin["id"].as_str().expect("id");
    let watched = main.events(id).await.expect("events").iter().any(|e| {
        e["payload"]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[Watchdog] 2 LLM iterations are left in movement `a`"))
    });
    assert!(watched, "the watchdog warned first");

    let swing = finish(&main, json!({"instruction": "swing", "piece": "tight"})).await;
    let error = swing["latest_job"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("may enter 3 movements in all"), "{swing}");

    let start = finish(
        &main,
        json!({"instruction": "start at b", "piece": "tight", "start_movement": "b"}),
    )
    .await;
    assert_eq!(start["latest_job"]["status"], "succeeded", "{start}");
    let id = start["id"].as_str().expect("id");
    let events = main.events(id).await.expect("events");
    let first = events
        .iter()
        .find(|e| e["kind"] == "movement")
        .expect("movement");
    assert_eq!(
        first["payload"]["name"], "b",
        "the task's start movement wins"
    );

    // Another stack: a 300 ms job deadline, 3 LLM iterations per job, and every task
    // without a piece on `tight`.
    let strict = stack(
        scenarios,
        &pieces,
        &[
            ("JOB_DEADLINE_MS", "300"),
            ("MAX_ITERATIONS", "3"),
            ("PIECE_SELECTION", "grounded"),
            ("GROUNDED_PIECE", "tight"),
        ],
    )
    .await;
    let slow = finish(&strict, json!({"instruction": "slow"})).await;
    assert_eq!(slow["piece"], "tight", "the grounded piece was chosen");
    let error = slow["latest_job"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("deadline exceeded"), "{slow}");
    // MAX_ITERATIONS (3) ends the job before the piece's own limit (5) would.
    let many = finish(&strict, json!({"instruction": "many steps"})).await;
    let error = many["latest_job"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("no `complete` after 3 LLM iterations"),
        "{many}"
    );
}

/// The prompt guard end to end: when the conversation outgrows `MAX_PROMPT_TOKENS` it is
/// deduplicated, compacted and, still too big, summarized by an LLM call; the rewrite is an
/// event, the next request carries the summary instead of the old messages, and the job goes
/// on to finish. The budget is set so that the guard first acts before turn 7's request —
/// when a second copy of a large read arrives — and needs all three steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outgrown_conversation_is_deduplicated_compacted_and_summarized() {
    let call = |calls: &[(&str, Value)]| {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(name, arguments)| json!({"name": name, "arguments": arguments}))
            .collect();
        json!({"tool_calls": calls})
    };
    let make = "yes 'The quick brown fox jumps over the lazy dog.' | head -c 6000 > big.txt; \
                yes 'Lorem ipsum dolor sit amet.' | head -c 2100 > mid.txt; \
                yes abc | head -c 1000 > small.txt";
    let mut turns = vec![
        call(&[("shell", json!({"command": make}))]),
        call(&[("read_file", json!({"path": "big.txt"}))]),
        call(&[("read_file", json!({"path": "mid.txt"}))]),
    ];
    for n in 0..4 {
        turns.push(call(&[("glob", json!({"pattern": format!("dir{n}/*")}))]));
    }
    turns.push(call(&[
        ("read_file", json!({"path": "big.txt"})),
        ("read_file", json!({"path": "small.txt"})),
    ]));
    turns.push(call(&[("complete", json!({"result": "read it"}))]));
    let scenarios = json!({"scenarios": [
        {"name": "summary", "match": "Summarize the work so far.", "repeat_last": true, "turns": [
            {"text": "big.txt (the fox sentence) and mid.txt (lorem ipsum) were made and read."}
        ]},
        {"name": "work", "turns": turns}
    ]});
    // Estimated (as the worker does: bytes / 4) the conversation is 2,866 tokens before turn
    // 7's request and 4,662 before turn 8's, besides 1,312 for the tools: 2,871 + 1,312 lets
    // turn 7 through and stops turn 8.
    let pieces = pieces_dir();
    let stack = stack(scenarios, &pieces, &[("MAX_PROMPT_TOKENS", "4183")]).await;
    let done = finish(
        &stack,
        json!({"instruction": "read the big file", "piece": "chat"}),
    )
    .await;
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    let id = done["id"].as_str().expect("id");
    let events = stack.events(id).await.expect("events");
    let rewrites: Vec<&Value> = events.iter().filter(|e| e["kind"] == "rewrite").collect();
    assert_eq!(rewrites.len(), 1, "one rewrite");
    assert_eq!(
        rewrites[0]["payload"]["steps"],
        json!(["dedup", "compact", "summarize"]),
        "all three steps, cheapest first"
    );
    let requests = stack.llm.requests().await.expect("requests");
    let summaries: Vec<&Value> = requests
        .iter()
        .filter(|r| r["scenario"] == "summary")
        .collect();
    assert_eq!(summaries.len(), 1, "one summarization call");
    let asked = summaries[0]["body"]["messages"][1]["content"]
        .as_str()
        .expect("request");
    assert!(
        asked.contains("yes 'The quick brown fox"),
        "the old part is summarized: {asked}"
    );
    let work: Vec<&Value> = requests
        .iter()
        .filter(|r| r["scenario"] == "work")
        .collect();
    assert_eq!(work.len(), 9, "every turn asked once");
    let last = work[8]["body"]["messages"].as_array().expect("messages");
    let texts: Vec<&str> = last.iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("[Summary of the earlier work")
                && t.contains("big.txt (the fox sentence)")),
        "the summary replaces the old messages"
    );
    assert!(
        !last
            .iter()
            .any(|m| m["tool_calls"].to_string().contains("head -c 6000")),
        "the summarized call is gone from the prompt"
    );
    assert_eq!(last[0]["role"], "system", "the system message is kept");
    assert!(
        texts[1].contains("read the big file"),
        "the opening user message is kept"
    );
}

/// A new job's prompt shows the workspace: AGENTS.md, the memory and skills indexes in the
/// static system message, the lessons with the instruction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_job_sees_agents_md_memory_skills_and_lessons() {
    let write = |path: &str, content: &str| json!({"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]});
    let scenarios = json!({"scenarios": [
        {"name": "follow", "match": "follows up an earlier one", "turns": [
            {"tool_calls": [{"name": "complete", "arguments": {"result": "seen"}}]}
        ]},
        {"name": "setup", "turns": [
            write("AGENTS.md", "Use tabs, never spaces."),
            write(".maestro/memory/build.md", "# How to build\nRun make."),
            write(".maestro/skills/release/SKILL.md", "---\nname: release\ndescription: Cut a release\n---\nSteps."),
            write(".maestro/lessons.md", "The tests need Postgres."),
            {"tool_calls": [{"name": "complete", "arguments": {"result": "set up"}}]}
        ]}
    ]});
    let pieces = pieces_dir();
    let stack = stack(scenarios, &pieces, &[]).await;
    let done = finish(&stack, json!({"instruction": "set up the workspace"})).await;
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    let id = done["id"].as_str().expect("id");
    let path = format!("/api/local/tasks/{id}/comments");
    let (status, _) = stack
        .api(
            reqwest::Method::POST,
            &path,
            Some(&json!({"body": "Look again."})),
        )
        .await
        .expect("comment");
    assert_eq!(status, 201);
    let done = stack
        .wait_for_status(id, &["succeeded", "failed"], Duration::from_secs(30))
        .await
        .expect("follow-up");
    assert_eq!(done["latest_job"]["job_no"], 2);
    let requests = stack.llm.requests().await.expect("requests");
    let follow = requests
        .iter()
        .find(|r| r["scenario"] == "follow")
        .expect("the follow-up's request");
    let system = follow["body"]["messages"][0]["content"]
        .as_str()
        .expect("system");
    assert!(system.contains("## AGENTS.md (from the workspace)\nUse tabs, never spaces."));
    assert!(
        system.contains("- `.maestro/memory/build.md`: How to build"),
        "{system}"
    );
    assert!(system.contains("- `.maestro/skills/release/SKILL.md`: release: Cut a release"));
    let user = follow["body"]["messages"][1]["content"]
        .as_str()
        .expect("user");
    assert!(
        user.contains("<lessons>") && user.contains("The tests need Postgres."),
        "{user}"
    );
}
