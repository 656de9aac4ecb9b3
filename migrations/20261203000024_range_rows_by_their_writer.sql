-- The job path's range rows written by their statements, and no transition table (issue 22,
-- docs/architecture.md#the-outbox).
--
-- Since 0022 a statement that publishes its events itself (the gateway's create, the worker's
-- claim and turns) left one outbox row per task naming its range of seqs, written by the
-- statement-level trigger from its transition table. `pg_stat_statements` showed that trigger
-- at 0.09 ms per statement on a slow VM (four per reference job): every event row, payload and
-- all, copied into the statement's transition table, a PL/pgSQL call, a grouping insert and a
-- second scan for signals, to write one row whose every field the statement already knows.
--
-- Now each of those statements inserts its range row itself, in a CTE beside its events
-- (`maestro_db::outbox`'s `RANGE_ROW` and the three statements that use it), and the trigger is
-- a row trigger whose `WHEN` lets through only what is still its to write: every event of a
-- statement that does not publish directly (as before, one `event` row each, now in insertion
-- order), and the signal of a `decision` or a job's `cancelled` state from any statement. A
-- direct statement's events of any other kind never reach the trigger at all (a false `WHEN`
-- queues nothing), so no transition table is captured.
--
-- Such a statement says so with a setting of a new name, `maestro.writes_range_row` (its
-- value the relay's grace), read while each event row is inserted, so those statements compute
-- it before their events (their event insert reads it). The setting is the statement's
-- promise to write its range row: `tests/outbox.rs` checks that each of the three leaves one
-- covering every event it wrote. The old name, `maestro.publish_directly`, which a binary from
-- before this migration still sets during a rolling upgrade without writing a range row, now
-- means nothing: such a statement's events get an `event` row each, published by the relay at
-- once, and the copy its writer also publishes is dropped by the stream's duplicate window
-- (same `Nats-Msg-Id`). A new binary before this migration runs likewise gets the old
-- trigger's per-event rows beside its own range row.

DROP TRIGGER events_to_outbox ON events;
DROP FUNCTION events_to_outbox();

CREATE FUNCTION events_to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    signal text := CASE WHEN NEW.kind = 'decision' THEN 'decision'
                        WHEN NEW.kind = 'job_state' AND NEW.payload ->> 'status' = 'cancelled'
                            THEN 'cancel' END;
    tp text;
BEGIN
    SELECT j.traceparent INTO tp FROM jobs j WHERE j.id = NEW.job_id;
    IF coalesce(current_setting('maestro.writes_range_row', true), '') = '' THEN
        INSERT INTO outbox (topic, task_id, kind, msg_id, payload, traceparent)
        VALUES ('event', NEW.task_id, NEW.kind, 'event:' || NEW.task_id || ':' || NEW.seq,
                to_jsonb(NEW), tp);
    END IF;
    IF signal IS NOT NULL THEN
        INSERT INTO outbox (topic, task_id, kind, msg_id, payload, traceparent)
        VALUES ('signal', NEW.task_id, signal, 'signal:' || NEW.task_id || ':' || NEW.seq,
                jsonb_build_object(
                    'signal_id', 'event:' || NEW.task_id || ':' || NEW.seq,
                    'kind', signal,
                    'task_id', NEW.task_id,
                    'job_id', NEW.job_id,
                    'action_id', NEW.payload -> 'action_id',
                    'actor', coalesce(NEW.payload ->> 'by', NEW.payload ->> 'reason', ''),
                    'detail', NEW.payload,
                    'at', NEW.created_at,
                    'event', to_jsonb(NEW)),
                tp);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER events_to_outbox AFTER INSERT ON events
    FOR EACH ROW
    WHEN (NEW.kind = 'decision'
          OR (NEW.kind = 'job_state' AND NEW.payload ->> 'status' = 'cancelled')
          OR coalesce(current_setting('maestro.writes_range_row', true), '') = '')
    EXECUTE FUNCTION events_to_outbox();
