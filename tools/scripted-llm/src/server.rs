//! The HTTP side: `/v1/chat/completions` (streaming and not), `/v1/models`, and a control API
//! under `/_scripted` for tests: the requests received, loading scenarios, reset.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::scenario::{Scenarios, Turn};

/// Requests kept for `/_scripted/requests`.
const MAX_RECORDED: usize = 10_000;
/// Conversations whose last prompt is remembered for cache accounting.
const MAX_CONVERSATIONS: usize = 10_000;
/// Bytes per token, for the token-equivalent counts.
const BYTES_PER_TOKEN: usize = 4;

/// Shared server state.
#[derive(Default)]
pub struct Server {
    scenarios: RwLock<Scenarios>,
    requests: Mutex<VecDeque<Recorded>>,
    served: Mutex<HashMap<(String, usize), u32>>,
    last_prompt: Mutex<HashMap<String, Vec<u8>>>,
    next_id: AtomicU64,
    /// A real server each request is also sent to, for its true usage and cache figures.
    upstream: Option<Upstream>,
}

/// A real OpenAI-compatible server that sees every request (generating one token) so its
/// `usage` — prompt tokens and the prompt-cache reuse it really achieved — replaces the
/// scripted estimate, while the answer itself stays scripted (such servers with small models
/// do not make tool calls).
#[derive(Debug, Clone)]
pub struct Upstream {
    pub http: reqwest::Client,
    /// The base URL with the version path, e.g. `http://127.0.0.1:8089/v1`.
    pub base_url: String,
}

impl Upstream {
    async fn usage(&self, body: &Value) -> Result<Value, String> {
        let mut body = body.clone();
        if let Some(object) = body.as_object_mut() {
            object.insert("stream".into(), Value::Bool(false));
            object.insert("max_tokens".into(), json!(1));
            object.insert("cache_prompt".into(), Value::Bool(true));
            object.remove("stream_options");
        }
        let url = format!("{}/chat/completions", self.base_url.trim_end_matches('/'));
        let response = self
            .http
            .post(url)
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("upstream: {e}"))?;
        let status = response.status();
        let answer: Value = response
            .json()
            .await
            .map_err(|e| format!("upstream answer: {e}"))?;
        if !status.is_success() {
            return Err(format!("upstream answered {status}: {answer}"));
        }
        answer
            .get("usage")
            .cloned()
            .ok_or_else(|| "upstream answer without usage".to_owned())
    }
}

pub fn router(scenarios: Scenarios, upstream: Option<Upstream>) -> Router {
    let server = Arc::new(Server {
        scenarios: RwLock::new(scenarios),
        upstream,
        ..Default::default()
    });
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/_scripted/requests", get(requests))
        .route("/_scripted/scenarios", post(load_scenarios))
        .route("/_scripted/reset", post(reset))
        // Long conversations (tests that flood a stream) send requests of several MB.
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024 * 1024))
        .with_state(server)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = json!({"error": {"message": message.into(), "type": "scripted_error"}});
    (status, Json(body)).into_response()
}

async fn models() -> Json<Value> {
    Json(
        json!({"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "maestro"}]}),
    )
}

async fn requests(State(server): State<Arc<Server>>) -> Json<Value> {
    let recorded: Vec<Recorded> = server
        .requests
        .lock()
        .expect("lock")
        .iter()
        .cloned()
        .collect();
    let requests: Vec<Value> = recorded.iter().map(Recorded::render).collect();
    Json(json!({"requests": requests}))
}

/// A request as it was received. It is parsed for `/_scripted/requests` only when that is
/// asked for: keeping the bytes costs the hot path nothing (a benchmark's thousands of
/// requests went through a deep copy of each parsed body before).
#[derive(Clone)]
struct Recorded {
    scenario: String,
    turn: usize,
    received_at_us: u64,
    raw: Bytes,
    traceparent: Option<String>,
}

impl Recorded {
    /// Its entry: the parsed body, and the exact bytes the client sent for `tools` and
    /// `messages` (`raw_tools`, `raw_messages`), so tests can check byte stability.
    fn render(&self) -> Value {
        let body: Value = serde_json::from_slice(&self.raw).unwrap_or_default();
        let fields: HashMap<String, &RawValue> =
            serde_json::from_slice(&self.raw).unwrap_or_default();
        let text = |key: &str| fields.get(key).map(|r| r.get().to_owned());
        json!({
            "scenario": self.scenario,
            "turn": self.turn,
            "received_at_us": self.received_at_us,
            "body": body,
            "raw_tools": text("tools"),
            "raw_messages": text("messages"),
            "traceparent": self.traceparent,
        })
    }
}

/// The `tools` and `messages` of a request as the client wrote them.
#[derive(Deserialize)]
struct RawParts<'a> {
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Vec<&'a RawValue>,
}

async fn load_scenarios(
    State(server): State<Arc<Server>>,
    Json(scenarios): Json<Scenarios>,
) -> StatusCode {
    *server.scenarios.write().expect("lock") = scenarios;
    StatusCode::NO_CONTENT
}

async fn reset(State(server): State<Arc<Server>>) -> StatusCode {
    server.requests.lock().expect("lock").clear();
    server.served.lock().expect("lock").clear();
    server.last_prompt.lock().expect("lock").clear();
    StatusCode::NO_CONTENT
}

/// What the request asks, as far as the script cares.
struct Asked {
    model: String,
    stream: bool,
    include_usage: bool,
    first_user: String,
    turn: usize,
    conversation: String,
    prompt: Vec<u8>,
}

/// What a request asks; the prompt and the conversation's key are taken from the bytes the
/// client sent (`raw`, the body `body` was parsed from), as a real server's prompt cache sees
/// them.
fn read_request(body: &Value, raw: &[u8]) -> Result<Asked, String> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("`messages` must be an array")?;
    let first_user_at = messages
        .iter()
        .position(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .ok_or("the request has no user message")?;
    let first_user = messages[first_user_at]
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let turn = crate::scenario::turn_of(messages);
    let parts: RawParts = serde_json::from_slice(raw).map_err(|e| e.to_string())?;
    let mut conversation = Sha256::new();
    for message in &parts.messages[..=first_user_at] {
        conversation.update(message.get().as_bytes());
    }
    let mut prompt = parts
        .tools
        .map(|t| t.get().as_bytes().to_vec())
        .unwrap_or_default();
    for message in &parts.messages {
        prompt.extend_from_slice(message.get().as_bytes());
    }
    Ok(Asked {
        model: body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("scripted")
            .to_owned(),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        first_user,
        turn,
        conversation: conversation
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        prompt,
    })
}

async fn chat(
    State(server): State<Arc<Server>>,
    headers: axum::http::HeaderMap,
    raw: Bytes,
) -> Response {
    let body: Value = match serde_json::from_slice(&raw) {
        Ok(body) => body,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid JSON: {e}")),
    };
    let mut asked = match read_request(&body, &raw) {
        Ok(asked) => asked,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let (scenario_name, turn) = {
        let scenarios = server.scenarios.read().expect("lock");
        let messages = body["messages"].as_array().map_or(&[][..], Vec::as_slice);
        let Some((scenario, at)) = scenarios.find(&asked.first_user, messages) else {
            return error(
                StatusCode::BAD_REQUEST,
                "no scenario matches this conversation",
            );
        };
        asked.turn = at;
        let Some(turn) = scenario.turn(asked.turn) else {
            let message = format!("scenario {:?} has no turn {}", scenario.name, asked.turn);
            return error(StatusCode::BAD_REQUEST, message);
        };
        (scenario.name.clone(), turn.clone())
    };
    let traceparent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    server.record(raw.clone(), &scenario_name, asked.turn, traceparent);
    let served = server.count(
        &format!("{}:{scenario_name}", asked.conversation),
        asked.turn,
    );
    if let Some(fail) = turn
        .fail
        .as_ref()
        .filter(|f| f.times == 0 || served <= f.times)
    {
        let mut response = error(
            StatusCode::from_u16(fail.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            fail.body
                .clone()
                .unwrap_or_else(|| format!("scripted failure {}", fail.status)),
        );
        if let Some(secs) = fail.retry_after {
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from(secs));
        }
        return response;
    }
    let mut usage = server.usage(&asked, &turn);
    if let Some(upstream) = &server.upstream {
        match upstream.usage(&body).await {
            Ok(real) => {
                usage["prompt_tokens"] = real["prompt_tokens"].clone();
                usage["prompt_tokens_details"] = json!({
                    "cached_tokens": real.pointer("/prompt_tokens_details/cached_tokens").cloned().unwrap_or(json!(0))
                });
            }
            Err(e) => return error(StatusCode::BAD_GATEWAY, e),
        }
    }
    let drop_after = turn
        .drop_after_chunks
        .as_ref()
        .filter(|d| d.times == 0 || served <= d.times)
        .map(|d| d.chunks);
    let id = format!(
        "chatcmpl-{}",
        server.next_id.fetch_add(1, Ordering::Relaxed)
    );
    if asked.stream {
        stream_response(&id, &asked, &turn, usage, drop_after)
    } else {
        Json(whole_response(&id, &asked, &turn, usage)).into_response()
    }
}

impl Server {
    /// Keep a request for `/_scripted/requests` ([`Recorded`]).
    fn record(&self, raw: Bytes, scenario: &str, turn: usize, traceparent: Option<String>) {
        let mut requests = self.requests.lock().expect("lock");
        if requests.len() == MAX_RECORDED {
            requests.pop_front();
        }
        let received_at_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        requests.push_back(Recorded {
            scenario: scenario.to_owned(),
            turn,
            received_at_us,
            raw,
            traceparent,
        });
    }

    /// How many requests of this conversation's turn have been answered, this one included.
    fn count(&self, conversation: &str, turn: usize) -> u32 {
        let mut served = self.served.lock().expect("lock");
        let n = served.entry((conversation.to_owned(), turn)).or_insert(0);
        *n += 1;
        *n
    }

    /// Token-equivalent usage; cached tokens are the prefix shared with this conversation's
    /// previous request.
    fn usage(&self, asked: &Asked, turn: &Turn) -> Value {
        let mut last = self.last_prompt.lock().expect("lock");
        let shared = last
            .get(&asked.conversation)
            .map(|prev| {
                prev.iter()
                    .zip(&asked.prompt)
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .unwrap_or(0);
        if last.len() >= MAX_CONVERSATIONS {
            last.clear();
        }
        last.insert(asked.conversation.clone(), asked.prompt.clone());
        let prompt_tokens = asked.prompt.len().div_ceil(BYTES_PER_TOKEN);
        let cached_tokens = shared / BYTES_PER_TOKEN;
        let completion_chars = turn.text.as_ref().map_or(0, String::len)
            + turn
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments_text().len())
                .sum::<usize>();
        let completion_tokens = completion_chars.div_ceil(BYTES_PER_TOKEN).max(1);
        json!({
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        })
    }
}

fn call_id(turn_index: usize, index: usize, given: &Option<String>) -> Option<String> {
    match given {
        Some(id) if id.is_empty() => None,
        Some(id) => Some(id.clone()),
        None => Some(format!("call_{turn_index}_{index}")),
    }
}

fn finish_reason(turn: &Turn) -> &'static str {
    if turn.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

fn whole_response(id: &str, asked: &Asked, turn: &Turn, usage: Value) -> Value {
    let calls: Vec<Value> = turn
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"id": call_id(asked.turn, i, &c.id), "type": "function",
                   "function": {"name": c.name, "arguments": c.arguments_text()}})
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": turn.text});
    if let Some(reasoning) = &turn.reasoning {
        message["reasoning_content"] = Value::String(reasoning.clone());
    }
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": id, "object": "chat.completion", "created": now(), "model": asked.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(turn)}],
        "usage": usage,
    })
}

fn chunks_of(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(size.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

/// The `delta`s of the answer, in order.
fn deltas(asked: &Asked, turn: &Turn) -> Vec<Value> {
    let mut deltas = vec![json!({"role": "assistant"})];
    if let Some(reasoning) = &turn.reasoning {
        deltas.extend(
            chunks_of(reasoning, turn.chunk_chars)
                .into_iter()
                .map(|c| json!({"reasoning_content": c})),
        );
    }
    if let Some(text) = &turn.text {
        deltas.extend(
            chunks_of(text, turn.chunk_chars)
                .into_iter()
                .map(|c| json!({"content": c})),
        );
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        let mut head = json!({"index": i, "type": "function", "function": {"name": call.name, "arguments": ""}});
        if let Some(id) = call_id(asked.turn, i, &call.id) {
            head["id"] = Value::String(id);
        }
        deltas.push(json!({"tool_calls": [head]}));
        for part in chunks_of(&call.arguments_text(), turn.chunk_chars) {
            deltas.push(json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}));
        }
    }
    deltas
}

fn stream_response(
    id: &str,
    asked: &Asked,
    turn: &Turn,
    usage: Value,
    drop_after: Option<usize>,
) -> Response {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": id, "object": "chat.completion.chunk", "created": now(), "model": asked.model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut frames: Vec<Value> = deltas(asked, turn)
        .into_iter()
        .map(|d| chunk(d, None))
        .collect();
    frames.push(chunk(json!({}), Some(finish_reason(turn))));
    if asked.include_usage {
        frames.push(
            json!({"id": id, "object": "chat.completion.chunk", "created": now(),
                           "model": asked.model, "choices": [], "usage": usage}),
        );
    }
    let mut frames: Vec<Bytes> = frames
        .into_iter()
        .map(|f| Bytes::from(format!("data: {f}\n\n")))
        .collect();
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    if let Some(n) = turn.stamp_chunks {
        // Placeholders, stamped as they are sent (below).
        let stamped: Vec<Bytes> = (0..n).map(|_| Bytes::from_static(STAMP)).collect();
        frames.splice(1..1, stamped);
    }
    let (id_owned, model) = (id.to_owned(), asked.model.clone());
    let first_delay = Duration::from_millis(turn.delay_ms);
    let between = Duration::from_millis(turn.chunk_delay_ms);
    let stream = futures::stream::unfold(Some((frames.into_iter(), 0usize)), move |state| {
        let (id, model) = (id_owned.clone(), model.clone());
        async move {
            let (mut frames, sent) = state?;
            if drop_after.is_some_and(|limit| sent >= limit) {
                // An error item makes the server abort the connection mid-stream.
                let cut = std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "scripted disconnect",
                );
                return Some((Err::<Bytes, std::io::Error>(cut), None));
            }
            let frame = frames.next()?;
            let delay = if sent == 0 { first_delay } else { between };
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let frame = if frame == STAMP {
                stamp(&id, &model)
            } else {
                frame
            };
            Some((Ok(frame), Some((frames, sent + 1))))
        }
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot build the response",
            )
        })
}

/// Marks a frame to be replaced by a time-stamped text chunk when it is sent.
const STAMP: &[u8] = b"\0stamp";

fn stamp(id: &str, model: &str) -> Bytes {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    let chunk = json!({"id": id, "object": "chat.completion.chunk", "created": now(), "model": model,
                       "choices": [{"index": 0, "delta": {"content": format!("{micros} ")}, "finish_reason": null}]});
    Bytes::from(format!("data: {chunk}\n\n"))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
