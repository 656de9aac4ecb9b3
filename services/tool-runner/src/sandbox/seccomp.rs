//! The seccomp filter every sandboxed program runs under (bubblewrap's `--seccomp`): the
//! system calls no tool needs, which widen the kernel's attack surface or reach past the
//! sandbox, fail with `EPERM`; everything else is allowed. Compiled once at start-up with
//! `seccompiler` (rust-vmm's, as Firecracker uses) into a file the launch wrapper opens on
//! fd 3 for bubblewrap to read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

/// The fd the launch wrapper opens the filter on.
pub const FD: u32 = 3;

/// What programs may not call, and why it is safe to refuse: debugging other processes
/// (`ptrace`, `process_vm_*`), (un)mounting and namespaces (bubblewrap already set them up),
/// the kernel's keyrings, eBPF, `userfaultfd` (a classic exploit primitive), perf events,
/// kernel modules, kexec, reboot, swap, clocks, accounting, quotas, handle-based opens (a way
/// around mount confinement), I/O ports.
const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_userfaultfd,
    libc::SYS_perf_event_open,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_fanotify_init,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// The filter as bubblewrap reads it: the BPF program's instructions, native-endian.
pub fn compile() -> Result<Vec<u8>, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no seccomp filter for {}: {e}", std::env::consts::ARCH))?;
    let rules = DENIED
        .iter()
        .map(|&nr| (nr, Vec::new()))
        .collect::<BTreeMap<_, _>>();
    let refuse = SeccompAction::Errno(libc::EPERM as u32);
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, refuse, arch)
        .map_err(|e| format!("cannot build the seccomp filter: {e}"))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e| format!("cannot compile the seccomp filter: {e}"))?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for instruction in &program {
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    Ok(bytes)
}

/// Compile the filter into `dir/seccomp.bpf` (readable, not writable, by the sandbox user);
/// its path.
pub fn install(dir: &Path) -> Result<PathBuf, String> {
    let bytes = compile()?;
    let path = dir.join("seccomp.bpf");
    std::fs::write(&path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_compiles_to_whole_instructions() {
        let bytes = compile().expect("a filter for this architecture");
        assert_eq!(bytes.len() % 8, 0);
        assert!(
            bytes.len() / 8 > DENIED.len(),
            "a check per denied call, and more"
        );
    }
}
