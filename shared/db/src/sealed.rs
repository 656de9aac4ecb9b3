//! Secrets at rest: MCP tokens and OAuth grants, webhook secrets, A2A push credentials are
//! sealed with XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305`) under a key from the
//! environment (`SECRETS_KEYS`) before they are written, and opened when read. A sealed value
//! is text: `sealed:v1:<key id>:<base64 of nonce ‖ ciphertext>`; its additional data names the
//! column and row it belongs to, so a sealed value copied into another row does not open.
//!
//! Keys: `SECRETS_KEYS=<id>:<base64 32 bytes>,<id>:<…>`. The first seals; every one listed
//! opens. Rotation: put a new key first and restart the services (they read both), run
//! `maestro-migrate --reseal` (every secret sealed again under the first key), then drop the
//! old key. Without `SECRETS_KEYS`, values are written as they are (a warning at start-up),
//! and values written before keys were set are still read: they are sealed on reseal.

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::DbError;

const PREFIX: &str = "sealed:v1:";

/// The keys secrets are sealed and opened with.
pub struct Keyring {
    sealing: String,
    keys: HashMap<String, XChaCha20Poly1305>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ids: Vec<&String> = self.keys.keys().collect();
        ids.sort();
        f.debug_struct("Keyring")
            .field("sealing", &self.sealing)
            .field("keys", &ids)
            .finish()
    }
}

impl Keyring {
    /// `<id>:<base64 32 bytes>,…`; the first seals.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut keys = HashMap::new();
        let mut sealing = None;
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (id, key) = item
                .split_once(':')
                .ok_or("expected <id>:<base64 key> items")?;
            let valid_id = !id.is_empty()
                && id.len() <= 32
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !valid_id {
                return Err(format!("key id {id:?}: 1 to 32 letters, digits, '-', '_'"));
            }
            let bytes = STANDARD
                .decode(key.trim())
                .map_err(|_| format!("key {id}: not base64"))?;
            if bytes.len() != 32 {
                return Err(format!("key {id}: {} bytes, not 32", bytes.len()));
            }
            let cipher = XChaCha20Poly1305::new_from_slice(&bytes)
                .map_err(|_| format!("key {id}: not a key"))?;
            if keys.insert(id.to_owned(), cipher).is_some() {
                return Err(format!("key id {id} is listed twice"));
            }
            sealing.get_or_insert_with(|| id.to_owned());
        }
        let sealing = sealing.ok_or("no key")?;
        Ok(Self { sealing, keys })
    }

    fn seal(&self, plain: &str, context: &str) -> String {
        let cipher = &self.keys[&self.sealing];
        let mut nonce = [0u8; 24];
        getrandom::fill(&mut nonce).expect("the operating system provides randomness");
        let sealed = cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: plain.as_bytes(),
                    aad: context.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 seals any message");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        format!("{PREFIX}{}:{}", self.sealing, STANDARD.encode(bytes))
    }

    fn open(&self, id: &str, body: &str, context: &str) -> Result<String, DbError> {
        let cipher = self.keys.get(id).ok_or_else(|| {
            DbError::corrupt(format!(
                "a secret is sealed with key {id:?}, which SECRETS_KEYS does not list"
            ))
        })?;
        let bytes = STANDARD
            .decode(body)
            .map_err(|_| DbError::corrupt("a sealed secret is not base64"))?;
        if bytes.len() < 24 {
            return Err(DbError::corrupt("a sealed secret is too short"));
        }
        let (nonce, sealed) = bytes.split_at(24);
        let nonce: [u8; 24] = nonce.try_into().expect("split at 24");
        let plain = cipher
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: sealed,
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| {
                DbError::corrupt(format!(
                    "a secret does not open with key {id:?} (tampered, or moved from another row)"
                ))
            })?;
        String::from_utf8(plain).map_err(|_| DbError::corrupt("a sealed secret is not text"))
    }
}

static KEYRING: OnceLock<Option<Keyring>> = OnceLock::new();

/// Install this process's keys (once, at start-up; later calls change nothing). `None`:
/// secrets are written as they are.
pub fn install(keyring: Option<Keyring>) {
    let _ = KEYRING.set(keyring);
}

fn keyring() -> Option<&'static Keyring> {
    KEYRING.get().and_then(Option::as_ref)
}

/// Whether secrets are sealed in this process.
pub fn sealing() -> bool {
    keyring().is_some()
}

/// `plain`, sealed for `context` (the column and row it is written to) when there are keys.
pub fn seal(plain: &str, context: &str) -> String {
    match keyring() {
        Some(keys) => keys.seal(plain, context),
        None => plain.to_owned(),
    }
}

/// What [`seal`] sealed for `context`; a value that was never sealed is returned as it is.
pub fn open(stored: &str, context: &str) -> Result<String, DbError> {
    let Some(rest) = stored.strip_prefix(PREFIX) else {
        return Ok(stored.to_owned());
    };
    let (id, body) = rest
        .split_once(':')
        .ok_or_else(|| DbError::corrupt("a sealed secret has no key id"))?;
    let keys = keyring().ok_or_else(|| {
        DbError::corrupt("a secret is sealed, but SECRETS_KEYS is not set in this service")
    })?;
    keys.open(id, body, context)
}

/// Whether `stored` is sealed under a key other than the one that seals now (or not at all):
/// what `--reseal` rewrites.
pub fn stale(stored: &str) -> bool {
    match (keyring(), stored.strip_prefix(PREFIX)) {
        (Some(keys), Some(rest)) => !rest.starts_with(&format!("{}:", keys.sealing)),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// [`seal`] for an optional value.
pub fn seal_opt(plain: Option<&str>, context: &str) -> Option<String> {
    plain.map(|p| seal(p, context))
}

/// [`open`] for an optional value.
pub fn open_opt(stored: Option<String>, context: &str) -> Result<Option<String>, DbError> {
    stored.map(|s| open(&s, context)).transpose()
}

/// Seal every stored secret again under the key that seals now (those sealed under an older
/// key, or never sealed): the step of a key rotation. Returns how many values it rewrote.
/// Each row is rewritten only if it still holds what was read (a concurrent change wins).
pub async fn reseal_all(pool: &sqlx::PgPool) -> Result<usize, DbError> {
    if !sealing() {
        return Err(DbError::corrupt(
            "SECRETS_KEYS is not set: nothing to seal with",
        ));
    }
    let mut rewritten = 0;
    let tokens: Vec<(String, String, String, Option<serde_json::Value>)> =
        sqlx::query_as("SELECT owner, server, token, credentials FROM mcp_tokens")
            .fetch_all(pool)
            .await?;
    for (owner, server, token, credentials) in tokens {
        let grant_stale = matches!(&credentials, Some(serde_json::Value::String(s)) if stale(s))
            || matches!(&credentials, Some(v) if !v.is_string());
        if !stale(&token) && !grant_stale {
            continue;
        }
        let context = format!("mcp_tokens.token/{owner}/{server}");
        let new_token = seal(&open(&token, &context)?, &context);
        let grant_context = format!("mcp_tokens.credentials/{owner}/{server}");
        let new_credentials = match &credentials {
            Some(serde_json::Value::String(s)) => Some(serde_json::Value::String(seal(
                &open(s, &grant_context)?,
                &grant_context,
            ))),
            Some(plain) => Some(serde_json::Value::String(seal(
                &plain.to_string(),
                &grant_context,
            ))),
            None => None,
        };
        let done = sqlx::query(
            "UPDATE mcp_tokens SET token = $3, credentials = $4
              WHERE owner = $1 AND server = $2 AND token = $5
                AND credentials IS NOT DISTINCT FROM $6",
        )
        .bind(&owner)
        .bind(&server)
        .bind(&new_token)
        .bind(&new_credentials)
        .bind(&token)
        .bind(&credentials)
        .execute(pool)
        .await?;
        rewritten += done.rows_affected() as usize;
    }
    let secrets: Vec<(uuid::Uuid, String)> =
        sqlx::query_as("SELECT id, secret FROM webhook_subscriptions")
            .fetch_all(pool)
            .await?;
    for (id, secret) in secrets.into_iter().filter(|(_, s)| stale(s)) {
        let context = crate::webhooks::secret_context(maestro_domain::WebhookId(id));
        let done = sqlx::query(
            "UPDATE webhook_subscriptions SET secret = $2 WHERE id = $1 AND secret = $3",
        )
        .bind(id)
        .bind(seal(&open(&secret, &context)?, &context))
        .bind(&secret)
        .execute(pool)
        .await?;
        rewritten += done.rows_affected() as usize;
    }
    type PushRow = (uuid::Uuid, String, Option<String>, Option<String>);
    let pushes: Vec<PushRow> =
        sqlx::query_as("SELECT task_id, id, token, auth_credentials FROM a2a_push_configs")
            .fetch_all(pool)
            .await?;
    for (task_id, id, token, credentials) in pushes {
        let is_stale = |v: &Option<String>| v.as_deref().is_some_and(stale);
        if !is_stale(&token) && !is_stale(&credentials) {
            continue;
        }
        let (token_context, credentials_context) =
            crate::a2a::push_contexts(maestro_domain::TaskId(task_id), &id);
        let reseal = |v: &Option<String>, context: &str| -> Result<Option<String>, DbError> {
            v.as_deref()
                .map(|v| open(v, context).map(|plain| seal(&plain, context)))
                .transpose()
        };
        let done = sqlx::query(
            "UPDATE a2a_push_configs SET token = $3, auth_credentials = $4
              WHERE task_id = $1 AND id = $2 AND token IS NOT DISTINCT FROM $5
                AND auth_credentials IS NOT DISTINCT FROM $6",
        )
        .bind(task_id)
        .bind(&id)
        .bind(reseal(&token, &token_context)?)
        .bind(reseal(&credentials, &credentials_context)?)
        .bind(&token)
        .bind(&credentials)
        .execute(pool)
        .await?;
        rewritten += done.rows_affected() as usize;
    }
    Ok(rewritten)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> String {
        STANDARD.encode([byte; 32])
    }

    #[test]
    fn sealed_values_open_with_their_context_and_any_listed_key() {
        let old = Keyring::parse(&format!("k1:{}", key(1))).expect("keys");
        let sealed = old.seal("s3cret", "mcp_tokens.token/alice/github");
        assert!(sealed.starts_with("sealed:v1:k1:"), "{sealed}");
        assert!(!sealed.contains("s3cret"));
        let rest = &sealed[PREFIX.len()..];
        let (id, body) = rest.split_once(':').expect("id");
        assert_eq!(
            old.open(id, body, "mcp_tokens.token/alice/github")
                .expect("opens"),
            "s3cret"
        );
        assert!(
            old.open(id, body, "mcp_tokens.token/bob/github").is_err(),
            "another row"
        );
        // Rotated: the new key seals, the old one still opens.
        let both = Keyring::parse(&format!("k2:{}, k1:{}", key(2), key(1))).expect("keys");
        assert_eq!(
            both.open(id, body, "mcp_tokens.token/alice/github")
                .expect("opens"),
            "s3cret"
        );
        assert!(both.seal("x", "c").starts_with("sealed:v1:k2:"));
        let new_only = Keyring::parse(&format!("k2:{}", key(2))).expect("keys");
        assert!(
            new_only
                .open(id, body, "mcp_tokens.token/alice/github")
                .is_err()
        );
        // Two seals of one value differ (a fresh nonce each).
        assert_ne!(both.seal("x", "c"), both.seal("x", "c"));
    }

    #[test]
    fn key_specs_are_checked() {
        assert!(Keyring::parse("").is_err());
        assert!(Keyring::parse("k1").is_err());
        assert!(Keyring::parse("k1:notbase64!").is_err());
        assert!(Keyring::parse(&format!("k1:{}", STANDARD.encode([0u8; 16]))).is_err());
        assert!(Keyring::parse(&format!("k1:{},k1:{}", key(1), key(2))).is_err());
        assert!(Keyring::parse(&format!("bad id:{}", key(1))).is_err());
    }
}
