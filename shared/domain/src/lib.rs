//! Pure domain types of MAESTRO: identifiers, the job state machine, tasks, events and
//! deltas, conversation messages, tool specifications, required actions and the decisions on
//! them, notifications and outbox topics. No I/O lives here: what happens next (after a
//! decision, to a comment, on a pause) is a pure function here, composed by the services.

pub mod action;
pub mod event;
pub mod ids;
pub mod job;
pub mod mcp;
pub mod message;
pub mod notification;
pub mod piece;
pub mod policy;
pub mod replay;
pub mod schedule;
pub mod space;
pub mod storable;
pub mod stream_id;
pub mod task;
pub mod tools;
pub mod topic;
pub mod transcript;
pub mod webhook;

pub use action::{Action, ActionDetail, ActionStatus, Decision, NewAction, Verdict};
pub use event::{
    DecisionEvent, Event, EventBody, EventKind, JobStateChange, MessageEvent, MovementEvent,
    RedispatchEvent, RewriteEvent, ToolCallEvent, ToolResultEvent,
};
pub use ids::{
    ActionId, DeliveryId, JobId, NotificationId, Owner, ScheduleId, SpaceId, TaskId, TokenId,
    WebhookId,
};
pub use job::{JobRecord, JobStatus, WaitReason};
pub use message::{Message, Role, ToolCall, Usage};
pub use space::{Access, SpaceRole, Visibility};
pub use stream_id::StreamId;
pub use task::{Comment, CommentKind, TaskRecord};
