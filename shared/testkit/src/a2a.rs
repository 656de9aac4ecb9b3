//! The A2A bindings as a test reaches them: JSON-RPC calls and streams on `/a2a/v1`, and the
//! HTTP+JSON binding under `/a2a/rest`, as one owner, with `A2A-Version: 1.0`.

use reqwest::Method;
use serde_json::{Value, json};

use crate::SseClient;
use crate::script::{call, complete, turn};

/// One owner's A2A client.
#[derive(Debug, Clone)]
pub struct A2a {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl A2a {
    /// A client of the gateway at `base` (`http://host:port`) with bearer `token`.
    pub fn new(http: reqwest::Client, base: &str, token: &str) -> Self {
        Self {
            http,
            base: base.to_owned(),
            token: token.to_owned(),
        }
    }

    fn post(&self, path: &str, headers: &[(&str, &str)]) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header("a2a-version", "1.0");
        for (key, value) in headers {
            request = request.header(*key, *value);
        }
        request
    }

    /// A JSON-RPC call with extra headers: the HTTP status and the whole response.
    pub async fn rpc_with(
        &self,
        method: &str,
        params: Value,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let response = self
            .post("/a2a/v1", headers)
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method}: no answer: {e}"));
        let status = response.status().as_u16();
        let value = response.json().await.unwrap_or(Value::Null);
        (status, value)
    }

    /// A JSON-RPC call: the whole response (`result` or `error`).
    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        self.rpc_with(method, params, &[]).await.1
    }

    /// A JSON-RPC call that must succeed: its `result`.
    pub async fn result(&self, method: &str, params: Value) -> Value {
        let answer = self.rpc(method, params).await;
        assert!(answer.get("error").is_none(), "{method} failed: {answer}");
        answer["result"].clone()
    }

    /// A streaming JSON-RPC call (`SendStreamingMessage`, `SubscribeToTask`), resumed after
    /// `last_event_id` when given.
    pub async fn stream(
        &self,
        method: &str,
        params: Value,
        last_event_id: Option<&str>,
    ) -> SseClient {
        let body = json!({"jsonrpc": "2.0", "id": "s", "method": method, "params": params});
        let mut headers = vec![("accept", "text/event-stream")];
        if let Some(id) = last_event_id {
            headers.push(("last-event-id", id));
        }
        let response = self
            .post("/a2a/v1", &headers)
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method}: no answer: {e}"));
        assert_eq!(response.status().as_u16(), 200, "{method}");
        SseClient::from_response(response)
    }

    /// A call of the HTTP+JSON binding: the HTTP status and the body.
    pub async fn rest(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}/a2a/rest{path}", self.base))
            .bearer_auth(&self.token)
            .header("a2a-version", "1.0");
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("an answer");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

/// A user's text message for `SendMessage`'s params.
pub fn message(message_id: &str, text: &str) -> Value {
    json!({"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}})
}

/// The tasks' policy of the A2A tests: writing needs a person's approval (it is not among the
/// allowed tools).
pub const POLICY: &str = r#"{"allowed_tools": ["read_file", "list_files", "glob", "grep"]}"#;

/// `turns` turns of slowly streamed text and a read each, then `complete`.
fn slow(turns: usize) -> Vec<Value> {
    let mut script: Vec<Value> = (0..turns)
        .map(|i| {
            json!({"text": format!("Step {i}: looking further."), "chunk_chars": 2, "chunk_delay_ms": 8,
                   "tool_calls": [{"name": "glob", "arguments": {"pattern": format!("s{i}/*")}}]})
        })
        .collect();
    script.push(complete("worked slowly"));
    script
}

/// What the A2A tests' tasks do, by instruction: `finish now` completes at once, `ask me`
/// asks a question (and completes once answered), `write the note` waits for a tool approval,
/// `slow work` streams for a few seconds; a Continue (`carry on`) completes.
pub fn scenarios() -> Value {
    json!({"scenarios": [
        {"name": "answered", "match": "ask me", "after": "The user answered", "turns": [complete("blue it is")]},
        {"name": "ask", "match": "ask me", "turns": [
            turn(&[call("complete", json!({"result": "Which colour?", "status": "needs_user_input"}))])
        ]},
        {"name": "continued", "match": "finish now", "after": "carry on", "turns": [complete("carried on")]},
        {"name": "finish", "match": "finish now", "turns": [
            {"text": "Done already.", "tool_calls": [{"name": "complete", "arguments": {"result": "finished"}}]}
        ]},
        {"name": "write", "match": "write the note", "turns": [
            turn(&[call("write_file", json!({"path": "note.txt", "content": "hi\n"}))]),
            complete("note written")
        ]},
        {"name": "slow", "match": "slow work", "turns": slow(25)}
    ]})
}
