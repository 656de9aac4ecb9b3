-- Schedules (docs/schedules.md), the inbox (docs/notifications.md#inbox) and webhooks under
-- failure (dead-lettered deliveries, redelivery, subscriptions disabled after failing).

-- A schedule fires tasks from its template at the times its cron expression names in its
-- time zone. `next_fire_at` is the next due time (NULL: paused, or past its end): the
-- schedulers wait for the earliest one and lock due rows with SKIP LOCKED.
CREATE TABLE schedules (
    id             uuid PRIMARY KEY,
    owner          text NOT NULL,
    name           text NOT NULL,
    cron           text NOT NULL,
    timezone       text NOT NULL,
    instruction    text NOT NULL,
    piece          text NOT NULL,
    model          text,
    overlap        text NOT NULL CHECK (overlap IN ('skip', 'allow', 'queue')),
    missed         text NOT NULL CHECK (missed IN ('skip', 'run_once')),
    starts_at      timestamptz,
    ends_at        timestamptz,
    paused         boolean NOT NULL DEFAULT false,
    next_fire_at   timestamptz,
    -- The task of the latest run that started (the overlap policy looks at it).
    last_task_id   uuid,
    last_fire_at   timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_window CHECK (starts_at IS NULL OR ends_at IS NULL OR starts_at < ends_at)
);
CREATE INDEX schedules_by_owner ON schedules (owner, id DESC);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE next_fire_at IS NOT NULL;

-- One row per fire time: the unique key is what makes a fire happen once, however many
-- schedulers run. `started` runs have a task; `queued` ones get theirs when the previous
-- run is over; `skipped` (overlap) and `missed` (downtime, policy `skip`) never do.
CREATE TABLE schedule_runs (
    schedule_id  uuid NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    fire_time    timestamptz NOT NULL,
    status       text NOT NULL CHECK (status IN ('started', 'queued', 'skipped', 'missed')),
    task_id      uuid REFERENCES tasks (id) ON DELETE SET NULL,
    manual       boolean NOT NULL DEFAULT false,
    -- Fire times before this one that were missed while no scheduler ran.
    missed_count integer NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    PRIMARY KEY (schedule_id, fire_time)
);
CREATE INDEX schedule_runs_queued ON schedule_runs (schedule_id, fire_time)
    WHERE status = 'queued';

ALTER TABLE tasks ADD COLUMN schedule_id uuid REFERENCES schedules (id) ON DELETE SET NULL,
                  ADD COLUMN scheduled_for timestamptz;

-- The inbox. Notifications about something other than a task (a schedule's missed runs, a
-- disabled webhook) have no task, job or event: `dedup_key` makes those once-only instead.
-- `tx` is the writing transaction, so a stream can hand out rows in an order no later commit
-- can slip into (docs/notifications.md#inbox).
ALTER TABLE notifications ALTER COLUMN task_id DROP NOT NULL,
                          ALTER COLUMN job_id DROP NOT NULL,
                          ALTER COLUMN event_seq DROP NOT NULL,
                          ADD COLUMN dedup_key text UNIQUE,
                          ADD COLUMN read_at timestamptz,
                          ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX notifications_unread ON notifications (owner) WHERE read_at IS NULL;
CREATE INDEX notifications_by_tx ON notifications (owner, tx, id);

-- A subscription whose deliveries keep failing is disabled (WEBHOOK_DISABLE_AFTER failed
-- deliveries in a row); enabling it again resets the count.
ALTER TABLE webhook_subscriptions ADD COLUMN consecutive_failures integer NOT NULL DEFAULT 0,
                                  ADD COLUMN disabled_at timestamptz,
                                  ADD COLUMN disabled_reason text;
ALTER TABLE webhook_deliveries ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
                               ADD COLUMN redeliveries integer NOT NULL DEFAULT 0;
CREATE INDEX webhook_deliveries_by_subscription ON webhook_deliveries (subscription_id, id DESC);

-- The activity feed reads task-level events across an owner's tasks, newest first.
CREATE INDEX events_task_level ON events (created_at DESC)
    WHERE kind IN ('job_state', 'decision', 'job_continued');

-- Record a notification that is not about a task event (`schedule.*`, `webhook.disabled`) the
-- way the notifier records a task's: the inbox row, one pending delivery per subscription of
-- the owner that wants the type, and the outbox rows that publish both. Once per `dedup`.
CREATE FUNCTION record_notice(p_id uuid, p_owner text, p_kind text, p_payload jsonb, p_dedup text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notifications (id, owner, kind, payload, dedup_key)
    VALUES (p_id, p_owner, p_kind, p_payload, p_dedup)
    ON CONFLICT (dedup_key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
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
    SELECT 'notification', p_kind, 'notification:' || p_id, p_payload;
    RETURN true;
END;
$$;
