//! Spaces and their members (docs/spaces.md). Every read is scoped to a member: a caller who
//! is not in a space gets `None`, as if it did not exist.

use chrono::{DateTime, Utc};
use maestro_domain::space::{Member, SpaceRecord};
use maestro_domain::{Owner, SpaceId, SpaceRole};
use sqlx::PgPool;
use uuid::Uuid;

use crate::DbError;

/// What a space's settings are (on create, and in full on update).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub name: String,
    pub description: String,
    pub default_piece: Option<String>,
    pub default_model: Option<String>,
    pub profile: Option<String>,
    pub profiles: Vec<String>,
    pub policy: Option<serde_json::Value>,
}

struct Row {
    id: Uuid,
    name: String,
    description: String,
    created_by: String,
    default_piece: Option<String>,
    default_model: Option<String>,
    profile: Option<String>,
    profiles: Vec<String>,
    policy: Option<serde_json::Value>,
    members: serde_json::Value,
    role: String,
    version: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    archived_at: Option<DateTime<Utc>>,
}

impl TryFrom<Row> for SpaceRecord {
    type Error = DbError;
    fn try_from(r: Row) -> Result<Self, DbError> {
        let policy = r
            .policy
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| DbError::corrupt(format!("space {}: policy: {e}", r.id)))?;
        let members: Vec<Member> = serde_json::from_value(r.members)
            .map_err(|e| DbError::corrupt(format!("space {}: members: {e}", r.id)))?;
        Ok(SpaceRecord {
            id: SpaceId(r.id),
            name: r.name,
            description: r.description,
            created_by: r.created_by,
            default_piece: r.default_piece,
            default_model: r.default_model,
            profile: r.profile,
            profiles: r.profiles,
            policy,
            members,
            role: SpaceRole::parse(&r.role)
                .ok_or_else(|| DbError::corrupt(format!("unknown role {:?}", r.role)))?,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
            archived_at: r.archived_at,
        })
    }
}

/// Create a space with its creator as its owner and `members` besides (a member named twice,
/// or the creator named again, keeps the strongest role).
pub async fn create(
    pool: &PgPool,
    id: SpaceId,
    creator: &Owner,
    settings: &Settings,
    members: &[Member],
) -> Result<SpaceRecord, DbError> {
    let (names, roles): (Vec<&str>, Vec<&str>) = members
        .iter()
        .map(|m| (m.member.as_str(), m.role.as_str()))
        .chain([(creator.as_str(), SpaceRole::Owner.as_str())])
        .unzip();
    sqlx::query!(
        r#"
        WITH space AS (
            INSERT INTO spaces (id, name, description, created_by, default_piece, default_model,
                                profile, profiles, policy)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            RETURNING id
        )
        INSERT INTO space_members (space_id, member, role)
        SELECT DISTINCT ON (m.member) space.id, m.member, m.role
          FROM space, unnest($10::text[], $11::text[]) AS m (member, role)
         ORDER BY m.member, CASE m.role WHEN 'owner' THEN 0 WHEN 'editor' THEN 1 ELSE 2 END
        "#,
        id.0,
        settings.name,
        settings.description,
        creator.as_str(),
        settings.default_piece,
        settings.default_model,
        settings.profile,
        &settings.profiles,
        settings.policy,
        &names as &[&str],
        &roles as &[&str],
    )
    .execute(pool)
    .await?;
    get(pool, creator, id)
        .await?
        .ok_or_else(|| DbError::corrupt(format!("space {id} vanished after it was created")))
}

/// Space `id` as `caller` sees it, if they are a member.
pub async fn get(
    pool: &PgPool,
    caller: &Owner,
    id: SpaceId,
) -> Result<Option<SpaceRecord>, DbError> {
    Ok(query(pool, caller, Some(id), true).await?.pop())
}

/// The spaces `caller` is a member of, by name (archived ones too when `archived`).
pub async fn list(
    pool: &PgPool,
    caller: &Owner,
    archived: bool,
) -> Result<Vec<SpaceRecord>, DbError> {
    query(pool, caller, None, archived).await
}

async fn query(
    pool: &PgPool,
    caller: &Owner,
    id: Option<SpaceId>,
    archived: bool,
) -> Result<Vec<SpaceRecord>, DbError> {
    let rows = sqlx::query_as!(
        Row,
        r#"
        SELECT s.id, s.name, s.description, s.created_by, s.default_piece, s.default_model,
               s.profile, s.profiles, s.policy, me.role, s.version, s.created_at, s.updated_at,
               s.archived_at,
               (SELECT COALESCE(jsonb_agg(jsonb_build_object('member', m.member, 'role', m.role)
                                          ORDER BY m.member), '[]')
                  FROM space_members m WHERE m.space_id = s.id) AS "members!"
          FROM space_members me
          JOIN spaces s ON s.id = me.space_id
         WHERE me.member = $1
           AND ($2::uuid IS NULL OR s.id = $2)
           AND ($3 OR s.archived_at IS NULL)
         ORDER BY s.name, s.id
        "#,
        caller.as_str(),
        id.map(|i| i.0),
        archived,
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(SpaceRecord::try_from).collect()
}

/// Replace space `id`'s settings if its version is still `version` (when given). Returns
/// whether it changed (`false`: the version moved on).
pub async fn update(
    pool: &PgPool,
    id: SpaceId,
    version: Option<i64>,
    settings: &Settings,
) -> Result<bool, DbError> {
    let done = sqlx::query!(
        r#"
        UPDATE spaces
           SET name = $3, description = $4, default_piece = $5, default_model = $6,
               profile = $7, profiles = $8, policy = $9, version = version + 1, updated_at = now()
         WHERE id = $1 AND ($2::bigint IS NULL OR version = $2)
        "#,
        id.0,
        version,
        settings.name,
        settings.description,
        settings.default_piece,
        settings.default_model,
        settings.profile,
        &settings.profiles,
        settings.policy,
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// What became of a change to a space's members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberChange {
    Done,
    /// It would leave the space without an owner.
    LastOwner,
    /// No such member (on removal).
    NoSuchMember,
}

/// Give `member` `role` in space `id` (adding them if they are not in it), unless that takes
/// the last owner away.
pub async fn set_member(
    pool: &PgPool,
    id: SpaceId,
    member: &str,
    role: SpaceRole,
) -> Result<MemberChange, DbError> {
    let row = sqlx::query_scalar!(
        r#"
        WITH owners AS (
            SELECT member FROM space_members WHERE space_id = $1 AND role = 'owner' FOR UPDATE
        ), allowed AS (
            SELECT $3 = 'owner' OR NOT EXISTS (SELECT 1 FROM owners WHERE member = $2)
                   OR (SELECT count(*) FROM owners) > 1 AS ok
        ), upsert AS (
            INSERT INTO space_members (space_id, member, role)
            SELECT $1, $2, $3 FROM allowed WHERE ok
            ON CONFLICT (space_id, member) DO UPDATE SET role = EXCLUDED.role
            RETURNING 1
        ), bump AS (
            UPDATE spaces SET version = version + 1, updated_at = now()
             WHERE id = $1 AND EXISTS (SELECT 1 FROM upsert)
        ), paused AS (
            -- A viewer adds no tasks: nor do their schedules.
            UPDATE schedules SET paused = true, next_fire_at = NULL, updated_at = now()
             WHERE space_id = $1 AND owner = $2 AND $3 = 'viewer' AND NOT paused
               AND EXISTS (SELECT 1 FROM upsert)
        )
        SELECT ok AS "ok!" FROM allowed
        "#,
        id.0,
        member,
        role.as_str(),
    )
    .fetch_one(pool)
    .await?;
    Ok(if row {
        MemberChange::Done
    } else {
        MemberChange::LastOwner
    })
}

/// Take `member` out of space `id`, unless they are its last owner.
pub async fn remove_member(
    pool: &PgPool,
    id: SpaceId,
    member: &str,
) -> Result<MemberChange, DbError> {
    let row = sqlx::query!(
        r#"
        WITH owners AS (
            SELECT member FROM space_members WHERE space_id = $1 AND role = 'owner' FOR UPDATE
        ), target AS (
            SELECT role FROM space_members WHERE space_id = $1 AND member = $2
        ), removed AS (
            DELETE FROM space_members
             WHERE space_id = $1 AND member = $2
               AND ((SELECT role FROM target) <> 'owner' OR (SELECT count(*) FROM owners) > 1)
            RETURNING 1
        ), bump AS (
            UPDATE spaces SET version = version + 1, updated_at = now()
             WHERE id = $1 AND EXISTS (SELECT 1 FROM removed)
        ), paused AS (
            UPDATE schedules SET paused = true, next_fire_at = NULL, updated_at = now()
             WHERE space_id = $1 AND owner = $2 AND NOT paused
               AND EXISTS (SELECT 1 FROM removed)
        )
        SELECT EXISTS (SELECT 1 FROM target) AS "found!", EXISTS (SELECT 1 FROM removed) AS "removed!"
        "#,
        id.0,
        member,
    )
    .fetch_one(pool)
    .await?;
    Ok(match (row.found, row.removed) {
        (false, _) => MemberChange::NoSuchMember,
        (true, true) => MemberChange::Done,
        (true, false) => MemberChange::LastOwner,
    })
}

/// Archive space `id` (it keeps its tasks and takes no new one; its schedules are paused),
/// or bring it back (its schedules stay paused until their owners resume them).
pub async fn set_archived(pool: &PgPool, id: SpaceId, archived: bool) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        WITH space AS (
            UPDATE spaces
               SET archived_at = CASE WHEN $2 THEN COALESCE(archived_at, now()) END,
                   version = version + 1, updated_at = now()
             WHERE id = $1
        )
        UPDATE schedules SET paused = true, next_fire_at = NULL, updated_at = now()
         WHERE space_id = $1 AND $2 AND NOT paused
        "#,
        id.0,
        archived,
    )
    .execute(pool)
    .await?;
    Ok(())
}
