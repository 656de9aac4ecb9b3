//! A new task's first LLM request, sent while its job is being claimed. The claim is a commit
//! and the first LLM call a hop to another process: one after the other they add up, side by
//! side the job waits for the longer alone.
//!
//! The request is built from what the dispatch says of the new task ([`JobDispatch::opening`])
//! the way [`JobRun::open`](super::run::JobRun::open) opens a first claim of a task's first
//! job. Once claimed, the job builds its own first request as always and takes the early
//! answer only when its request is the same, byte for byte: then it is an answer to that very
//! request, asked a millisecond sooner. Otherwise — the claim went elsewhere, a comment joined
//! the instruction while the job was queued, the prompt guard rewrote the request — the early
//! call is dropped with its connection and the job asks again. Nothing of the early answer is
//! shown or kept before the claim: its bytes are taken off the connection as they come
//! ([`LlmClient::stream_body_read_ahead`]), so the claimed job finds what came during the claim
//! waiting for it, but they are parsed, and its deltas published, only as the claimed job reads
//! them; an answer no job takes is dropped with what was read of it.
//! A call is never made for a job this worker could not claim for its model, for a routed
//! piece (the router asks first), when an MCP server may need the owner's login, or when the
//! prompt guard would not send the request as it is.
//!
//! When the answer's calls only read, they are sent early too ([`super::early_reads`]).

use std::collections::BTreeMap;

use bytes::Bytes;
use maestro_db::claims::{A2aOrigin, Claimed};
use maestro_domain::piece;
use maestro_domain::tools::WorkspaceContext;
use maestro_llm::{ChatRequest, ChatStream, LlmClient, LlmError};
use maestro_messaging::payloads::{JobDispatch, Opening};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use super::catalog;
use super::context::Shared;
use super::early_reads::{self, Read};
use crate::conversation;

/// The early first call of one job.
#[derive(Debug)]
pub struct FirstCall {
    /// The request's bytes and how its answer began; `None` when it could not be made.
    call: JoinHandle<Option<(Bytes, Result<ChatStream, LlmError>)>>,
    taken: bool,
    /// The model it asked.
    pub(super) model: String,
    /// Its `llm` span, which the job's first call goes on in: its trace shows one span per
    /// call, and the request carries it.
    pub(super) span: tracing::Span,
    /// When it started, for the call's metrics.
    pub(super) sent_at: std::time::Instant,
    /// The answer's calls sent early, when they only read.
    pub(super) reads: Option<oneshot::Receiver<Vec<Read>>>,
}

impl FirstCall {
    /// Send the first request of `dispatch`'s job, when what it will be is known before the
    /// claim.
    pub fn start(shared: &Shared, dispatch: &JobDispatch) -> Option<Self> {
        let opening = dispatch.opening.as_ref()?;
        let wanted = shared.settings.early_first_call && !shared.release.is_cancelled();
        if !wanted || dispatch.attempt != 0 || !dispatch.fresh {
            return None;
        }
        let served = |model: &String| shared.settings.models.contains(model);
        let model_served = shared.settings.models.is_empty() || opening.model.iter().all(served);
        let logins = shared
            .policy
            .mcp_servers
            .values()
            .any(|s| s.requires_auth || s.may_need_login());
        if opening.piece == piece::ROUTER || !model_served || logins {
            return None;
        }
        let claim = first_claim(dispatch, opening);
        let model = (claim.model.as_ref())
            .unwrap_or(&shared.settings.default_model)
            .clone();
        let span = super::llm::span(&model, 1);
        let shared = shared.clone();
        let (decided, reads) = oneshot::channel();
        let call = tokio::spawn(
            async move { request(&shared, &claim, decided).await }.instrument(span.clone()),
        );
        Some(Self {
            call,
            taken: false,
            model,
            span,
            sent_at: std::time::Instant::now(),
            reads: Some(reads),
        })
    }

    /// The answer to the request `body`, when the early call asked the same; else `None` (the
    /// early call is dropped).
    pub(super) async fn answer(mut self, body: &[u8]) -> Option<Result<ChatStream, LlmError>> {
        self.taken = true;
        let Some((asked, answer)) = (&mut self.call).await.ok().flatten() else {
            // Not sent at all (see `request`): nothing was paid for, nothing is counted.
            self.span.record("outcome", "not_sent");
            return None;
        };
        let (outcome, answer) = match asked == body {
            true => ("used", Some(answer)),
            false => ("asked_again", None),
        };
        tracing::debug!(outcome, "early first call");
        counted(outcome);
        if answer.is_none() {
            // The job asks again in a span of its own; this one's call ends here.
            self.span.record("outcome", outcome);
        }
        answer
    }
}

/// One that no job compared with its request (the claim went elsewhere, or the job ended
/// before its first LLM call) is stopped, and its connection closed. One that had decided not
/// to send anything (see `request`) cost nothing and is not counted.
impl Drop for FirstCall {
    fn drop(&mut self) {
        if self.taken {
            // `answer` awaited the call (it must not be polled again) and counted it.
            self.call.abort();
            return;
        }
        let not_sent = matches!(
            futures::FutureExt::now_or_never(&mut self.call),
            Some(Ok(None) | Err(_))
        );
        self.call.abort();
        if not_sent {
            self.span.record("outcome", "not_sent");
        } else {
            counted("unused");
            self.span.record("outcome", "unused");
        }
    }
}

fn counted(outcome: &'static str) {
    metrics::counter!(maestro_runtime::metrics::EARLY_FIRST_CALLS, "outcome" => outcome)
        .increment(1);
}

/// Send the first request of `claim`'s job as it opens; `None`, sending nothing, when the
/// worker has no such piece, an MCP server asks for a login, or the prompt guard would not
/// send the request as it is. The answer's calls, if they only read, are sent as it ends and
/// said on `decided`.
async fn request(
    shared: &Shared,
    claim: &Claimed,
    decided: oneshot::Sender<Vec<Read>>,
) -> Option<(Bytes, Result<ChatStream, LlmError>)> {
    let piece = shared.catalog.get(&claim.piece)?;
    let start = claim
        .start_movement
        .as_deref()
        .and_then(|m| piece.movement(m))
        .or_else(|| piece.movement(&piece.start))?;
    let offered = catalog::tools(shared, piece, claim, &BTreeMap::new()).await;
    if !offered.logins.is_empty() {
        return None;
    }
    let opening = conversation::Opening {
        tools: &offered.tools.specs,
        claim,
        follow_ups: &[],
        question: None,
        workspace: &WorkspaceContext::default(),
        handoff: None,
        additions: &[],
    };
    let messages = conversation::seed(piece, start, opening);
    // A request the prompt guard would rewrite or refuse is not sent.
    let max = shared.settings.max_prompt_tokens;
    if !super::guard::fits(&messages, &offered.tools.json, max) {
        return None;
    }
    let model = claim
        .model
        .as_ref()
        .unwrap_or(&shared.settings.default_model);
    let body = LlmClient::body(ChatRequest {
        model,
        tools: Some(&offered.tools.json),
        messages: &messages,
    });
    let answer = (shared.llm.stream_body_read_ahead(body.clone()).await).map(|(answer, copy)| {
        let opened = early_reads::Opened {
            claim: claim.clone(),
            movement: start.name.clone(),
            // The tools its start movement may use.
            specs: (offered.tools.specs.iter())
                .filter(|spec| start.refusal(&spec.name).is_none())
                .cloned()
                .collect(),
        };
        let reads = early_reads::send(shared.clone(), opened, copy, decided);
        tokio::spawn(reads.in_current_span());
        answer
    });
    Some((body, answer))
}

/// The claim a new task's first job gets at its first claim, as far as its opening shows it.
fn first_claim(dispatch: &JobDispatch, opening: &Opening) -> Claimed {
    Claimed {
        job_id: dispatch.job_id,
        task_id: dispatch.task_id,
        job_no: 1,
        attempt: 1,
        max_attempts: 1,
        profile: String::new(),
        claim_seq: 0,
        owner: opening.owner.clone(),
        instruction: opening.instruction.clone(),
        piece: opening.piece.clone(),
        start_movement: opening.start_movement.clone(),
        model: opening.model.clone(),
        created_at: opening.created_at,
        resume_movement: None,
        resume_question: None,
        ask_count: 0,
        grants: Vec::new(),
        parent_task_id: None,
        depth: 0,
        workspace_id: dispatch.task_id,
        task_max_attempts: 1,
        pending_interjections: 0,
        continued_from: None,
        a2a: opening.a2a_message_id.clone().map(|message_id| A2aOrigin {
            message_id,
            context_id: opening.a2a_context_id.clone(),
        }),
        space_id: None,
        space_policy: None,
        unplaced_attachments: false,
        running: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn early(asked: &'static [u8]) -> FirstCall {
        let answer = Err(LlmError::Protocol("the early answer".to_owned()));
        let call = tokio::spawn(async move { Some((Bytes::from_static(asked), answer)) });
        called(call)
    }

    fn called(call: JoinHandle<Option<(Bytes, Result<ChatStream, LlmError>)>>) -> FirstCall {
        FirstCall {
            call,
            taken: false,
            model: "m".to_owned(),
            span: tracing::Span::none(),
            sent_at: std::time::Instant::now(),
            reads: None,
        }
    }

    #[tokio::test]
    async fn the_early_answer_is_taken_only_for_the_same_request_bytes() {
        let same = early(br#"{"model":"m"}"#).answer(br#"{"model":"m"}"#).await;
        assert!(
            matches!(&same, Some(Err(LlmError::Protocol(m))) if m == "the early answer"),
            "{same:?}"
        );
        let other = early(br#"{"model":"m"}"#)
            .answer(br#"{"model": "m"}"#)
            .await;
        assert!(other.is_none(), "one byte differs: asked again");
        let none = called(tokio::spawn(async { None }));
        assert!(
            none.answer(b"{}").await.is_none(),
            "no early request was made"
        );
    }
}
