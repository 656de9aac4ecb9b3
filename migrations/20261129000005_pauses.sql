-- Pauses that wait for a person (SPEC §3.2, §3.4, §6.2): the items a paused job waits for,
-- the tools a person approved for a whole task, MCP tokens, and what an ASK follow-up resumes.

CREATE TABLE required_actions (
    id          uuid PRIMARY KEY,
    task_id     uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    job_id      uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    -- What makes it unique within the job: the tool call id, or `mcp:<server>:<attempt>`.
    key         text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('ask', 'tool_request', 'package_request',
                    'mcp_auth_required', 'side_effect_unknown')),
    status      text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'approved', 'denied', 'answered', 'resolved')),
    -- The movement the job was in, and the task seq of the assistant message that proposed
    -- the call (NULL when no message did, e.g. MCP auth before the first LLM call).
    movement    text NOT NULL,
    source_seq  bigint,
    -- Kind-specific: {tool, arguments, arguments_hash, reason} | {question} |
    -- {package: {name, manager, version}} | {server} | {operation_id, tool, arguments}.
    detail      jsonb NOT NULL,
    -- {decision, scope, note, by, ...} once decided.
    decision    jsonb,
    decided_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT required_actions_once UNIQUE (job_id, key)
);
CREATE INDEX required_actions_by_task ON required_actions (task_id, created_at);
CREATE INDEX required_actions_pending ON required_actions (job_id) WHERE status = 'pending';

CREATE TABLE task_grants (
    task_id    uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    tool       text NOT NULL,
    granted_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, tool)
);

-- Tokens for MCP servers that need authorization, per owner. Never returned by the API and
-- never logged; readable only by the services' database role.
CREATE TABLE mcp_tokens (
    owner      text NOT NULL,
    server     text NOT NULL,
    token      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, server)
);

-- An ASK follow-up resumes in the movement that asked, with the question it answers.
ALTER TABLE jobs ADD COLUMN resume_movement text,
                 ADD COLUMN resume_question text,
                 ADD COLUMN ask_count integer NOT NULL DEFAULT 0;
