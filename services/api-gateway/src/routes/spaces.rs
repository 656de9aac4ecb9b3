//! `/api/local/spaces`: spaces, their members and settings (docs/spaces.md). Members read a
//! space; only its owners change it. A caller who is not a member gets a 404, as if it did not
//! exist.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use maestro_api::{ErrorBody, Patch, SetMember, Space, SpaceList, SpaceSettings};
use maestro_db::spaces::{self, MemberChange, Settings};
use maestro_domain::policy::ToolPolicy;
use maestro_domain::space::SpaceRecord;
use maestro_domain::{Owner, SpaceId, SpaceRole};

use super::{parse_id, query};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::json::ApiJson;
use crate::state::AppState;
use crate::validate;

const NAME_MAX_CHARS: usize = 200;
const DESCRIPTION_MAX_CHARS: usize = 4000;
const MEMBERS_MAX: usize = 200;

/// `POST /api/local/spaces`: create a space; the caller is its owner.
#[utoipa::path(
    post,
    path = "/api/local/spaces",
    tag = "spaces",
    summary = "Create a space (you are its owner)",
    request_body = SpaceSettings,
    responses(
        (status = 201, body = Space),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Caller(caller): Caller,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SpaceSettings>,
) -> Result<(StatusCode, Json<Space>), ApiError> {
    policy_by_admin(&state, &headers, &body).await?;
    let members = body.members.clone().unwrap_or_default();
    if members.len() > MEMBERS_MAX {
        return Err(ApiError::invalid(
            "invalid_members",
            format!("at most {MEMBERS_MAX} members"),
        ));
    }
    for m in &members {
        member_name(&m.member)?;
    }
    if body.name.is_none() {
        return Err(ApiError::invalid("invalid_name", "a space needs a name"));
    }
    let settings = settings(&state, body, None)?;
    let space = spaces::create(&state.pool, SpaceId::new(), &caller, &settings, &members).await?;
    tracing::info!(space_id = %space.id, "space created");
    Ok((StatusCode::CREATED, Json(Space::new(space))))
}

/// `?archived=` of the listing.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Include archived spaces.
    #[serde(default)]
    pub archived: bool,
}

/// `GET /api/local/spaces`: the spaces the caller is a member of.
#[utoipa::path(
    get,
    path = "/api/local/spaces",
    tag = "spaces",
    summary = "The spaces you are a member of, by name",
    params(ListQuery),
    responses(
        (status = 200, body = SpaceList),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SpaceList>, ApiError> {
    let q = query(q)?;
    let spaces = spaces::list(&state.pool, &caller, q.archived).await?;
    Ok(Json(SpaceList {
        spaces: spaces.into_iter().map(Space::new).collect(),
    }))
}

/// `GET /api/local/spaces/{id}`
#[utoipa::path(
    get,
    path = "/api/local/spaces/{id}",
    tag = "spaces",
    summary = "A space you are a member of",
    params(("id" = String, Path, description = "The space id")),
    responses(
        (status = 200, body = Space),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Result<Json<Space>, ApiError> {
    let space = member_of(&state, &caller, &id).await?;
    Ok(Json(Space::new(space)))
}

/// `PATCH /api/local/spaces/{id}`: change a space's settings (owners only). Absent fields
/// keep their value; `null` clears an optional one. `If-Match: <version>` makes the change
/// only if nobody changed the space since (412 otherwise).
#[utoipa::path(
    patch,
    path = "/api/local/spaces/{id}",
    tag = "spaces",
    summary = "Change a space's settings (owners)",
    params(
        ("id" = String, Path, description = "The space id"),
        ("If-Match" = Option<String>, Header, description = "The version the change is based on")
    ),
    request_body = SpaceSettings,
    responses(
        (status = 200, body = Space),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn update(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SpaceSettings>,
) -> Result<Json<Space>, ApiError> {
    let version = match headers.get(axum::http::header::IF_MATCH) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .map(|v| v.trim().trim_matches('"'))
                .and_then(|v| v.parse::<i64>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request("invalid_if_match", "If-Match is a version number")
                })?,
        ),
    };
    if body.members.is_some() {
        return Err(ApiError::invalid(
            "invalid_members",
            "members change through PUT/DELETE /api/local/spaces/{id}/members/{member}",
        ));
    }
    let space = owned_space(&state, &caller, &id).await?;
    policy_by_admin(&state, &headers, &body).await?;
    let settings = settings(&state, body, Some(&space))?;
    if !spaces::update(&state.pool, space.id, version, &settings).await? {
        return Err(ApiError::PreconditionFailed(format!(
            "the space changed since version {}; read it again",
            version.unwrap_or_default()
        )));
    }
    Ok(Json(Space::new(reread(&state, &caller, space.id).await?)))
}

/// `PUT /api/local/spaces/{id}/members/{member}`: add a member or change their role
/// (owners only). The last owner cannot become less.
#[utoipa::path(
    put,
    path = "/api/local/spaces/{id}/members/{member}",
    tag = "spaces",
    summary = "Add a member or change their role (owners)",
    params(
        ("id" = String, Path, description = "The space id"),
        ("member" = String, Path, description = "The member (an owner name tokens map to)")
    ),
    request_body = SetMember,
    responses(
        (status = 200, body = Space),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn put_member(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path((id, member)): Path<(String, String)>,
    ApiJson(body): ApiJson<SetMember>,
) -> Result<Json<Space>, ApiError> {
    let space = owned_space(&state, &caller, &id).await?;
    member_name(&member)?;
    member_change(spaces::set_member(&state.pool, space.id, &member, body.role).await?)?;
    Ok(Json(Space::new(reread(&state, &caller, space.id).await?)))
}

/// `DELETE /api/local/spaces/{id}/members/{member}`: take a member out (owners; any member
/// may leave). The last owner cannot.
#[utoipa::path(
    delete,
    path = "/api/local/spaces/{id}/members/{member}",
    tag = "spaces",
    summary = "Take a member out of a space (owners, or the member)",
    params(
        ("id" = String, Path, description = "The space id"),
        ("member" = String, Path, description = "The member")
    ),
    responses(
        (status = 204, description = "They are out"),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn delete_member(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path((id, member)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let space = member_of(&state, &caller, &id).await?;
    if space.role != SpaceRole::Owner && member != caller.as_str() {
        return Err(forbidden_change());
    }
    match spaces::remove_member(&state.pool, space.id, &member).await? {
        MemberChange::NoSuchMember => Err(ApiError::NotFound("member")),
        change => member_change(change).map(|()| StatusCode::NO_CONTENT),
    }
}

/// `POST /api/local/spaces/{id}/archive`: the space takes no new task; its tasks stay.
#[utoipa::path(
    post,
    path = "/api/local/spaces/{id}/archive",
    tag = "spaces",
    summary = "Archive a space (owners): no new tasks, the old ones stay",
    params(("id" = String, Path, description = "The space id")),
    responses(
        (status = 200, body = Space),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn archive(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Result<Json<Space>, ApiError> {
    set_archived(state, caller, id, true).await
}

/// `POST /api/local/spaces/{id}/unarchive`
#[utoipa::path(
    post,
    path = "/api/local/spaces/{id}/unarchive",
    tag = "spaces",
    summary = "Bring an archived space back (owners)",
    params(("id" = String, Path, description = "The space id")),
    responses(
        (status = 200, body = Space),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn unarchive(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Result<Json<Space>, ApiError> {
    set_archived(state, caller, id, false).await
}

async fn set_archived(
    state: AppState,
    caller: Owner,
    id: String,
    archived: bool,
) -> Result<Json<Space>, ApiError> {
    let space = owned_space(&state, &caller, &id).await?;
    spaces::set_archived(&state.pool, space.id, archived).await?;
    Ok(Json(Space::new(reread(&state, &caller, space.id).await?)))
}

/// Space `raw` if the caller is a member (404 otherwise).
pub async fn member_of(
    state: &AppState,
    caller: &Owner,
    raw: &str,
) -> Result<SpaceRecord, ApiError> {
    let id: SpaceId = parse_id(raw, "space")?;
    spaces::get(&state.pool, caller, id)
        .await?
        .ok_or(ApiError::NotFound("space"))
}

/// Space `raw` if the caller owns it (404 for non-members, 403 for other members).
async fn owned_space(state: &AppState, caller: &Owner, raw: &str) -> Result<SpaceRecord, ApiError> {
    let space = member_of(state, caller, raw).await?;
    if space.role == SpaceRole::Owner {
        Ok(space)
    } else {
        Err(forbidden_change())
    }
}

async fn reread(state: &AppState, caller: &Owner, id: SpaceId) -> Result<SpaceRecord, ApiError> {
    // The caller may have just left it (or made themselves less): then it is gone for them.
    spaces::get(&state.pool, caller, id)
        .await?
        .ok_or(ApiError::NotFound("space"))
}

/// A space's tool policy is the only source of its jobs' permissions — tools, network and
/// hosts, MCP servers with their commands, paths and credentials — so only an admin sets or
/// clears it; the space's owners change everything else.
async fn policy_by_admin(
    state: &AppState,
    headers: &HeaderMap,
    body: &SpaceSettings,
) -> Result<(), ApiError> {
    if body.policy.is_keep() || crate::auth::identify(state, headers).await?.admin {
        return Ok(());
    }
    Err(ApiError::Forbidden(
        "a space's tool policy grants its jobs' permissions: only an admin sets it".to_owned(),
    ))
}

fn forbidden_change() -> ApiError {
    ApiError::Forbidden("only the space's owners change it".to_owned())
}

fn member_change(change: MemberChange) -> Result<(), ApiError> {
    match change {
        MemberChange::Done => Ok(()),
        MemberChange::NoSuchMember => Err(ApiError::NotFound("member")),
        MemberChange::LastOwner => Err(ApiError::Conflict {
            code: "last_owner",
            message: "a space keeps at least one owner: make someone else owner first".to_owned(),
        }),
    }
}

fn member_name(name: &str) -> Result<(), ApiError> {
    Owner::parse(name)
        .map(|_| ())
        .map_err(|e| ApiError::invalid("invalid_member", e.to_string()))
}

/// The settings after `body` is applied to `before` (a new space: nothing before), validated.
fn settings(
    state: &AppState,
    body: SpaceSettings,
    before: Option<&SpaceRecord>,
) -> Result<Settings, ApiError> {
    let name = body
        .name
        .or_else(|| before.map(|b| b.name.clone()))
        .unwrap_or_default();
    let name = name.trim().to_owned();
    if name.is_empty()
        || name.chars().count() > NAME_MAX_CHARS
        || name.chars().any(char::is_control)
    {
        return Err(ApiError::invalid(
            "invalid_name",
            format!("a space's name is 1 to {NAME_MAX_CHARS} characters, no control characters"),
        ));
    }
    let description = body
        .description
        .or_else(|| before.map(|b| b.description.clone()))
        .unwrap_or_default();
    if description.chars().count() > DESCRIPTION_MAX_CHARS {
        return Err(ApiError::invalid(
            "invalid_description",
            format!("a description is at most {DESCRIPTION_MAX_CHARS} characters"),
        ));
    }
    let default_piece = body
        .default_piece
        .apply(before.and_then(|b| b.default_piece.clone()));
    if let Some(piece) = &default_piece {
        validate::piece(&state.settings, piece, None)?;
    }
    let default_model = body
        .default_model
        .apply(before.and_then(|b| b.default_model.clone()));
    if let Some(model) = &default_model {
        validate::model(&state.settings, model)?;
    }
    let profiles = body
        .profiles
        .or_else(|| before.map(|b| b.profiles.clone()))
        .unwrap_or_default();
    for p in &profiles {
        validate::profile(p)?;
    }
    let profile = body.profile.apply(before.and_then(|b| b.profile.clone()));
    if let Some(p) = &profile {
        validate::profile(p)?;
        if !profiles.is_empty() && !profiles.contains(p) {
            return Err(ApiError::invalid(
                "invalid_profile",
                format!("profile {p:?} is not one of the space's profiles"),
            ));
        }
    }
    let policy = match body.policy {
        Patch::Keep => before
            .and_then(|b| b.policy.as_ref())
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| ApiError::Unexpected(e.into()))?,
        Patch::Clear => None,
        Patch::Set(value) => Some(policy(value)?),
    };
    Ok(Settings {
        name,
        description,
        default_piece,
        default_model,
        profile,
        profiles,
        policy,
    })
}

/// A tool policy as the worker would read it, or a 422 saying what is wrong with it.
fn policy(value: serde_json::Value) -> Result<serde_json::Value, ApiError> {
    let parsed: ToolPolicy = serde_json::from_value(value)
        .map_err(|e| ApiError::invalid("invalid_policy", format!("not a tool policy: {e}")))?;
    if let Some(problem) = parsed.problem() {
        return Err(ApiError::invalid("invalid_policy", problem));
    }
    serde_json::to_value(&parsed).map_err(|e| ApiError::Unexpected(e.into()))
}
