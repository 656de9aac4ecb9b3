//! The outbox relay: publishes committed outbox rows to JetStream (`Nats-Msg-Id` = the row's
//! `msg_id`, so a row published twice is stored once) and deletes them in the same
//! transaction that locked them. Each row's typed topic becomes its subject through
//! `Subjects::of_topic`. Woken by `<prefix>.outbox.wake` (a core NATS message every writer
//! sends after a commit that added rows; wake-ups that pile up while it drains count once),
//! with a slow poll as a fallback for a lost one. Several relays may run: `SKIP LOCKED` splits
//! the rows.

use std::time::Duration;

use bytes::Bytes;
use futures::future::try_join_all;
use maestro_db::PgPool;
use maestro_db::outbox::{self, OutboxRow};
use maestro_messaging::Bus;
use maestro_messaging::publish::{A2A_PUSH_HEADER, headers_relayed};
use tokio_util::sync::CancellationToken;

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
        let subject = self.bus.subjects.outbox_wake();
        crate::wake::run(
            &self.bus.nats,
            subject,
            self.poll,
            shutdown,
            "outbox relay",
            || self.drain(),
        )
        .await;
    }

    /// Publish everything in the outbox; returns how many rows were published.
    pub async fn drain(&self) -> anyhow::Result<usize> {
        let mut total = 0;
        loop {
            let mut tx = maestro_db::begin(&self.pool).await?;
            let rows = outbox::lock_batch(&mut tx, self.batch).await?;
            if rows.is_empty() {
                return Ok(total);
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
            let subject = self.bus.subjects.of_topic(row.topic);
            let mut headers = headers_relayed(&row.msg_id, row.traceparent.as_deref());
            if row.a2a_push {
                headers.insert(A2A_PUSH_HEADER, "1");
            }
            let payload = Bytes::from(serde_json::to_vec(&row.payload)?);
            acks.push(
                self.bus
                    .js
                    .publish_with_headers(subject, headers, payload)
                    .await?,
            );
        }
        try_join_all(acks.into_iter().map(std::future::IntoFuture::into_future)).await?;
        Ok(())
    }
}
