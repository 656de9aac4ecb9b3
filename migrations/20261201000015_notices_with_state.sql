-- A task's notification (docs/notifications.md) is recorded by the statement that changes
-- the task's state, not afterwards by the notifier: one commit fewer per job (issue 22), and
-- a notice can no longer lag behind its event or be missed. The trigger writes what the
-- notifier's statement wrote: the inbox row, one pending delivery per webhook subscription of
-- the owner that wants the type, and the outbox rows that publish both (`publish_notice`,
-- which `record_notice` now shares). The payload has the
-- `{type, timestamp, data}` shape of `maestro_domain::notification::Notification` (a test
-- reads it back into that type).
--
-- Notice-worthy: a `job_state` event whose status is succeeded, failed, cancelled or
-- waiting_human, and every `decision` event (`task.decided`, with the job's state right
-- after it).

-- A version 7 UUID (RFC 9562: milliseconds since the epoch, then random bits), as the
-- services make them (`uuid::Uuid::now_v7`): the inbox is ordered by id.
CREATE FUNCTION uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                          PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                                          FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;

-- What follows a recorded notification, wherever it was recorded: one pending delivery per
-- webhook subscription of the owner that wants the type, and the outbox rows that publish the
-- notification on its type's subject and each delivery on the deliveries subject.
CREATE FUNCTION publish_notice(p_id uuid, p_owner text, p_kind text, p_payload jsonb)
RETURNS void LANGUAGE sql AS $$
    WITH d AS (
        INSERT INTO webhook_deliveries (id, subscription_id, notification_id, status)
        SELECT gen_random_uuid(), s.id, p_id, 'pending'
          FROM webhook_subscriptions s
         WHERE s.owner = p_owner AND s.deleted_at IS NULL AND s.disabled_at IS NULL
           AND p_kind = ANY (s.event_types)
        RETURNING id
    )
    INSERT INTO outbox (topic, kind, msg_id, payload)
    SELECT 'webhook_delivery', NULL, 'delivery:' || d.id, jsonb_build_object('delivery_id', d.id)
      FROM d
    UNION ALL
    SELECT 'notification', p_kind, 'notification:' || p_id, p_payload
$$;

-- A notice that is not about a task event (`schedule.*`, `webhook.disabled`), once per
-- `p_dedup` (as in migration 0013, now through `publish_notice`).
CREATE OR REPLACE FUNCTION record_notice(p_id uuid, p_owner text, p_kind text, p_payload jsonb,
                                         p_dedup text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notifications (id, owner, kind, payload, dedup_key)
    VALUES (p_id, p_owner, p_kind, p_payload, p_dedup)
    ON CONFLICT (dedup_key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM publish_notice(p_id, p_owner, p_kind, p_payload);
    RETURN true;
END;
$$;

CREATE FUNCTION events_to_notices() RETURNS trigger LANGUAGE plpgsql AS $$
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
    PERFORM publish_notice(notice_id, task.owner, notice_kind, payload);
    RETURN NULL;
END;
$$;

CREATE TRIGGER events_to_notices AFTER INSERT ON events
    FOR EACH ROW
    WHEN (NEW.kind = 'decision'
          OR (NEW.kind = 'job_state'
              AND NEW.payload ->> 'status' IN ('succeeded', 'failed', 'cancelled', 'waiting_human')))
    EXECUTE FUNCTION events_to_notices();
