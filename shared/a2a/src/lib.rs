//! A2A (Agent2Agent protocol) 1.0 for MAESTRO: the wire types ([`types`], [`card`]), the
//! errors ([`error`]), JSON-RPC envelopes ([`jsonrpc`]), the mapping from MAESTRO's tasks and
//! events ([`map`]) and the live stream's translation ([`stream`]). Transport lives in the
//! gateway (`services/api-gateway/src/a2a/`); see `docs/a2a.md`.

pub mod card;
pub mod error;
pub mod jsonrpc;
pub mod map;
pub mod stream;
pub mod types;
pub mod v03;

pub use error::{A2aError, ErrorKind};
