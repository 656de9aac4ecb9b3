//! The HTTP+JSON binding, under `/a2a/rest`: the spec's paths (`POST /message:send`,
//! `POST /message:stream`, `GET /tasks`, `GET /tasks/{id}`, `POST /tasks/{id}:cancel`,
//! `GET|POST /tasks/{id}:subscribe`, `/tasks/{id}/pushNotificationConfigs[/{cfg}]`,
//! `GET /extendedAgentCard`). Answers are `application/a2a+json`; refusals are AIP-193
//! error bodies whose `code` is the HTTP status; streams are SSE of bare `StreamResponse`s.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maestro_a2a::types::{
    ListPushConfigsRequest, ListTasksRequest, PushConfigRequest, SendMessageRequest, TaskIdRequest,
    TaskPushNotificationConfig, TaskState,
};
use maestro_a2a::{A2aError, ErrorKind};
use maestro_domain::Owner;
use serde::Serialize;

use super::ops::{self, Ctx};
use super::push;
use super::rpc::json_content;
use super::sse::{self, Envelope, Until};
use super::{card, version};
use crate::state::AppState;

type Params = Query<HashMap<String, String>>;

/// A refusal as the HTTP+JSON binding says it.
fn refuse(error: &A2aError) -> Response {
    let status = StatusCode::from_u16(error.kind.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (status, axum::Json(error.to_rest())).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn ok(value: impl Serialize) -> Response {
    let body = serde_json::to_vec(&value).unwrap_or_default();
    ([(header::CONTENT_TYPE, "application/a2a+json")], body).into_response()
}

/// The caller of a request that speaks 1.0 (its version checked, its token known), and the
/// base URL it reached the gateway at; a refusal otherwise, in this binding's shape.
pub struct Caller(Owner, String);

impl FromRequestParts<AppState> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let asked = version::asked(&parts.headers, parts.uri.query());
        version::check(asked.as_deref(), maestro_a2a::jsonrpc::Dialect::V1)
            .map_err(|e| refuse(&e))?;
        let owner = crate::auth::owner(state, &parts.headers)
            .await
            .map_err(|_| {
                let error =
                    A2aError::new(ErrorKind::InvalidRequest, "missing or invalid bearer token");
                let mut response = refuse(&error);
                *response.status_mut() = StatusCode::UNAUTHORIZED;
                response
            })?;
        Ok(Caller(owner, card::base_url(state, &parts.headers)))
    }
}

impl Caller {
    /// The operations' context for this caller.
    fn ctx<'a>(&'a self, state: &'a AppState) -> Ctx<'a> {
        Ctx {
            state,
            owner: &self.0,
            base: &self.1,
        }
    }
}

/// The answer to an operation: its value, or its refusal.
fn respond<T: IntoResponse>(result: Result<T, A2aError>) -> Response {
    result.map_or_else(|error| refuse(&error), IntoResponse::into_response)
}

/// A JSON body (an empty body is `{}` when `empty_ok`).
fn body<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    bytes: &Bytes,
    empty_ok: bool,
) -> Result<T, A2aError> {
    if bytes.is_empty() && empty_ok {
        return serde_json::from_str("{}").map_err(|e| A2aError::invalid_params(e.to_string()));
    }
    if !json_content(headers) {
        return Err(A2aError::new(
            ErrorKind::ContentTypeNotSupported,
            "send the body as application/json or application/a2a+json",
        ));
    }
    if let Some(path) = maestro_domain::storable::nul_path_in_json(bytes) {
        return Err(A2aError::invalid_params(format!(
            "{path} contains a NUL character (\\u0000), which cannot be stored"
        )));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| A2aError::invalid_params(format!("invalid body: {e}")))
}

/// `POST /message:send` and `POST /message:stream`.
pub async fn message(
    State(state): State<AppState>,
    caller: Caller,
    Path(action): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let ctx = caller.ctx(&state);
    let result = async {
        let streaming = match action.as_str() {
            "message:send" => false,
            "message:stream" => true,
            other => {
                let error = format!("no A2A operation at POST /{other}");
                return Err(A2aError::new(ErrorKind::MethodNotFound, error));
            }
        };
        let request: SendMessageRequest = body(&headers, &bytes, false)?;
        if !streaming {
            return super::send_and_answer(ctx, &request).await.map(ok);
        }
        let task_id = ops::send(ctx, &request).await?;
        let stream = sse::open(ctx, task_id, None, Envelope::Bare, Until::Interrupted);
        Ok(stream.await?.into_response())
    };
    respond(result.await)
}

/// `GET /tasks`
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(params): Params,
) -> Response {
    let ctx = caller.ctx(&state);
    let result = async {
        let request = list_request(&params)?;
        ops::list(ctx, &request).await.map(ok)
    };
    respond(result.await)
}

fn list_request(params: &HashMap<String, String>) -> Result<ListTasksRequest, A2aError> {
    let int = |key: &str| {
        params
            .get(key)
            .map(|v| {
                v.parse::<i32>()
                    .map_err(|_| A2aError::invalid_params(format!("{key} is a number")))
            })
            .transpose()
    };
    let status = params
        .get("status")
        .map(|s| {
            TaskState::parse(s)
                .ok_or_else(|| A2aError::invalid_params(format!("unknown status {s}")))
        })
        .transpose()?;
    let after = params
        .get("statusTimestampAfter")
        .map(|t| {
            DateTime::parse_from_rfc3339(t)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| A2aError::invalid_params("statusTimestampAfter is an RFC 3339 time"))
        })
        .transpose()?;
    if params.values().any(|v| v.contains('\0')) {
        return Err(A2aError::invalid_params(
            "a query parameter contains a NUL character",
        ));
    }
    Ok(ListTasksRequest {
        tenant: None,
        context_id: params.get("contextId").cloned(),
        status,
        page_size: int("pageSize")?,
        page_token: params.get("pageToken").cloned(),
        history_length: int("historyLength")?,
        status_timestamp_after: after,
        include_artifacts: params.get("includeArtifacts").map(|v| v == "true"),
    })
}

/// `/tasks/{id}/pushNotificationConfigs`: `POST` creates, `GET` lists; with `/{config}`, `GET`
/// reads and `DELETE` deletes.
async fn push_config(
    ctx: Ctx<'_>,
    method: &Method,
    task: &str,
    rest: &[&str],
    headers: &HeaderMap,
    bytes: &Bytes,
) -> Result<Response, A2aError> {
    let named = |id: &str| PushConfigRequest {
        tenant: None,
        task_id: task.to_owned(),
        id: id.to_owned(),
    };
    match (method, rest) {
        (&Method::POST, []) => {
            let request: TaskPushNotificationConfig = body(headers, bytes, false)?;
            push::create(ctx, &request, Some(task)).await.map(ok)
        }
        (&Method::GET, []) => {
            let request = ListPushConfigsRequest {
                tenant: None,
                task_id: task.to_owned(),
                page_size: None,
                page_token: None,
            };
            push::list(ctx, &request).await.map(ok)
        }
        (&Method::GET, [id]) => push::get(ctx, &named(id)).await.map(ok),
        (&Method::DELETE, [id]) => {
            push::delete(ctx, &named(id)).await?;
            Ok(ok(serde_json::json!({})))
        }
        _ => Err(A2aError::new(
            ErrorKind::MethodNotFound,
            format!("no A2A operation at {method} /tasks/{task}/pushNotificationConfigs"),
        )),
    }
}

/// `GET /extendedAgentCard`
pub async fn extended_card(State(state): State<AppState>, Caller(_, base): Caller) -> Response {
    ok(card::json(&state, &base))
}

/// Everything under `/tasks/{...}`: a task, its cancel and subscribe verbs, its push configs.
pub async fn on_task(
    State(state): State<AppState>,
    caller: Caller,
    method: Method,
    headers: HeaderMap,
    Path(rest): Path<String>,
    Query(params): Params,
    bytes: Bytes,
) -> Response {
    let ctx = caller.ctx(&state);
    let segments: Vec<&str> = rest.split('/').collect();
    let result = match (&method, segments.as_slice()) {
        (&Method::GET, [id]) if !id.contains(':') => {
            let history = params.get("historyLength").map(|h| h.parse::<i32>());
            let history_length = match history.transpose() {
                Ok(h) => h,
                Err(_) => return refuse(&A2aError::invalid_params("historyLength is a number")),
            };
            let request = TaskIdRequest {
                tenant: None,
                id: (*id).to_owned(),
                history_length,
                metadata: None,
            };
            super::get(ctx, &request).await.map(ok)
        }
        (&Method::POST, [verb]) if verb.ends_with(":cancel") => {
            let id = verb.trim_end_matches(":cancel");
            ops::cancel(ctx, id).await.map(ok)
        }
        (&Method::GET | &Method::POST, [verb]) if verb.ends_with(":subscribe") => {
            let id = verb.trim_end_matches(":subscribe");
            let cursor = params.get("lastEventId").cloned().or_else(|| {
                headers
                    .get("last-event-id")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            });
            super::rpc::subscribe(ctx, id, cursor, Envelope::Bare)
                .await
                .map(IntoResponse::into_response)
        }
        (_, [task, "pushNotificationConfigs", rest @ ..]) => {
            push_config(ctx, &method, task, rest, &headers, &bytes).await
        }
        _ => Err(A2aError::new(
            ErrorKind::MethodNotFound,
            format!("no A2A operation at {method} /tasks/{rest}"),
        )),
    };
    result.unwrap_or_else(|error| refuse(&error))
}
