//! Spaces, their members, and API tokens.

use chrono::{DateTime, Utc};
use maestro_domain::space::{Member, SpaceRecord};
use maestro_domain::{SpaceId, SpaceRole, TokenId};
use serde::{Deserialize, Serialize};

/// The body of `POST /api/local/spaces`, and of `PATCH /api/local/spaces/{id}` (where every
/// field is optional and an absent one keeps its value; `null` clears an optional one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpaceSettings {
    /// 1 to 200 characters (required on create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The piece its tasks run when they name none.
    #[serde(default, skip_serializing_if = "Patch::is_keep")]
    #[schema(value_type = Option<String>)]
    pub default_piece: Patch<String>,
    /// The model its tasks use when they name none.
    #[serde(default, skip_serializing_if = "Patch::is_keep")]
    #[schema(value_type = Option<String>)]
    pub default_model: Patch<String>,
    /// The worker profile its tasks are dispatched to when they name none.
    #[serde(default, skip_serializing_if = "Patch::is_keep")]
    #[schema(value_type = Option<String>)]
    pub profile: Patch<String>,
    /// The worker profiles its tasks may name (empty: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiles: Option<Vec<String>>,
    /// Its tool policy, in WORKSPACE_POLICY's language (`null`: the deployment's).
    #[serde(default, skip_serializing_if = "Patch::is_keep")]
    #[schema(value_type = Option<Object>)]
    pub policy: Patch<serde_json::Value>,
    /// Members besides the creator (who is its owner); on create only (then use
    /// `PUT …/members/{member}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<Member>>,
}

/// A field of an update: absent (keep it), `null` (clear it) or a value.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Patch<T> {
    #[default]
    Keep,
    Clear,
    Set(T),
}

impl<T> Patch<T> {
    pub fn is_keep(&self) -> bool {
        matches!(self, Patch::Keep)
    }

    /// The value after the update, from the value before.
    pub fn apply(self, before: Option<T>) -> Option<T> {
        match self {
            Patch::Keep => before,
            Patch::Clear => None,
            Patch::Set(value) => Some(value),
        }
    }
}

impl<T: Serialize> Serialize for Patch<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Patch::Keep | Patch::Clear => s.serialize_none(),
            Patch::Set(value) => value.serialize(s),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Patch<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Present: `null` or a value (absent fields never get here: `#[serde(default)]`).
        Ok(match Option::<T>::deserialize(d)? {
            None => Patch::Clear,
            Some(value) => Patch::Set(value),
        })
    }
}

/// A space, with links to its tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Space {
    #[serde(flatten)]
    pub space: SpaceRecord,
    /// Its tasks: `/api/local/tasks?space={id}`.
    pub tasks: String,
}

impl Space {
    pub fn new(space: SpaceRecord) -> Self {
        let tasks = format!("/api/local/tasks?space={}", space.id);
        Self { space, tasks }
    }

    pub fn id(&self) -> SpaceId {
        self.space.id
    }
}

/// `GET /api/local/spaces`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpaceList {
    pub spaces: Vec<Space>,
}

/// The body of `PUT /api/local/spaces/{id}/members/{member}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetMember {
    pub role: SpaceRole,
}

/// The body of `POST /api/local/admin/tokens`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// Whom the token stands for.
    pub owner: String,
    /// What it is for (shown in listings), 1 to 200 characters.
    pub name: String,
    /// Whether it may manage tokens.
    #[serde(default)]
    pub admin: bool,
    /// When it stops working (never when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

/// An API token as listed: everything but the token, which is shown once, when created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenInfo {
    pub id: TokenId,
    pub owner: String,
    pub name: String,
    pub admin: bool,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// Only in the response that created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// `GET /api/local/admin/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
}

/// `GET /api/local/spaces/{id}/files`: the files of the space's `main`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpaceFiles {
    pub files: Vec<maestro_domain::tools::SpaceFile>,
}

/// `GET /api/local/spaces/{id}/commits`: `main`'s commits, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpaceCommits {
    pub commits: Vec<maestro_domain::tools::SpaceCommit>,
}

/// `GET /api/local/me`: who the request's token stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Me {
    /// The owner the token stands for: tasks, webhooks, schedules and the inbox are theirs.
    pub owner: String,
    /// Whether the token may manage API tokens (`/api/local/admin/tokens`).
    pub admin: bool,
}
