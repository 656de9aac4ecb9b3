//! Signals from programs on the bus (docs/architecture.md#signals): a request on
//! `<prefix>.signals.requests` (NATS request/reply) carries a comment, a decision, an MCP token
//! or a cancel, with `Authorization: Bearer <token>` (and optionally `Idempotency-Key`) in its
//! headers. It is answered by the very route the REST API answers it with, through the
//! gateway's router, so ownership, validation, compare-and-set and error codes are the same:
//! the reply is `{"status": <HTTP status>, "body": <the REST answer>}`. What the command
//! changed is published on `<prefix>.signals.<task_id>.<kind>` like any other signal. Every
//! gateway copy listens in one queue group, so each request is answered once.

use axum::body::Body;
use axum::http::{Method, Request, header};
use futures::StreamExt as _;
use serde::Deserialize;
use serde_json::{Value, json};
use tower::ServiceExt as _;
use uuid::Uuid;

use crate::state::AppState;

/// The largest REST answer read back for a reply.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// What a program on the bus asks for.
#[derive(Debug, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
enum Command {
    /// `POST /api/local/tasks/{task_id}/comments` with `body`.
    Comment { task_id: String, body: Value },
    /// `POST /api/local/tasks/{task_id}/required-actions/{action_id}/decide` with `body`.
    Decide {
        task_id: String,
        action_id: String,
        body: Value,
    },
    /// `POST /api/local/tasks/{task_id}/cancel`.
    Cancel { task_id: String },
    /// `PUT /api/local/mcp-servers/{server}/token` with `body`.
    SupplyToken { server: String, body: Value },
}

impl Command {
    /// The route and body the command is, or the refusal of a malformed id.
    fn route(self) -> Result<(Method, String, Option<Value>), (u16, Value)> {
        let id = |raw: &str, what: &str| {
            raw.parse::<Uuid>()
                .map_err(|_| refusal(404, "not_found", &format!("{what} not found")))
        };
        Ok(match self {
            Command::Comment { task_id, body } => {
                let task = id(&task_id, "task")?;
                let path = format!("/api/local/tasks/{task}/comments");
                (Method::POST, path, Some(body))
            }
            Command::Decide {
                task_id,
                action_id,
                body,
            } => {
                let (task, action) = (id(&task_id, "task")?, id(&action_id, "required action")?);
                let path = format!("/api/local/tasks/{task}/required-actions/{action}/decide");
                (Method::POST, path, Some(body))
            }
            Command::Cancel { task_id } => {
                let task = id(&task_id, "task")?;
                (
                    Method::POST,
                    format!("/api/local/tasks/{task}/cancel"),
                    None,
                )
            }
            Command::SupplyToken { server, body } => {
                let named = !server.is_empty()
                    && server
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
                if !named {
                    return Err(refusal(404, "not_found", "MCP server not found"));
                }
                let path = format!("/api/local/mcp-servers/{server}/token");
                (Method::PUT, path, Some(body))
            }
        })
    }
}

fn refusal(status: u16, code: &str, message: &str) -> (u16, Value) {
    (status, json!({"error": {"code": code, "message": message}}))
}

/// Answer signal requests until shutdown.
pub async fn serve(state: AppState) -> anyhow::Result<()> {
    let subject = state.bus.subjects.signal_requests();
    serve_requests(state, subject, "signal requests", answer).await
}

/// Answer requests on `subject` (in the gateways' queue group, so each is answered once) with
/// `answer`, each in a task of its own, until shutdown.
pub async fn serve_requests<F, Fut>(
    state: AppState,
    subject: String,
    what: &str,
    answer: F,
) -> anyhow::Result<()>
where
    F: Fn(AppState, async_nats::Message) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut requests = state
        .bus
        .nats
        .queue_subscribe(subject.clone(), "maestro-api-gateway".to_owned())
        .await?;
    tracing::info!(%subject, "serving {what} over NATS");
    loop {
        let request = tokio::select! {
            () = state.shutdown.cancelled() => break,
            request = requests.next() => request,
        };
        let Some(request) = request else { break };
        tokio::spawn(answer(state.clone(), request));
    }
    Ok(())
}

async fn answer(state: AppState, request: async_nats::Message) {
    let Some(reply) = request.reply.clone() else {
        tracing::debug!("a signal request without a reply subject; ignored");
        return;
    };
    let (status, body) = match serde_json::from_slice::<Command>(&request.payload) {
        Err(e) => refusal(400, "invalid_command", &e.to_string()),
        Ok(command) => match command.route() {
            Err(refused) => refused,
            Ok(route) => through_router(&state, request.headers.as_ref(), route).await,
        },
    };
    let answer = json!({"status": status, "body": body});
    let bytes = serde_json::to_vec(&answer).unwrap_or_default();
    if let Err(e) = state.bus.nats.publish(reply, bytes.into()).await {
        tracing::warn!(error = %e, "cannot answer a signal request");
    }
}

/// Send the command's request through the gateway's router, as an HTTP client would.
async fn through_router(
    state: &AppState,
    nats: Option<&async_nats::HeaderMap>,
    (method, path, body): (Method, String, Option<Value>),
) -> (u16, Value) {
    let mut request = Request::builder().method(method).uri(path);
    for name in ["authorization", "idempotency-key"] {
        let value = nats.and_then(|h| {
            h.iter()
                .find(|(n, _)| n.to_string().eq_ignore_ascii_case(name))
                .and_then(|(_, values)| values.first().map(|v| v.as_str().to_owned()))
        });
        if let Some(value) = value {
            request = request.header(name, value);
        }
    }
    let body = match body {
        Some(body) => {
            request = request.header(header::CONTENT_TYPE, "application/json");
            Body::from(serde_json::to_vec(&body).unwrap_or_default())
        }
        None => Body::empty(),
    };
    let Ok(request) = request.body(body) else {
        return refusal(
            400,
            "invalid_command",
            "the command does not make a request",
        );
    };
    let response = match crate::app::router(state.clone()).oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), MAX_ANSWER_BYTES)
        .await
        .unwrap_or_default();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_become_their_routes_and_bad_ids_never_reach_a_path() {
        let task = Uuid::now_v7();
        let command: Command =
            serde_json::from_value(json!({"command": "cancel", "task_id": task.to_string()}))
                .expect("command");
        let (method, path, body) = command.route().expect("route");
        assert_eq!(
            (method, path, body),
            (
                Method::POST,
                format!("/api/local/tasks/{task}/cancel"),
                None
            )
        );
        let sneaky: Command = serde_json::from_value(
            json!({"command": "comment", "task_id": "../../webhooks", "body": {}}),
        )
        .expect("command");
        assert_eq!(sneaky.route().expect_err("refused").0, 404);
        let server: Command =
            serde_json::from_value(json!({"command": "supply_token", "server": "a/b", "body": {}}))
                .expect("command");
        assert_eq!(server.route().expect_err("refused").0, 404);
        assert!(serde_json::from_value::<Command>(json!({"command": "reboot"})).is_err());
    }
}
