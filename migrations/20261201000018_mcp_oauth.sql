-- OAuth logins for remote MCP servers (issue 23). A server that answers 401 with an OAuth
-- challenge gets a login per owner; its grant is kept beside the static tokens.

-- `credentials`: the OAuth grant as rmcp stores it (client id, access and refresh token,
-- scopes, when it was received); `token` is its current access token, `expires_at` when that
-- expires (NULL: a static token, or a grant without an expiry).
ALTER TABLE mcp_tokens ADD COLUMN credentials jsonb,
                       ADD COLUMN expires_at timestamptz;

-- A login an owner has to complete for a server: `id` is the secret of its login URL
-- (`/api/local/mcp/logins/{id}`), stable while the owner has not logged in. `url` and
-- `challenge` are the server's endpoint and the WWW-Authenticate of its 401; `client` a
-- client registered out of band (the policy's `oauth`); `last_error` why the last attempt
-- failed (refused, expired), shown on the item.
CREATE TABLE mcp_logins (
    id         text PRIMARY KEY,
    owner      text NOT NULL,
    server     text NOT NULL,
    url        text NOT NULL,
    challenge  text NOT NULL,
    client     jsonb,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (owner, server)
);

-- One authorization request sent to the browser: `csrf` is its `state` parameter, `state`
-- the PKCE verifier and what rmcp checks the answer against, `client` the OAuth client it was
-- made with (registered dynamically or out of band). Used once; older than ten minutes, it
-- has expired.
CREATE TABLE mcp_login_states (
    csrf       text PRIMARY KEY,
    login_id   text NOT NULL REFERENCES mcp_logins (id) ON DELETE CASCADE,
    client     jsonb NOT NULL,
    state      jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mcp_login_states_login ON mcp_login_states (login_id);
