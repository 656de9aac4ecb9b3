//! The A2A errors (spec §5.4): one value, three renderings — a JSON-RPC error object (`code`,
//! `message`, `data: [ErrorInfo]`), an HTTP+JSON error body (AIP-193: `{"error": {code,
//! status, message, details}}` with the HTTP status as `code`), and the 0.3 JSON-RPC shape
//! (`data: null`).

use serde_json::{Value, json};

/// The kinds of failure the protocol names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Parse,
    InvalidRequest,
    MethodNotFound,
    InvalidParams,
    Internal,
    TaskNotFound,
    TaskNotCancelable,
    PushNotificationNotSupported,
    UnsupportedOperation,
    ContentTypeNotSupported,
    InvalidAgentResponse,
    ExtendedAgentCardNotConfigured,
    ExtensionSupportRequired,
    VersionNotSupported,
}

impl ErrorKind {
    /// The JSON-RPC error code.
    pub fn code(self) -> i32 {
        match self {
            ErrorKind::Parse => -32700,
            ErrorKind::InvalidRequest => -32600,
            ErrorKind::MethodNotFound => -32601,
            ErrorKind::InvalidParams => -32602,
            ErrorKind::Internal => -32603,
            ErrorKind::TaskNotFound => -32001,
            ErrorKind::TaskNotCancelable => -32002,
            ErrorKind::PushNotificationNotSupported => -32003,
            ErrorKind::UnsupportedOperation => -32004,
            ErrorKind::ContentTypeNotSupported => -32005,
            ErrorKind::InvalidAgentResponse => -32006,
            ErrorKind::ExtendedAgentCardNotConfigured => -32007,
            ErrorKind::ExtensionSupportRequired => -32008,
            ErrorKind::VersionNotSupported => -32009,
        }
    }

    /// The `google.rpc.ErrorInfo` reason.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::Parse | ErrorKind::InvalidRequest => "INVALID_REQUEST",
            ErrorKind::MethodNotFound => "METHOD_NOT_FOUND",
            ErrorKind::InvalidParams => "INVALID_PARAMS",
            ErrorKind::Internal => "INTERNAL_ERROR",
            ErrorKind::TaskNotFound => "TASK_NOT_FOUND",
            ErrorKind::TaskNotCancelable => "TASK_NOT_CANCELABLE",
            ErrorKind::PushNotificationNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ErrorKind::UnsupportedOperation => "UNSUPPORTED_OPERATION",
            ErrorKind::ContentTypeNotSupported => "CONTENT_TYPE_NOT_SUPPORTED",
            ErrorKind::InvalidAgentResponse => "INVALID_AGENT_RESPONSE",
            ErrorKind::ExtendedAgentCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            ErrorKind::ExtensionSupportRequired => "EXTENSION_SUPPORT_REQUIRED",
            ErrorKind::VersionNotSupported => "VERSION_NOT_SUPPORTED",
        }
    }

    /// The HTTP status of the HTTP+JSON binding (as the official SDKs answer for 1.0).
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::MethodNotFound | ErrorKind::TaskNotFound => 404,
            ErrorKind::Internal | ErrorKind::InvalidAgentResponse => 500,
            _ => 400,
        }
    }

    /// The gRPC code name that goes with the HTTP status.
    fn status_name(self) -> &'static str {
        match self {
            ErrorKind::Parse | ErrorKind::InvalidRequest | ErrorKind::InvalidParams => {
                "INVALID_ARGUMENT"
            }
            ErrorKind::ContentTypeNotSupported => "INVALID_ARGUMENT",
            ErrorKind::MethodNotFound | ErrorKind::TaskNotFound => "NOT_FOUND",
            ErrorKind::Internal | ErrorKind::InvalidAgentResponse => "INTERNAL",
            _ => "FAILED_PRECONDITION",
        }
    }
}

/// An A2A error: its kind and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct A2aError {
    pub kind: ErrorKind,
    pub message: String,
}

impl A2aError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn task_not_found() -> Self {
        Self::new(ErrorKind::TaskNotFound, "Task not found")
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidParams, message)
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::UnsupportedOperation, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    fn error_info(&self) -> Value {
        json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": self.kind.reason(),
            "domain": "a2a-protocol.org",
            "metadata": {},
        })
    }

    /// The JSON-RPC `error` object (1.0): plain JSON-RPC errors carry no `data`.
    pub fn to_jsonrpc(&self) -> Value {
        let plain = matches!(self.kind, ErrorKind::Parse | ErrorKind::MethodNotFound);
        let mut error = json!({"code": self.kind.code(), "message": self.message});
        if !plain {
            error["data"] = json!([self.error_info()]);
        }
        error
    }

    /// The JSON-RPC `error` object as 0.3 clients read it.
    pub fn to_jsonrpc_v03(&self) -> Value {
        json!({"code": self.kind.code(), "message": self.message, "data": null})
    }

    /// The HTTP+JSON error body (AIP-193), whose `code` is the HTTP status.
    pub fn to_rest(&self) -> Value {
        json!({"error": {
            "code": self.kind.http_status(),
            "status": self.kind.status_name(),
            "message": self.message,
            "details": [self.error_info()],
        }})
    }
}

impl std::fmt::Display for A2aError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.kind.code())
    }
}

impl std::error::Error for A2aError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rendering_names_the_same_error() {
        let error = A2aError::task_not_found();
        let rpc = error.to_jsonrpc();
        assert_eq!(rpc["code"], -32001);
        assert_eq!(rpc["data"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(rpc["data"][0]["domain"], "a2a-protocol.org");
        let rest = error.to_rest();
        assert_eq!(rest["error"]["code"], 404, "the HTTP status");
        assert_eq!(rest["error"]["status"], "NOT_FOUND");
        assert_eq!(rest["error"]["details"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(error.to_jsonrpc_v03()["data"], Value::Null);
        let plain = A2aError::new(ErrorKind::MethodNotFound, "no such method").to_jsonrpc();
        assert!(
            plain.get("data").is_none(),
            "plain JSON-RPC errors carry no data"
        );
    }
}
