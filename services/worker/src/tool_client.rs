//! Calling the tool-runner over NATS request/reply.

use std::time::Duration;

use bytes::Bytes;
use maestro_domain::tools::{ToolExecReply, ToolExecRequest};

/// The tool-runner did not answer: no instance is serving, or it took too long. The call may
/// be retried later (the job is put back for retry).
#[derive(Debug, thiserror::Error)]
#[error("the tool-runner did not answer: {0}")]
pub struct Unavailable(pub String);

/// Send one tool call and wait for its reply.
pub async fn execute(
    client: &async_nats::Client,
    subject: String,
    request: &ToolExecRequest,
    timeout: Duration,
) -> Result<ToolExecReply, Unavailable> {
    let payload = Bytes::from(serde_json::to_vec(request).map_err(|e| Unavailable(e.to_string()))?);
    let mut headers = async_nats::HeaderMap::new();
    maestro_messaging::trace::inject(&mut headers);
    let message = async_nats::Request::new()
        .payload(payload)
        .headers(headers)
        .timeout(Some(timeout));
    let reply = client
        .send_request(subject, message)
        .await
        .map_err(|e| Unavailable(e.to_string()))?;
    serde_json::from_slice(&reply.payload).map_err(|e| Unavailable(format!("malformed reply: {e}")))
}
