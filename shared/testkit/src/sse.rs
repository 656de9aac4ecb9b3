//! A small SSE client for reading MAESTRO's task streams in tests (parsing by `sse-stream`:
//! each event's own id, as the gateway writes it).

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

/// One item of a stream (`id` empty when the item had none, `event` `message` when it named
/// none, as SSE says).
#[derive(Debug, Clone, PartialEq)]
pub struct SseItem {
    pub id: String,
    pub event: String,
    pub data: Value,
}

/// What reading a stream came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Item(SseItem),
    /// The server closed the stream.
    End,
    /// Nothing came in time.
    Timeout,
}

/// An open stream.
pub struct SseClient {
    events: futures::stream::BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
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
        Ok(Self::from_response(response))
    }

    /// Read the SSE body of a response (a POST's, say).
    pub fn from_response(response: reqwest::Response) -> Self {
        Self {
            events: sse_stream::SseStream::from_bytes_stream(response.bytes_stream()).boxed(),
        }
    }

    /// The next item, or `None` if the stream ended or nothing came within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<SseItem> {
        match self.next_or_end(timeout).await {
            Next::Item(item) => Some(item),
            Next::End | Next::Timeout => None,
        }
    }

    /// The next item, the end of the stream, or nothing within `timeout`.
    pub async fn next_or_end(&mut self, timeout: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let event = match tokio::time::timeout_at(deadline, self.events.next()).await {
                Err(_) => return Next::Timeout,
                Ok(None | Some(Err(_))) => return Next::End,
                Ok(Some(Ok(event))) => event,
            };
            if event.data.is_none() && event.id.is_none() {
                continue;
            }
            let text = event.data.unwrap_or_default();
            return Next::Item(SseItem {
                id: event.id.unwrap_or_default(),
                event: event.event.unwrap_or_else(|| "message".to_owned()),
                data: serde_json::from_str(&text).unwrap_or(Value::String(text)),
            });
        }
    }

    /// Every item until the server closes the stream (panics when it stays open `timeout`).
    pub async fn to_end(&mut self, timeout: Duration) -> Vec<SseItem> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut items = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_or_end(left).await {
                Next::Item(item) => items.push(item),
                Next::End => return items,
                Next::Timeout => panic!("the stream stayed open; got {items:#?}"),
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
