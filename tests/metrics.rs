//! Every service's `/metrics` (docs/observability.md), scraped before and after a job that
//! calls a tool twice (once past its time limit, so the sandbox stops it) and notifies a
//! webhook: the counters and histograms each service owns move, the scheduler's gauges are
//! there, and no series is labelled with an id.

use axum::body::Bytes;
use maestro_testkit::{Service, Stack, StackOptions, TaskExt};
use serde_json::json;
use tokio::sync::mpsc;

fn scenarios() -> serde_json::Value {
    json!({"scenarios": [{
        "name": "observed",
        "turns": [
            {"tool_calls": [{"name": "shell", "arguments": {"command": "echo hi"}}]},
            {"tool_calls": [{"name": "shell", "arguments": {"command": "sleep 30", "timeout_s": 1}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
        ]
    }]})
}

/// The value of the first series of `name` whose labels include every one of `labels`
/// (`key="value"`), if there is one.
fn value(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .find(|line| labels.iter().all(|label| line.contains(label)))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

fn at_least(text: &str, name: &str, labels: &[&str], min: f64, service: &str) {
    let found = value(text, name, labels);
    assert!(
        found.is_some_and(|v| v >= min),
        "{service}: {name}{labels:?} is {found:?}, expected at least {min}:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_serves_metrics_that_move_as_a_job_runs() {
    let (tx, mut hooks) = mpsc::unbounded_channel::<Bytes>();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: Bytes| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(body);
                "ok"
            }
        }),
    );
    let hook = format!("{}/hook", maestro_testkit::serve(app).await);
    let stack = Stack::up(StackOptions::new(scenarios()).env("METRICS_POLL_MS", "200")).await;
    for service in Service::ALL {
        // Each answers, in the Prometheus text format, before anything happened; and its
        // probes (a container platform's) say it is live and ready.
        stack.scrape(service.name()).await;
        for probe in ["/livez", "/readyz"] {
            assert_eq!(
                stack.probe(service.name(), probe).await,
                200,
                "{service:?} {probe}"
            );
        }
    }
    stack
        .create_webhook(&json!({"url": hook, "event_types": ["task.succeeded"]}))
        .await;
    let task = stack.run(&json!({"instruction": "be observed"})).await;
    let id = task.id().to_string();
    tokio::time::timeout(std::time::Duration::from_secs(30), hooks.recv())
        .await
        .expect("the webhook arrives")
        .expect("a delivery");
    // The scheduler's gauges are read every 200 ms here.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;

    let gateway = stack.scrape("api-gateway").await;
    at_least(
        &gateway,
        "maestro_tasks_created_total",
        &[r#"via="rest""#, r#"service="api-gateway""#],
        1.0,
        "gateway",
    );
    at_least(
        &gateway,
        "maestro_http_requests_total",
        &[
            r#"route="/api/local/tasks""#,
            r#"method="POST""#,
            r#"status="201""#,
        ],
        1.0,
        "gateway",
    );
    at_least(
        &gateway,
        "maestro_http_requests_total",
        &[r#"route="/api/local/tasks/{id}""#, r#"status="200""#],
        1.0,
        "gateway",
    );
    let on_gateway_port = stack
        .http
        .get(stack.url("/metrics"))
        .send()
        .await
        .expect("the gateway's own /metrics")
        .text()
        .await
        .expect("text");
    assert!(on_gateway_port.contains("maestro_tasks_created_total"));

    let worker = stack.scrape("worker").await;
    for (to, n) in [("running", 1.0), ("succeeded", 1.0)] {
        at_least(
            &worker,
            "maestro_job_transitions_total",
            &[&format!(r#"to="{to}""#)],
            n,
            "worker",
        );
    }
    at_least(
        &worker,
        "maestro_llm_request_duration_seconds_count",
        &[r#"outcome="ok""#],
        3.0,
        "worker",
    );
    at_least(
        &worker,
        "maestro_llm_time_to_first_token_seconds_count",
        &[],
        3.0,
        "worker",
    );
    at_least(
        &worker,
        "maestro_llm_tokens_total",
        &[r#"kind="prompt""#],
        1.0,
        "worker",
    );
    at_least(
        &worker,
        "maestro_tool_call_duration_seconds_count",
        &[r#"tool="shell""#, r#"outcome="ok""#],
        1.0,
        "worker",
    );
    at_least(
        &worker,
        "maestro_tool_call_duration_seconds_count",
        &[r#"tool="shell""#, r#"outcome="error""#],
        1.0,
        "worker",
    );
    // Each of the two turns' results was sent to be committed while the next request ran:
    // taken into the reply's commit, or committed once the wait was over.
    let sent = ["taken_back", "after_wait"].map(|o| {
        value(
            &worker,
            "maestro_results_commits_total",
            &[&format!(r#"outcome="{o}""#)],
        )
    });
    assert!(
        sent.iter().flatten().sum::<f64>() >= 2.0,
        "maestro_results_commits_total: {sent:?}\n{worker}"
    );
    at_least(
        &worker,
        "maestro_iteration_duration_seconds_count",
        &[],
        2.0,
        "worker",
    );
    at_least(
        &worker,
        "maestro_job_run_duration_seconds_count",
        &[r#"outcome="succeeded""#],
        1.0,
        "worker",
    );

    let tool_runner = stack.scrape("tool-runner").await;
    at_least(
        &tool_runner,
        "maestro_sandbox_kills_total",
        &[r#"reason="timeout""#],
        1.0,
        "tool-runner",
    );

    let notifier = stack.scrape("notifier").await;
    at_least(
        &notifier,
        "maestro_webhook_deliveries_total",
        &[r#"outcome="delivered""#],
        1.0,
        "notifier",
    );

    let scheduler = stack.scrape("scheduler").await;
    assert!(
        value(&scheduler, "maestro_jobs", &[r#"status="queued""#]).is_some(),
        "{scheduler}"
    );
    assert!(
        value(&scheduler, "maestro_outbox_lag_seconds", &[]).is_some(),
        "{scheduler}"
    );
    at_least(
        &scheduler,
        "maestro_stream_messages",
        &[r#"stream="EVENTS""#],
        1.0,
        "scheduler",
    );
    assert!(
        value(
            &scheduler,
            "maestro_consumer_pending_messages",
            &[r#"stream="JOBS""#]
        )
        .is_some(),
        "the jobs consumer is reported:\n{scheduler}"
    );

    // Bounded labels: no series names the task or its job.
    let job = task.job().id.to_string();
    for (service, text) in [
        ("api-gateway", &gateway),
        ("worker", &worker),
        ("tool-runner", &tool_runner),
        ("notifier", &notifier),
        ("scheduler", &scheduler),
    ] {
        assert!(
            !text.contains(&id) && !text.contains(&job),
            "{service} labels an id:\n{text}"
        );
    }
}
