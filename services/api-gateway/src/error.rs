//! API errors: one JSON shape, `{"error": {"code": "...", "message": "..."}}`, for every
//! failure. Client errors log at warn, server errors at error, and a server error's body
//! never carries internals.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maestro_api::ErrorBody;
use maestro_domain::action::Refusal;
use maestro_domain::{ActionStatus, JobStatus, WaitReason};

/// Everything a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("{0}")]
    Invalid(String, &'static str),
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// The caller may see it but not do this (a space viewer acting on a task, an editor
    /// changing the space).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// `If-Match` named a version that is no longer current.
    #[error("{0}")]
    PreconditionFailed(String),
    #[error("request body is larger than {0} bytes")]
    TooLarge(usize),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("a dependency is unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl ApiError {
    /// A 422 for input that parsed but is not acceptable.
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::Invalid(message.into(), code)
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code,
            message: message.into(),
        }
    }

    /// The machine-readable code of the refusal (`not_found`, `decision_pending`, ...).
    pub fn code(&self) -> &'static str {
        self.status_and_code().1
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::Invalid(_, code) => (StatusCode::UNPROCESSABLE_ENTITY, code),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::PreconditionFailed(_) => {
                (StatusCode::PRECONDITION_FAILED, "version_mismatch")
            }
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::UnsupportedMediaType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Unexpected(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<maestro_db::DbError> for ApiError {
    fn from(e: maestro_db::DbError) -> Self {
        match e {
            maestro_db::DbError::Unavailable(_) => ApiError::Unavailable("the database".to_owned()),
            // Validation let through a value the database cannot hold: the request's fault,
            // said plainly (and logged, in case it is ours).
            maestro_db::DbError::Rejected(e) => {
                tracing::warn!(error = %e, "the database refused a value of a request");
                ApiError::invalid(
                    "invalid_data",
                    "the request holds a value that cannot be stored",
                )
            }
            other => ApiError::Unexpected(other.into()),
        }
    }
}

impl ApiError {
    fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::Conflict {
            code,
            message: message.into(),
        }
    }

    /// A comment while the job waits for a decision of kind `waiting` (SPEC §3.2).
    pub fn decide_first(waiting: Option<WaitReason>) -> Self {
        let message = match waiting {
            Some(WaitReason::ToolRequest) => {
                "the job waits for a decision on a tool request; decide it first \
                 (POST .../tool-requests/{rid}/decide)"
                    .to_owned()
            }
            Some(WaitReason::PackageRequest) => {
                "the job waits for a decision on a package request; decide it first \
                 (POST .../package-requests/{rid}/decide)"
                    .to_owned()
            }
            Some(WaitReason::McpAuthRequired) => {
                "the job waits for an MCP server token; supply it first \
                 (PUT /api/local/mcp-servers/{server}/token)"
                    .to_owned()
            }
            Some(WaitReason::SideEffectUnknown) => {
                "the job waits for a person to say whether a call took effect; decide it \
                 first (POST .../required-actions/{rid}/decide)"
                    .to_owned()
            }
            other => format!(
                "the job waits for a person ({}); resolve that first",
                other.map(WaitReason::as_str).unwrap_or_default()
            ),
        };
        ApiError::conflict("decision_pending", message)
    }

    /// The item was decided before (the first decision wins).
    pub fn already_decided(status: ActionStatus) -> Self {
        ApiError::conflict(
            "already_decided",
            format!("the item was decided already ({status})"),
        )
    }

    /// The job no longer waits for the item.
    pub fn not_waiting(status: JobStatus) -> Self {
        ApiError::conflict(
            "not_waiting",
            format!("the job no longer waits for this item (it is {status})"),
        )
    }

    /// A Continue while the task's latest job is not over (SPEC §3.3): it is commented on,
    /// answered or decided instead.
    pub fn not_over(status: JobStatus, waiting: Option<WaitReason>) -> Self {
        let what = match waiting {
            Some(reason) => format!("{status} ({reason})"),
            None => status.to_string(),
        };
        let instead = match (status, waiting) {
            (JobStatus::WaitingHuman, Some(WaitReason::Ask)) => {
                "answer its question with a comment instead"
            }
            (JobStatus::WaitingHuman, _) => "decide what it waits for instead",
            _ => "comment on the task instead (the comment reaches the job)",
        };
        ApiError::conflict(
            "job_not_over",
            format!("the task's latest job is {what}; only a finished task continues: {instead}"),
        )
    }

    /// The call's arguments are not the ones the reviewer saw.
    pub fn arguments_changed() -> Self {
        ApiError::conflict(
            "arguments_changed",
            "the call's arguments are not the ones you reviewed; reload the request",
        )
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Invalid(message) => ApiError::invalid("invalid_decision", message),
            Refusal::Elsewhere(WaitReason::Ask) => ApiError::conflict(
                "answer_with_a_comment",
                "answer the question with POST /api/local/tasks/{id}/comments",
            ),
            Refusal::Elsewhere(WaitReason::McpAuthRequired) => ApiError::conflict(
                "supply_the_token",
                "supply the token with PUT /api/local/mcp-servers/{server}/token",
            ),
            Refusal::Elsewhere(WaitReason::Subtask) => ApiError::conflict(
                "decided_by_the_subtask",
                "a subtask item is resolved when its subtask is over; to end it now, cancel \
                 the subtask (POST /api/local/tasks/{subtask_id}/cancel)",
            ),
            Refusal::Elsewhere(_) | Refusal::Undecidable(_) => {
                ApiError::NotFound("required action")
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::JsonDataError(e) => ApiError::invalid("invalid_request", e.body_text()),
            JsonRejection::JsonSyntaxError(e) => {
                ApiError::bad_request("invalid_json", e.body_text())
            }
            JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType(
                "send the body as JSON with Content-Type: application/json".to_owned(),
            ),
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge(0),
            other => ApiError::bad_request("invalid_body", other.body_text()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = match &self {
            ApiError::Unexpected(e) => {
                tracing::error!(error = format!("{e:#}"), "request failed");
                "internal error; it was logged, and retrying may help".to_owned()
            }
            ApiError::TooLarge(0) => "request body is too large".to_owned(),
            other => {
                if status.is_server_error() {
                    tracing::error!(error = %other, "request failed");
                } else {
                    tracing::warn!(code, error = %other, "request refused");
                }
                other.to_string()
            }
        };
        (status, Json(ErrorBody::new(code, message))).into_response()
    }
}
