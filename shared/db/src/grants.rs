//! Tools a person approved for the rest of a task (an approval with scope `task`), beyond the
//! workspace policy. A claim reads them with the job.

use maestro_domain::{Owner, TaskId};
use sqlx::PgConnection;

use crate::DbError;

/// Grant `tool` for the rest of the task (in the caller's transaction).
pub async fn add(
    conn: &mut PgConnection,
    task_id: TaskId,
    tool: &str,
    by: &Owner,
) -> Result<(), DbError> {
    sqlx::query!(
        r#"
        INSERT INTO task_grants (task_id, tool, granted_by) VALUES ($1, $2, $3)
        ON CONFLICT (task_id, tool) DO NOTHING
        "#,
        task_id.0,
        tool,
        by.as_str()
    )
    .execute(conn)
    .await?;
    Ok(())
}
