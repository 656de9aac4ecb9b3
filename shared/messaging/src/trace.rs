//! Trace context in NATS headers (W3C `traceparent`/`tracestate`), so a trace follows a task
//! from the HTTP request through every service it crosses.

use async_nats::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Say whether this process exports its spans (telemetry's start-up does): spans that only
/// show a hop, like the relay's, are made only then; context propagates either way.
pub fn set_exporting(exporting: bool) {
    EXPORTING.store(exporting, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this process exports its spans.
pub fn exporting() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

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
