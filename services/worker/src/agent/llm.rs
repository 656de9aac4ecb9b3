//! One streaming LLM call: fragments are published live as deltas and merged into the
//! completion; the call is abandoned when the job's lease is lost or the worker releases it.

use maestro_db::jobs::Fenced;
use maestro_domain::{Message, Usage};
use maestro_llm::{Accumulator, ChatRequest, Completion, LlmClient, LlmError, StreamEvent};
use maestro_messaging::payloads::DeltaFragment;

use super::context::JobError;
use super::early_reads::EarlyReads;
use super::first_call::FirstCall;
use super::run::{JobRun, Waits};

/// Why a call produced no completion, other than losing the job.
#[derive(Debug)]
pub(super) enum Interrupt {
    Llm(LlmError),
    /// The worker is shutting down and its grace period is over.
    Released,
}

impl JobRun<'_> {
    /// One streaming LLM call, as a span `llm` of the job's trace with the model, the tokens
    /// and the outcome.
    pub(super) async fn llm_iteration(
        &mut self,
    ) -> Result<Result<Completion, Interrupt>, JobError> {
        use tracing::Instrument as _;
        // An early first call was sent in its own `llm` span: the call's span, whichever
        // request is answered.
        let span = match &self.first_call {
            Some(early) if early.model == self.model => early.span.clone(),
            _ => span(&self.model, self.iterations + 1),
        };
        let result = self.stream_llm().instrument(span.clone()).await;
        let outcome = match &result {
            Ok(Ok(completion)) => {
                if let Some(usage) = &completion.usage {
                    span.record("prompt_tokens", usage.prompt_tokens);
                    span.record("cached_tokens", usage.cached_prompt_tokens);
                    span.record("completion_tokens", usage.completion_tokens);
                }
                if let Some(reason) = &completion.finish_reason {
                    span.record("finish_reason", reason.as_str());
                }
                "ok"
            }
            Ok(Err(Interrupt::Llm(_))) => "error",
            Ok(Err(Interrupt::Released)) => "released",
            Err(_) => "lost",
        };
        span.record("outcome", outcome);
        result
    }

    async fn stream_llm(&mut self) -> Result<Result<Completion, Interrupt>, JobError> {
        let in_flight = self.journal.take_in_flight();
        let request = ChatRequest {
            model: &self.model,
            tools: Some(&self.tools.json),
            messages: &self.journal.messages,
        };
        let mut early = self.first_call.take();
        let reads = early.as_mut().and_then(|early| early.reads.take());
        let (lost, release) = (self.delivery.lost.clone(), self.shared.release.clone());
        let waited = std::time::Instant::now();
        let mut call = LlmCallMetrics::start();
        // The request goes out while the commit of the results it carries (sent by the turn
        // before) is still running. With no commit wait its reply is read only once that
        // commit has answered; with one the commit stays with the journal, and the reply's
        // own commit takes the results back or waits for them (`journal.rs`).
        let (sent, started) = tokio::join!(
            async {
                match in_flight {
                    Some(in_flight) => Some(in_flight.answer().await),
                    None => None,
                }
            },
            async {
                tokio::select! {
                    (started, sent_at) = ask(&self.shared.llm, early, request) => {
                        Start::Started(started, sent_at)
                    }
                    _ = lost.cancelled() => Start::Lost,
                    _ = release.cancelled() => Start::Released,
                }
            }
        );
        if let Some(sent) = sent {
            self.journal.answered(sent?).await?;
        }
        let started = match started {
            Start::Started(started, sent_at) => {
                // An early answer's call began when its request went out.
                call.start = sent_at.unwrap_or(call.start);
                // Its calls' early reads are taken where nothing else can have written the
                // workspace since they were sent.
                if sent_at.is_some() && super::catalog::untouched(self.claim) {
                    self.early_reads = reads.map(EarlyReads::new);
                }
                started
            }
            Start::Lost => return Err(JobError::Fenced(Fenced(self.fence.job_id))),
            Start::Released => return Ok(Err(Interrupt::Released)),
        };
        let mut stream = match started {
            Ok(stream) => stream,
            Err(e) => {
                call.end("error", None);
                return Ok(Err(Interrupt::Llm(e)));
            }
        };
        Waits::add(&self.waits.llm_us, waited);
        let mut acc = Accumulator::default();
        loop {
            let waited = std::time::Instant::now();
            let next = tokio::select! {
                next = stream.next() => next,
                _ = lost.cancelled() => return Err(JobError::Fenced(Fenced(self.fence.job_id))),
                _ = release.cancelled() => return Ok(Err(Interrupt::Released)),
            };
            Waits::add(&self.waits.llm_us, waited);
            let Some(event) = next else { break };
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    call.end("error", None);
                    return Ok(Err(Interrupt::Llm(e)));
                }
            };
            call.first_event();
            if let Some(fragment) = fragment_of(&event) {
                self.journal.delta(fragment).await;
            }
            acc.push(&event);
        }
        let completion = acc.finish();
        call.end("ok", completion.usage.as_ref());
        if let Some(usage) = completion.usage {
            tracing::info!(
                "prompt_cache reused={} prompt={} pct={:.1}",
                usage.cached_prompt_tokens,
                usage.prompt_tokens,
                usage.cache_pct()
            );
        }
        Ok(Ok(completion))
    }
}

/// The span of one LLM call of a job: `llm`, with the model, the iteration, and (recorded at its
/// end) the tokens and the outcome.
pub(super) fn span(model: &str, iteration: u32) -> tracing::Span {
    use tracing::field::Empty;
    tracing::info_span!(
        "llm",
        model = %model,
        iteration,
        prompt_tokens = Empty,
        cached_tokens = Empty,
        completion_tokens = Empty,
        finish_reason = Empty,
        outcome = Empty
    )
}

/// Start a streaming call: with the early answer when the job's first request was sent while
/// it was claimed ([`FirstCall`]) and is this very request (and then when it was sent), else
/// now.
async fn ask(
    llm: &LlmClient,
    early: Option<FirstCall>,
    request: ChatRequest<'_>,
) -> (
    Result<maestro_llm::ChatStream, LlmError>,
    Option<std::time::Instant>,
) {
    let body = LlmClient::body(request);
    if let Some(early) = early {
        let sent_at = early.sent_at;
        if let Some(answer) = early.answer(&body).await {
            return (answer, Some(sent_at));
        }
    }
    (llm.stream_body(body).await, None)
}

/// How the start of a streaming call ended.
enum Start {
    /// With when the request was sent, if before this call (an early first call's).
    Started(
        Result<maestro_llm::ChatStream, LlmError>,
        Option<std::time::Instant>,
    ),
    /// The job's lease was lost.
    Lost,
    /// The worker released the job.
    Released,
}

/// The metrics of one streaming call: its duration, the time to its first event, its tokens.
struct LlmCallMetrics {
    start: std::time::Instant,
    first: std::cell::Cell<bool>,
}

impl LlmCallMetrics {
    fn start() -> Self {
        Self {
            start: std::time::Instant::now(),
            first: std::cell::Cell::new(false),
        }
    }

    fn first_event(&self) {
        if !self.first.replace(true) {
            metrics::histogram!(maestro_runtime::metrics::LLM_FIRST_TOKEN)
                .record(maestro_runtime::metrics::seconds(self.start));
        }
    }

    fn end(&self, outcome: &'static str, usage: Option<&Usage>) {
        use maestro_runtime::metrics::{LLM_DURATION, LLM_TOKENS, seconds};
        metrics::histogram!(LLM_DURATION, "outcome" => outcome).record(seconds(self.start));
        if let Some(usage) = usage {
            metrics::counter!(LLM_TOKENS, "kind" => "prompt").increment(usage.prompt_tokens);
            metrics::counter!(LLM_TOKENS, "kind" => "cached").increment(usage.cached_prompt_tokens);
            metrics::counter!(LLM_TOKENS, "kind" => "completion")
                .increment(usage.completion_tokens);
        }
    }
}

/// A plain text answer (no tools, no deltas): the router's choice, the prompt guard's
/// summary.
pub(super) async fn text(
    llm: &LlmClient,
    model: &str,
    messages: &[Message],
) -> Result<(String, Option<Usage>), LlmError> {
    let request = ChatRequest {
        model,
        tools: None,
        messages,
    };
    let mut stream = llm.stream_chat(request).await?;
    let mut acc = Accumulator::default();
    while let Some(event) = stream.next().await {
        acc.push(&event?);
    }
    let completion = acc.finish();
    Ok((completion.content.unwrap_or_default(), completion.usage))
}

/// The live delta for a stream event, if it is one a client shows.
fn fragment_of(event: &StreamEvent) -> Option<DeltaFragment> {
    match event {
        StreamEvent::Text(text) => Some(DeltaFragment::Text { text: text.clone() }),
        StreamEvent::Thinking(text) => Some(DeltaFragment::Reasoning { text: text.clone() }),
        StreamEvent::ToolCall {
            index,
            id,
            name,
            arguments,
        } => Some(DeltaFragment::ToolCall {
            index: *index,
            call_id: id.clone(),
            name: name.clone(),
            arguments: arguments.clone(),
        }),
        _ => None,
    }
}
