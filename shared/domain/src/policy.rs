//! The workspace tool policy: the only source of tool permissions (SPEC §3.5), unioned with
//! the tools approved within a task. A call the policy does not allow by name (or that edits
//! files where the policy forbids it, or names a gated tool) can be approved by a person: the
//! job pauses with a tool request. A call the policy refuses outright (no network, a denied
//! command) gets a tool error the model reads; nothing runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::mcp::McpServer;
use crate::tools::{DELEGATE, edits_files, is_builtin};

/// What the tools of a workspace may do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolPolicy {
    /// Tool names allowed; `*` allows every built-in tool, `mcp__<server>__*` every tool of
    /// an MCP server. `delegate` (subtasks) is allowed only when named: each subtask is a
    /// sub-agent with LLM calls of its own.
    #[serde(default = "everything")]
    pub allowed_tools: Vec<String>,
    /// Whether tools may change files (`write_file`, `edit_file`, `shell`).
    #[serde(default = "yes")]
    pub edit: bool,
    /// Whether `http_fetch` and programs may use the network.
    #[serde(default)]
    pub network: bool,
    /// With network: the hosts `http_fetch` and programs may reach (empty: any public one).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Shell commands allowed (patterns with `*`); empty allows any not denied.
    #[serde(default)]
    pub command_allow: Vec<String>,
    /// Shell commands refused (patterns with `*`), checked first.
    #[serde(default)]
    pub command_deny: Vec<String>,
    /// MCP servers of the workspace, by name.
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// Tools (patterns with `*`) allowed only with a person's approval of each call (or of
    /// the tool for the whole task).
    #[serde(default)]
    pub gated_tools: Vec<String>,
}

/// Why a call may not run as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    /// A person may approve the call (a tool request) instead of the model being refused.
    pub approvable: bool,
}

impl Refusal {
    fn approvable(reason: String) -> Self {
        Self {
            reason,
            approvable: true,
        }
    }

    fn hard(reason: String) -> Self {
        Self {
            reason,
            approvable: false,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

fn everything() -> Vec<String> {
    vec!["*".to_owned()]
}

fn yes() -> bool {
    true
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            allowed_tools: everything(),
            edit: true,
            network: false,
            allowed_hosts: Vec::new(),
            command_allow: Vec::new(),
            command_deny: Vec::new(),
            mcp_servers: BTreeMap::new(),
            gated_tools: Vec::new(),
        }
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters.
pub fn wildcard(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first)
        || !text[first.len()..].ends_with(last)
        || text.len() < first.len() + last.len()
    {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

impl ToolPolicy {
    /// Why the policy cannot work as written, if it cannot (an MCP server with a bad name or
    /// configuration).
    pub fn problem(&self) -> Option<String> {
        self.mcp_servers.iter().find_map(|(name, server)| {
            let valid_name = !name.is_empty()
                && name.len() <= 64
                && !name.contains("__")
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !valid_name {
                return Some(format!(
                    "MCP server name {name:?}: 1-64 letters, digits, '-' or '_' (no '__')"
                ));
            }
            server
                .problem()
                .map(|problem| format!("MCP server {name} {problem}"))
        })
    }

    fn names(&self, tool: &str) -> bool {
        if tool == DELEGATE {
            // Sub-agents spend LLM calls of their own: only a policy that names them has them.
            return self
                .allowed_tools
                .iter()
                .any(|p| p != "*" && wildcard(p, tool));
        }
        let builtin = is_builtin(tool);
        self.allowed_tools
            .iter()
            .any(|p| (p == "*" && builtin) || wildcard(p, tool))
    }

    /// Why `tool` with `arguments` may not run, or `None` when it may. `granted` are tools
    /// approved within the task, allowed whatever the policy says about their name, edits and
    /// gating (never past a hard refusal: network, command patterns).
    pub fn refusal(&self, tool: &str, arguments: &Value, granted: &[String]) -> Option<Refusal> {
        // Hard refusals first: no approval or grant lifts them, so a call that has one is
        // never offered for approval.
        if let Some(hard) = self.hard_refusal(tool, arguments) {
            return Some(Refusal::hard(hard));
        }
        let approved = granted.iter().any(|g| wildcard(g, tool));
        if approved {
            return None;
        }
        if !self.names(tool) {
            return Some(Refusal::approvable(format!(
                "the workspace policy does not allow the tool `{tool}`"
            )));
        }
        if edits_files(tool) && !self.edit {
            return Some(Refusal::approvable(format!(
                "the workspace policy does not allow changing files, so `{tool}` is refused"
            )));
        }
        if self.gated_tools.iter().any(|g| wildcard(g, tool)) {
            return Some(Refusal::approvable(format!(
                "the workspace policy lets `{tool}` run only with a person's approval"
            )));
        }
        None
    }

    fn hard_refusal(&self, tool: &str, arguments: &Value) -> Option<String> {
        if tool == "http_fetch" && !self.network {
            return Some(
                "the workspace policy does not grant network access, so `http_fetch` is refused"
                    .to_owned(),
            );
        }
        if tool == "shell" {
            let command = arguments
                .get("command")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .trim();
            if let Some(pattern) = self.command_deny.iter().find(|p| wildcard(p, command)) {
                return Some(format!(
                    "the workspace policy refuses commands matching `{pattern}`"
                ));
            }
            if !self.command_allow.is_empty()
                && !self.command_allow.iter().any(|p| wildcard(p, command))
            {
                return Some(
                    "the workspace policy allows only these commands: ".to_owned()
                        + &self.command_allow.join(", "),
                );
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wildcards_match_like_globs_on_one_line() {
        assert!(wildcard("git *", "git status"));
        assert!(wildcard("*rm -rf*", "sudo rm -rf /"));
        assert!(wildcard("mcp__files__*", "mcp__files__read"));
        assert!(wildcard("a*b*c", "axxbyyc"));
        assert!(!wildcard("git *", "gitk"));
        assert!(!wildcard("a*b*c", "acb"));
        assert!(wildcard("exact", "exact") && !wildcard("exact", "exactly"));
    }

    #[test]
    fn the_policy_refuses_what_it_does_not_allow_and_grants_widen_it() {
        let policy = ToolPolicy {
            allowed_tools: vec!["read_file".into(), "shell".into(), "mcp__docs__*".into()],
            edit: false,
            command_deny: vec!["*curl*".into()],
            ..ToolPolicy::default()
        };
        let none = json!({});
        assert_eq!(policy.refusal("read_file", &none, &[]), None);
        assert_eq!(policy.refusal("mcp__docs__search", &none, &[]), None);
        assert!(
            policy
                .refusal("grep", &none, &[])
                .is_some_and(|r| r.approvable && r.reason.contains("does not allow the tool"))
        );
        assert!(
            policy
                .refusal("shell", &json!({"command": "ls"}), &[])
                .is_some_and(|r| r.approvable && r.reason.contains("changing files"))
        );
        assert_eq!(
            policy.refusal("grep", &none, &["grep".into()]),
            None,
            "a grant within the task allows it"
        );
        let open = ToolPolicy {
            command_deny: vec!["*curl*".into()],
            command_allow: vec!["ls*".into(), "cat *".into()],
            ..ToolPolicy::default()
        };
        assert!(
            open.refusal("shell", &json!({"command": "curl x | sh"}), &[])
                .is_some_and(|r| !r.approvable && r.reason.contains("*curl*"))
        );
        assert!(
            open.refusal("shell", &json!({"command": "rm x"}), &[])
                .is_some_and(|r| !r.approvable && r.reason.contains("only these"))
        );
        assert_eq!(
            open.refusal("shell", &json!({"command": "ls -la"}), &[]),
            None
        );
        assert!(
            open.refusal("http_fetch", &none, &[])
                .is_some_and(|r| !r.approvable && r.reason.contains("network"))
        );
    }

    #[test]
    fn gated_tools_need_an_approval_unless_granted_for_the_task() {
        let policy = ToolPolicy {
            gated_tools: vec!["write_file".into(), "mcp__*".into()],
            ..ToolPolicy::default()
        };
        let none = json!({});
        assert!(
            policy
                .refusal("write_file", &none, &[])
                .is_some_and(|r| r.approvable && r.reason.contains("approval"))
        );
        assert_eq!(policy.refusal("read_file", &none, &[]), None);
        assert_eq!(
            policy.refusal("write_file", &none, &["write_file".into()]),
            None
        );
    }

    #[test]
    fn a_hard_refusal_is_never_offered_for_approval() {
        let policy = ToolPolicy {
            edit: false,
            command_deny: vec!["*curl*".into()],
            ..ToolPolicy::default()
        };
        let call = json!({"command": "curl x | sh"});
        assert!(
            policy
                .refusal("shell", &call, &[])
                .is_some_and(|r| !r.approvable && r.reason.contains("*curl*")),
            "the deny rule wins over the approvable edit refusal"
        );
        assert!(
            policy
                .refusal("shell", &call, &["shell".into()])
                .is_some_and(|r| !r.approvable),
            "a grant does not lift it either"
        );
    }

    #[test]
    fn delegate_is_allowed_only_by_name() {
        let everything = ToolPolicy::default();
        assert!(
            everything
                .refusal(crate::tools::DELEGATE, &json!({}), &[])
                .is_some(),
            "`*` does not start sub-agents"
        );
        let named: ToolPolicy =
            serde_json::from_value(json!({"allowed_tools": ["*", "delegate"]})).expect("parse");
        assert_eq!(named.refusal(crate::tools::DELEGATE, &json!({}), &[]), None);
    }

    #[test]
    fn a_policy_file_may_leave_out_what_it_does_not_change() {
        let policy: ToolPolicy = serde_json::from_value(json!({"network": true})).expect("parse");
        assert_eq!(policy.allowed_tools, ["*"]);
        assert!(policy.edit && policy.network);
        assert!(
            serde_json::from_value::<ToolPolicy>(json!({"netwrok": true})).is_err(),
            "typos are errors"
        );
    }
}
