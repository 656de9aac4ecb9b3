-- The worker's claim of one job (shared/db/src/claims.rs, claim_many_traced).
WITH j AS (
    UPDATE jobs
       SET status = 'running', attempt = attempt + 1, worker_id = 'worker',
           lease_expires_at = now() + make_interval(secs => 30),
           started_at = COALESCE(started_at, now()), next_retry_at = NULL,
           wait_reason = NULL, last_job_seq = last_job_seq + 1, updated_at = now(),
           redispatches = 0,
           traceparent = COALESCE(jobs.traceparent, NULL)
     WHERE id = ANY(ARRAY[:jid::uuid])
       AND (status = 'queued'
            OR (status = 'retry' AND next_retry_at <= now() + interval '50 milliseconds')
            OR (status = 'running' AND lease_expires_at < now()))
 RETURNING id, task_id, job_no, attempt, max_attempts, profile, last_job_seq, created_at,
           resume_movement, resume_question, ask_count, pending_interjections,
           piece, model, continued_from_job_id, traceparent
), t AS (
    UPDATE tasks SET last_seq = last_seq + 1, updated_at = now()
      FROM j WHERE tasks.id = j.task_id
 RETURNING tasks.id, tasks.last_seq, tasks.owner, tasks.instruction, tasks.piece,
           tasks.model, tasks.start_movement, tasks.parent_task_id, tasks.depth,
           COALESCE(tasks.workspace_id, tasks.id) AS workspace_id,
           tasks.max_attempts AS task_max_attempts, tasks.context_id, tasks.space_id
), d AS (SELECT set_config('maestro.writes_range_row', '2 seconds', true) AS grace
), e AS (
    INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
    SELECT t.id, t.last_seq, j.id, j.last_job_seq, 'job_state',
           jsonb_build_object('status', 'running', 'attempt', j.attempt, 'worker_id', 'worker'::text)
      FROM j JOIN t ON t.id = j.task_id CROSS JOIN d
), range AS (
    INSERT INTO outbox (topic, task_id, msg_id, payload, relay_after)
    SELECT 'events', t.id, 'events:' || t.id || ':' || t.last_seq,
           jsonb_build_object('first', t.last_seq, 'last', t.last_seq), now() + d.grace::interval
      FROM t, d WHERE d.grace <> ''
)
SELECT j.id, j.task_id, t.last_seq AS claim_seq, t.owner, t.instruction,
       ARRAY(SELECT g.tool FROM task_grants g WHERE g.task_id = j.task_id ORDER BY g.tool) AS grants,
       (SELECT c.message_id FROM comments c WHERE c.task_id = j.task_id AND c.kind = 'instruction' AND t.context_id IS NOT NULL LIMIT 1) AS message_id,
       (SELECT s.policy FROM spaces s WHERE s.id = t.space_id) AS space_policy,
       EXISTS (SELECT 1 FROM task_attachments a WHERE a.task_id = j.task_id AND a.placed_at IS NULL) AS unplaced,
       j.last_job_seq AS claim_job_seq, now(), d.grace <> '' AS direct, j.traceparent,
       d.grace <> '' AND EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.task_id = j.task_id) AS a2a_push
  FROM j JOIN t ON t.id = j.task_id CROSS JOIN d;
