//! Typed reading of environment variables. [`Env::from_process`] is the only place a MAESTRO
//! binary reads the process environment; everything else gets a typed `Settings`.

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use async_nats::jetstream::stream::StorageType;

/// A variable that is set but cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("environment variable {key} = {value:?} is invalid: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

/// A snapshot of environment variables.
#[derive(Debug, Clone, Default)]
pub struct Env {
    vars: HashMap<String, String>,
}

impl Env {
    /// The process environment.
    pub fn from_process() -> Self {
        Self {
            vars: std::env::vars().collect(),
        }
    }

    /// A given set of variables (tests, embedding).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value, if set and not empty.
    pub fn opt(&self, key: &str) -> Option<String> {
        self.vars.get(key).filter(|v| !v.trim().is_empty()).cloned()
    }

    pub fn string(&self, key: &str, default: &str) -> String {
        self.opt(key).unwrap_or_else(|| default.to_owned())
    }

    pub fn parse<T>(&self, key: &str, default: T) -> Result<T, ConfigError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        match self.opt(key) {
            None => Ok(default),
            Some(value) => value.trim().parse().map_err(|e: T::Err| ConfigError {
                key: key.to_owned(),
                reason: e.to_string(),
                value,
            }),
        }
    }

    /// A duration in milliseconds.
    pub fn millis(&self, key: &str, default: Duration) -> Result<Duration, ConfigError> {
        let ms: u64 = self.parse(key, default.as_millis() as u64)?;
        Ok(Duration::from_millis(ms))
    }

    /// `true`/`false`/`1`/`0`/`yes`/`no`.
    pub fn flag(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        match self.opt(key).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) if ["1", "true", "yes", "on"].contains(&v.as_str()) => Ok(true),
            Some(v) if ["0", "false", "no", "off"].contains(&v.as_str()) => Ok(false),
            Some(value) => Err(ConfigError {
                key: key.to_owned(),
                value,
                reason: "expected true or false".to_owned(),
            }),
        }
    }

    /// Fail with a [`ConfigError`] built from a validation message.
    pub fn invalid(&self, key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            key: key.to_owned(),
            value: self.string(key, ""),
            reason: reason.into(),
        }
    }
}

/// Settings every service that touches Postgres and NATS has.
#[derive(Clone)]
pub struct CommonSettings {
    pub database_url: String,
    pub db_max_connections: u32,
    pub nats_url: String,
    pub subject_prefix: String,
    /// Apply pending migrations at start-up.
    pub migrate_on_start: bool,
    /// Retention of the streams (the same in every service, or they would fight over it).
    pub streams: maestro_messaging::setup::StreamSettings,
}

impl std::fmt::Debug for CommonSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The database URL may hold a password.
        f.debug_struct("CommonSettings")
            .field("database_url", &"<redacted>")
            .field("db_max_connections", &self.db_max_connections)
            .field("nats_url", &self.nats_url)
            .field("subject_prefix", &self.subject_prefix)
            .field("migrate_on_start", &self.migrate_on_start)
            .field("streams", &self.streams)
            .finish()
    }
}

impl CommonSettings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            database_url: env.string("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/maestro"),
            db_max_connections: env.parse("DB_MAX_CONNECTIONS", 16)?,
            nats_url: env.string("NATS_URL", "nats://127.0.0.1:4222"),
            subject_prefix: env.string("SUBJECT_PREFIX", "maestro"),
            migrate_on_start: env.flag("MIGRATE_ON_START", false)?,
            streams: stream_settings(env)?,
        })
    }
}

/// Stream retention from `DELTAS_RETENTION_MS` (live deltas kept for reconnecting clients,
/// default 15 minutes) and `EVENTS_RETENTION_MS` (events in the stream; Postgres keeps them
/// for good; default 24 hours).
pub fn stream_settings(env: &Env) -> Result<maestro_messaging::setup::StreamSettings, ConfigError> {
    let defaults = maestro_messaging::setup::StreamSettings::default();
    let replicas: usize = env.parse("STREAM_REPLICAS", defaults.replicas)?;
    if !(1..=5).contains(&replicas) {
        return Err(env.invalid("STREAM_REPLICAS", "1 to 5 (JetStream's limit)"));
    }
    Ok(maestro_messaging::setup::StreamSettings {
        deltas_max_age: env.millis("DELTAS_RETENTION_MS", defaults.deltas_max_age)?,
        deltas_storage: match env.string("DELTAS_STORAGE", "memory").trim() {
            "memory" => StorageType::Memory,
            "file" => StorageType::File,
            _ => return Err(env.invalid("DELTAS_STORAGE", "memory or file")),
        },
        deltas_max_bytes: match env.parse("DELTAS_MAX_BYTES", defaults.deltas_max_bytes)? {
            bytes if bytes >= 4096 => bytes,
            _ => return Err(env.invalid("DELTAS_MAX_BYTES", "at least 4096 (bytes)")),
        },
        events_max_age: env.millis("EVENTS_RETENTION_MS", defaults.events_max_age)?,
        replicas,
        ..defaults
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_replicas_are_one_to_five() {
        let replicas = |v: &str| stream_settings(&Env::from_pairs([("STREAM_REPLICAS", v)]));
        assert_eq!(
            stream_settings(&Env::from_pairs::<&str, &str>([]))
                .map(|s| s.replicas)
                .ok(),
            Some(1)
        );
        assert_eq!(replicas("3").map(|s| s.replicas).ok(), Some(3));
        assert!(replicas("0").is_err());
        assert!(replicas("7").is_err());
        assert!(replicas("three").is_err());
    }

    #[test]
    fn values_parse_with_defaults_and_clear_errors() {
        let env = Env::from_pairs([("A", "5"), ("B", "x"), ("EMPTY", " "), ("F", "yes")]);
        assert_eq!(env.parse("A", 1u32), Ok(5));
        assert_eq!(env.parse("MISSING", 1u32), Ok(1));
        assert_eq!(env.parse("EMPTY", 1u32), Ok(1), "blank counts as unset");
        let err = env.parse("B", 1u32).expect_err("not a number");
        assert_eq!(err.key, "B");
        assert_eq!(env.flag("F", false), Ok(true));
        assert_eq!(
            env.millis("A", Duration::ZERO),
            Ok(Duration::from_millis(5))
        );
    }
}
