//! A PostgreSQL server of a test's own (initdb in a temporary directory, a free port), for
//! tests that stop and restart the database under the services. Postgres refuses to run as
//! root, so when the test runs as root the server runs as the `postgres` user.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

/// A private PostgreSQL server.
#[derive(Debug)]
pub struct PgServer {
    /// `postgres://postgres@127.0.0.1:<port>/postgres`
    pub admin_url: String,
    data: PathBuf,
    port: u16,
    log: PathBuf,
    bin: PathBuf,
}

impl PgServer {
    pub fn start(dir: &Path) -> anyhow::Result<Self> {
        let bin = Self::bin_dir()?;
        let root = dir.join("postgres");
        std::fs::create_dir_all(&root)?;
        let as_root = running_as_root();
        if as_root {
            run(Command::new("chown").arg("-R").arg("postgres").arg(&root))?;
        }
        let data = root.join("data");
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let server = Self {
            admin_url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            data,
            port,
            log: root.join("postgres.log"),
            bin,
        };
        let initdb = server.bin.join("initdb");
        let mut init = server.command(&initdb);
        init.arg("-D").arg(&server.data).args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        ]);
        run(&mut init).context("initdb")?;
        server.start_again()?;
        Ok(server)
    }

    fn bin_dir() -> anyhow::Result<PathBuf> {
        let versions =
            std::fs::read_dir("/usr/lib/postgresql").context("PostgreSQL is not installed")?;
        let mut dirs: Vec<PathBuf> = versions
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .collect();
        dirs.sort();
        dirs.pop()
            .filter(|d| d.join("initdb").exists())
            .context("no initdb under /usr/lib/postgresql")
    }

    fn command(&self, program: &Path) -> Command {
        if running_as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    fn pg_ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut command = self.command(&self.bin.join("pg_ctl"));
        command.arg("-D").arg(&self.data).args(args);
        run(&mut command)
    }

    /// Start the server (again); waits until it accepts connections.
    pub fn start_again(&self) -> anyhow::Result<()> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.data.parent().unwrap_or(&self.data).display()
        );
        let log = self.log.display().to_string();
        self.pg_ctl(&["-o", &options, "-l", &log, "-w", "-t", "30", "start"])
    }

    /// Stop it at once, the way a crash would (`immediate`: no checkpoint, clients cut off).
    pub fn stop(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["-m", "immediate", "-w", "stop"])
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let output = command
        .output()
        .with_context(|| format!("run {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
