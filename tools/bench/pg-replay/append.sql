-- The worker's append statement (shared/db/src/jobs.rs, append_publishing) with one turn's
-- events, as sent when the turn delivers no comment (the variant without the `c` CTE); gen.py
-- fills in $KINDS, $PAYLOADS and $TO, and for a turn with a notice-worthy event the notices'
-- CTEs and columns ($WRITES_NOTICES, $NOTICES, $NOTICED).
WITH j AS (
    UPDATE jobs
       SET last_job_seq = last_job_seq + cardinality($KINDS),
           status = COALESCE($TO, status),
           wait_reason = CASE WHEN $TO IS NULL THEN wait_reason ELSE NULL END,
           result = COALESCE(NULL::text, result),
           error = COALESCE(NULL::text, error),
           branch = COALESCE(NULL::text, branch),
           next_retry_at = CASE WHEN $TO IS NULL THEN next_retry_at ELSE NULL END,
           lease_expires_at = CASE WHEN $TO IS NULL THEN lease_expires_at END,
           max_attempts = max_attempts + 0,
           pending_interjections = pending_interjections - 0,
           finished_at = CASE WHEN $TO IN ('succeeded', 'failed', 'cancelled') THEN now() ELSE finished_at END,
           updated_at = CASE WHEN $TO IS NULL THEN updated_at ELSE now() END
     WHERE id = :jid::uuid AND attempt = 1 AND status = 'running'
       AND ($TO IS DISTINCT FROM 'succeeded' OR pending_interjections = 0)
 RETURNING id, task_id, traceparent, last_job_seq - cardinality($KINDS) AS base
), d AS (SELECT set_config('maestro.writes_range_row', '2 seconds', true) AS grace,
                set_config('maestro.writes_notices', $WRITES_NOTICES, true) AS notices
), t AS (
    UPDATE tasks SET last_seq = last_seq + cardinality($KINDS),
                     updated_at = CASE WHEN $TO IS NULL THEN updated_at ELSE now() END
      FROM j WHERE tasks.id = j.task_id
 RETURNING tasks.id, tasks.last_seq - cardinality($KINDS) AS base, tasks.owner, tasks.schedule_id
), e AS (
    INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
    SELECT t.id, t.base + x.ord, j.id, j.base + x.ord, x.kind,
           CASE WHEN x.kind = 'tool_call' THEN x.payload || jsonb_build_object(
                    'message_seq', COALESCE(
                        t.base + (SELECT max(m.ord) FROM unnest($KINDS) WITH ORDINALITY AS m(kind, ord)
                                   WHERE m.kind = 'message' AND m.ord < x.ord),
                        (x.payload ->> 'message_seq')::bigint))
                ELSE x.payload END
      FROM j, t, d, unnest($KINDS, $PAYLOADS) WITH ORDINALITY AS x(kind, payload, ord)
), range AS (
    INSERT INTO outbox (topic, task_id, msg_id, payload, relay_after)
    SELECT 'events', t.id, 'events:' || t.id || ':' || (t.base + 1),
           jsonb_build_object('first', t.base + 1, 'last', t.base + cardinality($KINDS)), now() + d.grace::interval
      FROM t, d WHERE d.grace <> '' AND cardinality($KINDS) > 0
$NOTICES)
SELECT t.base, j.base AS job_base, t.id, j.traceparent, now(),
       d.grace <> '' AND EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.task_id = t.id) AS a2a_push,
       $NOTICED
  FROM t, j, d;
