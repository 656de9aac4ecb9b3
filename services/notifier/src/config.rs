//! Settings of the notifier, from the environment.

use std::time::Duration;

use maestro_runtime::env::CommonSettings;
use maestro_runtime::{ConfigError, Env};

/// How the notifier runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub common: CommonSettings,
    /// Webhook deliveries attempted at once.
    pub concurrency: usize,
    /// Time limit of one webhook request.
    pub webhook_timeout: Duration,
    /// Attempts per delivery before it is marked failed.
    pub webhook_max_attempts: i64,
    /// First retry delay of a failed delivery; doubled per attempt, with jitter.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// Deliveries given up on in a row that disable a subscription.
    pub webhook_disable_after: i32,
}

impl Settings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            common: CommonSettings::from_env(env)?,
            concurrency: env.parse("NOTIFIER_CONCURRENCY", 32)?,
            webhook_timeout: env.millis("WEBHOOK_TIMEOUT_MS", Duration::from_secs(10))?,
            webhook_max_attempts: env.parse("WEBHOOK_MAX_ATTEMPTS", 8)?,
            retry_base: env.millis("WEBHOOK_RETRY_BASE_MS", Duration::from_secs(2))?,
            retry_max: env.millis("WEBHOOK_RETRY_MAX_MS", Duration::from_secs(300))?,
            webhook_disable_after: env.parse("WEBHOOK_DISABLE_AFTER", 5)?,
        })
    }
}
