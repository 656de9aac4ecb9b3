-- A2A (docs/a2a.md). Tasks group into contexts (a task created over REST is its own context);
-- a comment that came as an A2A message keeps its messageId, unique per task, so the same
-- message twice changes nothing the second time; ListTasks pages owner's tasks by their last
-- change; per-task push notification configs.
ALTER TABLE tasks ADD COLUMN context_id text;
CREATE INDEX tasks_by_context ON tasks (owner, context_id) WHERE context_id IS NOT NULL;
CREATE INDEX tasks_by_change ON tasks (owner, updated_at DESC, id DESC);

ALTER TABLE comments ADD COLUMN message_id text;
CREATE UNIQUE INDEX comments_message_id ON comments (task_id, message_id)
    WHERE message_id IS NOT NULL;

CREATE TABLE a2a_push_configs (
    task_id          uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    id               text NOT NULL,
    url              text NOT NULL,
    token            text,
    auth_scheme      text,
    auth_credentials text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, id)
);
