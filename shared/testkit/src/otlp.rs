//! A small OTLP/HTTP trace receiver (`POST /v1/traces`, protobuf), the collector a test points
//! the services' `OTEL_EXPORTER_OTLP_ENDPOINT` at: it decodes each export with the protocol's
//! own message types (`opentelemetry-proto`) and keeps every span it is sent.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;

/// One span as received.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// `service.name` of the resource that sent it.
    pub service: String,
    pub name: String,
    /// Hex, as in a `traceparent`.
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// Attributes, their values as text.
    pub attributes: Vec<(String, String)>,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The receiver: its base URL (for `OTEL_EXPORTER_OTLP_ENDPOINT`) and what it got.
#[derive(Debug, Clone)]
pub struct OtlpReceiver {
    pub url: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

/// Exports received and their bytes.
type Counts = Arc<(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64)>;

/// A receiver that only counts the exports and their bytes, as cheaply as it can: for a
/// bench, where a real collector would run on another machine.
#[derive(Debug, Clone)]
pub struct OtlpSink {
    pub url: String,
    counts: Counts,
}

impl OtlpSink {
    pub async fn start() -> Self {
        let counts: Counts = Arc::default();
        let kept = counts.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let kept = kept.clone();
                async move {
                    use std::sync::atomic::Ordering::Relaxed;
                    kept.0.fetch_add(1, Relaxed);
                    kept.1.fetch_add(body.len() as u64, Relaxed);
                    ExportTraceServiceResponse::default().encode_to_vec()
                }
            }),
        );
        let url = crate::serve(app).await;
        Self { url, counts }
    }

    /// Exports received and their bytes so far.
    pub fn received(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.counts.0.load(Relaxed), self.counts.1.load(Relaxed))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

impl OtlpReceiver {
    pub async fn start() -> Self {
        let spans: Arc<Mutex<Vec<ReceivedSpan>>> = Arc::default();
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let kept = kept.clone();
                async move {
                    let Ok(export) = ExportTraceServiceRequest::decode(body) else {
                        return (axum::http::StatusCode::BAD_REQUEST, Vec::new());
                    };
                    let mut kept = kept.lock().expect("lock");
                    for resource in export.resource_spans {
                        let service = resource
                            .resource
                            .iter()
                            .flat_map(|r| &r.attributes)
                            .find(|kv| kv.key == "service.name")
                            .map(|kv| text(kv.value.as_ref()))
                            .unwrap_or_default();
                        for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                            kept.push(ReceivedSpan {
                                service: service.clone(),
                                name: span.name,
                                trace_id: hex(&span.trace_id),
                                span_id: hex(&span.span_id),
                                parent_span_id: hex(&span.parent_span_id),
                                attributes: span
                                    .attributes
                                    .iter()
                                    .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                                    .collect(),
                            });
                        }
                    }
                    let answer = ExportTraceServiceResponse::default().encode_to_vec();
                    (axum::http::StatusCode::OK, answer)
                }
            }),
        );
        let url = crate::serve(app).await;
        Self { url, spans }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().expect("lock").clone()
    }
}
