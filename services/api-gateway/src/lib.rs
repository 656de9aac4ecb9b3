//! The API gateway: MAESTRO's HTTP edge. REST for tasks and webhooks, SSE streams of a task's
//! events and live deltas, authentication by bearer token, and validation: bad input gets a
//! 4xx JSON error and changes nothing.

pub mod a2a;
pub mod app;
pub mod attachments;
pub mod auth;
pub mod config;
pub mod error;
pub mod fanout;
pub mod json;
pub mod oidc;
pub mod routes;
pub mod routing;
pub mod signals;
pub mod state;
pub mod stream;
pub mod ui;
pub mod usecases;
pub mod validate;
pub mod views;

pub use app::{router, serve};
pub use config::Settings;
pub use state::AppState;
