-- A job's notice written by the turn statement that ends or pauses the job, and published by
-- its writer with the statement's events (issue 22, docs/architecture.md#the-outbox).
--
-- Since 0015 the `events_to_notices` trigger recorded a task's notice (the inbox row, a
-- pending delivery per webhook subscription that wants it, and the outbox rows publishing
-- both) inside the statement that wrote the notice-worthy event, and the relay published the
-- notice's row: four SPI statements in the worker's final turn, then, off that statement, a
-- wake-up of the relay, its read of the row, its publish and its delete. On a slow VM a
-- whole-stack run at c=1 without the relay's part was 0.8–1.5 ms faster per job, with 1.8 ms
-- less CPU (docs/performance.md, stop 56).
--
-- Now the worker's turn statement, when it publishes its events itself and carries a
-- notice-worthy event, writes the notice in CTEs beside its events (the inbox row, and the
-- webhook deliveries with their outbox rows, which the relay still publishes) and returns it;
-- the worker publishes it with the events. The range row that stands for the statement's
-- events now stands for their notices too: the relay taking a range over (its writer never
-- said it published it) publishes the notices recorded for the range's seqs
-- (`maestro_db::outbox::lock_overdue`). A statement that writes its notices says so with a
-- setting, `maestro.writes_notices`, which the trigger's `WHEN` reads; every other writer's
-- notices are the trigger's, as before. Both build the notice with the functions below, so
-- there is one definition of what a notice says.
--
-- A worker from before this migration sets no such setting: its notices stay the trigger's.

-- The notice an event makes (`task.<status>` for a job's end or pause, `task.decided` for a
-- decision), or NULL.
CREATE FUNCTION notice_kind(p_event_kind text, p_event jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_event_kind = 'decision' THEN 'task.decided'
                WHEN p_event_kind = 'job_state'
                     AND p_event ->> 'status' IN ('succeeded', 'failed', 'cancelled', 'waiting_human')
                    THEN 'task.' || (p_event ->> 'status')
           END
$$;

-- The notice's payload, `{type, timestamp, data}` (`maestro_domain::notification::Notification`),
-- as the trigger of 0015/0017 built it.
CREATE FUNCTION notice_payload(p_kind text, p_event_kind text, p_event jsonb, p_id uuid,
                               p_task_id uuid, p_job_id uuid, p_seq bigint, p_owner text,
                               p_schedule_id uuid, p_at timestamptz) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'type', p_kind,
        'timestamp', to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'data',
        CASE WHEN p_event_kind = 'job_state' THEN
                 jsonb_strip_nulls(jsonb_build_object(
                     'status', p_event -> 'status',
                     'attempt', p_event -> 'attempt',
                     'result', p_event -> 'result',
                     'error', p_event -> 'error',
                     'wait_reason', p_event -> 'wait_reason'))
                 || CASE WHEN jsonb_array_length(coalesce(p_event -> 'required_actions', '[]')) > 0
                         THEN jsonb_build_object('required_actions', p_event -> 'required_actions')
                         ELSE '{}' END
             ELSE
                 jsonb_build_object(
                     'status', coalesce(p_event ->> 'status',
                                        CASE WHEN p_event ->> 'kind' = 'ask' THEN 'succeeded'
                                             WHEN (p_event ->> 'resumed')::boolean THEN 'queued'
                                             ELSE 'waiting_human' END),
                     'attempt', 0,
                     'decision', p_event)
        END
        || jsonb_build_object('notification_id', p_id, 'task_id', p_task_id, 'job_id', p_job_id,
                              'owner', p_owner, 'event_seq', p_seq)
        || CASE WHEN p_schedule_id IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('schedule_id', p_schedule_id) END)
$$;

CREATE OR REPLACE FUNCTION events_to_notices() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    notice_id uuid := uuid_v7();
    kind text := notice_kind(NEW.kind, NEW.payload);
    task record;
    payload jsonb;
BEGIN
    SELECT owner, schedule_id INTO task FROM tasks WHERE id = NEW.task_id;
    payload := notice_payload(kind, NEW.kind, NEW.payload, notice_id, NEW.task_id, NEW.job_id,
                              NEW.seq, task.owner, task.schedule_id, NEW.created_at);
    INSERT INTO notifications (id, owner, kind, task_id, job_id, event_seq, payload)
    VALUES (notice_id, task.owner, kind, NEW.task_id, NEW.job_id, NEW.seq, payload)
    ON CONFLICT (task_id, event_seq) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM publish_notice(notice_id, task.owner, kind, payload,
                           (SELECT j.traceparent FROM jobs j WHERE j.id = NEW.job_id));
    RETURN NULL;
END;
$$;

DROP TRIGGER events_to_notices ON events;
CREATE TRIGGER events_to_notices AFTER INSERT ON events
    FOR EACH ROW
    WHEN ((NEW.kind = 'decision'
           OR (NEW.kind = 'job_state'
               AND NEW.payload ->> 'status' IN ('succeeded', 'failed', 'cancelled', 'waiting_human')))
          AND coalesce(current_setting('maestro.writes_notices', true), '') = '')
    EXECUTE FUNCTION events_to_notices();
