//! `/api/local/inbox`: the caller's notifications (list, unread count, read marks, a live
//! stream) and `/api/local/activity`: the caller's task-level events across tasks.
//!
//! The stream hands out items in the inbox's stream order (`maestro_db::inbox`), resuming
//! after `Last-Event-ID`. It reads Postgres when a notification for the caller is published
//! (one gateway-wide subscription to `<prefix>.notify.>` tells the streams whose owner it
//! concerns), a little longer after one (a row becomes readable once older transactions are
//! over), and every few seconds whatever happens.

use maestro_api::ErrorBody;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use maestro_api::{ActivityItem, ActivityPage, InboxItem, InboxPage, MarkAllRead, MarkedRead};
use maestro_db::inbox::{self, Cursor, Filter};
use maestro_domain::{NotificationId, Owner, ScheduleId, TaskId};
use serde::Deserialize;
use tokio::sync::{OnceCell, broadcast, mpsc};

use super::{PageQuery, before, page_limit, parse_id, query};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use crate::stream::SseStream;

/// Items read per query while a stream catches up.
const PAGE: i64 = 200;
/// How often a stream reads Postgres after a wake-up, and for how long.
const SETTLE_POLL: Duration = Duration::from_millis(50);
const SETTLE_FOR: Duration = Duration::from_secs(2);
/// How often a stream reads Postgres with no wake-up (a lost one, another gateway's
/// deployment without NATS access to notifications).
const IDLE_POLL: Duration = Duration::from_secs(5);

/// The owners notifications are published for, as they are published: one subscription per
/// gateway, shared by every inbox stream.
#[derive(Debug, Default)]
pub struct InboxWakes {
    sender: OnceCell<broadcast::Sender<Arc<str>>>,
}

impl InboxWakes {
    async fn subscribe(&self, state: &AppState) -> anyhow::Result<broadcast::Receiver<Arc<str>>> {
        let sender = self
            .sender
            .get_or_try_init(|| async {
                let subject = format!("{}.notify.>", state.bus.subjects.prefix());
                let mut sub = state.bus.nats.subscribe(subject).await?;
                let (sender, _) = broadcast::channel(1024);
                let publish = sender.clone();
                tokio::spawn(async move {
                    while let Some(message) = sub.next().await {
                        if let Some(owner) = owner_of(&message.payload) {
                            let _ = publish.send(owner);
                        }
                    }
                });
                anyhow::Ok(sender)
            })
            .await?;
        Ok(sender.subscribe())
    }
}

fn owner_of(payload: &[u8]) -> Option<Arc<str>> {
    #[derive(Deserialize)]
    struct Data {
        owner: String,
    }
    #[derive(Deserialize)]
    struct Notice {
        data: Data,
    }
    let notice: Notice = serde_json::from_slice(payload).ok()?;
    Some(notice.data.owner.into())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    before: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    schedule_id: Option<String>,
    #[serde(default)]
    unread: Option<bool>,
}

/// `GET /api/local/inbox?limit=&before=&type=&task_id=&schedule_id=&unread=`: newest first.
#[utoipa::path(
    get,
    path = "/api/local/inbox",
    tag = "inbox",
    summary = "Your notifications, newest first",
    params(ListQuery),
    responses(
        (status = 200, body = InboxPage),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(owner): Caller,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<InboxPage>, ApiError> {
    let q = query(q)?;
    let limit = page_limit(q.limit)?;
    let before = before::<NotificationId>(q.before.as_deref(), "a notification id")?;
    if let Some(kind) = &q.kind
        && maestro_domain::notification::NotificationType::parse(kind).is_none()
    {
        let message = format!("type {kind:?} is not a notification type");
        return Err(ApiError::bad_request("invalid_query", message));
    }
    let bad = |what: &str| ApiError::bad_request("invalid_query", format!("{what} is not an id"));
    let filter = Filter {
        kind: q.kind,
        task_id: q
            .task_id
            .map(|raw| raw.parse::<TaskId>().map_err(|_| bad("task_id")))
            .transpose()?,
        schedule_id: q
            .schedule_id
            .map(|raw| raw.parse::<ScheduleId>().map_err(|_| bad("schedule_id")))
            .transpose()?,
        unread: q.unread.unwrap_or(false),
    };
    let items = inbox::list(&state.pool, &owner, &filter, before, limit).await?;
    let unread = inbox::unread(&state.pool, &owner).await?;
    let next_before = (items.len() as i64 == limit)
        .then(|| items.last().map(|i| i.id))
        .flatten();
    Ok(Json(InboxPage {
        items: items.into_iter().map(item_view).collect(),
        unread,
        next_before,
    }))
}

/// `POST /api/local/inbox/{id}/read`
#[utoipa::path(
    post,
    path = "/api/local/inbox/{id}/read",
    tag = "inbox",
    summary = "Mark one notification read",
    params(("id" = String, Path, description = "The notification id")),
    responses(
        (status = 200, body = MarkedRead),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn mark_read(
    State(state): State<AppState>,
    Caller(owner): Caller,
    Path(id): Path<String>,
) -> Result<Json<MarkedRead>, ApiError> {
    let id: NotificationId = parse_id(&id, "notification")?;
    let marked = inbox::mark_read(&state.pool, &owner, id)
        .await?
        .ok_or(ApiError::NotFound("notification"))?;
    let unread = inbox::unread(&state.pool, &owner).await?;
    Ok(Json(MarkedRead {
        marked: u64::from(marked),
        unread,
    }))
}

/// `POST /api/local/inbox/read-all` (body optional: `{"up_to": id}`)
#[utoipa::path(
    post,
    path = "/api/local/inbox/read-all",
    tag = "inbox",
    summary = "Mark every notification (up to one) read",
    request_body = Option<MarkAllRead>,
    responses(
        (status = 200, body = MarkedRead),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn mark_all_read(
    State(state): State<AppState>,
    Caller(owner): Caller,
    body: axum::body::Bytes,
) -> Result<Json<MarkedRead>, ApiError> {
    let up_to = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let parsed: MarkAllRead = serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request("invalid_json", e.to_string()))?;
        parsed.up_to
    };
    let marked = inbox::mark_all_read(&state.pool, &owner, up_to).await?;
    let unread = inbox::unread(&state.pool, &owner).await?;
    Ok(Json(MarkedRead { marked, unread }))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    #[serde(default)]
    after: Option<String>,
}

/// `GET /api/local/inbox/stream`: new items as SSE events `notification` (data: the item as
/// the list shows it, `id:` its `stream_id`). `Last-Event-ID` (or `?after=`) resumes after
/// an item; without one the stream starts now.
#[utoipa::path(
    get,
    path = "/api/local/inbox/stream",
    tag = "inbox",
    summary = "New notifications as they arrive",
    params(StreamQuery, ("Last-Event-ID" = Option<String>, Header, description = "Resume after this item")),
    responses(
        (status = 200, description = "A Server-Sent Events stream; resume with `Last-Event-ID`", content_type = "text/event-stream", body = crate::stream::StreamEvent),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn stream(
    State(state): State<AppState>,
    Caller(owner): Caller,
    headers: HeaderMap,
    q: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<SseStream, ApiError> {
    let q = query(q)?;
    let raw = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(q.after);
    let cursor = match raw.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
        Some(raw) => Cursor::decode(raw).ok_or_else(|| {
            ApiError::bad_request("invalid_cursor", "Last-Event-ID is an inbox stream_id")
        })?,
        None => inbox::present(&state.pool).await?,
    };
    let wakes = state
        .inbox_wakes
        .subscribe(&state)
        .await
        .map_err(|e| ApiError::Unavailable(format!("cannot follow notifications: {e}")))?;
    let (tx, rx) = crate::stream::channel(state.settings.sse_buffer);
    let keepalive = state.settings.sse_keepalive;
    tokio::spawn(pump(state, owner, cursor, wakes, tx));
    Ok(crate::stream::sse(rx, keepalive, "inbox"))
}

/// Send the owner's items after `cursor` to one client until it goes or the gateway stops.
async fn pump(
    state: AppState,
    owner: Owner,
    mut cursor: Cursor,
    mut wakes: broadcast::Receiver<Arc<str>>,
    tx: mpsc::Sender<Box<SseEvent>>,
) {
    let mut settle_until = tokio::time::Instant::now() + SETTLE_FOR;
    loop {
        let items = match inbox::after(&state.pool, &owner, cursor, PAGE).await {
            Ok(items) => items,
            Err(e) => {
                tracing::warn!(error = %e, "inbox stream cannot read; retrying");
                Vec::new()
            }
        };
        let full = items.len() as i64 == PAGE;
        for item in items {
            cursor = item.cursor;
            let data = serde_json::to_string(&item_view(item)).unwrap_or_default();
            let event = SseEvent::default()
                .id(cursor.encode())
                .event("notification")
                .data(data);
            if tx.send(Box::new(event)).await.is_err() {
                return;
            }
        }
        if full {
            continue;
        }
        let now = tokio::time::Instant::now();
        let wait = if now < settle_until {
            SETTLE_POLL
        } else {
            IDLE_POLL
        };
        tokio::select! {
            _ = tx.closed() => return,
            _ = state.shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
            woken = next_wake(&mut wakes, &owner) => {
                if !woken {
                    return;
                }
                settle_until = tokio::time::Instant::now() + SETTLE_FOR;
            }
        }
    }
}

/// Wait for a notification of `owner` (or a lag, which may have hidden one); `false` when
/// the subscription ended.
async fn next_wake(wakes: &mut broadcast::Receiver<Arc<str>>, owner: &Owner) -> bool {
    loop {
        match wakes.recv().await {
            Ok(o) if *o == *owner.as_str() => return true,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return true,
            Err(broadcast::error::RecvError::Closed) => return false,
        }
    }
}

fn item_view(item: inbox::Item) -> InboxItem {
    InboxItem {
        id: item.id,
        kind: item.kind,
        created_at: item.created_at,
        read: item.read_at.is_some(),
        read_at: item.read_at,
        task_id: item.task_id,
        stream_id: item.cursor.encode(),
        notification: item.payload,
    }
}

/// `GET /api/local/activity?limit=&before=`: the caller's task-level events, newest first.
#[utoipa::path(
    get,
    path = "/api/local/activity",
    tag = "inbox",
    summary = "Everything that happened to your tasks, newest first",
    params(super::PageQuery),
    responses(
        (status = 200, body = ActivityPage),
        (status = "4XX", description = "A client error: the code says which", body = ErrorBody),
        (status = "5XX", description = "The server could not do it now (e.g. the database is unavailable); retry", body = ErrorBody)
    )
)]
pub async fn activity(
    State(state): State<AppState>,
    Caller(owner): Caller,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ActivityPage>, ApiError> {
    let q = query(q)?;
    let limit = page_limit(q.limit)?;
    let before = q
        .before
        .as_deref()
        .map(|raw| {
            decode_activity_cursor(raw).ok_or_else(|| {
                ApiError::bad_request("invalid_query", "before is an activity page's next_before")
            })
        })
        .transpose()?;
    let found = inbox::activity(&state.pool, &owner, before, limit).await?;
    let next_before = (found.len() as i64 == limit)
        .then(|| {
            found
                .last()
                .map(|a| format!("{}_{}_{}", a.at.timestamp_micros(), a.task_id, a.seq))
        })
        .flatten();
    Ok(Json(ActivityPage {
        items: found.into_iter().map(activity_view).collect(),
        next_before,
    }))
}

fn decode_activity_cursor(raw: &str) -> Option<(DateTime<Utc>, TaskId, i64)> {
    let mut parts = raw.split('_');
    let at = DateTime::from_timestamp_micros(parts.next()?.parse().ok()?)?;
    let task = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((at, task, seq))
}

fn activity_view(a: inbox::Activity) -> ActivityItem {
    let status = a.payload.get("status").and_then(|s| s.as_str());
    let first = a.job_no == 1 && a.payload.get("attempt").and_then(|n| n.as_i64()) == Some(0);
    let what = match (a.kind.as_str(), status) {
        ("decision", _) => "decided",
        ("job_continued", _) => "continued",
        ("job_state", Some("queued")) if first && a.schedule_id.is_some() => "scheduled_run",
        ("job_state", Some("queued")) if first => "created",
        ("job_state", Some("running")) => "started",
        ("job_state", Some("waiting_human" | "waiting_subtasks")) => "paused",
        ("job_state", Some("retry")) => "retrying",
        ("job_state", Some(other)) => other,
        (other, _) => other,
    };
    ActivityItem {
        at: a.at,
        task_id: a.task_id,
        seq: a.seq,
        what: what.to_owned(),
        job_no: a.job_no,
        instruction: a.instruction.chars().take(200).collect(),
        schedule_id: a.schedule_id,
        detail: a.payload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activity_cursors_round_trip_and_garbage_is_refused() {
        let task = TaskId::new();
        let at = DateTime::from_timestamp_micros(1_764_547_200_123_456).expect("time");
        let raw = format!("{}_{}_{}", at.timestamp_micros(), task, 7);
        assert_eq!(decode_activity_cursor(&raw), Some((at, task, 7)));
        assert_eq!(decode_activity_cursor("1_2"), None);
        assert_eq!(decode_activity_cursor(&format!("{raw}_x")), None);
    }

    #[test]
    fn the_owner_is_read_from_a_published_notification() {
        let payload = br#"{"type":"task.succeeded","data":{"owner":"alice","task_id":"x"}}"#;
        assert_eq!(owner_of(payload).as_deref(), Some("alice"));
        assert_eq!(owner_of(b"not json"), None);
    }
}
