//! MCP servers as the workspace policy configures them, and the names their tools are
//! offered under.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// An MCP server: a program run in the sandbox speaking on its stdio (`command`), or a remote
/// server reached over Streamable HTTP (`url`). Its `Debug` shows the names of its environment
/// variables only (a user's token travels in them).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// A stdio server: the program and its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// A remote server: its Streamable HTTP endpoint (`http://` or `https://`). One that
    /// answers 401 with an OAuth challenge gets a login (`mcp_auth_required` with a login URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A remote server's OAuth client, when it was registered out of band (otherwise MAESTRO
    /// registers itself dynamically where the authorization server offers it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthClient>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Extra read-only paths the server needs (its installation).
    #[serde(default)]
    pub read_only_paths: Vec<String>,
    /// The server needs a token the user supplies with `PUT …/mcp-servers/{server}/token`
    /// (an API key; `mcp_auth_required` until then). A stdio server reads it from `token_env`;
    /// a remote one gets it as its bearer token.
    #[serde(default)]
    pub requires_auth: bool,
    /// The environment variable a stdio server reads its token from.
    #[serde(default = "token_env")]
    pub token_env: String,
}

fn token_env() -> String {
    "MCP_AUTH_TOKEN".to_owned()
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("command", &self.command)
            .field("url", &self.url)
            .field("oauth", &self.oauth)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("read_only_paths", &self.read_only_paths)
            .field("requires_auth", &self.requires_auth)
            .field("token_env", &self.token_env)
            .finish()
    }
}

impl McpServer {
    /// Why the configuration cannot work, if it cannot.
    pub fn problem(&self) -> Option<String> {
        match (&self.url, self.command.is_empty()) {
            (Some(_), false) => Some("has both a command and a url".to_owned()),
            (None, true) => Some("has neither a command nor a url".to_owned()),
            (Some(url), true)
                if !(url.starts_with("http://") || url.starts_with("https://"))
                    || url.parse::<http::Uri>().is_err() =>
            {
                Some(format!("has an invalid url {url:?} (http:// or https://)"))
            }
            (None, false) if self.oauth.is_some() => {
                Some("is a stdio server: oauth is for remote (url) servers".to_owned())
            }
            _ => None,
        }
    }

    /// A remote server that may ask for an OAuth login (a url, and no API key configured).
    pub fn may_need_login(&self) -> bool {
        self.url.is_some() && !self.requires_auth
    }
}

/// An OAuth client registered with a remote server's authorization server out of band.
/// `Debug` leaves the secret out.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthClient {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// Scopes to ask for (default: what the server's metadata suggests).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClient")
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// An MCP server as the workspace policy configures it, named, with the owner's token when
/// it needs one (`Debug` leaves the token out).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpTarget {
    pub name: String,
    pub server: McpServer,
    /// The owner's token: a stdio server reads it from `token_env`; a remote one gets it as
    /// its bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl std::fmt::Debug for McpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTarget")
            .field("name", &self.name)
            .field("server", &self.server)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

/// The offered name of an MCP server's tool: `mcp__<server>__<tool>`.
pub fn mcp_tool_name(server: &str, tool: &str) -> String {
    format!("mcp__{server}__{tool}")
}

/// Split an offered MCP tool name into server and tool.
pub fn split_mcp_tool_name(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix("mcp__")?.split_once("__")
}
