//! Spaces and identity (docs/spaces.md), against the real stack.
//!
//! - Every task route and stream follows the task's visibility and the caller's role: 404 for
//!   what a caller may not see, 403 for what they may read but not act on (REST, SSE, A2A).
//! - Spaces: members and roles, owners-only changes, the last owner kept, `If-Match`,
//!   archive; a space's defaults, profiles and tool policy reach its tasks' jobs.
//! - Worker profiles and models route: a job goes to a worker that serves both, and one that
//!   nobody serves stays queued, saying why, until a worker that does comes up.
//! - API tokens made, listed and revoked by an admin, stored hashed, with an expiry.
//! - A space's persistent workspace: two tasks build on each other's files, each success
//!   committed to `main` with its task and job, a failure kept on its branch.
//! - Files attached to a new task (multipart): checked, stored, placed in the workspace
//!   before the first job, listed and downloadable; bad files refused, nothing created.
//! - OIDC/JWT bearer tokens checked against the identity provider's keys (JWKS).
//! - Secrets at rest (MCP tokens, webhook secrets) sealed, and sealed again under a new key.

use std::time::Duration;

use maestro_api::{Space, TokenInfo, WebhookList};
use maestro_domain::{EventKind, JobStatus, Visibility};
use maestro_testkit::{Client, Service, Stack, StackOptions, TaskExt, of_kind};
use reqwest::Method;
use serde_json::{Value, json};

fn scenarios() -> Value {
    json!({"scenarios": [
        {"name": "attached", "match": "read the attachment",
         "turns": [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "attachments/notes.md"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "read it"}}]}
         ]},
        {"name": "reads", "match": "read the note",
         "turns": [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "note.txt"}}]},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "../spaces"}}]},
            {"tool_calls": [{"name": "shell", "arguments": {"command": "cat ../spaces/*/note.txt; ls ../spaces"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "read it"}}]}
         ]},
        {"name": "slow-draft", "match": "draft slowly",
         "turns": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "draft2.txt", "content": "work in progress"}}]},
            {"text": "Thinking this over very slowly, one letter at a time, so it can be cancelled.",
             "chunk_chars": 1, "chunk_delay_ms": 50,
             "tool_calls": [{"name": "complete", "arguments": {"result": "never"}}]}
         ]},
        {"name": "drafts", "match": "draft and give up",
         "turns": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "draft.txt", "content": "half done"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"status": "decline", "result": "cannot finish"}}]}
         ]},
        {"name": "writes", "match": "write a note",
         "turns": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "note.txt", "content": "hello"}}]},
            {"tool_calls": [{"name": "complete", "arguments": {"result": "wrote it"}}]}
         ]},
        {"name": "done", "turns": [
            {"tool_calls": [{"name": "complete", "arguments": {"result": "done"}}]}
        ], "repeat_last": true}
    ]})
}

async fn space(client: &Client, body: Value) -> Space {
    client
        .call(Method::POST, "/api/local/spaces", Some(&body))
        .await
        .unwrap_or_else(|e| panic!("the space is created: {e}"))
}

/// The status of a call (its body left aside).
async fn status(client: &Client, method: Method, path: &str, body: Option<Value>) -> u16 {
    client
        .api(method.clone(), path, body.as_ref())
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
        .0
}

/// Every read route of a task, as `(method, path)`.
fn reads(id: &str) -> Vec<String> {
    [
        "",
        "/events",
        "/transcript",
        "/subtasks",
        "/comments",
        "/required-actions",
    ]
    .iter()
    .map(|r| format!("/api/local/tasks/{id}{r}"))
    .collect()
}

/// What `client` gets from every read route of task `id` (and its SSE stream, and A2A's
/// `GetTask`): all `expected`.
async fn reads_answer(stack: &Stack, client: &Client, token: &str, id: &str, expected: u16) {
    for path in reads(id) {
        assert_eq!(
            status(client, Method::GET, &path, None).await,
            expected,
            "GET {path}"
        );
    }
    let job = task_job(stack, id).await;
    // Not JSON: the file the task wrote, and its streams.
    for path in [
        format!("/api/local/tasks/{id}/files/note.txt"),
        format!("/api/local/tasks/{id}/stream"),
        format!("/api/local/tasks/{id}/jobs/{job}/stream"),
    ] {
        let stream = stack
            .http
            .get(stack.url(&path))
            .bearer_auth(token)
            .send()
            .await
            .expect("the stream answers");
        assert_eq!(stream.status().as_u16(), expected, "GET {path}");
        drop(stream);
    }
    let got = a2a(stack, token, "GetTask", json!({"id": id})).await;
    assert_eq!(
        got.get("error").is_none(),
        expected == 200,
        "A2A GetTask as expected ({expected}): {got}"
    );
}

/// Task `id`'s latest job, as its creator (alice) sees it.
async fn task_job(stack: &Stack, id: &str) -> String {
    let task = stack.client_as("test-token-alice").task(id).await;
    task.job().id.to_string()
}

/// An A2A JSON-RPC call (protocol 1.0) as the owner of `token`: the JSON-RPC answer.
async fn a2a(stack: &Stack, token: &str, method: &str, params: Value) -> Value {
    stack
        .http
        .post(stack.url("/a2a/v1"))
        .bearer_auth(token)
        .header("a2a-version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("A2A answers")
        .json()
        .await
        .expect("JSON-RPC")
}

/// What `client` gets from every acting route of task `id`: all `expected` (the answers to
/// acts that pass the access check differ by route, so only refusals are compared).
async fn acts_refused(client: &Client, id: &str, expected: u16) {
    let rid = uuid::Uuid::now_v7();
    let acts = [
        (
            format!("/api/local/tasks/{id}/comments"),
            json!({"body": "hi"}),
        ),
        (format!("/api/local/tasks/{id}/cancel"), json!({})),
        (
            format!("/api/local/tasks/{id}/continue"),
            json!({"instruction": "more"}),
        ),
        (
            format!("/api/local/tasks/{id}/required-actions/{rid}/decide"),
            json!({"decision": "approve"}),
        ),
        (
            format!("/api/local/tasks/{id}/tool-requests/{rid}/decide"),
            json!({"decision": "approve"}),
        ),
        (
            format!("/api/local/tasks/{id}/package-requests/{rid}/decide"),
            json!({"decision": "deny"}),
        ),
    ];
    for (path, body) in acts {
        assert_eq!(
            status(client, Method::POST, &path, Some(body)).await,
            expected,
            "POST {path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_route_follows_visibility_and_role() {
    let stack = Stack::up(StackOptions::new(scenarios())).await;
    let (alice, bob, carol) = (
        stack.client_as("test-token-alice"),
        stack.bob(),
        stack.carol(),
    );
    // dave: a token an admin makes, in no space.
    let dave: TokenInfo = alice
        .call(
            Method::POST,
            "/api/local/admin/tokens",
            Some(&json!({"owner": "dave", "name": "dave's laptop"})),
        )
        .await
        .expect("alice is an admin");
    let dave_token = dave.token.clone().expect("shown once");
    let dave = stack.client_as(&dave_token);

    let s = space(
        &alice,
        json!({"name": "Research", "members": [
            {"member": "bob", "role": "editor"}, {"member": "carol", "role": "viewer"}
        ]}),
    )
    .await;
    assert_eq!(s.space.members.len(), 3, "{s:?}");
    let shared = alice
        .run(&json!({"instruction": "write a note (shared)", "space_id": s.id()}))
        .await;
    assert_eq!(
        shared.task.visibility,
        Visibility::Space,
        "a space's default"
    );
    assert_eq!(shared.task.space_id, Some(s.id()));
    let private = alice
        .run(&json!({"instruction": "write a note (mine only)", "visibility": "private"}))
        .await;
    let public = alice
        .run(&json!({"instruction": "write a note (for all)", "visibility": "public"}))
        .await;
    let (shared, private, public) = (
        shared.id().to_string(),
        private.id().to_string(),
        public.id().to_string(),
    );

    // Reads: the space's members see its `space` task; nobody else sees the private one;
    // everyone sees the public one.
    reads_answer(&stack, &alice, "test-token-alice", &private, 200).await;
    reads_answer(&stack, &bob, "test-token-bob", &shared, 200).await;
    reads_answer(&stack, &carol, "test-token-carol", &shared, 200).await;
    reads_answer(&stack, &dave, &dave_token, &shared, 404).await;
    reads_answer(&stack, &bob, "test-token-bob", &private, 404).await;
    reads_answer(&stack, &carol, "test-token-carol", &private, 404).await;
    reads_answer(&stack, &dave, &dave_token, &public, 200).await;

    // Acts: a viewer may read but not act (403); who may not see gets 404.
    acts_refused(&carol, &shared, 403).await;
    acts_refused(&dave, &public, 403).await;
    acts_refused(&dave, &shared, 404).await;
    acts_refused(&bob, &private, 404).await;
    // An editor acts: a comment on the finished task starts a follow-up job, which runs.
    bob.comment(&shared, "one more thing")
        .await
        .expect("an editor comments");
    let after = bob.wait(&shared, &[JobStatus::Succeeded]).await;
    assert_eq!(after.job().job_no, 2, "{after:?}");
    // A2A: a viewer cannot send into the task; the editor can read it.
    let message = json!({"message": {"messageId": "m-carol", "role": "ROLE_USER",
                                      "taskId": shared, "parts": [{"text": "let me in"}]}});
    let sent = a2a(&stack, "test-token-carol", "SendMessage", message).await;
    assert!(sent.get("error").is_some(), "a viewer cannot send: {sent}");
    for (token, what) in [
        ("test-token-carol", "a viewer"),
        (dave_token.as_str(), "an outsider"),
    ] {
        let cancelled = a2a(&stack, token, "CancelTask", json!({"id": shared})).await;
        assert!(
            cancelled.get("error").is_some(),
            "{what} cannot cancel: {cancelled}"
        );
        let pushes = a2a(
            &stack,
            token,
            "ListTaskPushNotificationConfigs",
            json!({"taskId": shared}),
        )
        .await;
        // Push configs carry the creator's credentials: acting, not reading.
        assert!(
            pushes.get("error").is_some(),
            "{what} and the push configs: {pushes}"
        );
    }

    // Listings: each sees their own and their spaces' non-private tasks.
    let listed = |page: Value| -> Vec<String> {
        page["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| t["id"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let (_, page) = carol
        .api(Method::GET, "/api/local/tasks", None)
        .await
        .expect("list");
    let carols = listed(page);
    assert!(
        carols.contains(&shared) && !carols.contains(&private),
        "{carols:?}"
    );
    let (_, page) = dave
        .api(
            Method::GET,
            &format!("/api/local/tasks?space={}", s.id()),
            None,
        )
        .await
        .expect("list");
    assert!(listed(page).is_empty(), "dave sees nothing of the space");
    let (_, page) = bob
        .api(
            Method::GET,
            &format!("/api/local/tasks?space={}", s.id()),
            None,
        )
        .await
        .expect("list");
    assert_eq!(listed(page), vec![shared.clone()]);

    // Creating in the space: editors yes, viewers 403, others 404; the archived space 409.
    let new = json!({"instruction": "in the space", "space_id": s.id()});
    let bobs = bob.try_create(&new).await.expect("an editor creates").id();
    for visibility in ["private", "public"] {
        let refused = alice
            .try_create(&json!({"instruction": "x", "space_id": s.id(), "visibility": visibility}))
            .await
            .expect_err("a space's tasks are `space`");
        assert_eq!(refused.pair(), (422, "invalid_visibility"), "{visibility}");
    }
    // Only an admin sets a space's tool policy (it grants its jobs' permissions).
    let refused = bob
        .call::<Space>(
            Method::POST,
            "/api/local/spaces",
            Some(&json!({"name": "mine", "policy": {"network": true}})),
        )
        .await
        .expect_err("bob is no admin");
    assert_eq!(refused.pair(), (403, "forbidden"));
    assert_eq!(
        carol.try_create(&new).await.expect_err("viewer").pair(),
        (403, "forbidden")
    );
    assert_eq!(
        dave.try_create(&new).await.expect_err("outsider").pair(),
        (404, "not_found")
    );

    // The space itself: members read it, only owners change it.
    let path = format!("/api/local/spaces/{}", s.id());
    assert_eq!(status(&carol, Method::GET, &path, None).await, 200);
    assert_eq!(status(&dave, Method::GET, &path, None).await, 404);
    let rename = json!({"name": "Research 2"});
    assert_eq!(
        status(&bob, Method::PATCH, &path, Some(rename.clone())).await,
        403
    );
    let renamed: Space = alice
        .call(Method::PATCH, &path, Some(&rename))
        .await
        .expect("the owner renames it");
    assert_eq!(renamed.space.name, "Research 2");
    assert!(renamed.space.version > s.space.version);
    let stale = stack
        .http
        .patch(stack.url(&path))
        .bearer_auth("test-token-alice")
        .header("if-match", s.space.version.to_string())
        .json(&json!({"description": "late"}))
        .send()
        .await
        .expect("answers");
    assert_eq!(stale.status().as_u16(), 412, "a stale If-Match");
    let last_owner = status(
        &alice,
        Method::PUT,
        &format!("{path}/members/alice"),
        Some(json!({"role": "editor"})),
    )
    .await;
    assert_eq!(last_owner, 409, "the last owner stays");
    // Bob leaves: the space's tasks are gone for him.
    assert_eq!(
        status(&bob, Method::DELETE, &format!("{path}/members/bob"), None).await,
        204
    );
    assert_eq!(
        status(
            &bob,
            Method::GET,
            &format!("/api/local/tasks/{shared}"),
            None
        )
        .await,
        404
    );
    assert_eq!(
        status(&bob, Method::GET, &format!("/api/local/tasks/{bobs}"), None).await,
        404,
        "his own task in the space too"
    );
    // Archived: no new task, the old ones stay readable.
    assert_eq!(
        status(&alice, Method::POST, &format!("{path}/archive"), None).await,
        200
    );
    assert_eq!(
        alice.try_create(&new).await.expect_err("archived").pair(),
        (409, "space_archived")
    );
    assert_eq!(
        status(
            &carol,
            Method::GET,
            &format!("/api/local/tasks/{shared}"),
            None
        )
        .await,
        200
    );

    // Bad input: a clear 422 and nothing stored.
    for (body, code) in [
        (json!({"name": ""}), "invalid_name"),
        (
            json!({"name": "x", "policy": {"allowed_toolz": []}}),
            "invalid_policy",
        ),
        (
            json!({"name": "x", "profile": "no spaces"}),
            "invalid_profile",
        ),
        (
            json!({"name": "x", "profiles": ["a"], "profile": "b"}),
            "invalid_profile",
        ),
        (
            json!({"name": "x", "members": [{"member": "bad name", "role": "viewer"}]}),
            "invalid_member",
        ),
        (
            json!({"name": "x", "default_piece": "nope"}),
            "unknown_piece",
        ),
    ] {
        let refused = alice
            .call::<Space>(Method::POST, "/api/local/spaces", Some(&body))
            .await
            .expect_err("refused");
        assert_eq!(refused.pair(), (422, code), "{body}");
    }
    let (_, spaces) = alice
        .api(Method::GET, "/api/local/spaces?archived=true", None)
        .await
        .expect("list");
    assert_eq!(
        spaces["spaces"].as_array().map(Vec::len),
        Some(1),
        "{spaces}"
    );
    let refused = alice
        .try_create(&json!({"instruction": "x", "visibility": "space"}))
        .await
        .expect_err("space visibility without a space");
    assert_eq!(refused.pair(), (422, "invalid_visibility"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spaces_defaults_and_tool_policy_reach_its_jobs() {
    let piece = "name: careful\ndescription: Careful work.\nmovements:\n  - name: only\n";
    let stack = Stack::up(StackOptions::new(scenarios()).piece("careful", piece)).await;
    let alice = stack.client_as("test-token-alice");
    // The space's policy lets write_file run only with a person's approval.
    let s = space(
        &alice,
        json!({"name": "Careful", "default_piece": "careful",
               "policy": {"allowed_tools": ["*"], "gated_tools": ["write_file"]}}),
    )
    .await;
    let gated = alice
        .create(&json!({"instruction": "write a note", "space_id": s.id()}))
        .await;
    assert_eq!(gated.task.piece, "careful", "the space's default piece");
    let waiting = alice
        .wait(gated.id(), &[JobStatus::WaitingHuman, JobStatus::Succeeded])
        .await;
    assert_eq!(waiting.job().status, JobStatus::WaitingHuman, "{waiting:?}");
    let items = alice.required_actions(gated.id()).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].detail["tool"], "write_file", "{items:?}");
    // Outside the space the deployment's policy lets it run.
    let free = alice.run(&json!({"instruction": "write a note"})).await;
    assert_eq!(free.job().status, JobStatus::Succeeded, "{free:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_go_to_the_workers_that_serve_their_profile_and_model() {
    let piece = "name: gpu-work\nprofile: gpu\nmodel: big-model\nmovements:\n  - name: only\n";
    let mut stack = Stack::up(StackOptions::new(scenarios()).piece("gpu-work", piece)).await;
    // Its NATS_URL lists a server that is not there first, as a cluster's seeds may: it
    // connects to the one that is.
    let seeds = format!("nats://127.0.0.1:1,{}", stack.nats.url);
    stack
        .start(
            Service::Worker,
            "gpu-worker",
            &[
                ("WORKER_PROFILES", "gpu"),
                ("WORKER_MODELS", "big-model"),
                ("LLM_MODEL", "big-model"),
                ("NATS_URL", &seeds),
            ],
        )
        .await
        .expect("a gpu worker starts");
    let alice = stack.client_as("test-token-alice");
    let ran_on = |events: Vec<maestro_domain::Event>| -> Vec<String> {
        of_kind(&events, EventKind::JobState)
            .filter_map(|e| e.payload["worker_id"].as_str().map(str::to_owned))
            .collect()
    };

    // Profile gpu: the gpu worker runs it (its model, the one it serves).
    let gpu = alice
        .run(&json!({"instruction": "on the gpu", "profile": "gpu"}))
        .await;
    assert_eq!(gpu.task.profile, "gpu");
    assert_eq!(ran_on(alice.events(gpu.id()).await), vec!["gpu-worker"]);
    // A space whose tasks go to gpu by default.
    let s = space(
        &alice,
        json!({"name": "GPU", "profile": "gpu", "profiles": ["gpu"]}),
    )
    .await;
    let in_space = alice
        .run(&json!({"instruction": "in the gpu space", "space_id": s.id()}))
        .await;
    assert_eq!(
        ran_on(alice.events(in_space.id()).await),
        vec!["gpu-worker"]
    );
    let refused = alice
        .try_create(&json!({"instruction": "x", "space_id": s.id(), "profile": "default"}))
        .await
        .expect_err("a profile the space does not allow");
    assert_eq!(refused.pair(), (422, "invalid_profile"));
    // A piece that names a profile and a model: its tasks go there, with that model.
    let by_piece = alice
        .run(&json!({"instruction": "by its piece", "piece": "gpu-work"}))
        .await;
    assert_eq!(by_piece.task.profile, "gpu");
    assert_eq!(by_piece.task.model.as_deref(), Some("big-model"));
    assert_eq!(
        ran_on(alice.events(by_piece.id()).await),
        vec!["gpu-worker"]
    );
    // Over A2A, the same defaults: the skill's (piece's) profile and model, or the space's.
    let a2a_cases = [
        (json!({"skill": "gpu-work"}), "m-piece", None),
        (json!({"maestro/space": s.id()}), "m-space", Some(s.id())),
    ];
    for (metadata, message_id, in_space) in a2a_cases {
        let message = json!({"message": {"messageId": message_id, "role": "ROLE_USER",
                                         "parts": [{"text": "over A2A"}], "metadata": metadata}});
        let sent = a2a(&stack, "test-token-alice", "SendMessage", message).await;
        let id = sent["result"]["task"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {sent}"))
            .to_owned();
        let done = alice.wait(&id, &[JobStatus::Succeeded]).await;
        assert_eq!(done.task.profile, "gpu", "{message_id}: {done:?}");
        assert_eq!(done.task.space_id, in_space, "{message_id}");
        assert_eq!(ran_on(alice.events(&id).await), vec!["gpu-worker"]);
    }
    // Schedules resolve their template as a task created then would be: in a space (its
    // profile), or by their piece (its profile and model).
    for (template, model) in [
        (
            json!({"instruction": "scheduled in the space", "space_id": s.id()}),
            None,
        ),
        (
            json!({"instruction": "scheduled by piece", "piece": "gpu-work"}),
            Some("big-model"),
        ),
    ] {
        let schedule: Value = alice
            .call(
                Method::POST,
                "/api/local/schedules",
                Some(&json!({"cron": "0 0 1 1 *", "task": template})),
            )
            .await
            .expect("a schedule");
        assert_eq!(schedule["task"]["profile"], "gpu", "{schedule}");
        assert_eq!(schedule["task"]["model"].as_str(), model, "{schedule}");
        let path = format!(
            "/api/local/schedules/{}/run",
            schedule["id"].as_str().expect("id")
        );
        let run: Value = alice
            .call(Method::POST, &path, None::<&Value>)
            .await
            .expect("run now");
        let id = run["task_id"].as_str().expect("its task").to_owned();
        let done = alice.wait(&id, &[JobStatus::Succeeded]).await;
        assert_eq!(done.task.profile, "gpu", "{done:?}");
        assert_eq!(
            done.task.space_id,
            schedule["task"]["space_id"].as_str().map(|_| s.id())
        );
        if done.task.space_id.is_some() {
            assert_eq!(done.task.visibility, maestro_domain::Visibility::Space);
        }
        assert_eq!(done.task.model.as_deref(), model);
        assert_eq!(ran_on(alice.events(&id).await), vec!["gpu-worker"]);
    }
    // One taken out of a space does not start tasks there any more: their schedules there
    // are paused, and a run by hand is refused.
    let bob = stack.bob();
    let shared = space(
        &alice,
        json!({"name": "Shared", "members": [{"member": "bob", "role": "editor"}]}),
    )
    .await;
    let bobs: Value = bob
        .call(
            Method::POST,
            "/api/local/schedules",
            Some(&json!({"cron": "* * * * *", "task": {"instruction": "bob's", "space_id": shared.id()}})),
        )
        .await
        .expect("an editor schedules tasks in the space");
    let bobs_path = format!("/api/local/schedules/{}", bobs["id"].as_str().expect("id"));
    assert_eq!(bobs["status"], "active");
    let removed = status(
        &alice,
        Method::DELETE,
        &format!("/api/local/spaces/{}/members/bob", shared.id()),
        None,
    )
    .await;
    assert_eq!(removed, 204);
    let paused: Value = bob
        .call(Method::GET, &bobs_path, None::<&Value>)
        .await
        .expect("bob's schedule");
    assert_eq!(paused["status"], "paused", "{paused}");
    assert_eq!(
        status(&bob, Method::POST, &format!("{bobs_path}/run"), None).await,
        404
    );
    assert_eq!(
        status(&bob, Method::POST, &format!("{bobs_path}/resume"), None).await,
        404
    );
    // Default profile: the default worker.
    let plain = alice.run(&json!({"instruction": "anywhere"})).await;
    assert_eq!(ran_on(alice.events(plain.id()).await), vec!["worker"]);

    // A model the gpu worker does not serve: never claimed, queued with the reason.
    let other = alice
        .create(&json!({"instruction": "other model", "profile": "gpu", "model": "other-model"}))
        .await;
    // A profile nobody serves: queued with the reason.
    let nobody = alice
        .create(&json!({"instruction": "nobody", "profile": "tpu"}))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let other = alice.task(other.id()).await;
    assert_eq!(other.job().status, JobStatus::Queued, "{other:?}");
    assert_eq!(
        other.job().queued_reason.as_deref(),
        Some("no worker of profile 'gpu' that is up serves model 'other-model'")
    );
    assert_eq!(other.job().attempt, 0, "never claimed");
    let waiting = alice.task(nobody.id()).await;
    assert_eq!(
        waiting.job().queued_reason.as_deref(),
        Some("no worker serving profile 'tpu' is up"),
        "{waiting:?}"
    );
    // A worker for it comes up: the job runs.
    stack
        .start(
            Service::Worker,
            "tpu-worker",
            &[("WORKER_PROFILES", "tpu,spare")],
        )
        .await
        .expect("a tpu worker starts");
    let done = alice.wait(nobody.id(), &[JobStatus::Succeeded]).await;
    assert_eq!(done.job().queued_reason, None);
    assert_eq!(ran_on(alice.events(nobody.id()).await), vec!["tpu-worker"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_tokens_are_made_listed_and_revoked_by_admins_and_stored_hashed() {
    let stack = Stack::up(StackOptions::new(scenarios())).await;
    let alice = stack.client_as("test-token-alice");
    let bob = stack.bob();
    let make = json!({"owner": "erin", "name": "CI"});
    let refused = bob
        .call::<TokenInfo>(Method::POST, "/api/local/admin/tokens", Some(&make))
        .await
        .expect_err("bob is no admin");
    assert_eq!(refused.pair(), (403, "forbidden"));
    let made: TokenInfo = alice
        .call(Method::POST, "/api/local/admin/tokens", Some(&make))
        .await
        .expect("made");
    let token = made.token.clone().expect("shown once");
    assert!(token.starts_with("mst_") && token.len() == 47, "{token}");
    let erin = stack.client_as(&token);
    let task = erin.run(&json!({"instruction": "as erin"})).await;
    assert_eq!(task.task.owner, "erin");
    // Listed without the token; stored as its hash only.
    let (_, list) = alice
        .api(Method::GET, "/api/local/admin/tokens?owner=erin", None)
        .await
        .expect("list");
    assert_eq!(list["tokens"].as_array().map(Vec::len), Some(1), "{list}");
    assert!(!list.to_string().contains(&token), "{list}");
    let pool = &stack.db.pool;
    let stored: Vec<u8> = sqlx::query_scalar("SELECT hash FROM api_tokens WHERE id = $1")
        .bind(made.id.0)
        .fetch_one(pool)
        .await
        .expect("the row");
    assert_eq!(stored.len(), 32, "a SHA-256");
    let everything: String =
        sqlx::query_scalar("SELECT string_agg(t::text, ' ') FROM api_tokens t")
            .fetch_one(pool)
            .await
            .expect("rows");
    assert!(!everything.contains(&token[4..]), "the token is not stored");
    // Revoked: refused at once.
    let path = format!("/api/local/admin/tokens/{}", made.id);
    assert_eq!(status(&bob, Method::DELETE, &path, None).await, 403);
    assert_eq!(status(&alice, Method::DELETE, &path, None).await, 204);
    assert_eq!(
        status(&erin, Method::GET, "/api/local/tasks", None).await,
        401
    );
    // One that expires: works until then.
    let soon = chrono::Utc::now() + chrono::Duration::milliseconds(1500);
    let short: TokenInfo = alice
        .call(
            Method::POST,
            "/api/local/admin/tokens",
            Some(&json!({"owner": "erin", "name": "short", "expires_at": soon})),
        )
        .await
        .expect("made");
    let short = stack.client_as(short.token.as_deref().expect("token"));
    assert_eq!(
        status(&short, Method::GET, "/api/local/tasks", None).await,
        200
    );
    tokio::time::sleep(Duration::from_millis(1500 + 2500)).await;
    assert_eq!(
        status(&short, Method::GET, "/api/local/tasks", None).await,
        401
    );
    // Bad input.
    for (body, code) in [
        (json!({"owner": "bad owner", "name": "x"}), "invalid_owner"),
        (json!({"owner": "erin", "name": ""}), "invalid_name"),
        (
            json!({"owner": "erin", "name": "x", "expires_at": "2001-01-01T00:00:00Z"}),
            "invalid_expiry",
        ),
    ] {
        let refused = alice
            .call::<TokenInfo>(Method::POST, "/api/local/admin/tokens", Some(&body))
            .await
            .expect_err("refused");
        assert_eq!(refused.pair(), (422, code), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_sealed_at_rest_and_a_reseal_moves_them_to_a_new_key() {
    let stack = Stack::up(StackOptions::new(scenarios())).await;
    let alice = stack.client_as("test-token-alice");
    let hook = alice
        .create_webhook(&json!({"url": "http://127.0.0.1:9/hook"}))
        .await;
    let secret = hook.secret.clone().expect("shown once");
    alice
        .supply_token("github", "ghp_plain_token_value")
        .await
        .expect("stored");
    let pool = &stack.db.pool;
    let stored_secret: String =
        sqlx::query_scalar("SELECT secret FROM webhook_subscriptions WHERE id = $1")
            .bind(hook.id.0)
            .fetch_one(pool)
            .await
            .expect("the row");
    let stored_token: String =
        sqlx::query_scalar("SELECT token FROM mcp_tokens WHERE owner = 'alice'")
            .fetch_one(pool)
            .await
            .expect("the row");
    for (stored, plain) in [
        (&stored_secret, secret.as_str()),
        (&stored_token, "ghp_plain_token_value"),
    ] {
        assert!(stored.starts_with("sealed:v1:test:"), "{stored}");
        assert!(
            !stored.contains(plain) && !stored.contains(&plain[6..]),
            "{stored}"
        );
    }
    // A sealed value moved to another row does not open there.
    sqlx::query("INSERT INTO mcp_tokens (owner, server, token) VALUES ('bob', 'github', $1)")
        .bind(&stored_token)
        .execute(pool)
        .await
        .expect("copied");
    let old = stack
        .setting("SECRETS_KEYS")
        .expect("the stack's key")
        .to_owned();
    let keys = format!("next:{},{old}", maestro_testkit::random_key());
    maestro_db::sealed::install(Some(
        maestro_db::sealed::Keyring::parse(&keys).expect("keys"),
    ));
    let bob = maestro_domain::Owner::parse("bob").expect("owner");
    assert!(
        maestro_db::mcp_tokens::of_owner(pool, bob.as_str(), &["github".to_owned()])
            .await
            .is_err(),
        "a copied sealed value does not open"
    );
    sqlx::query("DELETE FROM mcp_tokens WHERE owner = 'bob'")
        .execute(pool)
        .await
        .expect("deleted");

    // Rotation: the new key first, then `maestro-migrate --reseal`.
    let migrate = std::process::Command::new(maestro_testkit::binary("maestro-migrate"))
        .arg("--reseal")
        .env("DATABASE_URL", &stack.db.url)
        .env("SECRETS_KEYS", &keys)
        .output()
        .expect("maestro-migrate runs");
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    assert!(
        String::from_utf8_lossy(&migrate.stderr).contains("resealed 2 secrets"),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    let stored_secret: String =
        sqlx::query_scalar("SELECT secret FROM webhook_subscriptions WHERE id = $1")
            .bind(hook.id.0)
            .fetch_one(pool)
            .await
            .expect("the row");
    assert!(
        stored_secret.starts_with("sealed:v1:next:"),
        "{stored_secret}"
    );
    let context = maestro_db::webhooks::secret_context(hook.id);
    let opened =
        maestro_db::sealed::open(&stored_secret, &context).expect("opens under the new key");
    assert_eq!(opened, secret);
    let tokens = maestro_db::mcp_tokens::of_owner(pool, "alice", &["github".to_owned()])
        .await
        .expect("opens");
    assert_eq!(
        tokens,
        vec![("github".to_owned(), "ghp_plain_token_value".to_owned())]
    );

    // A secret that no listed key opens (a key dropped too early) hides nothing from its
    // owner: the list never opens secrets.
    sqlx::query("UPDATE webhook_subscriptions SET secret = 'sealed:v1:gone:AAAA' WHERE id = $1")
        .bind(hook.id.0)
        .execute(pool)
        .await
        .expect("sealed under a key no one has");
    let listed: WebhookList = alice
        .call(Method::GET, "/api/webhooks", None::<&()>)
        .await
        .expect("the list answers");
    let ids: Vec<_> = listed.webhooks.iter().map(|w| w.id).collect();
    assert_eq!(ids, vec![hook.id]);
    assert!(listed.webhooks[0].secret.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_in_a_space_build_on_each_others_files_with_commits() {
    let stack = Stack::up(StackOptions::new(scenarios())).await;
    let alice = stack.client_as("test-token-alice");
    let s = space(&alice, json!({"name": "Shared files"})).await;
    let path = format!("/api/local/spaces/{}", s.id());

    let writer = alice
        .run(&json!({"instruction": "write a note", "space_id": s.id()}))
        .await;
    assert_eq!(writer.job().status, JobStatus::Succeeded, "{writer:?}");
    // The merge into main follows the committed success: the commit is on the job a moment
    // after.
    let mut commit = None;
    for _ in 0..100 {
        commit = alice.task(writer.id()).await.job().commit.clone();
        if commit.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let commit = commit.expect("the job names its commit");
    // The second task reads what the first wrote, in a worktree of its own.
    let reader = alice
        .run(&json!({"instruction": "read the note", "space_id": s.id()}))
        .await;
    assert_eq!(reader.job().status, JobStatus::Succeeded, "{reader:?}");
    let events = alice.events(reader.id()).await;
    let read = of_kind(&events, EventKind::ToolResult)
        .find(|e| e.payload["name"] == "read_file")
        .expect("the read's result");
    assert!(read.payload.to_string().contains("hello"), "{read:?}");
    // The sandbox still confines the job to its worktree: the space's repository is not in
    // reach of the file tools or of programs.
    let results: Vec<&maestro_domain::Event> = of_kind(&events, EventKind::ToolResult)
        .filter(|e| e.payload["name"] != "complete")
        .collect();
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results[1]
            .payload
            .to_string()
            .contains("outside the workspace"),
        "{:?}",
        results[1]
    );
    let shell = results[2].payload.to_string();
    assert!(
        !shell.contains("hello") && shell.contains("No such file"),
        "{shell}"
    );
    assert_ne!(
        stack.workspace(writer.id()),
        stack.workspace(reader.id()),
        "a worktree each"
    );

    // A person sees main's files and commits.
    let (status, files) = alice
        .api(Method::GET, &format!("{path}/files"), None)
        .await
        .expect("files");
    assert_eq!(status, 200, "{files}");
    assert_eq!(
        files["files"],
        json!([{"path": "note.txt", "size": 5}]),
        "{files}"
    );
    let content = stack
        .http
        .get(stack.url(&format!("{path}/files/note.txt")))
        .bearer_auth("test-token-alice")
        .send()
        .await
        .expect("the file");
    assert_eq!(content.status().as_u16(), 200);
    assert_eq!(content.text().await.expect("bytes"), "hello");
    let (_, commits) = alice
        .api(Method::GET, &format!("{path}/commits"), None)
        .await
        .expect("commits");
    let commits = commits["commits"].as_array().expect("commits").clone();
    assert_eq!(
        commits.len(),
        2,
        "the first commit and the writer's: {commits:?}"
    );
    assert_eq!(commits[0]["id"], commit.as_str());
    assert_eq!(commits[0]["task_id"], writer.id().to_string());
    assert_eq!(commits[0]["job_id"], writer.job().id.to_string());
    assert!(
        commits[0]["subject"]
            .as_str()
            .unwrap_or_default()
            .contains("wrote it"),
        "{commits:?}"
    );

    // A job that fails keeps its changes on its task's branch, not on main.
    let drafter = alice
        .run(&json!({"instruction": "draft and give up", "space_id": s.id()}))
        .await;
    assert_eq!(drafter.job().status, JobStatus::Failed, "{drafter:?}");
    assert_eq!(
        drafter.job().branch.as_deref(),
        Some(format!("maestro/task/{}", drafter.id()).as_str())
    );
    let (_, files) = alice
        .api(Method::GET, &format!("{path}/files"), None)
        .await
        .expect("files");
    assert_eq!(
        files["files"],
        json!([{"path": "note.txt", "size": 5}]),
        "{files}"
    );
    let repo = stack.workspaces.join("spaces").join(s.id().to_string());
    let kept = std::process::Command::new("git")
        .args([
            "-c",
            "safe.directory=*",
            "show",
            &format!("maestro/task/{}:draft.txt", drafter.id()),
        ])
        .current_dir(&repo)
        .output()
        .expect("git runs");
    assert_eq!(
        String::from_utf8_lossy(&kept.stdout),
        "half done",
        "{kept:?}"
    );

    // A worktree deleted between two jobs of a task is made again from its branch.
    std::fs::remove_dir_all(stack.workspace(writer.id())).expect("deleted");
    alice
        .comment(writer.id(), "once more")
        .await
        .expect("a follow-up");
    let again = alice
        .wait(writer.id(), &[JobStatus::Succeeded, JobStatus::Failed])
        .await;
    assert_eq!(again.job().job_no, 2, "{again:?}");
    assert_eq!(again.job().status, JobStatus::Succeeded, "{again:?}");
    assert_eq!(
        std::fs::read_to_string(stack.workspace(writer.id()).join("note.txt")).expect("back"),
        "hello"
    );

    // A cancelled job's changes are kept on its task's branch too.
    let slow = alice
        .create(&json!({"instruction": "draft slowly", "space_id": s.id()}))
        .await;
    for _ in 0..200 {
        let events = alice.events(slow.id()).await;
        if of_kind(&events, EventKind::ToolResult).any(|e| e.payload["name"] == "write_file") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    alice.cancel(slow.id()).await.expect("cancelled");
    let over = alice.wait_over(slow.id()).await;
    assert_eq!(over.job().status, JobStatus::Cancelled, "{over:?}");
    let branch = format!("maestro/task/{}:draft2.txt", slow.id());
    let mut kept = String::new();
    for _ in 0..100 {
        let shown = std::process::Command::new("git")
            .args(["-c", "safe.directory=*", "show", &branch])
            .current_dir(&repo)
            .output()
            .expect("git runs");
        kept = String::from_utf8_lossy(&shown.stdout).into_owned();
        if !kept.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        kept, "work in progress",
        "the cancelled job's change is on its branch"
    );

    // Members only; a missing file is a 404.
    let outsider = stack.bob();
    assert_eq!(status_of(&outsider, &format!("{path}/files")).await, 404);
    assert_eq!(status_of(&outsider, &format!("{path}/commits")).await, 404);
    assert_eq!(
        status_of(&alice, &format!("{path}/files/nope.txt")).await,
        404
    );
    assert_eq!(
        status_of(&alice, &format!("{path}/commits?limit=0")).await,
        400
    );
}

async fn status_of(client: &Client, path: &str) -> u16 {
    status(client, Method::GET, path, None).await
}

/// One part of a multipart body: its name, file name, content type and bytes.
type Part = (&'static str, Option<&'static str>, &'static str, Vec<u8>);

/// A `multipart/form-data` body of `(part name, file name, content type, bytes)`: its
/// `Content-Type` and bytes.
fn multipart(parts: &[(&str, Option<&str>, &str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "maestro-test-boundary-7d1f";
    let mut body = Vec::new();
    for (name, file, content_type, bytes) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let disposition = match file {
            Some(file) => format!("form-data; name=\"{name}\"; filename=\"{file}\""),
            None => format!("form-data; name=\"{name}\""),
        };
        body.extend_from_slice(format!("Content-Disposition: {disposition}\r\n").as_bytes());
        body.extend_from_slice(format!("Content-Type: {content_type}\r\n\r\n").as_bytes());
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_attached_to_a_new_task_are_in_its_workspace_before_the_first_job() {
    let stack = Stack::up(StackOptions::new(scenarios()).env("MAX_ATTACHMENT_BYTES", "1024")).await;
    let alice = stack.client_as("test-token-alice");
    let post = |parts: Vec<Part>| {
        let borrowed: Vec<(&str, Option<&str>, &str, &[u8])> = parts
            .iter()
            .map(|(n, f, t, b)| (*n, *f, *t, b.as_slice()))
            .collect();
        let (content_type, body) = multipart(&borrowed);
        let request = stack
            .http
            .post(stack.url("/api/local/tasks"))
            .bearer_auth("test-token-alice")
            .header("content-type", content_type)
            .body(body);
        async move {
            let response = request.send().await.expect("answers");
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.expect("JSON"))
        }
    };
    let png: Vec<u8> = vec![0x89, b'P', b'N', b'G', 0, 1, 2];
    let task = br#"{"instruction": "read the attachment"}"#.to_vec();
    let (status, created) = post(vec![
        ("task", None, "application/json", task.clone()),
        (
            "file",
            Some("notes.md"),
            "text/markdown",
            b"# Notes\nhi there".to_vec(),
        ),
        ("file", Some("../evil/x.png"), "image/png", png.clone()),
    ])
    .await;
    assert_eq!(status, 201, "{created}");
    let names: Vec<&str> = created["attachments"]
        .as_array()
        .expect("attachments")
        .iter()
        .map(|a| a["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        vec!["notes.md", "x.png"],
        "names sanitized: {created}"
    );
    let id = created["id"].as_str().expect("id").to_owned();
    let done = alice
        .wait(&id, &[JobStatus::Succeeded, JobStatus::Failed])
        .await;
    assert_eq!(done.job().status, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.task.attachments.len(), 2);
    assert_eq!(done.task.attachments[1].size, 7);
    let events = alice.events(&id).await;
    let read = of_kind(&events, EventKind::ToolResult)
        .find(|e| e.payload["name"] == "read_file")
        .expect("the read's result");
    assert!(read.payload.to_string().contains("hi there"), "{read:?}");
    assert_eq!(
        std::fs::read(stack.workspace(&id).join("attachments/x.png")).expect("placed"),
        png
    );
    let download = stack
        .http
        .get(stack.url(&format!("/api/local/tasks/{id}/attachments/x.png")))
        .bearer_auth("test-token-alice")
        .send()
        .await
        .expect("answers");
    assert_eq!(download.status().as_u16(), 200);
    assert_eq!(
        download.headers()["content-type"]
            .to_str()
            .unwrap_or_default(),
        "image/png"
    );
    assert_eq!(download.bytes().await.expect("bytes").to_vec(), png);
    let path = format!("/api/local/tasks/{id}/attachments/x.png");
    assert_eq!(status_of(&stack.bob(), &path).await, 404, "not bob's");

    // Refused files: a clear error, and no task.
    let refusals: Vec<(Vec<Part>, u16, &str)> = vec![
        (
            vec![
                ("task", None, "application/json", task.clone()),
                ("file", Some("clip.mp4"), "video/mp4", vec![0; 10]),
            ],
            415,
            "unsupported_media_type",
        ),
        (
            vec![
                ("task", None, "application/json", task.clone()),
                (
                    "file",
                    Some("bad.txt"),
                    "text/plain",
                    vec![0xff, 0xfe, 0xfd],
                ),
            ],
            422,
            "attachment_not_text",
        ),
        (
            vec![
                ("task", None, "application/json", task.clone()),
                (
                    "file",
                    Some("big.bin"),
                    "application/octet-stream",
                    vec![7; 2048],
                ),
            ],
            422,
            "attachment_too_large",
        ),
        (
            vec![
                ("task", None, "application/json", task.clone()),
                ("file", Some("a.txt"), "text/plain", b"1".to_vec()),
                ("file", Some("dir/a.txt"), "text/plain", b"2".to_vec()),
            ],
            422,
            "duplicate_attachment",
        ),
        (
            vec![("file", Some("a.txt"), "text/plain", b"1".to_vec())],
            422,
            "invalid_multipart",
        ),
        (
            vec![
                ("task", None, "application/json", task.clone()),
                ("file", None, "text/plain", b"1".to_vec()),
            ],
            422,
            "invalid_attachment_name",
        ),
    ];
    for (parts, status, code) in refusals {
        let (got, body) = post(parts).await;
        assert_eq!(
            (got, body["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}"
        );
    }
    let (_, page) = alice
        .api(Method::GET, "/api/local/tasks", None)
        .await
        .expect("list");
    assert_eq!(
        page["tasks"].as_array().map(Vec::len),
        Some(1),
        "only the first was created"
    );
}

/// Two Ed25519 keys (made with `openssl genpkey -algorithm ed25519`, for these tests only):
/// the identity provider's, whose public half the JWKS publishes, and another.
const IDP_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEINPrWjLgvYXVOfOwmK39tb67F+PZDKIRGwmJZ6fv+lDl
-----END PRIVATE KEY-----
";
const IDP_PUBLIC_X: &str = "65TKioIvfNqODK34nl1-HL2ggPzM7dR9d3XfKs6IfNA";
const OTHER_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIOUyq3gErm08VQr6edOJDOBy+1O0xjYOUnX+efdybNSG
-----END PRIVATE KEY-----
";

fn jwt(key: &str, kid: &str, claims: Value) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some(kid.to_owned());
    let key = jsonwebtoken::EncodingKey::from_ed_pem(key.as_bytes()).expect("a key");
    jsonwebtoken::encode(&header, &claims, &key).expect("signed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oidc_tokens_are_checked_against_the_identity_providers_keys() {
    let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": IDP_PUBLIC_X,
                               "kid": "k1", "alg": "EdDSA", "use": "sig"}]});
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let jwks = jwks.clone();
            async move { axum::Json(jwks) }
        }),
    );
    let idp = maestro_testkit::serve(app).await;
    let stack = Stack::up(
        StackOptions::new(scenarios())
            .env("OIDC_JWKS_URL", &format!("{idp}/jwks.json"))
            .env("OIDC_ISSUER", "https://idp.test")
            .env("OIDC_AUDIENCE", "maestro"),
    )
    .await;
    let now = chrono::Utc::now().timestamp();
    let claims = |iss: &str, aud: &str, exp: i64| json!({"sub": "oidc-user", "iss": iss, "aud": aud, "exp": exp, "iat": now});
    let good = jwt(
        IDP_KEY,
        "k1",
        claims("https://idp.test", "maestro", now + 300),
    );
    let user = stack.client_as(&good);
    let task = user.run(&json!({"instruction": "as an OIDC user"})).await;
    assert_eq!(task.task.owner, "oidc-user");
    assert_eq!(status_of(&user, "/api/local/tasks").await, 200);
    let refused = [
        (
            "another audience",
            jwt(
                IDP_KEY,
                "k1",
                claims("https://idp.test", "other", now + 300),
            ),
        ),
        (
            "another issuer",
            jwt(
                IDP_KEY,
                "k1",
                claims("https://evil.test", "maestro", now + 300),
            ),
        ),
        (
            "expired",
            jwt(
                IDP_KEY,
                "k1",
                claims("https://idp.test", "maestro", now - 120),
            ),
        ),
        (
            "another key, same kid",
            jwt(
                OTHER_KEY,
                "k1",
                claims("https://idp.test", "maestro", now + 300),
            ),
        ),
        (
            "an unknown kid",
            jwt(
                IDP_KEY,
                "k9",
                claims("https://idp.test", "maestro", now + 300),
            ),
        ),
        ("a shared-secret token", {
            let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
            header.kid = Some("k1".to_owned());
            let key = jsonwebtoken::EncodingKey::from_secret(IDP_PUBLIC_X.as_bytes());
            jsonwebtoken::encode(
                &header,
                &claims("https://idp.test", "maestro", now + 300),
                &key,
            )
            .expect("signed")
        }),
    ];
    for (what, token) in refused {
        assert_eq!(
            status_of(&stack.client_as(&token), "/api/local/tasks").await,
            401,
            "{what}"
        );
    }
    // An OIDC caller is never an admin.
    assert_eq!(
        status_of(&user, "/api/local/admin/tokens").await,
        403,
        "no admin rights from a JWT"
    );
}
