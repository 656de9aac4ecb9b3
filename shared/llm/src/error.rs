//! LLM errors, classified: a recoverable error may succeed if retried later (rate limits,
//! server errors, timeouts, dropped connections); a fatal one will not (bad request,
//! authentication, unknown model).

use std::time::Duration;

/// A failed chat-completions call.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("the LLM endpoint answered {status}: {body}")]
    Status {
        status: u16,
        body: String,
        retry_after: Option<Duration>,
    },
    #[error("cannot reach the LLM endpoint: {0}")]
    Transport(String),
    #[error("the LLM stream stalled for {0:?}")]
    Idle(Duration),
    #[error("the LLM stream ended before it finished")]
    Truncated,
    #[error("the LLM endpoint sent something that is not a chat-completions stream: {0}")]
    Protocol(String),
}

impl LlmError {
    /// Whether retrying the same request later may succeed.
    pub fn is_recoverable(&self) -> bool {
        match self {
            LlmError::Status { status, .. } => {
                matches!(status, 408 | 409 | 425 | 429) || *status >= 500
            }
            LlmError::Transport(_) | LlmError::Idle(_) | LlmError::Truncated => true,
            LlmError::Protocol(_) => false,
        }
    }

    /// The server's `Retry-After`, when it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl From<reqwest::Error> for LlmError {
    fn from(e: reqwest::Error) -> Self {
        // Keep the whole cause chain: reqwest's top-level message alone hides the reason.
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        LlmError::Transport(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_and_server_errors_are_recoverable_client_errors_are_not() {
        let status = |status| LlmError::Status {
            status,
            body: String::new(),
            retry_after: None,
        };
        for code in [429, 500, 502, 503, 408] {
            assert!(status(code).is_recoverable(), "{code} should be retried");
        }
        for code in [400, 401, 403, 404, 422] {
            assert!(!status(code).is_recoverable(), "{code} should fail at once");
        }
        assert!(LlmError::Truncated.is_recoverable());
        assert!(!LlmError::Protocol("x".into()).is_recoverable());
    }
}
