//! The JSON-RPC binding over NATS, for clients on the bus: a JSON-RPC request published on
//! `<prefix>.a2a.rpc` with a reply subject (NATS request/reply) gets the answer the HTTP
//! endpoint would give, byte for byte in JSON terms. Headers carry what HTTP headers carry:
//! `Authorization: Bearer <token>` (required, same tokens and ownership) and `A2A-Version`.
//! Every gateway copy listens in one queue group, so each request is answered once.
//! Streaming methods are refused (`UnsupportedOperation`): request/reply carries one answer.

use async_nats::HeaderMap as NatsHeaders;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use super::rpc::{self, Answer, Carrier};
use crate::state::AppState;

/// The NATS headers a call reads, as HTTP names them.
const PASSED: [&str; 3] = ["authorization", "a2a-version", "last-event-id"];

/// Answer JSON-RPC requests on `<prefix>.a2a.rpc` until shutdown.
pub async fn serve(state: AppState) -> anyhow::Result<()> {
    let subject = state.bus.subjects.a2a_rpc();
    crate::signals::serve_requests(state, subject, "A2A JSON-RPC", answer).await
}

async fn answer(state: AppState, request: async_nats::Message) {
    let state = &state;
    let Some(reply) = request.reply.clone() else {
        tracing::debug!("an A2A request over NATS without a reply subject; ignored");
        return;
    };
    let headers = http_headers(request.headers.as_ref());
    let body = match rpc::call(state, &headers, None, &request.payload, Carrier::Nats).await {
        Answer::Json(_, body) => body,
        Answer::Stream(_) => unreachable!("streaming methods are refused over NATS"),
    };
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    if let Err(e) = state.bus.nats.publish(reply, bytes.into()).await {
        tracing::warn!(error = %e, "cannot answer an A2A request over NATS");
    }
}

/// The request's NATS headers as the HTTP headers a call reads (the body is JSON by
/// definition on this subject).
fn http_headers(nats: Option<&NatsHeaders>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let Some(nats) = nats else {
        return headers;
    };
    for (name, values) in nats.iter() {
        let lower = name.to_string().to_ascii_lowercase();
        if !PASSED.contains(&lower.as_str()) {
            continue;
        }
        let value = values.first().map(|v| HeaderValue::from_str(v.as_str()));
        if let (Ok(name), Some(Ok(value))) = (HeaderName::try_from(lower), value) {
            headers.insert(name, value);
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_headers_a_call_reads_pass_whatever_their_case() {
        let mut nats = NatsHeaders::new();
        nats.insert("Authorization", "Bearer t");
        nats.insert("A2A-Version", "1.0");
        nats.insert("Host", "evil.example");
        let headers = http_headers(Some(&nats));
        assert_eq!(headers["authorization"], "Bearer t");
        assert_eq!(headers["a2a-version"], "1.0");
        assert_eq!(headers["content-type"], "application/json");
        assert!(headers.get("host").is_none());
    }
}
