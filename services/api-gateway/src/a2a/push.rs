//! Push notification configs (`Create|Get|List|DeleteTaskPushNotificationConfig`, and the one a
//! `SendMessage` carries): stored per task in Postgres; the notifier delivers the task's stream
//! events to each (`docs/a2a.md#push-notifications`). Another owner's task is `TaskNotFound`.

use maestro_a2a::types::{
    AuthenticationInfo, ListPushConfigsRequest, ListPushConfigsResponse, PushConfigRequest,
    TaskPushNotificationConfig,
};
use maestro_a2a::{A2aError, ErrorKind};
use maestro_db::a2a::PushConfig;
use maestro_domain::TaskId;

use super::ops::{self, Ctx, from_api};

/// At most this many configs per task.
pub const MAX_CONFIGS: usize = 10;

/// A config as the client sent it, checked, for `task_id` (an empty id is the task's id, as
/// the protocol's reference server does).
pub fn config_of(
    task_id: TaskId,
    config: &TaskPushNotificationConfig,
) -> Result<PushConfig, A2aError> {
    crate::validate::http_url(&config.url).map_err(from_api)?;
    let id = match config.id.as_deref().map(str::trim) {
        None | Some("") => task_id.to_string(),
        Some(id) if id.len() <= 255 && id.chars().all(|c| !c.is_control()) => id.to_owned(),
        Some(_) => {
            return Err(A2aError::invalid_params(
                "a push config id is 1 to 255 printable characters",
            ));
        }
    };
    let bounded = |value: &Option<String>, what: &str| match value.as_deref() {
        Some(v) if v.len() > 4096 || v.chars().any(char::is_control) => Err(
            A2aError::invalid_params(format!("{what} is at most 4096 printable characters")),
        ),
        Some("") | None => Ok(None),
        Some(v) => Ok(Some(v.to_owned())),
    };
    let token = bounded(&config.token, "token")?;
    let (auth_scheme, auth_credentials) = match &config.authentication {
        None => (None, None),
        Some(auth) => {
            let scheme = auth.scheme.trim();
            if scheme.is_empty()
                || !scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-')
            {
                return Err(A2aError::invalid_params(
                    "authentication.scheme is an HTTP auth scheme such as Bearer or Basic",
                ));
            }
            let credentials = bounded(&auth.credentials, "authentication.credentials")?;
            (Some(scheme.to_owned()), credentials)
        }
    };
    Ok(PushConfig {
        task_id,
        id,
        url: config.url.clone(),
        token,
        auth_scheme,
        auth_credentials,
    })
}

/// A stored config as the protocol shows it.
pub fn view(config: PushConfig) -> TaskPushNotificationConfig {
    TaskPushNotificationConfig {
        tenant: None,
        id: Some(config.id),
        task_id: Some(config.task_id.to_string()),
        url: config.url,
        token: config.token,
        authentication: config.auth_scheme.map(|scheme| AuthenticationInfo {
            scheme,
            credentials: config.auth_credentials,
        }),
    }
}

fn db(error: maestro_db::DbError) -> A2aError {
    from_api(error.into())
}

/// Store a config on an owned task (replacing the one of the same id).
pub async fn put(ctx: Ctx<'_>, config: PushConfig) -> Result<PushConfig, A2aError> {
    let pool = &ctx.state.pool;
    let existing = maestro_db::a2a::push_configs(pool, config.task_id, None)
        .await
        .map_err(db)?;
    if existing.len() >= MAX_CONFIGS && !existing.iter().any(|c| c.id == config.id) {
        return Err(A2aError::invalid_params(format!(
            "a task has at most {MAX_CONFIGS} push notification configs"
        )));
    }
    maestro_db::a2a::put_push_config(pool, &config)
        .await
        .map_err(db)?;
    Ok(config)
}

/// `CreateTaskPushNotificationConfig`: `path_task` is the task the HTTP+JSON path names.
pub async fn create(
    ctx: Ctx<'_>,
    request: &TaskPushNotificationConfig,
    path_task: Option<&str>,
) -> Result<TaskPushNotificationConfig, A2aError> {
    let raw = path_task.or(request.task_id.as_deref()).unwrap_or_default();
    if let (Some(path), Some(body)) = (path_task, request.task_id.as_deref())
        && !body.is_empty()
        && body != path
    {
        return Err(A2aError::invalid_params(format!(
            "taskId {body} is not the task of the path ({path})"
        )));
    }
    let task_id = ops::actable(ctx, raw).await?;
    let config = config_of(task_id, request)?;
    Ok(view(put(ctx, config).await?))
}

/// `GetTaskPushNotificationConfig`: a config that does not exist is `TaskNotFound`, as the
/// protocol's reference server answers.
pub async fn get(
    ctx: Ctx<'_>,
    request: &PushConfigRequest,
) -> Result<TaskPushNotificationConfig, A2aError> {
    let task_id = ops::actable(ctx, &request.task_id).await?;
    let found = maestro_db::a2a::push_configs(&ctx.state.pool, task_id, Some(&request.id))
        .await
        .map_err(db)?;
    found.into_iter().next().map(view).ok_or_else(|| {
        A2aError::new(
            ErrorKind::TaskNotFound,
            format!(
                "task {task_id} has no push notification config {}",
                request.id
            ),
        )
    })
}

/// `ListTaskPushNotificationConfigs`: every config of the task (there are at most
/// [`MAX_CONFIGS`], so one page).
pub async fn list(
    ctx: Ctx<'_>,
    request: &ListPushConfigsRequest,
) -> Result<ListPushConfigsResponse, A2aError> {
    let task_id = ops::actable(ctx, &request.task_id).await?;
    let configs = maestro_db::a2a::push_configs(&ctx.state.pool, task_id, None)
        .await
        .map_err(db)?;
    Ok(ListPushConfigsResponse {
        configs: configs.into_iter().map(view).collect(),
        next_page_token: String::new(),
    })
}

/// `DeleteTaskPushNotificationConfig`: deleting a config that is not there changes nothing
/// and is not an error; deliveries not yet made go with it.
pub async fn delete(ctx: Ctx<'_>, request: &PushConfigRequest) -> Result<(), A2aError> {
    let task_id = ops::actable(ctx, &request.task_id).await?;
    maestro_db::a2a::delete_push_config(&ctx.state.pool, task_id, &request.id)
        .await
        .map_err(db)?;
    Ok(())
}
