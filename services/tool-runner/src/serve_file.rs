//! `<prefix>.tools.files.read`: one file of a task's workspace, for the gateway to serve to
//! the task's owner (the files a job wrote, as A2A file artifacts). The path resolves inside
//! the workspace or is refused, and the read runs on a thread Landlock confines to the
//! workspace, as the file tools do. The reply is the bytes, or a refusal header and reason.

use async_nats::HeaderMap;
use bytes::Bytes;
use maestro_domain::tools::{FILE_ERROR_HEADER, FileError, FileReadRequest};

use crate::sandbox::{self, Sandbox};
use crate::tools::files::read_regular;
use crate::workspace::Workspaces;

/// The reply to a read: the file's bytes, or why not.
pub type Read = Result<Bytes, (FileError, String)>;

/// Read the file a request names.
pub async fn read(workspaces: &Workspaces, sandbox: &Sandbox, payload: &[u8]) -> Read {
    let request: FileReadRequest = serde_json::from_slice(payload)
        .map_err(|e| (FileError::Refused, format!("malformed request: {e}")))?;
    if let Some(reason) = &sandbox.files_unavailable {
        let reason = format!("the sandbox is unavailable on this host: {reason}");
        return Err((FileError::Unavailable, reason));
    }
    if !workspaces.exists(request.workspace_id) {
        return Err((FileError::NotFound, "the task has no workspace".to_owned()));
    }
    let workspace = workspaces.open(request.workspace_id, None).map_err(|e| {
        (
            FileError::Unavailable,
            format!("cannot open the workspace: {e}"),
        )
    })?;
    let root = workspace.root().to_path_buf();
    let work = sandbox::confined(&root, move || {
        let path = workspace
            .resolve(&request.path)
            .map_err(|e| (FileError::Refused, e.to_string()))?;
        let cap = usize::try_from(request.max_bytes).unwrap_or(usize::MAX);
        match read_regular(&path, cap) {
            Ok((_, total)) if total > request.max_bytes => Err((
                FileError::TooLarge,
                format!(
                    "{} has {total} bytes; at most {cap} are served",
                    request.path
                ),
            )),
            Ok((bytes, _)) => Ok(Bytes::from(bytes)),
            Err(e) => Err((FileError::NotFound, format!("{}: {e}", request.path))),
        }
    });
    work.await
        .map_err(|e| (FileError::Unavailable, e.to_string()))?
}

/// The reply message's headers and body.
pub fn reply(read: Read) -> (HeaderMap, Bytes) {
    let mut headers = HeaderMap::new();
    match read {
        Ok(bytes) => (headers, bytes),
        Err((error, reason)) => {
            headers.insert(FILE_ERROR_HEADER, error.as_str());
            (headers, Bytes::from(reason))
        }
    }
}
