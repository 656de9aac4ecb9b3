//! One NATS subscription per task for all of the gateway's clients of that task: a hub
//! receives the task's events and live deltas once and hands each to every client's stream
//! (`stream.rs`) through a broadcast channel. The hub lives while a client does; the last one
//! to leave ends its subscriptions.
//!
//! The hub parses each message once for all of its clients, and an item keeps what a client's
//! renderer makes of it when that depends on the item alone (`Shared::rendered`), so 1,000
//! clients of a task share one parse and one rendering of each delta instead of each doing both.
//!
//! A client that falls more than `SSE_HUB_BACKLOG` items behind is told it lagged, and fills
//! the gap from the durable sources (Postgres, the deltas stream), as it does for any gap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use axum::response::sse::Event as SseEvent;
use futures::StreamExt;
use maestro_domain::{Event, TaskId};
use maestro_messaging::Bus;
use maestro_messaging::payloads::Delta;
use tokio::sync::broadcast;

/// What the task's live subjects carry, parsed.
#[derive(Debug, Clone)]
pub enum Item {
    Event(Arc<Shared<Event>>),
    Delta(Arc<Shared<Delta>>),
}

/// One live item as every client of the hub sees it.
#[derive(Debug)]
pub struct Shared<T> {
    pub value: T,
    /// The SSE events it renders as, for the task's creator (`[1]`) and for its other readers
    /// (`[0]`; `Event::for_reader`), by a renderer whose output depends on nothing else.
    rendered: [OnceLock<Vec<SseEvent>>; 2],
}

impl<T> Shared<T> {
    fn new(value: T) -> Arc<Self> {
        Arc::new(Self {
            value,
            rendered: Default::default(),
        })
    }

    /// What `render` makes of the item for a creator (or not): rendered by the first client
    /// that asks, copied for the others. `render` must depend on the item and `creator` only.
    pub fn rendered(
        &self,
        creator: bool,
        render: impl FnOnce(&T) -> Vec<SseEvent>,
    ) -> Vec<SseEvent> {
        self.rendered[usize::from(creator)]
            .get_or_init(|| render(&self.value))
            .clone()
    }
}

/// The gateway's hubs, by task.
#[derive(Debug, Default)]
pub struct Hubs {
    live: Mutex<HashMap<TaskId, Weak<Hub>>>,
}

/// One task's subscriptions and the channel their messages go out on.
#[derive(Debug)]
pub struct Hub {
    sender: broadcast::Sender<Item>,
    forwarder: tokio::task::JoinHandle<()>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.forwarder.abort();
    }
}

/// A client's place at a hub: every item the hub receives from now on.
#[derive(Debug)]
pub struct Feed {
    pub items: broadcast::Receiver<Item>,
    _hub: Arc<Hub>,
}

impl Hubs {
    /// Join the task's hub, starting it if no client has. When this returns, the hub's
    /// subscriptions are known to the server: whatever is published from now on reaches the
    /// feed.
    pub async fn join(
        &self,
        bus: &Bus,
        task_id: TaskId,
        backlog: usize,
    ) -> Result<Feed, async_nats::Error> {
        if let Some(feed) = self.existing(task_id) {
            return Ok(feed);
        }
        let hub = Arc::new(Hub::start(bus, task_id, backlog).await?);
        let mut live = self.live.lock().expect("lock");
        live.retain(|_, hub| hub.strong_count() > 0);
        // Another client may have started one meanwhile: use it, drop ours.
        let hub = match live.get(&task_id).and_then(Weak::upgrade) {
            Some(theirs) => theirs,
            None => {
                live.insert(task_id, Arc::downgrade(&hub));
                hub
            }
        };
        Ok(Feed {
            items: hub.sender.subscribe(),
            _hub: hub,
        })
    }

    fn existing(&self, task_id: TaskId) -> Option<Feed> {
        let live = self.live.lock().expect("lock");
        let hub = live.get(&task_id).and_then(Weak::upgrade)?;
        Some(Feed {
            items: hub.sender.subscribe(),
            _hub: hub,
        })
    }
}

impl Hub {
    async fn start(bus: &Bus, task_id: TaskId, backlog: usize) -> Result<Self, async_nats::Error> {
        let mut events = bus
            .nats
            .subscribe(bus.subjects.events_of_task(task_id))
            .await?;
        let mut deltas = bus
            .nats
            .subscribe(bus.subjects.deltas_of_task(task_id))
            .await?;
        // The server has the subscriptions before any client reads Postgres.
        bus.nats.flush().await?;
        let (sender, _) = broadcast::channel(backlog);
        let out = sender.clone();
        let forwarder = tokio::spawn(async move {
            loop {
                // Biased, deltas before events: a message's deltas go out before its event
                // (the worker publishes them before it commits), or the event would make them
                // stale and clients would miss the end of the live text.
                // What does not parse is dropped here, as each client would skip it.
                let item = tokio::select! {
                    biased;
                    Some(message) = deltas.next() => serde_json::from_slice(&message.payload)
                        .ok()
                        .map(|delta| Item::Delta(Shared::new(delta))),
                    Some(message) = events.next() => serde_json::from_slice(&message.payload)
                        .ok()
                        .map(|event| Item::Event(Shared::new(event))),
                    else => return,
                };
                let Some(item) = item else { continue };
                // No receiver right now is fine: the hub is being left or joined.
                let _ = out.send(item);
            }
        });
        Ok(Self { sender, forwarder })
    }
}
