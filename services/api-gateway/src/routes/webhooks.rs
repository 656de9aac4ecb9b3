//! `/api/webhooks`: the caller's webhook subscriptions. Deliveries are signed per Standard
//! Webhooks with the subscription's secret, which is shown only in the creating response.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use chrono::Utc;
use maestro_api::ErrorBody;
use maestro_api::{CreateWebhook, DeliveryPage, Webhook, WebhookDeliveryView, WebhookList};
use maestro_db::webhooks::Subscription;
use maestro_domain::notification::NotificationType;
use maestro_domain::webhook::DeliveryStatus;
use maestro_domain::webhook::WebhookSecret;
use maestro_domain::{DeliveryId, WebhookId};
use maestro_messaging::AfterCommit;
use serde::Deserialize;

use super::{before, page_limit, parse_id, query};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::json::ApiJson;
use crate::state::AppState;
use crate::views;

/// `POST /api/webhooks`
#[utoipa::path(
    post,
    path = "/api/webhooks",
    tag = "webhooks",
    summary = "Subscribe a URL to notifications",
    request_body = CreateWebhook,
    responses(
        (status = 201, body = Webhook),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Caller(owner): Caller,
    ApiJson(body): ApiJson<CreateWebhook>,
) -> Result<(StatusCode, Json<Webhook>), ApiError> {
    crate::validate::http_url(&body.url)?;
    let event_types = match body.event_types {
        None => NotificationType::ALL
            .iter()
            .map(|t| t.as_str().to_owned())
            .collect(),
        Some(types) if types.is_empty() => {
            return Err(ApiError::invalid(
                "invalid_event_types",
                "event_types must not be empty",
            ));
        }
        Some(types) => {
            for t in &types {
                if NotificationType::parse(t).is_none() {
                    let known: Vec<&str> =
                        NotificationType::ALL.iter().map(|t| t.as_str()).collect();
                    let message = format!("unknown event type {t:?}; known: {}", known.join(", "));
                    return Err(ApiError::invalid("invalid_event_types", message));
                }
            }
            let mut types = types;
            types.sort();
            types.dedup();
            types
        }
    };
    let secret = match body.secret.as_deref() {
        None => WebhookSecret::generate(),
        Some(raw) => WebhookSecret::parse(raw)
            .map_err(|e| ApiError::invalid("invalid_secret", e.to_string()))?,
    };
    let sub = Subscription {
        id: WebhookId::new(),
        url: body.url,
        event_types,
        created_at: Utc::now(),
        disabled_at: None,
        disabled_reason: None,
        consecutive_failures: 0,
    };
    let secret = secret.expose();
    maestro_db::webhooks::create(&state.pool, &owner, &sub, &secret).await?;
    tracing::info!(webhook_id = %sub.id, url = %sub.url, "webhook subscription created");
    Ok((StatusCode::CREATED, Json(views::webhook(sub, Some(secret)))))
}

/// `GET /api/webhooks`
#[utoipa::path(
    get,
    path = "/api/webhooks",
    tag = "webhooks",
    summary = "Your webhooks",
    responses(
        (status = 200, body = WebhookList),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(owner): Caller,
) -> Result<Json<WebhookList>, ApiError> {
    let subs = maestro_db::webhooks::list(&state.pool, &owner).await?;
    Ok(Json(WebhookList {
        webhooks: subs.into_iter().map(|s| views::webhook(s, None)).collect(),
    }))
}

/// `DELETE /api/webhooks/{id}`
#[utoipa::path(
    delete,
    path = "/api/webhooks/{id}",
    tag = "webhooks",
    summary = "Remove a webhook",
    params(("id" = String, Path, description = "The webhook id")),
    responses(
        (status = 204, description = "Removed"),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id: WebhookId = parse_id(&id, "webhook")?;
    if maestro_db::webhooks::delete(&state.pool, &owner, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("webhook"))
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

/// `GET /api/webhooks/{id}/deliveries?status=&limit=&before=`: newest first; `failed` ones
/// are the dead letters.
#[utoipa::path(
    get,
    path = "/api/webhooks/{id}/deliveries",
    tag = "webhooks",
    summary = "A webhook's deliveries, newest first",
    params(("id" = String, Path, description = "The webhook id"), DeliveriesQuery),
    responses(
        (status = 200, body = DeliveryPage),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn deliveries(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
    q: Result<Query<DeliveriesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DeliveryPage>, ApiError> {
    let q = query(q)?;
    let id: WebhookId = parse_id(&id, "webhook")?;
    let limit = page_limit(q.limit)?;
    let before = before::<DeliveryId>(q.before.as_deref(), "a delivery id")?;
    let status = q
        .status
        .map(|raw| {
            DeliveryStatus::parse(&raw).ok_or_else(|| {
                ApiError::bad_request("invalid_query", "status is pending, delivered or failed")
            })
        })
        .transpose()?;
    let found = maestro_db::webhooks::deliveries(&state.pool, &owner, id, status, before, limit)
        .await?
        .ok_or(ApiError::NotFound("webhook"))?;
    let next_before = (found.len() as i64 == limit)
        .then(|| found.last().map(|d| d.id))
        .flatten();
    Ok(Json(DeliveryPage {
        deliveries: found.into_iter().map(delivery_view).collect(),
        next_before,
    }))
}

/// `POST /api/webhooks/{id}/deliveries/{delivery_id}/redeliver`: send a delivery again (a
/// failed one, or a delivered one the receiver lost), with a fresh attempt budget.
#[utoipa::path(
    post,
    path = "/api/webhooks/{id}/deliveries/{delivery_id}/redeliver",
    tag = "webhooks",
    summary = "Send a delivery again",
    params(("id" = String, Path, description = "The webhook id"), ("delivery_id" = String, Path, description = "The delivery id")),
    responses(
        (status = 202, description = "Queued again"),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn redeliver(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path((id, delivery_id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let id: WebhookId = parse_id(&id, "webhook")?;
    let delivery_id: DeliveryId = parse_id(&delivery_id, "delivery")?;
    match maestro_db::webhooks::redeliver(&state.pool, &owner, id, delivery_id).await? {
        None => Err(ApiError::NotFound("delivery")),
        Some(false) => Err(ApiError::Conflict {
            code: "delivery_pending",
            message: "the delivery is still being attempted".to_owned(),
        }),
        Some(true) => {
            tracing::info!(webhook_id = %id, %delivery_id, "delivery queued again by hand");
            state.bus.after_commit(AfterCommit::events()).await;
            Ok(StatusCode::ACCEPTED)
        }
    }
}

/// `POST /api/webhooks/{id}/enable`: a disabled subscription receives again (deliveries
/// that failed meanwhile stay failed; redeliver them by hand).
#[utoipa::path(
    post,
    path = "/api/webhooks/{id}/enable",
    tag = "webhooks",
    summary = "Enable a webhook disabled after repeated failures",
    params(("id" = String, Path, description = "The webhook id")),
    responses(
        (status = 204, description = "Enabled"),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn enable(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id: WebhookId = parse_id(&id, "webhook")?;
    if maestro_db::webhooks::enable(&state.pool, &owner, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("webhook"))
    }
}

fn delivery_view(d: maestro_db::webhooks::DeliveryRecord) -> WebhookDeliveryView {
    WebhookDeliveryView {
        id: d.id,
        notification_id: d.notification_id,
        kind: d.kind,
        task_id: d.task_id,
        status: d.status,
        attempts: d.attempts,
        redeliveries: d.redeliveries,
        last_status_code: d.last_status_code,
        last_error: d.last_error,
        created_at: d.created_at,
        updated_at: d.updated_at,
        delivered_at: d.delivered_at,
    }
}
