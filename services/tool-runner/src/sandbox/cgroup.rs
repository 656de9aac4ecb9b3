//! Per-call cgroups (cgroup v1 `pids` and `memory` controllers) bounding how many processes a
//! sandboxed program may have and how much memory they may use, and letting the tool-runner
//! kill everything a call started. Only a root tool-runner can create them; without them the
//! limits fall back to rlimits (see `program.rs`).

use std::path::{Path, PathBuf};

const GROUP: &str = "maestro-tools";

/// Where the call cgroups live.
#[derive(Debug, Clone)]
pub struct Cgroups {
    pids: PathBuf,
    memory: PathBuf,
}

/// The cgroups of one call; removed when dropped (after killing anything left in them).
#[derive(Debug)]
pub struct CallCgroups {
    pub pids: PathBuf,
    pub memory: PathBuf,
}

impl Cgroups {
    /// Use the cgroup v1 hierarchies under `/sys/fs/cgroup` if this process can manage them.
    pub fn detect() -> Option<Self> {
        let root = Path::new("/sys/fs/cgroup");
        let cgroups = Self {
            pids: root.join("pids").join(GROUP),
            memory: root.join("memory").join(GROUP),
        };
        for dir in [&cgroups.pids, &cgroups.memory] {
            std::fs::create_dir_all(dir).ok()?;
        }
        // Creating a child proves we may manage the hierarchy.
        let probe = cgroups.create("probe", 1, 1 << 20).ok()?;
        drop(probe);
        Some(cgroups)
    }

    /// Cgroups for one call with these limits.
    pub fn create(
        &self,
        name: &str,
        max_processes: u64,
        memory_bytes: u64,
    ) -> std::io::Result<CallCgroups> {
        let call = CallCgroups {
            pids: self.pids.join(name),
            memory: self.memory.join(name),
        };
        std::fs::create_dir_all(&call.pids)?;
        std::fs::create_dir_all(&call.memory)?;
        std::fs::write(call.pids.join("pids.max"), max_processes.to_string())?;
        std::fs::write(
            call.memory.join("memory.limit_in_bytes"),
            memory_bytes.to_string(),
        )?;
        Ok(call)
    }
}

impl CallCgroups {
    /// SIGKILL every process still in the call's cgroups.
    pub fn kill_all(&self) {
        for _ in 0..20 {
            let pids = std::fs::read_to_string(self.pids.join("cgroup.procs")).unwrap_or_default();
            if pids.trim().is_empty() {
                return;
            }
            let pids: Vec<&str> = pids.split_whitespace().collect();
            let _ = std::process::Command::new("kill")
                .arg("-KILL")
                .args(&pids)
                .status();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Whether the memory limit was hit during the call.
    pub fn memory_exceeded(&self) -> bool {
        std::fs::read_to_string(self.memory.join("memory.failcnt"))
            .ok()
            .and_then(|n| n.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    }
}

impl Drop for CallCgroups {
    fn drop(&mut self) {
        self.kill_all();
        let _ = std::fs::remove_dir(&self.pids);
        let _ = std::fs::remove_dir(&self.memory);
    }
}
