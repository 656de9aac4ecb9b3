//! Where the workspace's binaries are. Tests run from `target/<profile>/deps/`, and
//! `cargo build --workspace --bins` (which `.ci/run` does first) puts the binaries one level
//! up. `MAESTRO_BIN_DIR` overrides the location.

use std::path::PathBuf;

/// The path of a workspace binary, e.g. `binary("maestro-worker")`.
pub fn binary(name: &str) -> PathBuf {
    let dir = match std::env::var_os("MAESTRO_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let exe = std::env::current_exe().expect("the test binary has a path");
            let deps = exe.parent().expect("test binaries live in a directory");
            deps.parent()
                .expect("target/<profile>/deps has a parent")
                .to_path_buf()
        }
    };
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not found: build the binaries first (cargo build --workspace --bins) or set MAESTRO_BIN_DIR",
        path.display()
    );
    path
}
