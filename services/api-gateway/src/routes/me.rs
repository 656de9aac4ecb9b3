//! `GET /api/local/me`: who the request's token stands for, for clients that show it (the UI's
//! "signed in as", `maestro whoami`) and to check a token without touching anything.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use maestro_api::{ErrorBody, Me};

use crate::error::ApiError;
use crate::state::AppState;

/// `GET /api/local/me`
#[utoipa::path(
    get,
    path = "/api/local/me",
    tag = "spaces",
    summary = "Who the token stands for",
    responses(
        (status = 200, body = Me),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn get(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Me>, ApiError> {
    let who = crate::auth::identify(&state, &headers).await?;
    Ok(Json(Me {
        owner: who.owner.as_str().to_owned(),
        admin: who.admin,
    }))
}
