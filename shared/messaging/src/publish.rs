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

/// Headers for a message: its id, trace context, and any extra `(name, value)` pairs.
pub fn headers(msg_id: &str, extra: &[(&str, &str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", msg_id);
    for (name, value) in extra {
        headers.insert(*name, *value);
    }
    crate::trace::inject(&mut headers);
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
    publish(js, subject, headers(msg_id, &[]), payload).await
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

/// Tell the outbox relay that rows were committed (a core NATS message, fire and forget).
/// Sent by every writer after a commit that added outbox rows. A lost wake-up costs latency
/// only: the relay also polls.
pub async fn wake_outbox(nats: &async_nats::Client, subjects: &crate::Subjects) {
    if let Err(e) = nats
        .publish(subjects.outbox_wake(), bytes::Bytes::new())
        .await
    {
        tracing::debug!(error = %e, "cannot wake the outbox relay; it will poll");
    }
}

/// Tell the scheduler's subtask join that a child task's job may be over, or that a parent
/// began to wait (a core NATS message, fire and forget). A lost wake-up costs latency only:
/// the join also runs on a timer.
pub async fn wake_joiner(nats: &async_nats::Client, subjects: &crate::Subjects) {
    if let Err(e) = nats
        .publish(subjects.subtasks_wake(), bytes::Bytes::new())
        .await
    {
        tracing::debug!(error = %e, "cannot wake the subtask join; it will poll");
    }
}

/// Dispatch a job to the workers of `profile` (de-duplicated by its dispatch id).
pub async fn dispatch_job(
    js: &jetstream::Context,
    subjects: &crate::Subjects,
    profile: &str,
    dispatch: &crate::payloads::JobDispatch,
) -> Result<(), PublishError> {
    publish_json(
        js,
        subjects.dispatch(profile),
        &dispatch.message_id(),
        dispatch,
    )
    .await
}

/// Tell whoever runs a cancelled job to stop (best effort, core NATS): its worker (the job's
/// control subject) and the tool-runners (its running tool processes are killed). A worker
/// that misses it is fenced at its next write anyway.
pub async fn stop_cancelled_job(
    nats: &async_nats::Client,
    subjects: &crate::Subjects,
    job_id: maestro_domain::JobId,
) {
    let control = serde_json::to_vec(&crate::payloads::JobControl::Cancel).unwrap_or_default();
    if let Err(e) = nats.publish(subjects.control(job_id), control.into()).await {
        tracing::warn!(error = %e, %job_id, "cannot signal the job's worker");
    }
    let tools = serde_json::to_vec(&serde_json::json!({"job_id": job_id})).unwrap_or_default();
    if let Err(e) = nats.publish(subjects.tools_cancel(), tools.into()).await {
        tracing::warn!(error = %e, "cannot tell the tool-runners to stop the job's tools");
    }
}
