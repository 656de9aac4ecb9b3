//! The calls that end a movement: `transition` (to another movement, or to `COMPLETE` /
//! `ABORT`) and `complete` (success, a question for the user, or abort). They are answered
//! after the regular calls of the same message; an invalid one gets an `Error…` result and
//! the movement goes on.

use maestro_domain::piece::{ABORT, COMPLETE};
use maestro_domain::tools::{self, CompleteStatus};
use maestro_domain::{ActionDetail, JobStateChange, Message, MessageEvent, ToolCall, WaitReason};
use serde_json::Value;

use super::context::{JobEnd, JobError};
use super::run::JobRun;
use crate::conversation;

/// What a final call asks for, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Final {
    /// Go to another movement of the piece.
    Move { target: String, reason: String },
    /// End the piece with this status and result.
    End {
        status: CompleteStatus,
        result: String,
    },
}

/// Check a `transition` or `complete` call against the movement it was made in (`targets`:
/// the movement's ways out). `Err` is the tool result the model gets instead.
pub(super) fn check(call: &ToolCall, targets: &[&str], movement: &str) -> Result<Final, String> {
    let arguments = tools::parse_arguments(&call.function.arguments)?;
    let text = |key: &str| {
        arguments
            .get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or_default()
            .to_owned()
    };
    if call.name() == tools::COMPLETE {
        let result = text("result");
        if result.is_empty() {
            return Err("Error: `complete` needs a non-empty `result` string".to_owned());
        }
        let status = match arguments.get("status") {
            None | Some(Value::Null) => CompleteStatus::Success,
            Some(status) => serde_json::from_value(status.clone()).map_err(|_| {
                "Error: `status` is one of success, needs_user_input, abort, decline, reply"
                    .to_owned()
            })?,
        };
        return Ok(Final::End { status, result });
    }
    let (target, reason) = (text("target"), text("reason"));
    if !targets.contains(&target.as_str()) {
        let ways = if targets.is_empty() {
            "it has none: call `complete` when the task is done".to_owned()
        } else {
            format!("its targets are {}", targets.join(", "))
        };
        return Err(format!(
            "Error: {target:?} is not a way out of movement `{movement}`; {ways}"
        ));
    }
    Ok(match target.as_str() {
        COMPLETE => Final::End {
            status: CompleteStatus::Success,
            result: if reason.is_empty() {
                "complete".to_owned()
            } else {
                reason
            },
        },
        ABORT => Final::End {
            status: CompleteStatus::Abort,
            result: reason,
        },
        _ => Final::Move { target, reason },
    })
}

impl JobRun<'_> {
    /// Answer the final calls of a message (after its regular calls). `Some` ends the job.
    pub(super) async fn run_finals(
        &mut self,
        finals: Vec<ToolCall>,
    ) -> Result<Option<JobEnd>, JobError> {
        if finals.len() > 1 {
            let note = "Error: call `transition` or `complete` once, alone";
            for call in &finals {
                self.journal.record_result(call, note.to_owned(), true);
            }
            return Ok(None);
        }
        let Some(call) = finals.into_iter().next() else {
            return Ok(None);
        };
        let movement = self.movement();
        let targets: Vec<&str> = movement
            .transitions
            .iter()
            .map(|t| t.target.as_str())
            .collect();
        let decided = match check(&call, &targets, &movement.name) {
            Ok(decided) => decided,
            Err(error) => {
                self.journal.record_result(&call, error, true);
                return Ok(None);
            }
        };
        match decided {
            Final::Move { target, reason } => self.transition(&call, &target, &reason).await,
            Final::End {
                status: CompleteStatus::Success,
                result,
            } => self.complete_as(&call, result, None).await,
            Final::End {
                status: CompleteStatus::NeedsUserInput,
                result,
            } => self.ask_user(&call, result).await,
            Final::End {
                status: CompleteStatus::Abort,
                result,
            } => {
                self.journal.record_result(&call, "ok".to_owned(), false);
                let error = format!("aborted in movement `{}`: {result}", self.place.movement);
                self.fail(error).await.map(Some)
            }
            Final::End {
                status: CompleteStatus::Decline,
                result,
            } => {
                self.journal.record_result(&call, "ok".to_owned(), false);
                let error = format!("declined: {result}");
                let declined = Some(JobStateChange::DECLINED);
                self.fail_as(error, declined).await.map(Some)
            }
            Final::End {
                status: CompleteStatus::Reply,
                result,
            } => {
                self.complete_as(&call, result, Some(JobStateChange::REPLIED))
                    .await
            }
        }
    }

    /// `complete` with success: the job succeeds, unless an interjection came in first (the
    /// model reads it before finishing).
    async fn complete_as(
        &mut self,
        call: &ToolCall,
        result: String,
        reason: Option<&str>,
    ) -> Result<Option<JobEnd>, JobError> {
        self.journal.record_result(call, "ok".to_owned(), false);
        if let Some(end) = self.succeed_as(result, reason).await? {
            return Ok(Some(end));
        }
        let note = "Error: the user sent a message before the task was complete; \
                    read it, then finish again";
        self.journal.record_result(call, note.to_owned(), true);
        Ok(None)
    }

    /// `complete` with `needs_user_input`: the job pauses for the user's answer, within the
    /// task's ask limit.
    async fn ask_user(
        &mut self,
        call: &ToolCall,
        question: String,
    ) -> Result<Option<JobEnd>, JobError> {
        let limit = self.shared.settings.max_asks;
        if self.claim.ask_count >= limit {
            let error = format!(
                "Error: the user has been asked {limit} questions in this task, the most \
                 allowed; finish with what you know (status `success` or `abort`)"
            );
            self.journal.record_result(call, error, true);
            return Ok(None);
        }
        let note = "ok: your question is with the user; their answer comes as the next message";
        self.journal.record_result(call, note.to_owned(), false);
        let reason = format!("the agent asks: {question}");
        let item = self.site(call).item(ActionDetail::Ask { question });
        self.pause(WaitReason::Ask, reason, vec![item])
            .await
            .map(Some)
    }

    /// Move to `target`, unless the loop or revisit guard stops the job.
    async fn transition(
        &mut self,
        call: &ToolCall,
        target: &str,
        reason: &str,
    ) -> Result<Option<JobEnd>, JobError> {
        let piece = self.piece;
        let Some(next) = piece.movement(target) else {
            unreachable!("checked targets are movements of the piece");
        };
        self.journal
            .record_result(call, format!("ok: now in movement `{target}`"), false);
        let visits = self.place.visits.get(target).copied().unwrap_or(0);
        if self.place.entered >= piece.max_movements {
            let error = format!(
                "loop guard: piece `{}` may enter {} movements in all (max_movements)",
                piece.name, piece.max_movements
            );
            return self.fail(error).await.map(Some);
        }
        if visits >= piece.max_visits {
            let error = format!(
                "revisit guard: movement `{target}` was entered {visits} times (max_visits of piece `{}`)",
                piece.name
            );
            return self.fail(error).await.map(Some);
        }
        let from = self.place.movement.clone();
        self.enter(next, Some(&from), Some(reason));
        let guidance: Message = conversation::entering(piece, next, &from, reason);
        self.journal.record(MessageEvent::plain(guidance));
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall::new("c1", name, arguments)
    }

    #[test]
    fn transitions_are_checked_against_the_movement() {
        let targets = ["review", "ABORT"];
        let moved = check(
            &call("transition", r#"{"target":"review","reason":"tests pass"}"#),
            &targets,
            "implement",
        );
        assert_eq!(
            moved,
            Ok(Final::Move {
                target: "review".into(),
                reason: "tests pass".into()
            })
        );
        let invalid = check(
            &call("transition", r#"{"target":"plan","reason":"x"}"#),
            &targets,
            "implement",
        )
        .expect_err("plan is not a way out");
        assert_eq!(
            invalid,
            "Error: \"plan\" is not a way out of movement `implement`; its targets are review, ABORT"
        );
        assert!(
            check(&call("transition", "{}"), &[], "work").is_err_and(|e| e.contains("it has none"))
        );
        let aborted = check(
            &call("transition", r#"{"target":"ABORT","reason":"unsafe"}"#),
            &targets,
            "implement",
        );
        assert_eq!(
            aborted,
            Ok(Final::End {
                status: CompleteStatus::Abort,
                result: "unsafe".into()
            })
        );
        let completed = check(
            &call("transition", r#"{"target":"COMPLETE","reason":"done"}"#),
            &["COMPLETE"],
            "review",
        );
        assert_eq!(
            completed,
            Ok(Final::End {
                status: CompleteStatus::Success,
                result: "done".into()
            })
        );
    }

    #[test]
    fn complete_maps_its_status() {
        let end = |arguments: &str| check(&call("complete", arguments), &[], "work");
        let status = |arguments: &str| match end(arguments) {
            Ok(Final::End { status, .. }) => Some(status),
            _ => None,
        };
        assert_eq!(
            status(r#"{"result":"done"}"#),
            Some(CompleteStatus::Success)
        );
        assert_eq!(
            status(r#"{"result":"which file?","status":"needs_user_input"}"#),
            Some(CompleteStatus::NeedsUserInput)
        );
        assert_eq!(
            status(r#"{"result":"no","status":"abort"}"#),
            Some(CompleteStatus::Abort)
        );
        assert!(end(r#"{"result":"x","status":"maybe"}"#).is_err());
        assert!(end(r#"{"result":"  "}"#).is_err());
        assert!(end("[1]").is_err());
    }
}
