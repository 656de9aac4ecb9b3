//! A typed client of MAESTRO's REST API, as tests use it: every answer is parsed into the
//! API's own types (`maestro_api`), so a test reads as the scenario it checks. The plain
//! methods expect the call to succeed and panic with the status and body when it does not
//! (a test failing there is the clearest report); the `try_` ones return the refusal
//! ([`Refused`]: status, code, message) for tests that check it.

use std::fmt::Display;
use std::time::Duration;

use maestro_api::{
    ActionList, CommentList, DecideReply, DecideRequest, ErrorBody, EventPage, RequiredAction,
    RoutedComment, SubtaskList, Task, TokenReply, Transcript, Webhook,
};
use maestro_domain::task::ChildTask;
use maestro_domain::{Comment, Event, JobStatus, TaskId};
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::SseClient;

/// How long [`Client::wait`] waits.
pub const WAIT: Duration = Duration::from_secs(60);

/// The statuses of a job that is over.
pub const OVER: [JobStatus; 3] = [
    JobStatus::Succeeded,
    JobStatus::Failed,
    JobStatus::Cancelled,
];

/// The statuses a job no longer runs in: over, or waiting for someone.
pub const SETTLED: [JobStatus; 5] = [
    JobStatus::Succeeded,
    JobStatus::Failed,
    JobStatus::Cancelled,
    JobStatus::WaitingHuman,
    JobStatus::WaitingSubtasks,
];

/// A request the API refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for Refused {}

impl Refused {
    /// Its status and code, to compare in one go.
    pub fn pair(&self) -> (u16, &str) {
        (self.status, self.code.as_str())
    }
}

/// The API as one owner (one bearer token) sees it.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    pub fn new(http: reqwest::Client, base: &str, token: &str) -> Self {
        Self {
            http,
            base: base.to_owned(),
            token: token.to_owned(),
        }
    }

    /// The bearer token it calls with.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The gateway's base URL (`http://127.0.0.1:<port>`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Any call: `(status, JSON body)` (`null` for an empty body).
    pub async fn api(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> anyhow::Result<(u16, serde_json::Value)> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        let body = if text.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("not JSON ({e}): {text}"))?
        };
        Ok((status, body))
    }

    /// A call whose 2xx answer is a `T`; anything else is [`Refused`].
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, Refused> {
        let body = body.map(|b| serde_json::to_value(b).expect("a request body is JSON"));
        let (status, answer) = self
            .api(method.clone(), path, body.as_ref())
            .await
            .unwrap_or_else(|e| panic!("{method} {path} got no answer: {e:#}"));
        if !(200..300).contains(&status) {
            let error: ErrorBody = serde_json::from_value(answer.clone()).unwrap_or_else(|_| {
                panic!("{method} {path}: {status} without an error body: {answer}")
            });
            return Err(Refused {
                status,
                code: error.error.code,
                message: error.error.message,
            });
        }
        Ok(serde_json::from_value(answer.clone())
            .unwrap_or_else(|e| panic!("{method} {path}: unexpected answer ({e}): {answer}")))
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> T {
        self.call(Method::GET, path, None::<&()>)
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// `POST /api/local/tasks`, or its refusal.
    pub async fn try_create(&self, body: &impl Serialize) -> Result<Task, Refused> {
        self.call(Method::POST, "/api/local/tasks", Some(body))
            .await
    }

    /// Create a task (`{"instruction": ..., ...}` or a `CreateTask`).
    pub async fn create(&self, body: &impl Serialize) -> Task {
        self.try_create(body)
            .await
            .unwrap_or_else(|e| panic!("create task: {e}"))
    }

    /// Create a task; its id.
    pub async fn new_task(&self, body: &impl Serialize) -> TaskId {
        self.create(body).await.id()
    }

    /// A task with its latest job.
    pub async fn task(&self, id: impl Display) -> Task {
        self.get(&format!("/api/local/tasks/{id}")).await
    }

    /// Poll the task until its latest job's status is one of `statuses` (at most [`WAIT`]).
    pub async fn wait(&self, id: impl Display, statuses: &[JobStatus]) -> Task {
        self.wait_within(id, statuses, WAIT).await
    }

    /// [`Client::wait`], for at most `timeout`.
    pub async fn wait_within(
        &self,
        id: impl Display,
        statuses: &[JobStatus],
        timeout: Duration,
    ) -> Task {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let task = self.task(&id).await;
            if task.status().is_some_and(|s| statuses.contains(&s)) {
                return task;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {id} is {:?} after {timeout:?}, expected one of {statuses:?}: {task:?}",
                task.status()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Wait (at most [`WAIT`]) until the task's latest job is over: succeeded, failed or
    /// cancelled.
    pub async fn wait_over(&self, id: impl Display) -> Task {
        self.wait(id, &OVER).await
    }

    /// Wait (at most [`WAIT`]) until the task's latest job no longer runs ([`SETTLED`]): it is
    /// over, or waits for a person or for its subtasks.
    pub async fn settle(&self, id: impl Display) -> Task {
        self.wait(id, &SETTLED).await
    }

    /// Create a task and wait until its job no longer runs ([`SETTLED`]).
    pub async fn run(&self, body: &impl Serialize) -> Task {
        let task = self.create(body).await;
        self.wait(task.id(), &SETTLED).await
    }

    /// Every persisted event of a task, in order.
    pub async fn events(&self, id: impl Display) -> Vec<Event> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let page: EventPage = self
                .get(&format!(
                    "/api/local/tasks/{id}/events?after={after}&limit=1000"
                ))
                .await;
            if page.events.is_empty() {
                return all;
            }
            after = page.next_after;
            all.extend(page.events);
        }
    }

    /// The items the task waits for (its own and its subtasks').
    pub async fn required_actions(&self, id: impl Display) -> Vec<RequiredAction> {
        let list: ActionList = self
            .get(&format!("/api/local/tasks/{id}/required-actions"))
            .await;
        list.required_actions
    }

    /// Every item the task itself ever had, decided ones too (`?all=true`).
    pub async fn all_required_actions(&self, id: impl Display) -> Vec<RequiredAction> {
        let list: ActionList = self
            .get(&format!("/api/local/tasks/{id}/required-actions?all=true"))
            .await;
        list.required_actions
    }

    /// Supply this owner's token for an MCP server.
    pub async fn supply_token(&self, server: &str, token: &str) -> Result<TokenReply, Refused> {
        let path = format!("/api/local/mcp-servers/{server}/token");
        let body = serde_json::json!({ "token": token });
        self.call(Method::PUT, &path, Some(&body)).await
    }

    /// Decide item `rid` through `route` (`required-actions`, `tool-requests` or
    /// `package-requests`).
    pub async fn decide_via(
        &self,
        id: impl Display,
        route: &str,
        rid: impl Display,
        decision: &DecideRequest,
    ) -> Result<DecideReply, Refused> {
        let path = format!("/api/local/tasks/{id}/{route}/{rid}/decide");
        self.call(Method::POST, &path, Some(decision)).await
    }

    /// Decide item `rid` (any kind).
    pub async fn decide(
        &self,
        id: impl Display,
        rid: impl Display,
        decision: &DecideRequest,
    ) -> Result<DecideReply, Refused> {
        self.decide_via(id, "required-actions", rid, decision).await
    }

    /// Comment on a task.
    pub async fn comment(&self, id: impl Display, body: &str) -> Result<RoutedComment, Refused> {
        let path = format!("/api/local/tasks/{id}/comments");
        let body = serde_json::json!({ "body": body });
        self.call(Method::POST, &path, Some(&body)).await
    }

    /// Continue a finished task (`{"instruction": ..., "piece"?, "model"?}` or a
    /// `ContinueTask`), or the refusal.
    pub async fn continue_task(
        &self,
        id: impl Display,
        body: &impl Serialize,
    ) -> Result<Task, Refused> {
        let path = format!("/api/local/tasks/{id}/continue");
        self.call(Method::POST, &path, Some(body)).await
    }

    /// A task's comments, oldest first.
    pub async fn comments(&self, id: impl Display) -> Vec<Comment> {
        let list: CommentList = self.get(&format!("/api/local/tasks/{id}/comments")).await;
        list.comments
    }

    /// Cancel a task (and its subtasks).
    pub async fn cancel(&self, id: impl Display) -> Result<Task, Refused> {
        let path = format!("/api/local/tasks/{id}/cancel");
        self.call(Method::POST, &path, None::<&()>).await
    }

    /// The subtasks a task delegated.
    pub async fn subtasks(&self, id: impl Display) -> Vec<ChildTask> {
        let list: SubtaskList = self.get(&format!("/api/local/tasks/{id}/subtasks")).await;
        list.subtasks
    }

    /// Wait (at most [`WAIT`]) until the task has delegated `n` subtasks; they are returned.
    pub async fn wait_for_subtasks(&self, id: impl Display, n: usize) -> Vec<ChildTask> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let children = self.subtasks(&id).await;
            if children.len() >= n {
                return children;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{id} has {children:?}, not {n} subtasks"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A task's transcript.
    pub async fn transcript(&self, id: impl Display) -> Transcript {
        self.get(&format!("/api/local/tasks/{id}/transcript")).await
    }

    /// `POST /api/webhooks`, or its refusal.
    pub async fn try_create_webhook(&self, body: &impl Serialize) -> Result<Webhook, Refused> {
        self.call(Method::POST, "/api/webhooks", Some(body)).await
    }

    /// Subscribe a webhook (the answer shows its secret, once).
    pub async fn create_webhook(&self, body: &impl Serialize) -> Webhook {
        self.try_create_webhook(body)
            .await
            .unwrap_or_else(|e| panic!("create webhook: {e}"))
    }

    /// Wait (at most [`WAIT`]) until the task's stream shows a delta after a tool result: the
    /// model is streaming its answer to a tool's result (a second turn).
    pub async fn wait_for_next_turn(&self, id: impl Display) {
        let mut stream = self.stream(id, None).await;
        let mut seen_result = false;
        let items = stream
            .read_until(WAIT, |item| {
                seen_result |= item.event == "tool_result";
                seen_result && item.event == "delta"
            })
            .await;
        assert_eq!(
            items.last().map(|i| i.event.as_str()),
            Some("delta"),
            "the next turn streams: {items:#?}"
        );
    }

    /// Open the task's SSE stream, after `last_event_id` when given.
    pub async fn stream(&self, id: impl Display, last_event_id: Option<&str>) -> SseClient {
        let url = format!("{}/api/local/tasks/{id}/stream", self.base);
        SseClient::connect(&self.http, &url, &self.token, last_event_id)
            .await
            .unwrap_or_else(|e| panic!("stream of {id}: {e:#}"))
    }
}
