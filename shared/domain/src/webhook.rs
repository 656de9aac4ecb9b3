//! Webhook secrets and signatures, per the Standard Webhooks specification
//! (<https://www.standardwebhooks.com>): the secret is `whsec_` + base64 of the key bytes, and
//! `webhook-signature` is `v1,` + base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>")).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

const PREFIX: &str = "whsec_";

/// Where one webhook delivery stands.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not delivered yet; attempts go on.
    Pending,
    Delivered,
    /// Given up on.
    Failed,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 3] = [
        DeliveryStatus::Pending,
        DeliveryStatus::Delivered,
        DeliveryStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

/// A webhook signing secret. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret {
    key: Vec<u8>,
}

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// Why a string is not a usable secret.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a webhook secret is \"whsec_\" followed by base64 of 24 to 64 random bytes")]
pub struct InvalidSecret;

impl WebhookSecret {
    /// A new random secret of 32 bytes.
    pub fn generate() -> Self {
        let mut key = vec![0u8; 32];
        getrandom::fill(&mut key).expect("the operating system provides randomness");
        Self { key }
    }

    pub fn parse(s: &str) -> Result<Self, InvalidSecret> {
        let encoded = s.strip_prefix(PREFIX).ok_or(InvalidSecret)?;
        let key = STANDARD.decode(encoded).map_err(|_| InvalidSecret)?;
        if (24..=64).contains(&key.len()) {
            Ok(Self { key })
        } else {
            Err(InvalidSecret)
        }
    }

    /// The `whsec_…` form, shown to the subscriber once.
    pub fn expose(&self) -> String {
        format!("{PREFIX}{}", STANDARD.encode(&self.key))
    }

    /// The `webhook-signature` header value for this message (the specification's reference
    /// implementation, `standardwebhooks`, signs it). Bodies are JSON, so always UTF-8.
    pub fn sign(&self, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
        standardwebhooks::Webhook::from_bytes(self.key.clone())
            .and_then(|webhook| webhook.sign(msg_id, timestamp, body))
            .expect("a webhook body is JSON, and any key signs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_round_trip_and_signatures_match_the_specification_example() {
        let secret = WebhookSecret::generate();
        assert_eq!(WebhookSecret::parse(&secret.expose()), Ok(secret.clone()));
        assert!(
            !format!("{secret:?}").contains(&secret.expose()[6..]),
            "Debug hides the key"
        );
        assert_eq!(
            WebhookSecret::parse("whsec_c2hvcnQ="),
            Err(InvalidSecret),
            "too short"
        );
        assert_eq!(WebhookSecret::parse("nope"), Err(InvalidSecret));
        // The example from the Standard Webhooks reference implementation.
        let secret =
            WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("example secret");
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }
}
