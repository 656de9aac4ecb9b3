//! Tool-call arguments checked against the tool's `parameters` (JSON Schema, `jsonschema`)
//! before the call goes anywhere: a call that does not fit gets an error result naming the
//! fields, which the model reads and corrects, instead of reaching the tool. Validators are
//! compiled once per distinct schema and kept for the life of the worker (a piece's tools are
//! the same bytes for every job). A schema that does not compile (a server's mistake) checks
//! nothing: the tool decides, as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use maestro_domain::tools::ToolSpec;
use serde_json::Value;

/// At most this many problems are named.
const MOST: usize = 5;

type Compiled = Option<Arc<jsonschema::Validator>>;

fn validators() -> &'static Mutex<HashMap<String, Compiled>> {
    static VALIDATORS: OnceLock<Mutex<HashMap<String, Compiled>>> = OnceLock::new();
    VALIDATORS.get_or_init(Mutex::default)
}

fn validator(spec: &ToolSpec) -> Compiled {
    let key = spec.parameters.to_string();
    let mut cache = validators().lock().expect("lock");
    if let Some(compiled) = cache.get(&key) {
        return compiled.clone();
    }
    let compiled = match jsonschema::validator_for(&spec.parameters) {
        Ok(validator) => Some(Arc::new(validator)),
        Err(e) => {
            tracing::warn!(tool = %spec.name, error = %e, "the tool's parameters are not a usable JSON schema; its arguments are not checked");
            None
        }
    };
    cache.insert(key, compiled.clone());
    compiled
}

/// `Err`: what the model reads — each problem with the field it is about.
pub fn check(spec: &ToolSpec, arguments: &Value) -> Result<(), String> {
    let Some(validator) = validator(spec) else {
        return Ok(());
    };
    let problems: Vec<String> = validator
        .iter_errors(arguments)
        .take(MOST + 1)
        .map(|e| {
            let at = e.instance_path().to_string();
            let field = if at.is_empty() {
                "arguments".to_owned()
            } else {
                format!("`{at}`")
            };
            format!("{field}: {e}")
        })
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    let more = if problems.len() > MOST { "; …" } else { "" };
    let shown: Vec<&str> = problems.iter().take(MOST).map(String::as_str).collect();
    Err(format!(
        "Error: the arguments do not fit {}'s parameters: {}{more}",
        spec.name,
        shown.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use maestro_domain::tools::Idempotency;
    use serde_json::json;

    fn spec(parameters: Value) -> ToolSpec {
        ToolSpec {
            name: "write_file".into(),
            description: String::new(),
            parameters,
            idempotency: Idempotency::SideEffecting,
        }
    }

    #[test]
    fn a_call_that_does_not_fit_names_the_field() {
        let tool = spec(json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"]
        }));
        assert_eq!(check(&tool, &json!({"path": "a", "content": "b"})), Ok(()));
        let wrong = check(&tool, &json!({"path": 7, "content": "b"})).expect_err("a number");
        assert!(
            wrong.contains("`/path`") && wrong.contains("string"),
            "{wrong}"
        );
        let missing = check(&tool, &json!({"path": "a"})).expect_err("missing");
        assert!(missing.contains("content"), "{missing}");
    }

    #[test]
    fn a_schema_that_does_not_compile_checks_nothing() {
        let tool = spec(json!({"type": "no-such-type"}));
        assert_eq!(check(&tool, &json!({"anything": 1})), Ok(()));
    }
}
