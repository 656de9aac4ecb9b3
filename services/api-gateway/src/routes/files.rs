//! `GET /api/local/tasks/{id}/files/{path}`: a file of the task's workspace, for its owner —
//! the files a job wrote, which A2A shows as file artifacts. The tool-runner that owns the
//! workspaces reads it (`<prefix>.tools.files.read`, confined to the workspace); files larger
//! than one NATS message are refused (413).

use maestro_api::ErrorBody;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maestro_domain::TaskId;
use maestro_domain::tools::{FILE_ERROR_HEADER, FileError, FileReadRequest};

use super::parse_id;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// Room left in a NATS message for its headers.
const HEADROOM: u64 = 4096;
/// How long the tool-runner has to answer.
const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// `GET /api/local/tasks/{id}/files/{*path}`
#[utoipa::path(
    get,
    path = "/api/local/tasks/{id}/files/{path}",
    tag = "tasks",
    summary = "A file of the task's workspace",
    params(("id" = String, Path, description = "The task id"), ("path" = String, Path, description = "The file's path in the workspace")),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = Vec<u8>),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let task_id: TaskId = parse_id(&id, "task")?;
    // One read: the task's workspace, if the caller owns the task.
    let workspace_id = maestro_db::tasks::workspace_of(&state.pool, &owner, task_id)
        .await?
        .ok_or(ApiError::NotFound("task"))?;
    crate::validate::file_path(&path)?;
    let limit = (state.bus.nats.server_info().max_payload as u64).saturating_sub(HEADROOM);
    let request = FileReadRequest {
        workspace_id,
        path: path.clone(),
        max_bytes: limit,
    };
    let body = serde_json::to_vec(&request).map_err(anyhow::Error::from)?;
    let subject = state.bus.subjects.files_read();
    let mut headers = async_nats::HeaderMap::new();
    maestro_messaging::trace::inject(&mut headers);
    let asked = state
        .bus
        .nats
        .request_with_headers(subject, headers, body.into());
    let reply = tokio::time::timeout(READ_TIMEOUT, asked)
        .await
        .map_err(|_| ApiError::Unavailable("the tool-runner did not answer".to_owned()))?
        .map_err(|e| ApiError::Unavailable(format!("the tool-runner: {e}")))?;
    let refusal = reply
        .headers
        .as_ref()
        .and_then(|h| h.get(FILE_ERROR_HEADER))
        .map(|v| FileError::parse(v.as_str()).unwrap_or(FileError::Unavailable));
    if let Some(error) = refusal {
        let reason = String::from_utf8_lossy(&reply.payload).into_owned();
        return Err(match error {
            FileError::NotFound => ApiError::NotFound("file"),
            FileError::TooLarge => ApiError::invalid("file_too_large", reason),
            FileError::Refused => ApiError::invalid("invalid_path", reason),
            FileError::Unavailable => ApiError::Unavailable(reason),
        });
    }
    let content_type = HeaderValue::from_static(maestro_a2a::map::media_type(&path));
    Ok(user_content(content_type, &path, "inline", reply.payload))
}

/// `GET /api/local/tasks/{id}/files`: the files the task's jobs wrote, for its owner (as the
/// files themselves are).
#[utoipa::path(
    get,
    path = "/api/local/tasks/{id}/files",
    tag = "tasks",
    summary = "The files the task's jobs wrote",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, body = maestro_api::FileList),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<axum::Json<maestro_api::FileList>, ApiError> {
    let task_id: TaskId = parse_id(&id, "task")?;
    maestro_db::tasks::workspace_of(&state.pool, &owner, task_id)
        .await?
        .ok_or(ApiError::NotFound("task"))?;
    let files = maestro_db::events::files_written(&state.pool, &[task_id])
        .await?
        .into_iter()
        .map(|(_, path)| maestro_api::WrittenFile {
            url: format!(
                "/api/local/tasks/{task_id}/files/{}",
                maestro_domain::tools::url_path(&path)
            ),
            path,
        })
        .collect();
    Ok(axum::Json(maestro_api::FileList { files }))
}

/// Bytes an agent wrote or a person sent, served as `disposition` (`inline`, `attachment`)
/// under the last component of `path`: not the gateway's own content, so a browser neither
/// runs scripts in it nor sniffs another type.
pub fn user_content(
    content_type: HeaderValue,
    path: &str,
    disposition: &str,
    bytes: impl Into<Body>,
) -> Response {
    let filename = path.rsplit('/').next().unwrap_or(path).replace('"', "");
    let headers = [
        (header::CONTENT_TYPE, content_type),
        (
            header::CONTENT_DISPOSITION,
            HeaderValue::from_str(&format!("{disposition}; filename=\"{filename}\""))
                .unwrap_or(HeaderValue::from_static("attachment")),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("sandbox"),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
    ];
    (StatusCode::OK, headers, bytes.into()).into_response()
}

/// `GET /api/local/tasks/{id}/attachments/{name}`: a file attached when the task was created,
/// as it was sent (from Postgres, the system of record).
#[utoipa::path(
    get,
    path = "/api/local/tasks/{id}/attachments/{name}",
    tag = "tasks",
    summary = "A file attached to the task when it was created",
    params(("id" = String, Path, description = "The task id"), ("name" = String, Path, description = "The attachment's name")),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = Vec<u8>),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn attachment(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path((id, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let task_id = super::readable_task(&state, &caller, &id).await?;
    let (meta, bytes) = maestro_db::attachments::get(&state.pool, task_id, &name)
        .await?
        .ok_or(ApiError::NotFound("attachment"))?;
    let content_type = HeaderValue::from_str(&meta.content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    Ok(user_content(content_type, &meta.name, "attachment", bytes))
}
