//! The HTTP side: building the request, sending it, turning error answers into [`LlmError`].

use std::time::Duration;

use maestro_domain::Message;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::error::LlmError;
use crate::stream::ChatStream;

/// Where and how to reach the LLM.
#[derive(Clone)]
pub struct LlmConfig {
    /// Base URL including the API version, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub connect_timeout: Duration,
    /// Longest silence between two chunks of a streaming answer.
    pub idle_timeout: Duration,
}

impl std::fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .finish()
    }
}

/// One streaming chat-completions request.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequest<'a> {
    pub model: &'a str,
    /// The `tools` array, pre-rendered once so its bytes are identical in every request.
    pub tools: Option<&'a RawValue>,
    pub messages: &'a [Message],
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    messages: &'a [Message],
    stream: bool,
    stream_options: StreamOptions,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// A client for one OpenAI-compatible endpoint. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    config: LlmConfig,
}

impl LlmClient {
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        // reqwest is built without a default TLS provider; install ring's (once per process).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()?;
        Ok(Self { http, config })
    }

    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// Start a streaming completion. Errors before the first byte of the answer (connection,
    /// HTTP status) come back here; errors during the stream come from [`ChatStream::next`].
    pub async fn stream_chat(&self, request: ChatRequest<'_>) -> Result<ChatStream, LlmError> {
        self.stream_body(Self::body(request)).await
    }

    /// The bytes [`LlmClient::stream_chat`] sends for `request`: the same request, the same
    /// bytes.
    pub fn body(request: ChatRequest<'_>) -> bytes::Bytes {
        let body = Body {
            model: request.model,
            tools: request.tools,
            messages: request.messages,
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
        };
        serde_json::to_vec(&body)
            .expect("a chat request serializes")
            .into()
    }

    /// [`LlmClient::stream_chat`] with the request's bytes made already
    /// ([`LlmClient::body`]).
    pub async fn stream_body(&self, body: bytes::Bytes) -> Result<ChatStream, LlmError> {
        let response = self.send(body).await?;
        Ok(ChatStream::new(response, self.config.idle_timeout))
    }

    /// [`LlmClient::stream_body`], with the answer read off the connection as it comes, ahead
    /// of its reader, and a copy of it for a second reader ([`ChatStream::read_ahead_copied`]):
    /// for a request sent before its answer can be read, as a job's first is while the job is
    /// claimed.
    pub async fn stream_body_read_ahead(
        &self,
        body: bytes::Bytes,
    ) -> Result<(ChatStream, ChatStream), LlmError> {
        let response = self.send(body).await?;
        Ok(ChatStream::read_ahead_copied(
            response,
            self.config.idle_timeout,
        ))
    }

    /// Send a chat request; the response once its status is a success.
    async fn send(&self, body: bytes::Bytes) -> Result<reqwest::Response, LlmError> {
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let mut builder = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = &self.config.api_key {
            builder = builder.bearer_auth(key);
        }
        if let Some(traceparent) = current_traceparent() {
            builder = builder.header("traceparent", traceparent);
        }
        let response = builder.send().await?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|secs| secs.is_finite() && *secs >= 0.0)
                .map(Duration::from_secs_f64);
            let body = response.text().await.unwrap_or_default();
            let body: String = body.chars().take(2000).collect();
            return Err(LlmError::Status {
                status: status.as_u16(),
                body,
                retry_after,
            });
        }
        Ok(response)
    }
}

/// The W3C `traceparent` of the current span, so the LLM server (or a proxy in front of it)
/// can join the job's trace.
fn current_traceparent() -> Option<String> {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = tracing::Span::current().context();
    let mut headers = std::collections::HashMap::new();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut headers);
    });
    headers.remove("traceparent")
}
