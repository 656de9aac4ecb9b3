//! `delegate`: a sub-agent in an isolated conversation (SPEC §3.5). Each call starts a child
//! task — its own job, conversation and events, in the parent's workspace, one level deeper
//! (a task at `MAX_SUBTASK_DEPTH` is not offered the tool). The calls of one reply start
//! their children at once, so they run in parallel; the movement then ends in WAIT: the job
//! commits `waiting_subtasks` with one `subtask` item per child. When every child is over
//! the scheduler queues the job again, and on that claim each `delegate` call is answered
//! with its child's result, followed by the subtask resume notice.
//!
//! A child is created idempotently (keyed by the call's item key), so a parent that crashes
//! after starting children finds them again instead of starting them twice.

use maestro_db::claims::Claimed;
use maestro_db::jobs::{self, Fence};
use maestro_db::subtasks::{self, Inserted, NewSubtask, Parent, Spawned};
use maestro_domain::action::NewAction;
use maestro_domain::piece::{Catalog, Movement};
use maestro_domain::{Action, ActionDetail, ToolCall, Verdict};
use maestro_messaging::AfterCommit;
use maestro_messaging::payloads::JobDispatch;
use serde_json::Value;

use super::context::{JobError, Shared};
use super::gate::{CallSite, Delegation, Gate};

/// The `delegate` calls of the current reply, and the children whose results answered calls.
#[derive(Debug, Default)]
pub(super) struct Delegations {
    /// `delegate` calls of the current reply that started (or found) a child.
    turn: usize,
    /// The subtask items whose results answered `delegate` calls since the last notice.
    answered: Vec<Action>,
}

/// What a `delegate` call may ask for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits<'a> {
    pub catalog: &'a Catalog,
    /// The piece of a subtask whose call names none.
    pub default_piece: &'a str,
    pub per_turn: usize,
}

impl Delegations {
    /// A new reply: its `delegate` calls count from zero.
    pub fn new_turn(&mut self) {
        self.turn = 0;
    }

    /// Whether children answered calls of this reply (on resume).
    pub fn answered_any(&self) -> bool {
        !self.answered.is_empty()
    }

    /// The items that answered calls since the last notice, to write the notice for.
    pub fn take_answered(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.answered)
    }

    /// The gate of a `delegate` call: answered with its child's result when the child is over
    /// (`decided`: its item, the job resumed), else checked, to be started by [`start`].
    pub fn gate(
        &mut self,
        arguments: &Value,
        site: &CallSite,
        decided: Option<&Action>,
        movement: &Movement,
        limits: Limits<'_>,
    ) -> Gate {
        if let Some(action) = decided {
            let (content, is_error) = child_result(action);
            self.answered.push(action.clone());
            return Gate::Answer(content, is_error);
        }
        if let Some(refusal) = movement.refusal(maestro_domain::tools::DELEGATE) {
            return Gate::error(format!("Error: {refusal}"));
        }
        let instruction = arguments["instruction"].as_str().unwrap_or_default().trim();
        if instruction.is_empty() {
            return Gate::error(
                "Error: `instruction` is required: everything the sub-agent needs to know",
            );
        }
        let piece = match arguments.get("piece") {
            None | Some(Value::Null) => limits.default_piece,
            Some(Value::String(name)) if limits.catalog.get(name).is_some() => name,
            Some(other) => {
                return Gate::error(format!(
                    "Error: no piece {other}; omit `piece` for the default"
                ));
            }
        };
        self.turn += 1;
        if self.turn > limits.per_turn {
            return Gate::error(format!(
                "Error: one reply may start at most {} subtasks; start this one once those are done",
                limits.per_turn
            ));
        }
        Gate::Spawn(Delegation {
            key: site.key.clone(),
            instruction: instruction.to_owned(),
            piece: piece.to_owned(),
        })
    }
}

/// Start (or find, on a claim after a crash) the children of the checked `delegate` calls and
/// dispatch them; the items the job then waits for, made in `movement`.
pub(super) async fn start(
    shared: &Shared,
    claim: &Claimed,
    movement: &str,
    delegations: Vec<(ToolCall, Delegation)>,
) -> Result<Vec<(ToolCall, NewAction)>, JobError> {
    let fence = Fence {
        job_id: claim.job_id,
        attempt: claim.attempt,
    };
    let parent = Parent {
        fence,
        task_id: claim.task_id,
        owner: &claim.owner,
        model: claim.model.as_deref(),
        profile: &claim.profile,
        max_attempts: claim.task_max_attempts,
        depth: claim.depth,
        workspace_id: claim.workspace_id,
    };
    let mut parked = Vec::with_capacity(delegations.len());
    let mut after = AfterCommit::none();
    for (call, delegation) in delegations {
        let spawned = spawn(shared, &parent, &delegation).await?;
        // Dispatched every time (the dispatch id de-duplicates it): a parent that crashed
        // between starting the child and dispatching it heals here; the re-dispatcher also would.
        let dispatch = JobDispatch::new_job(spawned.task_id, spawned.job_id);
        after = after.dispatch(&claim.profile, dispatch);
        let site = CallSite {
            key: delegation.key,
            movement: movement.to_owned(),
        };
        let item = site.item(ActionDetail::Subtask {
            subtask_id: spawned.task_id,
            instruction: delegation.instruction,
            piece: delegation.piece,
        });
        parked.push((call, item));
    }
    shared.bus.after_commit(after).await;
    Ok(parked)
}

/// The child of one delegation: created now, or found where an earlier claim created it.
async fn spawn(
    shared: &Shared,
    parent: &Parent<'_>,
    delegation: &Delegation,
) -> Result<Spawned, JobError> {
    let new = NewSubtask {
        key: &delegation.key,
        instruction: &delegation.instruction,
        piece: &delegation.piece,
    };
    let spawned = match subtasks::insert_child(&shared.pool, parent, &new).await? {
        Inserted::Created(spawned) => spawned,
        Inserted::Existed => subtasks::find_child(&shared.pool, parent, &delegation.key).await?,
        Inserted::NotHeld => return Err(jobs::Fenced(parent.fence.job_id).into()),
    };
    tracing::info!(
        subtask_id = %spawned.task_id,
        created = spawned.created,
        piece = %delegation.piece,
        "subtask started"
    );
    Ok(spawned)
}

/// What a `delegate` call is answered with once its child is over: `(content, is_error)`.
pub(super) fn child_result(action: &Action) -> (String, bool) {
    let id = action
        .detail
        .subtask()
        .map_or_else(|| "?".to_owned(), |t| t.to_string());
    match action.verdict() {
        Some(Verdict::Succeeded { result }) => (
            format!(
                "Subtask {id} succeeded. Its result:\n{}",
                result.as_deref().unwrap_or_default()
            ),
            false,
        ),
        Some(Verdict::Failed { error }) => (
            format!(
                "Error: subtask {id} failed: {}",
                error.as_deref().unwrap_or_default()
            ),
            true,
        ),
        _ => (format!("Error: subtask {id} was cancelled"), true),
    }
}

/// The subtask resume notice: appended (as a `user` message) after the results of the
/// `delegate` calls a resumed job answered.
pub(super) fn resume_notice(answered: &[Action], movement: &str) -> String {
    let succeeded = answered
        .iter()
        .filter(|a| matches!(a.verdict(), Some(Verdict::Succeeded { .. })))
        .count();
    let other = answered.len() - succeeded;
    let mut notice = format!(
        "[Subtasks finished] The {} subtask(s) you started are over: {succeeded} succeeded",
        answered.len()
    );
    if other > 0 {
        notice.push_str(&format!(", {other} failed or were cancelled"));
    }
    notice.push_str(&format!(
        ". Each one's result is the result of its `delegate` call above. Continue movement \
         `{movement}` with them."
    ));
    notice
}

#[cfg(test)]
mod tests {
    use super::*;
    use maestro_domain::{ActionId, ActionStatus, Decision, JobId, TaskId};

    fn resolved(child: TaskId, verdict: Verdict) -> Action {
        Action {
            id: ActionId::new(),
            task_id: TaskId::new(),
            job_id: JobId::new(),
            status: ActionStatus::Resolved,
            key: "work/1/call_1".into(),
            movement: "work".into(),
            source_seq: Some(3),
            detail: ActionDetail::Subtask {
                subtask_id: child,
                instruction: "x".into(),
                piece: "chat".into(),
            },
            decision: Some(Decision::new(verdict, "scheduler")),
            created_at: chrono::Utc::now(),
            decided_at: Some(chrono::Utc::now()),
        }
    }

    #[test]
    fn children_answer_their_calls() {
        let child = TaskId::new();
        let succeeded = Verdict::Succeeded {
            result: Some("42 files".into()),
        };
        assert_eq!(
            child_result(&resolved(child, succeeded)),
            (
                format!("Subtask {child} succeeded. Its result:\n42 files"),
                false
            )
        );
        let failed = Verdict::Failed {
            error: Some("LLM: 500".into()),
        };
        assert_eq!(
            child_result(&resolved(child, failed)),
            (format!("Error: subtask {child} failed: LLM: 500"), true)
        );
        assert_eq!(
            child_result(&resolved(child, Verdict::Cancelled)),
            (format!("Error: subtask {child} was cancelled"), true)
        );
    }

    #[test]
    fn the_resume_notice_counts_the_outcomes() {
        let ok = || {
            resolved(
                TaskId::new(),
                Verdict::Succeeded {
                    result: Some("a".into()),
                },
            )
        };
        let all_good = resume_notice(&[ok()], "work");
        assert_eq!(
            all_good,
            "[Subtasks finished] The 1 subtask(s) you started are over: 1 succeeded. Each \
             one's result is the result of its `delegate` call above. Continue movement `work` \
             with them."
        );
        let failed = resolved(TaskId::new(), Verdict::Failed { error: None });
        let mixed = resume_notice(&[ok(), failed], "review");
        assert!(mixed.contains("2 subtask(s)"), "{mixed}");
        assert!(
            mixed.contains("1 succeeded, 1 failed or were cancelled"),
            "{mixed}"
        );
        assert!(mixed.contains("movement `review`"), "{mixed}");
    }
}
