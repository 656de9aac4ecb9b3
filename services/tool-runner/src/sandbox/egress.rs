//! Network egress: the one way anything a tool runs reaches the network, and the rule it
//! follows. A sandboxed program granted network gets no network interface of its own — only
//! its namespace's loopback, where `maestro-sandbox-forward` listens on [`PROXY_ADDR`] and
//! carries each connection over a Unix socket to a [`Proxy`] here in the tool-runner. The
//! proxy speaks HTTP (`CONNECT host:port` for TLS and anything else, absolute-form requests for
//! plain HTTP) and checks every destination by the same rule `http_fetch` follows
//! ([`destination`]): a public address, or a host the policy lists by name. So a program never
//! reaches the host's loopback (Postgres with trust auth, NATS), a private range, link-local
//! cloud metadata or one of the host's own addresses, whatever it tries: a direct connection
//! has no route, and the proxy refuses.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

/// Where programs find the proxy, inside their own network namespace.
pub const PROXY_ADDR: &str = "127.0.0.1:3128";
/// The Unix socket the forwarder reaches the proxy by, inside the sandbox.
pub const SOCKET_INSIDE: &str = "/run/maestro/egress.sock";
/// The forwarder binary, inside the sandbox.
pub const FORWARDER_INSIDE: &str = "/run/maestro/forward";
/// Longest request head the proxy reads.
const MAX_HEAD: usize = 32 * 1024;
/// How long a client may take to send its request head, and a destination to accept.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `ip` is not a public address: loopback, private, link-local, unspecified,
/// multicast, broadcast, carrier-grade NAT, unique-local — or one of this host's own.
pub fn internal(ip: IpAddr) -> bool {
    let reserved = match ip {
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
    };
    // An address this host can bind is one of its own interfaces' — whatever its range.
    reserved || std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// The address to connect to for `host:port`, by the egress rule: the name is resolved once
/// and every address checked; a host listed in `allowed_hosts` (by name, as written) may be
/// internal; with a non-empty list, nothing else is reachable. The caller connects to the
/// returned address, never to the name again (no DNS rebinding).
pub async fn destination(
    host: &str,
    port: u16,
    allowed_hosts: &[String],
) -> Result<SocketAddr, String> {
    let host = host.trim_matches(['[', ']']);
    let listed = allowed_hosts
        .iter()
        .any(|h| h.trim_matches(['[', ']']) == host);
    if !allowed_hosts.is_empty() && !listed {
        return Err(format!(
            "host {host:?} is not among the hosts this workspace may reach"
        ));
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
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
    Ok(addr)
}

/// The proxy of one program: a Unix socket in the tool-runner's sandbox directory, served
/// until this is dropped (which also ends every connection through it).
#[derive(Debug)]
pub struct Proxy {
    path: PathBuf,
    stop: CancellationToken,
}

impl Proxy {
    /// Listen on a new socket in `dir`, reachable by the sandbox user, for a program that may
    /// reach `allowed_hosts` (empty: any public address).
    pub fn start(dir: &Path, allowed_hosts: Vec<String>) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))?;
        let name: String = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
        let path = dir.join(format!("{name}.sock"));
        let listener = UnixListener::bind(&path)?;
        // The program runs as the sandbox user; the socket's name is unguessable and its
        // directory cannot be listed.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, allowed_hosts.into(), stop.clone()));
        Ok(Self { path, stop })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn serve(listener: UnixListener, allowed: std::sync::Arc<[String]>, stop: CancellationToken) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "egress proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stop.cancelled() => return,
        };
        let allowed = allowed.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = connection(stream, &allowed) => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

/// What a client asked the proxy for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `CONNECT host:port`: a tunnel.
    Tunnel { host: String, port: u16 },
    /// An absolute-form plain HTTP request, with its head rewritten for the origin server.
    Forward {
        host: String,
        port: u16,
        head: Vec<u8>,
    },
}

/// Read a request head (up to the blank line): the head and whatever followed it.
async fn read_head(stream: &mut UnixStream) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = find(&buffer, b"\r\n\r\n") {
            let rest = buffer.split_off(end + 4);
            return Ok((buffer, rest));
        }
        if buffer.len() > MAX_HEAD {
            return Err("the request head is too long".to_owned());
        }
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the request: {e}"))?;
        if n == 0 {
            return Err("the client closed the connection".to_owned());
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Parse a proxy request head (any bytes: a clear refusal, never a panic).
pub fn parse_request(head: &[u8]) -> Result<Request, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("not an HTTP request line: {request_line:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("unsupported HTTP version {version:?}"));
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let url = reqwest::Url::parse(&format!("tunnel://{target}"))
            .map_err(|_| format!("CONNECT needs host:port, not {target:?}"))?;
        let (Some(host), Some(port)) = (url.host_str(), url.port()) else {
            return Err(format!("CONNECT needs host:port, not {target:?}"));
        };
        return Ok(Request::Tunnel {
            host: host.to_owned(),
            port,
        });
    }
    let url = reqwest::Url::parse(target)
        .map_err(|_| format!("a proxy request needs an absolute http:// URL, not {target:?}"))?;
    if url.scheme() != "http" {
        return Err(format!(
            "only http:// is forwarded as is; use CONNECT (an https:// URL) for {:?}",
            url.scheme()
        ));
    }
    let host = url.host_str().unwrap_or_default().to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let mut path = url.path().to_owned();
    if let Some(query) = url.query() {
        path.push('?');
        path.push_str(query);
    }
    // The origin server gets an origin-form request on a connection that closes after it:
    // the next request may be for another host, and must be checked on its own.
    let mut rewritten = format!("{method} {path} {version}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or_default().trim();
        let hop = [
            "connection",
            "proxy-connection",
            "proxy-authorization",
            "keep-alive",
        ];
        if !hop.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            rewritten.push_str(line);
            rewritten.push_str("\r\n");
        }
    }
    rewritten.push_str("Connection: close\r\n\r\n");
    Ok(Request::Forward {
        host,
        port,
        head: rewritten.into_bytes(),
    })
}

async fn connection(mut client: UnixStream, allowed: &[String]) {
    let head = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await;
    let (head, early) = match head {
        Ok(Ok(head)) => head,
        Ok(Err(reason)) => return refuse(&mut client, 400, &reason).await,
        Err(_) => return refuse(&mut client, 408, "no request head within 10 s").await,
    };
    let request = match parse_request(&head) {
        Ok(request) => request,
        Err(reason) => return refuse(&mut client, 400, &reason).await,
    };
    let (host, port) = match &request {
        Request::Tunnel { host, port } | Request::Forward { host, port, .. } => {
            (host.clone(), *port)
        }
    };
    let addr = match destination(&host, port, allowed).await {
        Ok(addr) => {
            metrics::counter!(maestro_runtime::metrics::EGRESS, "decision" => "allowed")
                .increment(1);
            addr
        }
        Err(reason) => {
            metrics::counter!(maestro_runtime::metrics::EGRESS, "decision" => "refused")
                .increment(1);
            tracing::info!(%host, port, %reason, "egress refused");
            return refuse(&mut client, 403, &reason).await;
        }
    };
    let upstream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await;
    let mut upstream = match upstream {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            return refuse(&mut client, 502, &format!("cannot connect to {addr}: {e}")).await;
        }
        Err(_) => {
            return refuse(
                &mut client,
                504,
                &format!("{addr} did not answer within 10 s"),
            )
            .await;
        }
    };
    let started = match request {
        Request::Tunnel { .. } => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
        }
        Request::Forward { head, .. } => upstream.write_all(&head).await,
    };
    if started.is_err() || upstream.write_all(&early).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Answer the client with an error it (and the model reading its output) can understand.
async fn refuse(client: &mut UnixStream, status: u16, reason: &str) {
    let phrase = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        502 => "Bad Gateway",
        _ => "Gateway Timeout",
    };
    let body = format!("MAESTRO sandbox egress: {reason}\n");
    let response = format!(
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(response.as_bytes()).await;
    let _ = client.shutdown().await;
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

    #[test]
    fn proxy_requests_are_parsed_or_refused() {
        assert_eq!(
            parse_request(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n"),
            Ok(Request::Tunnel {
                host: "pypi.org".to_owned(),
                port: 443
            })
        );
        assert_eq!(
            parse_request(b"CONNECT [::1]:5432 HTTP/1.1\r\n\r\n"),
            Ok(Request::Tunnel {
                host: "[::1]".to_owned(),
                port: 5432
            })
        );
        let forward = parse_request(
            b"GET http://example.com:8080/a?b=c HTTP/1.1\r\nHost: example.com:8080\r\n\
              Proxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n",
        );
        let Ok(Request::Forward { host, port, head }) = forward else {
            panic!("a forward: {forward:?}");
        };
        assert_eq!((host.as_str(), port), ("example.com", 8080));
        assert_eq!(
            String::from_utf8(head).expect("utf-8"),
            "GET /a?b=c HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        for bad in [
            &b"CONNECT pypi.org HTTP/1.1\r\n\r\n"[..],
            b"GET /relative HTTP/1.1\r\n\r\n",
            b"GET ftp://example.com/ HTTP/1.1\r\n\r\n",
            b"GET http://example.com/ HTTP/2\r\n\r\n",
            b"\xff\xfe\r\n\r\n",
            b"\r\n\r\n",
        ] {
            assert!(parse_request(bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_head_is_parsed_or_refused(head in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = parse_request(&head);
        }
    }
}
