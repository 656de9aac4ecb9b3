-- The outbox relay is woken over NATS (`<prefix>.outbox.wake`, published by each writer after
-- its commit) instead of NOTIFY: every notifying transaction takes Postgres's global notify
-- lock until its commit is flushed, which serialized all writers (measured: 8 clients, 10k
-- commits/s without NOTIFY, 2.9k with it).
DROP TRIGGER IF EXISTS outbox_notify ON outbox;
DROP FUNCTION IF EXISTS outbox_notify();
