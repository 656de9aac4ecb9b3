//! The job state machine (SPEC §2 "Job states").
//!
//! `queued → running → succeeded | failed | cancelled | retry | waiting_human | waiting_subtasks`;
//! `retry` and the waits lead back to `queued`/`running`. The database stores the status as
//! text; every write that changes it is guarded by the status it expects (compare-and-set), and
//! [`JobStatus::can_become`] is the single statement of which moves are legal.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::JobId;

/// The worker profile a job is dispatched to when neither its task, its piece nor its space
/// names one.
pub const DEFAULT_PROFILE: &str = "default";

/// Whether `profile` can name a worker profile: it is a NATS subject token, 1 to 64 letters,
/// digits, '-' and '_'.
pub fn valid_profile(profile: &str) -> bool {
    !profile.is_empty()
        && profile.len() <= 64
        && profile
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Whether `model` can name a model: 1 to 128 letters, digits and `._:/-@`.
pub fn valid_model(model: &str) -> bool {
    !model.is_empty()
        && model.len() <= 128
        && model
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:/-@".contains(c))
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
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

/// A job as it stands: what the API shows of a task's latest job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobRecord {
    pub id: JobId,
    pub job_no: i32,
    pub status: JobStatus,
    pub wait_reason: Option<WaitReason>,
    /// Claims so far.
    pub attempt: i32,
    pub max_attempts: i32,
    pub next_retry_at: Option<DateTime<Utc>>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Set on a job a Continue started: the job it carries on from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_from_job_id: Option<JobId>,
    /// The piece this job runs, when it is not the task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece: Option<String>,
    /// The model this job uses, when it is not the task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Why a queued job is not running yet, when no worker that is up can take it (no
    /// worker of its profile, or none of them serves its model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_reason: Option<String>,
    /// A job of a space's task that succeeded: the commit of the space's `main` with its
    /// changes (docs/spaces.md#persistent-workspaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Where its changes are kept when they were not merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// What a claim sees of a job it could not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobState {
    pub status: JobStatus,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub next_retry_at: Option<DateTime<Utc>>,
    /// The worker that claimed it last.
    pub worker_id: Option<String>,
}

/// Why a job could not be claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotClaimed {
    /// No such job.
    Missing,
    /// A worker (`holder`, when known) holds it until the lease expires.
    Leased {
        lease_expires_at: DateTime<Utc>,
        holder: Option<String>,
    },
    /// Its retry time has not come.
    RetryLater { next_retry_at: DateTime<Utc> },
    /// Terminal or waiting: nothing to run.
    Settled(JobStatus),
}

impl NotClaimed {
    /// Why a claim found nothing to take, from the job's status, lease and retry time as they
    /// are now (`None`: the job does not exist).
    pub fn of(state: Option<JobState>) -> NotClaimed {
        let Some(state) = state else {
            return NotClaimed::Missing;
        };
        match (state.status, state.lease_expires_at, state.next_retry_at) {
            (JobStatus::Running, Some(lease_expires_at), _) => NotClaimed::Leased {
                lease_expires_at,
                holder: state.worker_id,
            },
            (JobStatus::Retry, _, Some(next_retry_at)) => NotClaimed::RetryLater { next_retry_at },
            (status, _, _) => NotClaimed::Settled(status),
        }
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
    fn a_failed_claim_says_why() {
        let at = Utc::now();
        let state = |status, lease_expires_at, next_retry_at| {
            Some(JobState {
                status,
                lease_expires_at,
                next_retry_at,
                worker_id: Some("w-1".to_owned()),
            })
        };
        assert_eq!(NotClaimed::of(None), NotClaimed::Missing);
        assert_eq!(
            NotClaimed::of(state(JobStatus::Running, Some(at), None)),
            NotClaimed::Leased {
                lease_expires_at: at,
                holder: Some("w-1".to_owned())
            }
        );
        assert_eq!(
            NotClaimed::of(state(JobStatus::Retry, None, Some(at))),
            NotClaimed::RetryLater { next_retry_at: at }
        );
        assert_eq!(
            NotClaimed::of(state(JobStatus::WaitingHuman, None, None)),
            NotClaimed::Settled(JobStatus::WaitingHuman)
        );
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
