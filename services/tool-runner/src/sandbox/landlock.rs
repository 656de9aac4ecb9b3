//! Running a closure on a thread that Landlock confines to one directory tree. Landlock
//! restricts only the calling thread (and what it would spawn), so the rest of the
//! tool-runner is unaffected.
//!
//! A confined thread is kept after its call, idle, for the next call on the same directory
//! with the same rights, so that a call usually finds its thread running and confined: no
//! thread made, no ruleset built and applied per call (the stand-in every read of a task
//! with no workspace yet reads, and a job's many calls on its workspace). A thread serves
//! one call at a time and only ever the directory it was confined to: the directory is known
//! by its device, inode and birth time, read from the very descriptor its rule is made of, so
//! a workspace removed and made again at the same path gets threads of its own. Idle threads
//! end after [`KEEP_IDLE`]; at most [`KEEP_MOST`] are kept in all.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, mpsc};
use std::time::Duration;

use landlock::{
    ABI, Access, AccessFs, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
};

/// How long a confined thread waits, idle, for its directory's next call.
const KEEP_IDLE: Duration = Duration::from_secs(30);
/// Idle confined threads kept at the most, over all directories.
const KEEP_MOST: usize = 64;

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

/// A call for a confined thread, given whether its thread is confined (a kept thread is): it
/// does the work and returns the hand-over of its outcome to the caller, which the thread
/// makes once it is kept again, so that a caller's next call finds it.
type Job = Box<dyn FnOnce(Result<(), ConfineError>) -> Delivery + Send>;
type Delivery = Box<dyn FnOnce() + Send>;

/// What a confined thread was confined to: a directory (by device, inode and, where the file
/// system keeps it, birth time) and whether it may write there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Confinement {
    dev: u64,
    ino: u64,
    born: Option<std::time::SystemTime>,
    writable: bool,
}

async fn confine<T, F>(root: &Path, writable: bool, work: F) -> Result<T, ConfineError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    // As the rule wants it: a path descriptor (no read permission needed), closed on exec.
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(root)
        .map_err(|e| ConfineError::Setup(format!("cannot open {}: {e}", root.display())))?;
    let meta = dir
        .metadata()
        .map_err(|e| ConfineError::Setup(format!("cannot look at {}: {e}", root.display())))?;
    let confinement = Confinement {
        dev: meta.dev(),
        ino: meta.ino(),
        born: meta.created().ok(),
        writable,
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move |confined: Result<(), ConfineError>| {
        let outcome = confined.map(|()| work());
        Box::new(move || {
            let _ = tx.send(outcome);
        })
    });
    let job = match KEPT.take(confinement) {
        Some(idle) => match idle.calls.send(job) {
            Ok(()) => None,
            // Its thread ended after all: a new one.
            Err(mpsc::SendError(job)) => Some(job),
        },
        None => Some(job),
    };
    if let Some(job) = job {
        std::thread::Builder::new()
            .name("confined-tool".to_owned())
            .spawn(move || serve(dir, confinement, job))
            .map_err(|e| ConfineError::Setup(e.to_string()))?;
    }
    rx.await
        .map_err(|_| ConfineError::Setup("the tool thread panicked".to_owned()))?
}

/// A confined thread's life: confine itself to `dir`, run the first call, then wait, kept,
/// for calls on the same directory until it has been idle for [`KEEP_IDLE`] (or is not kept).
/// Each call's outcome is handed over only once the thread is back in the pool.
fn serve(dir: File, confinement: Confinement, first: Job) {
    if let Err(e) = restrict(dir, confinement.writable) {
        first(Err(e))();
        return;
    }
    static IDS: AtomicU64 = AtomicU64::new(0);
    let id = IDS.fetch_add(1, Ordering::Relaxed);
    let (calls, waiting) = mpsc::channel::<Job>();
    let mut deliver = first(Ok(()));
    loop {
        let idle = Idle {
            id,
            calls: calls.clone(),
        };
        let kept = KEPT.keep(confinement, idle);
        deliver();
        if !kept {
            return;
        }
        deliver = loop {
            match waiting.recv_timeout(KEEP_IDLE) {
                Ok(job) => break job(Ok(())),
                // Gone from the pool unless a caller took it meanwhile, whose call follows.
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if KEPT.forget(confinement, id) {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        };
    }
}

/// The idle confined threads, by what they are confined to.
static KEPT: LazyLock<Kept> = LazyLock::new(Kept::default);

#[derive(Debug, Default)]
struct Kept(Mutex<KeptThreads>);

#[derive(Debug, Default)]
struct KeptThreads {
    idle: HashMap<Confinement, Vec<Idle>>,
    count: usize,
}

/// An idle confined thread: where to send it a call.
#[derive(Debug)]
struct Idle {
    id: u64,
    calls: mpsc::Sender<Job>,
}

impl Kept {
    fn threads(&self) -> std::sync::MutexGuard<'_, KeptThreads> {
        // Nothing panics while holding it; a poisoned pool is still consistent.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle thread confined to `confinement`, taken out of the pool.
    fn take(&self, confinement: Confinement) -> Option<Idle> {
        let mut threads = self.threads();
        let idle = threads.idle.get_mut(&confinement)?;
        let taken = idle.pop();
        if idle.is_empty() {
            threads.idle.remove(&confinement);
        }
        if taken.is_some() {
            threads.count -= 1;
        }
        taken
    }

    /// Keep an idle thread; `false` when the pool is full.
    fn keep(&self, confinement: Confinement, idle: Idle) -> bool {
        let mut threads = self.threads();
        if threads.count >= KEEP_MOST {
            return false;
        }
        threads.count += 1;
        threads.idle.entry(confinement).or_default().push(idle);
        true
    }

    /// Take an idle thread out of the pool by its id; `false` when it is not there (a caller
    /// took it).
    fn forget(&self, confinement: Confinement, id: u64) -> bool {
        let mut threads = self.threads();
        let Some(idle) = threads.idle.get_mut(&confinement) else {
            return false;
        };
        let Some(at) = idle.iter().position(|t| t.id == id) else {
            return false;
        };
        idle.swap_remove(at);
        if idle.is_empty() {
            threads.idle.remove(&confinement);
        }
        threads.count -= 1;
        true
    }
}

fn restrict(dir: File, writable: bool) -> Result<(), ConfineError> {
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
        .and_then(|r| r.add_rule(PathBeneath::new(dir, allowed)))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn thread() -> std::thread::ThreadId {
        std::thread::current().id()
    }

    #[tokio::test]
    async fn a_kept_thread_serves_only_its_own_directory_and_rights() {
        let base = tempfile::tempdir().expect("tempdir");
        let (a, b) = (base.path().join("a"), base.path().join("b"));
        for dir in [&a, &b] {
            std::fs::create_dir(dir).expect("mkdir");
            std::fs::write(dir.join("f"), "x").expect("write");
        }

        // The next call on the same directory with the same rights finds its thread.
        let first = confined(&a, thread).await.expect("confined");
        assert_eq!(confined(&a, thread).await.expect("confined"), first);

        // A's thread is not B's: B's call gets a thread that reads B, A's still cannot.
        let b_file = b.join("f");
        let reached = confined(&a, move || std::fs::read(&b_file).is_ok()).await;
        assert!(!reached.expect("confined"), "A's thread reads only A");
        let b_file = b.join("f");
        let (reached, on) = confined(&b, move || (std::fs::read(&b_file).is_ok(), thread()))
            .await
            .expect("confined");
        assert!(reached);
        assert_ne!(on, first);

        // Reading is not writing: a read-only call gets a thread of its own, which cannot
        // write, and the writable thread is still there for the next writing call.
        let a_new = a.join("new");
        let (wrote, on) =
            confined_to_read(&a, move || (std::fs::write(&a_new, "y").is_ok(), thread()))
                .await
                .expect("confined");
        assert!(!wrote, "a read-only thread cannot write");
        assert_ne!(on, first);
        let a_new = a.join("new");
        let (wrote, on) = confined(&a, move || (std::fs::write(&a_new, "y").is_ok(), thread()))
            .await
            .expect("confined");
        assert!(wrote);
        assert_eq!(on, first);

        // A directory removed and made again at the same path is another directory: a new
        // thread, which can work in it (the kept one could not).
        std::fs::remove_dir_all(&a).expect("rm");
        std::fs::create_dir(&a).expect("mkdir again");
        let a_file = a.join("f");
        let (wrote, on) = confined(&a, move || (std::fs::write(&a_file, "z").is_ok(), thread()))
            .await
            .expect("confined");
        assert!(wrote, "the new directory is writable by its thread");
        assert_ne!(on, first);
    }

    #[tokio::test]
    async fn a_busy_thread_is_not_given_a_second_call() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (started, wait_started) = std::sync::mpsc::channel();
        let (finish, wait_finish) = std::sync::mpsc::channel::<()>();
        let root = dir.path().to_path_buf();
        let busy = tokio::spawn(async move {
            confined(&root, move || {
                started.send(thread()).expect("started");
                wait_finish.recv().expect("finish");
                thread()
            })
            .await
        });
        let busy_on = tokio::task::spawn_blocking(move || wait_started.recv().expect("running"))
            .await
            .expect("join");
        let other = confined(dir.path(), thread).await.expect("confined");
        assert_ne!(other, busy_on, "the busy thread was not handed the call");
        finish.send(()).expect("finish");
        assert_eq!(busy.await.expect("join").expect("confined"), busy_on);
    }
}
