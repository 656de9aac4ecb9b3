//! A client for OpenAI-compatible chat-completions endpoints (OpenAI, llama.cpp server, vLLM,
//! Ollama, the project's scripted server): streaming responses with text and tool-call
//! deltas, `usage` including cached prompt tokens, and errors classified as recoverable or
//! fatal so the caller can decide between retrying and failing.

mod client;
mod error;
mod stream;

pub use client::{ChatRequest, LlmClient, LlmConfig};
pub use error::LlmError;
pub use stream::{Accumulator, ChatStream, Completion, StreamEvent};
