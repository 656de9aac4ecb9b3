//! Firing schedules (docs/schedules.md). Each scheduler sleeps until the earliest
//! `next_fire_at` (or a wake-up: a schedule was created or changed), then locks due schedules
//! in batches with `SKIP LOCKED`, decides each fire by the schedule's policies
//! (`maestro_domain::schedule::Timing::fire`) and records runs, tasks and next fire times in
//! one statement per batch. Several schedulers split the due rows; the run key
//! `(schedule_id, fire_time)` keeps a fire time from starting twice however they race, and a
//! scheduler killed mid-batch rolls back, leaving the rows due for another.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use maestro_db::PgPool;
use maestro_db::schedules::{self, Advance, Due, NewRun, Started};
use maestro_domain::notification::{NotificationType, notice};
use maestro_domain::schedule::{Busy, CronSpec, Fire, RunStatus, Timing};
use maestro_domain::{NotificationId, ScheduleId};
use maestro_messaging::{AfterCommit, Bus};
use tokio_util::sync::CancellationToken;

/// Fires due schedules.
#[derive(Debug, Clone)]
pub struct Firer {
    pub pool: PgPool,
    pub bus: Bus,
    /// Schedules fired per transaction.
    pub batch: i64,
    /// A fire taken later than this after its time counts as missed.
    pub grace: TimeDelta,
    /// How often queued runs are looked at while any wait.
    pub queue_poll: Duration,
    /// The longest sleep when nothing is due (a safety net for a lost wake-up).
    pub idle: Duration,
    pub max_attempts: i32,
}

impl Firer {
    /// Fire until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let subject = self.bus.subjects.schedules_wake();
        let nats = self.bus.nats.clone();
        crate::wake::run_timed(&nats, subject, shutdown, "firing schedules", || {
            self.round()
        })
        .await;
    }

    /// Fire what is due and start queued runs that may; returns how long to sleep.
    pub async fn round(&self) -> anyhow::Result<Duration> {
        loop {
            match self.fire_due(self.batch).await {
                Ok(n) if n == self.batch as usize => continue,
                Ok(_) => break,
                // One schedule's template is refused by the database: fire one at a time
                // until the refused one is found, paused and reported.
                Err(maestro_db::DbError::Rejected(e)) => {
                    tracing::warn!(error = %e, "a batch of schedules was refused; firing one at a time");
                    self.isolate_refused().await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        while self.start_queued().await? == self.batch as usize {}
        let (next, queued) = tokio::try_join!(
            schedules::next_due(&self.pool),
            schedules::any_queued(&self.pool)
        )?;
        let until_due = next
            .map(|next| (next - Utc::now()).to_std().unwrap_or_default())
            .unwrap_or(self.idle);
        let mut sleep = until_due.min(self.idle);
        if queued {
            sleep = sleep.min(self.queue_poll);
        }
        Ok(sleep)
    }

    /// Fire the due schedules one by one until one is refused; pause that one.
    async fn isolate_refused(&self) -> anyhow::Result<()> {
        loop {
            match self.fire_due(1).await {
                Ok(0) => return Ok(()),
                Ok(_) => continue,
                Err(maestro_db::DbError::Rejected(e)) => {
                    let mut tx = maestro_db::begin(&self.pool).await?;
                    let due = schedules::lock_due(&mut tx, Utc::now(), 1).await?;
                    for schedule in &due {
                        let why = format!("the database refused its task: {e}");
                        let (id, notice) = failed_notice(&schedule.id, &why);
                        schedules::pause_failed(&mut tx, schedule.id, &notice, id.0).await?;
                        tracing::error!(schedule_id = %schedule.id, error = %e, "schedule paused: its run was refused");
                    }
                    maestro_db::commit(tx).await?;
                    self.bus.after_commit(AfterCommit::events()).await;
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Fire up to `limit` due schedules in one transaction; returns how many were taken.
    pub async fn fire_due(&self, limit: i64) -> Result<usize, maestro_db::DbError> {
        let mut tx = maestro_db::begin(&self.pool).await?;
        let now = Utc::now();
        let due = schedules::lock_due(&mut tx, now, limit).await?;
        if due.is_empty() {
            return Ok(0);
        }
        let mut runs = Vec::with_capacity(due.len());
        let mut advance = Vec::with_capacity(due.len());
        let mut missed = Vec::new();
        let mut broken = Vec::new();
        for schedule in &due {
            let Some(timing) = timing(schedule) else {
                broken.push(schedule.id);
                continue;
            };
            let busy = Busy {
                active: schedule.active,
                queued: schedule.queued,
            };
            let fire = timing.fire(schedule.due, now, self.grace, busy);
            let mut run = NewRun::new(schedule.id, fire.fire_time, fire.status);
            run.missed = i32::try_from(fire.missed).unwrap_or(i32::MAX);
            if fire.status == RunStatus::Missed || fire.missed > 0 {
                missed.push(missed_notice(schedule, &fire));
            }
            runs.push(run);
            advance.push(Advance {
                schedule_id: schedule.id,
                next: fire.next,
            });
        }
        let started = schedules::fire(&mut tx, &runs, &advance, self.max_attempts).await?;
        schedules::notify_missed(&mut tx, &missed).await?;
        for id in &broken {
            let why = "its cron expression or time zone no longer parses";
            let (notice_id, notice) = failed_notice(id, why);
            schedules::pause_failed(&mut tx, *id, &notice, notice_id.0).await?;
        }
        maestro_db::commit(tx).await?;
        self.dispatch(&started, !missed.is_empty() || !broken.is_empty())
            .await;
        if !started.is_empty() {
            tracing::info!(due = due.len(), started = started.len(), "schedules fired");
        }
        Ok(due.len())
    }

    /// Start the oldest queued run of schedules whose runs before it are over; returns how
    /// many schedules were taken.
    pub async fn start_queued(&self) -> anyhow::Result<usize> {
        let mut tx = maestro_db::begin(&self.pool).await?;
        let ready = schedules::lock_queued_ready(&mut tx, self.batch).await?;
        if ready.is_empty() {
            return Ok(0);
        }
        let runs: Vec<NewRun> = ready
            .iter()
            .map(|(id, fire_time)| NewRun::new(*id, *fire_time, RunStatus::Started))
            .collect();
        let started = schedules::fire(&mut tx, &runs, &[], self.max_attempts).await?;
        maestro_db::commit(tx).await?;
        self.dispatch(&started, false).await;
        Ok(ready.len())
    }

    async fn dispatch(&self, started: &[Started], notices: bool) {
        let mut after = if notices {
            AfterCommit::events()
        } else {
            AfterCommit::none()
        };
        for s in started {
            after = after.and(AfterCommit::new_job(&s.profile, s.task_id, s.job_id));
            maestro_runtime::metrics::task_created("schedule");
            metrics::counter!(maestro_runtime::metrics::SCHEDULE_FIRES, "outcome" => "started")
                .increment(1);
        }
        if after != AfterCommit::none() {
            // A scheduled run starts its job's trace here (the dispatch carries it).
            use tracing::Instrument as _;
            let span = tracing::info_span!("schedule_fire", runs = started.len());
            self.bus.after_commit(after).instrument(span).await;
        }
    }
}

fn timing(s: &Due) -> Option<Timing> {
    let spec = CronSpec::parse(&s.cron, &s.timezone).ok()?;
    Some(Timing {
        spec,
        overlap: s.overlap,
        missed: s.missed,
        starts_at: s.starts_at,
        ends_at: s.ends_at,
    })
}

/// The `schedule.missed` notice of a fire that found earlier fire times missed.
fn missed_notice(
    s: &Due,
    fire: &Fire,
) -> (
    ScheduleId,
    chrono::DateTime<Utc>,
    uuid::Uuid,
    serde_json::Value,
) {
    let id = NotificationId::new();
    let ran = fire.status == RunStatus::Started || fire.status == RunStatus::Queued;
    let missed = if ran { fire.missed } else { fire.missed.max(1) };
    let data = serde_json::json!({
        "schedule_id": s.id,
        "name": s.name,
        "missed": missed,
        "missed_is_at_least": fire.missed >= maestro_domain::schedule::MISSED_COUNT_LIMIT,
        "first_missed": s.due,
        "latest_fire_time": fire.fire_time,
        "policy": s.missed,
        "ran_latest": ran,
        "next_fire_at": fire.next,
    });
    let payload = notice(NotificationType::ScheduleMissed, id, "", Utc::now(), data);
    (s.id, fire.fire_time, id.0, payload)
}

/// The `schedule.failed` notice of a schedule that cannot fire.
fn failed_notice(id: &ScheduleId, why: &str) -> (NotificationId, serde_json::Value) {
    let notification_id = NotificationId::new();
    let data = serde_json::json!({"schedule_id": id, "error": why, "paused": true});
    let payload = notice(
        NotificationType::ScheduleFailed,
        notification_id,
        "",
        Utc::now(),
        data,
    );
    (notification_id, payload)
}
