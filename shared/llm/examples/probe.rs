//! Probe an OpenAI-compatible endpoint with the MAESTRO client: two streaming requests of one
//! conversation (the second appends to the first), printing what was streamed and the usage,
//! including the cached prompt tokens the server reports.
//!
//! `cargo run -p maestro-llm --example probe -- http://127.0.0.1:8089/v1 [model]`

use std::time::Instant;

use maestro_domain::Message;
use maestro_domain::tools::{ToolSpec, builtin_tools, complete_tool};
use maestro_llm::{Accumulator, ChatRequest, LlmClient, LlmConfig, StreamEvent};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut args = std::env::args().skip(1);
    let base_url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8089/v1".to_owned());
    let model = args.next().unwrap_or_else(|| "smollm2".to_owned());
    let client = LlmClient::new(LlmConfig {
        base_url,
        api_key: None,
        connect_timeout: std::time::Duration::from_secs(5),
        idle_timeout: std::time::Duration::from_secs(120),
    })?;
    let mut specs = builtin_tools();
    specs.push(complete_tool());
    let tools: Vec<serde_json::Value> = specs.iter().map(ToolSpec::to_openai).collect();
    let tools = serde_json::value::to_raw_value(&tools)?;
    let mut messages = vec![
        Message::system("You are a terse assistant. Answer in one short sentence."),
        Message::user("Name one property of a durable job queue."),
    ];
    for round in 1..=2 {
        let started = Instant::now();
        let request = ChatRequest {
            model: &model,
            tools: Some(&tools),
            messages: &messages,
        };
        let mut stream = client.stream_chat(request).await?;
        let (mut acc, mut deltas, mut first) = (Accumulator::default(), 0, None);
        while let Some(event) = stream.next().await {
            let event = event?;
            if matches!(event, StreamEvent::Text(_)) {
                deltas += 1;
                first.get_or_insert_with(|| started.elapsed());
            }
            acc.push(&event);
        }
        let done = acc.finish();
        let usage = done.usage.unwrap_or_default();
        println!(
            "round {round}: {deltas} text deltas, first after {:?}, total {:?}, finish {:?}\n  text: {:?}\n  \
             usage: prompt={} completion={} cached={} ({:.1} %)",
            first.unwrap_or_default(),
            started.elapsed(),
            done.finish_reason,
            done.content.as_deref().unwrap_or(""),
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_prompt_tokens,
            usage.cache_pct(),
        );
        messages.push(Message::assistant(done.content, Vec::new()));
        messages.push(Message::user("And one more, please."));
    }
    Ok(())
}
