//! The operator's kit in deploy/observability/ against the real thing: the alert rules pass
//! `promtool` and their own unit tests; the dashboard and the alerts use only metrics MAESTRO
//! records; and a real Prometheus, scraping a real stack through a job, loads the rules
//! healthy and answers every dashboard query — with data for the ones the job feeds.
//! `scripts/test` installs Prometheus (Debian's `prometheus`: `prometheus` and `promtool`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use maestro_testkit::{Service, Stack, StackOptions};
use serde_json::{Value, json};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/observability")
}

fn tool(name: &str) -> PathBuf {
    let var = format!("{}_BIN", name.to_uppercase());
    let path = std::env::var_os(&var)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new("/usr/bin").join(name));
    assert!(
        path.exists(),
        "{} is missing: run scripts/test, which installs Debian's prometheus (or set {var})",
        path.display()
    );
    path
}

fn run(command: &mut Command) -> String {
    let output = command.output().expect("it runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{command:?} failed:\n{text}");
    text
}

/// Every PromQL expression of the dashboard, with Grafana's variables given values.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(deploy().join("grafana/maestro.json")).expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("an expression");
            queries.push(
                expr.replace("$__rate_interval", "1m")
                    .replace("$__range", "5m"),
            );
        }
    }
    queries
}

/// The `maestro_*` metric names an expression uses, without histogram suffixes.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("maestro_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        names.insert(base.to_owned());
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let promtool = tool("promtool");
    run(Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .arg(deploy().join("alerts.yml")));
    run(Command::new(&promtool)
        .current_dir(deploy())
        .args(["test", "rules", "alerts.test.yml"]));
}

#[test]
fn dashboards_and_alerts_use_only_metrics_maestro_records() {
    let known: BTreeSet<&str> = maestro_runtime::metrics::HELP
        .iter()
        .map(|(n, _)| *n)
        .collect();
    let alerts = std::fs::read_to_string(deploy().join("alerts.yml")).expect("alerts");
    let mut used = metric_names(&alerts);
    for query in dashboard_queries() {
        used.extend(metric_names(&query));
    }
    assert!(used.len() > 15, "{used:?}");
    for name in &used {
        assert!(
            known.contains(name.as_str()),
            "{name} is not a metric MAESTRO records"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_stack_loads_the_rules_and_answers_the_dashboard() {
    let prometheus = tool("prometheus");
    let scenarios = json!({"scenarios": [{
        "name": "observed",
        "turns": [
            {"tool_calls": [{"name": "shell", "arguments": {"command": "echo hi"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
        ]
    }]});
    let stack = Stack::up(StackOptions::new(scenarios).env("METRICS_POLL_MS", "200")).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs: String = Service::ALL
        .iter()
        .map(|service| {
            format!(
                "  - job_name: maestro-{}\n    static_configs: [{{targets: [\"{}\"]}}]\n",
                service.name(),
                stack.metrics_addr(service.name())
            )
        })
        .collect();
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [\"{}\"]\nscrape_configs:\n{jobs}",
        deploy().join("alerts.yml").display()
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).expect("config");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let _server = tokio::process::Command::new(&prometheus)
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("prometheus.log")).expect("log"))
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus starts");
    let api = format!("http://127.0.0.1:{port}/api/v1");
    let query = |expr: String| {
        let http = stack.http.clone();
        let api = api.clone();
        async move {
            let url = reqwest::Url::parse_with_params(&format!("{api}/query"), &[("query", expr)])
                .ok()?;
            let response = http.get(url).send().await.ok()?;
            response.json::<Value>().await.ok()
        }
    };
    stack.run(&json!({"instruction": "be observed"})).await;
    // Every service scraped, twice at least (rates need two samples).
    let mut up = 0;
    for _ in 0..100 {
        if let Some(answer) =
            query("sum(up) and on() (count(maestro_job_transitions_total) > 0)".to_owned()).await
        {
            up = answer["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0) as i32;
            if up == 5 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    assert_eq!(up, 5, "all five services are up in Prometheus:\n{}", log());
    tokio::time::sleep(Duration::from_secs(3)).await;

    let rules: Value = stack
        .http
        .get(format!("{api}/rules"))
        .send()
        .await
        .expect("rules")
        .json()
        .await
        .expect("JSON");
    let loaded: Vec<&Value> = rules["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(loaded.len(), 6, "{rules}");
    for rule in loaded {
        assert_eq!(rule["health"], "ok", "{rule}");
    }
    // What this job feeds shows on the dashboard; the rest (schedules, dead letters, egress,
    // LLM errors, webhooks) answers without error and may be empty.
    let fed = [
        "maestro_jobs",
        "maestro_job_transitions_total",
        "maestro_job_run_duration_seconds",
        "maestro_llm_request_duration_seconds_bucket[",
        "maestro_llm_time_to_first_token",
        "maestro_tool_call_duration_seconds_count",
        "maestro_outbox_lag_seconds",
        "maestro_consumer_pending_messages",
        "maestro_stream_messages",
        "maestro_http_requests_total",
        "maestro_tasks_created_total",
        "up{",
    ];
    for expr in dashboard_queries() {
        let answer = query(expr.clone()).await.expect("an answer");
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
        if fed.iter().any(|f| expr.contains(f)) && !expr.contains("outcome=\"error\"") {
            let result = answer["data"]["result"].as_array().expect("a vector");
            assert!(!result.is_empty(), "{expr} has data after a job: {answer}");
        }
    }
}
