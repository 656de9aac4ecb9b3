//! What the model is sent, end to end: the prompt guard rewriting a conversation that
//! outgrew `MAX_PROMPT_TOKENS` (deduplicated, compacted, summarized), a new job's prompt
//! showing the workspace (AGENTS.md, memory and skills indexes, lessons), and the scripted
//! LLM reporting a real upstream server's usage.

use maestro_domain::{EventKind, JobStatus};
use maestro_testkit::{Stack, StackOptions, TaskExt, of_kind};
use serde_json::{Value, json};

async fn stack(scenarios: Value, env: &[(&str, &str)]) -> Stack {
    let mut options = StackOptions::new(scenarios);
    for (key, value) in env {
        options = options.env(key, value);
    }
    Stack::up(options).await
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
    // 7's request and 4,662 before turn 8's, besides 1,346 for the tools: 2,871 + 1,346 lets
    // turn 7 through and stops turn 8.
    let stack = stack(scenarios, &[("MAX_PROMPT_TOKENS", "4217")]).await;
    let done = stack
        .run(&json!({"instruction": "read the big file", "piece": "chat"}))
        .await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    let id = done.id();
    let events = stack.events(id).await;
    let rewrites: Vec<&Value> = of_kind(&events, EventKind::Rewrite)
        .map(|e| &e.payload)
        .collect();
    assert_eq!(rewrites.len(), 1, "one rewrite");
    assert_eq!(
        rewrites[0]["steps"],
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
    let stack = stack(scenarios, &[]).await;
    let done = stack
        .run(&json!({"instruction": "set up the workspace"}))
        .await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    let id = done.id();
    stack.comment(id, "Look again.").await.expect("a follow-up");
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().job_no, 2);
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
    let stack = Stack::up(options).await;
    let done = stack.run(&json!({"instruction": "look around"})).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");

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
    let events = stack.events(done.id()).await;
    let usage: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind == EventKind::Message && e.payload["role"] == "assistant")
        .map(|e| &e.payload["usage"])
        .collect();
    assert_eq!(usage.len(), 2, "{events:?}");
    assert!(
        usage[1]["cachedPromptTokens"].as_u64().unwrap_or(0) > 0,
        "{usage:?}"
    );
}
