//! The tool-runner: executes tool calls for the worker, over NATS request/reply on
//! `<prefix>.tools.exec` (queue group `tool-runners`, so instances share the load). Each call
//! runs inside its task's workspace directory; paths that would leave it are refused.

pub mod call;
pub mod config;
pub mod git;
mod handle;
pub mod mcp;
pub mod sandbox;
mod serve_file;
pub mod server;
pub mod tools;
pub mod workspace;

pub use config::Settings;
pub use server::run;
