//! Where a required action is in its life.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where an item is in its life. `pending` until it is decided; `superseded` when a later pause
/// of its job set it aside as left behind by a dead attempt (nobody's answer; recorded again,
/// it is pending again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionStatus {
    Pending,
    Approved,
    Denied,
    Answered,
    Resolved,
    Superseded,
}

impl ActionStatus {
    pub const ALL: [ActionStatus; 6] = [
        ActionStatus::Pending,
        ActionStatus::Approved,
        ActionStatus::Denied,
        ActionStatus::Answered,
        ActionStatus::Resolved,
        ActionStatus::Superseded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionStatus::Pending => "pending",
            ActionStatus::Approved => "approved",
            ActionStatus::Denied => "denied",
            ActionStatus::Answered => "answered",
            ActionStatus::Resolved => "resolved",
            ActionStatus::Superseded => "superseded",
        }
    }

    /// Answered: by a person, or (a subtask) by its child. A superseded item is nobody's answer.
    pub fn is_decided(self) -> bool {
        !matches!(self, ActionStatus::Pending | ActionStatus::Superseded)
    }
}

impl fmt::Display for ActionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status string that is not one of [`ActionStatus::ALL`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown required action status {0:?}")]
pub struct UnknownActionStatus(pub String);

impl FromStr for ActionStatus {
    type Err = UnknownActionStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownActionStatus(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn statuses_round_trip_and_only_answers_count_as_decided() {
        for status in ActionStatus::ALL {
            assert_eq!(status.as_str().parse::<ActionStatus>(), Ok(status));
            assert_eq!(
                serde_json::to_value(status).expect("json"),
                json!(status.as_str())
            );
        }
        assert!(!ActionStatus::Pending.is_decided());
        assert!(!ActionStatus::Superseded.is_decided(), "nobody's answer");
        assert!(ActionStatus::Resolved.is_decided());
        assert!("done".parse::<ActionStatus>().is_err());
    }
}
