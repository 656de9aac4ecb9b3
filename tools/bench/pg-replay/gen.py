#!/usr/bin/env python3
"""Write job.sql: one reference job's statements as the services send them (the gateway's
create, the worker's claim and two turns, the relay's deletes), as a pgbench script."""
import json
import pathlib

HERE = pathlib.Path(__file__).parent


def lit(s):
    return "'" + s.replace("'", "''") + "'"


def kinds(ks):
    return "ARRAY[" + ",".join(lit(k) for k in ks) + "]::text[]"


def payloads(ps):
    return "ARRAY[" + ",".join(lit(json.dumps(p)) + "::jsonb" for p in ps) + "]"


SYSTEM = {"role": "system", "content": "You are MAESTRO, an agent that carries out a user's task "
          "step by step with tools.\n" + "Rules: act through the tools you are given. Read before "
          "you change something, and check your work. " * 22}
USER = {"role": "user", "content": "<context>\ntime: 2026-12-02T09:49:40Z\ntask: 01a23628\njob: 1\n"
        "</context>\n\n<instruction>\njob 812\n</instruction>"}


def assistant(prompt, cached, text, name, arguments, call):
    return {"role": "assistant", "model": "scripted",
            "usage": {"promptTokens": prompt, "completionTokens": 5, "cachedPromptTokens": cached},
            "content": text, "tool_calls": [{"id": call, "type": "function",
                                             "function": {"name": name, "arguments": arguments}}],
            "finish_reason": "tool_calls"}


TURN1 = (["movement", "message", "message", "message", "tool_call", "tool_result"], [
    {"name": "work", "piece": "chat"}, SYSTEM, USER,
    assistant(1978, 0, "Looking.", "list_files", "{}", "call_0_0"),
    {"name": "list_files", "call_id": "call_0_0", "arguments": "{}", "message_seq": None},
    {"name": "list_files", "call_id": "call_0_0", "content": "(nothing)", "is_error": False}])
TURN2 = (["message", "tool_call", "tool_result", "job_state"], [
    assistant(2030, 1978, "Done.", "complete", '{"result":"ok"}', "call_1_0"),
    {"name": "complete", "call_id": "call_1_0", "arguments": '{"result":"ok"}', "message_seq": None},
    {"name": "complete", "call_id": "call_1_0", "content": "ok", "is_error": False},
    {"result": "ok", "status": "succeeded", "attempt": 1}])

CREATE = """SELECT gen_random_uuid() AS tid, gen_random_uuid() AS jid, gen_random_uuid() AS cid \\gset
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
), d AS (SELECT set_config('maestro.writes_range_row', '2 seconds', true) AS grace
), event AS (
    INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
    SELECT job.task_id, 1, job.id, 1, 'job_state', '{"status": "queued", "attempt": 0}' FROM job, d
), range AS (
    INSERT INTO outbox (topic, task_id, msg_id, payload, relay_after)
    SELECT 'events', job.task_id, 'events:' || job.task_id || ':1', '{"first": 1, "last": 1}', now() + d.grace::interval
      FROM job, d WHERE d.grace <> ''
)
SELECT task.created_at, d.grace <> '' AS direct FROM task, d;
"""

# The writers' notices name each statement's range row; the relay deletes them (with an
# asynchronous commit). The task's notice is the final turn's, published by its writer
# (migration 0026): the relay has no row of it to publish and delete.
FORGET = """WITH s AS (SELECT set_config('synchronous_commit', 'off', true))
DELETE FROM outbox USING s WHERE relay_after IS NOT NULL
   AND msg_id = ANY(ARRAY(SELECT 'events:' || :tid::text || ':' || f FROM unnest(ARRAY[1, 2, 3, 9]) f));
"""


# The notices' CTEs and columns of a turn with a notice-worthy event (migration 0026).
NOTICES = """), n AS (
    INSERT INTO notifications (id, owner, kind, task_id, job_id, event_seq, payload)
    SELECT x.id, t.owner, x.notice, t.id, j.id, t.base + x.ord,
           notice_payload(x.notice, x.kind, x.payload, x.id, t.id, j.id, t.base + x.ord, t.owner,
                          t.schedule_id, now())
      FROM j, t, (SELECT uuid_v7() AS id, notice_kind(u.kind, u.payload) AS notice, u.kind,
                         u.payload, u.ord
                    FROM unnest($KINDS, $PAYLOADS) WITH ORDINALITY AS u(kind, payload, ord)
                   WHERE notice_kind(u.kind, u.payload) IS NOT NULL) x
    ON CONFLICT (task_id, event_seq) DO NOTHING
 RETURNING id, kind, payload
), wd AS (
    INSERT INTO webhook_deliveries (id, subscription_id, notification_id, status)
    SELECT gen_random_uuid(), s.id, n.id, 'pending'
      FROM n, t, webhook_subscriptions s
     WHERE s.owner = t.owner AND s.deleted_at IS NULL AND s.disabled_at IS NULL
       AND n.kind = ANY (s.event_types)
 RETURNING id
), wo AS (
    INSERT INTO outbox (topic, kind, msg_id, payload, traceparent)
    SELECT 'webhook_delivery', NULL, 'delivery:' || wd.id, jsonb_build_object('delivery_id', wd.id),
           j.traceparent
      FROM wd, j
"""
NOTICED = """(SELECT COALESCE(jsonb_agg(jsonb_build_object('id', n.id, 'kind', n.kind, 'payload', n.payload)),
                 '[]') FROM n) AS notices,
       EXISTS (SELECT 1 FROM wd) AS deliveries"""


def append(turn, to, notices=False):
    # The file's header comment names the placeholders: leave it out, or they are filled in
    # there too (and a multi-line one ends the comment).
    template = "\n".join(line for line in (HERE / "append.sql").read_text().splitlines()
                          if not line.startswith("--")) + "\n"
    template = (template.replace("$WRITES_NOTICES", "'on'" if notices else "''")
                .replace("$NOTICES", NOTICES if notices else "")
                .replace("$NOTICED", NOTICED if notices else "'[]'::jsonb AS notices, false AS deliveries"))
    return (template.replace("$KINDS", kinds(turn[0])).replace("$PAYLOADS", payloads(turn[1]))
            .replace("$TO", to))


script = (CREATE + (HERE / "claim.sql").read_text() + append(TURN1, "NULL::text")
          + append(TURN2, "'succeeded'::text", notices=True) + FORGET)
(HERE / "job.sql").write_text(script)
