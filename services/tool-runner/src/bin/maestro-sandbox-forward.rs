//! `maestro-sandbox-forward LISTEN SOCKET -- PROGRAM [ARGS…]`: the first process of a sandbox
//! granted network. It listens on `LISTEN` (the sandbox's own loopback), starts the program,
//! carries every connection made to `LISTEN` over the Unix socket `SOCKET` to the
//! tool-runner's egress proxy, and exits with the program's status. The program has no other
//! way out: its network namespace has nothing but loopback. See `sandbox/egress.rs`.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(listen), Some(socket), Some("--")) =
        (args.first(), args.get(1), args.get(2).map(String::as_str))
    else {
        eprintln!("usage: maestro-sandbox-forward LISTEN SOCKET -- PROGRAM [ARGS...]");
        return ExitCode::from(2);
    };
    let Some(program) = args.get(3) else {
        eprintln!("maestro-sandbox-forward: no program to run");
        return ExitCode::from(2);
    };
    // Bound before the program starts, so its first connection finds the proxy.
    let listener = match TcpListener::bind(listen) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("maestro-sandbox-forward: cannot listen on {listen}: {e}");
            return ExitCode::from(125);
        }
    };
    let socket = PathBuf::from(socket);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let socket = socket.clone();
            std::thread::spawn(move || forward(stream, &socket));
        }
    });
    match Command::new(program).args(&args[4..]).status() {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            let code = status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
            ExitCode::from(u8::try_from(code).unwrap_or(255))
        }
        Err(e) => {
            eprintln!("maestro-sandbox-forward: cannot run {program}: {e}");
            ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            })
        }
    }
}

/// Carry one connection both ways until either side is done.
fn forward(client: TcpStream, socket: &std::path::Path) {
    let Ok(proxy) = UnixStream::connect(socket) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(client_in), Ok(proxy_in)) = (client.try_clone(), proxy.try_clone()) else {
        return;
    };
    let upstream = std::thread::spawn(move || {
        copy(client_in, &proxy_in);
        let _ = proxy_in.shutdown(Shutdown::Write);
    });
    copy(proxy, &client);
    let _ = client.shutdown(Shutdown::Write);
    let _ = upstream.join();
}

fn copy(mut from: impl Read, mut to: impl Write) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    return;
                }
            }
        }
    }
}
