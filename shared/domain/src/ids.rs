//! Identifier newtypes. Ids are UUIDv7 so they sort by creation time, which keyset
//! pagination relies on.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh, time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> Self {
                Self(id)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Uuid {
                id.0
            }
        }
    };
}

uuid_id!(
    /// A task: one piece of work or conversation, persisting across jobs.
    TaskId
);
uuid_id!(
    /// A job: one execution cycle of a task.
    JobId
);
uuid_id!(
    /// A required action: one item a paused job waits for.
    ActionId
);
uuid_id!(
    /// A webhook subscription.
    WebhookId
);
uuid_id!(
    /// One notification (the inbox record every delivery refers to).
    NotificationId
);
uuid_id!(
    /// One webhook delivery: a notification sent to one subscription.
    DeliveryId
);

/// The principal that owns tasks and webhooks; API tokens map to owners.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Owner(String);

/// Why a string cannot be an [`Owner`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("an owner is 1 to 128 characters of letters, digits, '-', '_', '.', '@'")]
pub struct InvalidOwner;

impl Owner {
    pub fn parse(s: &str) -> Result<Self, InvalidOwner> {
        let ok = !s.is_empty()
            && s.len() <= 128
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidOwner)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_strings_and_sort_by_creation() {
        let a = TaskId::new();
        let b = TaskId::new();
        assert!(a < b, "v7 ids must sort by creation time");
        assert_eq!(a.to_string().parse::<TaskId>().expect("parse"), a);
        assert!("not-a-uuid".parse::<TaskId>().is_err());
    }

    #[test]
    fn owners_are_validated() {
        assert!(Owner::parse("alice@example.com").is_ok());
        assert_eq!(Owner::parse(""), Err(InvalidOwner));
        assert_eq!(Owner::parse("a b"), Err(InvalidOwner));
        assert_eq!(Owner::parse(&"x".repeat(129)), Err(InvalidOwner));
    }
}
uuid_id!(
    /// A schedule: a cron expression that fires tasks from a template.
    ScheduleId
);
uuid_id!(
    /// A space: tasks that belong together and the people who work on them.
    SpaceId
);
uuid_id!(
    /// An API token (its id; the token itself is never stored).
    TokenId
);
