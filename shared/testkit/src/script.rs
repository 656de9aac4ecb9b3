//! Builders for the scripted LLM's scenario turns (see `docs/scripted-llm.md`).

use serde_json::{Value, json};

/// A tool call of a turn.
pub fn call(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

/// A turn that makes these calls.
pub fn turn(calls: &[Value]) -> Value {
    json!({"tool_calls": calls})
}

/// A turn that calls `complete` with `result`.
pub fn complete(result: &str) -> Value {
    turn(&[call("complete", json!({"result": result}))])
}

/// A `delegate` call: a subtask with this instruction.
pub fn delegate(instruction: &str) -> Value {
    call("delegate", json!({"instruction": instruction}))
}

/// A `transition` call to `target`.
pub fn transition(target: &str, reason: &str) -> Value {
    call("transition", json!({"target": target, "reason": reason}))
}
