-- A database that has seen some work: 20,000 finished tasks with a job and five events each.
INSERT INTO tasks (id, owner, instruction, piece, last_seq, job_count)
SELECT gen_random_uuid(), 'bench', 'do something', 'default', 5, 1 FROM generate_series(1,20000);
INSERT INTO jobs (id, task_id, job_no, status, profile, max_attempts, last_job_seq)
SELECT gen_random_uuid(), id, 1, 'succeeded', 'default', 3, 5 FROM tasks;
INSERT INTO events (task_id, seq, job_id, job_seq, kind, payload)
SELECT j.task_id, s, j.id, s, 'message', '{"text":"hello there, this is a message of some length","usage":{"prompt_tokens":1000,"completion_tokens":20}}'::jsonb
FROM jobs j, generate_series(1,5) s;
VACUUM ANALYZE;
DELETE FROM outbox;
VACUUM ANALYZE outbox;
