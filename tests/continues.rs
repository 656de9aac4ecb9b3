//! Continue (SPEC §3.3, §5) and the comment rows of SPEC §3.2 that reach a job before it runs.
//!
//! - A finished task continues twice — the same piece, then another — and the requests the
//!   LLM received show exactly the replay of §5: one system message, the earlier turns without
//!   `complete` (and without `transition` unless it is the last thread of the same piece),
//!   every call answered, no id twice; a same-piece Continue sends the same tools bytes and
//!   extends the previous job's last request byte for byte. The transcript keeps one thread
//!   per job and says nothing twice.
//! - A Continue is refused unless the latest job is over (409 naming its state), for a task of
//!   someone else (404) and for a piece or model that does not exist (422), changing nothing;
//!   an Idempotency-Key makes a repeat harmless. Racing Continues start one job, and the
//!   database itself refuses a second unfinished job.
//! - A comment while the job is queued joins its instruction (while it waits to retry, its next
//!   step); one that loses the race with the claim becomes an interjection; either way the
//!   model reads it exactly once. A follow-up job runs the piece the latest job ran.

use std::collections::HashSet;
use std::time::Duration;

use maestro_api::{ContinueTask, RoutedTo};
use maestro_domain::{CommentKind, EventKind, JobId, JobStatus};
use maestro_testkit::{Service, Stack, StackOptions, TaskExt, of_kind};
use serde_json::{Value, json};

const DRAFT_FINISH: &str = r#"
name: draft-finish
description: Draft a note, then finish it.
start_movement: draft
movements:
  - name: draft
    guidance: Draft the note.
    transitions:
      - condition: The draft exists.
        target: finish
  - name: finish
    guidance: Finish the note, then complete.
"#;

const SINGLE: &str = r#"
name: single
description: One movement.
start_movement: work
movements:
  - name: work
    guidance: Do the work, then complete.
"#;

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

/// The stack for the replay tests: the original job, then two continuations, each scripted
/// from its own instruction on (the latest Continue first: its requests hold both anchors).
async fn continue_stack() -> Stack {
    let scenarios = json!({"scenarios": [
        {"name": "polish", "match": "Write the note", "after": "Polish it",
         "turns": [call("complete", json!({"result": "polished"}))]},
        {"name": "summary", "match": "Write the note", "after": "Summarize the note",
         "turns": [
            // Its own call's id is one the replayed turns hold: renamed past all of them.
            call("read_file", json!({"path": "note.txt"})),
            call("complete", json!({"result": "a note with a title"}))
         ]},
        {"name": "title", "match": "Write the note", "after": "Add a title",
         "turns": [
            call("read_file", json!({"path": "note.txt"})),
            call("complete", json!({"result": "title added"}))
         ]},
        {"name": "first", "match": "Write the note",
         "turns": [
            {"text": "Drafting.", "tool_calls": [{"name": "write_file", "arguments": {"path": "note.txt", "content": "v1\n"}}]},
            call("transition", json!({"target": "finish", "reason": "drafted"})),
            call("complete", json!({"result": "note.txt written"}))
         ]}
    ]});
    let options = StackOptions::new(scenarios)
        .piece("draft-finish", DRAFT_FINISH)
        .piece("single", SINGLE);
    Stack::up(options).await
}

/// The recorded requests of one scenario, in order.
fn of_scenario<'a>(requests: &'a [Value], name: &str) -> Vec<&'a Value> {
    requests.iter().filter(|r| r["scenario"] == name).collect()
}

fn messages(request: &Value) -> &Vec<Value> {
    request["body"]["messages"].as_array().expect("messages")
}

fn raw<'a>(request: &'a Value, key: &str) -> &'a str {
    request[key].as_str().expect("raw bytes recorded")
}

fn content(message: &Value) -> &str {
    message["content"].as_str().unwrap_or_default()
}

/// §5's promises about a request's messages: one system message, first; every call answered
/// by a later tool message and every tool message answering an earlier call; no id twice.
fn assert_well_formed(messages: &[Value]) {
    let systems: Vec<usize> = (0..messages.len())
        .filter(|&i| messages[i]["role"] == "system")
        .collect();
    assert_eq!(systems, [0], "exactly one system message, first");
    let mut ids = HashSet::new();
    let mut waiting = HashSet::new();
    for message in messages {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let id = call["id"].as_str().expect("id").to_owned();
            assert!(ids.insert(id.clone()), "call id {id} used twice");
            waiting.insert(id);
        }
        if message["role"] == "tool" {
            let id = message["tool_call_id"].as_str().expect("tool_call_id");
            assert!(waiting.remove(id), "result {id} answers no earlier call");
        }
    }
    assert!(waiting.is_empty(), "unanswered calls: {waiting:?}");
}

fn call_names(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .map(|c| {
            c["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_continued_twice_replays_its_transcript_by_the_thread_rules() {
    let stack = continue_stack().await;
    let first = stack
        .run(&json!({"instruction": "Write the note.", "piece": "draft-finish"}))
        .await;
    assert_eq!(first.job().status, JobStatus::Succeeded, "{first:?}");
    let id = first.id();
    let job1 = first.job().id;

    // Continue with the same piece.
    let accepted = stack
        .continue_task(id, &ContinueTask::new("Add a title to the note."))
        .await
        .expect("continued");
    let job2 = accepted.job().id;
    assert_eq!(accepted.job().continued_from_job_id, Some(job1));
    assert_eq!(accepted.job().job_no, 2);
    let second = stack.wait_over(id).await;
    assert_eq!(second.job().status, JobStatus::Succeeded, "{second:?}");
    assert_eq!(second.job().result.as_deref(), Some("title added"));

    let requests = stack.llm.requests().await.expect("requests");
    let original = of_scenario(&requests, "first");
    let title = of_scenario(&requests, "title");
    assert_eq!((original.len(), title.len()), (3, 2));
    let (before, now) = (original[2], title[0]);
    assert_eq!(
        raw(now, "raw_tools"),
        raw(before, "raw_tools"),
        "the same piece sends the very same tools bytes"
    );
    let open = raw(before, "raw_messages")
        .strip_suffix(']')
        .expect("a JSON array");
    assert!(
        raw(now, "raw_messages").starts_with(&format!("{open},")),
        "the Continue's messages extend the previous job's last request byte for byte"
    );
    let sent = messages(now);
    assert_eq!(
        sent.len(),
        messages(before).len() + 1,
        "the replay is the earlier conversation without its `complete`, then the instruction"
    );
    let last = sent.last().expect("a message");
    assert_eq!(last["role"], "user");
    assert!(content(last).contains("<instruction>\nAdd a title to the note.\n</instruction>"));
    assert!(
        !content(last).contains("<handoff>"),
        "no handoff context: the turns replay"
    );
    assert_eq!(
        call_names(sent),
        ["write_file", "transition"],
        "the last thread of the same piece keeps its transition, drops its complete"
    );
    assert_well_formed(sent);

    // The prompt cache: the Continue's first request reuses the previous job's last prompt.
    let events = stack.events(id).await;
    let prompt_of = |job: JobId, nth: usize| {
        let answers: Vec<&maestro_domain::Event> = of_kind(&events, EventKind::Message)
            .filter(|e| e.job_id == job && e.payload["role"] == "assistant")
            .collect();
        let usage: maestro_domain::Usage =
            serde_json::from_value(answers[nth].payload["usage"].clone()).expect("usage");
        (usage.prompt_tokens, usage.cached_prompt_tokens)
    };
    let (previous_prompt, _) = prompt_of(job1, 2);
    let (_, cached) = prompt_of(job2, 0);
    assert!(
        cached as f64 >= 0.95 * previous_prompt as f64,
        "cached {cached} of the previous {previous_prompt} prompt tokens"
    );
    let continued: Vec<_> = of_kind(&events, EventKind::JobContinued).collect();
    assert_eq!(continued.len(), 1);
    assert_eq!(
        (continued[0].job_id, &continued[0].payload["from_job_id"]),
        (job2, &json!(job1))
    );
    let replay = of_kind(&events, EventKind::Replay)
        .find(|e| e.job_id == job2)
        .expect("the replay is on record");
    assert_eq!(replay.payload["threads"], 1);
    assert_eq!(replay.payload["same_piece"], true);

    // Continue with another piece.
    let accepted = stack
        .continue_task(
            id,
            &ContinueTask::new("Summarize the note.").piece("single"),
        )
        .await
        .expect("continued");
    let job3 = accepted.job().id;
    assert_eq!(accepted.job().piece.as_deref(), Some("single"));
    let third = stack.wait_over(id).await;
    assert_eq!(third.job().status, JobStatus::Succeeded, "{third:?}");

    let requests = stack.llm.requests().await.expect("requests");
    let summary = of_scenario(&requests, "summary");
    assert_eq!(summary.len(), 2);
    let sent = messages(summary[0]);
    for request in of_scenario(&requests, "title")
        .into_iter()
        .chain(summary.clone())
    {
        assert_well_formed(messages(request));
    }
    assert!(content(&sent[0]).contains("## Piece: single"));
    assert_eq!(
        call_names(sent),
        ["write_file", "read_file"],
        "another piece: no transition of any thread, no complete"
    );
    let users: Vec<&str> = sent
        .iter()
        .filter(|m| m["role"] == "user")
        .map(content)
        .collect();
    assert_eq!(
        users.len(),
        4,
        "two instructions, a movement's guidance, the new one"
    );
    assert!(users[0].contains("Write the note.") && users[2].contains("Add a title"));
    assert!(users[1].contains("now in `finish`"), "{}", users[1]);
    assert!(users[3].contains("Summarize the note."));
    let events = stack.events(id).await;
    let replay = of_kind(&events, EventKind::Replay)
        .find(|e| e.job_id == job3)
        .expect("the replay is on record");
    assert_eq!(replay.payload["threads"], 2);
    assert_eq!(replay.payload["same_piece"], false);

    // The transcript: one thread per job, each message once, where it was said.
    let transcript = stack.transcript(id).await.messages;
    let jobs: Vec<JobId> = transcript
        .iter()
        .map(|l| l.job_id)
        .fold(Vec::new(), |mut v, j| {
            if v.last() != Some(&j) {
                v.push(j);
            }
            v
        });
    assert_eq!(jobs, [job1, job2, job3], "one thread per job, in order");
    for job in [job1, job2, job3] {
        let thread: Vec<_> = transcript.iter().filter(|l| l.job_id == job).collect();
        assert_eq!(
            thread[0].message.role,
            maestro_domain::Role::System,
            "each thread opens with its system message"
        );
    }
    let said = |text: &str| {
        transcript
            .iter()
            .filter(|l| {
                l.message
                    .content
                    .as_deref()
                    .is_some_and(|c| c.contains(text))
            })
            .count()
    };
    assert_eq!(
        said("Write the note."),
        1,
        "the replay is not copied into later threads"
    );
    assert_eq!(said("Add a title"), 1);

    // A comment's follow-up runs the piece the latest job ran, without a replay.
    let routed = stack.comment(id, "Polish it.").await.expect("accepted");
    assert_eq!(routed.routed_to, RoutedTo::FollowUp);
    let fourth = stack.wait_over(id).await;
    assert_eq!(fourth.job().status, JobStatus::Succeeded, "{fourth:?}");
    assert_eq!(fourth.job().piece.as_deref(), Some("single"));
    assert_eq!(fourth.job().continued_from_job_id, None);
    let requests = stack.llm.requests().await.expect("requests");
    let polish = of_scenario(&requests, "polish");
    let sent = messages(polish[0]);
    assert!(content(&sent[0]).contains("## Piece: single"));
    assert_eq!(sent.len(), 2, "a follow-up opens fresh: system and user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continue_is_refused_unless_the_latest_job_is_over_and_a_repeat_is_harmless() {
    let scenarios = json!({"scenarios": [
        {"name": "ask", "match": "Ask me", "turns": [
            call("complete", json!({"result": "Which colour?", "status": "needs_user_input"}))
        ]},
        {"name": "slow", "match": "Take your time", "repeat_last": true, "turns": [
            {"delay_ms": 1500, "tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
        ]}
    ]});
    let stack = Stack::up(StackOptions::new(scenarios)).await;

    // Running: refused, naming the state.
    let id = stack
        .new_task(&json!({"instruction": "Take your time."}))
        .await;
    stack.wait(id, &[JobStatus::Running]).await;
    let running = stack
        .continue_task(id, &ContinueTask::new("more"))
        .await
        .expect_err("refused while running");
    assert_eq!(running.pair(), (409, "job_not_over"), "{running:?}");
    assert!(running.message.contains("running"), "{}", running.message);
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded);

    // Bad input: each a clear 4xx, nothing written.
    let cases = [
        (json!({"instruction": "  "}), 422, "invalid_instruction"),
        (
            json!({"instruction": "x", "piece": "nope"}),
            422,
            "unknown_piece",
        ),
        (
            json!({"instruction": "x", "model": "bad model!"}),
            422,
            "invalid_model",
        ),
    ];
    for (body, status, code) in cases {
        let error = stack.continue_task(id, &body).await.expect_err("refused");
        assert_eq!(error.pair(), (status, code), "{body}: {error:?}");
    }
    let unknown_field = stack
        .continue_task(id, &json!({"instruction": "x", "colour": "red"}))
        .await
        .expect_err("refused");
    assert!(
        (400..500).contains(&unknown_field.status),
        "{unknown_field:?}"
    );
    let not_yours = stack
        .bob()
        .continue_task(id, &ContinueTask::new("mine now"))
        .await
        .expect_err("refused");
    assert_eq!(not_yours.pair(), (404, "not_found"));
    let pool = &stack.db.pool;
    let jobs = |task: maestro_domain::TaskId| async move {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs WHERE task_id = $1")
            .bind(task.0)
            .fetch_one(pool)
            .await
            .expect("count")
    };
    assert_eq!(jobs(id).await, 1, "no refusal wrote a job");

    // An Idempotency-Key: the repeat answers, a different request under it conflicts.
    let send = |body: Value| {
        stack
            .http
            .post(stack.url(&format!("/api/local/tasks/{id}/continue")))
            .bearer_auth(&stack.token)
            .header("idempotency-key", "again-1")
            .json(&body)
            .send()
    };
    let first = send(json!({"instruction": "Take your time, again."}))
        .await
        .expect("sent");
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.expect("json");
    let repeat = send(json!({"instruction": "Take your time, again."}))
        .await
        .expect("sent");
    assert_eq!(
        repeat.status(),
        200,
        "a repeat is answered, not carried out"
    );
    assert!(repeat.headers().contains_key("idempotent-replayed"));
    let repeat: Value = repeat.json().await.expect("json");
    assert_eq!(repeat["latest_job"]["id"], first["latest_job"]["id"]);
    let other = send(json!({"instruction": "something else"}))
        .await
        .expect("sent");
    assert_eq!(other.status(), 409, "the key was used for another request");
    assert_eq!(jobs(id).await, 2, "one Continue, one job");
    stack.wait_over(id).await;

    // Paused for a question: answered, not continued.
    let asking = stack.new_task(&json!({"instruction": "Ask me."})).await;
    let paused = stack.settle(asking).await;
    assert_eq!(paused.job().status, JobStatus::WaitingHuman, "{paused:?}");
    let error = stack
        .continue_task(asking, &ContinueTask::new("go on"))
        .await
        .expect_err("refused while waiting");
    assert_eq!(error.pair(), (409, "job_not_over"));
    assert!(
        error.message.contains("answer its question"),
        "{}",
        error.message
    );

    // The database refuses a second unfinished job of a task, whatever the code does.
    let second = sqlx::query(
        "INSERT INTO jobs (id, task_id, job_no, status, max_attempts) VALUES ($1, $2, 99, 'queued', 3)",
    )
    .bind(uuid::Uuid::now_v7())
    .bind(asking.0)
    .execute(&stack.db.pool)
    .await;
    let error = second.expect_err("a second unfinished job is refused");
    assert!(
        error.to_string().contains("jobs_one_active_per_task"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_continues_start_one_job() {
    let scenarios = json!({"scenarios": [{"name": "quick", "repeat_last": true, "turns": [
        call("complete", json!({"result": "done"}))
    ]}]});
    let mut stack = Stack::up(StackOptions::new(scenarios)).await;
    let task = stack.run(&json!({"instruction": "once"})).await;
    let id = task.id();
    // No worker from here on: the winner's job stays queued, so a continue that arrives late
    // cannot find it already over and rightly carry on from it.
    stack.kill("worker").await;
    let attempts = (0..8).map(|i| {
        let body = ContinueTask::new(format!("carry on, take {i}"));
        let client = stack.client_as(&stack.token);
        async move { client.continue_task(id, &body).await }
    });
    let outcomes = futures::future::join_all(attempts).await;
    let accepted = outcomes.iter().filter(|o| o.is_ok()).count();
    assert_eq!(accepted, 1, "{outcomes:?}");
    for refused in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        assert_eq!(refused.status, 409, "{refused:?}");
    }
    stack
        .start(maestro_testkit::Service::Worker, "worker-2", &[])
        .await
        .expect("a worker starts");
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().job_no, 2, "exactly one more job");
}

/// A stack without a worker, so jobs stay queued until the test starts one.
async fn stack_without_worker(scenarios: Value) -> Stack {
    let mut options = StackOptions::new(scenarios);
    options.services.retain(|s| *s != Service::Worker);
    Stack::up(options).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comments_on_a_queued_job_join_its_instruction() {
    let scenarios = json!({"scenarios": [{"name": "join", "turns": [
        call("complete", json!({"result": "done, with both"}))
    ]}]});
    let mut stack = stack_without_worker(scenarios).await;
    let id = stack
        .new_task(&json!({"instruction": "Plan the trip."}))
        .await;
    for body in ["Use the train.", "Back by Sunday."] {
        let routed = stack.comment(id, body).await.expect("accepted");
        assert_eq!(routed.routed_to, RoutedTo::Instruction);
        assert_eq!(routed.comment.kind, CommentKind::Addition);
    }
    stack.add(Service::Worker, "worker").await;
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.job().job_no, 1, "no new job");

    let requests = stack.llm.requests().await.expect("requests");
    assert_eq!(requests.len(), 1, "read before the first answer");
    let sent = messages(&requests[0]);
    assert_eq!(
        sent.len(),
        2,
        "system and one user message: no interjection"
    );
    let user = content(&sent[1]);
    assert!(
        user.contains("<addition>\nThe user added, before this job started:\n\nUse the train.\n\nBack by Sunday.\n</addition>"),
        "{user}"
    );
    for comment in stack.comments(id).await {
        if comment.kind == CommentKind::Addition {
            assert!(comment.delivered_at.is_some(), "{comment:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comment_on_a_job_waiting_to_retry_reaches_its_next_step() {
    let scenarios = json!({"scenarios": [{"name": "retry", "turns": [
        call("list_files", json!({})),
        {"fail": {"status": 429, "body": "slow down", "retry_after": 3, "times": 1},
         "tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
    ]}]});
    let stack = Stack::up(StackOptions::new(scenarios).retry_backoff(100, 200)).await;
    let id = stack.new_task(&json!({"instruction": "List them."})).await;
    // The first turn is committed; the second waits out the rate limit.
    stack.wait(id, &[JobStatus::Retry]).await;
    let routed = stack
        .comment(id, "Include hidden files.")
        .await
        .expect("accepted");
    assert_eq!(routed.routed_to, RoutedTo::Instruction);
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.job().job_no, 1, "no new job");

    let requests = stack.llm.requests().await.expect("requests");
    let last = messages(requests.last().expect("a request"));
    let added = last.last().expect("a message");
    assert_eq!(added["role"], "user", "appended after the committed turn");
    assert!(
        content(added).starts_with("[The user added this to the task's instruction")
            && content(added).ends_with("Include hidden files."),
        "{added}"
    );
    assert_eq!(
        last.iter()
            .filter(|m| content(m).contains("Include hidden files."))
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comment_racing_the_claim_reaches_the_model_exactly_once() {
    let scenarios = json!({"scenarios": [{"name": "race", "repeat_last": true, "turns": [
        {"delay_ms": 900, "tool_calls": [{"name": "list_files", "arguments": {}}]},
        {"delay_ms": 300, "tool_calls": [{"name": "complete", "arguments": {"result": "read them all"}}]}
    ]}]});
    let mut stack = stack_without_worker(scenarios).await;
    let id = stack
        .new_task(&json!({"instruction": "Count to ten."}))
        .await;
    let client = stack.client_as(&stack.token);
    // Comment every 40 ms from before the worker starts until two went in as interjections:
    // the comments around the claim race it.
    let post = async {
        let mut posted = Vec::new();
        for i in 1..=60 {
            let body = format!("note number {i:02}.");
            let routed = client.comment(id, &body).await.expect("accepted");
            posted.push((body, routed.routed_to));
            let interjections = posted
                .iter()
                .filter(|(_, r)| *r == RoutedTo::Interjection)
                .count();
            if interjections == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        posted
    };
    let start = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        stack.add(Service::Worker, "worker").await;
    };
    let (posted, ()) = tokio::join!(post, start);
    let routes: Vec<RoutedTo> = posted.iter().map(|(_, r)| *r).collect();
    assert_eq!(routes[0], RoutedTo::Instruction, "before any worker ran");
    assert_eq!(
        routes.last(),
        Some(&RoutedTo::Interjection),
        "once it runs: {routes:?}"
    );
    assert!(
        routes
            .windows(2)
            .all(|w| !(w[0] == RoutedTo::Interjection && w[1] == RoutedTo::Instruction)),
        "additions stop once the job runs: {routes:?}"
    );
    let done = stack.wait_over(id).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.job().job_no, 1);

    let requests = stack.llm.requests().await.expect("requests");
    let last = requests.last().expect("a request");
    let conversation: String = messages(last)
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| content(m).to_owned())
        .collect();
    for (body, _) in &posted {
        assert_eq!(
            conversation.matches(body.as_str()).count(),
            1,
            "{body} reaches the model exactly once ({routes:?})"
        );
    }
    for comment in stack.comments(id).await {
        if matches!(
            comment.kind,
            CommentKind::Addition | CommentKind::Interjection
        ) {
            assert!(comment.delivered_at.is_some(), "{comment:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continue_resumed_after_a_crash_sends_the_same_conversation() {
    let scenarios = json!({"scenarios": [
        {"name": "resume", "match": "Keep a log", "after": "Append a line",
         "turns": [
            call("read_file", json!({"path": "log.txt"})),
            {"text": "Thinking about the next line for a good while before finishing.",
             "chunk_chars": 1, "chunk_delay_ms": 60,
             "tool_calls": [{"name": "complete", "arguments": {"result": "appended"}}]}
         ]},
        {"name": "first", "match": "Keep a log", "turns": [
            call("write_file", json!({"path": "log.txt", "content": "one\n"})),
            call("complete", json!({"result": "log started"}))
        ]}
    ]});
    let options = StackOptions::new(scenarios)
        .env("JOB_ACK_WAIT_MS", "1500")
        .worker_named("worker-a");
    let mut stack = Stack::up(options).await;
    let task = stack.run(&json!({"instruction": "Keep a log."})).await;
    let id = task.id();
    let job = stack
        .continue_task(id, &ContinueTask::new("Append a line."))
        .await
        .expect("continued")
        .job()
        .id;
    // The continuation's first turn is committed (its read's result): then kill the worker
    // while the second turn streams.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let events = stack.events(id).await;
        if of_kind(&events, EventKind::ToolResult).any(|e| e.job_id == job) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first turn commits"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    stack.kill("worker-a").await;
    stack.add(Service::Worker, "worker-b").await;
    let over = [JobStatus::Succeeded, JobStatus::Failed];
    let done = stack.wait_within(id, &over, Duration::from_secs(40)).await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.job().attempt, 2, "resumed by the second worker");

    let requests = stack.llm.requests().await.expect("requests");
    let second_turn: Vec<&Value> = of_scenario(&requests, "resume")
        .into_iter()
        .filter(|r| r["turn"] == 1)
        .collect();
    assert_eq!(second_turn.len(), 2, "asked once per claim");
    assert_eq!(
        raw(second_turn[0], "raw_messages"),
        raw(second_turn[1], "raw_messages"),
        "the resumed job rebuilt the very same conversation, replay included"
    );
    let events = stack.events(id).await;
    assert_eq!(
        of_kind(&events, EventKind::Replay)
            .filter(|e| e.job_id == job)
            .count(),
        1,
        "the replay is recorded once, by the claim that opened the job"
    );
    let log = std::fs::read_to_string(stack.process("worker-b").log_path()).expect("log");
    assert!(!log.contains("differs"), "the recomputed replay matches");
}
