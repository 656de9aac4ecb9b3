//! Answering what paused jobs wait for (SPEC §3.2, §6.2): a person's decision on an item
//! ([`decide`]), the answer to a job's question ([`answer`]) and a supplied MCP token
//! ([`supply_token`]). The gateway and the worker both answer pauses, so the use cases live
//! here, below both.
//!
//! Each is one transaction this crate owns. It composes the domain's decisions (which verdict
//! a request is, what the job becomes: `maestro_domain::action`) with the db's storage, and
//! returns what must follow the commit (an [`AfterCommit`]) for the caller to hand to its bus.

mod answer;
mod decide;

pub use answer::{Answered, answer};
pub use decide::{Decided, Request, decide, resume_authorized, supply_token};
pub use maestro_messaging::AfterCommit;
