//! Running a closure on a dedicated thread that Landlock confines to one directory tree.
//! Landlock restricts only the calling thread (and what it would spawn), so the rest of the
//! tool-runner is unaffected and the thread is thrown away afterwards.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    path_beneath_rules,
};

/// Why a confined thread could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("Landlock is not available on this kernel ({0}); file tools are disabled")]
    Unsupported(String),
    #[error("cannot confine the tool thread: {0}")]
    Setup(String),
}

/// Run `work` with file access limited to `root` (read and write beneath it, nothing else).
pub async fn confined<T, F>(root: &Path, work: F) -> Result<T, ConfineError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    confine(root, true, work).await
}

/// Run `work` able to read beneath `root` and nothing else: no writes anywhere.
pub async fn confined_to_read<T, F>(root: &Path, work: F) -> Result<T, ConfineError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    confine(root, false, work).await
}

async fn confine<T, F>(root: &Path, writable: bool, work: F) -> Result<T, ConfineError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let root: PathBuf = root.to_path_buf();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("confined-tool".to_owned())
        .spawn(move || {
            let outcome = restrict(&root, writable).map(|()| work());
            let _ = tx.send(outcome);
        })
        .map_err(|e| ConfineError::Setup(e.to_string()))?;
    rx.await
        .map_err(|_| ConfineError::Setup("the tool thread panicked".to_owned()))?
}

fn restrict(root: &Path, writable: bool) -> Result<(), ConfineError> {
    let abi = ABI::V1;
    let handled = AccessFs::from_all(abi);
    let allowed = if writable {
        handled
    } else {
        AccessFs::from_read(abi)
    };
    let status = Ruleset::default()
        .handle_access(handled)
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules([root], allowed)))
        .and_then(|r| r.restrict_self())
        .map_err(|e| ConfineError::Setup(e.to_string()))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => Ok(()),
        RulesetStatus::NotEnforced => Err(ConfineError::Unsupported(
            "the ruleset is not enforced".to_owned(),
        )),
    }
}

/// Whether Landlock confines threads on this host (checked once at start-up).
pub async fn probe() -> Result<(), ConfineError> {
    let dir = std::env::temp_dir();
    let outside = PathBuf::from("/proc/self/status");
    let reached = confined(&dir, move || std::fs::read(&outside).is_ok()).await?;
    if reached {
        Err(ConfineError::Unsupported(
            "a confined thread could read outside its directory".to_owned(),
        ))
    } else {
        Ok(())
    }
}
