-- Events published by their writer (issue 22, docs/architecture.md#the-outbox). A writer on
-- the job path (the worker's turns) publishes the events it committed to JetStream itself,
-- right after the commit, instead of waking the relay and waiting for it to read them back.
-- The outbox rows are still written in the same transaction: they are the recovery path.
--
-- A statement that says so (`set_config('maestro.publish_directly', <grace>, true)`) gets
-- its events' outbox rows with `relay_after = now() + grace`. The writer publishes them
-- (`Nats-Msg-Id` = the row's `msg_id`, as the relay would) and then tells the relay which it
-- published (`<prefix>.outbox.published`), and the relay deletes those rows without reading
-- them. A row whose writer died between its commit and its publish, or whose notice was lost,
-- is taken by the relay once `relay_after` has passed and published as any other (a repeat
-- inside JetStream's duplicate window is dropped by its id). Rows without `relay_after` (every
-- other writer, and the signals and notices of any writer) are relayed at once, as before.

ALTER TABLE outbox ADD COLUMN relay_after timestamptz;

-- What the relay drains when woken: rows no writer publishes itself.
CREATE INDEX outbox_to_relay ON outbox (id) WHERE relay_after IS NULL;
-- What a writer's notice deletes, and what the relay takes over when overdue.
CREATE INDEX outbox_published_directly ON outbox (msg_id) WHERE relay_after IS NOT NULL;

CREATE OR REPLACE FUNCTION events_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    grace interval := NULLIF(current_setting('maestro.publish_directly', true), '')::interval;
BEGIN
    INSERT INTO outbox (topic, task_id, kind, msg_id, payload, traceparent, relay_after)
    SELECT 'event', n.task_id, n.kind, 'event:' || n.task_id || ':' || n.seq, to_jsonb(n),
           j.traceparent, now() + grace
      FROM new_events n
      LEFT JOIN jobs j ON j.id = n.job_id
     ORDER BY n.task_id, n.seq;
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
