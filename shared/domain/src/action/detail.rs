//! What an item is about, by kind: stored as its `detail`, shown flat beside its state.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::TaskId;
use crate::job::WaitReason;

/// A package a `request_package` call asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    pub name: String,
    pub manager: String,
    #[serde(default)]
    pub version: Option<String>,
}

/// What an item is about, by kind (stored as the item's `detail`, and shown flat in it).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ActionDetail {
    /// A call the policy refuses in a way a person may lift.
    ToolRequest {
        tool: String,
        arguments: Value,
        arguments_hash: String,
        reason: String,
    },
    PackageRequest {
        package: Package,
        reason: String,
        arguments_hash: String,
    },
    Ask {
        question: String,
    },
    /// A token the owner supplies, or (a remote server that answered 401) an OAuth login at
    /// `login_url` (the gateway's `/api/local/mcp/logins/{id}`); `login_error` says why the
    /// last attempt failed (refused, expired).
    McpAuthRequired {
        server: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        login_url: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        login_error: Option<String>,
    },
    /// A ledgered call started before a crash, whose outcome nobody knows.
    SideEffectUnknown {
        operation_id: String,
        tool: String,
        arguments: Value,
    },
    Subtask {
        subtask_id: TaskId,
        instruction: String,
        piece: String,
    },
}

/// The wire forms of [`ActionDetail`]'s variants, to parse a stored detail by its kind.
mod stored {
    use super::*;

    #[derive(Deserialize)]
    pub struct ToolRequest {
        pub tool: String,
        pub arguments: Value,
        pub arguments_hash: String,
        #[serde(default)]
        pub reason: String,
    }
    #[derive(Deserialize)]
    pub struct PackageRequest {
        pub package: Package,
        #[serde(default)]
        pub reason: String,
        pub arguments_hash: String,
    }
    #[derive(Deserialize)]
    pub struct Ask {
        pub question: String,
    }
    #[derive(Deserialize)]
    pub struct McpAuth {
        pub server: String,
        #[serde(default)]
        pub login_url: Option<String>,
        #[serde(default)]
        pub login_error: Option<String>,
    }
    #[derive(Deserialize)]
    pub struct SideEffect {
        pub operation_id: String,
        pub tool: String,
        pub arguments: Value,
    }
    #[derive(Deserialize)]
    pub struct Subtask {
        pub subtask_id: TaskId,
        pub instruction: String,
        pub piece: String,
    }
}

/// A stored detail that does not fit its kind.
#[derive(Debug, thiserror::Error)]
#[error("the detail of a {kind} item is not readable: {reason}")]
pub struct BadDetail {
    pub kind: WaitReason,
    pub reason: String,
}

impl ActionDetail {
    /// The kind of item this detail belongs to.
    pub fn kind(&self) -> WaitReason {
        match self {
            ActionDetail::ToolRequest { .. } => WaitReason::ToolRequest,
            ActionDetail::PackageRequest { .. } => WaitReason::PackageRequest,
            ActionDetail::Ask { .. } => WaitReason::Ask,
            ActionDetail::McpAuthRequired { .. } => WaitReason::McpAuthRequired,
            ActionDetail::SideEffectUnknown { .. } => WaitReason::SideEffectUnknown,
            ActionDetail::Subtask { .. } => WaitReason::Subtask,
        }
    }

    /// Read a stored detail of an item of `kind`.
    pub fn parse(kind: WaitReason, value: Value) -> Result<Self, BadDetail> {
        let bad = |e: serde_json::Error| BadDetail {
            kind,
            reason: e.to_string(),
        };
        Ok(match kind {
            WaitReason::ToolRequest => {
                let d: stored::ToolRequest = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::ToolRequest {
                    tool: d.tool,
                    arguments: d.arguments,
                    arguments_hash: d.arguments_hash,
                    reason: d.reason,
                }
            }
            WaitReason::PackageRequest => {
                let d: stored::PackageRequest = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::PackageRequest {
                    package: d.package,
                    reason: d.reason,
                    arguments_hash: d.arguments_hash,
                }
            }
            WaitReason::Ask => {
                let d: stored::Ask = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::Ask {
                    question: d.question,
                }
            }
            WaitReason::McpAuthRequired => {
                let d: stored::McpAuth = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::McpAuthRequired {
                    server: d.server,
                    login_url: d.login_url,
                    login_error: d.login_error,
                }
            }
            WaitReason::SideEffectUnknown => {
                let d: stored::SideEffect = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::SideEffectUnknown {
                    operation_id: d.operation_id,
                    tool: d.tool,
                    arguments: d.arguments,
                }
            }
            WaitReason::Subtask => {
                let d: stored::Subtask = serde_json::from_value(value).map_err(bad)?;
                ActionDetail::Subtask {
                    subtask_id: d.subtask_id,
                    instruction: d.instruction,
                    piece: d.piece,
                }
            }
            WaitReason::Browser => {
                return Err(BadDetail {
                    kind,
                    reason: "browser items are not recorded".to_owned(),
                });
            }
        })
    }

    /// The JSON stored in the `detail` column.
    /// As stored (a NUL in the model's arguments becomes U+FFFD, `crate::storable`).
    pub fn to_value(&self) -> Value {
        // Plain data: serializing it cannot fail.
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        crate::storable::json(&mut value);
        value
    }

    /// The hash of the arguments a reviewer approves (tool and package requests).
    pub fn arguments_hash(&self) -> Option<&str> {
        match self {
            ActionDetail::ToolRequest { arguments_hash, .. }
            | ActionDetail::PackageRequest { arguments_hash, .. } => Some(arguments_hash),
            _ => None,
        }
    }

    /// The child task a `subtask` item waits for.
    pub fn subtask(&self) -> Option<TaskId> {
        match self {
            ActionDetail::Subtask { subtask_id, .. } => Some(*subtask_id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn details_are_read_by_kind_and_shown_flat() {
        let tool = json!({"tool": "write_file", "arguments": {"path": "a"}, "arguments_hash": "h", "reason": "r"});
        let detail = ActionDetail::parse(WaitReason::ToolRequest, tool.clone()).expect("tool");
        assert_eq!(detail.kind(), WaitReason::ToolRequest);
        assert_eq!(detail.to_value(), tool, "stored as it came");
        assert_eq!(detail.arguments_hash(), Some("h"));
        let child = TaskId::new();
        let subtask = json!({"subtask_id": child, "instruction": "i", "piece": "chat"});
        let detail = ActionDetail::parse(WaitReason::Subtask, subtask).expect("subtask");
        assert_eq!(detail.subtask(), Some(child));
        assert!(ActionDetail::parse(WaitReason::Ask, json!({"server": "x"})).is_err());
        assert!(ActionDetail::parse(WaitReason::Browser, json!({})).is_err());
    }
}
