//! `grep`: regular-expression search over the workspace's text files.

use std::fmt::Write as _;

use serde::Deserialize;

use super::files::{io_error, walk};
use crate::call::Limits;
use crate::workspace::Workspace;

/// Most matching lines reported.
const MAX_MATCHES: usize = 500;
/// Longest line shown (longer ones are cut).
const MAX_LINE: usize = 300;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
}

pub fn grep(ws: &Workspace, args: GrepArgs, limits: Limits) -> Result<String, String> {
    let regex = regex::Regex::new(&args.pattern).map_err(|e| format!("invalid pattern: {e}"))?;
    let filter = match &args.glob {
        Some(glob) => Some(
            globset::GlobBuilder::new(glob)
                .literal_separator(true)
                .build()
                .map_err(|e| format!("invalid glob: {e}"))?
                .compile_matcher(),
        ),
        None => None,
    };
    let given = args.path.unwrap_or_else(|| ".".to_owned());
    let start = ws.resolve(&given).map_err(|e| e.to_string())?;
    let mut files = Vec::new();
    if start.is_file() {
        files.push(
            start
                .strip_prefix(ws.root())
                .unwrap_or(&start)
                .to_string_lossy()
                .into_owned(),
        );
    } else {
        let mut entries = Vec::new();
        walk(ws.root(), &start, &mut entries).map_err(|e| io_error(&given, e))?;
        let prefix = start
            .strip_prefix(ws.root())
            .unwrap_or(&start)
            .to_path_buf();
        files.extend(
            entries
                .into_iter()
                .filter(|e| !e.ends_with('/'))
                .map(|e| prefix.join(e).to_string_lossy().into_owned()),
        );
    }
    files.sort();
    let mut out = String::new();
    let mut matches = 0;
    for file in files
        .iter()
        .filter(|f| filter.as_ref().is_none_or(|g| g.is_match(f)))
    {
        let cap = limits.max_read_bytes * 64;
        // Only regular files (a FIFO would block), never more than `cap` bytes in memory.
        let Ok((bytes, total)) = super::files::read_regular(&ws.root().join(file), cap) else {
            continue;
        };
        if total as usize > cap || bytes.contains(&0) {
            continue; // binary or huge
        }
        let text = String::from_utf8_lossy(&bytes);
        for (number, line) in text.lines().enumerate().filter(|(_, l)| regex.is_match(l)) {
            matches += 1;
            if matches > MAX_MATCHES {
                let _ = writeln!(out, "[truncated: more than {MAX_MATCHES} matching lines]");
                return Ok(out);
            }
            let shown: String = line.chars().take(MAX_LINE).collect();
            let _ = writeln!(out, "{file}:{}: {shown}", number + 1);
        }
    }
    if matches == 0 {
        out.push_str("(no matches)");
    }
    Ok(out)
}
