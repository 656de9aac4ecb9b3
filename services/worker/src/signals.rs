//! Wake-ups for running jobs (`<prefix>.jobs.<job_id>.control`): an interjection to deliver,
//! or a cancellation to obey at once. One subscription per worker; jobs register while they
//! run. Signals are best effort: what they announce is committed, and jobs look on their own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use maestro_domain::JobId;
use maestro_messaging::Subjects;
use maestro_messaging::payloads::JobControl;
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

    fn deliver(&self, job_id: JobId, control: JobControl) {
        let jobs = self.jobs.lock().expect("lock");
        let Some(job) = jobs.get(&job_id) else { return };
        match control {
            JobControl::Interjection => job.interjections.store(true, Ordering::SeqCst),
            JobControl::Cancel => {
                tracing::info!(%job_id, "the job was cancelled; stopping");
                job.stop.cancel();
            }
        }
    }

    /// Listen until `shutdown`.
    pub async fn listen(
        self,
        nats: async_nats::Client,
        subjects: Subjects,
        shutdown: CancellationToken,
    ) {
        let mut messages = match nats.subscribe(subjects.control_all()).await {
            Ok(messages) => messages,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for job signals; jobs will poll");
                return;
            }
        };
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                _ = shutdown.cancelled() => return,
            };
            let Some(message) = message else { return };
            let job_id = subjects.control_job(&message.subject);
            let control = serde_json::from_slice::<JobControl>(&message.payload).ok();
            if let (Some(job_id), Some(control)) = (job_id, control) {
                self.deliver(job_id, control);
            }
        }
    }
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
