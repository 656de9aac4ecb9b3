//! Spaces, who is in them, and who may see and act on a task (docs/spaces.md).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::SpaceId;
use crate::policy::ToolPolicy;

/// Who may see a task.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// Its creator only.
    #[default]
    Private,
    /// The members of its space: viewers read, editors and owners act.
    Space,
    /// Any authenticated caller reads; its creator and its space's editors act.
    Public,
}

impl Visibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Private => "private",
            Visibility::Space => "space",
            Visibility::Public => "public",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "private" => Some(Visibility::Private),
            "space" => Some(Visibility::Space),
            "public" => Some(Visibility::Public),
            _ => None,
        }
    }
}

/// What a member of a space may do there.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SpaceRole {
    /// Reads the space's tasks that are not private.
    Viewer,
    /// Also creates tasks there and comments on, decides, cancels and continues them.
    Editor,
    /// Also changes the space: its settings, members, archive.
    Owner,
}

impl SpaceRole {
    pub fn as_str(self) -> &'static str {
        match self {
            SpaceRole::Viewer => "viewer",
            SpaceRole::Editor => "editor",
            SpaceRole::Owner => "owner",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "viewer" => Some(SpaceRole::Viewer),
            "editor" => Some(SpaceRole::Editor),
            "owner" => Some(SpaceRole::Owner),
            _ => None,
        }
    }

    /// Whether this role creates and acts on tasks.
    pub fn acts(self) -> bool {
        self >= SpaceRole::Editor
    }
}

/// What a caller may do with one task: read it, or also act on it (comment, decide, cancel,
/// continue). A caller who may not even read it gets a 404, never a 403.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    Read,
    Act,
}

impl Access {
    /// The access a caller has to a task, from whether they created it, whether it is in a
    /// space, its visibility and their role in that space (if any). In a space, membership
    /// decides for the creator too: someone taken out of the space loses their tasks there,
    /// and a viewer reads even what they created.
    pub fn of(
        creator: bool,
        in_space: bool,
        visibility: Visibility,
        role: Option<SpaceRole>,
    ) -> Option<Access> {
        if !in_space {
            return match (creator, visibility) {
                (true, _) => Some(Access::Act),
                (false, Visibility::Public) => Some(Access::Read),
                (false, _) => None,
            };
        }
        let seen = visibility != Visibility::Private || creator;
        match role {
            Some(role) if seen && role.acts() => Some(Access::Act),
            Some(_) if seen => Some(Access::Read),
            _ if visibility == Visibility::Public => Some(Access::Read),
            _ => None,
        }
    }
}

/// A member of a space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Member {
    pub member: String,
    pub role: SpaceRole,
}

/// A space as it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpaceRecord {
    pub id: SpaceId,
    pub name: String,
    pub description: String,
    pub created_by: String,
    /// The piece its tasks run when they name none.
    pub default_piece: Option<String>,
    /// The model its tasks use when they name none.
    pub default_model: Option<String>,
    /// The worker profile its tasks are dispatched to when they name none (`default`).
    pub profile: Option<String>,
    /// The worker profiles its tasks may name (empty: any).
    pub profiles: Vec<String>,
    /// Its tool policy (`null`: the deployment's `WORKSPACE_POLICY`).
    #[schema(value_type = Option<Object>)]
    pub policy: Option<ToolPolicy>,
    pub members: Vec<Member>,
    /// The caller's role in it.
    pub role: SpaceRole,
    /// Bumped by every change; `If-Match` on an update compares against it.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub archived_at: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_follows_creator_visibility_and_role() {
        use Access::*;
        use Visibility::*;
        // Outside a space: the creator acts; others read a public task.
        for v in [Private, Space, Public] {
            assert_eq!(
                Access::of(true, false, v, None),
                Some(Act),
                "the creator acts on {v:?}"
            );
        }
        assert_eq!(Access::of(false, false, Private, None), None);
        assert_eq!(Access::of(false, false, Public, None), Some(Read));
        // In a space: the role decides, for the creator too.
        assert_eq!(
            Access::of(false, true, Private, Some(SpaceRole::Owner)),
            None
        );
        assert_eq!(Access::of(false, true, Space, None), None);
        assert_eq!(
            Access::of(true, true, Space, None),
            None,
            "taken out of the space"
        );
        assert_eq!(
            Access::of(true, true, Space, Some(SpaceRole::Viewer)),
            Some(Read)
        );
        assert_eq!(
            Access::of(false, true, Space, Some(SpaceRole::Viewer)),
            Some(Read)
        );
        assert_eq!(
            Access::of(false, true, Space, Some(SpaceRole::Editor)),
            Some(Act)
        );
        assert_eq!(
            Access::of(false, true, Space, Some(SpaceRole::Owner)),
            Some(Act)
        );
        assert_eq!(Access::of(false, true, Public, None), Some(Read));
        assert_eq!(
            Access::of(false, true, Public, Some(SpaceRole::Editor)),
            Some(Act)
        );
    }

    #[test]
    fn names_round_trip() {
        for v in [Visibility::Private, Visibility::Space, Visibility::Public] {
            assert_eq!(Visibility::parse(v.as_str()), Some(v));
        }
        for r in [SpaceRole::Viewer, SpaceRole::Editor, SpaceRole::Owner] {
            assert_eq!(SpaceRole::parse(r.as_str()), Some(r));
        }
        assert_eq!(SpaceRole::parse("admin"), None);
    }
}
