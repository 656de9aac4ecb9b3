//! OAuth 2.1 logins for remote MCP servers (the MCP authorization specification), on rmcp's
//! `auth` module: protected-resource and authorization-server discovery (seeded from the
//! server's 401 challenge), dynamic client registration where the authorization server offers
//! it (or a client registered out of band), authorization code with PKCE, and refresh. What
//! rmcp keeps in memory by default is kept in Postgres here, so the service that starts a login
//! (the worker, which meets the 401), the one that completes it (the gateway, which receives
//! the browser's callback) and the one that refreshes it (any worker) need not be the same:
//!
//! 1. [`open_login`] (worker): a job meets a 401; the owner's login for the server is opened
//!    (or kept) and the job pauses with its URL.
//! 2. [`authorization_url`] (gateway, when the person opens the login URL): discovery,
//!    registration, a fresh PKCE verifier and `state`; the browser goes to the authorization
//!    server.
//! 3. [`complete`] (gateway, on the callback): the code is exchanged and the grant stored per
//!    owner and server; the caller resumes the jobs that waited.
//! 4. [`fresh_token`] (worker, before each job): the grant's access token, refreshed first
//!    when it is about to expire; `None` when the grant is gone (a new login is due).

use std::time::Duration;

use chrono::{DateTime, Utc};
use maestro_db::PgPool;
use maestro_db::mcp_logins::{self, Login};
use maestro_domain::mcp::{McpServer, OAuthClient};
use oauth2::TokenResponse as _;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, CredentialStore, OAuthClientConfig, StateStore,
    StoredAuthorizationState, StoredCredentials,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How long an authorization request may wait for its callback.
pub const STATE_TTL: Duration = Duration::from_secs(600);
/// A grant whose access token expires sooner than this is refreshed before a job uses it.
pub const REFRESH_AHEAD: Duration = Duration::from_secs(60);
/// The name MAESTRO registers itself under.
const CLIENT_NAME: &str = "MAESTRO";

/// Why a login step failed.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("no such login (it was completed, or the link is wrong)")]
    UnknownLogin,
    #[error("no such authorization request (it was used already, or the link is wrong)")]
    UnknownState,
    #[error("the login took longer than {} minutes; open the login link again", STATE_TTL.as_secs() / 60)]
    Expired,
    /// The authorization server or the MCP server refused, or answered what cannot be used.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Db(#[from] maestro_db::DbError),
}

impl From<AuthError> for LoginError {
    fn from(e: AuthError) -> Self {
        LoginError::Refused(e.to_string())
    }
}

/// The OAuth client an authorization request was made with.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ClientRecord {
    client_id: String,
    #[serde(default)]
    client_secret: Option<String>,
    redirect_uri: String,
    #[serde(default)]
    scopes: Vec<String>,
}

impl ClientRecord {
    fn config(&self) -> OAuthClientConfig {
        let mut config = OAuthClientConfig::new(self.client_id.clone(), self.redirect_uri.clone())
            .with_scopes(self.scopes.clone());
        if let Some(secret) = &self.client_secret {
            config = config.with_client_secret(secret.clone());
        }
        config
    }
}

/// A random, URL-safe secret (256 bits).
fn secret() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system provides randomness");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Open (or keep) `owner`'s login for the remote server `name`, which answered `challenge`.
/// Returns the login's id: its URL is `/api/local/mcp/logins/{id}` on the gateway.
pub async fn open_login(
    pool: &PgPool,
    owner: &str,
    name: &str,
    server: &McpServer,
    challenge: &str,
) -> Result<String, LoginError> {
    let url = server
        .url
        .as_deref()
        .ok_or_else(|| LoginError::Refused(format!("MCP server {name} has no url")))?;
    let client = server
        .oauth
        .as_ref()
        .map(|c| serde_json::to_value(c).unwrap_or_default());
    let id = mcp_logins::open(
        pool,
        &secret(),
        owner,
        name,
        url,
        challenge,
        client.as_ref(),
    )
    .await?;
    Ok(id)
}

/// An authorization manager for `url`, its metadata discovered (from `challenge`, the 401's
/// `WWW-Authenticate`, when there is one). The URL is the operator's configuration, so an
/// authorization server at a private address is allowed (loopback only for a loopback server).
async fn manager(url: &str, challenge: Option<&str>) -> Result<AuthorizationManager, LoginError> {
    let mut manager = AuthorizationManager::new_allowing_private_addresses(url).await?;
    let resolution = manager.resolve_metadata_from_challenge(challenge).await?;
    manager.set_metadata(resolution.metadata);
    Ok(manager)
}

/// Where the browser goes to log in for login `login_id`: discovery, then the client
/// (registered out of band, or dynamically now), then a fresh PKCE verifier and `state`,
/// kept for [`complete`]. `redirect_uri` is the gateway's callback.
pub async fn authorization_url(
    pool: &PgPool,
    login_id: &str,
    redirect_uri: &str,
) -> Result<String, LoginError> {
    let login = mcp_logins::get(pool, login_id)
        .await?
        .ok_or(LoginError::UnknownLogin)?;
    let outcome = start(pool, &login, redirect_uri).await;
    if let Err(e) = &outcome {
        fail(pool, &login, &e.to_string()).await?;
    }
    outcome
}

async fn start(pool: &PgPool, login: &Login, redirect_uri: &str) -> Result<String, LoginError> {
    let mut manager = manager(&login.url, Some(&login.challenge)).await?;
    let preregistered: Option<OAuthClient> = login
        .client
        .clone()
        .and_then(|c| serde_json::from_value(c).ok());
    let scopes = match &preregistered {
        Some(client) if !client.scopes.is_empty() => client.scopes.clone(),
        _ => manager.select_scopes(None, &[]),
    };
    let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
    let record = match preregistered {
        Some(client) => ClientRecord {
            client_id: client.client_id,
            client_secret: client.client_secret,
            redirect_uri: redirect_uri.to_owned(),
            scopes: scopes.clone(),
        },
        None => {
            let registered = manager
                .register_client(CLIENT_NAME, redirect_uri, &scope_refs)
                .await?;
            ClientRecord {
                client_id: registered.client_id,
                client_secret: registered.client_secret,
                redirect_uri: redirect_uri.to_owned(),
                scopes: scopes.clone(),
            }
        }
    };
    manager.configure_client(record.config())?;
    manager.set_state_store(States {
        pool: pool.clone(),
        login_id: login.id.clone(),
        client: serde_json::to_value(&record).unwrap_or_default(),
    });
    Ok(manager.get_authorization_url(&scope_refs).await?)
}

/// The browser came back to the callback with `code` for the request `state`: exchange it
/// (PKCE), store the grant for the login's owner and server, and close the login. Returns the
/// login (the caller resumes the jobs that waited for it). An error the authorization server
/// sent instead of a code is [`refused`].
pub async fn complete(
    pool: &PgPool,
    state: &str,
    code: &str,
    issuer: Option<&str>,
) -> Result<Login, LoginError> {
    let (login, record) = request(pool, state).await?;
    let outcome = exchange(pool, &login, &record, state, code, issuer).await;
    match &outcome {
        Ok(()) => mcp_logins::close(pool, &login.id).await?,
        Err(e) => fail(pool, &login, &e.to_string()).await?,
    }
    outcome.map(|()| login)
}

/// The authorization server answered the request `state` with an error (`access_denied`…):
/// recorded on the login, which stays open. Returns the login.
pub async fn refused(pool: &PgPool, state: &str, error: &str) -> Result<Login, LoginError> {
    let (login, _) = request(pool, state).await?;
    mcp_logins::delete_state(pool, state).await?;
    fail(pool, &login, error).await?;
    Ok(login)
}

/// Why the last attempt of `login` failed: kept on the login and shown on the items that
/// wait for it (`login_error`), where the person looks.
async fn fail(pool: &PgPool, login: &Login, why: &str) -> Result<(), maestro_db::DbError> {
    mcp_logins::failed(pool, &login.id, why).await?;
    maestro_db::actions::note_login_error(pool, &login.owner, &login.server, why).await?;
    Ok(())
}

/// The login and client of the authorization request `state`, if it has not expired.
async fn request(pool: &PgPool, state: &str) -> Result<(Login, ClientRecord), LoginError> {
    let request = mcp_logins::state(pool, state)
        .await?
        .ok_or(LoginError::UnknownState)?;
    let login = mcp_logins::get(pool, &request.login_id)
        .await?
        .ok_or(LoginError::UnknownLogin)?;
    let age = Utc::now() - request.created_at;
    if age.to_std().unwrap_or_default() > STATE_TTL {
        mcp_logins::delete_state(pool, state).await?;
        fail(pool, &login, &LoginError::Expired.to_string()).await?;
        return Err(LoginError::Expired);
    }
    let record: ClientRecord = serde_json::from_value(request.client)
        .map_err(|e| LoginError::Refused(format!("unreadable authorization request: {e}")))?;
    Ok((login, record))
}

async fn exchange(
    pool: &PgPool,
    login: &Login,
    record: &ClientRecord,
    state: &str,
    code: &str,
    issuer: Option<&str>,
) -> Result<(), LoginError> {
    let mut manager = manager(&login.url, Some(&login.challenge)).await?;
    manager.configure_client(record.config())?;
    manager.set_state_store(States {
        pool: pool.clone(),
        login_id: login.id.clone(),
        client: serde_json::to_value(record).unwrap_or_default(),
    });
    manager.set_credential_store(Grants {
        pool: pool.clone(),
        owner: login.owner.clone(),
        server: login.server.clone(),
    });
    manager
        .exchange_code_for_token_with_issuer(code, state, issuer)
        .await?;
    Ok(())
}

/// `owner`'s access token for the remote server `name` from its grant `(token, expires_at)`,
/// refreshed first when it expires within [`REFRESH_AHEAD`]. `None`: the authorization
/// server refused the refresh (the grant is gone; a new login is due). A refresh that fails
/// for another reason keeps the current token (the server says whether it still works).
pub async fn fresh_token(
    pool: &PgPool,
    owner: &str,
    name: &str,
    server: &McpServer,
    (token, expires_at): (String, Option<DateTime<Utc>>),
) -> Result<Option<String>, maestro_db::DbError> {
    let due = expires_at.is_some_and(|at| {
        at - Utc::now() < chrono::Duration::from_std(REFRESH_AHEAD).unwrap_or_default()
    });
    let Some(url) = server.url.as_deref().filter(|_| due) else {
        return Ok(Some(token));
    };
    let grants = Grants {
        pool: pool.clone(),
        owner: owner.to_owned(),
        server: name.to_owned(),
    };
    match refresh(url, server.oauth.as_ref(), grants).await {
        Ok(refreshed) => {
            tracing::info!(server = %name, "MCP access token refreshed");
            Ok(Some(refreshed))
        }
        Err(AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_)) => {
            tracing::info!(server = %name, "the MCP server's grant cannot be refreshed; a new login is due");
            maestro_db::mcp_tokens::delete(pool, owner, name).await?;
            Ok(None)
        }
        Err(e) => {
            tracing::warn!(server = %name, error = %e, "cannot refresh the MCP access token now; using the current one");
            Ok(Some(token))
        }
    }
}

async fn refresh(
    url: &str,
    client: Option<&OAuthClient>,
    grants: Grants,
) -> Result<String, AuthError> {
    let mut manager = AuthorizationManager::new_allowing_private_addresses(url).await?;
    let resolution = manager.resolve_metadata().await?;
    manager.set_metadata(resolution.metadata);
    manager.set_credential_store(grants);
    if !manager.initialize_from_store().await? {
        return Err(AuthError::AuthorizationRequired);
    }
    if let Some(client) = client {
        let mut config = OAuthClientConfig::new(client.client_id.clone(), url.to_owned());
        if let Some(secret) = &client.client_secret {
            config = config.with_client_secret(secret.clone());
        }
        manager.configure_client(config)?;
    }
    let token = manager.refresh_token().await?;
    Ok(token.access_token().secret().to_owned())
}

/// rmcp's PKCE state, in `mcp_login_states`.
struct States {
    pool: PgPool,
    login_id: String,
    client: Value,
}

fn store_error(e: impl std::fmt::Display) -> AuthError {
    AuthError::InternalError(format!("login store: {e}"))
}

#[async_trait::async_trait]
impl StateStore for States {
    async fn save(&self, csrf: &str, state: StoredAuthorizationState) -> Result<(), AuthError> {
        let state = serde_json::to_value(&state).map_err(store_error)?;
        mcp_logins::put_state(&self.pool, csrf, &self.login_id, &self.client, &state)
            .await
            .map_err(store_error)
    }

    async fn load(&self, csrf: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        match mcp_logins::state(&self.pool, csrf)
            .await
            .map_err(store_error)?
        {
            Some(row) => Ok(Some(
                serde_json::from_value(row.state).map_err(store_error)?,
            )),
            None => Ok(None),
        }
    }

    async fn delete(&self, csrf: &str) -> Result<(), AuthError> {
        mcp_logins::delete_state(&self.pool, csrf)
            .await
            .map_err(store_error)
    }
}

/// rmcp's credentials for one owner and server, in `mcp_tokens`.
struct Grants {
    pool: PgPool,
    owner: String,
    server: String,
}

#[async_trait::async_trait]
impl CredentialStore for Grants {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let grant = maestro_db::mcp_tokens::grant(&self.pool, &self.owner, &self.server)
            .await
            .map_err(store_error)?;
        match grant {
            Some(grant) => Ok(Some(serde_json::from_value(grant).map_err(store_error)?)),
            None => Ok(None),
        }
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let Some(response) = &credentials.token_response else {
            return self.clear().await;
        };
        let access = response.access_token().secret().to_owned();
        let expires_at = match (response.expires_in(), credentials.token_received_at) {
            (Some(ttl), Some(at)) => DateTime::<Utc>::from_timestamp(at as i64, 0)
                .map(|at| at + chrono::Duration::from_std(ttl).unwrap_or_default()),
            _ => None,
        };
        let value = serde_json::to_value(&credentials).map_err(store_error)?;
        maestro_db::mcp_tokens::put_grant(
            &self.pool,
            &self.owner,
            &self.server,
            &value,
            &access,
            expires_at,
        )
        .await
        .map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        maestro_db::mcp_tokens::delete(&self.pool, &self.owner, &self.server)
            .await
            .map_err(store_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_long_and_distinct() {
        let (a, b) = (secret(), secret());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn a_client_record_keeps_its_secret_and_scopes() {
        let record = ClientRecord {
            client_id: "c".into(),
            client_secret: Some("s".into()),
            redirect_uri: "http://gw/cb".into(),
            scopes: vec!["read".into()],
        };
        let config = record.config();
        assert_eq!(config.client_secret.as_deref(), Some("s"));
        assert_eq!(config.scopes, vec!["read".to_owned()]);
        assert_eq!(config.redirect_uri, "http://gw/cb");
    }
}
