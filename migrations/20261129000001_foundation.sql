-- MAESTRO foundation schema: tasks, comments, jobs, events, the outbox, webhooks.
-- Postgres is the system of record: every state change is a committed row first; NATS only
-- carries work and signals (see docs/architecture.md).

CREATE TABLE tasks (
    id              uuid PRIMARY KEY,
    owner           text NOT NULL,
    instruction     text NOT NULL,
    piece           text NOT NULL,
    model           text,
    -- Client-supplied Idempotency-Key and a hash of the request it came with.
    idempotency_key text,
    request_hash    text,
    -- Last task-wide event seq handed out; events.seq is gap-free per task.
    last_seq        bigint NOT NULL DEFAULT 0,
    job_count       integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tasks_idempotency UNIQUE (owner, idempotency_key)
);
CREATE INDEX tasks_by_owner ON tasks (owner, id DESC);

CREATE TABLE comments (
    id         uuid PRIMARY KEY,
    task_id    uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    author     text NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('instruction', 'interjection', 'answer', 'handoff')),
    body       text NOT NULL,
    job_id     uuid,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX comments_by_task ON comments (task_id, id);

CREATE TABLE jobs (
    id               uuid PRIMARY KEY,
    task_id          uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    job_no           integer NOT NULL,
    status           text NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed',
                         'cancelled', 'retry', 'waiting_human', 'waiting_subtasks')),
    wait_reason      text,
    profile          text NOT NULL DEFAULT 'default',
    -- Claims so far; also the fencing token: a worker writes only while attempt is its own.
    attempt          integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL,
    next_retry_at    timestamptz,
    worker_id        text,
    lease_expires_at timestamptz,
    -- Last per-job event seq handed out (events.job_seq).
    last_job_seq     integer NOT NULL DEFAULT 0,
    result           text,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT jobs_number UNIQUE (task_id, job_no),
    CONSTRAINT jobs_wait_reason CHECK ((status = 'waiting_human') = (wait_reason IS NOT NULL))
);
-- At most one job of a task may be queued, running or waiting to retry.
CREATE UNIQUE INDEX jobs_one_active_per_task ON jobs (task_id)
    WHERE status IN ('queued', 'running', 'retry');
-- The scheduler's scans: undelivered queued jobs, due retries, expired leases.
CREATE INDEX jobs_pending ON jobs (status, updated_at)
    WHERE status IN ('queued', 'retry', 'running');

CREATE TABLE events (
    task_id    uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    job_id     uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    job_seq    integer NOT NULL,
    kind       text NOT NULL,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, seq),
    CONSTRAINT events_job_seq UNIQUE (job_id, job_seq)
);

-- Transactional outbox: rows are written in the same transaction as the state change they
-- announce; the relay (scheduler) publishes each on `<prefix>.<topic>` with
-- Nats-Msg-Id = msg_id, then deletes it. The topic is relative so the database does not need
-- to know the deployment's subject prefix.
CREATE TABLE outbox (
    id          bigserial PRIMARY KEY,
    topic       text NOT NULL,
    msg_id      text NOT NULL,
    payload     jsonb NOT NULL,
    traceparent text,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('maestro_outbox', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- Every event is announced: whoever inserts an event cannot forget its outbox row.
-- The payload is the event row itself, the same JSON shape the events API returns.
CREATE FUNCTION events_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox (topic, msg_id, payload)
    VALUES ('events.' || NEW.task_id || '.' || NEW.kind,
            'event:' || NEW.task_id || ':' || NEW.seq,
            to_jsonb(NEW));
    RETURN NULL;
END;
$$;
CREATE TRIGGER events_to_outbox AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_to_outbox();

CREATE TABLE webhook_subscriptions (
    id          uuid PRIMARY KEY,
    owner       text NOT NULL,
    url         text NOT NULL,
    secret      text NOT NULL,
    event_types text[] NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    deleted_at  timestamptz
);
CREATE INDEX webhook_subscriptions_by_owner ON webhook_subscriptions (owner) WHERE deleted_at IS NULL;

-- The notification inbox: one row per notification-worthy event.
CREATE TABLE notifications (
    id         uuid PRIMARY KEY,
    owner      text NOT NULL,
    kind       text NOT NULL,
    task_id    uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    job_id     uuid NOT NULL,
    event_seq  bigint NOT NULL,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT notifications_once_per_event UNIQUE (task_id, event_seq)
);
CREATE INDEX notifications_by_owner ON notifications (owner, id DESC);

CREATE TABLE webhook_deliveries (
    id               uuid PRIMARY KEY,
    subscription_id  uuid NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    notification_id  uuid NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    status           text NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    last_status_code integer,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    CONSTRAINT webhook_deliveries_once UNIQUE (subscription_id, notification_id)
);

-- Messages a consumer gave up on (poison, or redelivery limit reached).
CREATE TABLE dead_letters (
    id         bigserial PRIMARY KEY,
    consumer   text NOT NULL,
    subject    text NOT NULL,
    payload    bytea NOT NULL,
    reason     text NOT NULL,
    attempts   integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
