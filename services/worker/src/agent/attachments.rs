//! Files a person attached to the task go into its workspace (`attachments/<name>`) before
//! the job's first LLM call, through the tool-runner (the worker has no access to
//! workspaces). Each is marked placed once it is there; placing one again after a crash
//! writes the same bytes.

use std::time::Duration;

use base64::Engine as _;
use maestro_db::claims::Claimed;
use maestro_domain::tools::{self, ToolExecRequest};

use super::context::Shared;
use crate::tool_client;

/// Place the task's attachments that are not in its workspace yet.
pub async fn place(shared: &Shared, claim: &Claimed) -> Result<(), String> {
    let unplaced = maestro_db::attachments::unplaced(&shared.pool, claim.task_id)
        .await
        .map_err(|e| e.to_string())?;
    for (name, data) in unplaced {
        let arguments = serde_json::json!({
            "path": format!("attachments/{name}"),
            "content_base64": base64::engine::general_purpose::STANDARD.encode(&data),
        });
        let request = ToolExecRequest::internal(
            (claim.workspace_id, claim.job_id),
            &format!("attachment/{name}"),
            tools::PLACE_ATTACHMENT,
            arguments,
            30_000,
        );
        let subject = shared.bus.subjects.tools_exec();
        let reply =
            tool_client::execute(&shared.bus.nats, subject, &request, Duration::from_secs(30))
                .await
                .map_err(|e| format!("{name}: no tool-runner answered: {e}"))?;
        if !reply.ok {
            return Err(format!("{name}: {}", reply.output));
        }
        maestro_db::attachments::placed(&shared.pool, claim.task_id, &name)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
