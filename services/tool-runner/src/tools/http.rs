//! `http_fetch`: an HTTP request, only when the workspace policy grants network. The call's
//! operation id goes along as `Idempotency-Key`, so a server can recognise a repeated request.
//!
//! It runs in the tool-runner's own network namespace, next to the services, so it follows the
//! egress rule programs follow (`sandbox::egress::destination`): never an internal address —
//! loopback, private, link-local, unique-local, unspecified, multicast or the host's own —
//! unless the policy lists that host in `allowed_hosts` by name. The name is resolved once,
//! checked, and the connection pinned to the checked address (no DNS rebinding); redirects
//! are not followed (the model sees the 3xx and its `Location` and may fetch that, through
//! the same checks).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

use crate::call::{Call, parse};
use crate::sandbox::egress;

/// Most bytes of a response body shown.
const MAX_BODY: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchArgs {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<String>,
}

pub async fn fetch(call: &Call) -> Result<String, String> {
    if !call.network {
        return Err("network access is not granted to this workspace".to_owned());
    }
    let args: FetchArgs = parse(call.arguments.clone())?;
    let url = reqwest::Url::parse(&args.url).map_err(|e| format!("invalid url: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("only http and https URLs can be fetched".to_owned());
    }
    let host = url.host_str().unwrap_or_default().to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let addr = egress::destination(&host, port, &call.allowed_hosts).await?;
    let http = maestro_runtime::http_client()
        .connect_timeout(std::time::Duration::from_secs(10))
        .resolve(&host, addr)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot make the request: {e}"))?;
    let method = args.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
    let method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|_| format!("invalid method {method}"))?;
    let mut request = http
        .request(method, url)
        .timeout(call.timeout)
        .header("idempotency-key", &call.operation_id);
    for (name, value) in &args.headers {
        request = request.header(name, value);
    }
    if let Some(body) = args.body {
        request = request.body(body);
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    let status = response.status();
    let mut text = format!("HTTP {}\n", status.as_u16());
    for (name, value) in response.headers() {
        let _ = writeln!(text, "{name}: {}", value.to_str().unwrap_or("<binary>"));
    }
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("reading the body failed: {e}"))?;
    text.push('\n');
    text.push_str(&String::from_utf8_lossy(&body[..body.len().min(MAX_BODY)]));
    if body.len() > MAX_BODY {
        let _ = write!(text, "\n[truncated: the body has {} bytes]", body.len());
    }
    if status.is_success() {
        Ok(text)
    } else {
        Err(text)
    }
}
