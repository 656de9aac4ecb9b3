//! The A2A bindings as a test reaches them: JSON-RPC calls and streams on `/a2a/v1`, and the
//! HTTP+JSON binding under `/a2a/rest`, as one owner, with `A2A-Version: 1.0`.

use reqwest::Method;
use serde_json::{Value, json};

use crate::SseClient;

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
