//! The web UI in a real browser: Debian's Chromium, headless, driven by Playwright
//! (`tests/ui/browser.mjs`, npm `playwright-core`, which `scripts/test` installs outside the
//! clone) against a whole stack of this test's own. The script signs in, creates a task and
//! watches it stream, approves a tool call from its card, answers a question, comments during a
//! run, cancels, continues, and reconnects after the network is cut; every page it shows passes
//! axe-core's WCAG 2.1 AA rules (no serious or critical violation), and it saves a screenshot of
//! each page (`UI_SCREENSHOTS=docs/ui` refreshes the README's).

use std::path::{Path, PathBuf};
use std::time::Duration;

use maestro_testkit::{Stack, StackOptions};

/// `edit_file` needs a person's approval of each call (the approval card's case); `delegate`
/// is offered (the subtask tree's).
const POLICY: &str = r#"{"allowed_tools": ["*", "delegate"], "gated_tools": ["edit_file"]}"#;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

/// Where `playwright-core` is installed (`scripts/lib.sh` `ensure_playwright`).
fn playwright() -> PathBuf {
    std::env::var_os("PLAYWRIGHT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/maestro-tools/playwright"))
}

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_works_through_the_browser() {
    let module = playwright().join("node_modules/playwright-core/index.mjs");
    let axe = playwright().join("node_modules/axe-core/axe.min.js");
    assert!(
        module.exists() && axe.exists() && chromium().exists(),
        "the browser test needs Chromium ({}), playwright-core ({}) and axe-core ({}): \
         `source scripts/lib.sh && ensure_chromium && ensure_playwright` installs them",
        chromium().display(),
        module.display(),
        axe.display()
    );
    let script = repo().join("tests/ui/browser.mjs");
    let scenarios: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("tests/ui/scenarios.json")).expect("the scenarios"),
    )
    .expect("the scenarios parse");
    let stack = Stack::up(StackOptions::new(scenarios).policy(POLICY)).await;
    let shots = match std::env::var_os("UI_SCREENSHOTS") {
        Some(dir) => repo().join(dir),
        None => std::env::temp_dir().join(maestro_testkit::unique("maestro-ui-shots-")),
    };
    std::fs::create_dir_all(&shots).expect("the screenshot folder");
    let llm = stack.llm.base_url.trim_end_matches("/v1").to_owned();
    let run = tokio::process::Command::new("node")
        .arg(&script)
        .env("MAESTRO_URL", stack.url(""))
        .env("MAESTRO_TOKEN", &stack.token)
        .env("SCRIPTED_LLM_URL", &llm)
        .env("SCREENSHOT_DIR", &shots)
        .env("PLAYWRIGHT_CORE", &module)
        .env("AXE_CORE", &axe)
        .env("PLAYWRIGHT_CHROMIUM", chromium())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the browser test ends within 4 minutes")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the browser test passes (screenshots in {}):\n{stdout}\n{stderr}",
        shots.display()
    );
    assert!(stdout.contains("ok - "), "the steps ran: {stdout}");
    assert!(!stdout.contains("not ok"), "{stdout}");
}
