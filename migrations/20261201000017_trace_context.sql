-- Trace context follows a job (docs/observability.md#traces). The worker's claim records the
-- W3C `traceparent` its dispatch carried (the request, A2A call or schedule fire that queued
-- the job), and every outbox row made from the job's events and notices carries it, so the
-- relay, the notifier and the webhook request join the job's trace.

ALTER TABLE jobs ADD COLUMN traceparent text;

DROP FUNCTION publish_notice(uuid, text, text, jsonb);
CREATE FUNCTION publish_notice(p_id uuid, p_owner text, p_kind text, p_payload jsonb,
                               p_traceparent text DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    WITH d AS (
        INSERT INTO webhook_deliveries (id, subscription_id, notification_id, status)
        SELECT gen_random_uuid(), s.id, p_id, 'pending'
          FROM webhook_subscriptions s
         WHERE s.owner = p_owner AND s.deleted_at IS NULL AND s.disabled_at IS NULL
           AND p_kind = ANY (s.event_types)
        RETURNING id
    )
    INSERT INTO outbox (topic, kind, msg_id, payload, traceparent)
    SELECT 'webhook_delivery', NULL, 'delivery:' || d.id, jsonb_build_object('delivery_id', d.id),
           p_traceparent
      FROM d
    UNION ALL
    SELECT 'notification', p_kind, 'notification:' || p_id, p_payload, p_traceparent
$$;

CREATE OR REPLACE FUNCTION events_to_notices() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    notice_id uuid := uuid_v7();
    notice_kind text;
    data jsonb;
    task record;
    payload jsonb;
BEGIN
    IF NEW.kind = 'job_state' THEN
        notice_kind := 'task.' || (NEW.payload ->> 'status');
        data := jsonb_strip_nulls(jsonb_build_object(
                    'status', NEW.payload -> 'status',
                    'attempt', NEW.payload -> 'attempt',
                    'result', NEW.payload -> 'result',
                    'error', NEW.payload -> 'error',
                    'wait_reason', NEW.payload -> 'wait_reason'))
             || CASE WHEN jsonb_array_length(coalesce(NEW.payload -> 'required_actions', '[]')) > 0
                     THEN jsonb_build_object('required_actions', NEW.payload -> 'required_actions')
                     ELSE '{}' END;
    ELSE
        notice_kind := 'task.decided';
        data := jsonb_build_object(
                    'status', coalesce(NEW.payload ->> 'status',
                                       CASE WHEN NEW.payload ->> 'kind' = 'ask' THEN 'succeeded'
                                            WHEN (NEW.payload ->> 'resumed')::boolean THEN 'queued'
                                            ELSE 'waiting_human' END),
                    'attempt', 0,
                    'decision', NEW.payload);
    END IF;
    SELECT owner, schedule_id INTO task FROM tasks WHERE id = NEW.task_id;
    data := data || jsonb_build_object('notification_id', notice_id, 'task_id', NEW.task_id,
                                       'job_id', NEW.job_id, 'owner', task.owner,
                                       'event_seq', NEW.seq)
                 || CASE WHEN task.schedule_id IS NULL THEN '{}'::jsonb
                         ELSE jsonb_build_object('schedule_id', task.schedule_id) END;
    payload := jsonb_build_object(
        'type', notice_kind,
        'timestamp', to_char(NEW.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'data', data);
    INSERT INTO notifications (id, owner, kind, task_id, job_id, event_seq, payload)
    VALUES (notice_id, task.owner, notice_kind, NEW.task_id, NEW.job_id, NEW.seq, payload)
    ON CONFLICT (task_id, event_seq) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM publish_notice(notice_id, task.owner, notice_kind, payload,
                           (SELECT j.traceparent FROM jobs j WHERE j.id = NEW.job_id));
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION events_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox (topic, task_id, kind, msg_id, payload, traceparent)
    SELECT 'event', n.task_id, n.kind, 'event:' || n.task_id || ':' || n.seq, to_jsonb(n),
           j.traceparent
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

