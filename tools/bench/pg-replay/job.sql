SELECT gen_random_uuid() AS tid, gen_random_uuid() AS jid, gen_random_uuid() AS cid \gset
WITH task AS (
    INSERT INTO tasks (id, owner, instruction, piece, model, idempotency_key, request_hash, last_seq,
                       job_count, start_movement, max_attempts, context_id, profile, space_id, visibility)
    VALUES (:tid::uuid, 'bench', 'job 812', 'chat', NULL, NULL, NULL, 1, 1, NULL, 3, NULL, 'default',
            NULL, 'private')
    ON CONFLICT (owner, idempotency_key) DO NOTHING RETURNING id, created_at
), comment AS (
    INSERT INTO comments (id, task_id, author, kind, body, job_id, message_id)
    SELECT :cid::uuid, task.id, 'bench', 'instruction', 'job 812', :jid::uuid, NULL FROM task
), job AS (
    INSERT INTO jobs (id, task_id, job_no, status, profile, max_attempts, last_job_seq)
    SELECT :jid::uuid, task.id, 1, 'queued', 'default', 3, 1 FROM task RETURNING id, task_id
), event AS (
    INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
    SELECT job.task_id, 1, job.id, 1, 'job_state', '{"status": "queued", "attempt": 0}' FROM job
), d AS (SELECT set_config('maestro.publish_directly', '2 seconds', true) AS grace)
SELECT task.created_at, d.grace <> '' AS direct FROM task, d;
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
), e AS (
    INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
    SELECT t.id, t.last_seq, j.id, j.last_job_seq, 'job_state',
           jsonb_build_object('status', 'running', 'attempt', j.attempt, 'worker_id', 'worker'::text)
      FROM j JOIN t ON t.id = j.task_id
), d AS (SELECT set_config('maestro.publish_directly', '2 seconds', true) AS grace)
SELECT j.id, j.task_id, t.last_seq AS claim_seq, t.owner, t.instruction,
       ARRAY(SELECT g.tool FROM task_grants g WHERE g.task_id = j.task_id ORDER BY g.tool) AS grants,
       (SELECT c.message_id FROM comments c WHERE c.task_id = j.task_id AND c.kind = 'instruction' AND t.context_id IS NOT NULL LIMIT 1) AS message_id,
       (SELECT s.policy FROM spaces s WHERE s.id = t.space_id) AS space_policy,
       EXISTS (SELECT 1 FROM task_attachments a WHERE a.task_id = j.task_id AND a.placed_at IS NULL) AS unplaced,
       j.last_job_seq AS claim_job_seq, now(), d.grace <> '' AS direct, j.traceparent,
       d.grace <> '' AND EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.task_id = j.task_id) AS a2a_push
  FROM j JOIN t ON t.id = j.task_id CROSS JOIN d;
-- The worker's append statement (shared/db/src/jobs.rs, append_publishing) with one turn's
-- events; gen.py fills in ARRAY['movement','message','message','message','tool_call','tool_result']::text[], ARRAY['{"name": "work", "piece": "chat"}'::jsonb,'{"role": "system", "content": "You are MAESTRO, an agent that carries out a user''s task step by step with tools.\nRules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. "}'::jsonb,'{"role": "user", "content": "<context>\ntime: 2026-12-02T09:49:40Z\ntask: 01a23628\njob: 1\n</context>\n\n<instruction>\njob 812\n</instruction>"}'::jsonb,'{"role": "assistant", "model": "scripted", "usage": {"promptTokens": 1978, "completionTokens": 5, "cachedPromptTokens": 0}, "content": "Looking.", "tool_calls": [{"id": "call_0_0", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}], "finish_reason": "tool_calls"}'::jsonb,'{"name": "list_files", "call_id": "call_0_0", "arguments": "{}", "message_seq": null}'::jsonb,'{"name": "list_files", "call_id": "call_0_0", "content": "(nothing)", "is_error": false}'::jsonb] and NULL::text.
WITH j AS (
    UPDATE jobs
       SET last_job_seq = last_job_seq + cardinality(ARRAY['movement','message','message','message','tool_call','tool_result']::text[]),
           status = COALESCE(NULL::text, status),
           wait_reason = CASE WHEN NULL::text IS NULL THEN wait_reason ELSE NULL END,
           result = COALESCE(NULL::text, result),
           error = COALESCE(NULL::text, error),
           branch = COALESCE(NULL::text, branch),
           next_retry_at = CASE WHEN NULL::text IS NULL THEN next_retry_at ELSE NULL END,
           lease_expires_at = CASE WHEN NULL::text IS NULL THEN lease_expires_at END,
           max_attempts = max_attempts + 0,
           pending_interjections = pending_interjections - 0,
           finished_at = CASE WHEN NULL::text IN ('succeeded', 'failed', 'cancelled') THEN now() ELSE finished_at END,
           updated_at = CASE WHEN NULL::text IS NULL THEN updated_at ELSE now() END
     WHERE id = :jid::uuid AND attempt = 1 AND status = 'running'
       AND (NULL::text IS DISTINCT FROM 'succeeded' OR pending_interjections = 0)
 RETURNING id, task_id, traceparent, last_job_seq - cardinality(ARRAY['movement','message','message','message','tool_call','tool_result']::text[]) AS base
), c AS (
    UPDATE comments SET delivered_at = now()
      FROM j WHERE cardinality('{}'::uuid[]) > 0
               AND comments.job_id = j.id AND comments.id = ANY('{}'::uuid[])
               AND comments.kind IN ('interjection', 'addition') AND comments.delivered_at IS NULL
), t AS (
    UPDATE tasks SET last_seq = last_seq + cardinality(ARRAY['movement','message','message','message','tool_call','tool_result']::text[]),
                     updated_at = CASE WHEN NULL::text IS NULL THEN updated_at ELSE now() END
      FROM j WHERE tasks.id = j.task_id
 RETURNING tasks.id, tasks.last_seq - cardinality(ARRAY['movement','message','message','message','tool_call','tool_result']::text[]) AS base
), e AS (
    INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
    SELECT t.id, t.base + x.ord, j.id, j.base + x.ord, x.kind,
           CASE WHEN x.kind = 'tool_call' THEN x.payload || jsonb_build_object(
                    'message_seq', COALESCE(
                        t.base + (SELECT max(m.ord) FROM unnest(ARRAY['movement','message','message','message','tool_call','tool_result']::text[]) WITH ORDINALITY AS m(kind, ord)
                                   WHERE m.kind = 'message' AND m.ord < x.ord),
                        (x.payload ->> 'message_seq')::bigint))
                ELSE x.payload END
      FROM j, t, unnest(ARRAY['movement','message','message','message','tool_call','tool_result']::text[], ARRAY['{"name": "work", "piece": "chat"}'::jsonb,'{"role": "system", "content": "You are MAESTRO, an agent that carries out a user''s task step by step with tools.\nRules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. Rules: act through the tools you are given. Read before you change something, and check your work. "}'::jsonb,'{"role": "user", "content": "<context>\ntime: 2026-12-02T09:49:40Z\ntask: 01a23628\njob: 1\n</context>\n\n<instruction>\njob 812\n</instruction>"}'::jsonb,'{"role": "assistant", "model": "scripted", "usage": {"promptTokens": 1978, "completionTokens": 5, "cachedPromptTokens": 0}, "content": "Looking.", "tool_calls": [{"id": "call_0_0", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}], "finish_reason": "tool_calls"}'::jsonb,'{"name": "list_files", "call_id": "call_0_0", "arguments": "{}", "message_seq": null}'::jsonb,'{"name": "list_files", "call_id": "call_0_0", "content": "(nothing)", "is_error": false}'::jsonb]) WITH ORDINALITY AS x(kind, payload, ord)
), d AS (SELECT set_config('maestro.publish_directly', '2 seconds', true) AS grace)
SELECT t.base, j.base AS job_base, t.id, j.traceparent, now(),
       d.grace <> '' AND EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.task_id = t.id) AS a2a_push
  FROM t, j, d;
-- The worker's append statement (shared/db/src/jobs.rs, append_publishing) with one turn's
-- events; gen.py fills in ARRAY['message','tool_call','tool_result','job_state']::text[], ARRAY['{"role": "assistant", "model": "scripted", "usage": {"promptTokens": 2030, "completionTokens": 5, "cachedPromptTokens": 1978}, "content": "Done.", "tool_calls": [{"id": "call_1_0", "type": "function", "function": {"name": "complete", "arguments": "{\"result\":\"ok\"}"}}], "finish_reason": "tool_calls"}'::jsonb,'{"name": "complete", "call_id": "call_1_0", "arguments": "{\"result\":\"ok\"}", "message_seq": null}'::jsonb,'{"name": "complete", "call_id": "call_1_0", "content": "ok", "is_error": false}'::jsonb,'{"result": "ok", "status": "succeeded", "attempt": 1}'::jsonb] and 'succeeded'::text.
WITH j AS (
    UPDATE jobs
       SET last_job_seq = last_job_seq + cardinality(ARRAY['message','tool_call','tool_result','job_state']::text[]),
           status = COALESCE('succeeded'::text, status),
           wait_reason = CASE WHEN 'succeeded'::text IS NULL THEN wait_reason ELSE NULL END,
           result = COALESCE(NULL::text, result),
           error = COALESCE(NULL::text, error),
           branch = COALESCE(NULL::text, branch),
           next_retry_at = CASE WHEN 'succeeded'::text IS NULL THEN next_retry_at ELSE NULL END,
           lease_expires_at = CASE WHEN 'succeeded'::text IS NULL THEN lease_expires_at END,
           max_attempts = max_attempts + 0,
           pending_interjections = pending_interjections - 0,
           finished_at = CASE WHEN 'succeeded'::text IN ('succeeded', 'failed', 'cancelled') THEN now() ELSE finished_at END,
           updated_at = CASE WHEN 'succeeded'::text IS NULL THEN updated_at ELSE now() END
     WHERE id = :jid::uuid AND attempt = 1 AND status = 'running'
       AND ('succeeded'::text IS DISTINCT FROM 'succeeded' OR pending_interjections = 0)
 RETURNING id, task_id, traceparent, last_job_seq - cardinality(ARRAY['message','tool_call','tool_result','job_state']::text[]) AS base
), c AS (
    UPDATE comments SET delivered_at = now()
      FROM j WHERE cardinality('{}'::uuid[]) > 0
               AND comments.job_id = j.id AND comments.id = ANY('{}'::uuid[])
               AND comments.kind IN ('interjection', 'addition') AND comments.delivered_at IS NULL
), t AS (
    UPDATE tasks SET last_seq = last_seq + cardinality(ARRAY['message','tool_call','tool_result','job_state']::text[]),
                     updated_at = CASE WHEN 'succeeded'::text IS NULL THEN updated_at ELSE now() END
      FROM j WHERE tasks.id = j.task_id
 RETURNING tasks.id, tasks.last_seq - cardinality(ARRAY['message','tool_call','tool_result','job_state']::text[]) AS base
), e AS (
    INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
    SELECT t.id, t.base + x.ord, j.id, j.base + x.ord, x.kind,
           CASE WHEN x.kind = 'tool_call' THEN x.payload || jsonb_build_object(
                    'message_seq', COALESCE(
                        t.base + (SELECT max(m.ord) FROM unnest(ARRAY['message','tool_call','tool_result','job_state']::text[]) WITH ORDINALITY AS m(kind, ord)
                                   WHERE m.kind = 'message' AND m.ord < x.ord),
                        (x.payload ->> 'message_seq')::bigint))
                ELSE x.payload END
      FROM j, t, unnest(ARRAY['message','tool_call','tool_result','job_state']::text[], ARRAY['{"role": "assistant", "model": "scripted", "usage": {"promptTokens": 2030, "completionTokens": 5, "cachedPromptTokens": 1978}, "content": "Done.", "tool_calls": [{"id": "call_1_0", "type": "function", "function": {"name": "complete", "arguments": "{\"result\":\"ok\"}"}}], "finish_reason": "tool_calls"}'::jsonb,'{"name": "complete", "call_id": "call_1_0", "arguments": "{\"result\":\"ok\"}", "message_seq": null}'::jsonb,'{"name": "complete", "call_id": "call_1_0", "content": "ok", "is_error": false}'::jsonb,'{"result": "ok", "status": "succeeded", "attempt": 1}'::jsonb]) WITH ORDINALITY AS x(kind, payload, ord)
), d AS (SELECT set_config('maestro.publish_directly', '2 seconds', true) AS grace)
SELECT t.base, j.base AS job_base, t.id, j.traceparent, now(),
       d.grace <> '' AND EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.task_id = t.id) AS a2a_push
  FROM t, j, d;
WITH s AS (SELECT set_config('synchronous_commit', 'off', true))
DELETE FROM outbox USING s WHERE relay_after IS NOT NULL
   AND msg_id = ANY(ARRAY(SELECT 'events:' || :tid::text || ':' || f FROM unnest(ARRAY[1, 2, 3, 9]) f));
WITH s AS (SELECT set_config('synchronous_commit', 'off', true))
DELETE FROM outbox USING s WHERE id IN (SELECT id FROM outbox WHERE relay_after IS NULL
                                          ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED);
