//! Tool specifications (what the model is offered) and the tool-runner's wire protocol.
//!
//! Definitions are rendered in a fixed order with stable bytes: `serde_json` objects keep
//! their keys sorted, so the same specs always render to the same `tools` array, which the
//! LLM's prompt cache depends on.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::ids::{JobId, TaskId};
pub use crate::mcp::{McpTarget, mcp_tool_name, split_mcp_tool_name};

/// Name of the tool that ends a movement successfully.
pub const COMPLETE: &str = "complete";

/// How safe a tool is to run again (SPEC §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Idempotency {
    /// Reads only; may run in parallel and be cached.
    ReadOnly,
    /// Changes the world, but running it twice leaves the same state.
    Idempotent,
    /// Running it twice may do the effect twice.
    SideEffecting,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
    pub idempotency: Idempotency,
}

impl ToolSpec {
    pub fn is_read_only(&self) -> bool {
        self.idempotency == Idempotency::ReadOnly
    }

    /// The OpenAI `tools[]` entry for this tool.
    pub fn to_openai(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        })
    }
}

fn spec(name: &str, description: &str, parameters: Value, idempotency: Idempotency) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters,
        idempotency,
    }
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

/// Whether `name` is one of [`builtin_tools`] (their names, listed once: building the specs
/// renders every schema).
pub fn is_builtin(name: &str) -> bool {
    static NAMES: LazyLock<Vec<String>> =
        LazyLock::new(|| builtin_tools().into_iter().map(|t| t.name).collect());
    NAMES.iter().any(|n| n == name)
}

/// The built-in tools the tool-runner executes, in the order they are offered.
pub fn builtin_tools() -> Vec<ToolSpec> {
    let path = json!({"type": "string", "description": "Path relative to the workspace root."});
    vec![
        spec(
            "read_file",
            "Read a UTF-8 text file from the task workspace.",
            object(json!({"path": path}), &["path"]),
            Idempotency::ReadOnly,
        ),
        spec(
            "write_file",
            "Create or overwrite a UTF-8 text file in the task workspace; parent directories are created.",
            object(
                json!({"path": path, "content": {"type": "string", "description": "The whole new content of the file."}}),
                &["path", "content"],
            ),
            Idempotency::Idempotent,
        ),
        spec(
            "edit_file",
            "Replace one exact occurrence of `old` with `new` in a file of the task workspace. `old` must occur exactly once.",
            object(
                json!({
                    "path": path,
                    "old": {"type": "string", "description": "The exact text to replace; it must occur once."},
                    "new": {"type": "string", "description": "The replacement text."}
                }),
                &["path", "old", "new"],
            ),
            // Not idempotent: when `new` contains `old`, running it again edits again. Ledgered, so a
            // crash around it never edits twice.
            Idempotency::SideEffecting,
        ),
        spec(
            "list_files",
            "List the files and directories under a directory of the task workspace, recursively.",
            object(
                json!({"path": {"type": "string", "description": "Directory relative to the workspace root; default is the root."}}),
                &[],
            ),
            Idempotency::ReadOnly,
        ),
        spec(
            "glob",
            "List the workspace files whose paths match a glob pattern such as `src/**/*.rs`.",
            object(
                json!({"pattern": {"type": "string", "description": "A glob relative to the workspace root."}}),
                &["pattern"],
            ),
            Idempotency::ReadOnly,
        ),
        spec(
            "grep",
            "Search the workspace's text files for lines matching a regular expression; answers `path:line: text`.",
            object(
                json!({
                    "pattern": {"type": "string", "description": "A regular expression (Rust syntax)."},
                    "path": {"type": "string", "description": "A file or directory to search; default is the root."},
                    "glob": {"type": "string", "description": "Only search files whose paths match this glob."}
                }),
                &["pattern"],
            ),
            Idempotency::ReadOnly,
        ),
        spec(
            "shell",
            "Run a shell command (sh -c) in the task workspace, sandboxed: no network unless granted, limited time, memory and output. Answers the exit code, stdout and stderr.",
            object(
                json!({
                    "command": {"type": "string", "description": "The command line."},
                    "timeout_s": {"type": "integer", "minimum": 1, "description": "Time limit in seconds (capped by the tool-runner)."}
                }),
                &["command"],
            ),
            Idempotency::SideEffecting,
        ),
        spec(
            "http_fetch",
            "Make an HTTP request (needs network access granted by the workspace policy). Answers the status, headers and body (truncated).",
            object(
                json!({
                    "url": {"type": "string", "description": "An absolute http or https URL."},
                    "method": {"type": "string", "enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "body": {"type": "string"}
                }),
                &["url"],
            ),
            Idempotency::SideEffecting,
        ),
    ]
}

/// The built-in tools that write the file their `path` argument names.
pub const FILE_WRITERS: [&str; 2] = ["write_file", "edit_file"];

/// A workspace path as it goes in a URL: each segment percent-encoded (unreserved characters
/// kept, every other byte `%XX`), the `/` between segments kept. `notes #1.md` is
/// `notes%20%231.md`.
pub fn url_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(byte as char);
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// Whether a built-in tool changes files in the workspace (needs the `edit` permission).
pub fn edits_files(name: &str) -> bool {
    matches!(name, "write_file" | "edit_file" | "shell")
}

/// Name of the tool that moves a piece to another movement (or to `COMPLETE` / `ABORT`).
pub const TRANSITION: &str = "transition";

/// How a `complete` call ends the piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompleteStatus {
    /// The task is done.
    Success,
    /// The model needs an answer from the user before it can go on (the job asks and waits).
    NeedsUserInput,
    /// The task cannot be done.
    Abort,
    /// The agent will not do the task (out of scope, against policy): nothing was attempted.
    Decline,
    /// The request needed only an answer, no work: the result is the answer.
    Reply,
}

/// The `complete` tool: ends the piece with a result and a status.
pub fn complete_tool() -> ToolSpec {
    spec(
        COMPLETE,
        "Finish the task. Call it alone, once the work is done (status `success`), when you \
         need an answer from the user to go on (`needs_user_input`, with the question as the \
         result), when the task cannot be done (`abort`, with the reason), when you will not \
         do it (`decline`, with the reason), or when it asked only for an answer (`reply`, \
         with the answer).",
        object(
            json!({
                "result": {"type": "string", "description": "For the user: what was done, the question, or why not."},
                "status": {"type": "string", "enum": ["success", "needs_user_input", "abort", "decline", "reply"], "description": "Defaults to success."}
            }),
            &["result"],
        ),
        Idempotency::ReadOnly,
    )
}

/// The tool the model asks the user a question with (handled by the worker: the job pauses
/// until the user answers).
pub const ASK: &str = "ask";

/// The tool the model asks for a package with (handled by the worker: the job pauses until a
/// person approves; the package is then installed into the workspace).
pub const REQUEST_PACKAGE: &str = "request_package";

/// The tool-runner's reader of what a new job's prompt shows of its workspace (never offered
/// to the model): `AGENTS.md`, the memory and skills indexes, the lessons.
pub const WORKSPACE_CONTEXT: &str = "workspace_context";

/// Put a file a person attached to the task into its workspace (the worker's, before the
/// job's first LLM call; never offered to the model): `{path, content_base64}`.
pub const PLACE_ATTACHMENT: &str = "place_attachment";

/// What a new job's prompt shows of its workspace, read in one tool-runner call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceContext {
    /// `AGENTS.md` at the workspace root.
    #[serde(default)]
    pub agents_md: Option<String>,
    /// `.maestro/memory/*.md`: path and title (first line).
    #[serde(default)]
    pub memory: Vec<IndexEntry>,
    /// `.maestro/skills/<name>/SKILL.md`: path, name and description.
    #[serde(default)]
    pub skills: Vec<IndexEntry>,
    /// `.maestro/lessons.md`: what earlier work in this workspace learned.
    #[serde(default)]
    pub lessons: Option<String>,
}

/// One line of an index: a file and what it is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub path: String,
    pub title: String,
}

/// The tool-runner's installer, which runs an approved `request_package` (never offered to
/// the model).
pub const INSTALL_PACKAGE: &str = "install_package";

/// Tools the worker answers itself, through a person: offered after the built-in and MCP
/// tools, always allowed (they only ask).
pub fn human_tools() -> Vec<ToolSpec> {
    vec![
        spec(
            ASK,
            "Ask the user a question you cannot answer with the tools, when you need their \
             decision or knowledge to go on. The task pauses until they answer; you continue \
             in this movement with their answer. Ask rarely, and everything at once.",
            object(
                json!({"question": {"type": "string", "description": "The question, with the context the user needs to answer it."}}),
                &["question"],
            ),
            Idempotency::ReadOnly,
        ),
        spec(
            REQUEST_PACKAGE,
            "Ask for a package to be installed into the workspace (pip: importable with \
             PYTHONPATH=.maestro/pip; npm: under .maestro/npm/node_modules). The task pauses \
             until a person approves; you then get the install's outcome.",
            object(
                json!({
                    "name": {"type": "string", "description": "The package name."},
                    "manager": {"type": "string", "enum": ["pip", "npm"], "description": "The package manager."},
                    "version": {"type": "string", "description": "An exact version; omit for the latest."},
                    "reason": {"type": "string", "description": "Why the task needs it."}
                }),
                &["name", "manager"],
            ),
            Idempotency::SideEffecting,
        ),
    ]
}

/// The tool that starts a subtask (handled by the worker: a child task with its own job, in
/// the same workspace; the movement waits until every subtask it started is over, then each
/// `delegate` call is answered with its child's result).
pub const DELEGATE: &str = "delegate";

/// The `delegate` tool, choosing among `pieces` (the catalog's, by name).
pub fn delegate_tool(pieces: &[String]) -> ToolSpec {
    spec(
        DELEGATE,
        "Hand a self-contained part of the task to a sub-agent. It works in the same workspace \
         with its own conversation (it sees only the instruction you give it). Several \
         `delegate` calls in one reply run in parallel; you continue once all of them are done, \
         with each one's result as the result of its call.",
        object(
            json!({
                "instruction": {"type": "string", "description": "Everything the sub-agent needs to know: the goal, the files, what to report back."},
                "piece": {"type": "string", "enum": pieces, "description": "The workflow it follows; omit for the default."}
            }),
            &["instruction"],
        ),
        Idempotency::SideEffecting,
    )
}

/// Whether `name` (and `version`, when given) name a package of `manager` from its registry and
/// nothing else: no option, path, URL, archive file or git shorthand can pass. Checked by the
/// worker before a request is shown to a person and again by the installer.
pub fn check_package(manager: &str, name: &str, version: Option<&str>) -> Result<(), String> {
    let archive = [".gz", ".tgz", ".zip", ".whl", ".tar", ".bz2", ".xz", ".egg"]
        .iter()
        .any(|suffix| name.to_ascii_lowercase().ends_with(suffix));
    let word = |s: &str, extra: &str| {
        !s.is_empty()
            && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c) || extra.contains(c))
    };
    let valid_name = match manager {
        // PEP 508 names: letters, digits, `.`, `_`, `-`, starting with a letter or digit.
        "pip" => word(name, ""),
        // npm names, optionally scoped (`@scope/name`); a bare `a/b` would be a GitHub repo.
        "npm" => match name.strip_prefix('@').map(|rest| rest.split_once('/')) {
            Some(Some((scope, bare))) => word(scope, "~") && word(bare, "~"),
            Some(None) => false,
            None => word(name, "~"),
        },
        other => return Err(format!("`manager` is pip or npm, not {other:?}")),
    };
    if !valid_name || archive || name.len() > 214 {
        return Err(format!("{name:?} is not a {manager} package name"));
    }
    if let Some(version) = version
        && !(word(version, "+!*") && version.len() <= 64)
    {
        return Err(format!("{version:?} is not a version"));
    }
    Ok(())
}

/// A hash of a call's arguments, as a reviewer saw them: SHA-256 over the JSON text with
/// object keys sorted (hex). An approval holds only for arguments with the same hash.
pub fn arguments_hash(arguments: &Value) -> String {
    use sha2::{Digest, Sha256};
    // serde_json's maps are ordered by key (no `preserve_order`), so the text is canonical.
    let text = arguments.to_string();
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `transition` tool of a piece: `targets` is every transition target in the piece (the
/// same enum in every movement, so the definition never changes within a piece). Which
/// targets the current movement allows is said in its guidance and checked on each call.
pub fn transition_tool(targets: &[String]) -> ToolSpec {
    spec(
        TRANSITION,
        "Leave the current movement for one of the targets its guidance lists, when that \
         target's condition holds. Call it alone, as the last thing in a movement.",
        object(
            json!({
                "target": {"type": "string", "enum": targets, "description": "The movement to go to, or COMPLETE / ABORT."},
                "reason": {"type": "string", "description": "Why: what was done, or what the next movement must fix."}
            }),
            &["target", "reason"],
        ),
        Idempotency::ReadOnly,
    )
}

/// A call's arguments as the model wrote them: a JSON object (an empty text counts as `{}`).
/// `Err` is the tool result the model gets instead.
pub fn parse_arguments(raw: &str) -> Result<Value, String> {
    let raw = if raw.trim().is_empty() { "{}" } else { raw };
    match serde_json::from_str::<Value>(raw) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err("Error: arguments must be a JSON object".to_owned()),
        Err(e) => Err(format!("Error: arguments are not valid JSON ({e})")),
    }
}

/// A request to the tool-runner (`<prefix>.tools.exec`, request/reply).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolExecRequest {
    pub task_id: TaskId,
    pub job_id: JobId,
    pub call_id: String,
    /// Stable id of this execution: the same call of the same job always has the same id, so
    /// external systems can de-duplicate a repeated execution.
    pub operation_id: String,
    pub tool: String,
    pub arguments: Value,
    pub timeout_ms: u64,
    /// The workspace policy grants network access to this call.
    #[serde(default)]
    pub network: bool,
    /// Hosts `http_fetch` and programs may reach when network is granted (empty: any public one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// The call is in the operation ledger: record its outcome under `operation_id` before
    /// replying, so a worker that never gets the reply can still learn it.
    #[serde(default)]
    pub ledgered: bool,
    /// For an MCP tool (`mcp__<server>__<tool>`): the server to run it on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpTarget>,
    /// The job's claim that sends it (its fence): a tool-runner runs a ledgered call for a
    /// later claim than the one that started it (a person said the earlier run did not
    /// happen), never again for the same or an earlier one.
    #[serde(default)]
    pub attempt: i32,
}

impl ToolExecRequest {
    /// A request of MAESTRO's own (not a model's call, never ledgered): no network, no MCP
    /// server. `name` is its call id, and after the job id its operation id.
    pub fn internal(
        (task_id, job_id): (TaskId, JobId),
        name: &str,
        tool: &str,
        arguments: Value,
        timeout_ms: u64,
    ) -> Self {
        Self {
            task_id,
            job_id,
            call_id: name.to_owned(),
            operation_id: format!("{job_id}/{name}"),
            tool: tool.to_owned(),
            arguments,
            timeout_ms,
            network: false,
            allowed_hosts: Vec::new(),
            ledgered: false,
            mcp: None,
            attempt: 0,
        }
    }
}

/// Read one file of a task's workspace for its owner (`<prefix>.tools.files.read`,
/// request/reply): how the gateway serves the files a job wrote. The reply's body is the
/// file's bytes; a refusal has the header [`FILE_ERROR_HEADER`] (one of [`FileError`]'s
/// names) and the reason as its body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileReadRequest {
    /// The workspace: the task's own, or its top task's.
    pub workspace_id: TaskId,
    /// Relative to the workspace root.
    pub path: String,
    /// Larger files are refused (`too_large`).
    pub max_bytes: u64,
}

/// The header of a refused file read.
pub const FILE_ERROR_HEADER: &str = "Maestro-File-Error";

/// Why a file was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileError {
    /// No such file (or not a regular file).
    NotFound,
    /// Larger than the request's `max_bytes`.
    TooLarge,
    /// The path leads outside the workspace, or the request is malformed.
    Refused,
    /// The tool-runner cannot read files here (no sandbox) or failed.
    Unavailable,
}

impl FileError {
    pub fn as_str(self) -> &'static str {
        match self {
            FileError::NotFound => "not_found",
            FileError::TooLarge => "too_large",
            FileError::Refused => "refused",
            FileError::Unavailable => "unavailable",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            FileError::NotFound,
            FileError::TooLarge,
            FileError::Refused,
            FileError::Unavailable,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
}

/// Ask a tool-runner for the tools of an MCP server (`<prefix>.tools.mcp.list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpListRequest {
    pub target: McpTarget,
    pub network: bool,
    /// With network: the hosts the server may reach (empty: any public address).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

/// The tools of an MCP server, or why they cannot be listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpListReply {
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The server requires authorization: its `WWW-Authenticate` challenge (where an OAuth
    /// login starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_challenge: Option<String>,
}

/// The tool-runner's answer. A tool that failed is still an answer (`ok = false`, the model
/// sees the error text); a missing answer means the tool-runner itself is unavailable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolExecReply {
    pub ok: bool,
    pub output: String,
    /// The call was not run at all (its start could not be recorded): retry it later.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_run: bool,
}

/// What the tool-runner records about a ledgered operation (`<prefix>.operations.<id>`):
/// `running` before it starts the tool, `done` with the reply before it answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum OperationRecord {
    /// Started by the job's claim `attempt`.
    Running {
        #[serde(default)]
        attempt: i32,
    },
    Done {
        ok: bool,
        output: String,
    },
}

impl OperationRecord {
    /// Whether a request of claim `attempt` may run the operation whose latest record is
    /// `self`: never once it is done; again only for a later claim (a person said the run
    /// of an earlier claim did not happen). A repeat from the same claim, or one from an
    /// earlier claim that woke up after the job moved on, does not run it twice.
    pub fn admits(&self, attempt: i32) -> bool {
        match self {
            OperationRecord::Running { attempt: started } => attempt > *started,
            OperationRecord::Done { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn paths_go_in_urls_segment_by_segment() {
        assert_eq!(url_path("notes #1.md"), "notes%20%231.md");
        assert_eq!(url_path("dir/50%_off?.txt"), "dir/50%25_off%3F.txt");
        assert_eq!(url_path("résumé.txt"), "r%C3%A9sum%C3%A9.txt");
        assert_eq!(url_path("a-b_c.~d/e"), "a-b_c.~d/e");
    }

    use super::OperationRecord;

    #[test]
    fn an_operation_runs_again_only_for_a_later_claim_and_never_once_done() {
        let running = OperationRecord::Running { attempt: 2 };
        assert!(!running.admits(1), "an earlier claim that woke up late");
        assert!(!running.admits(2), "the same claim again");
        assert!(running.admits(3), "a later claim after a person's answer");
        let done = OperationRecord::Done {
            ok: true,
            output: "x".into(),
        };
        assert!(!done.admits(9));
        let old: OperationRecord = serde_json::from_str(r#"{"state":"running"}"#).expect("old");
        assert_eq!(old, OperationRecord::Running { attempt: 0 });
    }

    #[test]
    fn only_plain_registry_packages_pass() {
        assert!(check_package("pip", "six", Some("1.16.0")).is_ok());
        assert!(check_package("pip", "zope.interface", None).is_ok());
        assert!(check_package("npm", "@types/node", Some("20.1.0")).is_ok());
        assert!(check_package("npm", "is-number", None).is_ok());
        for (manager, name) in [
            ("pip", "--index-url=x"),
            ("pip", "./local"),
            ("pip", "evil.tar.gz"),
            ("pip", "a/b"),
            ("pip", "six; rm -rf /"),
            ("npm", "user/repo"),
            ("npm", "x.tgz"),
            ("npm", "@scope"),
            ("npm", "git+https://x"),
            ("apt", "six"),
        ] {
            assert!(
                check_package(manager, name, None).is_err(),
                "{manager} {name}"
            );
        }
        assert!(check_package("pip", "six", Some("-e .")).is_err());
        assert!(check_package("npm", "six", Some("http://x/y.tgz")).is_err());
    }

    #[test]
    fn the_arguments_hash_ignores_key_order_and_sees_every_value() {
        let a: Value = serde_json::from_str(r#"{"path":"a","content":"x"}"#).expect("json");
        let b: Value = serde_json::from_str(r#"{"content":"x","path":"a"}"#).expect("json");
        let c: Value = serde_json::from_str(r#"{"content":"y","path":"a"}"#).expect("json");
        assert_eq!(arguments_hash(&a), arguments_hash(&b));
        assert_ne!(arguments_hash(&a), arguments_hash(&c));
        assert_eq!(arguments_hash(&a).len(), 64);
    }

    use super::*;

    #[test]
    fn tool_definitions_render_to_identical_bytes_every_time() {
        let render = || {
            let tools: Vec<Value> = builtin_tools().iter().map(ToolSpec::to_openai).collect();
            serde_json::to_string(&tools).expect("json")
        };
        assert_eq!(render(), render());
        let names: Vec<String> = builtin_tools().into_iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            [
                "read_file",
                "write_file",
                "edit_file",
                "list_files",
                "glob",
                "grep",
                "shell",
                "http_fetch"
            ]
        );
        assert!(names.iter().all(|n| is_builtin(n)));
        for other in [
            DELEGATE,
            "complete",
            "ask",
            "mcp__tracker__list",
            "read",
            "",
        ] {
            assert!(!is_builtin(other), "{other}");
        }
    }

    proptest::proptest! {
        /// Whatever the model writes as arguments — truncated, invalid, not an object, huge,
        /// any characters — the answer is the object or an error the model reads, never a panic.
        #[test]
        fn any_argument_text_is_an_object_or_an_error(raw in "\\PC{0,300}|\\{\"[a-z]{1,5}\": ?\\PC{0,40}") {
            match parse_arguments(&raw) {
                Ok(value) => proptest::prop_assert!(value.is_object()),
                Err(why) => proptest::prop_assert!(why.starts_with("Error: arguments")),
            }
        }

        #[test]
        fn valid_objects_cut_short_are_errors(cut in 1usize..40) {
            let whole = r#"{"path": "notes/a.txt", "content": "hi\nthere"}"#;
            let cut = cut.min(whole.len() - 1);
            proptest::prop_assert!(parse_arguments(&whole[..cut]).is_err());
        }
    }
}

/// What the tool-runner is asked about a space's persistent workspace (`<prefix>.tools.git`,
/// request/reply; docs/spaces.md#persistent-workspaces).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum GitRequest {
    /// A job of the task starts: its worktree made, or what an earlier job left uncommitted
    /// committed on the branch and (`merge_main`: a job's first claim) `main` merged in.
    Prepare {
        space_id: crate::SpaceId,
        workspace_id: TaskId,
        #[serde(default)]
        merge_main: bool,
    },
    /// The job is over: its changes committed on the task's branch (not merged).
    Finish {
        space_id: crate::SpaceId,
        workspace_id: TaskId,
        job_id: JobId,
        job_no: i32,
        outcome: GitOutcome,
        /// The commit message's first line and body: the job's result or error.
        summary: String,
    },
    /// A job's success is committed: the task's branch merged into `main`.
    Merge {
        space_id: crate::SpaceId,
        workspace_id: TaskId,
    },
    /// The files on `main`.
    Files { space_id: crate::SpaceId },
    /// One file on `main` (base64 in the reply's `content`).
    File {
        space_id: crate::SpaceId,
        path: String,
        max_bytes: u64,
    },
    /// `main`'s commits, newest first.
    Commits {
        space_id: crate::SpaceId,
        limit: u32,
    },
}

/// How the job a [`GitRequest::Finish`] is for ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GitOutcome {
    Succeeded,
    Failed,
    Cancelled,
}

/// The tool-runner's answer to a [`GitRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitReply {
    /// Why it could not be done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `main`'s commit after a successful finish merged the job's changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The task's branch, where changes stay that are not merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Something a person should know (a merge that conflicted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<SpaceFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commits: Vec<SpaceCommit>,
    /// A file's bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// No such file.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
}

/// A file of a space's `main`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpaceFile {
    pub path: String,
    pub size: u64,
}

/// A commit of a space's `main`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpaceCommit {
    pub id: String,
    pub at: chrono::DateTime<chrono::Utc>,
    pub subject: String,
    /// The task and job that made it (none for the space's first commit, or a merge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<JobId>,
}
