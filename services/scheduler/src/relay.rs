//! The outbox relay: publishes committed outbox rows to JetStream (`Nats-Msg-Id` = the row's
//! `msg_id`, so a row published twice is stored once) and deletes them in the same
//! transaction that locked them. Each row's typed topic becomes its subject through
//! `Subjects::of_topic`. Woken by `<prefix>.outbox.wake` (a core NATS message every writer
//! sends after a commit that added rows; wake-ups that pile up while it drains count once),
//! with a slow poll as a fallback for a lost one. Several relays may run: `SKIP LOCKED` splits
//! the rows.
//!
//! Rows a writer publishes itself (`relay_after` set: the job path's events) are not drained:
//! the writer says which it published on `<prefix>.outbox.published` (each process's keys of
//! 25 ms in one message: `maestro_messaging::Bus::publish_direct`) and the relay deletes
//! those; what is still there when its grace is over is published by the poll, as any row.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use futures::future::try_join_all;
use maestro_db::PgPool;
use maestro_db::outbox::{self, OutboxRow};
use maestro_messaging::Bus;
use tokio_util::sync::CancellationToken;

/// How long the notices of published rows are gathered into one delete.
const FORGET_WINDOW: Duration = Duration::from_millis(100);
/// Rows deleted per statement at the most.
const FORGET_BATCH: usize = 2000;

/// The `msg_id`s of a `<prefix>.outbox.published` notice.
fn msg_ids(payload: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(payload)
        .lines()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Publishes the outbox.
#[derive(Debug, Clone)]
pub struct Relay {
    pub pool: PgPool,
    pub bus: Bus,
    pub batch: i64,
    pub poll: Duration,
}

impl Relay {
    /// Relay until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let forget = tokio::spawn(self.clone().forget_published(shutdown.clone()));
        let subject = self.bus.subjects.outbox_wake();
        let mut overdue_at = tokio::time::Instant::now() + self.poll;
        crate::wake::run(
            &self.bus.nats,
            subject,
            self.poll,
            shutdown,
            "outbox relay",
            || {
                // Rows their writers were to publish, at most once per poll interval.
                let overdue = tokio::time::Instant::now() >= overdue_at;
                if overdue {
                    overdue_at = tokio::time::Instant::now() + self.poll;
                }
                self.drain(overdue)
            },
        )
        .await;
        let _ = forget.await;
    }

    /// Delete the rows writers say they published, a batch at a time: the notices that
    /// arrive within [`FORGET_WINDOW`] of the first share one statement. One relay of a
    /// queue group gets each notice; a lost one only leaves its rows to the overdue poll.
    async fn forget_published(self, shutdown: CancellationToken) {
        let subject = self.bus.subjects.outbox_published();
        let mut notices = match self
            .bus
            .nats
            .queue_subscribe(subject, "outbox-relay".to_owned())
            .await
        {
            Ok(notices) => notices,
            Err(e) => {
                tracing::warn!(error = %e, "cannot follow published rows; the poll publishes them again");
                return;
            }
        };
        loop {
            let first = tokio::select! {
                notice = notices.next() => notice,
                () = shutdown.cancelled() => None,
            };
            let Some(first) = first else { return };
            let mut ids = msg_ids(&first.payload);
            let until = tokio::time::Instant::now() + FORGET_WINDOW;
            while ids.len() < FORGET_BATCH {
                match tokio::time::timeout_at(until, notices.next()).await {
                    Ok(Some(notice)) => ids.extend(msg_ids(&notice.payload)),
                    Ok(None) | Err(_) => break,
                }
            }
            if let Err(e) = outbox::forget_published(&self.pool, &ids).await {
                tracing::warn!(error = %e, rows = ids.len(), "cannot delete published rows; the poll publishes them again");
            }
        }
    }

    /// Publish everything in the outbox that is the relay's to publish (with `overdue`, also
    /// the rows their writers were to publish and did not say they did); returns how many
    /// rows were published.
    pub async fn drain(&self, overdue: bool) -> anyhow::Result<usize> {
        let mut total = 0;
        if overdue {
            total += self.drain_rows(true).await?;
        }
        Ok(total + self.drain_rows(false).await?)
    }

    /// Publish the rows the relay publishes now, or (`overdue`) those their writers did not.
    async fn drain_rows(&self, overdue: bool) -> anyhow::Result<usize> {
        let mut total = 0;
        loop {
            let mut tx = maestro_db::begin(&self.pool).await?;
            let rows = if overdue {
                outbox::lock_overdue(&mut tx, self.batch).await?
            } else {
                outbox::lock_batch(&mut tx, self.batch).await?
            };
            if rows.is_empty() {
                return Ok(total);
            }
            if overdue {
                tracing::info!(rows = rows.len(), "publishing rows their writer did not");
            }
            self.publish(&rows).await?;
            let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
            outbox::delete(&mut tx, &ids).await?;
            maestro_db::commit(tx).await?;
            total += rows.len();
            // A short batch took everything there was; rows committed since woke the relay
            // again (wake-ups during a drain count once), so no empty read to make sure.
            if (rows.len() as i64) < self.batch {
                return Ok(total);
            }
        }
    }

    /// Send every row, then wait for all acknowledgements (pipelined).
    async fn publish(&self, rows: &[OutboxRow]) -> anyhow::Result<()> {
        let mut acks = Vec::with_capacity(rows.len());
        for row in rows {
            let payload = Bytes::from(serde_json::to_vec(&row.payload)?);
            let sent = self
                .bus
                .send_row(
                    row.topic,
                    &row.msg_id,
                    row.traceparent.as_deref(),
                    row.a2a_push,
                    payload,
                )
                .await?;
            acks.extend(sent);
        }
        try_join_all(acks.into_iter().map(std::future::IntoFuture::into_future)).await?;
        Ok(())
    }
}
