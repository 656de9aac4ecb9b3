//! The piece catalog and piece selection, from the environment: the built-in pieces plus every
//! `*.yaml` / `*.yml` file in `PIECES_DIR`, validated at start-up (a bad piece stops the
//! service with the file and the reason).

use std::path::Path;

use maestro_domain::piece::{self, Catalog};

use crate::{ConfigError, Env};

/// Load the catalog: built-ins plus the pieces in `PIECES_DIR` (if set).
pub fn catalog(env: &Env) -> Result<Catalog, ConfigError> {
    let Some(dir) = env.opt("PIECES_DIR") else {
        return Ok(Catalog::builtin());
    };
    let files = read_dir(Path::new(&dir)).map_err(|e| env.invalid("PIECES_DIR", e))?;
    Catalog::with(files).map_err(|e| env.invalid("PIECES_DIR", e.to_string()))
}

fn read_dir(dir: &Path) -> Result<Vec<(String, String)>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .path();
        let yaml = path.extension().is_some_and(|x| x == "yaml" || x == "yml");
        if !yaml || !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let text = resolve_facets(&path, &text)?;
        files.push((path.display().to_string(), text));
    }
    files.sort();
    Ok(files)
}

/// TAKT's section maps: a movement's `persona`, `instruction`, `policy` or `knowledge` that
/// names an entry of the piece's `personas`, `instructions`, `policies` or `knowledge` map is
/// replaced by that file's text (paths relative to the piece file). Other values stay as they
/// are: literal text, or the name of a TAKT built-in facet, which MAESTRO does not ship.
fn resolve_facets(path: &Path, text: &str) -> Result<String, String> {
    use serde_norway::Value;
    const MAPS: [(&str, &str); 4] = [
        ("persona", "personas"),
        ("instruction", "instructions"),
        ("policy", "policies"),
        ("knowledge", "knowledge"),
    ];
    let Ok(mut piece) = serde_norway::from_str::<Value>(text) else {
        return Ok(text.to_owned()); // the piece parser reports the syntax error
    };
    let has_maps = MAPS
        .iter()
        .any(|(_, map)| piece.get(map).is_some_and(Value::is_mapping));
    if !has_maps {
        return Ok(text.to_owned());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let maps: Vec<(&str, serde_norway::Mapping)> = MAPS
        .iter()
        .map(|(field, map)| {
            let entries = piece
                .get(map)
                .and_then(Value::as_mapping)
                .cloned()
                .unwrap_or_default();
            (*field, entries)
        })
        .collect();
    let read = |reference: &Value, entries: &serde_norway::Mapping| -> Result<Value, String> {
        let Some(file) = entries.get(reference).and_then(Value::as_str) else {
            return Ok(reference.clone());
        };
        let full = dir.join(file);
        std::fs::read_to_string(&full)
            .map(|text| Value::String(text.trim().to_owned()))
            .map_err(|e| {
                format!(
                    "{}: cannot read facet {}: {e}",
                    path.display(),
                    full.display()
                )
            })
    };
    for key in ["movements", "steps"] {
        let Some(movements) = piece.get_mut(key).and_then(Value::as_sequence_mut) else {
            continue;
        };
        for movement in movements {
            for (field, entries) in &maps {
                let Some(value) = movement.get_mut(*field) else {
                    continue;
                };
                let resolved = match &*value {
                    Value::Sequence(items) => Value::Sequence(
                        items
                            .iter()
                            .map(|item| read(item, entries))
                            .collect::<Result<_, _>>()?,
                    ),
                    other => read(other, entries)?,
                };
                *value = resolved;
            }
        }
    }
    serde_norway::to_string(&piece).map_err(|e| format!("{}: {e}", path.display()))
}

/// How a task that names no piece gets one (`PIECE_SELECTION`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// `default`: `DEFAULT_PIECE` (the built-in `chat` unless set).
    Default(String),
    /// `grounded`: always `GROUNDED_PIECE` (`research` unless set).
    Grounded(String),
    /// `router`: an LLM call picks among the pieces' descriptions when the job starts;
    /// `DEFAULT_PIECE` when its answer names no piece.
    Router,
}

impl Selection {
    /// The piece a new task is stored with (`auto` for the router).
    pub fn piece(&self) -> &str {
        match self {
            Selection::Default(name) | Selection::Grounded(name) => name,
            Selection::Router => piece::ROUTER,
        }
    }
}

/// `DEFAULT_PIECE`, checked against the catalog.
pub fn default_piece(env: &Env, catalog: &Catalog) -> Result<String, ConfigError> {
    known(env, catalog, "DEFAULT_PIECE", piece::DEFAULT_PIECE)
}

/// `PIECE_SELECTION` with `DEFAULT_PIECE` / `GROUNDED_PIECE`, checked against the catalog.
pub fn selection(env: &Env, catalog: &Catalog) -> Result<Selection, ConfigError> {
    match env.string("PIECE_SELECTION", "default").as_str() {
        "default" => Ok(Selection::Default(default_piece(env, catalog)?)),
        "grounded" => Ok(Selection::Grounded(known(
            env,
            catalog,
            "GROUNDED_PIECE",
            "research",
        )?)),
        "router" => {
            default_piece(env, catalog)?;
            Ok(Selection::Router)
        }
        _ => Err(env.invalid("PIECE_SELECTION", "one of default, grounded, router")),
    }
}

fn known(env: &Env, catalog: &Catalog, key: &str, default: &str) -> Result<String, ConfigError> {
    let name = env.string(key, default);
    if catalog.get(&name).is_none() {
        let names: Vec<&str> = catalog.pieces().map(|p| p.name.as_str()).collect();
        return Err(env.invalid(
            key,
            format!("no piece {name:?}; pieces: {}", names.join(", ")),
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_dir_adds_pieces_and_refuses_bad_ones() {
        let dir = std::env::temp_dir().join(format!("maestro-pieces-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(
            dir.join("mine.yaml"),
            "name: mine\nmovements:\n  - name: only\n",
        )
        .expect("write");
        std::fs::write(dir.join("notes.txt"), "not a piece").expect("write");
        let env = Env::from_pairs([("PIECES_DIR", dir.display().to_string())]);
        let catalog = catalog(&env).expect("catalog");
        assert!(catalog.get("mine").is_some() && catalog.get("coding").is_some());

        std::fs::write(
            dir.join("bad.yml"),
            "name: bad\nmovements:\n  - name: a\n    transitions: [{target: b}]\n",
        )
        .expect("write");
        let error = catalog_error(&env);
        assert!(
            error.contains("bad.yml") || error.contains("piece bad"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn takt_section_maps_are_read_from_files_beside_the_piece() {
        let dir = std::env::temp_dir().join(format!("maestro-facets-{}", std::process::id()));
        let pieces = dir.join("pieces");
        std::fs::create_dir_all(&pieces).expect("pieces");
        std::fs::create_dir_all(dir.join("personas")).expect("personas");
        std::fs::write(dir.join("personas/planner.md"), "# Planner\nYou plan.\n").expect("persona");
        std::fs::write(dir.join("policy.md"), "Be careful.").expect("policy");
        let yaml = "name: facets\npersonas:\n  planner: ../personas/planner.md\npolicies:\n  \
                    care: ../policy.md\nmovements:\n  - name: plan\n    persona: planner\n    \
                    policy: [care, Be brief.]\n    instruction: coder\n";
        std::fs::write(pieces.join("facets.yaml"), yaml).expect("piece");
        let files = read_dir(&pieces).expect("read");
        let catalog = Catalog::with(files).expect("catalog");
        let plan = catalog
            .get("facets")
            .and_then(|p| p.movement("plan"))
            .expect("plan");
        assert_eq!(
            plan.guidance,
            "# Planner\nYou plan.\n\ncoder\n\nBe careful.\n\nBe brief."
        );
        std::fs::remove_file(dir.join("policy.md")).expect("remove");
        let error = read_dir(&pieces).expect_err("a missing facet file");
        assert!(error.contains("cannot read facet"), "{error}");
        std::fs::remove_dir_all(&dir).ok();
    }

    fn catalog_error(env: &Env) -> String {
        catalog(env).expect_err("refused").to_string()
    }

    #[test]
    fn selection_is_checked_against_the_catalog() {
        let catalog = Catalog::builtin();
        let env = |pairs: &[(&str, &str)]| Env::from_pairs(pairs.iter().copied());
        assert_eq!(
            selection(&env(&[]), &catalog).expect("default"),
            Selection::Default("chat".into())
        );
        let grounded =
            selection(&env(&[("PIECE_SELECTION", "grounded")]), &catalog).expect("grounded");
        assert_eq!(grounded.piece(), "research");
        assert_eq!(
            selection(&env(&[("PIECE_SELECTION", "router")]), &catalog)
                .expect("router")
                .piece(),
            "auto"
        );
        assert!(selection(&env(&[("DEFAULT_PIECE", "nope")]), &catalog).is_err());
        assert!(selection(&env(&[("PIECE_SELECTION", "random")]), &catalog).is_err());
    }
}
