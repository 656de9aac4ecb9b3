//! `maestro-bench tools`: round-trip latency of tool calls, worker side to tool-runner and
//! back over NATS request/reply, for a trivial read-only tool (`read_file`, on a Landlock-
//! confined thread) and for `shell` running `true` (a whole bubblewrap sandbox).

use std::time::{Duration, Instant};

use bytes::Bytes;
use maestro_domain::tools::{ToolExecReply, ToolExecRequest};
use maestro_domain::{JobId, TaskId};
use maestro_testkit::{Service, Stack, StackOptions};
use serde_json::json;

pub async fn run(calls: usize) -> anyhow::Result<()> {
    let mut options = StackOptions::new(json!({"scenarios": []})).env("RUST_LOG", "warn");
    options.services = vec![Service::ToolRunner];
    let stack = Stack::spawn(options).await?;
    let nats = stack.nats.client().await?;
    let subject = format!("{}.tools.exec", stack.prefix);
    let (task_id, job_id) = (TaskId::new(), JobId::new());
    let request = |tool: &str, arguments: serde_json::Value| ToolExecRequest {
        task_id,
        job_id,
        call_id: "bench".to_owned(),
        operation_id: "bench".to_owned(),
        tool: tool.to_owned(),
        arguments,
        timeout_ms: 10_000,
        attempt: 0,
        network: false,
        allowed_hosts: Vec::new(),
        ledgered: false,
        mcp: None,
    };
    let setup = request(
        "write_file",
        json!({"path": "bench.txt", "content": "hello"}),
    );
    call(&nats, &subject, &setup).await?;
    for (label, tool, arguments, n) in [
        (
            "read_file (Landlock-confined thread)",
            "read_file",
            json!({"path": "bench.txt"}),
            calls,
        ),
        (
            "shell `true` (bubblewrap sandbox)",
            "shell",
            json!({"command": "true"}),
            calls / 4,
        ),
    ] {
        let req = request(tool, arguments);
        for _ in 0..20 {
            call(&nats, &subject, &req).await?;
        }
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let started = Instant::now();
            call(&nats, &subject, &req).await?;
            samples.push(started.elapsed());
        }
        samples.sort();
        let at = |p: f64| {
            samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)].as_secs_f64()
                * 1e3
        };
        println!(
            "{label}: {n} calls, p50 {:.2} ms, p99 {:.2} ms",
            at(0.5),
            at(0.99)
        );
    }
    Ok(())
}

async fn call(
    nats: &async_nats::Client,
    subject: &str,
    request: &ToolExecRequest,
) -> anyhow::Result<()> {
    let payload = Bytes::from(serde_json::to_vec(request)?);
    let message = async_nats::Request::new()
        .payload(payload)
        .timeout(Some(Duration::from_secs(30)));
    let reply = nats.send_request(subject.to_owned(), message).await?;
    let reply: ToolExecReply = serde_json::from_slice(&reply.payload)?;
    anyhow::ensure!(reply.ok, "the call failed: {}", reply.output);
    Ok(())
}
