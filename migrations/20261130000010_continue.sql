-- Continue (SPEC §3.3, §5): a finished task carries on in a new job that replays the task's
-- transcript. The job records the job it continues, and may run another piece or model than
-- the task's (NULL: the task's). A Continue request may carry an Idempotency-Key, unique per
-- task; the request's hash tells a repeat from a different request under the same key.
ALTER TABLE jobs
    ADD COLUMN continued_from_job_id uuid REFERENCES jobs (id) ON DELETE SET NULL,
    ADD COLUMN piece text,
    ADD COLUMN model text,
    ADD COLUMN idempotency_key text,
    ADD COLUMN request_hash text;
CREATE UNIQUE INDEX jobs_continue_key ON jobs (task_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- A comment posted while the latest job is queued or waiting to retry joins that job's
-- instruction (`addition`): folded into its opening when it opens fresh, else delivered at
-- its next step. Counted with the interjections, so it is delivered exactly once.
ALTER TABLE comments DROP CONSTRAINT comments_kind_check;
ALTER TABLE comments ADD CONSTRAINT comments_kind_check
    CHECK (kind IN ('instruction', 'interjection', 'answer', 'handoff', 'addition'));
DROP INDEX comments_undelivered;
CREATE INDEX comments_undelivered ON comments (job_id, id)
    WHERE kind IN ('interjection', 'addition') AND delivered_at IS NULL;

-- One unfinished job per task, whatever it waits for: a comment or a Continue racing a
-- running, paused or waiting job can never start a second one.
DROP INDEX jobs_one_active_per_task;
CREATE UNIQUE INDEX jobs_one_active_per_task ON jobs (task_id)
    WHERE status NOT IN ('succeeded', 'failed', 'cancelled');
