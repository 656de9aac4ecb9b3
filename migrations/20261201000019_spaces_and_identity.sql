-- Spaces, visibility, worker profiles that route, API tokens in the database (issue 17).
-- Existing tasks keep working: no space, `private` (their creator only), profile `default`.

-- A space: tasks that belong together, the people who work on them and the defaults their
-- tasks get. `policy` is a tool policy in the same language as WORKSPACE_POLICY (NULL: the
-- deployment's); `profiles` the worker profiles its tasks may name (empty: any), `profile`
-- the one they get when they name none (NULL: `default`). Archived spaces take no new task.
CREATE TABLE spaces (
    id            uuid PRIMARY KEY,
    name          text NOT NULL,
    description   text NOT NULL DEFAULT '',
    created_by    text NOT NULL,
    default_piece text,
    default_model text,
    profile       text,
    profiles      text[] NOT NULL DEFAULT '{}',
    policy        jsonb,
    version       bigint NOT NULL DEFAULT 1,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    archived_at   timestamptz
);

-- Who is in a space, as what. A space always has at least one `owner` (the API keeps it so).
CREATE TABLE space_members (
    space_id uuid NOT NULL REFERENCES spaces (id) ON DELETE CASCADE,
    member   text NOT NULL,
    role     text NOT NULL CHECK (role IN ('owner', 'editor', 'viewer')),
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (space_id, member)
);
CREATE INDEX space_members_by_member ON space_members (member, space_id);

-- `visibility`: `private` (its creator), `space` (the space's members: viewers read, editors
-- and owners act), `public` (any authenticated caller reads; the space's editors act).
-- `profile`: the worker profile its jobs are dispatched to.
ALTER TABLE tasks ADD COLUMN space_id   uuid REFERENCES spaces (id),
                  ADD COLUMN visibility text NOT NULL DEFAULT 'private'
                      CHECK (visibility IN ('private', 'space', 'public')),
                  ADD COLUMN profile    text NOT NULL DEFAULT 'default',
                  ADD CONSTRAINT tasks_visibility_needs_space
                      CHECK (visibility <> 'space' OR space_id IS NOT NULL);
CREATE INDEX tasks_by_space ON tasks (space_id, id DESC) WHERE space_id IS NOT NULL;

-- Follow-up jobs (comments, continues) are dispatched to their task's profile: the jobs'
-- own default would send them to `default`.
ALTER TABLE jobs ALTER COLUMN profile DROP DEFAULT;
CREATE FUNCTION jobs_profile_of_task() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.profile IS NULL THEN
        SELECT profile INTO NEW.profile FROM tasks WHERE id = NEW.task_id;
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER jobs_profile_of_task BEFORE INSERT ON jobs
    FOR EACH ROW WHEN (NEW.profile IS NULL) EXECUTE FUNCTION jobs_profile_of_task();

-- The workers that are up: what they serve, and when they last said so (every few seconds).
-- A queued job whose profile (or model) no recently seen worker serves says so.
CREATE TABLE workers (
    id         text PRIMARY KEY,
    profiles   text[] NOT NULL,
    -- Empty: any model.
    models     text[] NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);

-- API tokens: only a SHA-256 of each is kept (tokens are 256 random bits, so a fast hash is
-- enough; the token itself is shown once, when it is made). `admin` tokens manage tokens.
CREATE TABLE api_tokens (
    id         uuid PRIMARY KEY,
    owner      text NOT NULL,
    name       text NOT NULL,
    hash       bytea NOT NULL UNIQUE,
    admin      boolean NOT NULL DEFAULT false,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    revoked_at timestamptz
);
CREATE INDEX api_tokens_by_owner ON api_tokens (owner, id);

-- A job of a space's task: the commit of the space's `main` its changes were merged in, or the
-- branch they are kept on (failed, cancelled, or conflicting with `main`).
ALTER TABLE jobs ADD COLUMN commit text,
                 ADD COLUMN branch text;

-- Files a person attached to a task when creating it: kept here (the system of record) and put
-- into the task's workspace, under `attachments/`, before its first job's first LLM call
-- (`placed_at`). Names are sanitized by the gateway and unique per task.
CREATE TABLE task_attachments (
    task_id      uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    name         text NOT NULL,
    content_type text NOT NULL,
    size         bigint NOT NULL,
    sha256       text NOT NULL,
    data         bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    placed_at    timestamptz,
    PRIMARY KEY (task_id, name)
);
CREATE INDEX task_attachments_unplaced ON task_attachments (task_id) WHERE placed_at IS NULL;
