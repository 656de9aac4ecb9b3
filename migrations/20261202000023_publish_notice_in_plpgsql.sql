-- `publish_notice` in PL/pgSQL instead of SQL (issue 22): the same statement, planned once per
-- connection instead of at every call.
--
-- Postgres (15 and earlier than 18) does not cache the plan of a SQL-language function that it
-- cannot inline, and a function whose body is a data-modifying CTE is never inlined: each call
-- parsed, analysed and planned the whole `WITH d AS (INSERT ...) INSERT ... UNION ALL` again.
-- It runs once per job, from `events_to_notices` on the job's final state, and that planning
-- was 0.5 ms of Postgres's CPU per job: `pg_stat_statements` gave the call 0.62–1.09 ms, the
-- final turn's statement that fires it 1.4–2.6 ms, against 0.8 ms for the first turn. A
-- PL/pgSQL function prepares its statements on first use and keeps the plans for the session.
-- `tools/bench/pg-replay/run` on one VM, alternating: final turn 2.1–2.6 → 1.5–1.6 ms; c=8
-- 227–266 → 272–273 jobs/s with Postgres's CPU per job 6.4–7.4 → 6.2 ms.

CREATE OR REPLACE FUNCTION publish_notice(p_id uuid, p_owner text, p_kind text, p_payload jsonb,
                                          p_traceparent text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    WITH d AS (
        INSERT INTO webhook_deliveries (id, subscription_id, notification_id, status)
        SELECT gen_random_uuid(), s.id, p_id, 'pending'
          FROM webhook_subscriptions s
         WHERE s.owner = p_owner AND s.deleted_at IS NULL AND s.disabled_at IS NULL
           AND p_kind = ANY (s.event_types)
        RETURNING id
    )
    INSERT INTO outbox (topic, kind, msg_id, payload, traceparent)
    SELECT 'webhook_delivery', NULL, 'delivery:' || d.id, jsonb_build_object('delivery_id', d.id),
           p_traceparent
      FROM d
    UNION ALL
    SELECT 'notification', p_kind, 'notification:' || p_id, p_payload, p_traceparent;
END;
$$;
