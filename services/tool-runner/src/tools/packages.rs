//! `install_package`: an approved `request_package`, installed into the task's workspace
//! (pip: `--target .maestro/pip`; npm: `--prefix .maestro/npm`) by the package manager running
//! in the bubblewrap sandbox — with network, since it must reach the registry, but still seeing
//! only the workspace read-write and the read-only system. Nothing is installed system-wide.
//! The worker never offers this tool to the model; it sends it only for a request a person
//! approved, with names and versions it has checked to be plain tokens.

use std::path::Path;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::call::{Call, parse};
use crate::sandbox::{Exit, Invocation, Network, ProgramOutput, Sandbox};

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

/// The npm prefix holds only what approved installs put there: a project `.npmrc` is removed,
/// and a `package.json` whose dependencies are anything but registry packages at plain
/// versions (a git URL, a tarball, a local path the model wrote in) stops the install — npm
/// would fetch every dependency listed there.
fn prepare_npm_prefix(workspace: &Path) -> Result<(), String> {
    let prefix = workspace.join(".maestro/npm");
    match std::fs::remove_file(prefix.join(".npmrc")) {
        Ok(()) => tracing::warn!("removed a .npmrc from the workspace's npm prefix"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot clean the npm prefix: {e}")),
    }
    let manifest = match std::fs::read_to_string(prefix.join("package.json")) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot read .maestro/npm/package.json: {e}")),
    };
    let manifest: serde_json::Value = serde_json::from_str(&manifest)
        .map_err(|_| ".maestro/npm/package.json is not JSON; remove it first".to_owned())?;
    let fields = manifest.as_object().map(|o| o.keys().collect::<Vec<_>>());
    let plain = fields.is_some_and(|keys| keys.iter().all(|k| *k == "dependencies"))
        && manifest["dependencies"].as_object().is_none_or(|deps| {
            deps.iter().all(|(name, spec)| {
                let version = spec.as_str().unwrap_or("-").trim_start_matches(['^', '~']);
                maestro_domain::tools::check_package("npm", name, Some(version)).is_ok()
            })
        });
    if plain {
        Ok(())
    } else {
        Err(
            ".maestro/npm/package.json lists more than registry packages at plain versions; \
             remove it (or the entries) first"
                .to_owned(),
        )
    }
}

pub async fn install(
    sandbox: &Sandbox,
    call: &Call,
    cancel: &CancellationToken,
) -> Result<String, String> {
    let package: Package = parse(call.arguments.clone())?;
    let version = package.version.as_deref().filter(|v| !v.is_empty());
    maestro_domain::tools::check_package(&package.manager, &package.name, version)?;
    let argv = installer(&package, version, call.workspace.root())?;
    let invocation = Invocation {
        env: vec![
            // Outside the workspace (the sandbox's private /tmp): no planted dotfiles count.
            ("HOME".to_owned(), "/tmp".to_owned()),
            ("MAESTRO_OPERATION_ID".to_owned(), call.operation_id.clone()),
            // Trust the system's CA store (as pip does on Debian), so a registry behind a
            // TLS-inspecting proxy with a locally trusted CA works for npm too.
            (
                "NODE_EXTRA_CA_CERTS".to_owned(),
                SYSTEM_CA_BUNDLE.to_owned(),
            ),
        ],
        // The registry is a public host: reached through the egress proxy like any other.
        network: Network::Egress {
            allowed_hosts: Vec::new(),
        },
        ..Invocation::new(call.workspace.root(), argv, call.timeout)
    };
    let output = sandbox
        .run(&invocation, cancel)
        .await
        .map_err(|e| e.to_string())?;
    outcome(&package, version, &output)
}

/// What the model is told of an installer's run.
fn outcome(
    package: &Package,
    version: Option<&str>,
    output: &ProgramOutput,
) -> Result<String, String> {
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

/// The installer's command line for `package`, in the sandbox's view of the workspace.
fn installer(package: &Package, version: Option<&str>, root: &Path) -> Result<Vec<String>, String> {
    Ok(match package.manager.as_str() {
        "pip" => {
            let spec = match version {
                Some(v) => format!("{}=={v}", package.name),
                None => package.name.clone(),
            };
            // `-I`: the workspace is not on sys.path (a planted `pip/` cannot stand in for
            // pip) and no user site or PYTHON* variable counts; `--isolated`: no pip config
            // file or PIP_* variable, so the index is PyPI's.
            [
                "python3",
                "-I",
                "-m",
                "pip",
                "--isolated",
                "install",
                "--no-input",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--target",
                "/workspace/.maestro/pip",
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
            prepare_npm_prefix(root)?;
            // No user, global or project configuration (registry, scripts) from anywhere the
            // model can write; no install scripts.
            [
                "npm",
                "install",
                // Files that do not exist in the sandbox's private, empty /tmp.
                "--userconfig",
                "/tmp/npmrc-user",
                "--globalconfig",
                "/tmp/npmrc-global",
                "--no-audit",
                "--no-fund",
                "--ignore-scripts",
                "--prefix",
                "/workspace/.maestro/npm",
                "--",
                &spec,
            ]
            .map(str::to_owned)
            .to_vec()
        }
        other => return Err(format!("unknown package manager {other:?}")),
    })
}
