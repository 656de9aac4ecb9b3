//! Checks of what a request names — an instruction, a piece and its start movement, a model,
//! an `Idempotency-Key` — shared by the routes that create work. Each returns the API's 4xx.

use axum::http::HeaderMap;
use maestro_domain::piece;
use sha2::{Digest, Sha256};

use crate::config::Settings;
use crate::error::ApiError;

/// A non-blank instruction of at most `MAX_INSTRUCTION_BYTES`, trimmed.
pub fn instruction(settings: &Settings, text: &str) -> Result<String, ApiError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(ApiError::invalid(
            "invalid_instruction",
            "instruction must not be empty",
        ));
    }
    let max = settings.max_instruction_bytes;
    if text.len() > max {
        return Err(ApiError::invalid(
            "instruction_too_long",
            format!("instruction is longer than {max} bytes"),
        ));
    }
    Ok(text.to_owned())
}

/// A piece of the catalog, or the router (`auto`); with a start movement, a movement of that
/// piece (named explicitly, not the router).
pub fn piece(
    settings: &Settings,
    piece: &str,
    start_movement: Option<&str>,
) -> Result<(), ApiError> {
    let catalog = &settings.catalog;
    let found = catalog.get(piece);
    if found.is_none() && piece != piece::ROUTER {
        let known: Vec<&str> = catalog.pieces().map(|p| p.name.as_str()).collect();
        let message = format!(
            "unknown piece {piece:?}; known pieces: {} (or {:?} to let the router choose)",
            known.join(", "),
            piece::ROUTER
        );
        return Err(ApiError::invalid("unknown_piece", message));
    }
    let Some(start) = start_movement else {
        return Ok(());
    };
    let Some(found) = found else {
        return Err(ApiError::invalid(
            "invalid_start_movement",
            "start_movement needs a piece named explicitly, not the router",
        ));
    };
    if found.movement(start).is_none() {
        let known: Vec<&str> = found.movements.iter().map(|m| m.name.as_str()).collect();
        let message = format!(
            "piece {piece:?} has no movement {start:?}; its movements: {}",
            known.join(", ")
        );
        return Err(ApiError::invalid("invalid_start_movement", message));
    }
    Ok(())
}

/// A well-formed model name, one of `LLM_MODELS` when that is set.
/// A worker profile's name (a NATS subject token).
/// A file path as the file routes take it: 1 to 1024 bytes, no NUL.
pub fn file_path(path: &str) -> Result<(), ApiError> {
    if path.is_empty() || path.len() > 1024 || path.contains('\0') {
        return Err(ApiError::invalid(
            "invalid_path",
            "a file path is 1 to 1024 characters",
        ));
    }
    Ok(())
}

pub fn profile(profile: &str) -> Result<(), ApiError> {
    if maestro_domain::job::valid_profile(profile) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "invalid_profile",
            format!("profile {profile:?}: 1 to 64 letters, digits, '-' and '_'"),
        ))
    }
}

pub fn model(settings: &Settings, model: &str) -> Result<(), ApiError> {
    if !maestro_domain::job::valid_model(model) {
        return Err(ApiError::invalid(
            "invalid_model",
            "model is 1 to 128 characters of letters, digits and ._:/-@",
        ));
    }
    let allowed = &settings.allowed_models;
    if !allowed.is_empty() && !allowed.iter().any(|m| m == model) {
        let message = format!(
            "model {model:?} is not offered; offered: {}",
            allowed.join(", ")
        );
        return Err(ApiError::invalid("unknown_model", message));
    }
    Ok(())
}

/// The request's `Idempotency-Key`, if it has one: 1 to 255 visible characters, not one of
/// the keys subtasks use.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.to_str().ok().map(str::trim).unwrap_or_default();
    if key.is_empty() || key.len() > 255 {
        return Err(ApiError::bad_request(
            "invalid_idempotency_key",
            "Idempotency-Key is 1 to 255 visible ASCII characters",
        ));
    }
    if key.starts_with(maestro_db::subtasks::KEY_PREFIX) {
        return Err(ApiError::bad_request(
            "invalid_idempotency_key",
            "Idempotency-Key may not start with `subtask:` (the keys of subtasks)",
        ));
    }
    Ok(Some(key.to_owned()))
}

/// The hash of a request's validated parts, stored with an `Idempotency-Key` to tell a repeat
/// from a different request under the same key (lengths included, so parts cannot run into
/// each other).
pub fn request_hash(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A webhook's or push notification's URL: absolute http(s), at most 2048 characters.
pub fn http_url(url: &str) -> Result<(), ApiError> {
    let parsed = parse_http_url(url)
        .ok_or_else(|| ApiError::invalid("invalid_url", "url is an absolute http or https URL"))?;
    if parsed.len() > 2048 {
        return Err(ApiError::invalid(
            "invalid_url",
            "url is longer than 2048 characters",
        ));
    }
    Ok(())
}

/// A light check: `http(s)://host[:port][/path]`, no spaces or control characters.
fn parse_http_url(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let host = rest.split(['/', '?', '#']).next()?;
    let host_ok = !host.is_empty() && !host.starts_with(':') && !host.contains('@');
    let chars_ok = url.chars().all(|c| c.is_ascii_graphic());
    (host_ok && chars_ok).then_some(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_http_urls_are_accepted() {
        assert!(http_url("http://127.0.0.1:9000/hook").is_ok());
        assert!(http_url("https://example.com").is_ok());
        for bad in [
            "ftp://x",
            "example.com/hook",
            "http://",
            "http:///x",
            "http://a b/",
            "http://u@evil/",
        ] {
            assert!(http_url(bad).is_err(), "{bad} should be refused");
        }
    }
}
