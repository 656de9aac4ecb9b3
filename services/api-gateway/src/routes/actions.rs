//! What paused jobs wait for, and the decisions that resume them (SPEC §3.2, §6.2).
//!
//! `GET /api/local/tasks/{id}/required-actions` lists the pending items of a task (each with
//! its kind, the movement, the event that proposed it and what it is about); a decision on an
//! item is compare-and-set — the first wins, a second gets 409 — and the decision on the last
//! pending item of a job queues the job again, which resumes in the same movement
//! (`maestro_pauses::decide`). An answer to an `ask` is a comment (see `crate::routing`); an
//! MCP token is supplied with `PUT /api/local/mcp-servers/{server}/token`.

use axum::Json;
use axum::extract::{Path, Query, State};
use maestro_api::ErrorBody;
use maestro_api::{
    ActionList, DecideReply, DecideRequest, RequiredAction, TokenReply, TokenRequest,
};
use maestro_domain::{ActionId, WaitReason};
use serde::Deserialize;

use super::{actable_task, parse_id};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::json::ApiJson;
use crate::state::AppState;
use crate::usecases;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Every item ever, decided ones too.
    #[serde(default)]
    all: bool,
}

/// `GET /api/local/tasks/{id}/required-actions`
#[utoipa::path(
    get,
    path = "/api/local/tasks/{id}/required-actions",
    tag = "actions",
    summary = "What the task's paused job waits for",
    params(("id" = String, Path, description = "The task id"), ListQuery),
    responses(
        (status = 200, body = ActionList),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(owner): Caller,
    headers: axum::http::HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ActionList>, ApiError> {
    let query = super::query(query)?;
    // An MCP login link logs its holder in as the task's creator: only the creator gets it.
    let (task_id, creator) = super::read_task_as(&state, &owner, &id).await?;
    let items = maestro_db::actions::list(&state.pool, task_id, query.all).await?;
    let base = super::base_url(&state, &headers);
    Ok(Json(ActionList {
        required_actions: items
            .into_iter()
            .map(|item| {
                let mut item = RequiredAction::from(item);
                if creator {
                    super::mcp_logins::absolute_login_url(&mut item.detail, &base);
                } else {
                    item.detail.remove("login_url");
                }
                item
            })
            .collect(),
    }))
}

/// `POST /api/local/tasks/{id}/required-actions/{rid}/decide`
#[utoipa::path(
    post,
    path = "/api/local/tasks/{id}/required-actions/{rid}/decide",
    tag = "actions",
    summary = "Answer a required action (approve, deny, answer, happened, …)",
    params(("id" = String, Path, description = "The task id"), ("rid" = String, Path, description = "The required action id")),
    request_body = DecideRequest,
    responses(
        (status = 200, body = DecideReply),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn decide(
    state: State<AppState>,
    caller: Caller,
    Path((id, rid)): Path<(String, String)>,
    body: ApiJson<DecideRequest>,
) -> Result<Json<DecideReply>, ApiError> {
    decide_kinds(state, caller, (&id, &rid), body, &WaitReason::ALL).await
}

/// `POST /api/local/tasks/{id}/tool-requests/{rid}/decide`
#[utoipa::path(
    post,
    path = "/api/local/tasks/{id}/tool-requests/{rid}/decide",
    tag = "actions",
    summary = "Approve or deny a tool request",
    params(("id" = String, Path, description = "The task id"), ("rid" = String, Path, description = "The required action id")),
    request_body = DecideRequest,
    responses(
        (status = 200, body = DecideReply),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn decide_tool(
    state: State<AppState>,
    caller: Caller,
    Path((id, rid)): Path<(String, String)>,
    body: ApiJson<DecideRequest>,
) -> Result<Json<DecideReply>, ApiError> {
    decide_kinds(state, caller, (&id, &rid), body, &[WaitReason::ToolRequest]).await
}

/// `POST /api/local/tasks/{id}/package-requests/{rid}/decide`
#[utoipa::path(
    post,
    path = "/api/local/tasks/{id}/package-requests/{rid}/decide",
    tag = "actions",
    summary = "Approve or deny a package request",
    params(("id" = String, Path, description = "The task id"), ("rid" = String, Path, description = "The required action id")),
    request_body = DecideRequest,
    responses(
        (status = 200, body = DecideReply),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn decide_package(
    state: State<AppState>,
    caller: Caller,
    Path((id, rid)): Path<(String, String)>,
    body: ApiJson<DecideRequest>,
) -> Result<Json<DecideReply>, ApiError> {
    let kinds = [WaitReason::PackageRequest];
    decide_kinds(state, caller, (&id, &rid), body, &kinds).await
}

/// Decide item `rid` of task `id`, if it is of one of `kinds`.
async fn decide_kinds(
    State(state): State<AppState>,
    Caller(owner): Caller,
    (id, rid): (&str, &str),
    ApiJson(body): ApiJson<DecideRequest>,
    kinds: &[WaitReason],
) -> Result<Json<DecideReply>, ApiError> {
    parse_id::<maestro_domain::TaskId>(id, "task")?;
    let action_id: ActionId = parse_id(rid, "required action")?;
    let task_id = actable_task(&state, &owner, id).await?;
    let reply =
        usecases::decide(&state, &owner, (task_id, action_id), &body, (kinds, None)).await?;
    Ok(Json(reply))
}

/// `PUT /api/local/mcp-servers/{server}/token`: store the caller's token for an MCP server
/// (never returned or logged) and resume the caller's jobs that waited for it.
#[utoipa::path(
    put,
    path = "/api/local/mcp-servers/{server}/token",
    tag = "actions",
    summary = "Store your token for an MCP server; jobs waiting for it resume",
    params(("server" = String, Path, description = "The MCP server's name in the policy")),
    request_body = TokenRequest,
    responses(
        (status = 200, body = TokenReply),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn put_token(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(server): Path<String>,
    ApiJson(body): ApiJson<TokenRequest>,
) -> Result<Json<TokenReply>, ApiError> {
    let valid_name = !server.is_empty()
        && server.len() <= 64
        && server
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid_name {
        return Err(ApiError::invalid(
            "invalid_server",
            "a server name is 1-64 letters, digits, '-' or '_'",
        ));
    }
    let token = body.token.trim();
    if token.is_empty() || token.len() > 8192 || token.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "invalid_token",
            "token must be 1-8192 bytes without control characters",
        ));
    }
    let (resumed_jobs, after) =
        maestro_pauses::supply_token(&state.pool, &owner, &server, token).await?;
    state.bus.after_commit(after).await;
    tracing::info!(%server, resumed_jobs, "MCP token stored");
    Ok(Json(TokenReply {
        server,
        resumed_jobs,
    }))
}
