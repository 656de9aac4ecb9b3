//! A new task's first tool calls, when they only read, sent while its job is claimed. The
//! early first LLM call ([`super::first_call`]) is answered while the claim is still being
//! made; a copy of that answer is read as it comes, and when every call in it is a read-only
//! built-in tool, those calls go to the tool-runner at once, as the job would send them once
//! claimed. The claimed job takes a reply only for a request equal to the one it sends, field
//! for field, and only when nothing but the job itself can have written the workspace since
//! ([`super::catalog::untouched`]: a new task's first job, in a workspace of its own, with no
//! files to place): then it is the reply its own request would have got, asked sooner. A
//! reply no request takes is dropped: a read has no effect to undo. Calls that do more than
//! read are never sent early, and neither is anything of an answer with one: the job runs
//! those in order, and a read must see what the calls before it wrote. Nor is a read the tool
//! policy refuses or leaves to a person's approval, or one its start movement may not make.

use std::collections::HashSet;
use std::time::Duration;

use maestro_db::claims::Claimed;
use maestro_domain::tools::{self, ToolExecReply, ToolExecRequest, ToolSpec};
use maestro_llm::{Accumulator, ChatStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use super::context::Shared;
use super::execute::{operation_id, tool_request};
use crate::tool_client::{self, Unavailable};

/// The tools a call may be sent early for: the tool-runner's reads of the workspace. (The
/// worker's own tools — `complete`, `ask`, `transition` — are read-only too, but the job
/// answers them itself; `http_fetch` reaches out of the machine.)
const EARLY: [&str; 4] = ["read_file", "list_files", "glob", "grep"];

/// One read sent early: its request, and its reply to come.
pub(super) type Read = (
    ToolExecRequest,
    JoinHandle<Result<ToolExecReply, Unavailable>>,
);

/// The early reads of one job, once decided.
#[derive(Debug)]
pub(super) struct EarlyReads(tokio::sync::Mutex<Reads>);

#[derive(Debug)]
enum Reads {
    /// Still reading the answer; a dropped sender means none.
    Deciding(oneshot::Receiver<Vec<Read>>),
    Decided(Vec<Read>),
}

impl EarlyReads {
    pub(super) fn new(decided: oneshot::Receiver<Vec<Read>>) -> Self {
        Self(tokio::sync::Mutex::new(Reads::Deciding(decided)))
    }

    /// The reply to `request`, if it was sent early. Waits for the decision, which comes as
    /// soon as the answer's copy is read to its end: the job asks only once it has read the
    /// answer itself.
    pub(super) async fn take(
        &self,
        request: &ToolExecRequest,
    ) -> Option<JoinHandle<Result<ToolExecReply, Unavailable>>> {
        let mut reads = self.0.lock().await;
        if let Reads::Deciding(decided) = &mut *reads {
            *reads = Reads::Decided(decided.await.unwrap_or_default());
        }
        let Reads::Decided(sent) = &mut *reads else {
            return None;
        };
        let at = sent.iter().position(|(asked, _)| asked == request)?;
        counted("used", 1);
        Some(sent.swap_remove(at).1)
    }
}

/// Reads no request took are stopped (their replies would be dropped anyway).
impl Drop for Reads {
    fn drop(&mut self) {
        if let Reads::Decided(sent) = self {
            for (_, reply) in sent.iter() {
                reply.abort();
            }
            counted("unused", sent.len());
        }
    }
}

fn counted(outcome: &'static str, reads: usize) {
    if reads > 0 {
        metrics::counter!(maestro_runtime::metrics::EARLY_READS, "outcome" => outcome)
            .increment(reads as u64);
    }
}

/// What the first job of a task is opened with, as far as its early call knows it.
pub(super) struct Opened {
    pub claim: Claimed,
    pub movement: String,
    /// The tools offered that its start movement may use.
    pub specs: Vec<ToolSpec>,
}

/// Read `copy` (the early answer) to its end; when every call in it is a read-only built-in
/// tool with an id of its own, send them all and say so on `decided`. Otherwise, or when the
/// copy fails, `decided` is dropped: no reads.
pub(super) async fn send(
    shared: Shared,
    opened: Opened,
    mut copy: ChatStream,
    decided: oneshot::Sender<Vec<Read>>,
) {
    let mut answer = Accumulator::default();
    while let Some(event) = copy.next().await {
        let Ok(event) = event else { return };
        answer.push(&event);
    }
    let Some(requests) = requests(&shared, &opened, &answer.finish().tool_calls) else {
        return;
    };
    let subject = shared.bus.subjects.tools_exec();
    // As the job waits for a reply (`JobRun::send`).
    let wait = shared.settings.tool_timeout + Duration::from_secs(5);
    let sent = requests
        .into_iter()
        .map(|request| {
            let (nats, subject, asked) =
                (shared.bus.nats.clone(), subject.clone(), request.clone());
            // In the early call's span, as the job's own requests go in its spans: the
            // tool-runner's span of the call joins the job's trace.
            let reply = tokio::spawn(
                async move { tool_client::execute(&nats, subject, &asked, wait).await }
                    .in_current_span(),
            );
            (request, reply)
        })
        .collect();
    tracing::debug!("first tool calls sent while the job is claimed");
    // No job took the answer (or not where its reads may be used): they go unused.
    if let Err(unused) = decided.send(sent) {
        drop(Reads::Decided(unused));
    }
}

/// The requests the job will send for `calls` in its first iteration, if all only read.
fn requests(
    shared: &Shared,
    opened: &Opened,
    calls: &[maestro_domain::ToolCall],
) -> Option<Vec<ToolExecRequest>> {
    let mut ids = HashSet::new();
    let mut requests = Vec::with_capacity(calls.len());
    for call in calls {
        let spec = opened.specs.iter().find(|s| s.name == call.name())?;
        // The job keeps an id the model gave (one it gives itself is not known here).
        let own_id = !call.id.is_empty() && ids.insert(call.id.as_str());
        if !EARLY.contains(&spec.name.as_str()) || !spec.is_read_only() || !own_id {
            return None;
        }
        let arguments = tools::parse_arguments(&call.function.arguments).ok()?;
        // Not even a read goes early that the policy refuses or leaves to a person.
        let policy = &shared.policy;
        if policy
            .refusal(&spec.name, &arguments, &opened.claim.grants)
            .is_some()
        {
            return None;
        }
        // The job's first iteration is its first (`JobRun::take_reply`).
        let operation = operation_id(opened.claim.job_id, &opened.movement, 1, &call.id);
        requests.push(tool_request(
            shared,
            (&opened.claim, opened.claim.attempt),
            call,
            (spec, arguments),
            (&operation, false),
            &Default::default(),
        ));
    }
    (!requests.is_empty()).then_some(requests)
}
