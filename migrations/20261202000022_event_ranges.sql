-- The job path's events without a copy each in the outbox (issue 22, docs/architecture.md#the-outbox).
--
-- Since 0021 a writer that publishes its events itself (the gateway's create, the worker's
-- claim and turns) still had the trigger copy every event, payload and all, into an outbox row
-- that waited `relay_after` for the writer's notice and was then deleted: about twelve rows
-- inserted, indexed and deleted per reference job, each with the event's JSON (a system
-- message is 2 KB and was compressed twice). Those rows were only ever read when the writer
-- died between its commit and its publish.
--
-- Now such a statement leaves one row per task it wrote events of: topic `events`, its payload
-- the range of seqs (`{"first": f, "last": l}`), `msg_id` = `events:<task>:<first>`. The writer
-- names that key in its notice, and the relay deletes the row as before. If the grace passes
-- first, the relay publishes the events of the range, read from `events` itself, exactly as
-- the per-event rows would have been (`outbox::lock_overdue`). Every other row (other writers'
-- events, signals, notices, deliveries) is unchanged.

ALTER TABLE outbox DROP CONSTRAINT outbox_topic;
ALTER TABLE outbox ADD CONSTRAINT outbox_topic CHECK (
       (topic = 'event' AND task_id IS NOT NULL AND kind IS NOT NULL)
    OR (topic = 'events' AND task_id IS NOT NULL AND kind IS NULL AND relay_after IS NOT NULL)
    OR (topic = 'signal' AND task_id IS NOT NULL AND kind IN ('comment', 'decision', 'cancel'))
    OR (topic = 'notification' AND kind IS NOT NULL)
    OR (topic IN ('webhook_delivery', 'a2a_push')));

CREATE OR REPLACE FUNCTION events_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    grace interval := NULLIF(current_setting('maestro.publish_directly', true), '')::interval;
BEGIN
    IF grace IS NULL THEN
        INSERT INTO outbox (topic, task_id, kind, msg_id, payload, traceparent)
        SELECT 'event', n.task_id, n.kind, 'event:' || n.task_id || ':' || n.seq, to_jsonb(n),
               j.traceparent
          FROM new_events n
          LEFT JOIN jobs j ON j.id = n.job_id
         ORDER BY n.task_id, n.seq;
    ELSE
        -- A statement's seqs of one task are consecutive (handed out from `tasks.last_seq`).
        INSERT INTO outbox (topic, task_id, msg_id, payload, relay_after)
        SELECT 'events', n.task_id, 'events:' || n.task_id || ':' || min(n.seq),
               jsonb_build_object('first', min(n.seq), 'last', max(n.seq)), now() + grace
          FROM new_events n
         GROUP BY n.task_id
         ORDER BY n.task_id;
    END IF;
    INSERT INTO outbox (topic, task_id, kind, msg_id, payload, traceparent)
    SELECT 'signal', n.task_id, s.signal, 'signal:' || n.task_id || ':' || n.seq,
           jsonb_build_object(
               'signal_id', 'event:' || n.task_id || ':' || n.seq,
               'kind', s.signal,
               'task_id', n.task_id,
               'job_id', n.job_id,
               'action_id', n.payload -> 'action_id',
               'actor', coalesce(n.payload ->> 'by', n.payload ->> 'reason', ''),
               'detail', n.payload,
               'at', n.created_at,
               'event', to_jsonb(n)),
           j.traceparent
      FROM new_events n
      LEFT JOIN jobs j ON j.id = n.job_id
      CROSS JOIN LATERAL (
          SELECT CASE WHEN n.kind = 'decision' THEN 'decision'
                      WHEN n.kind = 'job_state' AND n.payload ->> 'status' = 'cancelled' THEN 'cancel'
                 END AS signal
      ) s
     WHERE s.signal IS NOT NULL
     ORDER BY n.task_id, n.seq;
    RETURN NULL;
END;
$$;

-- Room on each page for a row's next version: a job's and a task's turn that changes no state
-- moves no indexed column (`updated_at` is moved by state changes only), so it is a HOT update
-- (no new index entries) whenever the new version fits on the same page.
ALTER TABLE jobs SET (fillfactor = 80);
ALTER TABLE tasks SET (fillfactor = 80);

-- A task's row is updated by every statement of its jobs (`last_seq`); with `updated_at` in no
-- index, none of those updates adds index entries. The one reader of this index, A2A's
-- ListTasks (`maestro_db::a2a::page`), counts every task of the owner that matches anyway
-- (its `totalSize`), so it reads them all through `tasks_by_owner` and sorts the page.
DROP INDEX tasks_by_change;
