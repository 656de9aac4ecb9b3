-- Pieces: a task may start at a movement other than its piece's start movement, and a task
-- created for the router (piece 'auto') gets the piece the router chose once its first job
-- starts.
ALTER TABLE tasks ADD COLUMN start_movement text;
