//! What every MAESTRO binary shares: reading settings from the environment ([`env`]),
//! connections to Postgres and NATS ([`Infra`]), logging and tracing ([`telemetry`]), shutdown on signals ([`shutdown`]) and the one-line
//! readiness announcement that scripts and tests wait for ([`announce_ready`]).

pub mod env;
pub mod http_trace;
pub mod infra;
pub mod metrics;
pub mod pieces;
pub mod shutdown;
pub mod telemetry;

use std::io::Write;
use std::net::SocketAddr;

pub use env::{ConfigError, Env};
pub use infra::{Infra, StartError};

/// Print `MAESTRO_READY service=<name> [addr=<addr>] [metrics=<addr>]` on stdout once a
/// service is serving. Logs go to stderr, so this line is easy to wait for from a script or a
/// test harness.
pub fn announce_ready(service: &str, addr: Option<SocketAddr>) {
    metrics::set_ready();
    let mut line = format!("MAESTRO_READY service={service}");
    if let Some(addr) = addr {
        line.push_str(&format!(" addr={addr}"));
    }
    if let Some(metrics) = metrics::served_at() {
        line.push_str(&format!(" metrics={metrics}"));
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// An HTTP client builder, with the TLS crypto provider installed first (reqwest is built
/// without a default provider; building a client without one panics).
pub fn http_client() -> reqwest::ClientBuilder {
    init_process();
    reqwest::Client::builder()
}

/// The whole `main` of a service: process set-up, telemetry, the service's settings from the
/// environment (logged, secrets redacted by their `Debug`), then `run` until SIGTERM or SIGINT
/// asks it to stop (a second signal exits at once).
pub async fn service_main<S, Fut>(
    service: &str,
    settings: impl FnOnce(&Env) -> Result<S, ConfigError>,
    run: impl FnOnce(S, tokio_util::sync::CancellationToken) -> Fut,
) -> anyhow::Result<()>
where
    S: std::fmt::Debug,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    init_process();
    let env = Env::from_process();
    let _telemetry = telemetry::init(&telemetry::TelemetrySettings::from_env(&env, service)?);
    let settings = settings(&env)?;
    tracing::info!(?settings, "starting {service}");
    // Secrets at rest (MCP tokens, webhook secrets, A2A push credentials) are sealed with
    // SECRETS_KEYS; without it they are written as they are.
    let keys = match env.opt("SECRETS_KEYS") {
        Some(spec) => Some(
            maestro_db::sealed::Keyring::parse(&spec)
                .map_err(|reason| env.invalid("SECRETS_KEYS", reason))?,
        ),
        None => {
            if service != "tool-runner" {
                tracing::warn!("SECRETS_KEYS is not set: secrets are stored unsealed");
            }
            None
        }
    };
    maestro_db::sealed::install(keys);
    metrics::install(service);
    // `METRICS_ADDR` (default: a free port on loopback, announced when ready); `off`: none.
    match env.string("METRICS_ADDR", "127.0.0.1:0").as_str() {
        "off" | "" => {}
        addr => {
            let addr: SocketAddr = addr
                .parse()
                .map_err(|_| env.invalid("METRICS_ADDR", "an address like 0.0.0.0:9100, or off"))?;
            let bound = metrics::serve(addr).await?;
            tracing::info!(%bound, "metrics on /metrics");
        }
    }
    run(settings, shutdown::on_signal()).await
}

/// Process-wide set-up every binary needs before doing I/O: the TLS crypto provider.
pub fn init_process() {
    // Only fails when a provider is already installed, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
