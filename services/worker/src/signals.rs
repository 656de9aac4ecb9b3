//! Signals for running jobs (`<prefix>.signals.<task_id>.<kind>`, stream `<P>_SIGNALS`): a
//! comment to deliver, or a cancellation to obey at once. One ordered JetStream consumer per
//! worker; jobs register while they run. What a signal announces is committed before it is
//! published (it comes from the outbox), and jobs look on their own too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer;
use futures::StreamExt;
use maestro_domain::JobId;
use maestro_domain::topic::SignalKind;
use maestro_messaging::Bus;
use maestro_messaging::payloads::Signal;
use maestro_messaging::setup::SIGNALS;
use tokio_util::sync::CancellationToken;

/// What a running job listens to.
#[derive(Debug, Clone)]
pub struct JobSignals {
    /// Fired by a cancellation (and by a lost lease).
    pub stop: CancellationToken,
    /// Set when an interjection is waiting.
    pub interjections: Arc<AtomicBool>,
}

/// The jobs this worker runs, by id.
#[derive(Debug, Clone, Default)]
pub struct Signals {
    jobs: Arc<Mutex<HashMap<JobId, JobSignals>>>,
}

impl Signals {
    /// Register a job; it is removed when the returned guard is dropped.
    pub fn register(&self, job_id: JobId, signals: JobSignals) -> Registration {
        self.jobs.lock().expect("lock").insert(job_id, signals);
        Registration {
            signals: self.clone(),
            job_id,
        }
    }

    fn deliver(&self, signal: &Signal) {
        let jobs = self.jobs.lock().expect("lock");
        let Some(job) = jobs.get(&signal.job_id) else {
            return;
        };
        match signal.kind {
            SignalKind::Comment => job.interjections.store(true, Ordering::SeqCst),
            SignalKind::Cancel => {
                tracing::info!(job_id = %signal.job_id, "the job was cancelled; stopping");
                job.stop.cancel();
            }
            // A decision is for a paused job, which no worker runs: it is dispatched again.
            SignalKind::Decision => {}
        }
    }

    /// Follow the signals (`<p>.signals.*.*`, from now on) until `shutdown`, with an ordered
    /// consumer of the worker's own, which remakes itself from where it was after a
    /// reconnect. Should it fail for good, a new one follows from that moment. Jobs still look
    /// for interjections on their own (a slow poll), and a cancelled job is fenced at its next
    /// write, so a signal that never arrives costs time, not correctness.
    pub async fn listen(self, bus: Bus, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let mut messages = match follow(&bus).await {
                Ok(messages) => messages,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot follow signals; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        _ = shutdown.cancelled() => return,
                    }
                }
            };
            loop {
                let message = tokio::select! {
                    message = messages.next() => message,
                    _ = shutdown.cancelled() => return,
                };
                match message {
                    Some(Ok(message)) => match serde_json::from_slice::<Signal>(&message.payload) {
                        Ok(signal) => self.deliver(&signal),
                        Err(e) => tracing::warn!(error = %e, "an unreadable signal; skipped"),
                    },
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "the signal consumer failed; following again");
                        break;
                    }
                    None => break,
                }
            }
        }
    }
}

/// An ordered consumer of every signal published from now on.
async fn follow(bus: &Bus) -> anyhow::Result<async_nats::jetstream::consumer::pull::Ordered> {
    let stream = bus.js.get_stream(bus.subjects.stream(SIGNALS)).await?;
    let config = consumer::pull::OrderedConfig {
        filter_subject: bus.subjects.signals_all(),
        deliver_policy: consumer::DeliverPolicy::New,
        ..Default::default()
    };
    let consumer = stream.create_consumer(config).await?;
    Ok(consumer.messages().await?)
}

/// Keeps a job registered while it runs.
#[derive(Debug)]
pub struct Registration {
    signals: Signals,
    job_id: JobId,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.signals.jobs.lock().expect("lock").remove(&self.job_id);
    }
}
