-- Signals on the bus (docs/architecture.md#signals): a comment that reached a job, a decision
-- and a cancel are published on `<prefix>.signals.<task_id>.<kind>` from the outbox, written
-- by the same statement as the change itself, so a signal is never lost and never sent for
-- something that was not committed. Workers follow them to wake running jobs; any program may.

ALTER TABLE outbox DROP CONSTRAINT outbox_topic;
ALTER TABLE outbox ADD CONSTRAINT outbox_topic CHECK (
       (topic = 'event' AND task_id IS NOT NULL AND kind IS NOT NULL)
    OR (topic = 'signal' AND task_id IS NOT NULL AND kind IN ('comment', 'decision', 'cancel'))
    OR (topic = 'notification' AND kind IS NOT NULL)
    OR (topic IN ('webhook_delivery', 'a2a_push')));

-- Every event is announced; a `decision` event and a job's `cancelled` state change are also
-- signals.
CREATE OR REPLACE FUNCTION events_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    signal text;
BEGIN
    INSERT INTO outbox (topic, task_id, kind, msg_id, payload)
    VALUES ('event', NEW.task_id, NEW.kind, 'event:' || NEW.task_id || ':' || NEW.seq,
            to_jsonb(NEW));
    IF NEW.kind = 'decision' THEN
        signal := 'decision';
    ELSIF NEW.kind = 'job_state' AND NEW.payload ->> 'status' = 'cancelled' THEN
        signal := 'cancel';
    END IF;
    IF signal IS NOT NULL THEN
        INSERT INTO outbox (topic, task_id, kind, msg_id, payload)
        VALUES ('signal', NEW.task_id, signal, 'signal:' || NEW.task_id || ':' || NEW.seq,
                jsonb_build_object(
                    'signal_id', 'event:' || NEW.task_id || ':' || NEW.seq,
                    'kind', signal,
                    'task_id', NEW.task_id,
                    'job_id', NEW.job_id,
                    'action_id', NEW.payload -> 'action_id',
                    'actor', coalesce(NEW.payload ->> 'by', NEW.payload ->> 'reason', ''),
                    'detail', NEW.payload,
                    'at', NEW.created_at,
                    'event', to_jsonb(NEW)));
    END IF;
    RETURN NULL;
END;
$$;

-- A comment routed to a job (an interjection into a running job, an addition to a queued
-- one's instruction) is a `comment` signal.
CREATE FUNCTION comments_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox (topic, task_id, kind, msg_id, payload)
    VALUES ('signal', NEW.task_id, 'comment', 'signal:comment:' || NEW.id,
            jsonb_build_object(
                'signal_id', 'comment:' || NEW.id,
                'kind', 'comment',
                'task_id', NEW.task_id,
                'job_id', NEW.job_id,
                'actor', NEW.author,
                'detail', jsonb_build_object('comment_id', NEW.id, 'kind', NEW.kind,
                                             'body', NEW.body),
                'at', NEW.created_at));
    RETURN NULL;
END;
$$;
CREATE TRIGGER comments_to_outbox AFTER INSERT ON comments
    FOR EACH ROW WHEN (NEW.kind IN ('interjection', 'addition') AND NEW.job_id IS NOT NULL)
    EXECUTE FUNCTION comments_to_outbox();
