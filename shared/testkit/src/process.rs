//! A child process of a test: started with its environment, its stderr (and stdout after the
//! readiness line) in a log file, and waited on until it announces `MAESTRO_READY`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// A running child process.
#[derive(Debug)]
pub struct Process {
    pub name: String,
    child: Child,
    log: PathBuf,
    addr: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
}

impl Process {
    /// Start `program` and wait (up to 30 s) for its `MAESTRO_READY` line.
    pub async fn start(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> anyhow::Result<Self> {
        let log = log_dir.join(format!("{name}.log"));
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true);
        die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .with_context(|| format!("start {}", program.display()))?;
        let stdout = child.stdout.take().context("stdout is piped")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(rest) = line.strip_prefix("MAESTRO_READY ") {
                    return Ok::<_, std::io::Error>(Some(rest.to_owned()));
                }
            }
            Ok(None)
        })
        .await;
        let announced = match ready {
            Ok(Ok(Some(announced))) => announced,
            Ok(Ok(None)) | Ok(Err(_)) => {
                bail!("{name} exited before it was ready:\n{}", tail(&log))
            }
            Err(_) => bail!("{name} was not ready within 30 s:\n{}", tail(&log)),
        };
        let announced_addr = |key: &str| {
            announced
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(key))
                .and_then(|a| a.parse().ok())
        };
        let (addr, metrics) = (announced_addr("addr="), announced_addr("metrics="));
        let log_for_stdout = log.clone();
        tokio::spawn(async move {
            let Ok(mut file) = tokio::fs::OpenOptions::new()
                .append(true)
                .open(&log_for_stdout)
                .await
            else {
                return;
            };
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = file.write_all(format!("{line}\n").as_bytes()).await;
            }
        });
        Ok(Self {
            name: name.to_owned(),
            child,
            log,
            addr,
            metrics,
        })
    }

    /// The address the process announced, if it listens on one.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Where the process serves `/metrics`, if it announced it.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// SIGKILL, and reap it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// SIGTERM (graceful shutdown); returns its exit status if it exits within `timeout`.
    pub async fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// Send a signal by name (`STOP`, `CONT`, `TERM`, ...).
    pub fn signal(&self, name: &str) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args([&format!("-{name}"), &pid.to_string()])
                .status();
        }
    }

    /// Whether it has exited.
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }
}

/// Children die with the test process, even when it is killed (a timed-out test).
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of the
    // parent; it only sets an attribute of the child before exec.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// The last lines of a log, for an error message (the test's directory is gone by the time
/// anyone reads it).
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
