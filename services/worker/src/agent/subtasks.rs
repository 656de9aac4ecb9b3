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

use maestro_db::actions::{Action, NewAction};
use maestro_db::jobs;
use maestro_db::subtasks::{self, NewSubtask, Parent};
use maestro_domain::{ToolCall, WaitReason};
use maestro_messaging::payloads::JobDispatch;
use serde_json::{Value, json};

use super::calls::movement_refusal;
use super::gate::Gate;
use super::{JobError, JobRun};

/// A checked `delegate` call, to start once the reply's other calls have run (a child must
/// not read the workspace before the calls that came before it changed it).
#[derive(Debug, Clone)]
pub(super) struct Delegation {
    key: String,
    instruction: String,
    piece: String,
}

impl JobRun<'_> {
    /// The gate of a `delegate` call: answered with its child's result when the child is
    /// over (the job resumed), else checked, to be started by [`JobRun::start_subtasks`].
    pub(super) fn gate_delegate(&mut self, call: &ToolCall, arguments: &Value) -> Gate {
        let key = self.item_key(call);
        if let Some(action) = self.decision(&key) {
            let (content, is_error) = child_result(&action);
            self.subtasks_answered.push(action);
            return Gate::Answer(content, is_error);
        }
        let settings = &self.shared.settings;
        if let Some(refusal) = movement_refusal(self.movement(), call.name()) {
            return Gate::Answer(format!("Error: {refusal}"), true);
        }
        let instruction = arguments["instruction"].as_str().unwrap_or_default().trim();
        if instruction.is_empty() {
            let error = "Error: `instruction` is required: everything the sub-agent needs to know";
            return Gate::Answer(error.to_owned(), true);
        }
        let piece = match arguments.get("piece") {
            None | Some(Value::Null) => settings.subtask_piece.as_str(),
            Some(Value::String(name)) if self.shared.catalog.get(name).is_some() => name,
            Some(other) => {
                let error = format!("Error: no piece {other}; omit `piece` for the default");
                return Gate::Answer(error, true);
            }
        };
        self.turn_delegates += 1;
        if self.turn_delegates > settings.max_subtasks_per_turn {
            let error = format!(
                "Error: one reply may start at most {} subtasks; start this one once those are done",
                settings.max_subtasks_per_turn
            );
            return Gate::Answer(error, true);
        }
        Gate::Spawn(Delegation {
            key,
            instruction: instruction.to_owned(),
            piece: piece.to_owned(),
        })
    }

    /// Start (or find, on a claim after a crash) the children of the checked `delegate`
    /// calls and dispatch them; the items the job then waits for.
    pub(super) async fn start_subtasks(
        &mut self,
        delegations: Vec<(ToolCall, Delegation)>,
    ) -> Result<Vec<(ToolCall, NewAction)>, JobError> {
        let claim = self.claim;
        let parent = Parent {
            fence: self.fence,
            task_id: claim.task_id,
            owner: &claim.owner,
            model: claim.model.as_deref(),
            profile: &claim.profile,
            max_attempts: claim.task_max_attempts,
            depth: claim.depth,
            workspace_id: claim.workspace_id,
        };
        let mut parked = Vec::with_capacity(delegations.len());
        for (call, delegation) in delegations {
            let new = NewSubtask {
                key: &delegation.key,
                instruction: &delegation.instruction,
                piece: &delegation.piece,
            };
            let spawned = subtasks::spawn(&self.shared.pool, &parent, &new)
                .await?
                .ok_or(jobs::Fenced(self.fence.job_id))?;
            tracing::info!(
                subtask_id = %spawned.task_id,
                created = spawned.created,
                piece = %delegation.piece,
                "subtask started"
            );
            // Dispatched every time (the dispatch id de-duplicates it): a parent that crashed
            // between starting the child and dispatching it heals here; the re-dispatcher
            // also would.
            let dispatch = JobDispatch {
                job_id: spawned.job_id,
                task_id: spawned.task_id,
                attempt: 0,
            };
            let shared = self.shared;
            if let Err(e) = maestro_messaging::publish::dispatch_job(
                &shared.js,
                &shared.subjects,
                &claim.profile,
                &dispatch,
            )
            .await
            {
                tracing::warn!(error = %e, "subtask dispatch not published; the scheduler will retry it");
            }
            let item = NewAction {
                key: delegation.key,
                kind: WaitReason::Subtask,
                movement: self.place.movement.clone(),
                source_seq: None,
                detail: json!({
                    "subtask_id": spawned.task_id,
                    "instruction": delegation.instruction,
                    "piece": delegation.piece,
                }),
                subtask: Some(spawned.task_id),
            };
            parked.push((call, item));
        }
        Ok(parked)
    }
}

/// What a `delegate` call is answered with once its child is over: `(content, is_error)`.
pub(super) fn child_result(action: &Action) -> (String, bool) {
    let id = action.detail["subtask_id"].as_str().unwrap_or("?");
    let decision = action.decision.clone().unwrap_or_default();
    let text = |key: &str| decision[key].as_str().unwrap_or_default().to_owned();
    match decision["decision"].as_str() {
        Some("succeeded") => (
            format!("Subtask {id} succeeded. Its result:\n{}", text("result")),
            false,
        ),
        Some("failed") => (
            format!("Error: subtask {id} failed: {}", text("error")),
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
        .filter(|a| {
            a.decision
                .as_ref()
                .is_some_and(|d| d["decision"] == "succeeded")
        })
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
    use maestro_domain::{JobId, TaskId};

    fn resolved(status: &str, result: Option<&str>, error: Option<&str>) -> Action {
        Action {
            id: uuid::Uuid::now_v7(),
            task_id: TaskId::new(),
            job_id: JobId::new(),
            kind: "subtask".into(),
            status: "resolved".into(),
            key: "work/1/call_1".into(),
            movement: "work".into(),
            source_seq: Some(3),
            detail: json!({"subtask_id": "c1", "instruction": "x", "piece": "chat"}),
            decision: Some(json!({"decision": status, "result": result, "error": error})),
            created_at: chrono::Utc::now(),
            decided_at: Some(chrono::Utc::now()),
        }
    }

    #[test]
    fn children_answer_their_calls() {
        assert_eq!(
            child_result(&resolved("succeeded", Some("42 files"), None)),
            (
                "Subtask c1 succeeded. Its result:\n42 files".to_owned(),
                false
            )
        );
        assert_eq!(
            child_result(&resolved("failed", None, Some("LLM: 500"))),
            ("Error: subtask c1 failed: LLM: 500".to_owned(), true)
        );
        assert_eq!(
            child_result(&resolved("cancelled", None, None)),
            ("Error: subtask c1 was cancelled".to_owned(), true)
        );
    }

    #[test]
    fn the_resume_notice_counts_the_outcomes() {
        let all_good = resume_notice(&[resolved("succeeded", Some("a"), None)], "work");
        assert_eq!(
            all_good,
            "[Subtasks finished] The 1 subtask(s) you started are over: 1 succeeded. Each \
             one's result is the result of its `delegate` call above. Continue movement `work` \
             with them."
        );
        let mixed = resume_notice(
            &[
                resolved("succeeded", Some("a"), None),
                resolved("failed", None, Some("e")),
            ],
            "review",
        );
        assert!(mixed.contains("2 subtask(s)"), "{mixed}");
        assert!(
            mixed.contains("1 succeeded, 1 failed or were cancelled"),
            "{mixed}"
        );
        assert!(mixed.contains("movement `review`"), "{mixed}");
    }
}
