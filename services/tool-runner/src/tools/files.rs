//! The file tools: `read_file`, `write_file`, `edit_file`, `list_files`, `glob`. They run on a
//! Landlock-confined thread (see `sandbox::confined`); the path checks here only make the
//! errors clear.

use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::call::{Limits, parse};
use crate::workspace::Workspace;

/// Most entries `list_files` and `glob` return.
const MAX_LISTED: usize = 2000;

/// Run a file tool. `owner` is the sandbox user that must own what is created, so sandboxed
/// programs can change it later.
pub fn execute(
    workspace: &Workspace,
    tool: &str,
    arguments: Value,
    limits: Limits,
    owner: Option<(u32, u32)>,
) -> Result<String, String> {
    match tool {
        "read_file" => read_file(workspace, parse(arguments)?, limits),
        "write_file" => write_file(workspace, parse(arguments)?, owner),
        "edit_file" => edit_file(workspace, parse(arguments)?, owner),
        "list_files" => list_files(workspace, parse(arguments)?),
        "glob" => glob(workspace, parse(arguments)?),
        maestro_domain::tools::WORKSPACE_CONTEXT => workspace_context(workspace, limits),
        maestro_domain::tools::PLACE_ATTACHMENT => {
            place_attachment(workspace, parse(arguments)?, owner)
        }
        other => Err(format!("unknown tool {other:?}")),
    }
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
struct AttachmentArgs {
    path: String,
    content_base64: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old: String,
    new: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobArgs {
    pattern: String,
}

fn read_file(ws: &Workspace, args: PathArgs, limits: Limits) -> Result<String, String> {
    let path = ws.resolve(&args.path).map_err(|e| e.to_string())?;
    let (bytes, total) =
        read_regular(&path, limits.max_read_bytes).map_err(|e| io_error(&args.path, e))?;
    let total = total as usize;
    let shown = &bytes[..bytes.len().min(limits.max_read_bytes)];
    if let Some(kind) = binary_kind(shown, total > shown.len()) {
        return Ok(describe_binary(&args.path, kind, total));
    }
    let text = match std::str::from_utf8(shown) {
        Ok(text) => text.to_owned(),
        // A cut in the middle of a character (the only invalid UTF-8 `binary_kind` lets
        // through) ends what is shown.
        Err(e) => String::from_utf8_lossy(&shown[..e.valid_up_to()]).into_owned(),
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

/// Formats known by their first bytes.
const MAGIC: [(&[u8], &str); 12] = [
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive (or a docx/xlsx/jar/wheel)"),
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"\x7fELF", "an ELF executable or library"),
    (b"SQLite format 3\0", "an SQLite database"),
    (b"BZh", "bzip2-compressed data"),
    (b"\xfd7zXZ\0", "xz-compressed data"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
    (b"\0asm", "a WebAssembly module"),
];

/// What a file's first bytes say it is, when it is not text: a known format by its magic
/// bytes, or plain "binary" for anything with a NUL or invalid UTF-8 (but a character cut at
/// the end of what was read, when there is more).
fn binary_kind(bytes: &[u8], more: bool) -> Option<&'static str> {
    if let Some((_, kind)) = MAGIC.iter().find(|(magic, _)| bytes.starts_with(magic)) {
        return Some(kind);
    }
    let cut_at_end = |e: std::str::Utf8Error| more && e.error_len().is_none();
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => None,
        Err(e) if cut_at_end(e) && !bytes[..e.valid_up_to()].contains(&0) => None,
        _ => Some("binary data"),
    }
}

/// What the model is told instead of a binary file's bytes.
fn describe_binary(path: &str, kind: &str, total: usize) -> String {
    format!(
        "[binary file: {path} is {kind}, {total} bytes; not shown as text. Inspect it with \
         `shell` (e.g. `file`, `xxd {path} | head`) if its bytes matter.]"
    )
}

/// The first `cap` bytes of a regular file and its size. Anything else — a FIFO, a device, a
/// socket — is refused without blocking: the file is opened non-blocking (so a FIFO without a
/// writer cannot hang the open) and checked on the open descriptor (no race with a swap).
pub(crate) fn read_regular(path: &Path, cap: usize) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::with_capacity(cap.min(meta.len() as usize));
    file.take(cap as u64).read_to_end(&mut bytes)?;
    Ok((bytes, meta.len()))
}

/// Write `content` beside the target and rename it into place, so a crash never leaves half a
/// file and writing the same content again leaves the same result.
fn replace_file(
    ws: &Workspace,
    relative: &str,
    content: &[u8],
    owner: Option<(u32, u32)>,
) -> Result<(), String> {
    let path = ws.resolve(relative).map_err(|e| e.to_string())?;
    if path == ws.root() {
        return Err("path names the workspace root; give a file path".to_owned());
    }
    if let Some(parent) = path.parent() {
        create_dirs(ws, parent, owner).map_err(|e| io_error(relative, e))?;
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.maestro-tmp"));
    std::fs::write(&tmp, content).map_err(|e| io_error(relative, e))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&tmp, Some(uid), Some(gid)).map_err(|e| io_error(relative, e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| io_error(relative, e))
}

/// Create missing directories down to `dir`, owned by the sandbox user.
fn create_dirs(ws: &Workspace, dir: &Path, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    if dir.exists() || dir == ws.root() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(ws, parent, owner)?;
    }
    std::fs::create_dir(dir)?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    }
    Ok(())
}

fn write_file(
    ws: &Workspace,
    args: WriteArgs,
    owner: Option<(u32, u32)>,
) -> Result<String, String> {
    replace_file(ws, &args.path, args.content.as_bytes(), owner)?;
    Ok(format!(
        "wrote {} bytes to {}",
        args.content.len(),
        args.path
    ))
}

/// A file a person attached to the task, put in place before its first job (not a tool the
/// model is offered: the worker calls it). Placing it again writes the same bytes.
fn place_attachment(
    ws: &Workspace,
    args: AttachmentArgs,
    owner: Option<(u32, u32)>,
) -> Result<String, String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&args.content_base64)
        .map_err(|_| "the attachment is not base64".to_owned())?;
    replace_file(ws, &args.path, &bytes, owner)?;
    Ok(format!("placed {} bytes at {}", bytes.len(), args.path))
}

/// Exact replacement of a unique occurrence. Repeating an edit that was already applied
/// (`old` gone, `new` present once) reports it as done rather than failing, so the tool is
/// idempotent.
fn edit_file(ws: &Workspace, args: EditArgs, owner: Option<(u32, u32)>) -> Result<String, String> {
    if args.old.is_empty() {
        return Err("`old` must not be empty".to_owned());
    }
    let path = ws.resolve(&args.path).map_err(|e| e.to_string())?;
    // Edits hold the whole file: keep them to files a read could show 64 times over.
    let cap = 64 * 1024 * 1024;
    let (bytes, total) = read_regular(&path, cap).map_err(|e| io_error(&args.path, e))?;
    if total as usize > cap {
        return Err(format!("{} is too large to edit", args.path));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", args.path))?;
    match text.matches(args.old.as_str()).count() {
        1 => {
            let edited = text.replacen(args.old.as_str(), &args.new, 1);
            replace_file(ws, &args.path, edited.as_bytes(), owner)?;
            Ok(format!("edited {}: replaced 1 occurrence", args.path))
        }
        0 if !args.new.is_empty() && text.matches(args.new.as_str()).count() == 1 => Ok(format!(
            "edited {}: the replacement is already in place",
            args.path
        )),
        0 => Err(format!("`old` does not occur in {}", args.path)),
        n => Err(format!(
            "`old` occurs {n} times in {}; give more context so it occurs once",
            args.path
        )),
    }
}

/// Most entries of the memory or skills index.
const MAX_INDEX: usize = 50;
/// Most bytes of the lessons shown.
const MAX_LESSONS: usize = 4096;

/// `AGENTS.md`, the memory index, the skills index and the lessons of a workspace, as JSON
/// (see [`maestro_domain::tools::WorkspaceContext`]). Missing parts are simply absent.
fn workspace_context(ws: &Workspace, limits: Limits) -> Result<String, String> {
    use maestro_domain::tools::{IndexEntry, WorkspaceContext};
    let text = |relative: &str, cap: usize| {
        let (bytes, _) = read_regular(&ws.root().join(relative), cap).ok()?;
        let text = String::from_utf8_lossy(&bytes).trim().to_owned();
        (!text.is_empty()).then_some(text)
    };
    let mut context = WorkspaceContext {
        agents_md: text("AGENTS.md", limits.max_read_bytes),
        lessons: text(".maestro/lessons.md", MAX_LESSONS),
        ..WorkspaceContext::default()
    };
    let names = |dir: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(ws.root().join(dir))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| !n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names.truncate(MAX_INDEX);
        names
    };
    for name in names(".maestro/memory")
        .into_iter()
        .filter(|n| n.ends_with(".md"))
    {
        let path = format!(".maestro/memory/{name}");
        if let Some(body) = text(&path, 4096) {
            context.memory.push(IndexEntry {
                title: title(&body),
                path,
            });
        }
    }
    for name in names(".maestro/skills") {
        let path = format!(".maestro/skills/{name}/SKILL.md");
        if let Some(body) = text(&path, 4096) {
            context.skills.push(IndexEntry {
                title: format!("{name}: {}", skill_description(&body)),
                path,
            });
        }
    }
    serde_json::to_string(&context).map_err(|e| e.to_string())
}

/// A memory file's title: its first non-empty line, without heading marks.
fn title(body: &str) -> String {
    let line = body
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    let line = line.trim_start_matches('#').trim();
    line.chars().take(160).collect()
}

/// A skill's description: the `description:` of its front matter, else its first line of
/// text that is not a heading.
fn skill_description(body: &str) -> String {
    let described = body
        .lines()
        .find_map(|l| l.trim().strip_prefix("description:"))
        .map(|d| d.trim().trim_matches('"').to_owned());
    let text = described.unwrap_or_else(|| {
        body.lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#') && *l != "---")
            .unwrap_or_default()
            .to_owned()
    });
    text.chars().take(200).collect()
}

fn list_files(ws: &Workspace, args: ListArgs) -> Result<String, String> {
    let given = args.path.unwrap_or_else(|| ".".to_owned());
    let dir = ws.resolve(&given).map_err(|e| e.to_string())?;
    let mut entries = Vec::new();
    walk(&dir, &dir, &mut entries).map_err(|e| io_error(&given, e))?;
    Ok(listing(entries))
}

fn glob(ws: &Workspace, args: GlobArgs) -> Result<String, String> {
    let matcher = globset::GlobBuilder::new(&args.pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("invalid glob: {e}"))?
        .compile_matcher();
    let mut entries = Vec::new();
    walk(ws.root(), ws.root(), &mut entries).map_err(|e| io_error(".", e))?;
    entries.retain(|e| !e.ends_with('/') && matcher.is_match(e));
    Ok(listing(entries))
}

fn listing(mut entries: Vec<String>) -> String {
    entries.sort();
    let truncated = entries.len() > MAX_LISTED;
    entries.truncate(MAX_LISTED);
    let mut out = String::new();
    if entries.is_empty() {
        out.push_str("(nothing)");
    }
    for entry in &entries {
        let _ = writeln!(out, "{entry}");
    }
    if truncated {
        let _ = writeln!(out, "[truncated: more than {MAX_LISTED} entries]");
    }
    out
}

/// Every file (`path`) and directory (`path/`) below `dir`, relative to `base`. Symlinks are
/// listed, never followed.
pub(super) fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
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

pub(super) fn io_error(path: &str, e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => format!("{path}: no such file or directory"),
        std::io::ErrorKind::IsADirectory => format!("{path} is a directory"),
        std::io::ErrorKind::NotADirectory => format!("{path}: not a directory"),
        std::io::ErrorKind::PermissionDenied => {
            format!("{path}: permission denied (outside the sandbox?)")
        }
        _ => format!("{path}: {e}"),
    }
}

/// Cut `output` to at most `max` bytes (on a character boundary), saying so.
pub(super) fn truncate(mut output: String, max: usize) -> String {
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
    use crate::workspace::Workspaces;
    use maestro_domain::TaskId;
    use serde_json::json;

    const LIMITS: Limits = Limits {
        max_read_bytes: 16,
        max_output_bytes: 1024,
    };

    fn run(ws: &Workspace, tool: &str, args: Value) -> Result<String, String> {
        execute(ws, tool, args, LIMITS, None)
    }

    #[test]
    fn files_are_written_read_edited_listed_and_globbed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspaces::create(dir.path())
            .expect("workspaces")
            .open(TaskId::new(), None)
            .expect("open");
        let wrote = run(
            &ws,
            "write_file",
            json!({"path": "notes/a.txt", "content": "hello"}),
        );
        assert_eq!(wrote, Ok("wrote 5 bytes to notes/a.txt".to_owned()));
        assert_eq!(
            run(&ws, "read_file", json!({"path": "notes/a.txt"})),
            Ok("hello".into())
        );
        assert_eq!(
            run(&ws, "list_files", json!({})),
            Ok("notes/\nnotes/a.txt\n".into())
        );
        let edit = json!({"path": "notes/a.txt", "old": "hello", "new": "goodbye"});
        assert!(
            run(&ws, "edit_file", edit.clone())
                .expect("edit")
                .contains("replaced 1")
        );
        assert!(
            run(&ws, "edit_file", edit)
                .expect("again")
                .contains("already in place"),
            "edits are idempotent"
        );
        assert_eq!(
            run(&ws, "read_file", json!({"path": "notes/a.txt"})),
            Ok("goodbye".into())
        );
        run(
            &ws,
            "write_file",
            json!({"path": "src/x.rs", "content": "fn main() {}"}),
        )
        .expect("write");
        assert_eq!(
            run(&ws, "glob", json!({"pattern": "**/*.rs"})),
            Ok("src/x.rs\n".into())
        );
        assert_eq!(
            run(&ws, "glob", json!({"pattern": "*.rs"})),
            Ok("(nothing)".into()),
            "* stays in one directory"
        );
        let long = "x".repeat(40);
        run(
            &ws,
            "write_file",
            json!({"path": "long.txt", "content": long}),
        )
        .expect("write");
        let read = run(&ws, "read_file", json!({"path": "long.txt"})).expect("read");
        assert!(
            read.starts_with(&"x".repeat(16)) && read.contains("[truncated"),
            "{read}"
        );
    }

    #[test]
    fn bad_calls_get_errors_the_model_can_act_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspaces::create(dir.path())
            .expect("workspaces")
            .open(TaskId::new(), None)
            .expect("open");
        run(&ws, "write_file", json!({"path": "a.txt", "content": "aa"})).expect("write");
        let err = |tool, args| run(&ws, tool, args).expect_err("should fail");
        assert!(err("read_file", json!({"path": "missing"})).contains("no such file"));
        assert!(
            err("read_file", json!({"path": "../../etc/passwd"})).contains("outside the workspace")
        );
        assert!(err("write_file", json!({"path": "/tmp/x", "content": ""})).contains("absolute"));
        assert!(err("write_file", json!({"path": "a"})).contains("invalid arguments"));
        assert!(
            err(
                "edit_file",
                json!({"path": "a.txt", "old": "a", "new": "b"})
            )
            .contains("occurs 2 times")
        );
        assert!(
            err(
                "edit_file",
                json!({"path": "a.txt", "old": "z", "new": "b"})
            )
            .contains("does not occur")
        );
        assert!(err("glob", json!({"pattern": "[["})).contains("invalid glob"));
        assert!(err("rm", json!({})).contains("unknown tool"));
    }
    #[test]
    fn binary_files_are_described_not_dumped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspaces::create(dir.path())
            .expect("workspaces")
            .open(TaskId::new(), None)
            .expect("open");
        let png = [&b"\x89PNG\r\n\x1a\n"[..], &[0u8; 100]].concat();
        std::fs::write(ws.root().join("logo.png"), &png).expect("write");
        std::fs::write(ws.root().join("environ"), b"A=1\0B=2\0").expect("write");
        std::fs::write(ws.root().join("latin1.txt"), b"caf\xe9 au lait").expect("write");
        std::fs::write(ws.root().join("accent.txt"), "h\u{e9}").expect("write");
        let read = |path: &str| run(&ws, "read_file", json!({"path": path})).expect("read");
        assert_eq!(
            read("logo.png"),
            "[binary file: logo.png is a PNG image, 108 bytes; not shown as text. Inspect it \
             with `shell` (e.g. `file`, `xxd logo.png | head`) if its bytes matter.]"
        );
        assert!(read("environ").contains("is binary data, 8 bytes"));
        assert!(read("latin1.txt").contains("is binary data, 12 bytes"));
        assert_eq!(
            read("accent.txt"),
            "h\u{e9}",
            "UTF-8 text is shown as it is"
        );
        // Any bytes, longer and shorter than what is read (`LIMITS`: 16 bytes): only what is
        // read decides, and a character cut by the limit ends the text shown. Mostly ASCII
        // without NUL, so that text, a NUL and invalid UTF-8 each come first in many cases.
        let byte = proptest::prop_oneof![3 => 1u8..0x80, 1 => proptest::num::u8::ANY];
        proptest::proptest!(|(bytes in proptest::collection::vec(byte, 0..64))| {
            proptest::prop_assume!(!MAGIC.iter().any(|(magic, _)| bytes.starts_with(magic)));
            std::fs::write(ws.root().join("any"), &bytes).expect("write");
            let shown = read("any");
            proptest::prop_assert!(!shown.contains('\0'));
            let head = &bytes[..bytes.len().min(LIMITS.max_read_bytes)];
            let truncated = bytes.len() > head.len();
            let text = match std::str::from_utf8(head) {
                Ok(text) => Some(text),
                Err(e) if truncated && e.error_len().is_none() => {
                    Some(std::str::from_utf8(&head[..e.valid_up_to()]).expect("valid prefix"))
                }
                Err(_) => None,
            }
            .filter(|text| !text.contains('\0'));
            match text {
                Some(text) if truncated => proptest::prop_assert_eq!(
                    shown,
                    format!(
                        "{text}\n[truncated: the file has {} bytes; the first {} are shown]",
                        bytes.len(),
                        text.len()
                    )
                ),
                Some(text) => proptest::prop_assert_eq!(shown, text),
                None => proptest::prop_assert!(shown.starts_with("[binary file: any is ")),
            }
        });
        // The case that showed the first version of this property wrong: text up to the
        // limit, a NUL after it.
        std::fs::write(
            ws.root().join("tail"),
            b"\x01\x01\x01\x01\x01\x01\x01\x01\x01\xc2\x80\x01\x01\x01\x01\x01\0",
        )
        .expect("write");
        assert!(
            read("tail").ends_with("[truncated: the file has 17 bytes; the first 16 are shown]")
        );
    }
}
