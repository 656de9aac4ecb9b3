//! The outbox relay: publishes committed outbox rows to JetStream (`Nats-Msg-Id` = the row's
//! `msg_id`, so a row published twice is stored once) and deletes them in the same
//! transaction that locked them. Woken by `NOTIFY maestro_outbox` on every insert, with a
//! slow poll as a fallback. Several relays may run: `SKIP LOCKED` splits the rows.

use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use futures::future::try_join_all;
use maestro_db::PgPool;
use maestro_db::outbox::{self, OutboxRow};
use maestro_messaging::Subjects;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

/// Publishes the outbox.
#[derive(Debug, Clone)]
pub struct Relay {
    pub pool: PgPool,
    pub js: jetstream::Context,
    pub subjects: Subjects,
    pub batch: i64,
    pub poll: Duration,
}

impl Relay {
    /// Relay until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut listener = self.listen().await;
        while !shutdown.is_cancelled() {
            match self.drain().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(published = n, "outbox drained"),
                Err(e) => {
                    tracing::warn!(error = %e, "outbox relay failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            }
            let woken = async {
                match listener.as_mut() {
                    Some(listener) => {
                        if let Err(e) = listener.recv().await {
                            tracing::warn!(error = %e, "outbox notifications interrupted");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep(self.poll) => {}
                _ = shutdown.cancelled() => {}
            }
            if listener.is_none() {
                listener = self.listen().await;
            }
        }
        // One last drain so rows committed before the signal are not left for the next start.
        let _ = self.drain().await;
    }

    async fn listen(&self) -> Option<PgListener> {
        let mut listener = match PgListener::connect_with(&self.pool).await {
            Ok(listener) => listener,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for outbox notifications; polling");
                return None;
            }
        };
        match listener.listen(outbox::CHANNEL).await {
            Ok(()) => Some(listener),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for outbox notifications; polling");
                None
            }
        }
    }

    /// Publish everything in the outbox; returns how many rows were published.
    pub async fn drain(&self) -> anyhow::Result<usize> {
        let mut total = 0;
        loop {
            let mut tx = self.pool.begin().await?;
            let rows = outbox::lock_batch(&mut tx, self.batch).await?;
            if rows.is_empty() {
                tx.rollback().await?;
                return Ok(total);
            }
            self.publish(&rows).await?;
            let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
            outbox::delete(&mut tx, &ids).await?;
            tx.commit().await?;
            total += rows.len();
        }
    }

    /// Send every row, then wait for all acknowledgements (pipelined).
    async fn publish(&self, rows: &[OutboxRow]) -> anyhow::Result<()> {
        let mut acks = Vec::with_capacity(rows.len());
        for row in rows {
            let subject = format!("{}.{}", self.subjects.prefix(), row.topic);
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", row.msg_id.as_str());
            if let Some(traceparent) = &row.traceparent {
                headers.insert("traceparent", traceparent.as_str());
            }
            let payload = Bytes::from(serde_json::to_vec(&row.payload)?);
            acks.push(
                self.js
                    .publish_with_headers(subject, headers, payload)
                    .await?,
            );
        }
        try_join_all(acks.into_iter().map(std::future::IntoFuture::into_future)).await?;
        Ok(())
    }
}
