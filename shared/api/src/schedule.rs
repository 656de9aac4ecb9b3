//! Schedules (docs/schedules.md).

use chrono::{DateTime, Utc};
use maestro_domain::schedule::{Missed, Overlap, RunStatus};
use maestro_domain::{JobStatus, ScheduleId, TaskId};
use serde::{Deserialize, Serialize};

/// What each run's task is made of.
///
/// Also part of [`CreateSchedule`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskTemplate {
    pub instruction: String,
    /// The piece; the deployment's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece: Option<String>,
    /// The model; else the piece's, the space's, or the deployment's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The space its tasks go in (you must be an editor or owner there); its defaults fill
    /// in what the template leaves out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_id: Option<maestro_domain::SpaceId>,
    /// `private` (default without a space), `space` (a space's tasks), `public`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<maestro_domain::Visibility>,
    /// The worker profile its tasks' jobs go to; else the piece's, the space's, `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// The body of `POST /api/local/schedules`; of `PATCH /api/local/schedules/{id}` with every
/// field optional (absent: unchanged; `starts_at`/`ends_at`/`model` as `null`: removed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSchedule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// An IANA time zone; `UTC` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskTemplate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<Missed>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "nullable"
    )]
    pub starts_at: Option<Option<DateTime<Utc>>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "nullable"
    )]
    pub ends_at: Option<Option<DateTime<Utc>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

/// A field that may be absent (`None`), `null` (`Some(None)`) or a value.
fn nullable<'de, T, D>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Schedule {
    pub id: ScheduleId,
    pub name: String,
    pub cron: String,
    pub timezone: String,
    /// The cron expression in words.
    pub description: String,
    pub task: TaskTemplate,
    pub overlap: Overlap,
    pub missed: Missed,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<DateTime<Utc>>,
    /// `active`, `paused`, or `ended` (past its end, or no fire time left).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_fire_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fire_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `GET /api/local/schedules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SchedulePage {
    pub schedules: Vec<Schedule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_before: Option<ScheduleId>,
}

/// One fire time of a schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScheduleRun {
    pub fire_time: DateTime<Utc>,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// The state of the run's task (its latest job), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_status: Option<JobStatus>,
    /// Fired by `POST …/run`, not by the clock.
    pub manual: bool,
    /// Fire times before this one missed while no scheduler ran (and not run).
    pub missed_count: i32,
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
}

/// `GET /api/local/schedules/{id}/runs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScheduleRunPage {
    pub runs: Vec<ScheduleRun>,
    /// Pass as `before` for the next (earlier) page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_before: Option<DateTime<Utc>>,
}
