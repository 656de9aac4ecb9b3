//! `http_fetch`: an HTTP request, only when the workspace policy grants network. The call's
//! operation id goes along as `Idempotency-Key`, so a server can recognise a repeated request.
//!
//! It runs in the tool-runner's own network namespace, next to the services, so it never
//! reaches an internal address — loopback, private, link-local, unique-local, unspecified or
//! multicast — unless the policy lists that host in `allowed_hosts` by name. The name is
//! resolved once, checked, and the connection pinned to the checked address (no DNS
//! rebinding); redirects are not followed (the model sees the 3xx and its `Location` and may
//! fetch that, through the same checks).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;

use crate::call::{Call, parse};

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

/// Whether `ip` is not a public address.
fn internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                // 100.64.0.0/10, carrier-grade NAT
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link local
                || v6.to_ipv4_mapped().is_some_and(|v4| internal(IpAddr::V4(v4)))
        }
    }
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
    let listed = call.allowed_hosts.iter().any(|h| h == &host);
    if !call.allowed_hosts.is_empty() && !listed {
        return Err(format!(
            "host {host:?} is not among the hosts this workspace may reach"
        ));
    }
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .collect();
    let Some(addr) = addrs.first().copied() else {
        return Err(format!("{host:?} resolves to no address"));
    };
    if !listed && let Some(internal) = addrs.iter().find(|a| internal(a.ip())) {
        return Err(format!(
            "{host:?} is an internal address ({}); a workspace reaches one only when the \
             policy lists the host in allowed_hosts",
            internal.ip()
        ));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(internal(ip.parse().expect("ip")), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(!internal(ip.parse().expect("ip")), "{ip}");
        }
    }
}
