//! The agent card (`GET /.well-known/agent-card.json`, no auth): who MAESTRO is to an A2A
//! client, where its bindings are, how to authenticate, and one skill per installed piece.
//! Served with `Cache-Control`, a weak `ETag` and `304` for `If-None-Match`.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maestro_a2a::card::{
    AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentProvider, AgentSkill,
    HttpAuthSecurityScheme, PROTOCOL_VERSION, SecurityRequirement, SecurityScheme, StringList,
};
use maestro_domain::piece;
use sha2::{Digest, Sha256};

use super::ops::{CONTINUE_KEY, INPUT_MODES};
use crate::state::AppState;

/// Where the JSON-RPC binding is served.
pub const JSONRPC_PATH: &str = "/a2a/v1";
/// Where the HTTP+JSON binding's paths start.
pub const REST_PATH: &str = "/a2a/rest";
/// The extension: `SubscribeToTask` resumes after an SSE id.
pub const RESUME_EXTENSION: &str = "https://maestro.dev/a2a/extensions/stream-resume/v1";
/// The extension: a message to a finished task continues it.
pub const CONTINUE_EXTENSION: &str = "https://maestro.dev/a2a/extensions/continue/v1";

/// How long clients may keep the card.
const MAX_AGE_SECS: u32 = 300;

/// The card, its URLs based at `base` (`http://host:port`).
pub fn card(state: &AppState, base: &str) -> AgentCard {
    let interface = |path: &str, binding: &str, version: &str| AgentInterface {
        url: format!("{base}{path}"),
        protocol_binding: binding.to_owned(),
        protocol_version: version.to_owned(),
    };
    let skills = skills(state);
    let bearer = SecurityScheme {
        http_auth_security_scheme: Some(HttpAuthSecurityScheme {
            description: "The same bearer tokens as MAESTRO's REST API (API_TOKENS).".to_owned(),
            scheme: "Bearer".to_owned(),
            bearer_format: String::new(),
        }),
    };
    let modes: Vec<String> = INPUT_MODES.iter().map(|m| (*m).to_owned()).collect();
    AgentCard {
        name: "MAESTRO".to_owned(),
        description: "A durable agent task execution platform: LLM agents carry out tasks \
                      step by step with sandboxed tools, pause for people, and survive crashes \
                      without losing or repeating a step. Pick a skill (a piece) with \
                      `metadata.skill`."
            .to_owned(),
        supported_interfaces: vec![
            interface(JSONRPC_PATH, "JSONRPC", PROTOCOL_VERSION),
            interface(REST_PATH, "HTTP+JSON", PROTOCOL_VERSION),
            interface(JSONRPC_PATH, "JSONRPC", "0.3"),
        ],
        provider: Some(AgentProvider {
            url: base.to_owned(),
            organization: "MAESTRO".to_owned(),
        }),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        documentation_url: None,
        capabilities: capabilities(),
        security_schemes: BTreeMap::from([("bearer".to_owned(), bearer)]),
        security_requirements: vec![SecurityRequirement {
            schemes: BTreeMap::from([("bearer".to_owned(), StringList::default())]),
        }],
        default_input_modes: modes.clone(),
        default_output_modes: modes,
        skills,
        icon_url: None,
    }
}

/// The card as JSON, with the fields 0.3 clients read merged in.
pub fn json(state: &AppState, base: &str) -> serde_json::Value {
    let card = serde_json::to_value(card(state, base)).expect("the card serializes");
    maestro_a2a::v03::card_with_v03(&card, &format!("{base}{JSONRPC_PATH}"))
}

/// One skill per piece, and the router.
fn skills(state: &AppState) -> Vec<AgentSkill> {
    let mut skills: Vec<AgentSkill> = state
        .settings
        .catalog
        .pieces()
        .map(|p| AgentSkill {
            id: p.name.clone(),
            name: p.name.clone(),
            description: p.description.clone(),
            tags: std::iter::once("piece".to_owned())
                .chain(p.movements.iter().map(|m| m.name.clone()))
                .collect(),
            examples: Vec::new(),
            input_modes: Vec::new(),
            output_modes: Vec::new(),
        })
        .collect();
    skills.push(AgentSkill {
        id: piece::ROUTER.to_owned(),
        name: "Choose for me".to_owned(),
        description: "A router reads the request and picks the piece that fits it.".to_owned(),
        tags: vec!["router".to_owned()],
        examples: Vec::new(),
        input_modes: Vec::new(),
        output_modes: Vec::new(),
    });
    skills
}

/// What this server can do, and its extensions.
fn capabilities() -> AgentCapabilities {
    AgentCapabilities {
        streaming: Some(true),
        push_notifications: Some(true),
        extensions: vec![
            AgentExtension {
                uri: RESUME_EXTENSION.to_owned(),
                description: "Every event of SendStreamingMessage and SubscribeToTask has an SSE \
                              id; SubscribeToTask with Last-Event-ID (or params.lastEventId / \
                              ?lastEventId=) replays every later event exactly once, in order, \
                              then goes live."
                    .to_owned(),
                required: false,
                params: None,
            },
            AgentExtension {
                uri: CONTINUE_EXTENSION.to_owned(),
                description: format!(
                    "A message with the taskId of a finished task and metadata \
                     {{\"{CONTINUE_KEY}\": true}} continues it: a new job that remembers the \
                     task's conversation."
                ),
                required: false,
                params: None,
            },
        ],
        extended_agent_card: Some(true),
    }
}

/// `http://<host>` of the request (or `PUBLIC_URL`).
pub fn base_url(state: &AppState, headers: &HeaderMap) -> String {
    crate::routes::base_url(state, headers)
}

/// `GET /.well-known/agent-card.json`
pub async fn public(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let card = json(&state, &base_url(&state, &headers));
    let body = serde_json::to_vec(&card).expect("the card serializes");
    let digest = Sha256::digest(&body);
    let etag = format!(
        "W/\"{}\"",
        digest[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let cache = format!("public, max-age={MAX_AGE_SECS}");
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    if let Ok(value) = HeaderValue::from_str(&cache) {
        headers.insert(header::CACHE_CONTROL, value);
    }
    response
}
