//! `shell`: `sh -c <command>` in the bubblewrap sandbox, in the task's workspace.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::call::{Call, parse};
use crate::sandbox::{Exit, Invocation, Network, Sandbox};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellArgs {
    command: String,
    #[serde(default)]
    timeout_s: Option<u64>,
}

pub async fn run(
    sandbox: &Sandbox,
    call: &Call,
    cancel: &CancellationToken,
) -> Result<String, String> {
    let args: ShellArgs = parse(call.arguments.clone())?;
    if args.command.trim().is_empty() {
        return Err("`command` must not be empty".to_owned());
    }
    let timeout = args
        .timeout_s
        .map(Duration::from_secs)
        .map_or(call.timeout, |t| t.min(call.timeout));
    let argv = vec!["sh".to_owned(), "-c".to_owned(), args.command];
    let invocation = Invocation {
        env: vec![("MAESTRO_OPERATION_ID".to_owned(), call.operation_id.clone())],
        network: Network::granted(call.network, &call.allowed_hosts),
        ..Invocation::new(call.workspace.root(), argv, timeout)
    };
    let output = sandbox
        .run(&invocation, cancel)
        .await
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    let status = match output.exit {
        Exit::Code(code) => format!("exit code: {code}"),
        Exit::TimedOut => format!(
            "stopped: the command ran longer than {} s",
            timeout.as_secs_f32()
        ),
        Exit::RunawayOutput => "stopped: the command produced too much output".to_owned(),
        Exit::Cancelled => "stopped: the job was cancelled".to_owned(),
    };
    let _ = writeln!(text, "{status}");
    if output.memory_exceeded {
        let _ = writeln!(text, "note: the command hit the memory limit");
    }
    for (name, stream) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
        if !stream.is_empty() {
            let _ = write!(text, "--- {name} ---\n{stream}");
            if !stream.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    if output.invalid_utf8 > 0 {
        let _ = writeln!(
            text,
            "[{} byte(s) of the output were not UTF-8 and are shown as U+FFFD]",
            output.invalid_utf8
        );
    }
    if output.dropped > 0 {
        let _ = writeln!(
            text,
            "[truncated: {} more bytes of output were dropped]",
            output.dropped
        );
    }
    match output.exit {
        Exit::Code(0) => Ok(text),
        _ => Err(text),
    }
}
