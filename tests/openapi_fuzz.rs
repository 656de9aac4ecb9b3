//! The published OpenAPI contract, fuzzed: schemathesis (PyPI, pinned; `scripts/test`
//! installs it as `SCHEMATHESIS`) reads `/api/openapi.json` from a real stack and sends
//! generated requests — valid and invalid — to every operation with a bearer token. It checks
//! that nothing answers 5xx, that every status, content type and body is the one documented,
//! and that invalid data is refused; a live stream's events are read and checked too.

use std::path::PathBuf;
use std::process::Command;

use maestro_testkit::{Stack, StackOptions};
use serde_json::{Value, json};

/// Cases per operation and phase: over the 60 operations, well past a thousand in all.
const EXAMPLES: &str = "40";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_in_the_published_contract() {
    let schemathesis = std::env::var_os("SCHEMATHESIS")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/tmp/maestro-tools/schemathesis-4.32.5/bin/schemathesis".into());
    assert!(
        schemathesis.exists(),
        "{} is missing: run scripts/test, which installs the pinned schemathesis (or set \
         SCHEMATHESIS)",
        schemathesis.display()
    );
    let stack = Stack::up(StackOptions::new(json!({"scenarios": []}))).await;
    // Real resources, so the operations on one reach past the 404 of an unknown id.
    let task = stack.new_task(&json!({"instruction": "be fuzzed"})).await;
    let schedule: Value = stack
        .call(
            reqwest::Method::POST,
            "/api/local/schedules",
            Some(&json!({"cron": "0 * * * *", "task": {"instruction": "hourly"}})),
        )
        .await
        .expect("a schedule");
    let webhook = stack
        .create_webhook(&json!({"url": "https://example.com/hook"}))
        .await;
    let report = tempfile::tempdir().expect("tempdir");
    let config = report.path().join("schemathesis.toml");
    let ids = [
        (r"^/api/local/tasks/\{id\}", task.to_string()),
        (
            r"^/api/local/schedules/\{id\}",
            schedule["id"].as_str().expect("id").to_owned(),
        ),
        (r"^/api/webhooks/\{id\}", webhook.id.to_string()),
    ];
    let operations: String = ids
        .iter()
        .map(|(path, id)| {
            format!("[[operations]]\ninclude-path-regex = '{path}'\nparameters = {{ \"path.id\" = \"{id}\" }}\n\n")
        })
        .collect();
    // A live stream never ends: each case reads two events, or what comes within 2 s.
    let operations = format!(
        "max-stream-events = 2\n\n{operations}[[operations]]\ninclude-path-regex = '/stream$'\nrequest-timeout = 2\n"
    );
    std::fs::write(&config, operations).expect("config");
    let output = Command::new(&schemathesis)
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(stack.url("/api/openapi.json"))
        .args([
            "--header",
            &format!("Authorization: Bearer {}", stack.token),
        ])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_schema_conformance,response_headers_conformance,negative_data_rejection",
        ])
        .args(["--max-examples", EXAMPLES, "--seed", "15"])
        .args(["--request-timeout", "10", "--workers", "2"])
        .args(["--phases", "examples,coverage,fuzzing"])
        .current_dir(report.path())
        .env("SCHEMATHESIS_HOOKS", "")
        .env("NO_COLOR", "1")
        .output()
        .expect("schemathesis runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{text}");
    assert!(
        output.status.success(),
        "schemathesis found problems:\n{text}"
    );
    // "Test cases:\n  1984 generated, 1984 passed"
    let cases: usize = text
        .split("Test cases:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        cases >= 1000,
        "at least 1,000 generated cases ({cases}):\n{text}"
    );
}
