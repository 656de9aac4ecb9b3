//! A2A 1.0 (Agent2Agent protocol): the agent card, the JSON-RPC binding (`/a2a/v1`) and the
//! HTTP+JSON binding (`/a2a/rest/...`), JSON-RPC over NATS (`nats.rs`), one set of operations under both (`ops.rs`), and
//! streams that resume (`sse.rs`). The wire types and the mapping onto MAESTRO are
//! `maestro_a2a`'s; `docs/a2a.md` is the user's guide.

mod card;
pub mod nats;
mod ops;
mod push;
mod rest;
mod rpc;
mod sse;
mod version;

use axum::Router;
use axum::routing::{self, post};
use maestro_a2a::A2aError;
use maestro_a2a::map::Shape;
use maestro_a2a::types::{
    Message, Role, SendMessageRequest, StreamResponse, Task, TaskIdRequest, TaskState,
};

use crate::state::AppState;
use ops::Ctx;

pub use card::{JSONRPC_PATH, REST_PATH};

/// The A2A routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/.well-known/agent-card.json", routing::get(card::public))
        .route(JSONRPC_PATH, post(rpc::handle))
        .route("/a2a/rest/{action}", post(rest::message))
        .route("/a2a/rest/tasks", routing::get(rest::list))
        .route(
            "/a2a/rest/tasks/{*rest}",
            routing::get(rest::on_task)
                .post(rest::on_task)
                .delete(rest::on_task),
        )
        .route(
            "/a2a/rest/extendedAgentCard",
            routing::get(rest::extended_card),
        )
}

/// `SendMessage` (both bindings): the message's effect, then the task — at once with
/// `returnImmediately`, else once it is over or waits for the client (at most
/// `A2A_BLOCKING_TIMEOUT_MS`) — or, when the agent answered directly, its answer as a message.
async fn send_and_answer(
    ctx: Ctx<'_>,
    request: &SendMessageRequest,
) -> Result<StreamResponse, A2aError> {
    let task_id = ops::send(ctx, request).await?;
    let config = request.configuration.clone().unwrap_or_default();
    let immediately = config.return_immediately || config.blocking == Some(false);
    let shape = Shape {
        history_length: ops::history_length(config.history_length)?,
        include_artifacts: true,
    };
    let view = if immediately {
        ops::view(ctx, task_id, shape).await?
    } else {
        let limit = ctx.state.settings.a2a_blocking;
        ops::settle(ctx, task_id, limit, shape).await?
    };
    if view.task.status.state == TaskState::Completed && view.replied {
        return Ok(StreamResponse::Message(direct_answer(view.task)));
    }
    Ok(StreamResponse::Task(view.task))
}

/// The agent answered directly (`complete` with status `reply`): the answer as a message of
/// the agent's, naming the task it was recorded in.
fn direct_answer(task: Task) -> Message {
    let parts = task.status.message.map(|m| m.parts).unwrap_or_default();
    Message {
        message_id: format!("reply-{}", task.id),
        context_id: task.context_id,
        task_id: Some(task.id),
        role: Role::Agent,
        parts,
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    }
}

/// `GetTask` (both bindings).
async fn get(ctx: Ctx<'_>, request: &TaskIdRequest) -> Result<Task, A2aError> {
    let task_id = ops::readable(ctx, &request.id).await?;
    let shape = Shape {
        history_length: ops::history_length(request.history_length)?,
        include_artifacts: true,
    };
    ops::task(ctx, task_id, shape).await
}
