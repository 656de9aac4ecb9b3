//! Logging and tracing. Logs are JSON lines on stderr (or human-readable with
//! `LOG_FORMAT=pretty`), filtered by `RUST_LOG` (default `info`). When
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, spans are also exported over OTLP/HTTP. The W3C
//! trace-context propagator is always installed, so trace ids cross HTTP and NATS hops.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::env::{ConfigError, Env};

/// How a service logs and traces.
#[derive(Debug, Clone)]
pub struct TelemetrySettings {
    pub service: String,
    pub filter: String,
    pub pretty: bool,
    pub otlp_endpoint: Option<String>,
    /// Which spans carry trace context and are exported (`OTEL_TRACES_FILTER`, an `EnvFilter`
    /// like `RUST_LOG`, default `info`): apart from the logs' filter, so a service logging at
    /// `warn` still propagates and exports its traces.
    pub traces_filter: String,
}

impl TelemetrySettings {
    pub fn from_env(env: &Env, service: &str) -> Result<Self, ConfigError> {
        let format = env.string("LOG_FORMAT", "json");
        if format != "json" && format != "pretty" {
            return Err(env.invalid("LOG_FORMAT", "expected json or pretty"));
        }
        Ok(Self {
            service: service.to_owned(),
            filter: env.string("RUST_LOG", "info"),
            pretty: format == "pretty",
            traces_filter: env.string("OTEL_TRACES_FILTER", "info"),
            otlp_endpoint: env
                .opt("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .or_else(|| env.opt("OTEL_EXPORTER_OTLP_ENDPOINT")),
        })
    }
}

/// Flushes exported spans when dropped; keep it alive for the life of `main`.
#[derive(Debug)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
    }
}

/// Install the global subscriber. Call once, first thing in `main`.
pub fn init(settings: &TelemetrySettings) -> TelemetryGuard {
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let filter = EnvFilter::try_new(&settings.filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let traces_filter =
        EnvFilter::try_new(&settings.traces_filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = if settings.pretty {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    };
    // Spans always carry OpenTelemetry context, so trace ids propagate over HTTP and NATS
    // even when nothing is exported; with an endpoint, they are also batched out over
    // OTLP/HTTP. The exporter reads the standard variables itself:
    // `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL: `/v1/traces` is appended),
    // `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is), `OTEL_EXPORTER_OTLP_HEADERS`, and the
    // batch processor's `OTEL_BSP_*`.
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(settings.service.clone())
        .build();
    let mut builder = SdkTracerProvider::builder().with_resource(resource);
    if settings.otlp_endpoint.is_some() {
        match opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
        {
            Ok(exporter) => {
                builder = builder.with_batch_exporter(exporter);
                maestro_messaging::trace::set_exporting(true);
            }
            Err(e) => eprintln!("OpenTelemetry export disabled: {e}"),
        }
    }
    let provider = builder.build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    // Entering a span does nothing here: no busy/idle clock reads and no OpenTelemetry context
    // attached on every poll of every instrumented future (an SSE body's span is entered once
    // per frame: 6-8 % of the gateway's CPU with 1,000 streaming clients). Propagation reads the
    // span's own context (`OpenTelemetrySpanExt::context`), never the attached one.
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(settings.service.clone()))
        .with_tracked_inactivity(false)
        .with_context_activation(false)
        .with_threads(false)
        .with_filter(traces_filter);
    tracing_subscriber::registry().with(fmt).with(otel).init();
    TelemetryGuard {
        provider: Some(provider),
    }
}
