//! Publishing to JetStream: every message carries `Nats-Msg-Id` (so a repeated publish of the
//! same fact is dropped by the stream's duplicate window) and the current trace context, and
//! the publish is complete only when the stream has acknowledged it.

use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishAckFuture};
use bytes::Bytes;
use serde::Serialize;

/// An error while publishing.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("cannot encode the message: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("JetStream did not accept the message (safe to retry: it is de-duplicated): {0}")]
    Nats(#[from] async_nats::Error),
}

/// Headers for a message: its id and the current trace context.
pub fn headers(msg_id: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", msg_id);
    crate::trace::inject(&mut headers);
    headers
}

/// On a job state event: its task has A2A push configs (the relay checks when it publishes,
/// so the notifier reads the configs only for such events).
pub const A2A_PUSH_HEADER: &str = "Maestro-A2A-Push";

/// Headers for a message published on behalf of a database row: its id and the trace
/// context the row carried, if any.
pub fn headers_relayed(msg_id: &str, traceparent: Option<&str>) -> HeaderMap {
    let Some(parent) = traceparent.filter(|_| crate::trace::exporting()) else {
        return headers_traced(msg_id, traceparent);
    };
    // The hop through the relay, as a span of the trace the row carries (when spans are
    // exported; else the row's context is passed on as it is).
    let span = tracing::info_span!("relay", msg_id);
    crate::trace::adopt_traceparent(&span, parent);
    span.in_scope(|| headers(msg_id))
}

/// Headers for the message of an outbox row, whoever publishes it (the relay, or the writer
/// that committed it): [`headers_relayed`], and [`A2A_PUSH_HEADER`] on a marked job state.
pub fn headers_of_row(msg_id: &str, traceparent: Option<&str>, a2a_push: bool) -> HeaderMap {
    let mut headers = headers_relayed(msg_id, traceparent);
    if a2a_push {
        headers.insert(A2A_PUSH_HEADER, "1");
    }
    headers
}

/// Headers with `Nats-Msg-Id` and a given `traceparent` (read back from a row).
pub fn headers_traced(msg_id: &str, traceparent: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", msg_id);
    if let Some(traceparent) = traceparent {
        headers.insert("traceparent", traceparent);
    }
    headers
}

/// Publish `payload` and wait until the stream has stored it.
pub async fn publish(
    js: &jetstream::Context,
    subject: String,
    headers: HeaderMap,
    payload: Bytes,
) -> Result<(), PublishError> {
    let ack = start(js, subject, headers, payload).await?;
    ack.await.map_err(|e| PublishError::Nats(e.into()))?;
    Ok(())
}

/// Publish `value` as JSON with id `msg_id`, and wait until the stream has stored it.
pub async fn publish_json<T: Serialize>(
    js: &jetstream::Context,
    subject: String,
    msg_id: &str,
    value: &T,
) -> Result<(), PublishError> {
    let payload = Bytes::from(serde_json::to_vec(value)?);
    publish(js, subject, headers(msg_id), payload).await
}

/// Send a publish without waiting for the stream's acknowledgement; await the returned future
/// (later, possibly together with others) to know it was stored.
pub async fn start(
    js: &jetstream::Context,
    subject: String,
    headers: HeaderMap,
    payload: Bytes,
) -> Result<PublishAckFuture, PublishError> {
    js.publish_with_headers(subject, headers, payload)
        .await
        .map_err(|e| PublishError::Nats(e.into()))
}
