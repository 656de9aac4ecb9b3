//! The built-in file tools. Each returns the text the model sees: `Ok` for a result, `Err`
//! for an error the model can act on (bad arguments, missing file, refused path).

use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::workspace::Workspace;

/// Output limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_read_bytes: usize,
    pub max_output_bytes: usize,
}

/// Most entries `list_files` returns.
const MAX_LISTED: usize = 2000;

/// Run `tool` with `arguments` in `workspace`.
pub fn execute(
    workspace: &Workspace,
    tool: &str,
    arguments: Value,
    limits: Limits,
) -> Result<String, String> {
    let output = match tool {
        "read_file" => read_file(workspace, parse(arguments)?, limits),
        "write_file" => write_file(workspace, parse(arguments)?),
        "list_files" => list_files(workspace, parse(arguments)?),
        other => Err(format!("unknown tool {other:?}")),
    }?;
    Ok(truncate(output, limits.max_output_bytes))
}

fn parse<T: serde::de::DeserializeOwned>(arguments: Value) -> Result<T, String> {
    serde_json::from_value(arguments).map_err(|e| format!("invalid arguments: {e}"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
    path: Option<String>,
}

fn read_file(ws: &Workspace, args: PathArgs, limits: Limits) -> Result<String, String> {
    let path = ws.resolve(&args.path).map_err(|e| e.to_string())?;
    let bytes = std::fs::read(&path).map_err(|e| io_error(&args.path, e))?;
    let total = bytes.len();
    let shown = &bytes[..total.min(limits.max_read_bytes)];
    let text = match std::str::from_utf8(shown) {
        Ok(text) => text.to_owned(),
        // A cut in the middle of a character is fine; anything else is binary.
        Err(e) if total > limits.max_read_bytes && e.error_len().is_none() => {
            String::from_utf8_lossy(&shown[..e.valid_up_to()]).into_owned()
        }
        Err(_) => return Err(format!("{} is not UTF-8 text", args.path)),
    };
    if total > limits.max_read_bytes {
        Ok(format!(
            "{text}\n[truncated: the file has {total} bytes; the first {} are shown]",
            text.len()
        ))
    } else {
        Ok(text)
    }
}

fn write_file(ws: &Workspace, args: WriteArgs) -> Result<String, String> {
    let path = ws.resolve(&args.path).map_err(|e| e.to_string())?;
    if path == ws.root() {
        return Err("path names the workspace root; give a file path".to_owned());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_error(&args.path, e))?;
    }
    // Write a sibling and rename it into place, so a crash never leaves half a file and
    // running the same write again leaves the same result.
    let tmp = path.with_file_name(format!(
        ".{}.maestro-tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file")
    ));
    std::fs::write(&tmp, args.content.as_bytes()).map_err(|e| io_error(&args.path, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io_error(&args.path, e))?;
    Ok(format!(
        "wrote {} bytes to {}",
        args.content.len(),
        args.path
    ))
}

fn list_files(ws: &Workspace, args: ListArgs) -> Result<String, String> {
    let given = args.path.unwrap_or_else(|| ".".to_owned());
    let dir = ws.resolve(&given).map_err(|e| e.to_string())?;
    let mut entries = Vec::new();
    walk(&dir, &dir, &mut entries).map_err(|e| io_error(&given, e))?;
    entries.sort();
    let truncated = entries.len() > MAX_LISTED;
    entries.truncate(MAX_LISTED);
    let mut out = String::new();
    if entries.is_empty() {
        out.push_str("(empty)");
    }
    for entry in &entries {
        let _ = writeln!(out, "{entry}");
    }
    if truncated {
        let _ = writeln!(out, "[truncated: more than {MAX_LISTED} entries]");
    }
    Ok(out)
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().ends_with(".maestro-tmp") {
            continue;
        }
        let path = entry.path();
        let relative = path
            .strip_prefix(base)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        // file_type() does not follow symlinks, so a link to a directory is not descended.
        if entry.file_type()?.is_dir() {
            out.push(format!("{relative}/"));
            if out.len() <= MAX_LISTED {
                walk(base, &path, out)?;
            }
        } else {
            out.push(relative);
        }
    }
    Ok(())
}

fn io_error(path: &str, e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => format!("{path}: no such file or directory"),
        std::io::ErrorKind::IsADirectory => format!("{path} is a directory"),
        std::io::ErrorKind::NotADirectory => format!("{path}: not a directory"),
        _ => format!("{path}: {e}"),
    }
}

fn truncate(mut output: String, max: usize) -> String {
    if output.len() <= max {
        return output;
    }
    let mut cut = max;
    while !output.is_char_boundary(cut) {
        cut -= 1;
    }
    let total = output.len();
    output.truncate(cut);
    let _ = write!(output, "\n[truncated: output was {total} bytes]");
    output
}

#[cfg(test)]
mod tests {
    use super::*;
    use maestro_domain::TaskId;
    use serde_json::json;

    const LIMITS: Limits = Limits {
        max_read_bytes: 16,
        max_output_bytes: 1024,
    };

    #[test]
    fn files_are_written_read_and_listed_inside_the_workspace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(dir.path(), TaskId::new()).expect("open");
        let wrote = execute(
            &ws,
            "write_file",
            json!({"path": "notes/a.txt", "content": "hello"}),
            LIMITS,
        );
        assert_eq!(wrote, Ok("wrote 5 bytes to notes/a.txt".to_owned()));
        assert_eq!(
            execute(&ws, "read_file", json!({"path": "notes/a.txt"}), LIMITS),
            Ok("hello".into())
        );
        assert_eq!(
            execute(&ws, "list_files", json!({}), LIMITS),
            Ok("notes/\nnotes/a.txt\n".into())
        );
        let long = "x".repeat(40);
        execute(
            &ws,
            "write_file",
            json!({"path": "long.txt", "content": long}),
            LIMITS,
        )
        .expect("write");
        let read = execute(&ws, "read_file", json!({"path": "long.txt"}), LIMITS).expect("read");
        assert!(
            read.starts_with(&"x".repeat(16)) && read.contains("[truncated"),
            "{read}"
        );
    }

    #[test]
    fn bad_calls_get_errors_the_model_can_act_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(dir.path(), TaskId::new()).expect("open");
        let err = |tool, args| execute(&ws, tool, args, LIMITS).expect_err("should fail");
        assert!(err("read_file", json!({"path": "missing"})).contains("no such file"));
        assert!(
            err("read_file", json!({"path": "../../etc/passwd"})).contains("outside the workspace")
        );
        assert!(err("write_file", json!({"path": "/tmp/x", "content": ""})).contains("absolute"));
        assert!(err("write_file", json!({"path": "a"})).contains("invalid arguments"));
        assert!(err("rm", json!({})).contains("unknown tool"));
    }
}
