//! Spawning MAESTRO for tests. Every test gets its own Postgres database ([`TestDb`]), its own
//! NATS server ([`NatsServer`]) and its own subject prefix, so tests run in parallel without
//! seeing each other. [`Stack`] starts the five services and the scripted LLM as real
//! processes and offers typed helpers (`create_task`, `wait_for_status`, `stream`, ...).
//!
//! Logs of spawned processes go to files in the test's temporary directory; when a test
//! fails, the tail of each is printed. Set `TEST_LOG=1` to print them always.

pub mod a2a;
mod bins;
pub mod client;
mod db;
pub mod history;
mod llm;
mod nats;
mod otlp;
mod postgres;
mod process;
pub mod script;
mod sse;
mod stack;

pub use bins::binary;
pub use client::{Client, OVER, Refused, SETTLED, WAIT};
pub use db::TestDb;
pub use history::{TaskExt, job_states, of_kind, state_change, tool_results};
pub use llm::ScriptedLlm;
pub use nats::{NatsServer, meta_leader, start_cluster, stream_leader};
pub use otlp::{OtlpReceiver, OtlpSink, ReceivedSpan};
pub use postgres::PgServer;
pub use process::Process;
pub use sse::{Next, SseClient, SseItem};
pub use stack::{Service, Stack, StackOptions};

/// A short random suffix for names that must not collide between tests.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// A fresh 256-bit key in base64 (a `SECRETS_KEYS` key).
pub fn random_key() -> String {
    use base64::Engine as _;
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    base64::engine::general_purpose::STANDARD.encode(key)
}

/// An HTTP client for tests (installs the TLS crypto provider reqwest needs first).
pub fn http_client() -> reqwest::Client {
    maestro_runtime::http_client()
        .build()
        .expect("an HTTP client")
}

/// Serve `app` on a free local port for the rest of the test; its `http://127.0.0.1:<port>`.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a local port");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}
