//! Running one program under bubblewrap with limits, capturing bounded output, and killing
//! the whole process tree on timeout, cancellation or runaway output.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::Sandbox;
use super::cgroup::CallCgroups;
use super::egress::{self, Proxy};
use super::seccomp;

/// System directories that may be symlinks into `/usr` (merged /usr) or real directories.
const SYSTEM_DIRS: [&str; 6] = ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];
/// The parts of `/etc` programs need; never shadow files or keys.
const ETC_ENTRIES: [&str; 14] = [
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/ssl",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/passwd",
    "/etc/group",
    "/etc/mime.types",
    "/etc/python3.11",
];
/// Output beyond this many times the kept amount stops the program.
const RUNAWAY_FACTOR: usize = 16;

/// One program to run.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The task's workspace, mounted read-write at `/workspace` (the working directory).
    pub workspace: PathBuf,
    pub argv: Vec<String>,
    /// Extra environment (the rest is scrubbed).
    pub env: Vec<(String, String)>,
    pub network: Network,
    pub timeout: Duration,
    /// Written to the program's stdin, then closed.
    pub stdin: Option<Vec<u8>>,
    /// More read-only paths visible inside, at the same place (e.g. an MCP server's install).
    pub read_only: Vec<PathBuf>,
}

impl Invocation {
    /// `argv` in `workspace`, stopped after `timeout`: no extra environment, no network, no
    /// stdin, nothing else visible.
    pub fn new(workspace: impl Into<PathBuf>, argv: Vec<String>, timeout: Duration) -> Self {
        Self {
            workspace: workspace.into(),
            argv,
            env: Vec::new(),
            network: Network::None,
            timeout,
            stdin: None,
            read_only: Vec::new(),
        }
    }
}

/// What a program may reach over the network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Network {
    /// Nothing: its network namespace has only its own loopback.
    #[default]
    None,
    /// HTTP and HTTPS through the egress proxy (`egress.rs`): public addresses, and the hosts
    /// in `allowed_hosts` by name; with a non-empty list, only those.
    Egress { allowed_hosts: Vec<String> },
}

impl Network {
    /// What a call's policy grants: network or not, and the hosts it lists.
    pub fn granted(network: bool, allowed_hosts: &[String]) -> Self {
        if network {
            Self::Egress {
                allowed_hosts: allowed_hosts.to_vec(),
            }
        } else {
            Self::None
        }
    }
}

/// What a started program holds: dropping it kills what is left of the program (its cgroups)
/// and closes its way out (its egress proxy).
#[derive(Debug, Default)]
pub struct Held {
    cgroups: Option<CallCgroups>,
    _egress: Option<Proxy>,
}

impl Held {
    /// Whether the program hit its memory limit (known only with cgroups).
    pub fn memory_exceeded(&self) -> bool {
        self.cgroups
            .as_ref()
            .is_some_and(CallCgroups::memory_exceeded)
    }
}

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code (128 + n when killed by signal n, as a shell reports it).
    Code(i32),
    TimedOut,
    /// It produced far more output than is kept, and was stopped.
    RunawayOutput,
    Cancelled,
}

/// What a program did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramOutput {
    pub exit: Exit,
    pub stdout: String,
    pub stderr: String,
    /// Bytes of stdout and stderr produced but not kept.
    pub dropped: usize,
    /// Bytes kept that were not UTF-8, each sequence shown as U+FFFD.
    pub invalid_utf8: usize,
    pub memory_exceeded: bool,
}

/// Why a program could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    #[error("the sandbox is unavailable on this host: {0}")]
    Unavailable(String),
    #[error("cannot start the sandboxed program: {0}")]
    Spawn(String),
}

impl Sandbox {
    /// Run a program in the sandbox until it exits, times out or `cancel` fires.
    pub async fn run(
        &self,
        invocation: &Invocation,
        cancel: &CancellationToken,
    ) -> Result<ProgramOutput, ProgramError> {
        if let Some(reason) = &self.unavailable {
            return Err(ProgramError::Unavailable(reason.clone()));
        }
        let (mut child, held) = self.spawn(invocation, invocation.stdin.is_some())?;
        if let (Some(data), Some(mut stdin)) = (invocation.stdin.clone(), child.stdin.take()) {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let _ = stdin.write_all(&data).await;
            });
        }
        let keep = self.limits.max_output_bytes;
        let runaway = CancellationToken::new();
        let stdout = tokio::spawn(read_capped(child.stdout.take(), keep, runaway.clone()));
        let stderr = tokio::spawn(read_capped(child.stderr.take(), keep, runaway.clone()));
        let exit = tokio::select! {
            status = child.wait() => match status {
                Ok(status) => Exit::Code(exit_code(status)),
                Err(e) => return Err(ProgramError::Spawn(e.to_string())),
            },
            _ = tokio::time::sleep(invocation.timeout) => Exit::TimedOut,
            _ = cancel.cancelled() => Exit::Cancelled,
            _ = runaway.cancelled() => Exit::RunawayOutput,
        };
        if !matches!(exit, Exit::Code(_)) {
            // bubblewrap's death takes the sandbox's init with it, and with the init the
            // kernel kills every process left in the PID namespace.
            let _ = child.kill().await;
        }
        let memory_exceeded = held.memory_exceeded();
        drop(held);
        let killed = match exit {
            Exit::Code(_) if memory_exceeded => Some("memory"),
            Exit::Code(_) => None,
            Exit::TimedOut => Some("timeout"),
            Exit::RunawayOutput => Some("runaway_output"),
            Exit::Cancelled => Some("cancelled"),
        };
        if let Some(reason) = killed {
            metrics::counter!(maestro_runtime::metrics::SANDBOX_KILLS, "reason" => reason)
                .increment(1);
        }
        let (stdout, out_dropped, out_invalid) = stdout.await.unwrap_or_default();
        let (stderr, err_dropped, err_invalid) = stderr.await.unwrap_or_default();
        Ok(ProgramOutput {
            exit,
            stdout,
            stderr,
            dropped: out_dropped + err_dropped,
            invalid_utf8: out_invalid + err_invalid,
            memory_exceeded,
        })
    }

    /// Start a program in the sandbox with piped stdout and stderr (and stdin when asked).
    /// What it holds must live as long as the child: dropping it kills what is left.
    pub fn spawn(
        &self,
        invocation: &Invocation,
        stdin: bool,
    ) -> Result<(tokio::process::Child, Held), ProgramError> {
        if let Some(reason) = &self.unavailable {
            return Err(ProgramError::Unavailable(reason.clone()));
        }
        let egress = match &invocation.network {
            Network::None => None,
            Network::Egress { allowed_hosts } => {
                if self.forwarder.is_none() {
                    return Err(ProgramError::Unavailable(
                        "network egress needs maestro-sandbox-forward (SANDBOX_FORWARDER), \
                         which is missing"
                            .to_owned(),
                    ));
                }
                let proxy = Proxy::start(&self.egress_dir, allowed_hosts.clone()).map_err(|e| {
                    ProgramError::Spawn(format!("cannot start the egress proxy: {e}"))
                })?;
                Some(proxy)
            }
        };
        let name = format!("call-{}", uuid::Uuid::new_v4().simple());
        let cgroups = match &self.cgroups {
            Some(cg) => Some(
                cg.create(&name, self.limits.max_processes, self.limits.memory_bytes)
                    .map_err(|e| ProgramError::Spawn(format!("cannot create cgroups: {e}")))?,
            ),
            None => None,
        };
        let mut command = self.command(invocation, cgroups.as_ref(), egress.as_ref());
        command
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|e| ProgramError::Spawn(e.to_string()))?;
        Ok((
            child,
            Held {
                cgroups,
                _egress: egress,
            },
        ))
    }

    /// `[sh (join cgroups) →] [setpriv (drop to the sandbox user) →] prlimit → bwrap → program`.
    fn command(
        &self,
        invocation: &Invocation,
        cgroups: Option<&CallCgroups>,
        egress: Option<&Proxy>,
    ) -> Command {
        // The launch wrapper: open the seccomp filter on fd 3 for bubblewrap (inherited
        // through setpriv and prlimit), and join the call's cgroups first, so every process
        // the program starts is in them.
        let mut script = String::new();
        let mut script_args = Vec::new();
        if let Some(filter) = &self.seccomp {
            script.push_str(&format!(r#"exec {}<"$1" || exit 96; shift; "#, seccomp::FD));
            script_args.push(filter.display().to_string());
        }
        if let Some(cg) = cgroups {
            script.push_str(
                r#"echo $$ > "$1/cgroup.procs" && echo $$ > "$2/cgroup.procs" || exit 97; shift 2; "#,
            );
            script_args.extend([
                cg.pids.display().to_string(),
                cg.memory.display().to_string(),
            ]);
        }
        let mut argv: Vec<String> = Vec::new();
        if !script.is_empty() {
            script.push_str(r#"exec "$@""#);
            argv.extend([
                "sh".to_owned(),
                "-c".to_owned(),
                script,
                "maestro-sandbox".to_owned(),
            ]);
            argv.extend(script_args);
        }
        if let Some((uid, gid)) = self.run_as {
            argv.extend([
                "setpriv".to_owned(),
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".to_owned(),
            ]);
        }
        let limits = &self.limits;
        argv.push("prlimit".to_owned());
        argv.push(format!("--cpu={0}:{0}", limits.cpu_seconds));
        argv.push(format!("--nofile={0}:{0}", limits.max_open_files));
        argv.push(format!("--fsize={0}:{0}", limits.max_file_bytes));
        if cgroups.is_none() {
            argv.push(format!("--nproc={0}:{0}", limits.max_processes));
            argv.push(format!("--as={0}:{0}", limits.memory_bytes));
        }
        argv.push("--".to_owned());
        argv.push(self.bwrap.display().to_string());
        argv.extend(self.bwrap_args(invocation, egress));
        let mut command = Command::new(&argv[0]);
        // Nothing of the tool-runner leaks in: not its environment, not its working directory.
        command
            .args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .envs(invocation.env.iter().map(|(k, v)| (k, v)))
            .current_dir("/");
        command
    }

    fn bwrap_args(&self, invocation: &Invocation, egress: Option<&Proxy>) -> Vec<String> {
        let mut args: Vec<String> = [
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
        ]
        .map(str::to_owned)
        .to_vec();
        if self.seccomp.is_some() {
            args.extend(["--seccomp".to_owned(), seccomp::FD.to_string()]);
        }
        // Never `--share-net`: with network granted, the program's namespace still has only
        // its loopback, where the forwarder listens for the egress proxy.
        if let (Some(proxy), Some(forwarder)) = (egress, &self.forwarder) {
            args.extend([
                "--ro-bind".to_owned(),
                forwarder.display().to_string(),
                egress::FORWARDER_INSIDE.to_owned(),
                "--bind".to_owned(),
                proxy.path().display().to_string(),
                egress::SOCKET_INSIDE.to_owned(),
            ]);
            let url = format!("http://{}", egress::PROXY_ADDR);
            for key in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
                args.extend(["--setenv".to_owned(), key.to_owned(), url.clone()]);
            }
            // The sandbox's own loopback stays its own (a server and its client in one
            // command); the host's is never reachable by these names.
            for key in ["no_proxy", "NO_PROXY"] {
                args.extend(["--setenv", key, "localhost,127.0.0.1,::1"].map(str::to_owned));
            }
        }
        args.extend(["--ro-bind", "/usr", "/usr"].map(str::to_owned));
        for dir in SYSTEM_DIRS {
            let path = Path::new(dir);
            match std::fs::read_link(path) {
                Ok(target) => args.extend([
                    "--symlink".to_owned(),
                    target.display().to_string(),
                    dir.to_owned(),
                ]),
                Err(_) if path.is_dir() => {
                    args.extend(["--ro-bind".to_owned(), dir.to_owned(), dir.to_owned()])
                }
                Err(_) => {}
            }
        }
        let extra = self
            .extra_ro_paths
            .iter()
            .chain(&invocation.read_only)
            .map(|p| p.display().to_string());
        for path in ETC_ENTRIES.iter().map(|p| p.to_string()).chain(extra) {
            if Path::new(&path).exists() {
                args.extend(["--ro-bind".to_owned(), path.clone(), path]);
            }
        }
        args.extend(
            [
                "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind",
            ]
            .map(str::to_owned),
        );
        args.push(invocation.workspace.display().to_string());
        // No `--clearenv`: bwrap's own environment is already only PATH and the invocation's
        // variables (see `command`), which it passes on. The invocation's values never appear
        // in an argument list (they may hold a user's token; argv is public in /proc).
        args.extend(["/workspace", "--chdir", "/workspace"].map(str::to_owned));
        let base = [
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("TMPDIR", "/tmp"),
            ("LANG", "C.UTF-8"),
        ];
        for (key, value) in base {
            args.extend(["--setenv".to_owned(), key.to_owned(), value.to_owned()]);
        }
        if !invocation.env.iter().any(|(k, _)| k == "HOME") {
            args.extend(["--setenv", "HOME", "/workspace"].map(str::to_owned));
        }
        args.push("--".to_owned());
        if egress.is_some() {
            args.extend([
                egress::FORWARDER_INSIDE.to_owned(),
                egress::PROXY_ADDR.to_owned(),
                egress::SOCKET_INSIDE.to_owned(),
                "--".to_owned(),
            ]);
        }
        args.extend(invocation.argv.iter().cloned());
        args
    }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Keep the first `keep` bytes; count the rest; fire `runaway` past `keep × RUNAWAY_FACTOR`.
/// The text kept, the bytes dropped, and the bytes kept that were not UTF-8 (each invalid
/// sequence becomes U+FFFD).
async fn read_capped(
    reader: Option<impl AsyncRead + Unpin>,
    keep: usize,
    runaway: CancellationToken,
) -> (String, usize, usize) {
    let Some(mut reader) = reader else {
        return (String::new(), 0, 0);
    };
    let mut kept = Vec::new();
    let mut total = 0usize;
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = keep.saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..n.min(room)]);
                total += n;
                if total > keep.saturating_mul(RUNAWAY_FACTOR) {
                    runaway.cancel();
                    break;
                }
            }
        }
    }
    let dropped = total - kept.len();
    let invalid = kept.utf8_chunks().map(|chunk| chunk.invalid().len()).sum();
    (
        String::from_utf8_lossy(&kept).into_owned(),
        dropped,
        invalid,
    )
}
