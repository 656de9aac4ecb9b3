//! Pieces: workflow definitions in YAML. A piece is a set of movements; each movement is an
//! agent loop with its own guidance, tool restrictions and allowed transitions; a job runs the
//! piece from its start movement until a movement completes (or aborts). The format also
//! accepts TAKT's field names where they mean the same (`steps`, `initial_movement`,
//! `rules: [{condition, next}]`, `instruction`, `persona`). See `docs/pieces.md`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde::de::IgnoredAny;

/// The transition target that ends the piece as aborted.
pub const ABORT: &str = "ABORT";
/// The transition target that ends the piece as complete (also reached with `complete`).
pub const COMPLETE: &str = "COMPLETE";
/// The piece used when a task names none and no other selection is configured.
pub const DEFAULT_PIECE: &str = "chat";
/// The piece name that asks for the LLM router to choose the piece when the job starts.
pub const ROUTER: &str = "auto";
/// The built-in pieces, shipped with the binaries.
const BUILTIN: [(&str, &str); 3] = [
    ("chat.yaml", include_str!("../../../pieces/chat.yaml")),
    ("coding.yaml", include_str!("../../../pieces/coding.yaml")),
    (
        "research.yaml",
        include_str!("../../../pieces/research.yaml"),
    ),
];

/// A validated piece.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub name: String,
    /// What the piece is for (the router chooses by it).
    pub description: String,
    pub start: String,
    /// Movements a job may enter in all (revisits included).
    pub max_movements: u32,
    /// LLM iterations one movement may take (each time it is entered).
    pub max_iterations: u32,
    /// Times one movement may be entered (the revisit guard).
    pub max_visits: u32,
    /// The worker profile its tasks are dispatched to, when the task names none.
    pub profile: Option<String>,
    /// The model its tasks use, when the task names none (before its space's default).
    pub model: Option<String>,
    pub movements: Vec<Movement>,
}

/// One step of a piece.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Movement {
    pub name: String,
    /// Persona, guidance and instruction, in that order.
    pub guidance: String,
    /// Tools this movement may use, within the workspace policy (`None`: all it allows).
    pub allowed_tools: Option<Vec<String>>,
    /// Whether this movement may change files (never more than the policy allows).
    pub edit: bool,
    pub checklist: Vec<String>,
    pub transitions: Vec<Transition>,
}

/// A movement's way out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// A movement of the piece, or `ABORT` / `COMPLETE`.
    pub target: String,
    /// When to take it, as the model is told.
    pub condition: String,
}

/// Why a piece file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PieceError {
    #[error("{source_name}: not a valid piece: {message}")]
    Syntax {
        source_name: String,
        message: String,
    },
    #[error("piece {piece}: it has no movements")]
    NoMovements { piece: String },
    #[error("piece {piece}: profile {profile:?} is not 1 to 64 letters, digits, '-' and '_'")]
    InvalidProfile { piece: String, profile: String },
    #[error("piece {piece}: model {model:?} is not 1 to 128 letters, digits and ._:/-@")]
    InvalidModel { piece: String, model: String },
    #[error("piece {piece}: no start movement (set `start_movement`)")]
    NoStart { piece: String },
    #[error("piece {piece}: the start movement {start:?} is not one of its movements")]
    UnknownStart { piece: String, start: String },
    #[error("piece {piece}: the movement {movement:?} is defined twice")]
    DuplicateMovement { piece: String, movement: String },
    #[error(
        "piece {piece}: movement {movement:?} goes to {target:?}, which is not a movement, ABORT or COMPLETE"
    )]
    UnknownTarget {
        piece: String,
        movement: String,
        target: String,
    },
    #[error("piece {piece}: a name is 1 to 64 characters of letters, digits, '-' and '_'")]
    BadName { piece: String },
    #[error("{0:?} is reserved and cannot name a piece or a movement")]
    Reserved(String),
    #[error("two pieces are called {0:?}")]
    DuplicatePiece(String),
    #[error("piece {piece}, movement {movement}: {what} are not supported")]
    Unsupported {
        piece: String,
        movement: String,
        what: String,
    },
}

/// A piece file. Unknown fields are errors (typos must not pass silently), except the TAKT
/// fields listed here, which are accepted: the section maps (`personas`, `policies`,
/// `instructions`, `knowledge`, `report_formats`) are resolved by the loader
/// (`maestro_runtime::pieces`) before parsing; the rest have no meaning here and are ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PieceFile {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(
        default,
        alias = "initial_movement",
        alias = "initial_step",
        alias = "start"
    )]
    start_movement: Option<String>,
    #[serde(default, alias = "max_steps")]
    max_movements: Option<u32>,
    #[serde(default)]
    max_iterations: Option<u32>,
    #[serde(default)]
    max_visits: Option<u32>,
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(alias = "steps")]
    movements: Vec<MovementFile>,
    #[serde(default, rename = "personas")]
    _personas: Option<IgnoredAny>,
    #[serde(default, rename = "policies")]
    _policies: Option<IgnoredAny>,
    #[serde(default, rename = "instructions")]
    _instructions: Option<IgnoredAny>,
    #[serde(default, rename = "knowledge")]
    _knowledge: Option<IgnoredAny>,
    #[serde(default, rename = "report_formats")]
    _report_formats: Option<IgnoredAny>,
    #[serde(default, rename = "loop_monitors")]
    _loop_monitors: Option<IgnoredAny>,
}

/// One text or a list of texts (TAKT's `policy: [a, b]`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Texts {
    One(String),
    Many(Vec<String>),
}

impl Texts {
    fn joined(self) -> String {
        match self {
            Texts::One(text) => text,
            Texts::Many(texts) => texts.join("\n\n"),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MovementFile {
    name: String,
    #[serde(default)]
    persona: Option<String>,
    #[serde(default)]
    guidance: Option<String>,
    #[serde(default)]
    instruction: Option<String>,
    /// TAKT: behavioural policies, shown with the guidance.
    #[serde(default)]
    policy: Option<Texts>,
    /// TAKT: reference knowledge, shown with the guidance.
    #[serde(default)]
    knowledge: Option<Texts>,
    #[serde(default)]
    allowed_tools: Option<Vec<String>>,
    #[serde(default)]
    edit: Option<bool>,
    #[serde(default)]
    checklist: Vec<String>,
    #[serde(default, alias = "rules")]
    transitions: Vec<TransitionFile>,
    /// TAKT's parallel sub-movements: not supported (an error, not a silent sequential run).
    #[serde(default)]
    parallel: Option<IgnoredAny>,
    // TAKT fields without meaning here (reports, sessions, permission modes, providers).
    #[serde(default, rename = "output_contracts")]
    _output_contracts: Option<IgnoredAny>,
    #[serde(default, rename = "session")]
    _session: Option<IgnoredAny>,
    #[serde(default, rename = "pass_previous_response")]
    _pass_previous_response: Option<IgnoredAny>,
    #[serde(default, rename = "required_permission_mode")]
    _required_permission_mode: Option<IgnoredAny>,
    #[serde(default, rename = "permission_mode")]
    _permission_mode: Option<IgnoredAny>,
    #[serde(default, rename = "provider")]
    _provider: Option<IgnoredAny>,
    #[serde(default, rename = "model")]
    _model: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TransitionFile {
    #[serde(default)]
    condition: String,
    #[serde(alias = "next")]
    target: String,
    /// TAKT: the rule's own appendix instruction; not used here.
    #[serde(default, rename = "appendix")]
    _appendix: Option<IgnoredAny>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Piece {
    /// Parse and validate one piece file (`source_name` names it in errors).
    pub fn parse(source_name: &str, yaml: &str) -> Result<Self, PieceError> {
        let file: PieceFile = serde_norway::from_str(yaml).map_err(|e| PieceError::Syntax {
            source_name: source_name.to_owned(),
            message: e.to_string(),
        })?;
        let piece = file.name.clone();
        if !valid_name(&piece) {
            return Err(PieceError::BadName { piece });
        }
        if piece == ROUTER {
            return Err(PieceError::Reserved(piece));
        }
        if file.movements.is_empty() {
            return Err(PieceError::NoMovements { piece });
        }
        let mut names = BTreeSet::new();
        for movement in &file.movements {
            if !valid_name(&movement.name) {
                return Err(PieceError::BadName { piece });
            }
            if movement.name == ABORT || movement.name == COMPLETE {
                return Err(PieceError::Reserved(movement.name.clone()));
            }
            if !names.insert(movement.name.clone()) {
                return Err(PieceError::DuplicateMovement {
                    piece,
                    movement: movement.name.clone(),
                });
            }
        }
        let start = match file.start_movement {
            Some(start) if names.contains(&start) => start,
            Some(start) => return Err(PieceError::UnknownStart { piece, start }),
            None if file.movements.len() == 1 => file.movements[0].name.clone(),
            None => return Err(PieceError::NoStart { piece }),
        };
        if let Some(profile) = &file.profile
            && !crate::job::valid_profile(profile)
        {
            return Err(PieceError::InvalidProfile {
                piece,
                profile: profile.clone(),
            });
        }
        if let Some(model) = &file.model
            && !crate::job::valid_model(model)
        {
            return Err(PieceError::InvalidModel {
                piece,
                model: model.clone(),
            });
        }
        let movements = file
            .movements
            .into_iter()
            .map(|m| movement(&piece, &names, m))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            name: piece,
            description: file.description.trim().to_owned(),
            start,
            max_movements: file.max_movements.unwrap_or(20).max(1),
            max_iterations: file.max_iterations.unwrap_or(30).max(1),
            max_visits: file.max_visits.unwrap_or(5).max(1),
            profile: file.profile,
            model: file.model,
            movements,
        })
    }

    pub fn movement(&self, name: &str) -> Option<&Movement> {
        self.movements.iter().find(|m| m.name == name)
    }

    /// Every transition target of the piece, sorted: the `transition` tool's enum, the same
    /// in every movement so the tool definitions never change within a piece.
    pub fn targets(&self) -> Vec<String> {
        let targets: BTreeSet<&str> = self
            .movements
            .iter()
            .flat_map(|m| m.transitions.iter().map(|t| t.target.as_str()))
            .collect();
        targets.into_iter().map(str::to_owned).collect()
    }
}

impl Movement {
    /// Why this movement refuses a tool the policy allows: it is not among the movement's
    /// `allowed_tools` (wildcards allowed), or it writes files in a movement without `edit`.
    /// (`shell` is left to `allowed_tools` and the policy's command rules.)
    pub fn refusal(&self, tool: &str) -> Option<String> {
        if let Some(allowed) = &self.allowed_tools
            && !allowed
                .iter()
                .any(|pattern| crate::policy::wildcard(pattern, tool))
        {
            return Some(format!(
                "movement `{}` does not use `{tool}`; its tools: {}",
                self.name,
                allowed.join(", ")
            ));
        }
        if !self.edit && matches!(tool, "write_file" | "edit_file") {
            return Some(format!(
                "movement `{}` does not change files, so `{tool}` is refused",
                self.name
            ));
        }
        None
    }
}

fn movement(
    piece: &str,
    names: &BTreeSet<String>,
    file: MovementFile,
) -> Result<Movement, PieceError> {
    if file.parallel.is_some() {
        return Err(PieceError::Unsupported {
            piece: piece.to_owned(),
            movement: file.name.clone(),
            what: "parallel sub-movements".to_owned(),
        });
    }
    for transition in &file.transitions {
        let target = &transition.target;
        if !names.contains(target) && target != ABORT && target != COMPLETE {
            return Err(PieceError::UnknownTarget {
                piece: piece.to_owned(),
                movement: file.name.clone(),
                target: target.clone(),
            });
        }
    }
    let guidance = [
        file.persona,
        file.guidance,
        file.instruction,
        file.policy.map(Texts::joined),
        file.knowledge.map(Texts::joined),
    ]
    .into_iter()
    .flatten()
    .map(|part| part.trim().to_owned())
    .filter(|part| !part.is_empty())
    .collect::<Vec<_>>()
    .join("\n\n");
    Ok(Movement {
        name: file.name,
        guidance,
        allowed_tools: file.allowed_tools,
        edit: file.edit.unwrap_or(true),
        checklist: file.checklist,
        transitions: file
            .transitions
            .into_iter()
            .map(|t| Transition {
                target: t.target,
                condition: takt_condition(t.condition.trim()).to_owned(),
            })
            .collect(),
    })
}

/// A TAKT rule condition as the model reads it: `ai("text")` is `text`.
fn takt_condition(condition: &str) -> &str {
    condition
        .strip_prefix("ai(")
        .and_then(|c| c.strip_suffix(')'))
        .map(|c| c.trim().trim_matches('"'))
        .unwrap_or(condition)
}

/// The pieces a deployment offers: the built-ins and any from the pieces directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    pieces: BTreeMap<String, Piece>,
}

impl Catalog {
    /// The built-in pieces only.
    pub fn builtin() -> Self {
        Self::with(Vec::new()).expect("the built-in pieces are valid")
    }

    /// The built-ins plus `extra` (`(source name, yaml)`); an extra piece may not reuse a
    /// name.
    pub fn with(extra: Vec<(String, String)>) -> Result<Self, PieceError> {
        let mut pieces = BTreeMap::new();
        let builtin = BUILTIN
            .iter()
            .map(|(name, yaml)| (name.to_string(), yaml.to_string()));
        for (source, yaml) in builtin.chain(extra) {
            let piece = Piece::parse(&source, &yaml)?;
            if pieces.contains_key(&piece.name) {
                return Err(PieceError::DuplicatePiece(piece.name));
            }
            pieces.insert(piece.name.clone(), piece);
        }
        Ok(Self { pieces })
    }

    pub fn get(&self, name: &str) -> Option<&Piece> {
        self.pieces.get(name)
    }

    /// Every piece, by name.
    pub fn pieces(&self) -> impl Iterator<Item = &Piece> {
        self.pieces.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_pieces_load() {
        let catalog = Catalog::builtin();
        let names: Vec<&str> = catalog.pieces().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["chat", "coding", "research"]);
        let coding = catalog.get("coding").expect("coding");
        assert_eq!(coding.start, "plan");
        assert_eq!(coding.targets(), ["ABORT", "implement", "plan", "review"]);
        assert!(
            coding
                .movement("plan")
                .expect("plan")
                .guidance
                .starts_with("You are a careful")
        );
        assert!(!coding.movement("review").expect("review").edit);
        assert!(
            catalog.get("chat").expect("chat").targets().is_empty(),
            "no transitions, no transition tool"
        );
    }

    #[test]
    fn a_takt_piece_with_its_extra_fields_loads() {
        let yaml = r#"
name: takt-full
description: A TAKT piece.
max_movements: 30
initial_movement: plan
personas:
  planner: ../personas/planner.md
report_formats:
  plan: ../output-contracts/plan.md
loop_monitors:
  - cycle: [plan, implement]
    threshold: 3
movements:
  - name: plan
    edit: false
    persona: You plan.
    knowledge: [Architecture notes.]
    policy: [Be careful., Be brief.]
    instruction: Make the plan.
    output_contracts:
      report:
        - name: 00-plan.md
          format: plan
    rules:
      - condition: ai("The plan is ready")
        next: implement
  - name: implement
    session: refresh
    pass_previous_response: false
    required_permission_mode: edit
    rules:
      - condition: done
        next: COMPLETE
"#;
        let piece = Piece::parse("takt.yaml", yaml).expect("a TAKT piece");
        let plan = piece.movement("plan").expect("plan");
        assert_eq!(
            plan.guidance,
            "You plan.\n\nMake the plan.\n\nBe careful.\n\nBe brief.\n\nArchitecture notes."
        );
        assert_eq!(plan.transitions[0].condition, "The plan is ready");
        let parallel = "name: p\nsteps:\n  - name: a\n    parallel:\n      - name: x\n";
        let error = Piece::parse("p.yaml", parallel).expect_err("parallel");
        assert!(
            error
                .to_string()
                .contains("parallel sub-movements are not supported")
        );
    }

    #[test]
    fn a_piece_names_its_profile_and_model() {
        let yaml = "name: p\nprofile: gpu\nmodel: big-model\nmovements:\n  - name: a\n";
        let piece = Piece::parse("p.yaml", yaml).expect("piece");
        assert_eq!(piece.profile.as_deref(), Some("gpu"));
        assert_eq!(piece.model.as_deref(), Some("big-model"));
    }

    #[test]
    fn takt_field_names_are_accepted() {
        let yaml = "name: takt\ninitial_movement: a\nsteps:\n  - name: a\n    persona: P\n    instruction: I\n    rules:\n      - condition: done\n        next: b\n  - name: b\n";
        let piece = Piece::parse("takt.yaml", yaml).expect("takt piece");
        assert_eq!(piece.start, "a");
        let a = piece.movement("a").expect("a");
        assert_eq!(a.guidance, "P\n\nI");
        assert_eq!(
            a.transitions,
            [Transition {
                target: "b".into(),
                condition: "done".into()
            }]
        );
    }

    #[test]
    fn invalid_pieces_are_refused_with_clear_errors() {
        let parse = |yaml: &str| Piece::parse("x.yaml", yaml).expect_err("invalid");
        assert!(matches!(
            parse("name: p\nmovements: []\n"),
            PieceError::NoMovements { .. }
        ));
        assert!(matches!(
            parse("name: p\nmovements:\n  - name: a\n  - name: b\n"),
            PieceError::NoStart { .. }
        ));
        assert!(matches!(
            parse("name: p\nstart_movement: c\nmovements:\n  - name: a\n"),
            PieceError::UnknownStart { .. }
        ));
        assert!(matches!(
            parse("name: p\nmovements:\n  - name: a\n  - name: a\nstart_movement: a\n"),
            PieceError::DuplicateMovement { .. }
        ));
        let unknown =
            parse("name: p\nmovements:\n  - name: a\n    transitions:\n      - target: nowhere\n");
        assert_eq!(
            unknown.to_string(),
            "piece p: movement \"a\" goes to \"nowhere\", which is not a movement, ABORT or COMPLETE"
        );
        assert!(matches!(
            parse("name: p\nmovements:\n  - name: a\n    colour: red\n"),
            PieceError::Syntax { .. }
        ));
        assert!(matches!(
            parse("name: 'a b'\nmovements:\n  - name: a\n"),
            PieceError::BadName { .. }
        ));
        assert_eq!(
            parse("name: auto\nmovements:\n  - name: a\n"),
            PieceError::Reserved("auto".into())
        );
        assert_eq!(
            parse("name: p\nmovements:\n  - name: ABORT\n"),
            PieceError::Reserved("ABORT".into())
        );
        assert!(matches!(
            parse("name: p\nmodel: 'a b'\nmovements:\n  - name: a\n"),
            PieceError::InvalidModel { .. }
        ));
        let dup = Catalog::with(vec![(
            "c.yaml".into(),
            "name: chat\nmovements:\n  - name: a\n".into(),
        )]);
        assert_eq!(dup, Err(PieceError::DuplicatePiece("chat".into())));
    }

    #[test]
    fn movements_narrow_the_tools() {
        let catalog = Catalog::builtin();
        let coding = catalog.get("coding").expect("coding");
        let review = coding.movement("review").expect("review");
        assert_eq!(review.refusal("read_file"), None);
        let refused = review.refusal("write_file").expect("refused");
        assert!(refused.contains("does not use `write_file`"), "{refused}");
        let implement = coding.movement("implement").expect("implement");
        assert_eq!(
            implement.refusal("write_file"),
            None,
            "no allowed_tools: all"
        );
        let mut read_only = implement.clone();
        read_only.edit = false;
        read_only.allowed_tools = Some(vec!["*".into()]);
        assert!(read_only.refusal("edit_file").is_some());
        assert_eq!(read_only.refusal("mcp__files__read"), None);
    }

    proptest::proptest! {
        /// A piece file of any content is a piece or a refusal with its reason, never a panic.
        #[test]
        fn any_piece_text_parses_or_is_refused(yaml in "\\PC{0,400}") {
            let _ = Piece::parse("fuzz.yaml", &yaml);
        }

        /// Mutations of a valid piece (a line dropped, any line replaced) never panic either.
        #[test]
        fn mutated_pieces_parse_or_are_refused(drop in 0usize..40, line in "\\PC{0,60}") {
            let source = Catalog::builtin();
            let yaml = source.pieces().next().map(|p| p.name.clone()).unwrap_or_default();
            let text = format!("name: {yaml}\nmovements:\n  - name: a\n    instruction: x\n");
            let mut lines: Vec<&str> = text.lines().collect();
            let at = drop % lines.len();
            lines[at] = &line;
            let _ = Piece::parse("fuzz.yaml", &lines.join("\n"));
        }
    }
}
