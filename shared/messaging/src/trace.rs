//! Trace context in NATS headers (W3C `traceparent`/`tracestate`), so a trace follows a task
//! from the HTTP request through every service it crosses.

use async_nats::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .iter()
            .map(|(k, _)| AsRef::<str>::as_ref(k))
            .collect()
    }
}

/// Write the current span's trace context into `headers`.
pub fn inject(headers: &mut HeaderMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(headers));
    });
}

/// Make `span` a child of the trace context carried in `headers`, if any.
pub fn adopt(span: &tracing::Span, headers: Option<&HeaderMap>) {
    let Some(headers) = headers else { return };
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(headers))
    });
    // Without the OpenTelemetry layer (telemetry export off) there is nothing to attach to.
    let _ = span.set_parent(parent);
}

/// Make `span` a child of a stored `traceparent` (read back from a database row).
pub fn adopt_traceparent(span: &tracing::Span, traceparent: &str) {
    let mut headers = HeaderMap::new();
    headers.insert("traceparent", traceparent);
    adopt(span, Some(&headers));
}

/// The current `traceparent`, for carrying trace context through a database row.
pub fn current_traceparent() -> Option<String> {
    let mut headers = HeaderMap::new();
    inject(&mut headers);
    headers.get("traceparent").map(|v| v.as_str().to_owned())
}
