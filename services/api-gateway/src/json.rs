//! A JSON body extractor whose rejections use the API's error shape instead of axum's plain
//! text, and that refuses a NUL character in any string of the body with a 422 naming the
//! field (Postgres cannot store one; `maestro_domain::storable`).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Like `axum::Json`, with [`ApiError`] rejections.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !json_content_type(req.headers()) {
            return Err(ApiError::UnsupportedMediaType(
                "send the body as JSON with Content-Type: application/json".to_owned(),
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::TooLarge(0)
            } else {
                ApiError::bad_request("invalid_body", e.body_text())
            }
        })?;
        refuse_nul(&bytes)?;
        refuse_non_object(&bytes)?;
        let axum::Json(value) = axum::Json::<T>::from_bytes(&bytes)?;
        Ok(ApiJson(value))
    }
}

/// `application/json`, or any `+json` type.
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    let essence = essence.to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Every request body is a JSON object: serde would also read a struct from an array
/// (`[null, null]` as a struct of two optional fields), which no client means.
pub fn refuse_non_object(bytes: &[u8]) -> Result<(), ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        // Not JSON at all: the JSON parser says what is wrong with it.
        Some(b) if !matches!(b, b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n') => Ok(()),
        None => Ok(()),
        Some(_) => Err(ApiError::invalid(
            "invalid_body",
            "the body must be a JSON object",
        )),
    }
}

/// A body whose strings hold a NUL (`\u0000`) is refused, naming the field.
pub fn refuse_nul(bytes: &[u8]) -> Result<(), ApiError> {
    match maestro_domain::storable::nul_path_in_json(bytes) {
        Some(path) => Err(ApiError::invalid(
            "invalid_text",
            format!("{path} contains a NUL character (\\u0000), which cannot be stored; remove it"),
        )),
        None => Ok(()),
    }
}
