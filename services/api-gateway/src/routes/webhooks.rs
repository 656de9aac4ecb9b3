//! `/api/webhooks`: the caller's webhook subscriptions. Deliveries are signed per Standard
//! Webhooks with the subscription's secret, which is shown only in the creating response.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::Utc;
use maestro_api::{CreateWebhook, Webhook, WebhookList};
use maestro_db::webhooks::Subscription;
use maestro_domain::WebhookId;
use maestro_domain::notification::NotificationType;
use maestro_domain::webhook::WebhookSecret;

use super::parse_id;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::json::ApiJson;
use crate::state::AppState;
use crate::views;

/// `POST /api/webhooks`
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
        secret: secret.expose(),
        event_types,
        created_at: Utc::now(),
    };
    maestro_db::webhooks::create(&state.pool, &owner, &sub).await?;
    tracing::info!(webhook_id = %sub.id, url = %sub.url, "webhook subscription created");
    Ok((StatusCode::CREATED, Json(views::webhook(sub, true))))
}

/// `GET /api/webhooks`
pub async fn list(
    State(state): State<AppState>,
    Caller(owner): Caller,
) -> Result<Json<WebhookList>, ApiError> {
    let subs = maestro_db::webhooks::list(&state.pool, &owner).await?;
    Ok(Json(WebhookList {
        webhooks: subs.into_iter().map(|s| views::webhook(s, false)).collect(),
    }))
}

/// `DELETE /api/webhooks/{id}`
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
