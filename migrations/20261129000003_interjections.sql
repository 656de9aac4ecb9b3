-- Interjections: comments posted while a job runs, delivered into its conversation exactly
-- once. A job counts the interjections not yet delivered; it cannot succeed while any is
-- pending, and an interjection can only be added while the job can still take it, both
-- checked on the job row itself, so the two never miss each other.
ALTER TABLE comments ADD COLUMN delivered_at timestamptz;
ALTER TABLE jobs ADD COLUMN pending_interjections integer NOT NULL DEFAULT 0;
CREATE INDEX comments_undelivered ON comments (job_id, id)
    WHERE kind = 'interjection' AND delivered_at IS NULL;
