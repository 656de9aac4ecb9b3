-- The operation ledger (side-effect recovery, SPEC §6.3): every side-effecting tool call is
-- recorded as `started` before it runs and `committed` / `failed` with its result after, so
-- a job resumed after a crash knows which effects may already have happened.
CREATE TABLE operations (
    id          text PRIMARY KEY,
    job_id      uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    call_id     text NOT NULL,
    tool        text NOT NULL,
    arguments   jsonb NOT NULL,
    status      text NOT NULL CHECK (status IN ('started', 'committed', 'failed')),
    result      text,
    -- The claim attempt that started it.
    attempt     integer NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX operations_by_job ON operations (job_id);
