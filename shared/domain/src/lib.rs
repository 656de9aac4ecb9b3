//! Pure domain types of MAESTRO: identifiers, the job state machine, events and deltas,
//! conversation messages, tool specifications and notifications. No I/O lives here.

pub mod event;
pub mod ids;
pub mod job;
pub mod message;
pub mod notification;
pub mod piece;
pub mod policy;
pub mod stream_id;
pub mod tools;
pub mod transcript;
pub mod webhook;

pub use event::{
    DecisionEvent, Event, EventBody, EventKind, JobStateChange, MessageEvent, MovementEvent,
    RedispatchEvent, RewriteEvent, ToolCallEvent, ToolResultEvent,
};
pub use ids::{DeliveryId, JobId, NotificationId, Owner, TaskId, WebhookId};
pub use job::{JobStatus, WaitReason};
pub use message::{Message, Role, ToolCall, Usage};
pub use stream_id::StreamId;
