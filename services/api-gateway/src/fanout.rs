//! One NATS subscription per task for all of the gateway's clients of that task: a hub
//! receives the task's events and live deltas once and hands each to every client's stream
//! (`stream.rs`) through a broadcast channel. The hub lives while a client does; the last one
//! to leave ends its subscriptions.
//!
//! A client that falls more than `SSE_HUB_BACKLOG` items behind is told it lagged, and fills
//! the gap from the durable sources (Postgres, the deltas stream), as it does for any gap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use futures::StreamExt;
use maestro_domain::TaskId;
use maestro_messaging::Bus;
use tokio::sync::broadcast;

/// What the task's live subjects carry.
#[derive(Debug, Clone)]
pub enum Item {
    Event(Bytes),
    Delta(Bytes),
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
                let item = tokio::select! {
                    biased;
                    Some(message) = deltas.next() => Item::Delta(message.payload),
                    Some(message) = events.next() => Item::Event(message.payload),
                    else => return,
                };
                // No receiver right now is fine: the hub is being left or joined.
                let _ = out.send(item);
            }
        });
        Ok(Self { sender, forwarder })
    }
}
