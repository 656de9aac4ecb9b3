//! A task's workspace directory and the one rule every file tool obeys: a path given by the
//! model resolves inside the workspace, or the call is refused. Relative paths are normalized
//! lexically (`..` may not climb above the root), then each existing component below the
//! workspace's root is looked at without following it; a symlink among them sends the path
//! through `canonicalize`, so a symlink pointing outside is caught too. The directory that
//! holds the workspaces is resolved to its canonical path once ([`Workspaces::create`]), so a
//! task's workspace is canonical by construction and opening it costs one `lstat`.
//!
//! A task's directory is made by the first call that may write in it. A read-only file tool
//! on a task that has none yet reads the stand-in, an empty directory beside the workspaces
//! that it may only read ([`Workspaces::open_to_read`]): it answers as on an empty workspace,
//! without the `mkdir` (a new directory's inode and block allocated: 0.1 ms or more on ext4).

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

/// The stand-in's name in the workspaces directory (no task's: those are UUIDs).
const STAND_IN: &str = ".empty";

/// The directory every task's workspace is in (`WORKSPACES_DIR`), by its canonical path.
#[derive(Debug, Clone)]
pub struct Workspaces {
    root: PathBuf,
    /// The empty, read-only stand-in for a workspace not made yet; `None` when what is at its
    /// path is not an empty directory (then every call makes its task's directory).
    stand_in: Option<PathBuf>,
}

impl Workspaces {
    /// `dir`, created if missing, resolved to its canonical path once, here, with its
    /// stand-in.
    pub fn create(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let root = dir.canonicalize()?;
        let stand_in = Self::stand_in(&root.join(STAND_IN))?;
        Ok(Self { root, stand_in })
    }

    /// The stand-in at `path`, made empty and read-only if missing. One that is there already
    /// is used only if it is an empty directory: it is never emptied, since another
    /// tool-runner sharing the directory may be reading it.
    fn stand_in(path: &Path) -> io::Result<Option<PathBuf>> {
        use std::os::unix::fs::PermissionsExt as _;
        match std::fs::create_dir(path) {
            Ok(()) => {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o555))?;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let usable =
            std::fs::symlink_metadata(path)?.is_dir() && std::fs::read_dir(path)?.next().is_none();
        if !usable {
            tracing::warn!(
                path = %path.display(),
                "the workspaces' stand-in is not an empty directory; every tool call makes its \
                 task's workspace"
            );
        }
        Ok(usable.then(|| path.to_path_buf()))
    }

    /// The canonical path of the directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Task `task_id`'s workspace, `<root>/<task_id>`, created if missing and owned by
    /// `owner` (the sandbox user) when given, so sandboxed programs can write in it. What is
    /// there must be a directory, not a symlink to one.
    pub fn open(&self, task_id: TaskId, owner: Option<(u32, u32)>) -> io::Result<Workspace> {
        let dir = self.dir(task_id);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) => a_directory(&meta, &dir)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Self::make(&dir, owner)?,
            Err(e) => return Err(e),
        }
        // Canonical: a directory (not a symlink) in a canonical directory.
        Ok(Workspace {
            root: dir,
            stand_in: false,
        })
    }

    /// Task `task_id`'s workspace for a call that only reads it: the task's directory if it
    /// has one, else the empty stand-in (nothing is made), else as [`Self::open`].
    pub fn open_to_read(
        &self,
        task_id: TaskId,
        owner: Option<(u32, u32)>,
    ) -> io::Result<Workspace> {
        let dir = self.dir(task_id);
        match (std::fs::symlink_metadata(&dir), &self.stand_in) {
            (Ok(meta), _) if meta.is_dir() => Ok(Workspace {
                root: dir,
                stand_in: false,
            }),
            // Unless the stand-in went with a removed workspaces directory.
            (Err(e), Some(stand_in))
                if e.kind() == io::ErrorKind::NotFound
                    && std::fs::symlink_metadata(stand_in).is_ok_and(|m| m.is_dir()) =>
            {
                Ok(Workspace {
                    root: stand_in.clone(),
                    stand_in: true,
                })
            }
            _ => self.open(task_id, owner),
        }
    }

    /// Whether task `task_id`'s workspace directory exists.
    pub fn exists(&self, task_id: TaskId) -> bool {
        self.dir(task_id).is_dir()
    }

    fn dir(&self, task_id: TaskId) -> PathBuf {
        self.root.join(task_id.to_string())
    }

    /// Make a workspace's directory, owned by `owner`.
    fn make(dir: &Path, owner: Option<(u32, u32)>) -> io::Result<()> {
        match std::fs::create_dir(dir) {
            Ok(()) => {}
            // Made meanwhile by another call of the same task, which also gives it its owner.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return a_directory(&std::fs::symlink_metadata(dir)?, dir);
            }
            // The workspaces directory itself was removed: make it again, where it was.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)?;
                if dir.canonicalize()? != dir {
                    return Err(io::Error::other(format!(
                        "{} no longer resolves to itself",
                        dir.display()
                    )));
                }
            }
            Err(e) => return Err(e),
        }
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
        }
        Ok(())
    }
}

/// `Ok` when `meta` (not followed) is a directory's, not a symlink's or a file's.
fn a_directory(meta: &std::fs::Metadata, dir: &Path) -> io::Result<()> {
    match meta.is_dir() {
        true => Ok(()),
        false => Err(io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        ))),
    }
}

/// The workspace of one task.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    /// The stand-in for a task with no workspace yet: read only.
    stand_in: bool,
}

impl Workspace {
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether this is the stand-in for a workspace not made yet, which may only be read.
    pub fn is_stand_in(&self) -> bool {
        self.stand_in
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
        self.check_real_location(&full, &normalized, relative)?;
        Ok(full)
    }

    /// Make sure `full` (the root joined with `normalized`) stays inside once symlinks are
    /// followed. The root is canonical, so only the components below it can lead elsewhere:
    /// each existing one is looked at without following it, and the first that does not
    /// exist ends the look (nothing below it does). A symlink among them sends the path
    /// through [`Self::check_canonical`].
    fn check_real_location(
        &self,
        full: &Path,
        normalized: &Path,
        relative: &str,
    ) -> Result<(), PathError> {
        let mut at = self.root.clone();
        for part in normalized.components() {
            at.push(part);
            match at.symlink_metadata() {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return self.check_canonical(full, relative);
                }
                Ok(_) => {}
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    /// Canonicalize the deepest existing ancestor of `full` and make sure it is inside.
    fn check_canonical(&self, full: &Path, relative: &str) -> Result<(), PathError> {
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
        let ws = Workspaces::create(dir.path())
            .expect("workspaces")
            .open(TaskId::new(), None)
            .expect("open");
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

    #[test]
    fn symlinks_inside_the_workspace_pointing_inside_resolve() {
        let (_dir, ws) = workspace();
        std::fs::create_dir(ws.root().join("sub")).expect("mkdir");
        std::os::unix::fs::symlink(ws.root().join("sub"), ws.root().join("inner"))
            .expect("symlink");
        std::os::unix::fs::symlink("sub", ws.root().join("relative")).expect("symlink");
        assert_eq!(
            ws.resolve("inner/new.txt").expect("inside"),
            ws.root().join("inner/new.txt")
        );
        assert!(ws.resolve("relative/x/y").is_ok());
        // A regular file with a path below it: nothing below exists, and nothing escapes.
        std::fs::write(ws.root().join("file.txt"), "x").expect("write");
        assert!(ws.resolve("file.txt/below").is_ok());
    }

    #[test]
    fn the_workspaces_directory_is_canonical_and_so_is_every_workspace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        std::os::unix::fs::symlink(&real, dir.path().join("link")).expect("symlink");
        let given = dir.path().join("link/./made/../ws");
        let workspaces = Workspaces::create(&given).expect("workspaces");
        let canonical = real.canonicalize().expect("canonical").join("ws");
        assert_eq!(workspaces.path(), canonical);
        let task = TaskId::new();
        assert!(!workspaces.exists(task));
        let ws = workspaces.open(task, None).expect("open");
        assert!(workspaces.exists(task));
        assert_eq!(ws.root(), canonical.join(task.to_string()));
        assert_eq!(ws.root().canonicalize().expect("canonical"), ws.root());
        // Opened again, the same directory.
        std::fs::write(ws.root().join("kept.txt"), "kept").expect("write");
        let again = workspaces.open(task, None).expect("open again");
        assert_eq!(again.root(), ws.root());
        assert!(again.root().join("kept.txt").exists());
        assert_eq!(ws.resolve(".").expect("root"), ws.root().to_path_buf());
    }

    #[test]
    fn a_task_directory_that_is_not_a_directory_is_not_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspaces = Workspaces::create(&dir.path().join("ws")).expect("workspaces");
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        let linked = TaskId::new();
        std::os::unix::fs::symlink(&outside, workspaces.path().join(linked.to_string()))
            .expect("symlink");
        let refused = workspaces.open(linked, None).expect_err("a symlink");
        assert!(
            refused.to_string().contains("is not a directory"),
            "{refused}"
        );
        let file = TaskId::new();
        std::fs::write(workspaces.path().join(file.to_string()), "x").expect("write");
        assert!(workspaces.open(file, None).is_err());
    }

    #[test]
    fn a_removed_workspaces_directory_is_made_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspaces = Workspaces::create(&dir.path().join("ws")).expect("workspaces");
        std::fs::remove_dir_all(workspaces.path()).expect("remove");
        let read = workspaces
            .open_to_read(TaskId::new(), None)
            .expect("open to read");
        assert!(!read.is_stand_in(), "the stand-in went with it");
        assert!(read.root().is_dir());
        let ws = workspaces.open(TaskId::new(), None).expect("open");
        assert!(ws.root().is_dir());
        assert!(ws.root().starts_with(workspaces.path()));
    }

    #[test]
    fn a_read_on_a_task_with_no_workspace_gets_the_empty_stand_in_and_makes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspaces = Workspaces::create(&dir.path().join("ws")).expect("workspaces");
        let task = TaskId::new();
        let read = workspaces.open_to_read(task, None).expect("open to read");
        assert!(read.is_stand_in());
        assert_eq!(read.root(), workspaces.path().join(STAND_IN));
        assert_eq!(std::fs::read_dir(read.root()).expect("list").count(), 0);
        assert!(!workspaces.exists(task), "a read makes no workspace");
        // The first call that may write makes it; reads see it from then on.
        let written = workspaces.open(task, None).expect("open");
        assert!(!written.is_stand_in());
        std::fs::write(written.root().join("a.txt"), "a").expect("write");
        let read = workspaces.open_to_read(task, None).expect("open to read");
        assert!(!read.is_stand_in());
        assert_eq!(read.root(), written.root());
    }

    #[test]
    fn a_stand_in_that_is_not_empty_is_not_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join(STAND_IN)).expect("mkdir");
        std::fs::write(root.join(STAND_IN).join("left.txt"), "left").expect("write");
        let workspaces = Workspaces::create(&root).expect("workspaces");
        let task = TaskId::new();
        let read = workspaces.open_to_read(task, None).expect("open to read");
        assert!(
            !read.is_stand_in(),
            "a stand-in with files would show them to every task"
        );
        assert!(workspaces.exists(task));
        // Made again over one that is there and empty, it is used.
        std::fs::remove_file(root.join(STAND_IN).join("left.txt")).expect("remove");
        let workspaces = Workspaces::create(&root).expect("workspaces");
        assert!(
            workspaces
                .open_to_read(TaskId::new(), None)
                .expect("open")
                .is_stand_in()
        );
    }
}
