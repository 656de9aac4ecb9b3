//! One trace per job across every service (docs/observability.md#traces): the services export
//! to a real OTLP/HTTP receiver (`maestro_testkit::OtlpReceiver`, decoding the protocol's own
//! protobuf messages); a task that calls a tool and notifies a webhook leaves spans of all
//! five services under the trace id its webhook's `traceparent` names, with the LLM calls'
//! token attributes and the tool call's name and outcome.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use maestro_testkit::{OtlpReceiver, Service, Stack, StackOptions};
use serde_json::json;
use tokio::sync::mpsc;

fn scenarios() -> serde_json::Value {
    json!({"scenarios": [{
        "name": "traced",
        "turns": [
            {"tool_calls": [{"name": "shell", "arguments": {"command": "echo traced"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
        ]
    }]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_one_trace_across_all_five_services_and_its_webhook() {
    let receiver = OtlpReceiver::start().await;
    let (tx, mut hooks) = mpsc::unbounded_channel::<HeaderMap>();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, _: Bytes| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(headers);
                "ok"
            }
        }),
    );
    let hook = format!("{}/hook", maestro_testkit::serve(app).await);
    // Logs at `warn`: traces have their own filter (`OTEL_TRACES_FILTER`, default `info`).
    let options = StackOptions::new(scenarios())
        .env("RUST_LOG", "warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let stack = Stack::up(options).await;
    stack
        .create_webhook(&json!({"url": hook, "event_types": ["task.succeeded"]}))
        .await;
    stack.run(&json!({"instruction": "be traced"})).await;
    let headers = tokio::time::timeout(Duration::from_secs(30), hooks.recv())
        .await
        .expect("the webhook arrives")
        .expect("a delivery");
    let traceparent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .expect("the webhook request carries a traceparent")
        .to_owned();
    let trace_id = traceparent
        .split('-')
        .nth(1)
        .expect("00-<trace>-<span>-<flags>")
        .to_owned();

    // The services' batch exporters send every 100 ms here.
    let every: BTreeSet<&str> = Service::ALL.iter().map(|s| s.name()).collect();
    let mut seen = BTreeSet::new();
    for _ in 0..100 {
        seen = receiver
            .spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .map(|s| s.service)
            .collect::<BTreeSet<String>>();
        let llm_calls = receiver
            .spans()
            .iter()
            .filter(|s| s.trace_id == trace_id && s.name == "llm")
            .count();
        if every.iter().all(|s| seen.contains(*s)) && llm_calls >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let spans: Vec<_> = receiver
        .spans()
        .into_iter()
        .filter(|s| s.trace_id == trace_id)
        .collect();
    let names: Vec<String> = spans
        .iter()
        .map(|s| format!("{}/{}", s.service, s.name))
        .collect();
    for service in &every {
        assert!(
            seen.contains(*service),
            "{service} has spans in trace {trace_id}: {names:?}"
        );
    }
    // The trace starts at the request that created the task.
    let root = spans
        .iter()
        .find(|s| s.service == "api-gateway" && s.parent_span_id.is_empty())
        .unwrap_or_else(|| panic!("the gateway's request span is the root: {names:?}"));
    assert_eq!(root.attribute("method"), Some("POST"), "{root:?}");
    let llm: Vec<_> = spans
        .iter()
        .filter(|s| s.service == "worker" && s.name == "llm")
        .collect();
    assert_eq!(llm.len(), 2, "a span per LLM call: {names:?}");
    for span in &llm {
        assert_eq!(span.attribute("outcome"), Some("ok"), "{span:?}");
        assert!(span.attribute("model").is_some(), "{span:?}");
        for tokens in ["prompt_tokens", "completion_tokens", "cached_tokens"] {
            assert!(
                span.attribute(tokens)
                    .is_some_and(|v| v.parse::<u64>().is_ok()),
                "{tokens} on {span:?}"
            );
        }
    }
    let tool = spans
        .iter()
        .find(|s| s.service == "worker" && s.name == "tool" && s.attribute("tool") == Some("shell"))
        .unwrap_or_else(|| panic!("a span for the tool call: {names:?}"));
    assert_eq!(tool.attribute("outcome"), Some("ok"));
    assert!(
        spans
            .iter()
            .any(|s| s.service == "tool-runner" && s.parent_span_id == tool.span_id),
        "the tool-runner's span of the call is a child of the worker's: {names:?}"
    );
    assert!(
        spans
            .iter()
            .any(|s| s.service == "scheduler" && s.name == "relay"),
        "the relay's hop is in the trace: {names:?}"
    );
    // The LLM requests carried the trace, each from its `llm` span.
    let asked = stack.llm.requests().await.expect("the LLM's requests");
    assert_eq!(asked.len(), 2);
    for request in asked {
        let carried = request["traceparent"]
            .as_str()
            .expect("a traceparent on the LLM request");
        assert_eq!(
            carried.split('-').nth(1),
            Some(trace_id.as_str()),
            "{carried}"
        );
        let parent = carried.split('-').nth(2).expect("a span id");
        assert!(
            llm.iter().any(|s| s.span_id == parent),
            "{carried} is an llm span"
        );
    }
}
