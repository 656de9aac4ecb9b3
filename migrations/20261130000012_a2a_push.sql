-- A2A push notifications (docs/a2a.md#push-notifications): one delivery per push config and
-- stream event to send, attempted by the notifier like a webhook delivery. Deleting a config
-- drops its deliveries not yet made.
CREATE TABLE a2a_push_deliveries (
    id               uuid PRIMARY KEY,
    task_id          uuid NOT NULL,
    config_id        text NOT NULL,
    event_seq        bigint NOT NULL,
    item             smallint NOT NULL,
    payload          jsonb NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    last_status_code integer,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    FOREIGN KEY (task_id, config_id) REFERENCES a2a_push_configs (task_id, id) ON DELETE CASCADE,
    UNIQUE (task_id, config_id, event_seq, item)
);

ALTER TABLE outbox DROP CONSTRAINT outbox_topic;
ALTER TABLE outbox ADD CONSTRAINT outbox_topic CHECK (
       (topic = 'event' AND task_id IS NOT NULL AND kind IS NOT NULL)
    OR (topic = 'notification' AND kind IS NOT NULL)
    OR (topic IN ('webhook_delivery', 'a2a_push')));
