//! The official A2A SDKs, unmodified, drive MAESTRO as external processes: the Python SDK
//! (`a2a-sdk`) over both bindings — card, streaming send, get, list, cancel, subscribing again
//! after a disconnect, a question answered and a tool call approved through input-required,
//! push notification configs and the pushes a small server receives —
//! and the JavaScript SDK (`@a2a-js/sdk`) — a streaming send and a cancel. `scripts/test`
//! installs both, pinned (`A2A_PYTHON`, `A2A_JS_DIR`).

use std::path::{Path, PathBuf};
use std::process::Command;

use maestro_testkit::a2a;
use maestro_testkit::{Stack, StackOptions};

/// A tool `scripts/test` installs: the environment's path, else its default place.
fn installed(var: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    assert!(
        path.exists(),
        "{} is missing: run scripts/test, which installs the pinned A2A SDKs (or set {var})",
        path.display()
    );
    path
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("a2a").join(name)
}

/// Run an SDK client against the stack; its output, which must end well.
fn run(mut command: Command, stack: &Stack, binding: &str) -> String {
    let base = stack.url("");
    let output = command
        .args([base.as_str(), stack.token.as_str(), binding])
        .output()
        .expect("the SDK client runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the {binding} client failed:\n{text}"
    );
    text
}

async fn stack() -> Stack {
    Stack::up(StackOptions::new(a2a::scenarios()).policy(a2a::POLICY)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_drives_both_bindings() {
    let python = installed(
        "A2A_PYTHON",
        "/var/tmp/maestro-tools/a2a-py-1.3.0/bin/python",
    );
    let stack = stack().await;
    for binding in ["JSONRPC", "HTTP+JSON"] {
        let mut command = Command::new(&python);
        command.arg(script("sdk_client.py"));
        let output = run(command, &stack, binding);
        for check in [
            "a streamed task",
            "GetTask with historyLength",
            "the reply's text streams as artifact chunks",
            "the subscriber sees the cancel",
            "the answer completes it",
            "the approval completes it",
            "the completion is pushed with the token",
            "DeleteTaskPushNotificationConfig",
        ] {
            assert!(
                output.contains(&format!("ok: {check}")),
                "{binding}: {output}"
            );
        }
    }
    // The SDK's own 0.3 transport: the 0.3 method names and shapes.
    let mut command = Command::new(&python);
    command.arg(script("sdk_client.py"));
    let output = run(command, &stack, "JSONRPC-0.3");
    for check in [
        "a 0.3 transport",
        "0.3: a streamed task completes",
        "0.3: the answer completes it",
        "0.3: tasks/pushNotificationConfig/list",
        "0.3: tasks/cancel cancels it",
    ] {
        assert!(output.contains(&format!("ok: {check}")), "0.3: {output}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_sdk_streams_and_cancels() {
    let dir = installed("A2A_JS_DIR", "/var/tmp/maestro-tools/a2a-js-1.3.0");
    let stack = stack().await;
    // ES modules resolve packages next to the script: run a copy beside the installed SDK.
    let here = tempfile::tempdir().expect("a directory");
    let copy = here.path().join("sdk_client.mjs");
    std::fs::copy(script("sdk_client.mjs"), &copy).expect("copy the client");
    std::os::unix::fs::symlink(dir.join("node_modules"), here.path().join("node_modules"))
        .expect("link the SDK");
    for binding in ["JSONRPC", "HTTP+JSON"] {
        let mut command = Command::new("node");
        command.arg(&copy);
        let output = run(command, &stack, binding);
        assert!(
            output.contains("ok: a running task is canceled"),
            "{binding}: {output}"
        );
    }
}
