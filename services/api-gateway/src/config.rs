//! Settings of the API gateway, from the environment.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use maestro_domain::Owner;
use maestro_runtime::env::CommonSettings;
use maestro_runtime::{ConfigError, Env};

/// How the gateway runs.
#[derive(Clone)]
pub struct Settings {
    pub common: CommonSettings,
    /// Where to listen; port 0 picks a free port (announced on stdout).
    pub addr: SocketAddr,
    /// Tokens from `API_TOKENS` (by their SHA-256) and the owner each stands for; the
    /// database's tokens (`/api/local/admin/tokens`) come on top.
    pub tokens: HashMap<[u8; 32], Owner>,
    /// Owners whose `API_TOKENS` tokens may manage tokens (`ADMIN_OWNERS`).
    pub admins: Vec<Owner>,
    /// OIDC/JWT bearer tokens, checked against an identity provider's keys (`OIDC_*`).
    pub oidc: Option<crate::oidc::OidcSettings>,
    /// How long a database token's lookup is remembered (`TOKEN_CACHE_MS`): a revoked token
    /// stops working within this long on every gateway.
    pub token_cache: Duration,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Largest task instruction accepted.
    pub max_instruction_bytes: usize,
    /// Largest file attached to a new task (`MAX_ATTACHMENT_BYTES`; also bounded by what one
    /// NATS message carries to the tool-runner).
    pub max_attachment_bytes: usize,
    /// Most files attached to one task (`MAX_ATTACHMENTS`).
    pub max_attachments: usize,
    /// Models a task may ask for; empty means any.
    pub allowed_models: Vec<String>,
    /// Claims a job may take before it fails for good.
    pub job_max_attempts: i32,
    /// Interval of SSE keep-alive comments.
    pub sse_keepalive: Duration,
    /// Items buffered per SSE client before the gateway waits for it.
    pub sse_buffer: usize,
    /// Items an SSE client may fall behind its task's shared feed before it refills from
    /// Postgres and the deltas stream (`SSE_HUB_BACKLOG`).
    pub sse_hub_backlog: usize,
    /// An SSE client that accepts nothing for this long is disconnected (it can resume).
    pub sse_stall: Duration,
    /// After SIGTERM, how long open requests may take to finish.
    pub shutdown_grace: Duration,
    /// The pieces tasks may name (built-ins plus `PIECES_DIR`).
    pub catalog: std::sync::Arc<maestro_domain::piece::Catalog>,
    /// How a task that names no piece gets one (`PIECE_SELECTION`).
    pub selection: maestro_runtime::pieces::Selection,
    /// The gateway's URL as people and A2A clients reach it (`PUBLIC_URL`, or the older
    /// `A2A_PUBLIC_URL`), for the agent card and MCP login links; default: the request's
    /// `Host`), for the agent card.
    pub public_url: Option<String>,
    /// How long a blocking A2A `SendMessage` waits for the task to finish or need the client
    /// before it answers with the task as it is (`A2A_BLOCKING_TIMEOUT_MS`).
    pub a2a_blocking: Duration,
    /// Serve the web UI from this folder instead of the copy built into the binary
    /// (`UI_DIR`, for working on the UI without rebuilding).
    pub ui_dir: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("common", &self.common)
            .field("addr", &self.addr)
            .field("tokens", &format!("<{} tokens>", self.tokens.len()))
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_instruction_bytes", &self.max_instruction_bytes)
            .field("allowed_models", &self.allowed_models)
            .field("job_max_attempts", &self.job_max_attempts)
            .finish()
    }
}

/// The token used when `API_TOKENS` is not set: for local use only.
pub const DEV_TOKENS: &str = "dev-token=dev";

impl Settings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let addr = env.string("GATEWAY_ADDR", "127.0.0.1:8080");
        let addr = addr
            .parse()
            .map_err(|_| env.invalid("GATEWAY_ADDR", "expected host:port"))?;
        if env.opt("API_TOKENS").is_none() {
            tracing::warn!("API_TOKENS is not set: the local development token is accepted");
        }
        let (tokens, plain) = parse_tokens(&env.string("API_TOKENS", DEV_TOKENS))
            .map_err(|reason| env.invalid("API_TOKENS", reason))?;
        if plain > 0 && env.opt("API_TOKENS").is_some() {
            tracing::warn!(
                plain,
                "API_TOKENS holds tokens in plain text: give their SHA-256 instead \
                 (sha256:<hex>=owner), or make them with POST /api/local/admin/tokens"
            );
        }
        let admins = env
            .string("ADMIN_OWNERS", "")
            .split(',')
            .map(str::trim)
            .filter(|o| !o.is_empty())
            .map(Owner::parse)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| env.invalid("ADMIN_OWNERS", e.to_string()))?;
        let allowed_models = env
            .string("LLM_MODELS", "")
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect();
        let catalog = maestro_runtime::pieces::catalog(env)?;
        let selection = maestro_runtime::pieces::selection(env, &catalog)?;
        Ok(Self {
            common: CommonSettings::from_env(env)?,
            catalog: std::sync::Arc::new(catalog),
            selection,
            addr,
            tokens,
            admins,
            token_cache: env.millis("TOKEN_CACHE_MS", Duration::from_secs(2))?,
            oidc: crate::oidc::OidcSettings::from_env(env)?,
            max_body_bytes: env.parse("MAX_BODY_BYTES", 1024 * 1024)?,
            max_attachment_bytes: env.parse("MAX_ATTACHMENT_BYTES", 512 * 1024)?,
            max_attachments: env.parse("MAX_ATTACHMENTS", 20)?,
            max_instruction_bytes: env.parse("MAX_INSTRUCTION_BYTES", 256 * 1024)?,
            allowed_models,
            job_max_attempts: env.parse("JOB_MAX_ATTEMPTS", 5)?,
            sse_keepalive: env.millis("SSE_KEEPALIVE_MS", Duration::from_secs(15))?,
            sse_buffer: env.parse::<usize>("SSE_BUFFER", 256)?.max(1),
            sse_hub_backlog: env.parse::<usize>("SSE_HUB_BACKLOG", 4096)?.max(1),
            sse_stall: env.millis("SSE_STALL_MS", Duration::from_secs(30))?,
            shutdown_grace: env.millis("SHUTDOWN_GRACE_MS", Duration::from_secs(10))?,
            public_url: env.opt("PUBLIC_URL").or_else(|| env.opt("A2A_PUBLIC_URL")),
            a2a_blocking: env.millis("A2A_BLOCKING_TIMEOUT_MS", Duration::from_secs(60))?,
            ui_dir: env.opt("UI_DIR").map(std::path::PathBuf::from),
        })
    }
}

/// `token=owner,sha256:<hex>=owner,…`: each token in plain text (for development) or as the
/// hex SHA-256 of the token. Returns the tokens by hash and how many were in plain text.
fn parse_tokens(spec: &str) -> Result<(HashMap<[u8; 32], Owner>, usize), String> {
    let mut tokens = HashMap::new();
    let mut plain = 0;
    for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (token, owner) = pair.split_once('=').ok_or("expected token=owner pairs")?;
        let token = token.trim();
        let hash = match token.strip_prefix("sha256:") {
            Some(hex) => parse_hex(hex).ok_or("sha256: is followed by 64 hex digits")?,
            None if token.len() < 8 => {
                return Err("every token needs at least 8 characters".to_owned());
            }
            None => {
                plain += 1;
                crate::auth::hash(token)
            }
        };
        let owner = Owner::parse(owner.trim()).map_err(|e| e.to_string())?;
        tokens.insert(hash, owner);
    }
    if tokens.is_empty() {
        return Err("at least one token=owner pair is needed".to_owned());
    }
    Ok((tokens, plain))
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_map_to_owners() {
        let (tokens, plain) = parse_tokens("alice-token=alice, bob-token-1=bob").expect("valid");
        assert_eq!(plain, 2);
        assert_eq!(tokens[&crate::auth::hash("alice-token")].as_str(), "alice");
        assert_eq!(tokens[&crate::auth::hash("bob-token-1")].as_str(), "bob");
        // sha256("carol-token"), as `printf %s carol-token | sha256sum` prints it.
        let hex = "6c0d2c0b430d9d9e3231e2645090c735a5059173d4ddf51f186e3f32e01bc832";
        let (tokens, plain) = parse_tokens(&format!("sha256:{hex}=carol")).expect("valid");
        assert_eq!(plain, 0);
        assert_eq!(tokens[&crate::auth::hash("carol-token")].as_str(), "carol");
        assert!(parse_tokens("sha256:abc=carol").is_err());
        assert!(parse_tokens("short=alice").is_err());
        assert!(parse_tokens("no-owner-here").is_err());
        assert!(parse_tokens("").is_err());
    }
}
