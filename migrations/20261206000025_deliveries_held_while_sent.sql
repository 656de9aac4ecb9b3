-- A webhook or A2A push delivery is held by the notifier sending it (docs/scaling.md, known
-- risks): a second copy of its message (the relay republishing a batch it could not delete,
-- past the stream's duplicate window) read by another notifier, or by another of the same
-- notifier's handlers, finds it held and waits instead of POSTing it at the same time.
-- `sending_until` is when the hold runs out: the HTTP timeout and a margin after it was
-- taken, so a notifier that died mid-POST holds it no longer than that. Recording the attempt
-- ends the hold.
ALTER TABLE webhook_deliveries ADD COLUMN sending_until timestamptz;
ALTER TABLE a2a_push_deliveries ADD COLUMN sending_until timestamptz;
