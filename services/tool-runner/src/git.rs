//! A space's persistent workspace: a git repository (`<WORKSPACES_DIR>/spaces/<space_id>`,
//! `main` checked out there and never touched by a job) and one worktree per task of the
//! space (`<WORKSPACES_DIR>/<task_id>`, the directory every tool of the task works in, on the
//! branch `maestro/task/<task_id>`). So two tasks running in one space never write the same
//! files, and a task's jobs (follow-ups, answers, retries, its subtasks) continue where the
//! last left off.
//!
//! - `prepare` (a job of the task starts): the worktree is made from `main` the first time;
//!   later, what an earlier job left uncommitted is committed on the branch, and at a job's
//!   first claim `main` is merged in (what other tasks finished since), unless that conflicts
//!   (then it goes on from its own branch, and says so).
//! - `finish` (the job is over): its changes are committed on the task's branch with the task
//!   and job in the message (`Maestro-Task:`, `Maestro-Job:` trailers), not merged.
//! - `merge` (the job's success is committed in Postgres): the branch is merged into `main`
//!   (fast-forward when it can be; a conflict leaves `main` as it was and the changes on the
//!   branch). A success whose merge did not happen (the tool-runner was down) is merged with
//!   the task's next success. Doing any of these again is harmless.
//! - `files`, `file`, `commits`: what a person sees of `main`.
//!
//! The `git` binary runs here, outside the sandbox, on paths this module builds from ids
//! (never from a model's input), with the repository and work tree named explicitly (a job
//! that deletes or rewrites the worktree's `.git` file changes nothing), no hooks, no
//! system or global configuration, and a fixed identity. Changes to one space's repository are
//! serialized by a lock file, across tool-runner instances.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use maestro_domain::tools::{GitOutcome, GitReply, GitRequest, SpaceCommit, SpaceFile};
use maestro_domain::{SpaceId, TaskId};
use tokio::process::Command;

/// How long one git command may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Files listed at the most.
const FILES_MAX: usize = 10_000;

/// Answer one request.
pub async fn handle(
    root: &Path,
    sandbox_user: Option<(u32, u32)>,
    request: GitRequest,
) -> GitReply {
    let result = match request {
        GitRequest::Prepare {
            space_id,
            workspace_id,
            merge_main,
        } => prepare(root, space_id, workspace_id, merge_main, sandbox_user).await,
        GitRequest::Merge {
            space_id,
            workspace_id,
        } => merge(root, space_id, workspace_id).await,
        GitRequest::Finish {
            space_id,
            workspace_id,
            job_id,
            job_no,
            outcome,
            summary,
        } => {
            let message = Message {
                task: workspace_id,
                job: job_id.to_string(),
                job_no,
                outcome,
                summary,
            };
            finish(root, space_id, &message).await
        }
        GitRequest::Files { space_id } => files(root, space_id).await,
        GitRequest::File {
            space_id,
            path,
            max_bytes,
        } => file(root, space_id, &path, max_bytes).await,
        GitRequest::Commits { space_id, limit } => commits(root, space_id, limit).await,
    };
    result.unwrap_or_else(|error| GitReply {
        error: Some(error),
        ..GitReply::default()
    })
}

fn repo_dir(root: &Path, space: SpaceId) -> PathBuf {
    root.join("spaces").join(space.to_string())
}

fn worktree_dir(root: &Path, task: TaskId) -> PathBuf {
    root.join(task.to_string())
}

fn branch(task: TaskId) -> String {
    format!("maestro/task/{task}")
}

/// A git command on `repo` (and, for a worktree, `work_tree` with its own git dir).
struct Git<'a> {
    repo: &'a Path,
    worktree: Option<(PathBuf, &'a Path)>,
}

impl<'a> Git<'a> {
    fn main(repo: &'a Path) -> Self {
        Self {
            repo,
            worktree: None,
        }
    }

    fn worktree(repo: &'a Path, task: TaskId, dir: &'a Path) -> Self {
        let git_dir = repo.join(".git").join("worktrees").join(task.to_string());
        Self {
            repo,
            worktree: Some((git_dir, dir)),
        }
    }

    async fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = self.output(args).await?;
        if out.0 {
            Ok(out.1)
        } else {
            Err(format!("git {}: {}", args.join(" "), out.2.trim()))
        }
    }

    /// `(succeeded, stdout, stderr)`.
    async fn output(&self, args: &[&str]) -> Result<(bool, String, String), String> {
        let mut command = Command::new("git");
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.repo)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            .args([
                "-c",
                "safe.directory=*",
                "-c",
                "core.fsmonitor=false",
                "-c",
                "submodule.recurse=false",
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "user.name=MAESTRO",
                "-c",
                "user.email=maestro@localhost",
                "-c",
                "commit.gpgSign=false",
                "-c",
                "core.autocrlf=false",
            ]);
        match &self.worktree {
            Some((git_dir, work_tree)) => {
                command.arg(format!("--git-dir={}", git_dir.display()));
                command.arg(format!("--work-tree={}", work_tree.display()));
                command.current_dir(work_tree);
            }
            None => {
                command.current_dir(self.repo);
            }
        }
        command.args(args).kill_on_drop(true);
        let output = tokio::time::timeout(GIT_TIMEOUT, command.output())
            .await
            .map_err(|_| format!("git {} took too long", args.join(" ")))?
            .map_err(|e| format!("cannot run git: {e}"))?;
        Ok((
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ))
    }
}

/// Holds a space's lock file: one change to its repository at a time, across instances.
struct SpaceLock(std::fs::File);

impl SpaceLock {
    async fn take(repo: &Path) -> Result<Self, String> {
        let path = repo.with_extension("lock");
        tokio::task::spawn_blocking(move || {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            file.lock()
                .map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
            Ok(Self(file))
        })
        .await
        .map_err(|e| format!("the lock task failed: {e}"))?
    }
}

impl Drop for SpaceLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// The space's repository, made (with an empty first commit on `main`) if it is not there.
async fn ensure_repo(root: &Path, space: SpaceId) -> Result<PathBuf, String> {
    let repo = repo_dir(root, space);
    let git = Git::main(&repo);
    if repo.join(".git").is_dir() {
        // A crash between `init` and the first commit leaves no `main`: make it now.
        let has_main = git
            .output(&["rev-parse", "--verify", "--quiet", "refs/heads/main"])
            .await?
            .0;
        if has_main {
            return Ok(repo);
        }
    } else {
        std::fs::create_dir_all(&repo).map_err(|e| format!("cannot create the repository: {e}"))?;
        git.run(&["init", "--quiet", "--initial-branch=main"])
            .await?;
    }
    git.run(&[
        "commit",
        "--quiet",
        "--allow-empty",
        "-m",
        &format!("Space {space} created"),
    ])
    .await?;
    Ok(repo)
}

async fn prepare(
    root: &Path,
    space: SpaceId,
    task: TaskId,
    merge_main: bool,
    sandbox_user: Option<(u32, u32)>,
) -> Result<GitReply, String> {
    let repo = repo_dir(root, space);
    std::fs::create_dir_all(root.join("spaces")).map_err(|e| format!("spaces dir: {e}"))?;
    let _lock = SpaceLock::take(&repo).await?;
    let repo = ensure_repo(root, space).await?;
    let dir = worktree_dir(root, task);
    let branch = branch(task);
    let git_dir = repo.join(".git").join("worktrees").join(task.to_string());
    if git_dir.is_dir() && !dir.is_dir() {
        // The worktree's directory is gone (deleted by hand, a lost volume): git forgets it,
        // and it is made again from the task's branch, which holds every commit.
        tracing::warn!(%task, "the task's worktree directory is missing; making it again");
        Git::main(&repo).run(&["worktree", "prune"]).await?;
    }
    if !git_dir.is_dir() {
        if dir.exists() {
            // Something that is not the worktree took its place: kept aside, not lost.
            let aside = root.join(format!("{task}.stray-{}", uuid::Uuid::now_v7().simple()));
            tracing::warn!(%task, aside = %aside.display(), "moving a stray directory aside");
            std::fs::rename(&dir, &aside)
                .map_err(|e| format!("cannot move the stray {} aside: {e}", dir.display()))?;
        }
        let path = dir.display().to_string();
        let has_branch = Git::main(&repo)
            .output(&[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ])
            .await?
            .0;
        if has_branch {
            Git::main(&repo)
                .run(&["worktree", "add", "--quiet", &path, &branch])
                .await?;
        } else {
            Git::main(&repo)
                .run(&["worktree", "add", "--quiet", "-b", &branch, &path, "main"])
                .await?;
        }
        if let Some((uid, gid)) = sandbox_user {
            chown_tree(&dir, uid, gid);
        }
        return Ok(GitReply {
            branch: Some(branch),
            ..GitReply::default()
        });
    }
    let git = Git::worktree(&repo, task, &dir);
    // What an earlier job left (it paused, or its end was not recorded) is committed first,
    // so no merge ever meets uncommitted changes.
    commit_all(
        &git,
        &format!("Task {task}: work in progress\n\nMaestro-Task: {task}\n"),
    )
    .await?;
    if !merge_main {
        return Ok(GitReply {
            branch: Some(branch),
            ..GitReply::default()
        });
    }
    // Bring in what other tasks finished since, if it merges cleanly.
    let note = match git
        .output(&["merge", "--no-edit", "--quiet", "main"])
        .await?
    {
        (true, ..) => None,
        (false, _, stderr) => {
            let _ = git.output(&["merge", "--abort"]).await;
            Some(format!(
                "main did not merge into the task's branch ({}); the job goes on from the branch",
                stderr.trim()
            ))
        }
    };
    if let Some((uid, gid)) = sandbox_user {
        chown_tree(&dir, uid, gid);
    }
    Ok(GitReply {
        branch: Some(branch),
        note,
        ..GitReply::default()
    })
}

/// What a finish commits as.
struct Message {
    task: TaskId,
    job: String,
    job_no: i32,
    outcome: GitOutcome,
    summary: String,
}

async fn finish(root: &Path, space: SpaceId, m: &Message) -> Result<GitReply, String> {
    let repo = repo_dir(root, space);
    let dir = worktree_dir(root, m.task);
    if !has_worktree(&repo, m.task) {
        return Err("the task has no worktree in the space".to_owned());
    }
    let _lock = SpaceLock::take(&repo).await?;
    let git = Git::worktree(&repo, m.task, &dir);
    let what = match m.outcome {
        GitOutcome::Succeeded => "",
        GitOutcome::Failed => " (failed: kept on its branch, not merged)",
        GitOutcome::Cancelled => " (cancelled: kept on its branch, not merged)",
    };
    let mut summary: String = m
        .summary
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(72)
        .collect();
    if summary.trim().is_empty() {
        summary = "changes".to_owned();
    }
    let message = format!(
        "Task {} job {}: {summary}{what}\n\n{}\n\nMaestro-Task: {}\nMaestro-Job: {}\n",
        m.task, m.job_no, m.summary, m.task, m.job
    );
    commit_all(&git, &message).await?;
    Ok(GitReply {
        branch: Some(branch(m.task)),
        ..GitReply::default()
    })
}

/// Merge the task's branch into `main` (fast-forward when it can be): `main`'s commit after,
/// or, on a conflict, `main` left as it was and the branch named.
async fn merge(root: &Path, space: SpaceId, task: TaskId) -> Result<GitReply, String> {
    let repo = repo_dir(root, space);
    if !has_worktree(&repo, task) {
        return Err("the task has no worktree in the space".to_owned());
    }
    let _lock = SpaceLock::take(&repo).await?;
    let branch = branch(task);
    let main = Git::main(&repo);
    match main
        .output(&["merge", "--no-edit", "--quiet", &branch])
        .await?
    {
        (true, ..) => {
            let head = main.run(&["rev-parse", "HEAD"]).await?;
            Ok(GitReply {
                commit: Some(head.trim().to_owned()),
                ..GitReply::default()
            })
        }
        (false, _, stderr) => {
            let _ = main.output(&["merge", "--abort"]).await;
            Ok(GitReply {
                branch: Some(branch),
                note: Some(format!(
                    "the changes conflict with main ({}); they are kept on the branch",
                    stderr.trim()
                )),
                ..GitReply::default()
            })
        }
    }
}

fn has_worktree(repo: &Path, task: TaskId) -> bool {
    repo.join(".git")
        .join("worktrees")
        .join(task.to_string())
        .is_dir()
}

/// Commit everything in the worktree with `message`, if anything changed.
async fn commit_all(git: &Git<'_>, message: &str) -> Result<(), String> {
    git.run(&["add", "--all", "--", "."]).await?;
    let changed = !git.output(&["diff", "--cached", "--quiet"]).await?.0;
    if changed {
        git.run(&["commit", "--quiet", "--no-verify", "-m", message])
            .await?;
    }
    Ok(())
}

async fn files(root: &Path, space: SpaceId) -> Result<GitReply, String> {
    let repo = repo_dir(root, space);
    if !repo.join(".git").is_dir() {
        return Ok(GitReply::default());
    }
    let listing = Git::main(&repo)
        .run(&["ls-tree", "-r", "-z", "--long", "HEAD"])
        .await?;
    let files = listing
        .split('\0')
        .filter(|l| !l.is_empty())
        .filter_map(|line| {
            // `<mode> <type> <object> <size>\t<path>`
            let (meta, path) = line.split_once('\t')?;
            let size = meta.split_whitespace().nth(3)?.parse().ok()?;
            Some(SpaceFile {
                path: path.to_owned(),
                size,
            })
        })
        .take(FILES_MAX)
        .collect();
    Ok(GitReply {
        files,
        ..GitReply::default()
    })
}

async fn file(root: &Path, space: SpaceId, path: &str, max_bytes: u64) -> Result<GitReply, String> {
    let valid = !path.is_empty()
        && !path.starts_with('/')
        && !path.starts_with('-')
        && !path
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
        && !path.chars().any(char::is_control);
    if !valid {
        return Ok(GitReply {
            missing: true,
            ..GitReply::default()
        });
    }
    let repo = repo_dir(root, space);
    if !repo.join(".git").is_dir() {
        return Ok(GitReply {
            missing: true,
            ..GitReply::default()
        });
    }
    let git = Git::main(&repo);
    let object = format!("HEAD:{path}");
    let (found, size, _) = git.output(&["cat-file", "-s", &object]).await?;
    if !found {
        return Ok(GitReply {
            missing: true,
            ..GitReply::default()
        });
    }
    let size: u64 = size.trim().parse().unwrap_or(u64::MAX);
    if size > max_bytes {
        return Err(format!("the file is {size} bytes, more than {max_bytes}"));
    }
    let kind = git.run(&["cat-file", "-t", &object]).await?;
    if kind.trim() != "blob" {
        return Ok(GitReply {
            missing: true,
            ..GitReply::default()
        });
    }
    let bytes = blob(&repo, &object).await?;
    Ok(GitReply {
        content: Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ..GitReply::default()
    })
}

/// A blob's bytes (not through a `String`: files need not be text).
async fn blob(repo: &Path, object: &str) -> Result<Vec<u8>, String> {
    let output = Command::new("git")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["-c", "safe.directory=*", "cat-file", "blob", object])
        .current_dir(repo)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run git: {e}"))?;
    if output.status.success() {
        Ok(output.stdout)
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

async fn commits(root: &Path, space: SpaceId, limit: u32) -> Result<GitReply, String> {
    let repo = repo_dir(root, space);
    if !repo.join(".git").is_dir() {
        return Ok(GitReply::default());
    }
    let limit = limit.clamp(1, 200).to_string();
    let log = Git::main(&repo)
        .run(&[
            "log",
            "--first-parent",
            "-n",
            &limit,
            "--format=%H%x1f%aI%x1f%s%x1f%(trailers:key=Maestro-Task,valueonly,separator=)%x1f%(trailers:key=Maestro-Job,valueonly,separator=)%x1e",
            "main",
        ])
        .await?;
    let commits = log
        .split('\u{1e}')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .filter_map(|record| {
            let mut fields = record.split('\u{1f}');
            let id = fields.next()?.to_owned();
            let at = fields.next()?.parse().ok()?;
            let subject = fields.next()?.to_owned();
            let task_id = fields.next().and_then(|t| t.trim().parse().ok());
            let job_id = fields.next().and_then(|j| j.trim().parse().ok());
            Some(SpaceCommit {
                id,
                at,
                subject,
                task_id,
                job_id,
            })
        })
        .collect();
    Ok(GitReply {
        commits,
        ..GitReply::default()
    })
}

/// Give the worktree's files to the sandbox user, so sandboxed programs may change them.
fn chown_tree(dir: &Path, uid: u32, gid: u32) {
    fn walk(path: &Path, uid: u32, gid: u32) {
        let _ = std::os::unix::fs::lchown(path, Some(uid), Some(gid));
        if path.is_dir()
            && !path.is_symlink()
            && let Ok(entries) = std::fs::read_dir(path)
        {
            for entry in entries.flatten() {
                walk(&entry.path(), uid, gid);
            }
        }
    }
    walk(dir, uid, gid);
}
