//! `install_package`: an approved `request_package`, installed into the task's workspace
//! (pip: `--target .maestro/pip`; npm: `--prefix .maestro/npm`) by the package manager running
//! in the bubblewrap sandbox — with network, since it must reach the registry, but still seeing
//! only the workspace read-write and the read-only system. Nothing is installed system-wide.
//! The worker never offers this tool to the model; it sends it only for a request a person
//! approved, with names and versions it has checked to be plain tokens.

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::{Call, parse};
use crate::sandbox::{Exit, Invocation, Sandbox};

/// Debian's bundle of the system's trusted CAs (visible in the sandbox under `/etc/ssl`).
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

#[derive(Deserialize)]
struct Package {
    name: String,
    manager: String,
    #[serde(default)]
    version: Option<String>,
    /// The model's reason, kept with the request; not used here.
    #[serde(default)]
    #[allow(dead_code)]
    reason: Option<String>,
}

pub async fn install(
    sandbox: &Sandbox,
    call: &Call,
    cancel: &CancellationToken,
) -> Result<String, String> {
    let package: Package = parse(call.arguments.clone())?;
    let plain = |s: &str| {
        !s.is_empty()
            && !s.starts_with(['-', '.'])
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-@/+!".contains(c))
    };
    if !plain(&package.name) || !package.version.as_deref().is_none_or(plain) {
        return Err(format!("{:?} is not a package to install", package.name));
    }
    let version = package.version.as_deref().filter(|v| !v.is_empty());
    let argv: Vec<String> = match package.manager.as_str() {
        "pip" => {
            let spec = match version {
                Some(v) => format!("{}=={v}", package.name),
                None => package.name.clone(),
            };
            [
                "python3",
                "-m",
                "pip",
                "install",
                "--no-input",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--target",
                ".maestro/pip",
                "--upgrade",
                "--",
                &spec,
            ]
            .map(str::to_owned)
            .to_vec()
        }
        "npm" => {
            let spec = match version {
                Some(v) => format!("{}@{v}", package.name),
                None => package.name.clone(),
            };
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                "--ignore-scripts",
                "--prefix",
                ".maestro/npm",
                "--",
                &spec,
            ]
            .map(str::to_owned)
            .to_vec()
        }
        other => return Err(format!("unknown package manager {other:?}")),
    };
    let invocation = Invocation {
        workspace: call.workspace.root().to_path_buf(),
        argv,
        env: vec![
            ("HOME".to_owned(), "/workspace/.maestro/home".to_owned()),
            ("MAESTRO_OPERATION_ID".to_owned(), call.operation_id.clone()),
            // Trust the system's CA store (as pip does on Debian), so a registry behind a
            // TLS-inspecting proxy with a locally trusted CA works for npm too.
            ("NODE_EXTRA_CA_CERTS".to_owned(), SYSTEM_CA_BUNDLE.to_owned()),
        ],
        network: true,
        timeout: call.timeout,
        stdin: None,
        read_only: Vec::new(),
    };
    let output = sandbox
        .run(&invocation, cancel)
        .await
        .map_err(|e| e.to_string())?;
    let tail = |s: &str| {
        let s = s.trim();
        let mut start = s.len().saturating_sub(2000);
        while !s.is_char_boundary(start) {
            start += 1;
        }
        s[start..].to_owned()
    };
    match output.exit {
        Exit::Code(0) => Ok(format!(
            "installed {}{} with {} into {}",
            package.name,
            version.map(|v| format!(" {v}")).unwrap_or_default(),
            package.manager,
            if package.manager == "pip" {
                ".maestro/pip (use PYTHONPATH=.maestro/pip)"
            } else {
                ".maestro/npm/node_modules"
            }
        )),
        Exit::Code(code) => Err(format!(
            "installing {} failed (exit code {code}):\n{}\n{}",
            package.name,
            tail(&output.stdout),
            tail(&output.stderr)
        )),
        Exit::TimedOut => Err(format!("installing {} took too long", package.name)),
        Exit::RunawayOutput => Err("the installer produced too much output".to_owned()),
        Exit::Cancelled => Err("the job was cancelled".to_owned()),
    }
}
