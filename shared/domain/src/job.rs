//! The job state machine (SPEC §2 "Job states").
//!
//! `queued → running → succeeded | failed | cancelled | retry | waiting_human | waiting_subtasks`;
//! `retry` and the waits lead back to `queued`/`running`. The database stores the status as
//! text; every write that changes it is guarded by the status it expects (compare-and-set), and
//! [`JobStatus::can_become`] is the single statement of which moves are legal.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Retry,
    WaitingHuman,
    WaitingSubtasks,
}

impl JobStatus {
    pub const ALL: [JobStatus; 8] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Cancelled,
        JobStatus::Retry,
        JobStatus::WaitingHuman,
        JobStatus::WaitingSubtasks,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Retry => "retry",
            JobStatus::WaitingHuman => "waiting_human",
            JobStatus::WaitingSubtasks => "waiting_subtasks",
        }
    }

    /// A terminal job never runs again; a new job is needed to continue the task.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled
        )
    }

    /// A job a worker may claim (given its retry time has come).
    pub fn is_claimable(self) -> bool {
        matches!(self, JobStatus::Queued | JobStatus::Retry)
    }

    /// Whether moving from `self` to `next` is a legal transition.
    pub fn can_become(self, next: JobStatus) -> bool {
        use JobStatus::*;
        match self {
            Queued => matches!(next, Running | Cancelled | Failed),
            // Running → Running is a re-claim after the holder's lease expired;
            // Running → Queued is a worker handing the job back as it shuts down.
            Running => true,
            Retry => matches!(next, Running | Cancelled | Failed | Queued),
            // WaitingHuman → Succeeded: an ASK answered by a follow-up job (the asking job did
            // its part). WaitingHuman → WaitingSubtasks: every person's item is decided, and
            // subtasks started in the same pause still run.
            WaitingHuman => matches!(
                next,
                Queued | Cancelled | Failed | Succeeded | WaitingSubtasks
            ),
            WaitingSubtasks => matches!(next, Queued | Cancelled | Failed),
            Succeeded | Failed | Cancelled => false,
        }
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status string that is not one of [`JobStatus::ALL`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown job status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for JobStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// What a paused job waits for: why it waits for a human (`waiting_human`, the job's
/// `wait_reason`), or `Subtask`, the kind of the items a `waiting_subtasks` job waits for (one
/// per child task; such a job has no `wait_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    Ask,
    ToolRequest,
    PackageRequest,
    McpAuthRequired,
    Browser,
    SideEffectUnknown,
    Subtask,
}

impl WaitReason {
    pub const ALL: [WaitReason; 7] = [
        WaitReason::Ask,
        WaitReason::ToolRequest,
        WaitReason::PackageRequest,
        WaitReason::McpAuthRequired,
        WaitReason::Browser,
        WaitReason::SideEffectUnknown,
        WaitReason::Subtask,
    ];

    /// Whether a person answers it (every kind but `Subtask`, which a child task answers).
    pub fn is_human(self) -> bool {
        self != WaitReason::Subtask
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Ask => "ask",
            WaitReason::ToolRequest => "tool_request",
            WaitReason::PackageRequest => "package_request",
            WaitReason::McpAuthRequired => "mcp_auth_required",
            WaitReason::Browser => "browser",
            WaitReason::SideEffectUnknown => "side_effect_unknown",
            WaitReason::Subtask => "subtask",
        }
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_their_names() {
        for status in JobStatus::ALL {
            assert_eq!(status.as_str().parse::<JobStatus>(), Ok(status));
            let json = serde_json::to_string(&status).expect("serialize");
            assert_eq!(
                json,
                format!("\"{}\"", status.as_str()),
                "serde and as_str agree"
            );
        }
        assert!("done".parse::<JobStatus>().is_err());
    }

    #[test]
    fn terminal_states_are_final() {
        for from in [
            JobStatus::Succeeded,
            JobStatus::Failed,
            JobStatus::Cancelled,
        ] {
            assert!(from.is_terminal());
            for to in JobStatus::ALL {
                assert!(!from.can_become(to), "{from} must not become {to}");
            }
        }
    }

    #[test]
    fn the_happy_path_and_retry_are_legal() {
        use JobStatus::*;
        assert!(Queued.can_become(Running));
        assert!(Running.can_become(Succeeded));
        assert!(Running.can_become(Retry));
        assert!(Retry.can_become(Running));
        assert!(Running.can_become(WaitingHuman));
        assert!(WaitingHuman.can_become(Queued));
        assert!(Running.can_become(WaitingSubtasks));
        assert!(WaitingHuman.can_become(WaitingSubtasks));
        assert!(WaitingSubtasks.can_become(Queued));
        assert!(
            !WaitingSubtasks.can_become(Running),
            "the join queues it first"
        );
        assert!(
            !Queued.can_become(Succeeded),
            "a job must run before it succeeds"
        );
        assert!(
            Running.can_become(Queued),
            "a draining worker hands its job back"
        );
    }
}
