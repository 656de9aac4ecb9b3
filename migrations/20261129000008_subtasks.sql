-- Subtasks (SPEC §3.4, §3.5): a job's `delegate` calls start child tasks that run as jobs of
-- their own; the job waits (`waiting_subtasks`) until every child is over, then the scheduler
-- queues it again and the calls are answered with the children's results.

-- A child task knows its parent (task and job), its depth below the top task, and the task
-- whose workspace it works in (the top task's: delegates share their parent's files).
-- `max_attempts` is the task's attempt limit per job as created (a job's own limit grows with
-- every resume); children inherit it.
ALTER TABLE tasks ADD COLUMN parent_task_id uuid REFERENCES tasks (id) ON DELETE CASCADE,
                  ADD COLUMN parent_job_id  uuid,
                  ADD COLUMN workspace_id   uuid,
                  ADD COLUMN depth          integer NOT NULL DEFAULT 0,
                  ADD COLUMN max_attempts   integer;
CREATE INDEX tasks_by_parent ON tasks (parent_task_id) WHERE parent_task_id IS NOT NULL;
CREATE INDEX tasks_by_parent_job ON tasks (parent_job_id) WHERE parent_job_id IS NOT NULL;

-- A `subtask` item waits for one child task; it is `resolved` when the child's latest job is
-- over, with the child's status, result and error as its decision.
ALTER TABLE required_actions DROP CONSTRAINT required_actions_kind_check;
ALTER TABLE required_actions ADD CONSTRAINT required_actions_kind_check
    CHECK (kind IN ('ask', 'tool_request', 'package_request', 'mcp_auth_required',
                    'side_effect_unknown', 'subtask'));
ALTER TABLE required_actions ADD COLUMN subtask_id uuid REFERENCES tasks (id) ON DELETE CASCADE;
ALTER TABLE required_actions ADD CONSTRAINT required_actions_subtask
    CHECK ((kind = 'subtask') = (subtask_id IS NOT NULL));
CREATE INDEX required_actions_open_subtasks ON required_actions (subtask_id)
    WHERE kind = 'subtask' AND status = 'pending';

-- The scheduler's join scans the waiting parents.
CREATE INDEX jobs_waiting_subtasks ON jobs (id) WHERE status = 'waiting_subtasks';
