//! A task's workspace directory and the one rule every file tool obeys: a path given by the
//! model resolves inside the workspace, or the call is refused. Relative paths are normalized
//! lexically (`..` may not climb above the root), then the deepest existing ancestor is
//! canonicalized, so a symlink pointing outside is caught too.

use std::io;
use std::path::{Component, Path, PathBuf};

use maestro_domain::TaskId;

/// Why a path was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PathError {
    #[error("path {0:?} is absolute; give a path relative to the workspace root")]
    Absolute(String),
    #[error("path {0:?} leads outside the workspace")]
    Escapes(String),
    #[error("path {0:?} is not a valid path")]
    Invalid(String),
}

/// The workspace of one task.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// `<root>/<task_id>`, created if missing and owned by `owner` (the sandbox user) when
    /// given, so sandboxed programs can write in it.
    pub fn open(root: &Path, task_id: TaskId, owner: Option<(u32, u32)>) -> io::Result<Self> {
        let dir = Self::dir(root, task_id);
        if !dir.exists() {
            std::fs::create_dir_all(&dir)?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
            }
        }
        Ok(Self {
            root: dir.canonicalize()?,
        })
    }

    /// Whether task `task_id`'s workspace directory exists under `root`.
    pub fn exists(root: &Path, task_id: TaskId) -> bool {
        Self::dir(root, task_id).is_dir()
    }

    fn dir(root: &Path, task_id: TaskId) -> PathBuf {
        root.join(task_id.to_string())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The absolute path `relative` names inside the workspace.
    pub fn resolve(&self, relative: &str) -> Result<PathBuf, PathError> {
        if relative.contains('\0') {
            return Err(PathError::Invalid(relative.to_owned()));
        }
        let given = Path::new(relative);
        if given.is_absolute() {
            return Err(PathError::Absolute(relative.to_owned()));
        }
        let mut normalized = PathBuf::new();
        for component in given.components() {
            match component {
                Component::Normal(part) => normalized.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !normalized.pop() {
                        return Err(PathError::Escapes(relative.to_owned()));
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(PathError::Absolute(relative.to_owned()));
                }
            }
        }
        let full = self.root.join(&normalized);
        self.check_real_location(&full, relative)?;
        Ok(full)
    }

    /// Follow symlinks on the existing part of `full` and make sure it stays inside.
    fn check_real_location(&self, full: &Path, relative: &str) -> Result<(), PathError> {
        let mut existing = full;
        loop {
            match existing.symlink_metadata() {
                Ok(_) => break,
                Err(_) => match existing.parent() {
                    Some(parent) => existing = parent,
                    None => return Err(PathError::Invalid(relative.to_owned())),
                },
            }
        }
        let real = existing
            .canonicalize()
            .map_err(|_| PathError::Escapes(relative.to_owned()))?;
        if real.starts_with(&self.root) {
            Ok(())
        } else {
            Err(PathError::Escapes(relative.to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(dir.path(), TaskId::new(), None).expect("open");
        (dir, ws)
    }

    #[test]
    fn paths_inside_resolve_and_paths_outside_are_refused() {
        let (_dir, ws) = workspace();
        assert_eq!(
            ws.resolve("a/b.txt").expect("inside"),
            ws.root().join("a/b.txt")
        );
        assert_eq!(
            ws.resolve("a/../b.txt").expect("inside"),
            ws.root().join("b.txt")
        );
        assert_eq!(ws.resolve(".").expect("root"), ws.root().to_path_buf());
        assert!(matches!(
            ws.resolve("/etc/passwd"),
            Err(PathError::Absolute(_))
        ));
        assert!(matches!(ws.resolve("../x"), Err(PathError::Escapes(_))));
        assert!(matches!(
            ws.resolve("a/../../x"),
            Err(PathError::Escapes(_))
        ));
    }

    #[test]
    fn symlinks_pointing_outside_are_refused() {
        let (dir, ws) = workspace();
        let outside = dir.path().join("secret.txt");
        std::fs::write(&outside, "secret").expect("write");
        std::os::unix::fs::symlink(&outside, ws.root().join("link")).expect("symlink");
        std::os::unix::fs::symlink(dir.path(), ws.root().join("up")).expect("symlink");
        assert!(matches!(ws.resolve("link"), Err(PathError::Escapes(_))));
        assert!(matches!(
            ws.resolve("up/secret.txt"),
            Err(PathError::Escapes(_))
        ));
        assert!(matches!(
            ws.resolve("up/new.txt"),
            Err(PathError::Escapes(_))
        ));
    }
}
