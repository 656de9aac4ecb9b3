//! A2A 0.3 on the wire, for clients that still speak it (the 0.3 JSON-RPC method names, no
//! `A2A-Version` header): requests are rewritten into 1.0 JSON before they are read, answers
//! are rewritten from 1.0 JSON after they are written. The shapes (0.3 spec §6–7):
//!
//! - objects carry `kind` (`task`, `message`, `status-update`, `artifact-update`);
//! - states and roles are lowercase (`input-required`, `user`);
//! - a part is `{kind: text, text}`, `{kind: data, data}` or `{kind: file, file: {bytes | uri,
//!   mimeType, name}}`;
//! - a status update says whether it is `final`;
//! - `message/send` answers with the task or message itself, not wrapped;
//! - a push config is `{taskId, pushNotificationConfig: {id, url, token, authentication:
//!   {schemes, credentials}}}`, and the get/list/delete params name the task `id` and the
//!   config `pushNotificationConfigId`.

use serde_json::{Map, Value, json};

use crate::jsonrpc::Method;
use crate::types::TaskState;

/// A 0.3 request's params, as 1.0 reads them (parts, roles and push configs rewritten; the
/// rest is shared).
pub fn params_from_v03(method: Method, mut params: Value) -> Value {
    match method {
        Method::CreatePushConfig => {
            let task_id = params.get("taskId").cloned().unwrap_or(Value::Null);
            let mut config = push_config_from_v03(&params["pushNotificationConfig"]);
            config["taskId"] = task_id;
            config
        }
        Method::GetPushConfig | Method::DeletePushConfig | Method::ListPushConfigs => {
            let task_id = params.get("id").cloned().unwrap_or(Value::Null);
            // 0.3 without a config id means the task's default config, whose id is the task's.
            let id = params
                .get("pushNotificationConfigId")
                .cloned()
                .unwrap_or_else(|| task_id.clone());
            json!({"taskId": task_id, "id": id})
        }
        _ => {
            if let Some(message) = params.get_mut("message") {
                message_from_v03(message);
            }
            let push = params
                .get("configuration")
                .and_then(|c| c.get("pushNotificationConfig"))
                .map(push_config_from_v03);
            if let Some(push) = push {
                params["configuration"]["pushNotificationConfig"] = push;
            }
            params
        }
    }
}

/// A 0.3 `PushNotificationConfig` as a 1.0 `TaskPushNotificationConfig` (without its task).
fn push_config_from_v03(config: &Value) -> Value {
    let mut out = config.clone();
    if let Some(auth) = config.get("authentication") {
        let scheme = auth["schemes"].get(0).cloned().unwrap_or(Value::Null);
        out["authentication"] = json!({"scheme": scheme, "credentials": auth["credentials"]});
    }
    out
}

/// A 1.0 `TaskPushNotificationConfig` (JSON) as 0.3 shows it.
pub fn push_config_to_v03(config: &Value) -> Value {
    let mut inner = Map::new();
    for key in ["id", "url", "token"] {
        if let Some(value) = config.get(key) {
            inner.insert(key.to_owned(), value.clone());
        }
    }
    if let Some(auth) = config.get("authentication") {
        let mut auth03 = json!({"schemes": [auth["scheme"]]});
        if let Some(credentials) = auth.get("credentials") {
            auth03["credentials"] = credentials.clone();
        }
        inner.insert("authentication".to_owned(), auth03);
    }
    json!({"taskId": config["taskId"], "pushNotificationConfig": inner})
}

fn message_from_v03(message: &mut Value) {
    if let Some(Value::Array(parts)) = message.get_mut("parts") {
        for part in parts {
            part_from_v03(part);
        }
    }
    if let Some(object) = message.as_object_mut() {
        object.remove("kind");
    }
}

fn part_from_v03(part: &mut Value) {
    let Some(object) = part.as_object_mut() else {
        return;
    };
    let kind = object.remove("kind");
    if kind.as_ref().and_then(Value::as_str) != Some("file") {
        return;
    }
    let Some(Value::Object(file)) = object.remove("file") else {
        return;
    };
    for (from, to) in [
        ("bytes", "raw"),
        ("uri", "url"),
        ("mimeType", "mediaType"),
        ("name", "filename"),
    ] {
        if let Some(value) = file.get(from) {
            object.insert(to.to_owned(), value.clone());
        }
    }
}

/// A 1.0 agent card (JSON) with the fields a 0.3 client reads merged in: `url` (the JSON-RPC
/// endpoint), `preferredTransport`, `protocolVersion`, `security`, each security scheme's
/// flattened 0.3 form, `supportsAuthenticatedExtendedCard` (1.0 clients ignore them).
pub fn card_with_v03(card: &Value, jsonrpc_url: &str) -> Value {
    let mut out = card.clone();
    let Some(object) = out.as_object_mut() else {
        return out;
    };
    object.insert("url".to_owned(), json!(jsonrpc_url));
    object.insert("preferredTransport".to_owned(), json!("JSONRPC"));
    object.insert("protocolVersion".to_owned(), json!("0.3.0"));
    let extended = card["capabilities"]["extendedAgentCard"] == true;
    object.insert(
        "supportsAuthenticatedExtendedCard".to_owned(),
        json!(extended),
    );
    let mut security = Vec::new();
    if let Some(Value::Object(schemes)) = object.get_mut("securitySchemes") {
        for (name, scheme) in schemes.iter_mut() {
            if let Some(http) = scheme.get("httpAuthSecurityScheme").cloned() {
                scheme["type"] = json!("http");
                scheme["scheme"] = http["scheme"].clone();
            }
            security.push(json!({name.clone(): []}));
        }
    }
    object.insert("security".to_owned(), Value::Array(security));
    out
}

/// A 1.0 `SendMessageResponse` or `StreamResponse` (JSON) as a 0.3 client reads it.
pub fn result_to_v03(result: &Value) -> Value {
    let Some((key, inner)) = result.as_object().and_then(|o| o.iter().next()) else {
        return result.clone();
    };
    match key.as_str() {
        "task" => task_to_v03(inner),
        "message" => message_to_v03(inner),
        "statusUpdate" => status_update_to_v03(inner),
        "artifactUpdate" => artifact_update_to_v03(inner),
        _ => result.clone(),
    }
}

/// A 1.0 `Task` (JSON) as 0.3 shows it.
pub fn task_to_v03(task: &Value) -> Value {
    let mut out = task.clone();
    let object = out.as_object_mut().expect("a task is an object");
    object.insert("kind".to_owned(), json!("task"));
    if let Some(status) = object.get_mut("status") {
        status_to_v03(status);
    }
    if let Some(Value::Array(history)) = object.get_mut("history") {
        for message in history.iter_mut() {
            *message = message_to_v03(message);
        }
    }
    if let Some(Value::Array(artifacts)) = object.get_mut("artifacts") {
        for artifact in artifacts.iter_mut() {
            artifact_to_v03(artifact);
        }
    }
    out
}

fn status_to_v03(status: &mut Value) {
    if let Some(state) = status.get("state").and_then(Value::as_str)
        && let Some(parsed) = TaskState::parse(state)
    {
        status["state"] = json!(parsed.v03_name());
    }
    if let Some(message) = status.get("message") {
        status["message"] = message_to_v03(message);
    }
}

/// A 1.0 `Message` (JSON) as 0.3 shows it.
pub fn message_to_v03(message: &Value) -> Value {
    let mut out = message.clone();
    let Some(object) = out.as_object_mut() else {
        return out;
    };
    object.insert("kind".to_owned(), json!("message"));
    let role = match object.get("role").and_then(Value::as_str) {
        Some("ROLE_AGENT") => "agent",
        _ => "user",
    };
    object.insert("role".to_owned(), json!(role));
    if let Some(Value::Array(parts)) = object.get_mut("parts") {
        for part in parts.iter_mut() {
            *part = part_to_v03(part);
        }
    }
    out
}

fn part_to_v03(part: &Value) -> Value {
    let get = |key: &str| part.get(key).cloned();
    let mut out = Map::new();
    if let Some(text) = get("text") {
        out.insert("kind".to_owned(), json!("text"));
        out.insert("text".to_owned(), text);
    } else if let Some(data) = get("data") {
        out.insert("kind".to_owned(), json!("data"));
        out.insert("data".to_owned(), data);
    } else {
        let mut file = Map::new();
        for (from, to) in [
            ("raw", "bytes"),
            ("url", "uri"),
            ("mediaType", "mimeType"),
            ("filename", "name"),
        ] {
            if let Some(value) = get(from) {
                file.insert(to.to_owned(), value);
            }
        }
        out.insert("kind".to_owned(), json!("file"));
        out.insert("file".to_owned(), Value::Object(file));
    }
    if let Some(metadata) = get("metadata") {
        out.insert("metadata".to_owned(), metadata);
    }
    Value::Object(out)
}

fn artifact_to_v03(artifact: &mut Value) {
    if let Some(Value::Array(parts)) = artifact.get_mut("parts") {
        for part in parts.iter_mut() {
            *part = part_to_v03(part);
        }
    }
}

fn status_update_to_v03(update: &Value) -> Value {
    let mut out = update.clone();
    let state = update["status"]["state"]
        .as_str()
        .and_then(TaskState::parse);
    let object = out.as_object_mut().expect("an update is an object");
    object.insert("kind".to_owned(), json!("status-update"));
    object.insert(
        "final".to_owned(),
        json!(state.is_some_and(TaskState::is_interrupted)),
    );
    if let Some(status) = object.get_mut("status") {
        status_to_v03(status);
    }
    out
}

fn artifact_update_to_v03(update: &Value) -> Value {
    let mut out = update.clone();
    let object = out.as_object_mut().expect("an update is an object");
    object.insert("kind".to_owned(), json!("artifact-update"));
    if let Some(artifact) = object.get_mut("artifact") {
        artifact_to_v03(artifact);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_come_in_as_1_0_and_answers_go_out_as_0_3() {
        let params = params_from_v03(
            Method::SendMessage,
            json!({"message": {"kind": "message", "messageId": "m", "role": "user",
            "parts": [{"kind": "text", "text": "hi"}, {"kind": "file", "file": {"uri": "https://x/a.txt", "mimeType": "text/plain", "name": "a.txt"}}]}}),
        );
        assert_eq!(params["message"]["parts"][0], json!({"text": "hi"}));
        assert_eq!(
            params["message"]["parts"][1],
            json!({"url": "https://x/a.txt", "mediaType": "text/plain", "filename": "a.txt"})
        );
        let task = json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_INPUT_REQUIRED",
            "message": {"messageId": "s", "role": "ROLE_AGENT", "parts": [{"text": "Which?"}, {"data": {"a": 1}}]}},
            "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}]}});
        let old = result_to_v03(&task);
        assert_eq!(old["kind"], "task", "not wrapped");
        assert_eq!(old["status"]["state"], "input-required");
        assert_eq!(old["status"]["message"]["role"], "agent");
        assert_eq!(
            old["status"]["message"]["parts"][1],
            json!({"kind": "data", "data": {"a": 1}})
        );
        assert_eq!(
            old["history"][0]["parts"][0],
            json!({"kind": "text", "text": "hi"})
        );
        let update = result_to_v03(
            &json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}}),
        );
        assert_eq!(
            (update["kind"].clone(), update["final"].clone()),
            (json!("status-update"), json!(true))
        );
        let chunk = result_to_v03(
            &json!({"artifactUpdate": {"taskId": "t", "contextId": "c", "append": true,
            "artifact": {"artifactId": "r", "parts": [{"text": "x"}]}}}),
        );
        assert_eq!(chunk["kind"], "artifact-update");
        assert_eq!(chunk["artifact"]["parts"][0]["kind"], "text");
    }

    #[test]
    fn push_configs_are_rewritten_both_ways() {
        let set = params_from_v03(
            Method::CreatePushConfig,
            json!({"taskId": "t", "pushNotificationConfig":
            {"id": "p", "url": "https://h/x", "token": "k", "authentication": {"schemes": ["Bearer"], "credentials": "c"}}}),
        );
        assert_eq!(
            set,
            json!({"taskId": "t", "id": "p", "url": "https://h/x", "token": "k",
            "authentication": {"scheme": "Bearer", "credentials": "c"}})
        );
        assert_eq!(
            push_config_to_v03(&set),
            json!({"taskId": "t", "pushNotificationConfig":
            {"id": "p", "url": "https://h/x", "token": "k", "authentication": {"schemes": ["Bearer"], "credentials": "c"}}})
        );
        let get = params_from_v03(Method::GetPushConfig, json!({"id": "t"}));
        assert_eq!(get, json!({"taskId": "t", "id": "t"}), "the default config");
        let delete = params_from_v03(
            Method::DeletePushConfig,
            json!({"id": "t", "pushNotificationConfigId": "p"}),
        );
        assert_eq!(delete, json!({"taskId": "t", "id": "p"}));
        let send = params_from_v03(
            Method::SendMessage,
            json!({"message": {"messageId": "m", "role": "user", "parts": []},
            "configuration": {"pushNotificationConfig": {"url": "https://h/x", "authentication": {"schemes": ["Basic"]}}}}),
        );
        assert_eq!(
            send["configuration"]["pushNotificationConfig"]["authentication"]["scheme"],
            "Basic"
        );
    }
}
