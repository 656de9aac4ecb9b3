//! The piece router: for a task created with piece `auto`, one LLM call picks a piece from
//! the catalog's descriptions when the task's first job starts. An answer that names no
//! piece (or no answer at all) falls back to `DEFAULT_PIECE`, so routing always settles. The
//! choice is stored on the task, so every later attempt and job runs the same piece.

use maestro_db::claims::Claimed;
use maestro_domain::Message;
use maestro_domain::piece::Catalog;

use super::context::{JobError, Shared};

/// The first words of the router's user message (scripted LLM scenarios match on them).
pub const ROUTER_PROMPT: &str = "Choose the piece for this task.";

/// The piece for a task created for the router, choosing it if no attempt did yet.
pub(super) async fn route(shared: &Shared, claim: &Claimed) -> Result<String, JobError> {
    let catalog = &shared.catalog;
    let default = &shared.settings.default_piece;
    let model = claim
        .model
        .as_deref()
        .unwrap_or(&shared.settings.default_model);
    let messages = prompt(catalog, &claim.instruction);
    let chosen = match super::llm::text(&shared.llm, model, &messages).await {
        Ok((answer, _)) => match pick(&answer, catalog) {
            Some(piece) => {
                tracing::info!(piece, "the router chose a piece");
                piece
            }
            None => {
                tracing::warn!(answer = %answer.trim(), piece = %default, "the router named no piece; using the default");
                default.clone()
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, piece = %default, "the router failed; using the default piece");
            default.clone()
        }
    };
    Ok(maestro_db::tasks::resolve_piece(&shared.pool, claim.task_id, &chosen).await?)
}

/// The router's request: the pieces and their descriptions, then the task.
pub fn prompt(catalog: &Catalog, instruction: &str) -> Vec<Message> {
    let system = "You route tasks to workflows. Answer with the name of exactly one piece from \
                  the list, and nothing else.";
    let mut user = format!("{ROUTER_PROMPT}\n\nPieces:\n");
    for piece in catalog.pieces() {
        user.push_str(&format!("- {}: {}\n", piece.name, piece.description));
    }
    user.push_str(&format!("\n<task>\n{instruction}\n</task>"));
    vec![Message::system(system), Message::user(user)]
}

/// The piece an answer names: the whole answer (ignoring case, quotes and punctuation), else
/// the first piece name that appears in it as a word.
pub fn pick(answer: &str, catalog: &Catalog) -> Option<String> {
    let cleaned: String = answer
        .trim()
        .trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_')
        .to_ascii_lowercase();
    let names: Vec<&str> = catalog.pieces().map(|p| p.name.as_str()).collect();
    if let Some(name) = names.iter().find(|n| n.to_ascii_lowercase() == cleaned) {
        return Some((*name).to_owned());
    }
    let words: Vec<String> = answer
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_')
        .map(str::to_ascii_lowercase)
        .collect();
    words
        .iter()
        .find_map(|w| names.iter().find(|n| n.to_ascii_lowercase() == *w))
        .map(|name| (*name).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_names_a_piece_or_nothing() {
        let catalog = Catalog::builtin();
        assert_eq!(pick("coding", &catalog).as_deref(), Some("coding"));
        assert_eq!(
            pick("  `Research`.\n", &catalog).as_deref(),
            Some("research")
        );
        assert_eq!(
            pick("I would use the coding piece here.", &catalog).as_deref(),
            Some("coding")
        );
        assert_eq!(pick("no idea", &catalog), None);
        assert_eq!(pick("", &catalog), None);
    }

    #[test]
    fn the_prompt_lists_every_piece_and_the_task() {
        let catalog = Catalog::builtin();
        let messages = prompt(&catalog, "Fix the login bug");
        let user = messages[1].content.as_deref().expect("user");
        assert!(user.starts_with(ROUTER_PROMPT));
        assert!(user.contains("- coding: ") && user.contains("- research: "));
        assert!(user.ends_with("<task>\nFix the login bug\n</task>"));
    }
}
