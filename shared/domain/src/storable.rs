//! What Postgres can store. Its `text` and `jsonb` cannot hold U+0000 (NUL), which tool output,
//! file contents and model output can carry; everything the services write from such sources
//! passes through here on the way in (event payloads, job results and errors, required
//! actions). The rule: each NUL becomes U+FFFD, the replacement character, so the text keeps
//! its length and shape. Requests from people are not rewritten: a NUL in a request body is
//! refused with a 422 naming the field ([`nul_path`]).

use std::borrow::Cow;

use serde_json::Value;

/// What a NUL becomes.
pub const NUL_REPLACEMENT: &str = "\u{FFFD}";

/// `text` as Postgres can store it.
pub fn text(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', NUL_REPLACEMENT))
    } else {
        Cow::Borrowed(text)
    }
}

/// A tool's output as it can be stored and shown: each NUL becomes U+FFFD, and the model is
/// told how many there were, so the byte count stays visible (a `/proc` read, a program's
/// binary output).
pub fn tool_output(output: String) -> String {
    let nuls = output.matches('\0').count();
    if nuls == 0 {
        return output;
    }
    let mut shown = text(&output).into_owned();
    shown.push_str(&format!(
        "\n[{nuls} NUL byte(s) in this output are shown as U+FFFD; {} bytes in all]",
        output.len()
    ));
    shown
}

/// Make every string (and key) of `value` storable; how many NULs were replaced.
pub fn json(value: &mut Value) -> usize {
    match value {
        Value::String(s) if s.contains('\0') => {
            let n = s.matches('\0').count();
            *s = s.replace('\0', NUL_REPLACEMENT);
            n
        }
        Value::Array(items) => items.iter_mut().map(json).sum(),
        Value::Object(map) => {
            let mut replaced: usize = map.values_mut().map(json).sum();
            if map.keys().any(|k| k.contains('\0')) {
                let entries: Vec<(String, Value)> = std::mem::take(map).into_iter().collect();
                for (key, item) in entries {
                    replaced += key.matches('\0').count();
                    map.insert(key.replace('\0', NUL_REPLACEMENT), item);
                }
            }
            replaced
        }
        _ => 0,
    }
}

/// Where the first NUL in `value` is, as a path (`instruction`, `message.parts[0].text`; the
/// key itself when a key holds one); `None` when there is none.
pub fn nul_path(value: &Value) -> Option<String> {
    fn walk(value: &Value, path: &str) -> Option<String> {
        match value {
            Value::String(s) if s.contains('\0') => Some(path.to_owned()),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, item)| walk(item, &format!("{path}[{i}]"))),
            Value::Object(map) => map.iter().find_map(|(key, item)| {
                let here = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                if key.contains('\0') {
                    return Some(here);
                }
                walk(item, &here)
            }),
            _ => None,
        }
    }
    walk(value, "").map(|p| {
        if p.is_empty() {
            "the body".to_owned()
        } else {
            p
        }
    })
}

/// [`nul_path`] of a JSON text. JSON can only carry a NUL escaped, so only a text that spells
/// `\u0000` is parsed for it; a text that is not JSON has none to report.
pub fn nul_path_in_json(bytes: &[u8]) -> Option<String> {
    if !bytes.windows(6).any(|w| w == br"\u0000") {
        return None;
    }
    let value = serde_json::from_slice::<Value>(bytes).ok()?;
    nul_path(&value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn nul_becomes_the_replacement_character_everywhere() {
        assert_eq!(text("a\0b"), "a\u{FFFD}b");
        assert!(matches!(text("clean"), Cow::Borrowed(_)));
        let mut value = json!({"out": "x\0\0y", "list": ["\0"], "k\0": 1, "n": 5});
        assert_eq!(json(&mut value), 4);
        assert_eq!(
            value,
            json!({"out": "x\u{FFFD}\u{FFFD}y", "list": ["\u{FFFD}"], "k\u{FFFD}": 1, "n": 5})
        );
    }

    #[test]
    fn the_path_names_the_field() {
        assert_eq!(
            nul_path(&json!({"instruction": "a\0"})).as_deref(),
            Some("instruction")
        );
        let nested = json!({"message": {"parts": [{"text": "ok"}, {"text": "\0"}]}});
        assert_eq!(nul_path(&nested).as_deref(), Some("message.parts[1].text"));
        assert_eq!(nul_path(&json!("\0")).as_deref(), Some("the body"));
        assert_eq!(nul_path(&json!({"fine": ["a", 1, null]})), None);
        assert_eq!(
            nul_path_in_json(br#"{"a": "x\u0000"}"#).as_deref(),
            Some("a")
        );
        assert_eq!(nul_path_in_json(br#"{"a": "\\u0000 is text"}"#), None);
        assert_eq!(nul_path_in_json(b"not json \\u0000"), None);
    }

    proptest! {
        #[test]
        fn whatever_the_bytes_the_result_holds_no_nul_and_keeps_the_rest(s in ".*", nuls in 0usize..4) {
            let mut with = s.clone();
            for _ in 0..nuls {
                with.push('\0');
            }
            let mut value = json!({"a": with.clone(), "b": [with.clone()]});
            let replaced = json(&mut value);
            prop_assert_eq!(replaced, 2 * with.matches('\0').count());
            prop_assert!(nul_path(&value).is_none());
            prop_assert_eq!(value["a"].as_str().map(|t| t.chars().count()), Some(with.chars().count()));
        }
    }
}
