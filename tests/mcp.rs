//! MCP tools through the whole stack, against a real, independently written MCP server
//! (npm `@modelcontextprotocol/server-everything`, stdio, installed by `scripts/test`): its
//! tools are offered to the model namespaced (`mcp__everything__echo`), run through the
//! tool-runner inside the sandbox, and their results land in the events. A server that needs
//! authorization stops the job before the LLM is called (`mcp_auth_required`) until the user
//! supplies a token, which then reaches the server's environment.

use std::path::PathBuf;
use std::time::Duration;

use maestro_testkit::{Stack, StackOptions};
use reqwest::Method;
use serde_json::{Value, json};

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

fn policy(dir: &tempfile::TempDir, requires_auth: bool) -> String {
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
    let path = dir.path().join("policy.json");
    std::fs::write(&path, policy.to_string()).expect("policy");
    path.display().to_string()
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
    let dir = tempfile::tempdir().expect("dir");
    let stack =
        Stack::spawn(StackOptions::new(scenario).env("WORKSPACE_POLICY", &policy(&dir, false)))
            .await
            .expect("the stack starts");
    let task = stack
        .create_task(json!({"instruction": "use the MCP server"}))
        .await
        .expect("task");
    let id = task["id"].as_str().expect("id");
    let done = stack
        .wait_for_status(
            id,
            &["succeeded", "failed", "waiting_human"],
            Duration::from_secs(60),
        )
        .await
        .expect("ends");
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");

    let events = stack.events(id).await.expect("events");
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool_result")
        .map(|e| &e["payload"])
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
    let dir = tempfile::tempdir().expect("dir");
    let stack =
        Stack::spawn(StackOptions::new(scenario).env("WORKSPACE_POLICY", &policy(&dir, true)))
            .await
            .expect("the stack starts");
    let task = stack
        .create_task(json!({"instruction": "needs a token"}))
        .await
        .expect("task");
    let id = task["id"].as_str().expect("id");
    let done = stack
        .wait_for_status(
            id,
            &["waiting_human", "succeeded", "failed"],
            Duration::from_secs(30),
        )
        .await
        .expect("ends");
    assert_eq!(done["latest_job"]["status"], "waiting_human", "{done}");
    assert_eq!(done["latest_job"]["wait_reason"], "mcp_auth_required");
    assert!(
        stack.llm.requests().await.expect("requests").is_empty(),
        "the LLM was not called"
    );
    let path = format!("/api/local/tasks/{id}/required-actions");
    let (status, pending) = stack.api(Method::GET, &path, None).await.expect("list");
    assert_eq!(status, 200);
    let items = pending["required_actions"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{pending}");
    assert_eq!(items[0]["kind"], "mcp_auth_required");
    assert_eq!(items[0]["server"], "everything");
    let decide = format!("{path}/{}/decide", items[0]["id"].as_str().expect("id"));
    let (status, body) = stack
        .api(Method::POST, &decide, Some(&json!({"decision": "approve"})))
        .await
        .expect("decide");
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("supply_the_token"))
    );
    let comments = format!("/api/local/tasks/{id}/comments");
    let (status, _) = stack
        .api(Method::POST, &comments, Some(&json!({"body": "go on"})))
        .await
        .expect("comment");
    assert_eq!(status, 409, "a comment does not answer an MCP login");

    let token_path = "/api/local/mcp-servers/everything/token";
    let (status, _) = stack
        .api(Method::PUT, token_path, Some(&json!({"token": ""})))
        .await
        .expect("put");
    assert_eq!(status, 422);
    let (status, body) = stack
        .api(
            Method::PUT,
            token_path,
            Some(&json!({"token": "s3cret-token"})),
        )
        .await
        .expect("put");
    assert_eq!((status, &body["resumed_jobs"]), (200, &json!(1)), "{body}");
    assert!(
        !body.to_string().contains("s3cret"),
        "the token is never returned"
    );
    let done = stack
        .wait_for_status(id, &["succeeded", "failed"], Duration::from_secs(60))
        .await
        .expect("ends");
    assert_eq!(done["latest_job"]["status"], "succeeded", "{done}");
    // The server got the token in its environment.
    let events = stack.events(id).await.expect("events");
    let env = events
        .iter()
        .find(|e| e["kind"] == "tool_result" && e["payload"]["name"] == "mcp__everything__get-env")
        .expect("get-env result");
    assert!(
        env["payload"]["content"]
            .as_str()
            .is_some_and(|c| c.contains("MCP_AUTH_TOKEN") && c.contains("s3cret-token")),
        "{env}"
    );
    let (_, all) = stack
        .api(Method::GET, &format!("{path}?all=true"), None)
        .await
        .expect("list");
    assert_eq!(all["required_actions"][0]["status"], "resolved", "{all}");
    assert!(!all.to_string().contains("s3cret"));
}
