//! Serving `<prefix>.tools.exec`: decode the request, run the tool (file tools on a confined
//! thread, programs in the sandbox) with bounded concurrency, reply. `<prefix>.tools.cancel`
//! (`{"job_id": ...}`) stops every call of a job at once, killing its processes. Shutdown
//! unsubscribes first (other instances take new calls) and then lets calls in flight finish.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use async_nats::{Message, Subscriber};
use bytes::Bytes;
use futures::StreamExt;
use maestro_domain::JobId;
use maestro_domain::tools::{McpListReply, McpListRequest};
use maestro_messaging::Subjects;
use maestro_messaging::payloads::ToolsCancel;
use maestro_messaging::setup::OperationOutcomes;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::Settings;
use crate::mcp::{McpError, McpSessions, OnToolsChanged};
use crate::sandbox::{Network, Sandbox};
use crate::tools::Toolbox;
use crate::workspace::Workspaces;

/// The queue group all tool-runner instances join.
pub const QUEUE_GROUP: &str = "tool-runners";

/// Cancellation tokens of the jobs with calls in flight.
pub(crate) type Running = Arc<Mutex<HashMap<JobId, CancellationToken>>>;

/// What one instance serves with.
#[derive(Clone)]
pub(crate) struct Server {
    pub client: async_nats::Client,
    pub settings: Arc<Settings>,
    pub toolbox: Arc<Toolbox>,
    pub running: Running,
    pub outcomes: OperationOutcomes,
    /// `WORKSPACES_DIR`, by its canonical path.
    pub workspaces: Workspaces,
}

/// The subjects an instance listens on.
struct Subscriptions {
    requests: Subscriber,
    cancels: Subscriber,
    listings: Subscriber,
    file_reads: Subscriber,
    git: Subscriber,
}

impl Subscriptions {
    async fn open(client: &async_nats::Client, subjects: &Subjects) -> anyhow::Result<Self> {
        let group = QUEUE_GROUP.to_owned();
        Ok(Self {
            requests: client
                .queue_subscribe(subjects.tools_exec(), group.clone())
                .await
                .context("subscribe to tool requests")?,
            cancels: client
                .subscribe(subjects.tools_cancel())
                .await
                .context("subscribe to cancellations")?,
            listings: client
                .queue_subscribe(subjects.mcp_list(), group.clone())
                .await
                .context("subscribe to MCP listings")?,
            file_reads: client
                .queue_subscribe(subjects.files_read(), group.clone())
                .await
                .context("subscribe to file reads")?,
            git: client
                .queue_subscribe(subjects.tools_git(), group)
                .await
                .context("subscribe to space workspace requests")?,
        })
    }
}

/// Serve tool calls until `shutdown` is cancelled.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let subjects = Subjects::new(&settings.subject_prefix).context("SUBJECT_PREFIX")?;
    let workspaces = Workspaces::create(&settings.workspaces_dir).with_context(|| {
        format!(
            "create WORKSPACES_DIR {} (or resolve its path)",
            settings.workspaces_dir.display()
        )
    })?;
    let sandbox = Sandbox::detect(
        settings.bwrap.clone(),
        settings.limits.clone(),
        settings.sandbox_user,
        settings.extra_ro_paths.clone(),
        settings.forwarder.clone(),
        &settings.workspaces_dir.join(".sandbox-probe"),
    )
    .await;
    report(&sandbox);
    let client = maestro_messaging::connect(&settings.nats_url, "maestro-tool-runner")
        .await
        .context("connect to NATS")?;
    let subscriptions = Subscriptions::open(&client, &subjects).await?;
    let js = async_nats::jetstream::new(client.clone());
    maestro_messaging::setup::ensure_streams(&js, &subjects, &settings.streams).await?;
    let outcomes = OperationOutcomes::new(js, &subjects);
    client.flush().await.context("flush subscriptions")?;
    maestro_runtime::announce_ready("tool-runner", None);
    tracing::info!(subject = %subjects.tools_exec(), "serving tool calls");
    let mcp = McpSessions::telling(tools_changed(&client, subjects.mcp_changed()));
    let server = Server {
        client,
        settings: Arc::new(settings),
        toolbox: Arc::new(Toolbox { sandbox, mcp }),
        running: Arc::default(),
        outcomes,
        workspaces,
    };
    server.serve(subscriptions, shutdown).await;
    Ok(())
}

impl Server {
    async fn serve(self, mut subscriptions: Subscriptions, shutdown: CancellationToken) {
        let permits = Arc::new(Semaphore::new(self.settings.concurrency.max(1)));
        let mut in_flight = JoinSet::new();
        loop {
            let message = tokio::select! {
                message = subscriptions.requests.next() => message,
                Some(cancel) = subscriptions.cancels.next() => {
                    self.cancel(&cancel.payload);
                    continue;
                }
                Some(listing) = subscriptions.listings.next() => {
                    in_flight.spawn(self.clone().list(listing));
                    continue;
                }
                Some(read) = subscriptions.file_reads.next() => {
                    in_flight.spawn(self.clone().serve_file(read));
                    continue;
                }
                Some(request) = subscriptions.git.next() => {
                    in_flight.spawn(self.clone().git(request));
                    continue;
                }
                _ = shutdown.cancelled() => break,
            };
            let Some(message) = message else { break };
            let permit = permits
                .clone()
                .acquire_owned()
                .await
                .expect("semaphore is never closed");
            let span = tracing::info_span!(
                "tool_call",
                tool = tracing::field::Empty,
                task_id = tracing::field::Empty
            );
            maestro_messaging::trace::adopt(&span, message.headers.as_ref());
            let server = self.clone();
            in_flight.spawn(
                async move {
                    server.answer(message).await;
                    drop(permit);
                }
                .instrument(span),
            );
            while in_flight.try_join_next().is_some() {}
        }
        let _ = subscriptions.requests.unsubscribe().await;
        tracing::info!(
            in_flight = in_flight.len(),
            "stopping; finishing calls in flight"
        );
        while in_flight.join_next().await.is_some() {}
        self.client.flush().await.ok();
    }

    /// `<prefix>.tools.cancel`: stop every call of the job.
    fn cancel(&self, payload: &[u8]) {
        if let Ok(request) = serde_json::from_slice::<ToolsCancel>(payload)
            && let Some(token) = self.running.lock().expect("lock").get(&request.job_id)
        {
            tracing::info!(job_id = %request.job_id, "cancelling the job's tool calls");
            token.cancel();
        }
    }

    /// Run one tool request and reply to it.
    async fn answer(self, message: Message) {
        let Some(reply) = message.reply.clone() else {
            return;
        };
        let answer = self.handle(&message.payload).await;
        self.reply(reply, &answer).await;
    }

    /// `<prefix>.tools.mcp.list`: list an MCP server's tools and reply.
    async fn list(self, listing: Message) {
        let reply = list_mcp(&self.settings, &self.toolbox, &listing.payload).await;
        if let Some(to) = listing.reply {
            self.reply(to, &reply).await;
        }
    }

    /// `<prefix>.tools.files.read`: read one workspace file and reply with its bytes.
    async fn serve_file(self, read: Message) {
        let Some(to) = read.reply else { return };
        let outcome =
            crate::serve_file::read(&self.workspaces, &self.toolbox.sandbox, &read.payload).await;
        let (headers, body) = crate::serve_file::reply(outcome);
        if let Err(e) = self.client.publish_with_headers(to, headers, body).await {
            tracing::warn!(error = %e, "cannot send a file");
        }
    }

    /// `<prefix>.tools.git`: a space's persistent workspace.
    async fn git(self, request: Message) {
        let Some(to) = request.reply else { return };
        let reply = match serde_json::from_slice(&request.payload) {
            Ok(asked) => {
                crate::git::handle(
                    &self.settings.workspaces_dir,
                    self.toolbox.sandbox.run_as,
                    asked,
                )
                .await
            }
            Err(e) => maestro_domain::tools::GitReply {
                error: Some(format!("malformed request: {e}")),
                ..Default::default()
            },
        };
        if let Some(error) = &reply.error {
            tracing::warn!(%error, "a space workspace request failed");
        }
        self.reply(to, &reply).await;
    }

    async fn reply<T: serde::Serialize>(&self, to: async_nats::Subject, answer: &T) {
        let payload = Bytes::from(serde_json::to_vec(answer).unwrap_or_default());
        if let Err(e) = self.client.publish(to, payload).await {
            tracing::warn!(error = %e, "cannot send a reply");
        }
    }
}

/// List an MCP server's tools, from a scratch workspace.
async fn list_mcp(settings: &Settings, toolbox: &Toolbox, payload: &[u8]) -> McpListReply {
    let failed = |error: String| McpListReply {
        tools: Vec::new(),
        error: Some(error),
        auth_challenge: None,
    };
    let request: McpListRequest = match serde_json::from_slice(payload) {
        Ok(request) => request,
        Err(e) => return failed(format!("malformed listing request: {e}")),
    };
    let scratch = settings
        .workspaces_dir
        .join(".mcp-list")
        .join(&request.target.name);
    let prepared = std::fs::create_dir_all(&scratch).and_then(|()| match toolbox.sandbox.run_as {
        Some((uid, gid)) => std::os::unix::fs::chown(&scratch, Some(uid), Some(gid)),
        None => Ok(()),
    });
    if let Err(e) = prepared {
        return failed(format!("cannot prepare a scratch workspace: {e}"));
    }
    match toolbox
        .mcp
        .list(
            &toolbox.sandbox,
            &request.target,
            scratch,
            Network::granted(request.network, &request.allowed_hosts),
        )
        .await
    {
        Ok(tools) => McpListReply {
            tools,
            error: None,
            auth_challenge: None,
        },
        Err(McpError::AuthRequired { challenge }) => McpListReply {
            tools: Vec::new(),
            error: Some("the MCP server requires authorization".to_owned()),
            auth_challenge: Some(challenge),
        },
        Err(McpError::Failed(error)) => failed(error),
    }
}

/// Pass an MCP server's tool-list change on to the workers (`<p>.tools.mcp.changed`).
fn tools_changed(client: &async_nats::Client, subject: String) -> OnToolsChanged {
    let client = client.clone();
    Arc::new(move |server: &str| {
        let (client, subject) = (client.clone(), subject.clone());
        let payload = Bytes::from(server.to_owned());
        tokio::spawn(async move {
            if let Err(e) = client.publish(subject, payload).await {
                tracing::warn!(error = %e, "cannot pass on an MCP tool-list change");
            }
        });
    })
}

fn report(sandbox: &Sandbox) {
    match (&sandbox.unavailable, &sandbox.files_unavailable) {
        (None, None) => tracing::info!(
            run_as = ?sandbox.run_as,
            cgroups = sandbox.cgroups.is_some(),
            egress = ?sandbox.forwarder,
            "sandbox ready: bubblewrap for programs, Landlock for file tools"
        ),
        (programs, files) => tracing::error!(
            programs = programs.as_deref().unwrap_or("ok"),
            files = files.as_deref().unwrap_or("ok"),
            "sandbox incomplete: the affected tools will refuse to run (fail closed)"
        ),
    }
    if sandbox.forwarder.is_none() {
        tracing::error!(
            "no maestro-sandbox-forward (SANDBOX_FORWARDER): programs granted network will \
             refuse to run (fail closed)"
        );
    }
}
