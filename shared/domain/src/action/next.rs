//! What follows a decision, a pause or a comment: pure functions of what is pending and of the
//! job's state.

use crate::job::{JobStatus, WaitReason};

/// The items of a paused job still pending, by who answers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outstanding {
    /// Items a person answers.
    pub people: usize,
    /// `subtask` items, answered by their children.
    pub children: usize,
}

impl Outstanding {
    /// What the job becomes once an item is decided: still waiting for a person while any
    /// person's item is pending, else for its children, else queued again to resume.
    pub fn next_status(self) -> JobStatus {
        if self.people > 0 {
            JobStatus::WaitingHuman
        } else if self.children > 0 {
            JobStatus::WaitingSubtasks
        } else {
            JobStatus::Queued
        }
    }

    /// Why the job's state changed with a decision (`None`: it did not).
    pub fn change_reason(self) -> Option<&'static str> {
        match self.next_status() {
            JobStatus::Queued => Some("every item the job waited for is decided"),
            JobStatus::WaitingSubtasks => {
                Some("every person's item is decided; subtasks are still running")
            }
            _ => None,
        }
    }
}

/// What a pause waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseFor {
    /// A person (`waiting_human` with this reason).
    Human(WaitReason),
    /// Its subtasks (`waiting_subtasks`).
    Subtasks,
    /// Nothing is left to wait for: the pause must not happen.
    Nothing,
}

impl PauseFor {
    /// What a job pausing for `requested` waits for, given the kinds of the items still
    /// pending once they are recorded and whether it started subtasks: the requested kind
    /// while such an item is pending, else the first pending person's kind, else its
    /// subtasks (which may all be over: the join then resumes it at once), else nothing.
    pub fn choose(requested: WaitReason, pending: &[WaitReason], subtasks: bool) -> PauseFor {
        let people: Vec<WaitReason> = pending.iter().copied().filter(|k| k.is_human()).collect();
        if people.contains(&requested) {
            PauseFor::Human(requested)
        } else if let Some(first) = people.first() {
            PauseFor::Human(*first)
        } else if subtasks || requested == WaitReason::Subtask {
            PauseFor::Subtasks
        } else {
            PauseFor::Nothing
        }
    }

    /// The job's status and wait reason for this pause.
    pub fn job_state(self) -> Option<(JobStatus, Option<WaitReason>)> {
        match self {
            PauseFor::Human(reason) => Some((JobStatus::WaitingHuman, Some(reason))),
            PauseFor::Subtasks => Some((JobStatus::WaitingSubtasks, None)),
            PauseFor::Nothing => None,
        }
    }
}

/// The reason a pause over these items is reported under: a tool request first, else any
/// person's kind, else subtasks.
pub fn wait_reason_of(kinds: &[WaitReason]) -> WaitReason {
    let find = |wanted: fn(&WaitReason) -> bool| kinds.iter().copied().find(wanted);
    find(|k| *k == WaitReason::ToolRequest)
        .or_else(|| find(|k| k.is_human()))
        .unwrap_or(WaitReason::Subtask)
}

/// Where a comment on a task goes, by its latest job's state (SPEC §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentRoute {
    /// Into the job's conversation at its next step.
    Interjection,
    /// The job has not run, or waits to run again: the comment joins its instruction.
    Addition,
    /// It answers the job's question: a follow-up job resumes in the asking movement.
    Answer,
    /// A new job that carries the comment (the latest is over, or there is none).
    FollowUp,
    /// Refused: the job waits for a decision of this kind first.
    DecideFirst(Option<WaitReason>),
}

/// Route a comment by the latest job's status and wait reason (`None`: the task has no job).
pub fn route_comment(latest: Option<(JobStatus, Option<WaitReason>)>) -> CommentRoute {
    match latest {
        Some((JobStatus::Queued | JobStatus::Retry, _)) => CommentRoute::Addition,
        Some((JobStatus::Running | JobStatus::WaitingSubtasks, _)) => CommentRoute::Interjection,
        Some((JobStatus::WaitingHuman, Some(WaitReason::Ask))) => CommentRoute::Answer,
        Some((JobStatus::WaitingHuman, reason)) => CommentRoute::DecideFirst(reason),
        Some((JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled, _)) | None => {
            CommentRoute::FollowUp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_status_follows_what_is_still_pending() {
        let table = [
            ((0, 0), JobStatus::Queued),
            ((1, 0), JobStatus::WaitingHuman),
            ((1, 2), JobStatus::WaitingHuman),
            ((0, 2), JobStatus::WaitingSubtasks),
        ];
        for ((people, children), expected) in table {
            let outstanding = Outstanding { people, children };
            assert_eq!(outstanding.next_status(), expected, "{outstanding:?}");
        }
        assert!(
            Outstanding {
                people: 1,
                children: 0
            }
            .change_reason()
            .is_none()
        );
    }

    #[test]
    fn a_pause_waits_for_the_requested_kind_then_people_then_children() {
        use WaitReason::*;
        let table: &[(WaitReason, &[WaitReason], bool, PauseFor)] = &[
            (
                ToolRequest,
                &[ToolRequest, PackageRequest],
                false,
                PauseFor::Human(ToolRequest),
            ),
            (
                ToolRequest,
                &[PackageRequest],
                false,
                PauseFor::Human(PackageRequest),
            ),
            (
                ToolRequest,
                &[Subtask, PackageRequest],
                true,
                PauseFor::Human(PackageRequest),
            ),
            (Subtask, &[Subtask], true, PauseFor::Subtasks),
            (Subtask, &[], true, PauseFor::Subtasks),
            (ToolRequest, &[], true, PauseFor::Subtasks),
            (ToolRequest, &[], false, PauseFor::Nothing),
        ];
        for (requested, pending, subtasks, expected) in table {
            assert_eq!(
                PauseFor::choose(*requested, pending, *subtasks),
                *expected,
                "{requested} {pending:?} {subtasks}"
            );
        }
        assert_eq!(
            wait_reason_of(&[Subtask, PackageRequest, ToolRequest]),
            ToolRequest
        );
        assert_eq!(wait_reason_of(&[Subtask, Ask]), Ask);
        assert_eq!(wait_reason_of(&[Subtask]), Subtask);
    }

    #[test]
    fn comments_are_routed_by_the_latest_job() {
        use JobStatus::*;
        let table = [
            (Some((Running, None)), CommentRoute::Interjection),
            (Some((Queued, None)), CommentRoute::Addition),
            (Some((Retry, None)), CommentRoute::Addition),
            (Some((WaitingSubtasks, None)), CommentRoute::Interjection),
            (
                Some((WaitingHuman, Some(WaitReason::Ask))),
                CommentRoute::Answer,
            ),
            (
                Some((WaitingHuman, Some(WaitReason::ToolRequest))),
                CommentRoute::DecideFirst(Some(WaitReason::ToolRequest)),
            ),
            (
                Some((WaitingHuman, Some(WaitReason::SideEffectUnknown))),
                CommentRoute::DecideFirst(Some(WaitReason::SideEffectUnknown)),
            ),
            (Some((Succeeded, None)), CommentRoute::FollowUp),
            (Some((Failed, None)), CommentRoute::FollowUp),
            (Some((Cancelled, None)), CommentRoute::FollowUp),
            (None, CommentRoute::FollowUp),
        ];
        for (latest, expected) in table {
            assert_eq!(route_comment(latest), expected, "{latest:?}");
        }
    }
}
