//! The sandbox every tool runs in. Two mechanisms, each enforced by the kernel rather than by
//! path checks alone:
//!
//! - **Programs** (`shell`, MCP servers) run under bubblewrap: new mount, PID, network, IPC,
//!   UTS and user namespaces; the only writable place is the task's workspace (at
//!   `/workspace`), the system (`/usr`, a few `/etc` files) is read-only, `/tmp` is a private
//!   tmpfs; no network of their own — with network granted, HTTP(S) through the egress proxy
//!   to public addresses only (`egress.rs`); all capabilities dropped; an environment of
//!   a few fixed variables. When the tool-runner runs as root, the program runs as an
//!   unprivileged user (`SANDBOX_UID`) inside its own cgroups (process count and memory);
//!   rlimits bound CPU time, open files and file size. Killing it kills the whole tree: the
//!   sandbox's init dies with bubblewrap, and the kernel then kills everything in its PID
//!   namespace, including processes that outlived their parent.
//! - **File tools** run in the tool-runner on a thread of their own that Landlock restricts to
//!   the task's workspace: whatever path a bug or a symlink produces, the kernel refuses
//!   anything outside.
//!
//! At start-up both are probed. A host without them does not get a weaker sandbox: the tools
//! that need the missing mechanism answer with an error saying why (fail closed).

mod cgroup;
pub mod egress;
mod landlock;
mod program;
pub mod seccomp;

use std::path::PathBuf;

pub use self::landlock::{confined, confined_to_read};
pub use cgroup::{CallCgroups, Cgroups};
pub use program::{Exit, Held, Invocation, Network, ProgramOutput};

/// Resource limits of one sandboxed program.
#[derive(Debug, Clone)]
pub struct Limits {
    pub cpu_seconds: u64,
    pub memory_bytes: u64,
    pub max_processes: u64,
    pub max_open_files: u64,
    pub max_file_bytes: u64,
    /// Bytes of stdout (and of stderr) kept; the rest is counted and dropped.
    pub max_output_bytes: usize,
}

/// How programs are sandboxed on this host.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub bwrap: PathBuf,
    pub limits: Limits,
    /// `(uid, gid)` to run programs as, when the tool-runner runs as root.
    pub run_as: Option<(u32, u32)>,
    /// Per-call cgroups (root only, cgroup v1 `pids` and `memory`).
    pub cgroups: Option<Cgroups>,
    /// Extra read-only paths visible inside (e.g. an MCP server's install directory).
    pub extra_ro_paths: Vec<PathBuf>,
    /// Why programs cannot run here, if they cannot: every program tool reports it.
    pub unavailable: Option<String>,
    /// Why file tools cannot run here (no Landlock), if they cannot.
    pub files_unavailable: Option<String>,
    /// The compiled seccomp filter programs run under (`seccomp.rs`).
    pub seccomp: Option<PathBuf>,
    /// `maestro-sandbox-forward`, the first process of a program granted network; without
    /// it such programs do not run.
    pub forwarder: Option<PathBuf>,
    /// Where the egress proxies' sockets are made.
    pub egress_dir: PathBuf,
}

/// `maestro-sandbox-forward`: `SANDBOX_FORWARDER` if set, else next to this executable.
pub fn default_forwarder() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()?
        .parent()
        .map(|dir| dir.join("maestro-sandbox-forward"))
}

/// The effective user id of this process, from `/proc/self/status`.
pub fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

impl Sandbox {
    /// Work out how programs can be sandboxed here, and check that they really can: a host
    /// where bubblewrap or Landlock does not work gets `unavailable` / `files_unavailable`
    /// (tools then refuse with the reason) rather than a weaker sandbox.
    pub async fn detect(
        bwrap: PathBuf,
        limits: Limits,
        sandbox_user: (u32, u32),
        extra_ro_paths: Vec<PathBuf>,
        forwarder: Option<PathBuf>,
        probe_dir: &std::path::Path,
    ) -> Self {
        let root = effective_uid() == Some(0);
        let forwarder = forwarder.filter(|f| f.is_file());
        let mut sandbox = Self {
            bwrap,
            limits,
            run_as: root.then_some(sandbox_user),
            cgroups: if root { Cgroups::detect() } else { None },
            extra_ro_paths,
            unavailable: None,
            files_unavailable: None,
            seccomp: None,
            forwarder,
            egress_dir: std::path::absolute(probe_dir.join("egress"))
                .unwrap_or_else(|_| probe_dir.join("egress")),
        };
        // No filter, no programs: never a weaker sandbox than documented.
        let filter = std::fs::create_dir_all(probe_dir)
            .map_err(|e| format!("cannot create {}: {e}", probe_dir.display()))
            .and_then(|()| seccomp::install(probe_dir));
        match filter {
            Ok(path) => sandbox.seccomp = Some(path),
            Err(e) => {
                sandbox.unavailable = Some(e);
                return sandbox;
            }
        }
        sandbox.unavailable = sandbox.probe_programs(probe_dir).await.err();
        sandbox.files_unavailable = self::landlock::probe().await.err().map(|e| e.to_string());
        sandbox
    }

    async fn probe_programs(&self, dir: &std::path::Path) -> Result<(), String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
        }
        let argv = ["sh", "-c", "touch probe && rm probe"].map(str::to_owned);
        let timeout = std::time::Duration::from_secs(10);
        let invocation = Invocation::new(dir, argv.to_vec(), timeout);
        let output = self
            .run(&invocation, &tokio_util::sync::CancellationToken::new())
            .await
            .map_err(|e| e.to_string())?;
        match output.exit {
            Exit::Code(0) => Ok(()),
            other => Err(format!(
                "bubblewrap ({}) does not work here: {other:?} {}",
                self.bwrap.display(),
                output.stderr.trim()
            )),
        }
    }
}
