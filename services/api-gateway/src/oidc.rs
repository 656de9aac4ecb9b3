//! OIDC/JWT bearer tokens: a token that is a JWT is checked against the identity provider's
//! JSON Web Key Set (`OIDC_JWKS_URL`) with `jsonwebtoken` — signature, `iss`, `aud`, `exp`
//! (30 s of leeway) — and a claim of it (`OIDC_OWNER_CLAIM`, `sub` by default) names the
//! owner. Keys are fetched when first needed, again every ten minutes, and again (at most every
//! 30 s) when a token names a key id the set does not have, so a rotated key is picked up.

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use maestro_domain::Owner;
use maestro_runtime::{ConfigError, Env};
use tokio::sync::Mutex;

/// How OIDC tokens are checked.
#[derive(Debug, Clone)]
pub struct OidcSettings {
    pub jwks_url: String,
    pub issuer: String,
    pub audience: Vec<String>,
    pub owner_claim: String,
}

impl OidcSettings {
    /// `OIDC_JWKS_URL`, `OIDC_ISSUER`, `OIDC_AUDIENCE` (comma-separated), `OIDC_OWNER_CLAIM`;
    /// `None` when `OIDC_JWKS_URL` is not set.
    pub fn from_env(env: &Env) -> Result<Option<Self>, ConfigError> {
        let Some(jwks_url) = env.opt("OIDC_JWKS_URL") else {
            return Ok(None);
        };
        if !(jwks_url.starts_with("https://") || jwks_url.starts_with("http://")) {
            return Err(env.invalid("OIDC_JWKS_URL", "an http(s) URL"));
        }
        let issuer = env
            .opt("OIDC_ISSUER")
            .ok_or_else(|| env.invalid("OIDC_ISSUER", "needed with OIDC_JWKS_URL"))?;
        let audience: Vec<String> = env
            .string("OIDC_AUDIENCE", "")
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        if audience.is_empty() {
            return Err(env.invalid("OIDC_AUDIENCE", "needed with OIDC_JWKS_URL"));
        }
        Ok(Some(Self {
            jwks_url,
            issuer,
            audience,
            owner_claim: env.string("OIDC_OWNER_CLAIM", "sub"),
        }))
    }
}

/// The algorithms a token may be signed with (never `none`, never a shared secret).
const ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::EdDSA,
];

/// Keys are fetched again after this long.
const MAX_AGE: Duration = Duration::from_secs(600);
/// A token with a key id the set does not have fetches it again, at most this often.
const REFETCH_AFTER: Duration = Duration::from_secs(30);

/// The identity provider's keys, fetched as needed.
#[derive(Debug)]
pub struct Oidc {
    settings: OidcSettings,
    http: reqwest::Client,
    keys: Mutex<Option<(JwkSet, Instant)>>,
}

impl Oidc {
    pub fn new(settings: OidcSettings) -> anyhow::Result<Self> {
        let http = maestro_runtime::http_client()
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(Self {
            settings,
            http,
            keys: Mutex::new(None),
        })
    }

    /// Whether `token` looks like a JWT (three base64url parts): the tokens this checks.
    pub fn is_jwt(token: &str) -> bool {
        token.starts_with("eyJ") && token.split('.').count() == 3
    }

    /// The owner a valid token names, or why it is not valid.
    pub async fn owner(&self, token: &str) -> Result<Owner, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("header: {e}"))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(format!("algorithm {:?} is not accepted", header.alg));
        }
        let kid = header.kid.ok_or("the token names no key (kid)")?;
        let key = self.key(&kid, header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&self.settings.audience);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = 30;
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<serde_json::Value>(token, &key, &validation)
            .map_err(|e| e.to_string())?;
        let owner = data
            .claims
            .get(&self.settings.owner_claim)
            .and_then(|v| v.as_str())
            .ok_or_else(|| format!("the token has no {} claim", self.settings.owner_claim))?;
        Owner::parse(owner).map_err(|e| format!("{}: {e}", self.settings.owner_claim))
    }

    async fn key(&self, kid: &str, alg: Algorithm) -> Result<DecodingKey, String> {
        let mut keys = self.keys.lock().await;
        let stale = match &*keys {
            None => true,
            Some((set, at)) => {
                at.elapsed() > MAX_AGE || (set.find(kid).is_none() && at.elapsed() > REFETCH_AFTER)
            }
        };
        if stale {
            match self.fetch().await {
                Ok(set) => *keys = Some((set, Instant::now())),
                Err(e) if keys.is_none() => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot fetch the OIDC keys; using the ones known")
                }
            }
        }
        let (set, _) = keys.as_ref().ok_or("no keys")?;
        let jwk = set
            .find(kid)
            .ok_or_else(|| format!("no key {kid:?} in the identity provider's set"))?;
        if let Some(key_alg) = jwk.common.key_algorithm
            && key_alg.to_string() != format!("{alg:?}")
        {
            return Err(format!("key {kid:?} is not for {alg:?}"));
        }
        DecodingKey::from_jwk(jwk).map_err(|e| format!("key {kid:?}: {e}"))
    }

    async fn fetch(&self) -> Result<JwkSet, String> {
        let response = self
            .http
            .get(&self.settings.jwks_url)
            .send()
            .await
            .map_err(|e| format!("fetching {}: {e}", self.settings.jwks_url))?;
        if !response.status().is_success() {
            return Err(format!(
                "{} answered {}",
                self.settings.jwks_url,
                response.status()
            ));
        }
        response
            .json::<JwkSet>()
            .await
            .map_err(|e| format!("{} is not a JWK set: {e}", self.settings.jwks_url))
    }
}
