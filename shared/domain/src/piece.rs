//! The built-in pieces a task may name. A piece is a workflow definition; this is the minimal
//! single-movement catalogue the foundation runs (the YAML piece engine replaces it).

/// A workflow definition the worker can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub name: &'static str,
    pub description: &'static str,
    /// Guidance of the (single) movement, placed after the static preamble.
    pub guidance: &'static str,
}

/// The piece used when a task names none.
pub const DEFAULT_PIECE: &str = "chat";

const PIECES: &[Piece] = &[Piece {
    name: "chat",
    description: "A single movement: answer the user, using the workspace file tools as needed.",
    guidance: "Work on the user's task using the tools. Read before you write. When the task is \
               done, call `complete` with a short summary of the outcome.",
}];

/// Every built-in piece.
pub fn pieces() -> &'static [Piece] {
    PIECES
}

/// The piece called `name`, if it exists.
pub fn find(name: &str) -> Option<&'static Piece> {
    PIECES.iter().find(|p| p.name == name)
}
