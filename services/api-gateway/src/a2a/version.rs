//! The `A2A-Version` header (spec §3.6): the protocol version a request speaks, `Major.Minor`
//! (a patch number is ignored). No header means 0.3. This server speaks 1.0, and 0.3 through
//! its method names on the JSON-RPC endpoint.

use axum::http::HeaderMap;
use maestro_a2a::jsonrpc::Dialect;
use maestro_a2a::{A2aError, ErrorKind};

/// The version a request asks for (`A2A-Version` header, or `?A2A-Version=` where headers
/// cannot be set): `None` when absent.
pub fn asked(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let header = headers
        .get("a2a-version")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty());
    header.or_else(|| {
        query?
            .split('&')
            .find_map(|pair| pair.strip_prefix("A2A-Version="))
            .map(str::to_owned)
    })
}

/// Check that a request speaking `dialect` asked for a version this server serves for it.
pub fn check(asked: Option<&str>, dialect: Dialect) -> Result<(), A2aError> {
    let major_minor = asked.map(|v| {
        let mut parts = v.split('.');
        (parts.next().unwrap_or(""), parts.next().unwrap_or("0"))
    });
    let served = matches!(
        (dialect, major_minor),
        (Dialect::V1, Some(("1", "0"))) | (Dialect::V03, None | Some(("0", "3")))
    );
    if served {
        return Ok(());
    }
    let version = asked.unwrap_or("0.3");
    let expected = match dialect {
        Dialect::V1 => "send the header A2A-Version: 1.0 (no header means 0.3)",
        Dialect::V03 => "0.3 method names go with no A2A-Version header (or 0.3)",
    };
    Err(A2aError::new(
        ErrorKind::VersionNotSupported,
        format!("A2A version '{version}' is not supported for this request: {expected}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_checked_by_major_and_minor() {
        assert!(check(Some("1.0"), Dialect::V1).is_ok());
        assert!(check(Some("1.0.3"), Dialect::V1).is_ok());
        assert!(check(None, Dialect::V1).is_err(), "no header means 0.3");
        assert!(check(Some("99.0"), Dialect::V1).is_err());
        assert!(check(Some("1.1"), Dialect::V1).is_err());
        assert!(check(None, Dialect::V03).is_ok());
        assert!(check(Some("0.3"), Dialect::V03).is_ok());
        assert!(check(Some("1.0"), Dialect::V03).is_err());
        let error = check(Some("99.0"), Dialect::V1).expect_err("refused");
        assert_eq!(error.kind.code(), -32009);
    }
}
