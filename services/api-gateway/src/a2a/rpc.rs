//! The JSON-RPC binding: `POST /a2a/v1`, one JSON-RPC 2.0 request per call (and the same
//! calls over NATS, `nats.rs`). Answers are HTTP 200 with a result or an error object (the
//! SDKs read the code from the body), except a missing or unknown bearer token (401).
//! Streaming methods answer with SSE, every event a JSON-RPC response carrying the request's
//! id; a refusal before the first event is a plain JSON answer.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use maestro_a2a::jsonrpc::{self, Dialect, Method};
use maestro_a2a::types::{
    ListTasksRequest, SendMessageRequest, TaskIdRequest, TaskPushNotificationConfig,
};
use maestro_a2a::{A2aError, ErrorKind, v03};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ops::{self, Ctx};
use super::push;
use super::sse::{self, Cursor, Envelope, Until};
use super::{card, version};
use crate::state::AppState;

/// `POST /a2a/v1`
pub async fn handle(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    match call(&state, &headers, uri.query(), &body, Carrier::Http).await {
        Answer::Json(status, body) => (status, Json(body)).into_response(),
        Answer::Stream(stream) => stream.into_response(),
    }
}

/// What carries a JSON-RPC call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// `POST /a2a/v1`: every method, streams as SSE.
    Http,
    /// NATS request/reply (`<prefix>.a2a.rpc`): one reply per request, so the unary methods.
    Nats,
}

/// What a JSON-RPC call answers: a JSON-RPC response (with the HTTP status it goes with), or
/// a stream.
pub enum Answer {
    Json(StatusCode, Value),
    Stream(crate::stream::SseStream),
}

/// One JSON-RPC call, whatever carried it: `headers` hold the bearer token, `A2A-Version`,
/// `Last-Event-ID` and the content type.
pub async fn call(
    state: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    body: &[u8],
    carrier: Carrier,
) -> Answer {
    let answer = |body: Value| Answer::Json(StatusCode::OK, body);
    if !json_content(headers) {
        let error = A2aError::new(
            ErrorKind::ContentTypeNotSupported,
            "send the request as application/json",
        );
        return answer(jsonrpc::error(&Value::Null, &error, Dialect::V1));
    }
    let request = match jsonrpc::parse(body) {
        Ok(request) => request,
        Err((id, error)) => return answer(jsonrpc::error(&id, &error, Dialect::V1)),
    };
    let id = request.id.clone();
    if let Some(path) = maestro_domain::storable::nul_path(&request.params) {
        let error = A2aError::invalid_params(format!(
            "params.{path} contains a NUL character (\\u0000), which cannot be stored"
        ));
        return answer(jsonrpc::error(&id, &error, Dialect::V1));
    }
    let Some((method, dialect)) = Method::parse(&request.method) else {
        let error = A2aError::new(
            ErrorKind::MethodNotFound,
            format!("Method not found: {}", request.method),
        );
        return answer(jsonrpc::error(&id, &error, Dialect::V1));
    };
    let asked = version::asked(headers, query);
    if let Err(error) = version::check(asked.as_deref(), dialect) {
        return answer(jsonrpc::error(&id, &error, dialect));
    }
    let Ok(owner) = crate::auth::owner(state, headers).await else {
        let error = A2aError::new(ErrorKind::InvalidRequest, "missing or invalid bearer token");
        let body = jsonrpc::error(&id, &error, dialect);
        return Answer::Json(StatusCode::UNAUTHORIZED, body);
    };
    if carrier == Carrier::Nats && method.is_streaming() {
        let error = A2aError::unsupported(format!(
            "{} streams, and NATS request/reply carries one answer: call it over HTTP (SSE), \
             or send the message with SendMessage and follow the task's events on the bus",
            request.method
        ));
        return answer(jsonrpc::error(&id, &error, dialect));
    }
    let base = card::base_url(state, headers);
    let ctx = Ctx {
        state,
        owner: &owner,
        base: &base,
    };
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let params = match dialect {
        Dialect::V1 => request.params,
        Dialect::V03 => v03::params_from_v03(method, request.params),
    };
    let call = Call {
        ctx,
        id: &id,
        dialect,
        params,
        last_event_id,
    };
    match call.dispatch(method).await {
        Ok(Outcome::Unary(result)) => answer(jsonrpc::result(&id, result)),
        Ok(Outcome::Stream(stream)) => Answer::Stream(stream),
        Err(error) => answer(jsonrpc::error(&id, &error, dialect)),
    }
}

/// Whether the body is declared as JSON (`application/json` or `application/a2a+json`).
pub fn json_content(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim)
        .is_some_and(|v| v == "application/json" || v == "application/a2a+json")
}

/// What a method answers.
enum Outcome {
    Unary(Value),
    Stream(crate::stream::SseStream),
}

/// One JSON-RPC call of a caller.
struct Call<'a> {
    ctx: Ctx<'a>,
    id: &'a Value,
    dialect: Dialect,
    params: Value,
    last_event_id: Option<String>,
}

impl Call<'_> {
    fn params<T: DeserializeOwned>(&self) -> Result<T, A2aError> {
        serde_json::from_value(self.params.clone())
            .map_err(|e| A2aError::invalid_params(format!("invalid params: {e}")))
    }

    async fn dispatch(self, method: Method) -> Result<Outcome, A2aError> {
        let ctx = self.ctx;
        let envelope = Envelope::JsonRpc(self.id.clone(), self.dialect);
        let value = match method {
            Method::SendMessage => {
                let request: SendMessageRequest = self.params()?;
                to_value(super::send_and_answer(ctx, &request).await?)
            }
            Method::SendStreamingMessage => {
                let request: SendMessageRequest = self.params()?;
                let task_id = ops::send(ctx, &request).await?;
                let stream = sse::open(ctx, task_id, None, envelope, Until::Interrupted);
                return Ok(Outcome::Stream(stream.await?));
            }
            Method::GetTask => {
                let request: TaskIdRequest = self.params()?;
                to_value(super::get(ctx, &request).await?)
            }
            Method::ListTasks => {
                let request: ListTasksRequest = self.params()?;
                to_value(ops::list(ctx, &request).await?)
            }
            Method::CancelTask => {
                let request: TaskIdRequest = self.params()?;
                to_value(ops::cancel(ctx, &request.id).await?)
            }
            Method::SubscribeToTask => {
                let request: TaskIdRequest = self.params()?;
                let cursor = self
                    .params
                    .get("lastEventId")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or(self.last_event_id.clone());
                return Ok(Outcome::Stream(
                    subscribe(ctx, &request.id, cursor, envelope).await?,
                ));
            }
            Method::GetExtendedAgentCard => card::json(ctx.state, ctx.base),
            Method::CreatePushConfig => {
                let request: TaskPushNotificationConfig = self.params()?;
                to_value(push::create(ctx, &request, None).await?)
            }
            Method::GetPushConfig => to_value(push::get(ctx, &self.params()?).await?),
            Method::ListPushConfigs => to_value(push::list(ctx, &self.params()?).await?),
            Method::DeletePushConfig => {
                push::delete(ctx, &self.params()?).await?;
                Value::Object(Default::default())
            }
        };
        Ok(Outcome::Unary(match self.dialect {
            Dialect::V1 => value,
            Dialect::V03 => to_v03(method, &value),
        }))
    }
}

/// `SubscribeToTask` (both bindings): the task's stream from a fresh snapshot, or resumed
/// after `cursor`. A finished task has nothing to subscribe to, unless the client resumes.
pub async fn subscribe(
    ctx: Ctx<'_>,
    raw: &str,
    cursor: Option<String>,
    envelope: Envelope,
) -> Result<crate::stream::SseStream, A2aError> {
    let task_id = ops::readable(ctx, raw).await?;
    let cursor = cursor
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(Cursor::parse)
        .transpose()?;
    if cursor.is_none() {
        let record = ops::record(ctx, task_id).await?;
        let over = record
            .latest_job
            .as_ref()
            .is_some_and(|j| j.status.is_terminal());
        if over {
            return Err(A2aError::unsupported(format!(
                "Task {task_id} is in a terminal state; there is nothing to subscribe to"
            )));
        }
    }
    sse::open(ctx, task_id, cursor, envelope, Until::Over).await
}

/// A 1.0 result as a 0.3 client reads it.
fn to_v03(method: Method, value: &Value) -> Value {
    match method {
        Method::SendMessage => v03::result_to_v03(value),
        Method::GetTask | Method::CancelTask => v03::task_to_v03(value),
        Method::CreatePushConfig | Method::GetPushConfig => v03::push_config_to_v03(value),
        Method::ListPushConfigs => Value::Array(
            value["configs"]
                .as_array()
                .map(|c| c.iter().map(v03::push_config_to_v03).collect())
                .unwrap_or_default(),
        ),
        Method::DeletePushConfig => Value::Null,
        _ => value.clone(),
    }
}

fn to_value(value: impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}
