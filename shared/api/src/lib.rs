//! The REST API's JSON, both ways (see `docs/api.md`): the gateway answers with these types
//! and parses its requests into them, and clients (the testkit's typed client, a CLI, the web
//! UI's tests) read and send the same types. Field names are the wire names. Where a domain
//! type has the API's shape already (an event, a job, a comment), it is embedded as it is.

mod action;
mod error;
mod inbox;
mod schedule;
mod space;
mod task;
mod webhook;

pub use action::{
    ActionList, DecideReply, DecideRequest, RequiredAction, TokenReply, TokenRequest,
};
pub use error::{ErrorBody, ErrorDetail};
pub use inbox::{ActivityItem, ActivityPage, InboxItem, InboxPage, MarkAllRead, MarkedRead};
pub use schedule::{
    CreateSchedule, Schedule, SchedulePage, ScheduleRun, ScheduleRunPage, TaskTemplate,
};
pub use space::{
    CreateToken, Me, Patch, SetMember, Space, SpaceCommits, SpaceFiles, SpaceList, SpaceSettings,
    TokenInfo, TokenList,
};
pub use task::{
    CommentList, ContinueTask, CreateTask, EventPage, FileList, Links, NewComment, RoutedComment,
    RoutedTo, SubtaskList, Task, TaskPage, Transcript, WrittenFile,
};
pub use webhook::{CreateWebhook, DeliveryPage, Webhook, WebhookDeliveryView, WebhookList};
