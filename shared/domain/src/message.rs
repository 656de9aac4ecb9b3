//! Conversation messages, shaped exactly like OpenAI chat-completions messages so the LLM
//! client sends them without translation and the transcript stores what the model saw.

use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Message {
    pub role: Role,
    /// Text. `None` for an assistant message that only calls tools.
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `role = tool`: the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Self::text(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::text(Role::User, content)
    }

    pub fn assistant(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            role: Role::Assistant,
            content,
            tool_calls,
            tool_call_id: None,
        }
    }

    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }

    fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool call proposed by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionCall,
}

/// The function part of a [`ToolCall`]; `arguments` is the model's raw JSON text, which may
/// be invalid and is validated by whoever executes the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

fn function_kind() -> String {
    "function".to_owned()
}

impl ToolCall {
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            kind: function_kind(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }

    pub fn name(&self) -> &str {
        &self.function.name
    }
}

/// Token accounting of one LLM call, normalized from the server's `usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `usage.prompt_tokens_details.cached_tokens`: prompt tokens served from the cache.
    pub cached_prompt_tokens: u64,
}

impl Usage {
    /// Share of the prompt served from the cache, in percent (0 when the prompt is empty).
    pub fn cache_pct(&self) -> f64 {
        if self.prompt_tokens == 0 {
            0.0
        } else {
            self.cached_prompt_tokens as f64 * 100.0 / self.prompt_tokens as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_serialize_in_the_openai_shape() {
        let call = ToolCall::new("call_1", "read_file", r#"{"path":"a"}"#);
        let json = serde_json::to_value(Message::assistant(None, vec![call])).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{"id": "call_1", "type": "function",
                                "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}]
            })
        );
        let tool = serde_json::to_value(Message::tool("call_1", "ok")).expect("json");
        assert_eq!(
            tool,
            serde_json::json!({"role": "tool", "content": "ok", "tool_call_id": "call_1"})
        );
    }

    #[test]
    fn cache_share_is_a_percentage() {
        let usage = Usage {
            prompt_tokens: 200,
            completion_tokens: 5,
            cached_prompt_tokens: 190,
        };
        assert!((usage.cache_pct() - 95.0).abs() < f64::EPSILON);
        assert_eq!(Usage::default().cache_pct(), 0.0);
    }
}
