//! Required actions: the items a paused job waits for (SPEC §3.2, §6.2), what people (and
//! child tasks) decide about them, and what a job does next once they are decided.
//!
//! Everything here is pure. The db crate maps a stored row to an [`Action`] once; services
//! parse a request into a [`Verdict`] with [`Verdict::parse`], ask [`Outstanding::next_status`]
//! what the job becomes, and [`route_comment`] where a comment goes.
//!
//! | file | holds |
//! |---|---|
//! | `status.rs` | [`ActionStatus`] |
//! | `verdict.rs` | [`Verdict`], its parser and [`Refusal`]s, [`Scope`], the recorded [`Decision`] |
//! | `detail.rs` | [`ActionDetail`]: what an item is about, by kind |
//! | `next.rs` | what follows: [`Outstanding::next_status`], [`PauseFor`], [`route_comment`] |

mod detail;
mod next;
mod status;
mod verdict;

use chrono::{DateTime, Utc};
use serde_json::Value;

pub use detail::{ActionDetail, BadDetail, Package};
pub use next::{CommentRoute, Outstanding, PauseFor, route_comment, wait_reason_of};
pub use status::{ActionStatus, UnknownActionStatus};
pub use verdict::{Decision, Refusal, Scope, Verdict};

use crate::ids::{ActionId, JobId, TaskId};
use crate::job::WaitReason;

/// An item a job waits for (or waited for), as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    pub id: ActionId,
    pub task_id: TaskId,
    pub job_id: JobId,
    pub status: ActionStatus,
    /// Unique within the job: the call's place (`<movement>/<iteration>/<call id>`),
    /// `mcp:<server>` or `op:<operation>:<attempt>`.
    pub key: String,
    pub movement: String,
    /// `seq` of the event that proposed it (the assistant message with the call).
    pub source_seq: Option<i64>,
    pub detail: ActionDetail,
    pub decision: Option<Decision>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

impl Action {
    pub fn kind(&self) -> WaitReason {
        self.detail.kind()
    }

    /// Answered: by a person, or (a subtask) by its child.
    pub fn is_decided(&self) -> bool {
        self.status.is_decided()
    }

    /// The verdict, once decided.
    pub fn verdict(&self) -> Option<&Verdict> {
        self.decision
            .as_ref()
            .filter(|_| self.is_decided())
            .map(|d| &d.verdict)
    }

    /// The summary carried by the pause event and the notification: `{id, kind, movement,
    /// source_seq, ...detail}`.
    pub fn summary(&self) -> Value {
        let mut summary = serde_json::json!({
            "id": self.id,
            "kind": self.kind(),
            "movement": self.movement,
            "source_seq": self.source_seq,
        });
        if let (Some(summary), Value::Object(detail)) =
            (summary.as_object_mut(), self.detail.to_value())
        {
            summary.extend(detail);
        }
        summary
    }
}

/// An item to record for a job about to pause.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAction {
    /// Unique within the job (see [`Action::key`]).
    pub key: String,
    pub movement: String,
    pub source_seq: Option<i64>,
    pub detail: ActionDetail,
}

impl NewAction {
    pub fn kind(&self) -> WaitReason {
        self.detail.kind()
    }
}
