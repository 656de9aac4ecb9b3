-- How often the scheduler has re-dispatched a job since it was last claimed: a `queued` job
-- still not picked up is re-dispatched after the grace, then after 2x, 4x, ... (at most 64x),
-- so a long backlog does not produce a `redispatch` event per job every grace period.
ALTER TABLE jobs ADD COLUMN redispatches integer NOT NULL DEFAULT 0;
