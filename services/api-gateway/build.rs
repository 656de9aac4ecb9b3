//! Embeds the web UI: every file under `ui/` becomes an entry of `ASSETS` (its path relative to
//! `ui/` and its bytes), so the gateway binary serves the UI with nothing beside it.

use std::path::{Path, PathBuf};

fn main() {
    let root =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("ui");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    files.sort();
    let mut out = String::from(
        "/// The UI's files: (path below `ui/`, bytes).\npub static ASSETS: &[(&str, &[u8])] = &[\n",
    );
    for (relative, absolute) in &files {
        println!("cargo:rerun-if-changed={}", absolute.display());
        out.push_str(&format!(
            "    ({relative:?}, include_bytes!({:?})),\n",
            absolute.display().to_string()
        ));
    }
    out.push_str("];\n");
    let dest =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it")).join("ui_assets.rs");
    std::fs::write(dest, out).expect("write ui_assets.rs");
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            println!("cargo:rerun-if-changed={}", path.display());
            collect(root, &path, files);
        } else if let Ok(relative) = path.strip_prefix(root) {
            let name = relative.to_string_lossy().replace('\\', "/");
            if !name.starts_with('.') && !name.ends_with('~') {
                files.push((name, path.clone()));
            }
        }
    }
}
