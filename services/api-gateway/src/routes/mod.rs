//! Request handlers, one module per resource.

pub mod actions;
pub mod comments;
pub mod health;
pub mod stream;
pub mod tasks;
pub mod webhooks;

use crate::error::ApiError;

/// Unknown routes answer in the API's error shape too.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("route")
}

/// Parse an id from the path; a malformed id names nothing, so it is a 404.
pub fn parse_id<T: std::str::FromStr>(raw: &str, what: &'static str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| ApiError::NotFound(what))
}
