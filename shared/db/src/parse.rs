//! Reading stored enum text: a value this version does not know is unreadable data.

use maestro_domain::{ActionStatus, JobStatus, WaitReason};

use crate::DbError;

pub(crate) fn status(s: &str) -> Result<JobStatus, DbError> {
    s.parse().map_err(DbError::corrupt)
}

pub(crate) fn wait_reason(s: &str) -> Result<WaitReason, DbError> {
    WaitReason::parse(s).ok_or_else(|| DbError::corrupt(format!("unknown wait reason {s:?}")))
}

pub(crate) fn action_status(s: &str) -> Result<ActionStatus, DbError> {
    s.parse().map_err(DbError::corrupt)
}
