//! Running the tool calls of an assistant message: regular calls through the tool-runner
//! (all at once when every one is read-only, in order otherwise), then `complete`.

use futures::future::join_all;
use maestro_domain::ToolCall;
use maestro_domain::tools::{self, ToolExecRequest, ToolSpec};

use super::{JobEnd, JobError, JobRun};
use crate::tool_client;

impl JobRun<'_> {
    /// Run the calls of an assistant message and commit their results; `complete` ends the job.
    pub(super) async fn run_calls(
        &mut self,
        calls: Vec<ToolCall>,
    ) -> Result<Option<JobEnd>, JobError> {
        let (finals, regular): (Vec<ToolCall>, Vec<ToolCall>) =
            calls.into_iter().partition(|c| c.name() == tools::COMPLETE);
        if !regular.is_empty() {
            // What the model asked for is durable before anything touches the world.
            self.commit(None).await?;
            let results = match self.execute_all(&regular).await {
                Ok(results) => results,
                Err(unavailable) => {
                    return self
                        .recoverable(unavailable.to_string(), None)
                        .await
                        .map(Some);
                }
            };
            for (call, (content, is_error)) in regular.iter().zip(results) {
                self.record_result(call, content, is_error);
            }
        }
        let mut finals = finals.into_iter();
        if let Some(complete) = finals.next() {
            match complete_result(&complete) {
                Ok(result) => {
                    self.record_result(&complete, "ok".to_owned(), false);
                    for extra in finals {
                        self.record_result(
                            &extra,
                            "Error: `complete` was already called".to_owned(),
                            true,
                        );
                    }
                    return self.succeed(result).await.map(Some);
                }
                Err(error) => self.record_result(&complete, error, true),
            }
        }
        self.commit(None).await?;
        Ok(None)
    }

    /// Execute regular calls: all in parallel when every one is read-only, else in order.
    async fn execute_all(
        &self,
        calls: &[ToolCall],
    ) -> Result<Vec<(String, bool)>, tool_client::Unavailable> {
        let read_only = calls
            .iter()
            .all(|c| self.spec(c).is_some_and(ToolSpec::is_read_only));
        if read_only {
            join_all(calls.iter().map(|c| self.execute(c)))
                .await
                .into_iter()
                .collect()
        } else {
            let mut results = Vec::with_capacity(calls.len());
            for call in calls {
                results.push(self.execute(call).await?);
            }
            Ok(results)
        }
    }

    fn spec(&self, call: &ToolCall) -> Option<&ToolSpec> {
        self.tools
            .iter()
            .find(|t| t.name == call.name() && t.name != tools::COMPLETE)
    }

    /// One call: `(content for the model, is_error)`.
    async fn execute(&self, call: &ToolCall) -> Result<(String, bool), tool_client::Unavailable> {
        let Some(spec) = self.spec(call) else {
            let known: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
            return Ok((
                format!(
                    "Error: unknown tool {:?}; available: {}",
                    call.name(),
                    known.join(", ")
                ),
                true,
            ));
        };
        let arguments = match parse_arguments(&call.function.arguments) {
            Ok(arguments) => arguments,
            Err(error) => return Ok((error, true)),
        };
        let request = ToolExecRequest {
            task_id: self.claim.task_id,
            job_id: self.claim.job_id,
            call_id: call.id.clone(),
            operation_id: format!("{}:{}", self.claim.job_id, call.id),
            tool: spec.name.clone(),
            arguments,
            timeout_ms: self.shared.settings.tool_timeout.as_millis() as u64,
            network: false,
            allowed_hosts: Vec::new(),
        };
        let subject = self.shared.subjects.tools_exec();
        let reply = tool_client::execute(
            &self.shared.nats,
            subject,
            &request,
            self.shared.settings.tool_timeout,
        )
        .await?;
        tracing::debug!(tool = %spec.name, ok = reply.ok, "tool call done");
        Ok(if reply.ok {
            (reply.output, false)
        } else {
            (format!("Error: {}", reply.output), true)
        })
    }
}

fn parse_arguments(raw: &str) -> Result<serde_json::Value, String> {
    let raw = if raw.trim().is_empty() { "{}" } else { raw };
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err("Error: arguments must be a JSON object".to_owned()),
        Err(e) => Err(format!("Error: arguments are not valid JSON ({e})")),
    }
}

/// The `result` of a `complete` call, or the error the model gets back.
fn complete_result(call: &ToolCall) -> Result<String, String> {
    let arguments = parse_arguments(&call.function.arguments)?;
    match arguments.get("result").and_then(|r| r.as_str()) {
        Some(result) if !result.trim().is_empty() => Ok(result.to_owned()),
        _ => Err("Error: `complete` needs a non-empty `result` string".to_owned()),
    }
}
