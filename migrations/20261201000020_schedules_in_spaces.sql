-- Schedules make their tasks as a REST create does (issue 17): in a space (with its
-- visibility), with the worker profile and model their template, piece or space names. The
-- gateway resolves them when the schedule is written, as it does for a task when it is made.
ALTER TABLE schedules
    ADD COLUMN space_id uuid REFERENCES spaces (id) ON DELETE CASCADE,
    ADD COLUMN visibility text NOT NULL DEFAULT 'private',
    ADD COLUMN profile text NOT NULL DEFAULT 'default';
CREATE INDEX schedules_by_space ON schedules (space_id, owner) WHERE space_id IS NOT NULL;
