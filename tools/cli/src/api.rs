//! The gateway's REST API as the CLI uses it: JSON in, JSON out, every error in the API's one
//! shape (`{"error": {"code", "message"}}`) turned into an [`ApiError`].

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::Config;

/// A request the gateway refused, or one that never got an answer.
#[derive(Debug)]
pub enum ApiError {
    /// The gateway answered with an error.
    Refused {
        status: StatusCode,
        code: String,
        message: String,
        body: Value,
    },
    /// No answer: the gateway is down, unreachable or cut the connection.
    Unreachable(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Refused {
                status,
                code,
                message,
                ..
            } => write!(f, "{message} ({code}, HTTP {})", status.as_u16()),
            ApiError::Unreachable(reason) => write!(f, "the gateway did not answer: {reason}"),
        }
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// The error as JSON, for `--json`.
    pub fn to_json(&self) -> Value {
        match self {
            ApiError::Refused { body, .. } => body.clone(),
            ApiError::Unreachable(reason) => {
                serde_json::json!({"error": {"code": "unreachable", "message": reason}})
            }
        }
    }
}

/// The API as one token's owner.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    config: Config,
}

impl Api {
    pub fn new(config: Config) -> anyhow::Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("maestro-cli/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { http, config })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.config.url)
    }

    /// A request to `path` with the bearer token.
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, self.url(path));
        match &self.config.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        self.send(self.request(Method::GET, path).timeout(TIMEOUT))
            .await
    }

    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ApiError> {
        self.send(self.request(Method::POST, path).timeout(TIMEOUT).json(body))
            .await
    }

    pub async fn put<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ApiError> {
        self.send(self.request(Method::PUT, path).timeout(TIMEOUT).json(body))
            .await
    }

    /// A `DELETE`; its answer has no body.
    pub async fn delete(&self, path: &str) -> Result<(), ApiError> {
        let response = self
            .request(Method::DELETE, path)
            .timeout(TIMEOUT)
            .send()
            .await
            .map_err(unreachable)?;
        refusal(response).await.map(drop)
    }

    /// The raw bytes at `path` (a file).
    pub async fn bytes(&self, path: &str) -> Result<Vec<u8>, ApiError> {
        let response = self
            .request(Method::GET, path)
            .timeout(TIMEOUT)
            .send()
            .await
            .map_err(unreachable)?;
        refusal(response)
            .await?
            .bytes()
            .await
            .map(|b| b.to_vec())
            .map_err(unreachable)
    }

    /// Send a built request, answer its JSON.
    pub async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ApiError> {
        self.send_replayable(request)
            .await
            .map(|(answer, _)| answer)
    }

    /// [`Api::send`], and whether the gateway answered a repeat of an earlier request
    /// (`Idempotent-Replayed: true`: the same `Idempotency-Key`, nothing new was made).
    pub async fn send_replayable<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(T, bool), ApiError> {
        let response = request.send().await.map_err(unreachable)?;
        let response = refusal(response).await?;
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
        let status = response.status();
        let text = response.text().await.map_err(unreachable)?;
        serde_json::from_str(if text.is_empty() { "null" } else { &text })
            .map(|answer| (answer, replayed))
            .map_err(|e| ApiError::Refused {
                status,
                code: "unexpected_answer".to_owned(),
                message: format!("the gateway's answer could not be read: {e}"),
                body: Value::String(text),
            })
    }
}

/// A plain request's time limit (streams have none).
const TIMEOUT: Duration = Duration::from_secs(60);

fn unreachable(e: reqwest::Error) -> ApiError {
    let mut reason = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(inner) = source {
        reason = format!("{reason}: {inner}");
        source = inner.source();
    }
    ApiError::Unreachable(reason)
}

/// The response when it succeeded; its error otherwise.
pub async fn refusal(response: reqwest::Response) -> Result<reqwest::Response, ApiError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let text = response.text().await.unwrap_or_default();
    let body: Value = serde_json::from_str(&text).unwrap_or_else(
        |_| serde_json::json!({"error": {"code": "http_error", "message": text.trim()}}),
    );
    let code = body["error"]["code"]
        .as_str()
        .unwrap_or("http_error")
        .to_owned();
    let message = body["error"]["message"]
        .as_str()
        .filter(|m| !m.is_empty())
        .unwrap_or(status.canonical_reason().unwrap_or("error"))
        .to_owned();
    Err(ApiError::Refused {
        status,
        code,
        message,
        body,
    })
}
