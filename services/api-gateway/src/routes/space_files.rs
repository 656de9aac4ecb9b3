//! What a person sees of a space's persistent workspace: the files on its `main` branch, one
//! file's bytes, and the commits its tasks' jobs made (docs/spaces.md#persistent-workspaces).
//! The tool-runner that holds the repositories answers (`<prefix>.tools.git`); members only.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderValue;
use axum::response::Response;
use base64::Engine as _;
use maestro_api::{ErrorBody, SpaceCommits, SpaceFiles};
use maestro_domain::tools::{GitReply, GitRequest};
use maestro_domain::{Owner, SpaceId};

use super::query;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// How long the tool-runner has to answer.
const GIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Room left in a NATS message for the reply's JSON around a file (base64 grows it by 4/3).
const HEADROOM: u64 = 8192;

/// `GET /api/local/spaces/{id}/files`
#[utoipa::path(
    get,
    path = "/api/local/spaces/{id}/files",
    tag = "spaces",
    summary = "The files of the space's workspace, as its main branch has them",
    params(("id" = String, Path, description = "The space id")),
    responses(
        (status = 200, body = SpaceFiles),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Result<Json<SpaceFiles>, ApiError> {
    let space = member(&state, &caller, &id).await?;
    let reply = ask(&state, &GitRequest::Files { space_id: space }).await?;
    Ok(Json(SpaceFiles { files: reply.files }))
}

/// `GET /api/local/spaces/{id}/files/{*path}`
#[utoipa::path(
    get,
    path = "/api/local/spaces/{id}/files/{path}",
    tag = "spaces",
    summary = "One file of the space's workspace (main branch)",
    params(("id" = String, Path, description = "The space id"), ("path" = String, Path, description = "The file's path")),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = Vec<u8>),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let space = member(&state, &caller, &id).await?;
    crate::validate::file_path(&path)?;
    let limit = (state.bus.nats.server_info().max_payload as u64).saturating_sub(HEADROOM) / 4 * 3;
    let request = GitRequest::File {
        space_id: space,
        path: path.clone(),
        max_bytes: limit,
    };
    let reply = ask(&state, &request).await?;
    if reply.missing {
        return Err(ApiError::NotFound("file"));
    }
    let bytes = reply
        .content
        .as_deref()
        .map(|c| base64::engine::general_purpose::STANDARD.decode(c))
        .transpose()
        .map_err(|e| ApiError::Unexpected(e.into()))?
        .unwrap_or_default();
    let content_type = HeaderValue::from_static(maestro_a2a::map::media_type(&path));
    Ok(super::files::user_content(
        content_type,
        &path,
        "inline",
        bytes,
    ))
}

/// `?limit=` of the commit listing.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CommitsQuery {
    /// How many, newest first (50 when absent).
    #[serde(default)]
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// `GET /api/local/spaces/{id}/commits`
#[utoipa::path(
    get,
    path = "/api/local/spaces/{id}/commits",
    tag = "spaces",
    summary = "The commits of the space's main branch, newest first, with their task and job",
    params(("id" = String, Path, description = "The space id"), CommitsQuery),
    responses(
        (status = 200, body = SpaceCommits),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn commits(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    q: Result<Query<CommitsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SpaceCommits>, ApiError> {
    let q = query(q)?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "limit is 1 to 200"));
    }
    let space = member(&state, &caller, &id).await?;
    let reply = ask(
        &state,
        &GitRequest::Commits {
            space_id: space,
            limit,
        },
    )
    .await?;
    Ok(Json(SpaceCommits {
        commits: reply.commits,
    }))
}

async fn member(state: &AppState, caller: &Owner, raw: &str) -> Result<SpaceId, ApiError> {
    super::spaces::member_of(state, caller, raw)
        .await
        .map(|s| s.id)
}

/// Ask the tool-runners; a reply with an error is a 503 (the repository cannot be read now).
async fn ask(state: &AppState, request: &GitRequest) -> Result<GitReply, ApiError> {
    let body = serde_json::to_vec(request).map_err(anyhow::Error::from)?;
    let mut headers = async_nats::HeaderMap::new();
    maestro_messaging::trace::inject(&mut headers);
    let asked =
        state
            .bus
            .nats
            .request_with_headers(state.bus.subjects.tools_git(), headers, body.into());
    let reply = tokio::time::timeout(GIT_TIMEOUT, asked)
        .await
        .map_err(|_| ApiError::Unavailable("the tool-runner did not answer".to_owned()))?
        .map_err(|e| ApiError::Unavailable(format!("the tool-runner: {e}")))?;
    let reply: GitReply =
        serde_json::from_slice(&reply.payload).map_err(|e| ApiError::Unexpected(e.into()))?;
    match reply.error {
        Some(error) => Err(ApiError::Unavailable(format!(
            "the space's repository: {error}"
        ))),
        None => Ok(reply),
    }
}
