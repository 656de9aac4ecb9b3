//! Files attached to a new task: `POST /api/local/tasks` as `multipart/form-data`, a `task`
//! part (the JSON body) and `file` parts. Each file is checked here — its name sanitized to a
//! plain file name, its content type one of a known set (text must be UTF-8), its size within
//! `MAX_ATTACHMENT_BYTES`, at most `MAX_ATTACHMENTS` of them, no name twice — and stored with
//! the task; the worker places them in the workspace (`attachments/<name>`) before the first
//! job's first LLM call. The whole body stays within `MAX_BODY_BYTES`.

use axum::extract::{FromRequest, Multipart, Request};
use axum::http::header;
use maestro_api::CreateTask;
use maestro_db::attachments::NewAttachment;
use sha2::{Digest as _, Sha256};

use crate::error::ApiError;
use crate::json::{ApiJson, refuse_non_object, refuse_nul};
use crate::state::AppState;

/// Room a placement request needs in a NATS message besides the file's base64.
const HEADROOM: usize = 8192;

/// A new task's body: JSON, or multipart with files.
#[derive(Debug)]
pub struct CreateBody {
    pub task: CreateTask,
    pub attachments: Vec<NewAttachment>,
}

impl FromRequest<AppState> for CreateBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let multipart = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("multipart/form-data")
            });
        if !multipart {
            let ApiJson(task) = ApiJson::<CreateTask>::from_request(req, state).await?;
            return Ok(Self {
                task,
                attachments: Vec::new(),
            });
        }
        let mut form = Multipart::from_request(req, state)
            .await
            .map_err(|e| ApiError::bad_request("invalid_multipart", e.body_text()))?;
        let most_bytes = max_bytes(state);
        let mut task = None;
        let mut attachments: Vec<NewAttachment> = Vec::new();
        while let Some(mut field) = form.next_field().await.map_err(multipart_error)? {
            match field.name() {
                Some("task") => {
                    let bytes = field.bytes().await.map_err(multipart_error)?;
                    refuse_nul(&bytes)?;
                    refuse_non_object(&bytes)?;
                    let axum::Json(parsed) = axum::Json::<CreateTask>::from_bytes(&bytes)?;
                    task = Some(parsed);
                }
                Some("file") => {
                    if attachments.len() == state.settings.max_attachments {
                        return Err(ApiError::invalid(
                            "too_many_attachments",
                            format!("at most {} files", state.settings.max_attachments),
                        ));
                    }
                    let name = file_name(field.file_name().unwrap_or_default())?;
                    if attachments.iter().any(|a| a.name == name) {
                        return Err(ApiError::invalid(
                            "duplicate_attachment",
                            format!("two files are named {name:?}"),
                        ));
                    }
                    let content_type = content_type(field.content_type())?;
                    let mut data = Vec::new();
                    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                        if data.len() + chunk.len() > most_bytes {
                            return Err(ApiError::invalid(
                                "attachment_too_large",
                                format!("{name} is larger than {most_bytes} bytes"),
                            ));
                        }
                        data.extend_from_slice(&chunk);
                    }
                    if content_type.starts_with("text/") && std::str::from_utf8(&data).is_err() {
                        return Err(ApiError::invalid(
                            "attachment_not_text",
                            format!("{name} says it is {content_type} but is not UTF-8 text"),
                        ));
                    }
                    let sha256 = hex(&Sha256::digest(&data));
                    attachments.push(NewAttachment {
                        name,
                        content_type,
                        sha256,
                        data,
                    });
                }
                other => {
                    return Err(ApiError::invalid(
                        "invalid_multipart",
                        format!(
                            "unknown part {:?}: send a `task` part (the JSON body) and `file` parts",
                            other.unwrap_or_default()
                        ),
                    ));
                }
            }
        }
        let task = task.ok_or_else(|| {
            ApiError::invalid(
                "invalid_multipart",
                "a `task` part (the JSON body) is needed",
            )
        })?;
        Ok(Self { task, attachments })
    }
}

/// The largest file: `MAX_ATTACHMENT_BYTES`, and what fits one NATS message as base64.
fn max_bytes(state: &AppState) -> usize {
    let payload = state.bus.nats.server_info().max_payload;
    let fits = payload.saturating_sub(HEADROOM) / 4 * 3;
    state.settings.max_attachment_bytes.min(fits)
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::TooLarge(0)
    } else {
        ApiError::bad_request("invalid_multipart", e.body_text())
    }
}

/// A plain file name from what the client sent: its last path component, letters, digits,
/// `.`, `-`, `_` and spaces (anything else becomes `_`), not hidden, 1 to 128 bytes.
pub fn file_name(raw: &str) -> Result<String, ApiError> {
    let base = raw.rsplit(['/', '\\']).next().unwrap_or_default();
    let cleaned: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._- ".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let cleaned = cleaned.trim().trim_start_matches('.').trim().to_owned();
    if cleaned.is_empty() || cleaned.len() > 128 {
        return Err(ApiError::invalid(
            "invalid_attachment_name",
            "each file part needs a file name (1 to 128 characters once sanitized)",
        ));
    }
    Ok(cleaned)
}

/// The types a file may have: text, common images, documents and archives (none given:
/// `application/octet-stream`).
fn content_type(given: Option<&str>) -> Result<String, ApiError> {
    let essence = given
        .unwrap_or("application/octet-stream")
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    const APPLICATION: [&str; 10] = [
        "application/json",
        "application/pdf",
        "application/zip",
        "application/gzip",
        "application/x-tar",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/octet-stream",
    ];
    const IMAGE: [&str; 5] = [
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/svg+xml",
    ];
    let text = essence.strip_prefix("text/").is_some_and(|sub| {
        !sub.is_empty()
            && sub
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-+.".contains(c))
    });
    if text || APPLICATION.contains(&essence.as_str()) || IMAGE.contains(&essence.as_str()) {
        Ok(essence)
    } else {
        Err(ApiError::UnsupportedMediaType(format!(
            "files of type {essence:?} are not accepted: text/*, {}, {}",
            IMAGE.join(", "),
            APPLICATION.join(", ")
        )))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized_to_plain_file_names() {
        assert_eq!(file_name("notes.md").expect("ok"), "notes.md");
        assert_eq!(file_name("../../etc/passwd").expect("ok"), "passwd");
        assert_eq!(
            file_name("C:\\Users\\me\\report (1).pdf").expect("ok"),
            "report _1_.pdf"
        );
        assert_eq!(file_name(".bashrc").expect("ok"), "bashrc");
        assert_eq!(
            file_name("ümlaut;rm -rf.txt").expect("ok"),
            "_mlaut_rm -rf.txt"
        );
        assert!(file_name("").is_err());
        assert!(file_name("dir/").is_err());
        assert!(file_name("...").is_err());
        assert!(file_name(&"a".repeat(200)).is_err());
    }

    #[test]
    fn content_types_come_from_a_known_set() {
        assert_eq!(content_type(None).expect("ok"), "application/octet-stream");
        assert_eq!(
            content_type(Some("Text/Markdown; charset=utf-8")).expect("ok"),
            "text/markdown"
        );
        assert_eq!(content_type(Some("image/png")).expect("ok"), "image/png");
        assert!(content_type(Some("application/x-msdownload")).is_err());
        assert!(content_type(Some("video/mp4")).is_err());
        assert!(content_type(Some("text/")).is_err());
    }
}
