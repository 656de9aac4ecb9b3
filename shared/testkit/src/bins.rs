//! Where the workspace's binaries are: beside the running program, or one level up from a
//! test in `target/<profile>/deps/` (`cargo build --workspace --bins`, which `.ci/run` does
//! first, puts them there). `MAESTRO_BIN_DIR` overrides the location.

use std::path::PathBuf;

/// The path of a workspace binary, e.g. `binary("maestro-worker")`.
pub fn binary(name: &str) -> PathBuf {
    let dir = match std::env::var_os("MAESTRO_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let exe = std::env::current_exe().expect("the running binary has a path");
            let dir = exe.parent().expect("binaries live in a directory");
            // Tests run from target/<profile>/deps/, programs (benchmarks) from target/<profile>/.
            if dir.ends_with("deps") {
                dir.parent().unwrap_or(dir).to_path_buf()
            } else {
                dir.to_path_buf()
            }
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
