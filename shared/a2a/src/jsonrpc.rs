//! JSON-RPC 2.0 envelopes of the A2A JSON-RPC binding, and the method names of 1.0 and 0.3.

use serde_json::{Value, json};

use crate::error::{A2aError, ErrorKind};

/// An A2A operation, whatever the binding or version that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    CreatePushConfig,
    GetPushConfig,
    ListPushConfigs,
    DeletePushConfig,
    GetExtendedAgentCard,
}

/// Which protocol version a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    V1,
    V03,
}

impl Method {
    /// The method a JSON-RPC method name names: the 1.0 names, and the 0.3 ones.
    pub fn parse(name: &str) -> Option<(Method, Dialect)> {
        use Method::*;
        let v1 = match name {
            "SendMessage" => Some(SendMessage),
            "SendStreamingMessage" => Some(SendStreamingMessage),
            "GetTask" => Some(GetTask),
            "ListTasks" => Some(ListTasks),
            "CancelTask" => Some(CancelTask),
            "SubscribeToTask" => Some(SubscribeToTask),
            "CreateTaskPushNotificationConfig" => Some(CreatePushConfig),
            "GetTaskPushNotificationConfig" => Some(GetPushConfig),
            "ListTaskPushNotificationConfigs" => Some(ListPushConfigs),
            "DeleteTaskPushNotificationConfig" => Some(DeletePushConfig),
            "GetExtendedAgentCard" => Some(GetExtendedAgentCard),
            _ => None,
        };
        if let Some(method) = v1 {
            return Some((method, Dialect::V1));
        }
        let v03 = match name {
            "message/send" => SendMessage,
            "message/stream" => SendStreamingMessage,
            "tasks/get" => GetTask,
            "tasks/cancel" => CancelTask,
            "tasks/resubscribe" => SubscribeToTask,
            "tasks/pushNotificationConfig/set" => CreatePushConfig,
            "tasks/pushNotificationConfig/get" => GetPushConfig,
            "tasks/pushNotificationConfig/list" => ListPushConfigs,
            "tasks/pushNotificationConfig/delete" => DeletePushConfig,
            "agent/getAuthenticatedExtendedCard" => GetExtendedAgentCard,
            _ => return None,
        };
        Some((v03, Dialect::V03))
    }

    /// Whether the answer is a stream of events.
    pub fn is_streaming(self) -> bool {
        matches!(self, Method::SendStreamingMessage | Method::SubscribeToTask)
    }
}

/// A JSON-RPC request, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: Value,
    pub method: String,
    pub params: Value,
}

/// Read a JSON-RPC request body. A refusal carries the id to answer with (`null` when the
/// body could not be read as a request).
pub fn parse(body: &[u8]) -> Result<Request, (Value, A2aError)> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        let error = A2aError::new(ErrorKind::Parse, format!("Invalid JSON payload: {e}"));
        (Value::Null, error)
    })?;
    let invalid =
        |id: Value, message: &str| (id, A2aError::new(ErrorKind::InvalidRequest, message));
    if value.is_array() {
        return Err(invalid(Value::Null, "Batch requests are not supported"));
    }
    let Value::Object(mut object) = value else {
        return Err(invalid(Value::Null, "A request is a JSON object"));
    };
    let id = object.remove("id").unwrap_or(Value::Null);
    if !matches!(id, Value::Null | Value::String(_) | Value::Number(_)) {
        return Err(invalid(Value::Null, "`id` is a string, a number or null"));
    }
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(invalid(id, "`jsonrpc` must be \"2.0\""));
    }
    let Some(Value::String(method)) = object.remove("method") else {
        return Err(invalid(id, "`method` must be a string"));
    };
    let params = match object.remove("params") {
        None | Some(Value::Null) => json!({}),
        Some(params @ Value::Object(_)) => params,
        Some(_) => {
            let error = A2aError::invalid_params("`params` must be an object");
            return Err((id, error));
        }
    };
    Ok(Request { id, method, params })
}

/// A success answer.
pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error answer, shaped for the request's dialect.
pub fn error(id: &Value, error: &A2aError, dialect: Dialect) -> Value {
    let error = match dialect {
        Dialect::V1 => error.to_jsonrpc(),
        Dialect::V03 => error.to_jsonrpc_v03(),
    };
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked_and_refusals_keep_the_id_they_can() {
        let ok = parse(br#"{"jsonrpc":"2.0","id":7,"method":"GetTask","params":{"id":"t"}}"#)
            .expect("valid");
        assert_eq!((ok.id, ok.method.as_str()), (json!(7), "GetTask"));
        let cases: [(&[u8], Value, i32); 6] = [
            (b"{not json", Value::Null, -32700),
            (b"[]", Value::Null, -32600),
            (
                br#"{"jsonrpc":"1.0","id":"a","method":"GetTask"}"#,
                json!("a"),
                -32600,
            ),
            (
                br#"{"jsonrpc":"2.0","id":true,"method":"GetTask"}"#,
                Value::Null,
                -32600,
            ),
            (br#"{"jsonrpc":"2.0","id":1,"method":5}"#, json!(1), -32600),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}"#,
                json!(1),
                -32602,
            ),
        ];
        for (body, id, code) in cases {
            let (got, error) = parse(body).expect_err("refused");
            assert_eq!(
                (got, error.kind.code()),
                (id, code),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn both_versions_name_the_same_methods() {
        assert_eq!(
            Method::parse("SendMessage"),
            Some((Method::SendMessage, Dialect::V1))
        );
        assert_eq!(
            Method::parse("message/send"),
            Some((Method::SendMessage, Dialect::V03))
        );
        assert_eq!(
            Method::parse("tasks/resubscribe"),
            Some((Method::SubscribeToTask, Dialect::V03))
        );
        assert_eq!(Method::parse("tasks/list"), None);
    }
}
