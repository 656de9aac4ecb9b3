//! The sandbox escape suite: each case tries to get out of the sandbox and asserts it stayed
//! contained — reading secrets or files outside the workspace (directly, through `..` and
//! through symlinks), writing outside it, reaching a listener on the host's loopback (from a
//! program, or with `http_fetch` even when network is granted), a fork bomb, a memory hog, a
//! CPU spinner, endless output, too many open files, a sleeper past its time limit, a child
//! that outlives its parent, a FIFO that would block a file tool. Real bubblewrap, real
//! Landlock, real processes.

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use maestro_domain::TaskId;
use maestro_tool_runner::sandbox::{self, Limits, Sandbox};
use maestro_tool_runner::tools::{self, Call, Toolbox};
use maestro_tool_runner::workspace::{Workspace, Workspaces};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

struct Harness {
    toolbox: Toolbox,
    workspaces: Workspaces,
    workspace: Workspace,
    _dir: tempfile::TempDir,
}

async fn harness() -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let limits = Limits {
        cpu_seconds: 2,
        memory_bytes: 256 * 1024 * 1024,
        max_processes: 64,
        max_open_files: 64,
        max_file_bytes: 16 * 1024 * 1024,
        max_output_bytes: 64 * 1024,
    };
    let sandbox = Sandbox::detect(
        "bwrap".into(),
        limits,
        (65534, 65534),
        Vec::new(),
        Some(env!("CARGO_BIN_EXE_maestro-sandbox-forward").into()),
        &dir.path().join(".probe"),
    )
    .await;
    assert_eq!(
        sandbox.unavailable, None,
        "bubblewrap works here (install the bubblewrap package)"
    );
    assert_eq!(sandbox.files_unavailable, None, "Landlock works here");
    let workspaces = Workspaces::create(dir.path()).expect("workspaces");
    let workspace = workspaces
        .open(TaskId::new(), sandbox.run_as)
        .expect("workspace");
    let toolbox = Toolbox {
        sandbox,
        mcp: Default::default(),
    };
    Harness {
        toolbox,
        workspaces,
        workspace,
        _dir: dir,
    }
}

impl Harness {
    async fn call(
        &self,
        tool: &str,
        arguments: Value,
        network: bool,
        timeout: Duration,
    ) -> Result<String, String> {
        self.call_reaching(tool, arguments, network, &[], timeout)
            .await
    }

    async fn call_reaching(
        &self,
        tool: &str,
        arguments: Value,
        network: bool,
        allowed_hosts: &[&str],
        timeout: Duration,
    ) -> Result<String, String> {
        self.call_in(
            &self.workspace,
            tool,
            arguments,
            network,
            allowed_hosts,
            timeout,
        )
        .await
    }

    async fn call_in(
        &self,
        workspace: &Workspace,
        tool: &str,
        arguments: Value,
        network: bool,
        allowed_hosts: &[&str],
        timeout: Duration,
    ) -> Result<String, String> {
        let call = Call {
            tool: tool.to_owned(),
            arguments,
            workspace: workspace.clone(),
            limits: tools::Limits {
                max_read_bytes: 64 * 1024,
                max_output_bytes: 64 * 1024,
            },
            timeout,
            network,
            allowed_hosts: allowed_hosts.iter().map(|h| h.to_string()).collect(),
            operation_id: "op-test".to_owned(),
            task: TaskId::new(),
            mcp: None,
        };
        self.toolbox.execute(call, &CancellationToken::new()).await
    }

    /// A call without network and a 5 s limit.
    async fn run(&self, tool: &str, arguments: Value) -> Result<String, String> {
        self.call(tool, arguments, false, Duration::from_secs(5))
            .await
    }

    async fn shell(&self, command: &str) -> Result<String, String> {
        self.call(
            "shell",
            json!({"command": command}),
            false,
            Duration::from_secs(20),
        )
        .await
    }
}

/// The `n` of a program's `stopped at <n>` report.
fn stopped_at(result: &Result<String, String>) -> usize {
    text(result)
        .split("stopped at ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("it reports where it stopped: {result:?}"))
}

fn text(result: &Result<String, String>) -> &str {
    match result {
        Ok(text) | Err(text) => text,
    }
}

/// Whether a process whose command line contains `marker` is running on the host.
fn running(marker: &str) -> bool {
    std::process::Command::new("pgrep")
        .args(["-f", marker])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty())
}

#[tokio::test]
async fn secrets_and_files_outside_the_workspace_cannot_be_read() {
    let h = harness().await;
    let shadow = h.shell("cat /etc/shadow").await;
    assert!(
        shadow.is_err() && text(&shadow).contains("No such file"),
        "{shadow:?}"
    );
    let home = h
        .shell("ls /root /home /var 2>&1; cat /proc/1/environ 2>&1")
        .await;
    assert!(
        text(&home).contains("cannot access '/root'"),
        "the host's directories are not there: {home:?}"
    );
    assert!(
        !text(&home).contains("CARGO") && !text(&home).contains("/work"),
        "nothing of the tool-runner's environment reaches the sandbox, not even its init's: {home:?}"
    );
    for path in ["../../../etc/shadow", "/etc/shadow"] {
        let read = h.run("read_file", json!({"path": path})).await;
        assert!(read.is_err(), "{path}: {read:?}");
    }
    h.shell("ln -s /etc/shadow shadow-link && ln -s / root-link")
        .await
        .expect("links made inside");
    for path in ["shadow-link", "root-link/etc/shadow"] {
        let read = h.run("read_file", json!({"path": path})).await;
        assert!(
            read.is_err() && text(&read).contains("outside"),
            "{path}: {read:?}"
        );
    }
    // Below the path checks, the kernel refuses too: a confined thread cannot open a file
    // outside its directory even when asked directly.
    let outside = Path::new("/etc/hostname").to_path_buf();
    let read = sandbox::confined(h.workspace.root(), move || std::fs::read(&outside))
        .await
        .expect("confined thread");
    assert!(
        read.is_err(),
        "Landlock refuses a read outside the workspace"
    );
}

#[tokio::test]
async fn the_stand_in_for_a_workspace_not_made_yet_reads_as_empty_and_takes_no_writes() {
    let h = harness().await;
    let run_as = h.toolbox.sandbox.run_as;
    let stand_in = h
        .workspaces
        .open_to_read(TaskId::new(), run_as)
        .expect("the stand-in");
    assert!(stand_in.is_stand_in());
    let empty = h
        .workspaces
        .open(TaskId::new(), run_as)
        .expect("a workspace");
    let five_s = Duration::from_secs(5);
    for (tool, arguments) in [
        ("list_files", json!({})),
        ("glob", json!({"pattern": "**/*"})),
        ("grep", json!({"pattern": "x"})),
        ("read_file", json!({"path": "a.txt"})),
    ] {
        let read = h
            .call_in(&stand_in, tool, arguments.clone(), false, &[], five_s)
            .await;
        let made = h.call_in(&empty, tool, arguments, false, &[], five_s).await;
        assert_eq!(
            read, made,
            "{tool} reads the stand-in as an empty workspace"
        );
    }
    // A writing call that reached it by mistake is refused by the kernel (the tool-runner runs
    // as root here, which the directory's mode alone would not stop).
    let written = h
        .call_in(
            &stand_in,
            "write_file",
            json!({"path": "x.txt", "content": "x"}),
            false,
            &[],
            five_s,
        )
        .await;
    assert!(
        written
            .as_ref()
            .is_err_and(|e| e.contains("permission denied")),
        "{written:?}"
    );
    let target = stand_in.root().join("direct.txt");
    let direct = sandbox::confined_to_read(stand_in.root(), move || std::fs::write(&target, "x"))
        .await
        .expect("confined thread");
    assert!(
        direct.is_err(),
        "Landlock refuses a write under a read-only root"
    );
    let left = std::fs::read_dir(stand_in.root()).expect("list").count();
    assert_eq!(left, 0, "the stand-in stays empty");
}

#[tokio::test]
async fn nothing_outside_the_workspace_can_be_written() {
    let h = harness().await;
    let marker = format!("/tmp/maestro-escape-{}", uuid::Uuid::new_v4().simple());
    let system = h.shell("echo pwned > /usr/pwned").await;
    assert!(
        system.is_err() && text(&system).contains("Read-only"),
        "the system is read-only: {system:?}"
    );
    // The sandbox's root, /tmp and /etc are its own, thrown away with it.
    h.shell(&format!("echo pwned > {marker}; echo pwned > /etc/pwned"))
        .await
        .expect("private writes");
    assert!(!Path::new(&marker).exists(), "the host's /tmp is untouched");
    assert!(
        !Path::new("/usr/pwned").exists() && !Path::new("/etc/pwned").exists(),
        "the host's system is untouched"
    );
    let escape = h
        .run(
            "write_file",
            json!({"path": "../escape.txt", "content": "x"}),
        )
        .await;
    assert!(escape.is_err(), "{escape:?}");
    assert!(
        !h.workspace
            .root()
            .parent()
            .expect("parent")
            .join("escape.txt")
            .exists()
    );
    h.shell("echo inside > ok.txt")
        .await
        .expect("the workspace is writable");
    let read = h.run("read_file", json!({"path": "ok.txt"})).await;
    assert_eq!(
        read,
        Ok("inside\n".to_owned()),
        "file tools and programs share the workspace"
    );
}

#[tokio::test]
async fn the_network_is_closed_unless_granted() {
    let h = harness().await;
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    let connect = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('connected')\""
    );
    let closed = h.shell(&connect).await;
    assert!(
        closed.is_err() && !text(&closed).contains("connected"),
        "{closed:?}"
    );
    assert!(
        listener.accept().is_err(),
        "no connection reached the host's listener"
    );
    // With network granted, the program still has no way to the host's loopback: its own
    // namespace has nothing but loopback, where only the egress proxy's forwarder listens.
    let args = json!({"command": connect});
    let granted = h.call("shell", args, true, Duration::from_secs(20)).await;
    assert!(
        granted.is_err() && !text(&granted).contains("connected"),
        "with network granted the host's loopback is still out of reach: {granted:?}"
    );
    assert!(
        listener.accept().is_err(),
        "no connection reached the host's listener"
    );
    let fetch = h
        .run(
            "http_fetch",
            json!({"url": format!("http://127.0.0.1:{port}/")}),
        )
        .await;
    assert!(text(&fetch).contains("not granted"), "{fetch:?}");
    // With network granted, `http_fetch` (which runs beside the services) still cannot reach
    // an internal address, by IP or by a name that resolves to one.
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let fetch = h
            .call(
                "http_fetch",
                json!({"url": url}),
                true,
                Duration::from_secs(5),
            )
            .await;
        assert!(
            text(&fetch).contains("internal address"),
            "{url}: {fetch:?}"
        );
    }
}

/// A one-line HTTP server on `addr` answering every request with `hello`.
fn hello_server(addr: &str) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = TcpListener::bind(addr).expect("listener");
    let local = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        }
    });
    local
}

/// This host's own non-loopback address (the one it would reach the internet from), if any.
fn own_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("203.0.113.1:9").ok()?;
    Some(socket.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback())
}

#[tokio::test]
async fn programs_granted_network_reach_only_public_or_listed_hosts() {
    let h = harness().await;
    let granted = |command: String, allowed: &'static [&'static str]| {
        let h = &h;
        async move {
            let args = json!({"command": command});
            h.call_reaching("shell", args, true, allowed, Duration::from_secs(30))
                .await
        }
    };
    // Through the proxy (plain and tunnelled), every internal range is refused with the
    // reason; without it there is no route at all.
    let mut internal = vec![
        "127.0.0.1:5432".to_owned(),
        "10.0.0.1:80".to_owned(),
        "172.16.0.1:80".to_owned(),
        "192.168.0.1:80".to_owned(),
        "169.254.169.254:80".to_owned(),
        "[::1]:4222".to_owned(),
    ];
    internal.extend(own_address().map(|ip| std::net::SocketAddr::new(ip, 80).to_string()));
    for target in &internal {
        let via_proxy = format!(
            "curl -sS --max-time 5 --noproxy '' -w ' status=%{{http_code}}' http://{target}/; \
             curl -sS --max-time 5 --noproxy '' -p http://{target}/ 2>&1; true"
        );
        let result = granted(via_proxy, &[]).await;
        let out = text(&result);
        assert!(
            out.contains("internal address") && out.contains("status=403"),
            "{target} through the proxy: {result:?}"
        );
        assert!(
            out.contains("CONNECT tunnel failed, response 403"),
            "{target} tunnelled: {result:?}"
        );
        let (ip, port) = target.rsplit_once(':').expect("host:port");
        let direct = format!(
            "python3 -c \"import socket; socket.create_connection(('{}', {port}), timeout=3); print('connected')\"",
            ip.trim_matches(['[', ']'])
        );
        let result = granted(direct, &[]).await;
        assert!(
            result.is_err() && !text(&result).contains("connected"),
            "{target} directly: {result:?}"
        );
    }
    // A host the policy lists by name is reachable through the proxy, with the tools' usual
    // proxy variables; everything else is then refused.
    let server = hello_server("127.0.0.2:0");
    let fetch = format!(
        "curl -sS --max-time 5 http://{server}/ && echo && \
         python3 -c \"import urllib.request; print(urllib.request.urlopen('http://{server}/', timeout=5).read().decode())\" && \
         curl -sS --max-time 5 -w ' status=%{{http_code}}' http://93.184.216.34/"
    );
    let result = granted(fetch, &["127.0.0.2"]).await;
    let out = text(&result);
    assert_eq!(
        out.matches("hello").count(),
        2,
        "curl and Python reach the listed host: {result:?}"
    );
    assert!(
        out.contains("not among the hosts") && out.contains("status=403"),
        "an unlisted host is refused: {result:?}"
    );
    // The sandbox's own loopback is its own: a server and its client in one command.
    let local = "python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 & \
                 for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:8765/ && break; sleep 0.1; done; \
                 curl -sS -o /dev/null -w 'local=%{http_code}' http://127.0.0.1:8765/";
    let result = granted(local.to_owned(), &[]).await;
    assert!(text(&result).contains("local=200"), "{result:?}");
}

#[tokio::test]
async fn a_fork_bomb_hits_the_process_limit_and_leaves_nothing_behind() {
    let h = harness().await;
    let count = h
        .shell("python3 -c \"import os,time\nn=0\ntry:\n  while n < 1000:\n    if os.fork() == 0:\n      time.sleep(5432); os._exit(0)\n    n += 1\nexcept OSError as e:\n  print('stopped at', n)\"")
        .await;
    let stopped = stopped_at(&count);
    assert!(stopped < 100, "at most the process limit (64): {stopped}");
    let started = Instant::now();
    let bomb = h
        .call(
            "shell",
            json!({"command": ":(){ :|:& };:"}),
            false,
            Duration::from_secs(3),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the bomb is stopped in time: {bomb:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !running("sleep 5432") && !running("time.sleep(5432)"),
        "no forked process survived"
    );
}

#[tokio::test]
async fn memory_and_cpu_hogs_are_stopped() {
    let h = harness().await;
    let hog = h
        .shell("python3 -c \"b = bytearray(2 * 1024**3); print('allocated')\"")
        .await;
    assert!(hog.is_err() && !text(&hog).contains("allocated"), "{hog:?}");
    let started = Instant::now();
    let spin = h
        .call(
            "shell",
            json!({"command": "python3 -c 'while True: pass'"}),
            false,
            Duration::from_secs(30),
        )
        .await;
    assert!(spin.is_err(), "{spin:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the 2 s CPU limit stopped it, not the 30 s timeout"
    );
}

#[tokio::test]
async fn endless_output_is_cut_and_stopped() {
    let h = harness().await;
    let started = Instant::now();
    let yes = h
        .call(
            "shell",
            json!({"command": "yes maestro"}),
            false,
            Duration::from_secs(30),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopped long before the timeout"
    );
    let out = text(&yes);
    assert!(
        out.contains("too much output") && out.contains("[truncated"),
        "{}",
        &out[..200.min(out.len())]
    );
    assert!(
        out.len() < 70 * 1024,
        "what is kept is bounded: {} bytes",
        out.len()
    );
}

#[tokio::test]
async fn a_sleeper_past_its_time_and_an_orphaned_child_are_killed() {
    let h = harness().await;
    let started = Instant::now();
    let sleeper = h
        .call(
            "shell",
            json!({"command": "sleep 1000"}),
            false,
            Duration::from_secs(2),
        )
        .await;
    assert!(text(&sleeper).contains("ran longer than"), "{sleeper:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!running("sleep 1000"), "the sleeper is gone");

    let orphan = h.shell("(sleep 876 &) ; echo parent done").await;
    assert!(text(&orphan).contains("parent done"), "{orphan:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !running("sleep 876"),
        "the child that outlived its parent was killed with the sandbox"
    );
}

#[tokio::test]
async fn the_environment_is_scrubbed() {
    let h = harness().await;
    let env = h.shell("env | cut -d= -f1 | sort").await.expect("env");
    let names: Vec<&str> = env
        .lines()
        .skip_while(|l| !l.starts_with("---"))
        .skip(1)
        .collect();
    let allowed = [
        "HOME",
        "LANG",
        "MAESTRO_OPERATION_ID",
        "PATH",
        "PWD",
        "SHLVL",
        "TMPDIR",
        "_",
    ];
    for name in &names {
        assert!(
            allowed.contains(name),
            "unexpected variable {name} in {names:?}"
        );
    }
    let id = h
        .shell("id -u; echo $MAESTRO_OPERATION_ID")
        .await
        .expect("id");
    assert!(
        id.contains("op-test"),
        "the operation id is passed to the program: {id}"
    );
}

#[tokio::test]
async fn a_fifo_cannot_hang_the_file_tools() {
    let h = harness().await;
    h.shell("mkfifo pipe && echo text > note.txt")
        .await
        .expect("mkfifo");
    let started = Instant::now();
    let read = h.run("read_file", json!({"path": "pipe"})).await;
    assert!(text(&read).contains("not a regular file"), "{read:?}");
    let found = h
        .run("grep", json!({"pattern": "text"}))
        .await
        .expect("grep skips the fifo");
    assert!(found.contains("note.txt"), "{found}");
    let edit = h
        .run("edit_file", json!({"path": "pipe", "old": "a", "new": "b"}))
        .await;
    assert!(edit.is_err(), "{edit:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "nothing blocked"
    );
}

#[tokio::test]
async fn open_files_stop_at_the_limit() {
    let h = harness().await;
    let opened = h
        .shell("python3 -c \"\nfs=[]\ntry:\n  while len(fs) < 1000: fs.append(open('/dev/null'))\nexcept OSError as e: print('stopped at', len(fs), e.errno)\"")
        .await;
    let stopped = stopped_at(&opened);
    assert!(stopped < 64, "at most the open-files limit (64): {stopped}");
    assert!(text(&opened).contains(" 24"), "EMFILE: {opened:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_calls_no_tool_needs_fail_with_eperm() {
    let h = harness().await;
    // Each denied call made directly (no argument checks in the way): EPERM (1) from the
    // filter, whatever the kernel would have said.
    let probe = r#"python3 - <<'PY'
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
numbers = {"x86_64": {"ptrace": 101, "unshare": 272, "bpf": 321, "keyctl": 250, "userfaultfd": 323, "mount": 165},
           "aarch64": {"ptrace": 117, "unshare": 97, "bpf": 280, "keyctl": 219, "userfaultfd": 282, "mount": 40}}
for name, nr in numbers[platform.machine()].items():
    ctypes.set_errno(0)
    result = libc.syscall(nr, 0, 0, 0, 0, 0)
    print(name, result, ctypes.get_errno())
PY
echo allowed: $(echo ok)"#;
    let output = h.shell(probe).await.expect("the probe runs");
    for name in ["ptrace", "unshare", "bpf", "keyctl", "userfaultfd", "mount"] {
        assert!(
            output.contains(&format!("{name} -1 1\n")),
            "{name} is refused with EPERM: {output}"
        );
    }
    assert!(output.contains("allowed: ok"), "the rest works: {output}");
}
