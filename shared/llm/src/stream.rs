//! The streaming side: chunks of `chat.completion.chunk` JSON become [`StreamEvent`]s, and an
//! [`Accumulator`] merges them into the final [`Completion`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use eventsource_stream::{Event, EventStreamError, Eventsource as _};
use futures::{Stream, StreamExt};
use maestro_domain::{ToolCall, Usage};
use serde::Deserialize;

use crate::error::LlmError;

/// One thing the model streamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// More answer text.
    Text(String),
    /// More reasoning ("thinking") text, from servers that separate it.
    Thinking(String),
    /// More of tool call number `index`.
    ToolCall {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    /// Why generation stopped.
    Finish(String),
    /// Token accounting (sent last when `stream_options.include_usage` is honoured).
    Usage(Usage),
    /// The model that actually answered.
    Model(String),
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;
type Events = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<BodyError>>> + Send>>;

/// The largest SSE event the client holds while it is incomplete (chat-completion chunks are
/// a few KiB).
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// How many chunks of a body [`ChatStream::read_ahead_copied`] reads before its reader takes
/// them.
pub const READ_AHEAD_CHUNKS: usize = 64;

/// The most bytes of a body read ahead that are copied for a second reader
/// ([`ChatStream::read_ahead_copied`]); past them the copy ends, and its reader gets
/// [`LlmError::Truncated`].
pub const COPY_MAX_BYTES: usize = 256 * 1024;

/// Why the body's bytes stopped.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error("an SSE event grew past {MAX_EVENT_BYTES} bytes without ending")]
    TooLong,
}

/// A streaming answer. Call [`ChatStream::next`] until it returns `None`.
pub struct ChatStream {
    /// The body parsed as SSE (`eventsource-stream`).
    events: Events,
    /// Bytes received since the last complete event: past [`MAX_EVENT_BYTES`] the body fails.
    unfinished: Arc<AtomicUsize>,
    pending: VecDeque<StreamEvent>,
    idle_timeout: Duration,
    model_seen: bool,
    done: bool,
}

impl std::fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStream")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl ChatStream {
    pub(crate) fn new(response: reqwest::Response, idle_timeout: Duration) -> Self {
        Self::of(Box::pin(response.bytes_stream()), idle_timeout)
    }

    /// [`ChatStream::new`], with the body read off the connection on a task of its own as it
    /// comes, up to [`READ_AHEAD_CHUNKS`] chunks ahead of the reader: what arrives before the
    /// reader asks for it is waiting when it does, with no hop to the connection's task per
    /// chunk then. The task ends with the body, or when the stream is dropped.
    ///
    /// With it, a second stream of the same answer for a reader of its own: it gets each chunk
    /// as the read-ahead takes it, up to [`COPY_MAX_BYTES`]. The copy ends with the body, or
    /// early (its reader gets an error) when the body fails, grows past the limit or the first
    /// stream is dropped; dropping the copy changes nothing for the first.
    pub(crate) fn read_ahead_copied(
        response: reqwest::Response,
        idle_timeout: Duration,
    ) -> (Self, Self) {
        Self::read_ahead_of(Box::pin(response.bytes_stream()), idle_timeout)
    }

    fn read_ahead_of(mut body: ByteStream, idle_timeout: Duration) -> (Self, Self) {
        let (sender, receiver) = tokio::sync::mpsc::channel(READ_AHEAD_CHUNKS);
        let (copy, copy_receiver) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        let mut copy = Some(copy);
        tokio::spawn(async move {
            let mut copied = 0;
            loop {
                let chunk = tokio::select! {
                    chunk = body.next() => chunk,
                    () = sender.closed() => return,
                };
                let Some(chunk) = chunk else { return };
                if let Some(to) = &copy {
                    let sent = chunk.as_ref().ok().is_some_and(|bytes| {
                        copied += bytes.len();
                        copied <= COPY_MAX_BYTES && to.send(bytes.clone()).is_ok()
                    });
                    if !sent {
                        copy = None;
                    }
                }
                if sender.send(chunk).await.is_err() {
                    return;
                }
            }
        });
        let chunks = futures::stream::unfold(receiver, |mut receiver| async move {
            let chunk = receiver.recv().await?;
            Some((chunk, receiver))
        });
        let copied = futures::stream::unfold(copy_receiver, |mut receiver| async move {
            let chunk = receiver.recv().await?;
            Some((Ok(chunk), receiver))
        });
        (
            Self::of(Box::pin(chunks), idle_timeout),
            Self::of(Box::pin(copied), idle_timeout),
        )
    }

    /// A stream over bytes already in hand, chunk by chunk as a server would have sent them:
    /// for replaying a recorded answer and for fuzzing the parser.
    pub fn from_chunks(chunks: Vec<Bytes>) -> Self {
        let body = futures::stream::iter(chunks.into_iter().map(Ok));
        Self::of(Box::pin(body), Duration::from_secs(3600))
    }

    fn of(body: ByteStream, idle_timeout: Duration) -> Self {
        let unfinished = Arc::new(AtomicUsize::new(0));
        let counted = unfinished.clone();
        // A broken or hostile server cannot grow the worker's memory without bound: the bytes
        // of an event that never ends are counted, and the body fails past the limit.
        let bounded = body.map(move |chunk| {
            let chunk = chunk?;
            if counted.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len() > MAX_EVENT_BYTES {
                return Err(BodyError::TooLong);
            }
            Ok(chunk)
        });
        Self {
            events: Box::pin(bounded.eventsource()),
            unfinished,
            pending: VecDeque::new(),
            idle_timeout,
            model_seen: false,
            done: false,
        }
    }

    /// The next event, `None` once the server has sent `[DONE]`. An event that grows past
    /// [`MAX_EVENT_BYTES`] without ending is a protocol error (a broken or hostile server
    /// cannot grow the worker's memory without bound).
    pub async fn next(&mut self) -> Option<Result<StreamEvent, LlmError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            let sse = match tokio::time::timeout(self.idle_timeout, self.events.next()).await {
                Err(_) => return Some(Err(LlmError::Idle(self.idle_timeout))),
                Ok(None) => {
                    self.done = true;
                    return Some(Err(LlmError::Truncated));
                }
                Ok(Some(Err(e))) => {
                    self.done = true;
                    return Some(Err(match e {
                        EventStreamError::Transport(BodyError::Http(e)) => e.into(),
                        EventStreamError::Transport(too_long) => {
                            LlmError::Protocol(too_long.to_string())
                        }
                        other => LlmError::Protocol(format!("not a valid event stream: {other}")),
                    }));
                }
                Ok(Some(Ok(sse))) => sse,
            };
            self.unfinished.store(0, Ordering::Relaxed);
            if sse.data.trim() == "[DONE]" {
                self.done = true;
                continue;
            }
            if sse.data.is_empty() {
                continue;
            }
            if let Err(e) = self.decode(&sse.data) {
                self.done = true;
                return Some(Err(e));
            }
        }
    }

    fn decode(&mut self, data: &str) -> Result<(), LlmError> {
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("{e}: {}", truncate(data, 200))))?;
        if let Some(error) = chunk.error {
            return Err(LlmError::Status {
                status: 500,
                body: error.to_string(),
                retry_after: None,
            });
        }
        if let (false, Some(model)) = (self.model_seen, chunk.model) {
            self.model_seen = true;
            self.pending.push_back(StreamEvent::Model(model));
        }
        for choice in chunk.choices {
            if let Some(text) = choice.delta.reasoning_content.filter(|t| !t.is_empty()) {
                self.pending.push_back(StreamEvent::Thinking(text));
            }
            if let Some(text) = choice.delta.content.filter(|t| !t.is_empty()) {
                self.pending.push_back(StreamEvent::Text(text));
            }
            for call in choice.delta.tool_calls {
                let function = call.function.unwrap_or_default();
                self.pending.push_back(StreamEvent::ToolCall {
                    index: call.index,
                    id: call.id.filter(|id| !id.is_empty()),
                    name: function.name.filter(|n| !n.is_empty()),
                    arguments: function.arguments.unwrap_or_default(),
                });
            }
            if let Some(reason) = choice.finish_reason {
                self.pending.push_back(StreamEvent::Finish(reason));
            }
        }
        if let Some(usage) = chunk.usage {
            let cached = usage
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .or(chunk.timings.and_then(|t| t.cache_n))
                .unwrap_or(0);
            self.pending.push_back(StreamEvent::Usage(Usage {
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cached_prompt_tokens: cached,
            }));
        }
        Ok(())
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// llama.cpp's own timing block; `cache_n` is the number of prompt tokens reused.
    #[serde(default)]
    timings: Option<Timings>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Delta,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireToolCall>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Deserialize, Default)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Timings {
    #[serde(default)]
    cache_n: Option<u64>,
}

/// The whole answer, once the stream is over.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Completion {
    pub content: Option<String>,
    /// The reasoning ("thinking") text the server streamed apart from the answer, if any.
    pub reasoning: Option<String>,
    /// Calls in index order. A call whose server sent no id has an empty `id`; the caller
    /// assigns one.
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    pub model: Option<String>,
}

/// Merges stream events into a [`Completion`].
#[derive(Debug, Default)]
pub struct Accumulator {
    text: String,
    reasoning: String,
    calls: Vec<(u32, ToolCall)>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
}

impl Accumulator {
    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::Text(text) => self.text.push_str(text),
            StreamEvent::Thinking(text) => self.reasoning.push_str(text),
            StreamEvent::ToolCall {
                index,
                id,
                name,
                arguments,
            } => {
                let call = match self.calls.iter_mut().find(|(i, _)| i == index) {
                    Some((_, call)) => call,
                    None => {
                        self.calls.push((*index, ToolCall::new("", "", "")));
                        &mut self.calls.last_mut().expect("just pushed").1
                    }
                };
                if let (true, Some(id)) = (call.id.is_empty(), id) {
                    call.id = id.clone();
                }
                if let (true, Some(name)) = (call.function.name.is_empty(), name) {
                    call.function.name = name.clone();
                }
                call.function.arguments.push_str(arguments);
            }
            StreamEvent::Finish(reason) => self.finish_reason = Some(reason.clone()),
            StreamEvent::Usage(usage) => self.usage = Some(*usage),
            StreamEvent::Model(model) => self.model = Some(model.clone()),
        }
    }

    pub fn finish(mut self) -> Completion {
        self.calls.sort_by_key(|(index, _)| *index);
        Completion {
            content: if self.text.is_empty() {
                None
            } else {
                Some(self.text)
            },
            reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
            tool_calls: self.calls.into_iter().map(|(_, call)| call).collect(),
            finish_reason: self.finish_reason,
            usage: self.usage,
            model: self.model,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_is_kept_apart_from_the_answer() {
        let mut acc = Accumulator::default();
        for event in [
            StreamEvent::Thinking("The user ".into()),
            StreamEvent::Thinking("wants a poem.".into()),
            StreamEvent::Text("Here it is.".into()),
        ] {
            acc.push(&event);
        }
        let completion = acc.finish();
        assert_eq!(
            completion.reasoning.as_deref(),
            Some("The user wants a poem.")
        );
        assert_eq!(completion.content.as_deref(), Some("Here it is."));
        assert_eq!(Accumulator::default().finish().reasoning, None);
    }

    #[test]
    fn tool_call_fragments_merge_by_index() {
        let mut acc = Accumulator::default();
        let events = [
            StreamEvent::Text("Let me ".into()),
            StreamEvent::Text("look.".into()),
            StreamEvent::ToolCall {
                index: 1,
                id: Some("b".into()),
                name: Some("list_files".into()),
                arguments: "{}".into(),
            },
            StreamEvent::ToolCall {
                index: 0,
                id: Some("a".into()),
                name: Some("read_file".into()),
                arguments: "{\"pa".into(),
            },
            StreamEvent::ToolCall {
                index: 0,
                id: None,
                name: None,
                arguments: "th\":\"x\"}".into(),
            },
            StreamEvent::Finish("tool_calls".into()),
            StreamEvent::Usage(Usage {
                prompt_tokens: 10,
                completion_tokens: 3,
                cached_prompt_tokens: 8,
            }),
        ];
        for event in &events {
            acc.push(event);
        }
        let done = acc.finish();
        assert_eq!(done.content.as_deref(), Some("Let me look."));
        assert_eq!(
            done.tool_calls[0],
            ToolCall::new("a", "read_file", "{\"path\":\"x\"}")
        );
        assert_eq!(done.tool_calls[1], ToolCall::new("b", "list_files", "{}"));
        assert_eq!(done.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(done.usage.map(|u| u.cached_prompt_tokens), Some(8));
    }

    #[tokio::test]
    async fn an_event_that_never_ends_is_refused_before_it_grows_without_bound() {
        let chunk = Bytes::from(vec![b'x'; 1024 * 1024]);
        let mut pieces: Vec<reqwest::Result<Bytes>> = vec![Ok(Bytes::from_static(b"data: "))];
        pieces.extend((0..16).map(|_| Ok(chunk.clone())));
        let endless = futures::stream::iter(pieces);
        let mut stream = ChatStream::of(Box::pin(endless), Duration::from_secs(5));
        match stream.next().await {
            Some(Err(LlmError::Protocol(why))) => assert!(why.contains("without ending"), "{why}"),
            other => panic!("refused: {other:?}"),
        }
        assert!(stream.next().await.is_none(), "and the stream is over");
    }

    /// A body of `chunks` that then stays open, counting the chunks taken from it and saying
    /// when it is dropped.
    fn open_body(
        chunks: Vec<Bytes>,
        taken: Arc<AtomicUsize>,
        dropped: tokio::sync::oneshot::Sender<()>,
    ) -> ByteStream {
        struct Guard(Option<tokio::sync::oneshot::Sender<()>>);
        impl Drop for Guard {
            fn drop(&mut self) {
                if let Some(dropped) = self.0.take() {
                    let _ = dropped.send(());
                }
            }
        }
        let guard = Guard(Some(dropped));
        let counted = futures::stream::iter(chunks).map(move |chunk| {
            let _ = &guard;
            taken.fetch_add(1, Ordering::Relaxed);
            Ok(chunk)
        });
        Box::pin(counted.chain(futures::stream::pending()))
    }

    #[tokio::test]
    async fn a_body_read_ahead_is_taken_off_before_its_reader_asks_and_reads_the_same() {
        let wire = [
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n",
            "data: [DONE]\n\n",
        ];
        let chunks: Vec<Bytes> = wire
            .iter()
            .map(|c| Bytes::from_static(c.as_bytes()))
            .collect();
        let taken = Arc::new(AtomicUsize::new(0));
        let (dropped, _) = tokio::sync::oneshot::channel();
        let body = open_body(chunks, taken.clone(), dropped);
        let (mut stream, _) = ChatStream::read_ahead_of(body, Duration::from_secs(5));
        tokio::time::timeout(Duration::from_secs(5), async {
            while taken.load(Ordering::Relaxed) < wire.len() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("every chunk taken off the body before the reader asked for one");
        let mut text = String::new();
        while let Some(event) = stream.next().await {
            if let StreamEvent::Text(more) = event.expect("an event") {
                text.push_str(&more);
            }
        }
        assert_eq!(text, "Hello");
    }

    #[tokio::test]
    async fn a_stream_read_ahead_lets_its_body_go_when_dropped() {
        let taken = Arc::new(AtomicUsize::new(0));
        let (dropped, body_dropped) = tokio::sync::oneshot::channel();
        let chunk = Bytes::from_static(b"data: {\"choices\":[]}\n\n");
        let body = open_body(vec![chunk], taken, dropped);
        let (stream, copy) = ChatStream::read_ahead_of(body, Duration::from_secs(5));
        drop(copy);
        // The body stays open: only the stream's drop can end its reading.
        drop(stream);
        tokio::time::timeout(Duration::from_secs(5), body_dropped)
            .await
            .expect("the body is dropped (its connection closed) once the stream is")
            .expect("dropped, not leaked");
    }

    async fn text_of(mut stream: ChatStream) -> Result<String, LlmError> {
        let mut text = String::new();
        while let Some(event) = stream.next().await {
            if let StreamEvent::Text(more) = event? {
                text.push_str(&more);
            }
        }
        Ok(text)
    }

    #[tokio::test]
    async fn a_copy_of_a_body_read_ahead_reads_the_same_and_ends_past_its_limit() {
        let chunk = |text: &str| {
            Bytes::from(format!(
                "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"
            ))
        };
        let done = Bytes::from_static(b"data: [DONE]\n\n");
        let taken = Arc::new(AtomicUsize::new(0));
        let (dropped, _) = tokio::sync::oneshot::channel();
        let body = open_body(
            vec![chunk("Hel"), chunk("lo"), done.clone()],
            taken,
            dropped,
        );
        let (stream, copy) = ChatStream::read_ahead_of(body, Duration::from_secs(5));
        // The copy is read first, to its end, while the first stream waits.
        assert_eq!(text_of(copy).await.expect("the copy"), "Hello");
        assert_eq!(text_of(stream).await.expect("the stream"), "Hello");

        // Past the limit the copy ends with an error, and the first stream reads on.
        let big = "x".repeat(COPY_MAX_BYTES / 4);
        let chunks = vec![
            chunk(&big),
            chunk(&big),
            chunk(&big),
            chunk(&big),
            chunk("!"),
            done,
        ];
        let (dropped, _) = tokio::sync::oneshot::channel();
        let body = open_body(chunks, Arc::new(AtomicUsize::new(0)), dropped);
        let (stream, copy) = ChatStream::read_ahead_of(body, Duration::from_secs(5));
        let copied = text_of(copy).await;
        assert!(matches!(copied, Err(LlmError::Truncated)), "{copied:?}");
        let read = text_of(stream).await.expect("the stream");
        assert_eq!(read, format!("{}!", big.repeat(4)));
    }

    #[tokio::test]
    async fn events_cut_anywhere_with_any_line_ends_and_comments_read_the_same() {
        let wire = ": keep-alive\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\r\n\r\n\
                    event: message\rdata: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\r\r\
                    data: [DONE]\n\n";
        for size in [1, 2, 3, 7, 64, wire.len()] {
            let chunks = wire
                .as_bytes()
                .chunks(size)
                .map(Bytes::copy_from_slice)
                .collect();
            let mut stream = ChatStream::from_chunks(chunks);
            let mut text = String::new();
            while let Some(event) = stream.next().await {
                if let StreamEvent::Text(more) = event.expect("an event") {
                    text.push_str(&more);
                }
            }
            assert_eq!(text, "Hello", "chunks of {size}");
        }
    }
}
