//! What the worker's unit tests share.

use maestro_db::claims::Claimed;
use maestro_domain::{JobId, TaskId};

/// A first claim of job `job_no` of a task working in another task's workspace.
pub fn claim(job_no: i32) -> Claimed {
    Claimed {
        job_id: JobId::new(),
        task_id: TaskId::new(),
        job_no,
        attempt: 1,
        max_attempts: 3,
        profile: "default".into(),
        claim_seq: 2,
        owner: "dev".into(),
        instruction: "Fix the bug".into(),
        piece: "coding".into(),
        start_movement: None,
        model: None,
        created_at: chrono::Utc::now(),
        resume_movement: None,
        resume_question: None,
        ask_count: 0,
        grants: Vec::new(),
        parent_task_id: None,
        depth: 0,
        workspace_id: TaskId::new(),
        task_max_attempts: 3,
        pending_interjections: 0,
        continued_from: None,
        a2a: None,
        space_id: None,
        space_policy: None,
        unplaced_attachments: false,
        running: None,
    }
}
