-- One home for each idea: a required action set aside by a later pause is `superseded`, a
-- status of its own (it was `resolved` with a `superseded` flag inside its decision), and the
-- outbox stores a typed topic that the relay turns into a subject, instead of subject strings
-- concatenated in SQL.

ALTER TABLE required_actions DROP CONSTRAINT required_actions_status_check;
UPDATE required_actions SET status = 'superseded', decision = NULL
 WHERE decision ->> 'decision' = 'superseded';
ALTER TABLE required_actions ADD CONSTRAINT required_actions_status_check
    CHECK (status IN ('pending', 'approved', 'denied', 'answered', 'resolved', 'superseded'));

-- `topic` is what a row announces: `event` (of task `task_id`, of kind `kind`),
-- `notification` (of type `kind`) or `webhook_delivery`. The relay builds the subject.
ALTER TABLE outbox ADD COLUMN task_id uuid,
                   ADD COLUMN kind text;
UPDATE outbox SET topic = 'event', task_id = split_part(topic, '.', 2)::uuid,
                  kind = split_part(topic, '.', 3)
 WHERE topic LIKE 'events.%';
UPDATE outbox SET topic = 'notification', kind = substr(topic, length('notify.') + 1)
 WHERE topic LIKE 'notify.%';
UPDATE outbox SET topic = 'webhook_delivery' WHERE topic = 'webhooks.deliver';
ALTER TABLE outbox ADD CONSTRAINT outbox_topic CHECK (
       (topic = 'event' AND task_id IS NOT NULL AND kind IS NOT NULL)
    OR (topic = 'notification' AND kind IS NOT NULL)
    OR (topic = 'webhook_delivery'));

CREATE OR REPLACE FUNCTION events_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox (topic, task_id, kind, msg_id, payload)
    VALUES ('event', NEW.task_id, NEW.kind, 'event:' || NEW.task_id || ':' || NEW.seq,
            to_jsonb(NEW));
    RETURN NULL;
END;
$$;
