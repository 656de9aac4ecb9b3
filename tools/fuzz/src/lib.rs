//! Fuzz targets: every parser and boundary that reads bytes MAESTRO does not control, each a
//! function of `&[u8]` that checks its invariant — a clear refusal (a 4xx, an error result
//! the model reads) or a well-formed value, never a panic, and nothing unstorable on the way
//! to Postgres. `fuzz/` runs them under libFuzzer (`scripts/fuzz`); `tests/corpus.rs` replays
//! the corpus kept in `fuzz/corpus/<target>/` on every test run.

use std::sync::OnceLock;

use axum::response::IntoResponse;
use bytes::Bytes;
use futures::StreamExt as _;
use maestro_domain::storable;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A fuzz target: panics when its invariant does not hold for the input.
pub type Target = fn(&[u8]);

/// Every target by name (the names of `fuzz/fuzz_targets/*.rs` and `fuzz/corpus/*`).
pub const TARGETS: &[(&str, Target)] = &[
    ("llm_stream", llm_stream),
    ("tool_arguments", tool_arguments),
    ("piece", piece),
    ("tool_policy", tool_policy),
    ("api_request", api_request),
    ("a2a_jsonrpc", a2a_jsonrpc),
    ("mcp_reply", mcp_reply),
    ("tool_output", tool_output),
    ("egress_request", egress_request),
    ("schedule", schedule),
];

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// Split `data` at the first `sep`: two inputs from one.
fn split(data: &[u8], sep: u8) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == sep) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

fn assert_storable(value: &Value, what: &str) {
    assert!(
        storable::nul_path(value).is_none(),
        "{what} holds a NUL after sanitizing: {value}"
    );
}

/// The LLM's SSE stream, cut into chunks of a size the first byte picks: the SSE parser gives
/// the same events whole or in pieces; the chat stream yields events and then ends or fails
/// with a reason (invalid UTF-8, NUL, junk JSON, giant lines, no `[DONE]`); the completion's
/// text and tool calls are storable once sanitized and their arguments parse or are refused.
pub fn llm_stream(data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let size = usize::from(seed % 64) + 1;
    let chunks: Vec<Bytes> = body.chunks(size).map(Bytes::copy_from_slice).collect();
    let parsed = |chunks: Vec<Bytes>| {
        use eventsource_stream::Eventsource as _;
        let body = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
        runtime().block_on(async {
            body.eventsource()
                .map(|event| event.map_err(|e| e.to_string()))
                .collect::<Vec<_>>()
                .await
        })
    };
    let whole = parsed(vec![Bytes::copy_from_slice(body)]);
    let pieces = parsed(chunks.clone());
    // The same events whole or in pieces; with an error (invalid UTF-8, say) only the events
    // before it count, and a whole body meets it no later than its pieces do.
    let upto = |events: &[Result<eventsource_stream::Event, String>]| {
        events
            .iter()
            .take_while(|e| e.is_ok())
            .cloned()
            .collect::<Vec<_>>()
    };
    let (before_whole, before_pieces) = (upto(&whole), upto(&pieces));
    if whole.iter().all(Result::is_ok) && pieces.iter().all(Result::is_ok) {
        assert_eq!(whole, pieces, "the same events whole or in pieces");
    } else {
        let shorter = before_whole.len().min(before_pieces.len());
        assert_eq!(
            before_whole[..shorter],
            before_pieces[..shorter],
            "the same events before an error"
        );
    }
    let completion = runtime().block_on(async {
        let mut stream = maestro_llm::ChatStream::from_chunks(chunks);
        let mut accumulator = maestro_llm::Accumulator::default();
        let mut events = 0usize;
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { break };
            accumulator.push(&event);
            events += 1;
            assert!(events <= body.len() + 1, "no more events than bytes");
        }
        accumulator.finish()
    });
    let mut stored = json!({
        "content": completion.content,
        "model": completion.model,
        "calls": completion.tool_calls.iter().map(|c| json!([c.id, c.function.name, c.function.arguments])).collect::<Vec<_>>(),
    });
    storable::json(&mut stored);
    assert_storable(&stored, "the completion");
    for call in &completion.tool_calls {
        tool_arguments(call.function.arguments.as_bytes());
    }
}

/// The model's tool-call arguments (truncated, invalid, not an object, huge, any characters):
/// an object, or the `Error: arguments …` result the model reads; storable once sanitized.
pub fn tool_arguments(data: &[u8]) {
    let raw = String::from_utf8_lossy(data);
    match maestro_domain::tools::parse_arguments(&raw) {
        Ok(mut value) => {
            assert!(value.is_object(), "arguments are an object: {value}");
            storable::json(&mut value);
            assert_storable(&value, "the arguments");
            let _ = maestro_domain::tools::arguments_hash(&value);
        }
        Err(reason) => assert!(reason.starts_with("Error: arguments"), "{reason}"),
    }
}

/// A piece file (any text): a piece set with it, or a refusal with its reason.
pub fn piece(data: &[u8]) {
    let yaml = String::from_utf8_lossy(data).into_owned();
    if let Ok(piece) = maestro_domain::piece::Piece::parse("fuzz.yaml", &yaml) {
        let _ = piece.targets();
        for movement in &piece.movements {
            for tool in ["shell", "write_file", "ask_user"] {
                let _ = movement.refusal(tool);
            }
        }
    }
    if let Ok(pieces) = maestro_domain::piece::Catalog::with(vec![("fuzz.yaml".to_owned(), yaml)]) {
        assert!(pieces.pieces().count() >= 1);
    }
}

/// A workspace policy file (any bytes), and its command patterns against any command: a
/// policy or a refusal; a decision for any call, in bounded time.
pub fn tool_policy(data: &[u8]) {
    let (policy, command) = split(data, 0xff);
    let command = String::from_utf8_lossy(command);
    if let Ok(policy) = serde_json::from_slice::<maestro_domain::policy::ToolPolicy>(policy) {
        for tool in [
            "shell",
            "http_fetch",
            "write_file",
            "read_file",
            "mcp__x__y",
        ] {
            let _ = policy.refusal(tool, &json!({"command": command, "url": command}), &[]);
        }
    }
    let (pattern, text) = command.split_once('\n').unwrap_or((&command, ""));
    let _ = maestro_domain::policy::wildcard(pattern, text);
}

/// The status a rejection of the API answers with: always a 4xx.
fn assert_client_error(error: maestro_api_gateway::error::ApiError, what: &str) {
    let status = error.into_response().status();
    assert!(status.is_client_error(), "{what} answered {status}");
}

/// A REST body as a route reads it (`ApiJson`: the NUL check, then the typed body).
fn body<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    if let Err(error) = maestro_api_gateway::json::refuse_nul(bytes) {
        assert_client_error(error, "a body with a NUL");
        return None;
    }
    if let Err(error) = maestro_api_gateway::json::refuse_non_object(bytes) {
        assert_client_error(error, "a body that is not an object");
        return None;
    }
    match axum::Json::<T>::from_bytes(bytes) {
        Ok(axum::Json(value)) => Some(value),
        Err(rejection) => {
            assert_client_error(rejection.into(), std::any::type_name::<T>());
            None
        }
    }
}

/// A query string as a route reads it.
fn query<T: DeserializeOwned>(uri: &axum::http::Uri) {
    let parsed = axum::extract::Query::<T>::try_from_uri(uri);
    if let Err(error) = maestro_api_gateway::routes::query(parsed) {
        assert_client_error(error, std::any::type_name::<T>());
    }
}

/// A REST request body for every route that reads one, and a query string for every listing
/// (any bytes): the typed request, or a 4xx `ApiError` — never a 5xx.
pub fn api_request(data: &[u8]) {
    use maestro_api::{
        ContinueTask, CreateSchedule, CreateTask, CreateWebhook, DecideRequest, NewComment,
        TokenRequest,
    };
    use maestro_api_gateway::routes;
    let _ = body::<CreateTask>(data);
    let _ = body::<NewComment>(data);
    let _ = body::<ContinueTask>(data);
    let _ = body::<DecideRequest>(data);
    let _ = body::<CreateSchedule>(data);
    let _ = body::<TokenRequest>(data);
    if let Some(webhook) = body::<CreateWebhook>(data)
        && let Err(error) = maestro_api_gateway::validate::http_url(&webhook.url)
    {
        assert_client_error(error, "a webhook URL");
    }
    let text = String::from_utf8_lossy(data);
    let Ok(uri) = format!("/api/local/x?{text}").parse::<axum::http::Uri>() else {
        return; // not a request line a client can send: hyper answers 400 itself
    };
    query::<routes::PageQuery>(&uri);
    query::<routes::actions::ListQuery>(&uri);
    query::<routes::inbox::ListQuery>(&uri);
    query::<routes::inbox::StreamQuery>(&uri);
    query::<routes::stream::StreamQuery>(&uri);
    query::<routes::history::EventsQuery>(&uri);
    query::<routes::webhooks::DeliveriesQuery>(&uri);
    if let Ok(axum::extract::Query(page)) =
        axum::extract::Query::<routes::PageQuery>::try_from_uri(&uri)
    {
        if let Err(error) = routes::page_limit(page.limit) {
            assert_client_error(error, "a page limit");
        }
        if let Err(error) = routes::before::<i64>(page.before.as_deref(), "a number") {
            assert_client_error(error, "a cursor");
        }
    }
}

/// An A2A JSON-RPC request body (any bytes): a request, or the JSON-RPC error to answer with;
/// a NUL in its params is found.
pub fn a2a_jsonrpc(data: &[u8]) {
    match maestro_a2a::jsonrpc::parse(data) {
        Ok(request) => {
            let _ = maestro_a2a::jsonrpc::Method::parse(&request.method);
            let _ = storable::nul_path(&request.params);
            let answer = maestro_a2a::jsonrpc::result(&request.id, request.params);
            assert!(answer.is_object());
        }
        Err((id, _)) => assert!(matches!(
            id,
            Value::Null | Value::String(_) | Value::Number(_)
        )),
    }
}

/// An MCP server's messages (any bytes, line by line): rmcp reads each as a JSON-RPC message
/// without panicking; a result becomes text the model reads, storable once sanitized; a tool
/// list becomes tool specs.
pub fn mcp_reply(data: &[u8]) {
    for line in data.split(|&b| b == b'\n') {
        let _ = serde_json::from_slice::<rmcp::model::ServerJsonRpcMessage>(line);
        let Ok(message) = serde_json::from_str::<Value>(&String::from_utf8_lossy(line)) else {
            continue;
        };
        let result = &message["result"];
        let (Ok(text) | Err(text)) = maestro_tool_runner::mcp::call_outcome(result);
        let shown = storable::tool_output(text);
        assert!(!shown.contains('\0'));
        for tool in result["tools"].as_array().into_iter().flatten() {
            let _ = maestro_tool_runner::mcp::spec("fuzz", tool);
        }
    }
}

/// A tool's output with any bytes (read lossily, as programs' output is): stored with no NUL,
/// with the count of the NULs it had told.
pub fn tool_output(data: &[u8]) {
    let output = String::from_utf8_lossy(data).into_owned();
    let nuls = output.matches('\0').count();
    let shown = storable::tool_output(output.clone());
    assert!(!shown.contains('\0'));
    if nuls == 0 {
        assert_eq!(shown, output);
    } else {
        assert!(shown.contains(&format!("[{nuls} NUL byte(s) in this output")));
    }
    let mut value = json!({"output": output, output.clone(): [output]});
    assert_eq!(storable::json(&mut value), nuls * 3);
    assert_storable(&value, "an event payload");
}

/// A request head sent to the sandbox's egress proxy (any bytes): a tunnel or a forward with
/// a rewritten head, or a refusal.
pub fn egress_request(data: &[u8]) {
    use maestro_tool_runner::sandbox::egress::{Request, parse_request};
    if let Ok(Request::Forward { head, .. }) = parse_request(data) {
        assert!(head.ends_with(b"Connection: close\r\n\r\n"));
    }
}

/// A schedule's cron expression and time zone (a person's input): a schedule or a refusal;
/// an accepted one fires after any instant, on a whole second.
pub fn schedule(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (expr, tz) = text.split_once('\n').unwrap_or((&text, "UTC"));
    let Ok(spec) = maestro_domain::schedule::CronSpec::parse(expr, tz) else {
        return;
    };
    let now = chrono::DateTime::from_timestamp(1_780_000_000, 500_000_000).expect("a time");
    if let Some(next) = spec.next_after(now) {
        assert!(next > now, "{expr:?} in {tz:?} fires after now");
        assert_eq!(next.timestamp_subsec_nanos(), 0, "on a whole second");
    }
    let _ = spec.describe();
}
