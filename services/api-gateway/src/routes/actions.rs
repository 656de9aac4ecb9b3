//! What paused jobs wait for, and the decisions that resume them (SPEC §3.2, §6.2).
//!
//! `GET /api/local/tasks/{id}/required-actions` lists the pending items of a task (each with
//! its kind, the movement, the event that proposed it and what it is about); a decision on an
//! item is compare-and-set — the first wins, a second gets 409 — and the decision on the last
//! pending item of a job queues the job again, which resumes in the same movement. An answer
//! to an `ask` is a comment (see `comments.rs`); an MCP token is supplied with
//! `PUT /api/local/mcp-servers/{server}/token`.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use maestro_db::actions::{self, Action, Decided, Decision};
use maestro_domain::{JobStatus, Owner, TaskId, WaitReason};
use maestro_messaging::payloads::JobDispatch;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::parse_id;
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::json::ApiJson;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Every item ever, decided ones too.
    #[serde(default)]
    all: bool,
}

#[derive(Debug, Serialize)]
pub struct ActionList {
    required_actions: Vec<Action>,
}

/// `GET /api/local/tasks/{id}/required-actions`
pub async fn list(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<ActionList>, ApiError> {
    let task_id: TaskId = parse_id(&id, "task")?;
    if !maestro_db::tasks::exists(&state.pool, &owner, task_id).await? {
        return Err(ApiError::NotFound("task"));
    }
    Ok(Json(ActionList {
        required_actions: actions::list(&state.pool, task_id, query.all).await?,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    /// `approve` / `deny` (tool and package requests); `happened` / `not_happened`
    /// (`side_effect_unknown`).
    decision: String,
    /// For an approved tool request: `once` (this call, the default) or `task` (the tool for
    /// the rest of the task).
    #[serde(default)]
    scope: Option<String>,
    /// Shown to the model with a denial.
    #[serde(default)]
    note: Option<String>,
    /// The `arguments_hash` the reviewer saw; a mismatch is a 409 and decides nothing.
    #[serde(default)]
    arguments_hash: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct DecideReply {
    required_action: Action,
    /// The job was waiting for this item only and is queued again.
    resumed: bool,
}

/// `POST /api/local/tasks/{id}/required-actions/{rid}/decide`
pub async fn decide(
    state: State<AppState>,
    caller: Caller,
    Path((id, rid)): Path<(String, String)>,
    body: ApiJson<DecideBody>,
) -> Result<Json<DecideReply>, ApiError> {
    decide_kinds(state, caller, &id, &rid, body, &WaitReason::ALL).await
}

/// `POST /api/local/tasks/{id}/tool-requests/{rid}/decide`
pub async fn decide_tool(
    state: State<AppState>,
    caller: Caller,
    Path((id, rid)): Path<(String, String)>,
    body: ApiJson<DecideBody>,
) -> Result<Json<DecideReply>, ApiError> {
    decide_kinds(state, caller, &id, &rid, body, &[WaitReason::ToolRequest]).await
}

/// `POST /api/local/tasks/{id}/package-requests/{rid}/decide`
pub async fn decide_package(
    state: State<AppState>,
    caller: Caller,
    Path((id, rid)): Path<(String, String)>,
    body: ApiJson<DecideBody>,
) -> Result<Json<DecideReply>, ApiError> {
    decide_kinds(
        state,
        caller,
        &id,
        &rid,
        body,
        &[WaitReason::PackageRequest],
    )
    .await
}

async fn decide_kinds(
    State(state): State<AppState>,
    Caller(owner): Caller,
    id: &str,
    rid: &str,
    ApiJson(body): ApiJson<DecideBody>,
    kinds: &[WaitReason],
) -> Result<Json<DecideReply>, ApiError> {
    let task_id: TaskId = parse_id(id, "task")?;
    let action_id: uuid::Uuid = parse_id(rid, "required action")?;
    if !maestro_db::tasks::exists(&state.pool, &owner, task_id).await? {
        return Err(ApiError::NotFound("task"));
    }
    let action = actions::get(&state.pool, task_id, action_id)
        .await?
        .filter(|a| WaitReason::parse(&a.kind).is_some_and(|k| kinds.contains(&k)))
        .ok_or(ApiError::NotFound("required action"))?;
    let kind = WaitReason::parse(&action.kind).ok_or(ApiError::NotFound("required action"))?;
    let note = body
        .note
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty());
    if note.is_some_and(|n| n.len() > 4000) {
        return Err(ApiError::invalid(
            "invalid_decision",
            "note is at most 4000 bytes",
        ));
    }
    let (status, scope) = match (kind, body.decision.as_str()) {
        (WaitReason::ToolRequest | WaitReason::PackageRequest, "approve") => {
            let scope = body.scope.as_deref().unwrap_or("once");
            if !matches!(scope, "once" | "task") {
                return Err(ApiError::invalid(
                    "invalid_decision",
                    "scope is `once` or `task`",
                ));
            }
            if kind == WaitReason::PackageRequest && scope != "once" {
                return Err(ApiError::invalid(
                    "invalid_decision",
                    "a package request is approved once",
                ));
            }
            ("approved", Some(scope))
        }
        (WaitReason::ToolRequest | WaitReason::PackageRequest, "deny") => {
            if body.scope.is_some() {
                return Err(ApiError::invalid(
                    "invalid_decision",
                    "scope applies to approvals only",
                ));
            }
            ("denied", None)
        }
        (WaitReason::SideEffectUnknown, "happened" | "not_happened") => ("resolved", None),
        (WaitReason::ToolRequest | WaitReason::PackageRequest, other) => {
            return Err(ApiError::invalid(
                "invalid_decision",
                format!("decision is `approve` or `deny`, not {other:?}"),
            ));
        }
        (WaitReason::SideEffectUnknown, other) => {
            return Err(ApiError::invalid(
                "invalid_decision",
                format!("decision is `happened` or `not_happened`, not {other:?}"),
            ));
        }
        (WaitReason::Ask, _) => {
            return Err(ApiError::Conflict {
                code: "answer_with_a_comment",
                message: "answer the question with POST /api/local/tasks/{id}/comments".to_owned(),
            });
        }
        (WaitReason::McpAuthRequired, _) => {
            return Err(ApiError::Conflict {
                code: "supply_the_token",
                message: "supply the token with PUT /api/local/mcp-servers/{server}/token"
                    .to_owned(),
            });
        }
        (WaitReason::Browser, _) => {
            return Err(ApiError::NotFound("required action"));
        }
        (WaitReason::Subtask, _) => {
            return Err(ApiError::Conflict {
                code: "decided_by_the_subtask",
                message: "a subtask item is resolved when its subtask is over; to end it now, \
                          cancel the subtask (POST /api/local/tasks/{subtask_id}/cancel)"
                    .to_owned(),
            });
        }
    };
    // Kinds without arguments (side effects) have no hash to compare.
    if let Some(seen) = &body.arguments_hash
        && let Some(reviewed) = action.detail["arguments_hash"].as_str()
        && reviewed != seen
    {
        return Err(ApiError::Conflict {
            code: "arguments_changed",
            message: "the call's arguments are not the ones you reviewed; reload the request"
                .to_owned(),
        });
    }
    let grant = (scope == Some("task"))
        .then(|| action.detail["tool"].as_str())
        .flatten();
    let decision = Decision {
        status,
        verb: &body.decision,
        scope,
        note,
        by: &owner,
        extra: json!({"arguments_hash": body.arguments_hash}),
        grant,
    };
    let (action, resumed) = settle(
        &state,
        actions::decide(&state.pool, task_id, action_id, kinds, &decision).await?,
    )
    .await?;
    tracing::info!(%task_id, %action_id, decision = %body.decision, resumed, "decided");
    Ok(Json(DecideReply {
        required_action: action,
        resumed,
    }))
}

/// A decision's outcome as the API answers it; a resumed job is dispatched.
async fn settle(state: &AppState, decided: Decided) -> Result<(Action, bool), ApiError> {
    match decided {
        Decided::Done {
            action,
            resumed,
            attempt,
        } => {
            maestro_messaging::publish::wake_outbox(&state.nats, &state.subjects).await;
            if resumed {
                let dispatch = JobDispatch {
                    job_id: action.job_id,
                    task_id: action.task_id,
                    attempt,
                };
                super::tasks::dispatch(state, dispatch).await;
            } else {
                // The job may now wait for its subtasks alone, some of which may be over.
                maestro_messaging::publish::wake_joiner(&state.nats, &state.subjects).await;
            }
            Ok((*action, resumed))
        }
        Decided::NotFound => Err(ApiError::NotFound("required action")),
        Decided::AlreadyDecided(status) => Err(ApiError::Conflict {
            code: "already_decided",
            message: format!("the item was decided already ({status})"),
        }),
        Decided::NotWaiting(status) => Err(ApiError::Conflict {
            code: "not_waiting",
            message: format!("the job no longer waits for this item (it is {status})"),
        }),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBody {
    token: String,
}

#[derive(Debug, Serialize)]
pub struct TokenReply {
    server: String,
    /// Jobs that waited for this token and are queued again.
    resumed_jobs: usize,
}

/// `PUT /api/local/mcp-servers/{server}/token`: store the caller's token for an MCP server
/// (never returned or logged) and resume the caller's jobs that waited for it.
pub async fn put_token(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(server): Path<String>,
    ApiJson(body): ApiJson<TokenBody>,
) -> Result<(StatusCode, Json<TokenReply>), ApiError> {
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
    actions::put_token(&state.pool, &owner, &server, token).await?;
    let resumed_jobs = resume_token_waits(&state, &owner, &server).await?;
    tracing::info!(%server, resumed_jobs, "MCP token stored");
    Ok((
        StatusCode::OK,
        Json(TokenReply {
            server,
            resumed_jobs,
        }),
    ))
}

async fn resume_token_waits(
    state: &AppState,
    owner: &Owner,
    server: &str,
) -> Result<usize, ApiError> {
    let mut resumed = 0;
    for (task_id, action_id) in actions::waiting_for_token(&state.pool, owner, server).await? {
        let decision = Decision {
            status: "resolved",
            verb: "token_supplied",
            scope: None,
            note: None,
            by: owner,
            extra: json!({}),
            grant: None,
        };
        let kinds = [WaitReason::McpAuthRequired];
        let decided = actions::decide(&state.pool, task_id, action_id, &kinds, &decision).await?;
        // Decided elsewhere meanwhile, or the job was cancelled: nothing to resume here.
        if let Ok((_, true)) = settle(state, decided).await {
            resumed += 1;
        }
    }
    Ok(resumed)
}

/// Why a comment cannot go to a job that waits for a person (`wait_reason`), or `None` when
/// the comment answers it (an `ask`).
pub fn comment_conflict(status: JobStatus, wait_reason: Option<&str>) -> Option<ApiError> {
    if status != JobStatus::WaitingHuman {
        return None;
    }
    let message = match wait_reason.unwrap_or_default() {
        "ask" => return None,
        "tool_request" => "the job waits for a decision on a tool request; decide it first \
                           (POST .../tool-requests/{rid}/decide)"
            .to_owned(),
        "package_request" => "the job waits for a decision on a package request; decide it \
                              first (POST .../package-requests/{rid}/decide)"
            .to_owned(),
        "mcp_auth_required" => "the job waits for an MCP server token; supply it first \
                                (PUT /api/local/mcp-servers/{server}/token)"
            .to_owned(),
        "side_effect_unknown" => "the job waits for a person to say whether a call took \
                                  effect; decide it first (POST .../required-actions/{rid}/decide)"
            .to_owned(),
        other => format!("the job waits for a person ({other}); resolve that first"),
    };
    Some(ApiError::Conflict {
        code: "decision_pending",
        message,
    })
}
