//! A small SSE client for reading MAESTRO's task streams in tests.

use std::time::Duration;

use futures::StreamExt;
use maestro_llm::SseParser;
use serde_json::Value;

/// One item of a task stream.
#[derive(Debug, Clone, PartialEq)]
pub struct SseItem {
    pub id: String,
    pub event: String,
    pub data: Value,
}

/// An open stream.
pub struct SseClient {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    parser: SseParser,
    pending: std::collections::VecDeque<SseItem>,
}

impl std::fmt::Debug for SseClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseClient").finish_non_exhaustive()
    }
}

impl SseClient {
    pub async fn connect(
        http: &reqwest::Client,
        url: &str,
        token: &str,
        last_event_id: Option<&str>,
    ) -> anyhow::Result<Self> {
        let mut request = http
            .get(url)
            .bearer_auth(token)
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await?.error_for_status()?;
        Ok(Self {
            body: response.bytes_stream().boxed(),
            parser: SseParser::new(),
            pending: Default::default(),
        })
    }

    /// The next item, or `None` if the stream ended or nothing came within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<SseItem> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .ok()??
                .ok()?;
            for event in self.parser.feed(&chunk) {
                let (Some(id), Some(kind)) = (event.id, event.event) else {
                    continue;
                };
                let data = serde_json::from_str(&event.data).unwrap_or(Value::String(event.data));
                self.pending.push_back(SseItem {
                    id,
                    event: kind,
                    data,
                });
            }
        }
    }

    /// Read until `stop` returns true for an item (included), or `timeout` passes.
    pub async fn read_until(
        &mut self,
        timeout: Duration,
        mut stop: impl FnMut(&SseItem) -> bool,
    ) -> Vec<SseItem> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut items = Vec::new();
        while let Some(item) = self
            .next(deadline.saturating_duration_since(tokio::time::Instant::now()))
            .await
        {
            let done = stop(&item);
            items.push(item);
            if done {
                break;
            }
        }
        items
    }
}
