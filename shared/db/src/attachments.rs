//! Files attached to tasks: stored with the task, placed into its workspace by the worker
//! before the first job's first LLM call, and served back to whoever may read the task.

use maestro_domain::TaskId;
use maestro_domain::task::Attachment;
use sqlx::PgPool;

use crate::DbError;

/// An attachment to store with a new task.
#[derive(Debug, Clone)]
pub struct NewAttachment {
    pub name: String,
    pub content_type: String,
    pub sha256: String,
    pub data: Vec<u8>,
}

/// The attachments of task `task_id` not yet in its workspace, with their bytes.
pub async fn unplaced(pool: &PgPool, task_id: TaskId) -> Result<Vec<(String, Vec<u8>)>, DbError> {
    let rows = sqlx::query!(
        "SELECT name, data FROM task_attachments WHERE task_id = $1 AND placed_at IS NULL ORDER BY name",
        task_id.0
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.name, r.data)).collect())
}

/// Attachment `name` of task `task_id` is in its workspace.
pub async fn placed(pool: &PgPool, task_id: TaskId, name: &str) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE task_attachments SET placed_at = now() WHERE task_id = $1 AND name = $2",
        task_id.0,
        name
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Attachment `name` of task `task_id`: what it is, and its bytes.
pub async fn get(
    pool: &PgPool,
    task_id: TaskId,
    name: &str,
) -> Result<Option<(Attachment, Vec<u8>)>, DbError> {
    let row = sqlx::query!(
        r#"SELECT name, content_type, size, sha256, data FROM task_attachments
            WHERE task_id = $1 AND name = $2"#,
        task_id.0,
        name
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| {
        (
            Attachment {
                name: r.name,
                content_type: r.content_type,
                size: r.size,
                sha256: r.sha256,
            },
            r.data,
        )
    }))
}
