//! Remote MCP servers over Streamable HTTP (rmcp on both sides), through the whole stack,
//! against `mcp-test-server` as a separate process: its tools are offered and run; a changed
//! tool list is listed again; a server that requires OAuth pauses the job
//! (`mcp_auth_required`) with a login URL, and the login — discovery, dynamic client
//! registration, authorization code with PKCE, all over real HTTP, the browser played by an
//! HTTP client that follows redirects — resumes the job by itself; an expiring grant is
//! refreshed; a refused login leaves the item waiting with the reason.

use std::time::Duration;

use maestro_domain::{ActionStatus, EventKind, JobStatus, WaitReason};
use maestro_testkit::{Stack, StackOptions, TaskExt, of_kind};
use serde_json::{Value, json};

/// A running `mcp-test-server` (stopped when dropped) and its log directory.
struct TestServer {
    process: maestro_testkit::Process,
    _dir: tempfile::TempDir,
}

impl TestServer {
    async fn start(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let process = maestro_testkit::Process::start(
            "mcp-test-server",
            &maestro_testkit::binary("mcp-test-server"),
            &args,
            &[],
            dir.path(),
        )
        .await
        .expect("the test MCP server starts");
        Self { process, _dir: dir }
    }

    fn base(&self) -> String {
        format!(
            "http://{}",
            self.process.addr().expect("it announces its address")
        )
    }

    fn policy(&self) -> String {
        json!({
            "allowed_tools": ["*", "mcp__remote__*"],
            "mcp_servers": {"remote": {"url": format!("{}/mcp", self.base())}}
        })
        .to_string()
    }

    async fn stats(&self) -> Value {
        reqwest::get(format!("{}/stats", self.base()))
            .await
            .expect("stats")
            .json()
            .await
            .expect("stats json")
    }
}

fn results(events: &[maestro_domain::Event]) -> Vec<Value> {
    of_kind(events, EventKind::ToolResult)
        .map(|e| e.payload.clone())
        .collect()
}

/// A browser: follows the redirects from the login URL to the authorization server and back
/// to MAESTRO's callback.
fn browser() -> reqwest::Client {
    maestro_runtime::http_client()
        .redirect(reqwest::redirect::Policy::limited(10))
        .build()
        .expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_offers_and_runs_its_tools_and_a_changed_list_is_listed_again() {
    let server = TestServer::start(&[]).await;
    let scenario = json!({"scenarios": [
        {"name": "second", "match": "second", "turns": [
            {"tool_calls": [{"name": "mcp__remote__extra", "arguments": {}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "used the new tool"}}]}
        ]},
        {"name": "first", "turns": [
            {"tool_calls": [{"name": "mcp__remote__echo", "arguments": {"message": "over HTTP"}}]},
            {"tool_calls": [{"name": "mcp__remote__add", "arguments": {"a": 2, "b": 40}}]},
            {"tool_calls": [{"name": "mcp__remote__grow", "arguments": {}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "used MCP"}}]}
        ]}
    ]});
    let stack = Stack::up(StackOptions::new(scenario).policy(&server.policy())).await;
    let done = stack
        .run(&json!({"instruction": "first: use the remote server"}))
        .await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    let results = results(&stack.events(done.id()).await);
    assert_eq!(results[0]["name"], "mcp__remote__echo");
    assert_eq!(
        results[0]["content"].as_str().map(str::trim),
        Some("Echo: over HTTP"),
        "{results:?}"
    );
    assert_eq!(
        results[1]["content"].as_str().map(str::trim),
        Some("42"),
        "{results:?}"
    );
    let requests = stack.llm.requests().await.expect("requests");
    let offered: Vec<&str> = requests[0]["body"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"mcp__remote__whoami"), "{offered:?}");
    assert!(!offered.contains(&"mcp__remote__extra"), "{offered:?}");

    // `grow` made the server announce a changed tool list: the next job lists it again.
    let second = stack
        .run(&json!({"instruction": "second: use the new tool"}))
        .await;
    assert_eq!(second.job().status, JobStatus::Succeeded, "{second:?}");
    let results = self::results(&stack.events(second.id()).await);
    assert_eq!(results[0]["is_error"], false, "{results:?}");
    assert_eq!(
        results[0]["content"].as_str().map(str::trim),
        Some("extra ran")
    );
}

/// The pause's items as the events list, the SSE stream and A2A show them to `client`.
async fn paused_items_seen_by(
    stack: &Stack,
    client: &maestro_testkit::Client,
    id: maestro_domain::TaskId,
) -> Vec<Value> {
    let events = client.events(id).await;
    let pause = of_kind(&events, EventKind::JobState)
        .find(|e| e.payload["status"] == "waiting_human")
        .expect("the pause event");
    let mut seen = vec![pause.payload["required_actions"][0].clone()];
    let mut sse = client.stream(id, None).await;
    while let Some(item) = sse.next(Duration::from_secs(5)).await {
        if item.event == "job_state" && item.data["payload"]["status"] == "waiting_human" {
            seen.push(item.data["payload"]["required_actions"][0].clone());
            break;
        }
    }
    let task = stack
        .http
        .post(stack.url("/a2a/v1"))
        .bearer_auth(client.token())
        .header("a2a-version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}}))
        .send()
        .await
        .expect("A2A answers")
        .json::<Value>()
        .await
        .expect("JSON-RPC");
    let parts = &task["result"]["status"]["message"]["parts"];
    let data = parts
        .as_array()
        .and_then(|parts| parts.iter().find_map(|p| p.get("data")))
        .unwrap_or_else(|| panic!("the status message's items: {task}"));
    seen.push(data["requiredActions"][0].clone());
    assert_eq!(seen.len(), 3, "events, stream and A2A: {seen:?}");
    seen
}

/// The creator finds the login link everywhere the pause shows; another reader of the task
/// finds the item (which server) without it.
async fn login_links_reach_the_creator_only(
    stack: &Stack,
    id: maestro_domain::TaskId,
    login_url: &str,
) {
    let creator = stack.client_as("test-token-alice");
    for item in paused_items_seen_by(stack, &creator, id).await {
        assert_eq!(item["server"], "remote", "{item}");
        let path = item["login_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{item}"));
        assert!(login_url.ends_with(path), "{path} in {login_url}");
    }
    let reader = stack.bob();
    for item in paused_items_seen_by(stack, &reader, id).await {
        assert_eq!(item["server"], "remote", "{item}");
        assert!(
            item.get("login_url").is_none(),
            "a reader gets no login link: {item}"
        );
    }
    let items = reader.required_actions(id).await;
    assert_eq!(items[0].text("server"), Some("remote"));
    assert_eq!(items[0].text("login_url"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_oauth_pauses_for_a_login_and_the_job_resumes_by_itself() {
    // Tokens live two seconds: every job finds its grant about to expire and refreshes it.
    let server = TestServer::start(&["--oauth", "--token-ttl", "2", "--user", "octo"]).await;
    let scenario = json!({"scenarios": [{"name": "any", "turns": [
        {"tool_calls": [{"name": "mcp__remote__whoami", "arguments": {}}]},
        {"tool_calls": [{"name": "complete", "arguments": {"result": "asked"}}]}
    ]}]});
    let stack = Stack::up(StackOptions::new(scenario).policy(&server.policy())).await;
    // Public: anyone signed in reads it, but only its creator gets the login link.
    let paused = stack
        .run(&json!({"instruction": "who am I there?", "visibility": "public"}))
        .await;
    let id = paused.id();
    assert_eq!(paused.job().status, JobStatus::WaitingHuman, "{paused:?}");
    assert_eq!(paused.job().wait_reason, Some(WaitReason::McpAuthRequired));
    assert!(
        stack.llm.requests().await.expect("requests").is_empty(),
        "the LLM is not called before the login"
    );
    let items = stack.required_actions(id).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].text("server"), Some("remote"));
    let login_url = items[0].text("login_url").expect("a login URL").to_owned();
    assert!(
        login_url.starts_with(&format!("{}/api/local/mcp/logins/", stack.base())),
        "{login_url}"
    );
    login_links_reach_the_creator_only(&stack, id, &login_url).await;

    // The person opens the link: MAESTRO → the authorization server → MAESTRO's callback.
    let landed = browser().get(&login_url).send().await.expect("the login");
    let callback = landed.url().clone();
    assert_eq!(landed.status(), 200, "{:?}", landed.text().await);
    assert_eq!(callback.path(), "/api/local/mcp/oauth/callback");
    let page = landed.text().await.expect("page");
    assert!(page.contains("Logged in to remote"), "{page}");

    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    let results = results(&stack.events(id).await);
    assert_eq!(
        results[0]["content"].as_str().map(str::trim),
        Some("logged in as octo"),
        "the call carried the owner's access token: {results:?}"
    );
    let all = stack.all_required_actions(id).await;
    assert_eq!(all[0].status, ActionStatus::Resolved, "{all:?}");
    assert_eq!(server.stats().await["code_grants"], 1);

    // The callback works once.
    let again = browser().get(callback).send().await.expect("replayed");
    assert_eq!(again.status(), 404);

    // A second task: no login (the grant is there), refreshed first (it expires in < 60 s).
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    let second = stack.run(&json!({"instruction": "and again?"})).await;
    assert_eq!(second.job().status, JobStatus::Succeeded, "{second:?}");
    let results = self::results(&stack.events(second.id()).await);
    assert_eq!(
        results[0]["content"].as_str().map(str::trim),
        Some("logged in as octo"),
        "{results:?}"
    );
    let stats = server.stats().await;
    assert!(stats["refresh_grants"].as_u64() >= Some(1), "{stats}");
    assert_eq!(stats["code_grants"], 1, "no second login: {stats}");

    // No token ever reaches the API.
    let (_, raw) = stack
        .api(
            reqwest::Method::GET,
            &format!("/api/local/tasks/{id}/required-actions?all=true"),
            None,
        )
        .await
        .expect("list");
    assert!(!raw.to_string().contains("access_token"), "{raw}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_leaves_the_item_waiting_with_the_reason() {
    let server = TestServer::start(&["--oauth", "--deny"]).await;
    let scenario = json!({"scenarios": [{"name": "any", "turns": [
        {"tool_calls": [{"name": "complete", "arguments": {"result": "x"}}]}
    ]}]});
    let stack = Stack::up(StackOptions::new(scenario).policy(&server.policy())).await;
    let paused = stack.run(&json!({"instruction": "needs a login"})).await;
    let id = paused.id();
    assert_eq!(paused.job().wait_reason, Some(WaitReason::McpAuthRequired));
    let items = stack.required_actions(id).await;
    let login_url = items[0].text("login_url").expect("a login URL").to_owned();

    let landed = browser().get(&login_url).send().await.expect("the login");
    assert_eq!(landed.status(), 400);
    let body: Value = landed.json().await.expect("an error body");
    assert_eq!(body["error"]["code"], "login_refused", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("access_denied")
    );

    let task = stack.task(id).await;
    assert_eq!(task.job().status, JobStatus::WaitingHuman, "still waiting");
    let items = stack.required_actions(id).await;
    assert_eq!(items.len(), 1);
    assert!(
        items[0]
            .text("login_error")
            .is_some_and(|e| e.contains("access_denied")),
        "the item says why: {items:?}"
    );
    assert_eq!(
        items[0].text("login_url"),
        Some(login_url.as_str()),
        "the same link, to retry"
    );

    // A link that names no login is a 404, in the API's shape.
    let unknown = browser()
        .get(format!(
            "{}/api/local/mcp/logins/{}",
            stack.base(),
            "0".repeat(64)
        ))
        .send()
        .await
        .expect("unknown");
    assert_eq!(unknown.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_logs_in_lists_the_tools_and_calls_one() {
    use tokio::io::AsyncBufReadExt as _;
    let server = TestServer::start(&["--oauth", "--user", "probe-user"]).await;
    let url = format!("{}/mcp", server.base());

    // Without --login it says what is needed.
    let refused = tokio::process::Command::new(maestro_testkit::binary("maestro-mcp-probe"))
        .arg(&url)
        .output()
        .await
        .expect("the probe runs");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("rerun with --login"), "{stderr}");

    let mut probe = tokio::process::Command::new(maestro_testkit::binary("maestro-mcp-probe"))
        .args([
            "--login",
            "--call",
            "add",
            "--args",
            r#"{"a": 20, "b": 22}"#,
            &url,
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the probe starts");
    let mut lines = tokio::io::BufReader::new(probe.stdout.take().expect("stdout")).lines();
    let mut printed = Vec::new();
    let login = loop {
        let line = lines
            .next_line()
            .await
            .expect("a line")
            .expect("the probe prints a login URL");
        printed.push(line.clone());
        if let Some(url) = line.strip_prefix("login: ") {
            break url.to_owned();
        }
    };
    let landed = browser().get(&login).send().await.expect("the login");
    assert_eq!(landed.status(), 200);
    while let Some(line) = lines.next_line().await.expect("a line") {
        printed.push(line);
    }
    let status = probe.wait().await.expect("the probe exits");
    let printed = printed.join("\n");
    assert!(status.success(), "{printed}");
    assert!(printed.contains("logged in"), "{printed}");
    assert!(printed.contains("whoami (SideEffecting)"), "{printed}");
    assert!(printed.contains("result of add:\n42"), "{printed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_do_not_fit_the_tools_schema_never_reach_the_server() {
    let server = TestServer::start(&[]).await;
    let scenario = json!({"scenarios": [{"name": "any", "turns": [
        {"tool_calls": [{"name": "mcp__remote__add", "arguments": {"a": "two", "b": 3}}]},
        {"tool_calls": [{"name": "mcp__remote__add", "arguments": {"a": 2, "b": 3}}]},
        {"tool_calls": [{"name": "complete", "arguments": {"result": "added"}}]}
    ]}]});
    let stack = Stack::up(StackOptions::new(scenario).policy(&server.policy())).await;
    let done = stack.run(&json!({"instruction": "add"})).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    let results = results(&stack.events(done.id()).await);
    assert_eq!(results[0]["is_error"], true, "{results:?}");
    let refusal = results[0]["content"].as_str().unwrap_or_default();
    assert!(
        refusal.contains("do not fit mcp__remote__add's parameters") && refusal.contains("`/a`"),
        "the field is named, and the server's own error never came: {refusal}"
    );
    assert_eq!(results[1]["content"].as_str().map(str::trim), Some("5"));
}
