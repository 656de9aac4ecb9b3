//! MCP tools through the whole stack, against a real, independently written MCP server
//! (npm `@modelcontextprotocol/server-everything`, stdio, installed by `scripts/test`): its
//! tools are offered to the model namespaced (`mcp__everything__echo`), run through the
//! tool-runner inside the sandbox, and their results land in the events. A server that needs
//! authorization stops the job before the LLM is called (`mcp_auth_required`) until the user
//! supplies a token, which then reaches the server's environment.

use maestro_api::DecideRequest;
use maestro_domain::{ActionStatus, EventKind, JobStatus, WaitReason};
use maestro_testkit::{Stack, StackOptions, TaskExt, of_kind};
use serde_json::{Value, json};
use std::path::PathBuf;

/// Where `scripts/test` installs the server (`MCP_EVERYTHING_DIR` overrides).
fn install_dir() -> PathBuf {
    let dir = std::env::var_os("MCP_EVERYTHING_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/maestro-tools/mcp"));
    let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.exists(),
        "{} is missing: run scripts/test (it installs the MCP server with npm)",
        entry.display()
    );
    dir
}

fn policy(requires_auth: bool) -> String {
    let install = install_dir();
    let entry = install.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let policy = json!({
        "allowed_tools": ["*", "mcp__everything__*"],
        "mcp_servers": {"everything": {
            "command": ["node", entry.display().to_string(), "stdio"],
            "read_only_paths": [install.display().to_string()],
            "requires_auth": requires_auth
        }}
    });
    policy.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_calls_a_real_mcp_servers_tools_in_the_sandbox() {
    let scenario = json!({"scenarios": [{
        "name": "mcp",
        "turns": [
            {"tool_calls": [{"name": "mcp__everything__echo", "arguments": {"message": "hello from maestro"}}]},
            {"tool_calls": [{"name": "mcp__everything__get-sum", "arguments": {"a": 2, "b": 3}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "used MCP"}}]}
        ]
    }]});
    let stack = Stack::up(StackOptions::new(scenario).policy(&policy(false))).await;
    let done = stack
        .run(&json!({"instruction": "use the MCP server"}))
        .await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");

    let events = stack.events(done.id()).await;
    let results: Vec<&Value> = of_kind(&events, EventKind::ToolResult)
        .map(|e| &e.payload)
        .collect();
    assert_eq!(results[0]["name"], "mcp__everything__echo");
    assert_eq!(results[0]["is_error"], false, "{:?}", results[0]);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("Echo: hello from maestro"),
        "{:?}",
        results[0]
    );
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap_or_default()
            .contains('5'),
        "2 + 3: {:?}",
        results[1]
    );

    let requests = stack.llm.requests().await.expect("requests");
    let offered: Vec<&str> = requests[0]["body"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        offered.contains(&"mcp__everything__echo"),
        "MCP tools are offered: {offered:?}"
    );
    assert_eq!(offered.last(), Some(&"complete"), "complete comes last");
    let first = serde_json::to_string(&requests[0]["body"]["tools"]).expect("json");
    for request in &requests {
        assert_eq!(
            serde_json::to_string(&request["body"]["tools"]).expect("json"),
            first,
            "same tools bytes every time"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_needs_authorization_waits_for_a_token_then_gets_it() {
    let scenario = json!({"scenarios": [{"name": "any", "turns": [
        {"tool_calls": [{"name": "mcp__everything__get-env", "arguments": {}}]},
        {"tool_calls": [{"name": "complete", "arguments": {"result": "x"}}]}
    ]}]});
    let stack = Stack::up(StackOptions::new(scenario).policy(&policy(true))).await;
    let done = stack.run(&json!({"instruction": "needs a token"})).await;
    let id = done.id();
    assert_eq!(done.job().status, JobStatus::WaitingHuman, "{done:?}");
    assert_eq!(done.job().wait_reason, Some(WaitReason::McpAuthRequired));
    assert!(
        stack.llm.requests().await.expect("requests").is_empty(),
        "the LLM was not called"
    );
    let items = stack.required_actions(id).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].kind, WaitReason::McpAuthRequired);
    assert_eq!(items[0].text("server"), Some("everything"));
    let refused = stack
        .decide(id, items[0].id, &DecideRequest::new("approve"))
        .await
        .expect_err("refused");
    assert_eq!(refused.pair(), (409, "supply_the_token"));
    let comment = stack.comment(id, "go on").await.expect_err("refused");
    assert_eq!(
        comment.status, 409,
        "a comment does not answer an MCP login"
    );

    let empty = stack.supply_token("everything", "").await;
    assert_eq!(empty.expect_err("refused").status, 422);
    let (status, body) = stack
        .api(
            reqwest::Method::PUT,
            "/api/local/mcp-servers/everything/token",
            Some(&json!({"token": "s3cret-token"})),
        )
        .await
        .expect("put");
    assert_eq!((status, &body["resumed_jobs"]), (200, &json!(1)), "{body}");
    assert!(
        !body.to_string().contains("s3cret"),
        "the token is never returned"
    );
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    // The server got the token in its environment.
    let events = stack.events(id).await;
    let env = of_kind(&events, EventKind::ToolResult)
        .find(|e| e.payload["name"] == "mcp__everything__get-env")
        .expect("get-env result");
    assert!(
        env.payload["content"]
            .as_str()
            .is_some_and(|c| c.contains("MCP_AUTH_TOKEN") && c.contains("s3cret-token")),
        "{env:?}"
    );
    let all = stack.all_required_actions(id).await;
    assert_eq!(all[0].status, ActionStatus::Resolved, "{all:?}");
    let (_, raw) = stack
        .api(
            reqwest::Method::GET,
            &format!("/api/local/tasks/{id}/required-actions?all=true"),
            None,
        )
        .await
        .expect("list");
    assert!(!raw.to_string().contains("s3cret"));
}
