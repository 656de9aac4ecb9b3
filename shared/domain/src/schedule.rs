//! Schedules (docs/schedules.md): a cron expression of 5 or 6 fields (seconds first when 6),
//! read in an IANA time zone, fires tasks from a template. This is the pure part: parsing,
//! the next fire time (daylight-saving gaps and overlaps as `croner` resolves them), and
//! what one due fire does under the overlap and missed-run policies.

use std::fmt;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};

/// Fire times counted when telling how many were missed; beyond it the count says "at least".
pub const MISSED_COUNT_LIMIT: u32 = 1000;
/// Runs a `queue` schedule keeps waiting; a fire beyond it is skipped.
pub const QUEUE_LIMIT: i64 = 100;

/// A cron expression in a time zone.
#[derive(Debug, Clone)]
pub struct CronSpec {
    cron: Cron,
    tz: Tz,
}

/// Why a schedule's timing is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSchedule {
    #[error("cron {0:?} is not a 5- or 6-field cron expression: {1}")]
    Cron(String, String),
    #[error("timezone {0:?} is not an IANA time zone name (like \"Europe/Berlin\" or \"UTC\")")]
    Timezone(String),
    #[error("cron {0:?} never fires (from now, before the year 5000)")]
    Never(String),
}

impl CronSpec {
    /// Parse `expr` (5 fields, or 6 with seconds first; `@hourly`-style nicknames too) for the
    /// zone named `tz`.
    pub fn parse(expr: &str, tz: &str) -> Result<Self, InvalidSchedule> {
        let tz: Tz = tz
            .parse()
            .map_err(|_| InvalidSchedule::Timezone(tz.to_owned()))?;
        let fields = expr.split_whitespace().count();
        if !expr.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
            let why = format!("it has {fields} fields");
            return Err(InvalidSchedule::Cron(expr.to_owned(), why));
        }
        // An empty list item (`,`, `1,,2`) is refused here: croner reads it as a field no
        // time matches, and then searches second by second until the year 5000 (the fuzzer
        // found `* , * * 4 *` taking seconds of CPU per request).
        if let Some(field) = expr
            .split_whitespace()
            .find(|f| !f.starts_with('@') && f.split(',').any(str::is_empty))
        {
            let why = format!("the field {field:?} has an empty list item");
            return Err(InvalidSchedule::Cron(expr.to_owned(), why));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|e| InvalidSchedule::Cron(expr.to_owned(), e.to_string()))?;
        Ok(Self { cron, tz })
    }

    /// Parse, and check the expression fires at some time after `now`.
    pub fn parse_firing(expr: &str, tz: &str, now: DateTime<Utc>) -> Result<Self, InvalidSchedule> {
        let spec = Self::parse(expr, tz)?;
        match spec.next_after(now) {
            Some(_) => Ok(spec),
            None => Err(InvalidSchedule::Never(expr.to_owned())),
        }
    }

    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// The first fire time strictly after `t`. Fire times are whole seconds.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.find(whole_second(t, false), false)
    }

    /// The first fire time at `t` or after.
    pub fn at_or_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.find(whole_second(t, true), true)
    }

    fn find(&self, t: DateTime<Utc>, inclusive: bool) -> Option<DateTime<Utc>> {
        let local = t.with_timezone(&self.tz);
        let next = self.cron.find_next_occurrence(&local, inclusive).ok()?;
        Some(next.with_timezone(&Utc))
    }

    /// The last fire time at `t` or before.
    pub fn at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = whole_second(t, false).with_timezone(&self.tz);
        let previous = self.cron.find_previous_occurrence(&local, true).ok()?;
        Some(previous.with_timezone(&Utc))
    }

    /// What the expression means, in English ("At 09:00 on Monday").
    pub fn describe(&self) -> String {
        self.cron.describe()
    }
}

/// `t` without its fraction of a second, rounded down, or up with `up` (`croner` keeps the
/// fraction of the time it starts from in the times it finds).
fn whole_second(t: DateTime<Utc>, up: bool) -> DateTime<Utc> {
    let floor = t - TimeDelta::nanoseconds(i64::from(t.timestamp_subsec_nanos()));
    if up && floor < t {
        floor + TimeDelta::seconds(1)
    } else {
        floor
    }
}

/// What a fire does while the previous run is still active (not `succeeded`, `failed` or
/// `cancelled`: running, queued, retrying or paused for a person all count as active).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Record the fire as `skipped`; no task.
    #[default]
    Skip,
    /// Start another task anyway.
    Allow,
    /// Record it as `queued`; its task starts when the runs before it are over.
    Queue,
}

/// What happens to fire times that passed while no scheduler ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Record the latest one as `missed`; no task.
    #[default]
    Skip,
    /// Run the latest one (once, however many passed).
    RunOnce,
}

/// Where one fire time of a schedule stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Its task was created.
    Started,
    /// Waits for the runs before it (overlap `queue`).
    Queued,
    /// Not run: the previous run was still active (overlap `skip`, or a full queue).
    Skipped,
    /// Not run: its time passed while no scheduler ran (missed-run policy `skip`).
    Missed,
}

macro_rules! text_enum {
    ($name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

text_enum!(Overlap { Skip => "skip", Allow => "allow", Queue => "queue" });
text_enum!(Missed { Skip => "skip", RunOnce => "run_once" });
text_enum!(RunStatus {
    Started => "started",
    Queued => "queued",
    Skipped => "skipped",
    Missed => "missed",
});

/// When a schedule may fire, and how it treats overlaps and missed runs.
#[derive(Debug, Clone)]
pub struct Timing {
    pub spec: CronSpec,
    pub overlap: Overlap,
    pub missed: Missed,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
}

impl Timing {
    /// The first fire time strictly after `t` inside the schedule's window; `None` once the
    /// window is over.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let next = match self.starts_at {
            Some(start) if start > t => self.spec.at_or_after(start)?,
            _ => self.spec.next_after(t)?,
        };
        match self.ends_at {
            Some(end) if next > end => None,
            _ => Some(next),
        }
    }

    /// What the fire due at `due` does when a scheduler takes it at `now`. A fire taken more
    /// than `grace` after its time was missed (no scheduler ran): the missed-run policy says
    /// what becomes of the latest fire time that passed, and the ones before it are counted.
    /// `active` tells whether the previous run is still active, `queued` how many runs wait.
    pub fn fire(
        &self,
        due: DateTime<Utc>,
        now: DateTime<Utc>,
        grace: TimeDelta,
        busy: Busy,
    ) -> Fire {
        if now - due <= grace {
            return Fire {
                fire_time: due,
                status: self.overlap_status(busy),
                missed: 0,
                next: self.next_after(due),
            };
        }
        let latest = self
            .spec
            .at_or_before(now)
            .filter(|latest| *latest >= due)
            .unwrap_or(due);
        let passed = self.count_between(due, latest);
        let next = self.next_after(now);
        match self.missed {
            Missed::Skip => Fire {
                fire_time: latest,
                status: RunStatus::Missed,
                missed: passed,
                next,
            },
            Missed::RunOnce => Fire {
                fire_time: latest,
                status: self.overlap_status(busy),
                missed: passed.saturating_sub(1),
                next,
            },
        }
    }

    fn overlap_status(&self, busy: Busy) -> RunStatus {
        match (busy.active || busy.queued > 0, self.overlap) {
            (false, _) | (true, Overlap::Allow) => RunStatus::Started,
            (true, Overlap::Skip) => RunStatus::Skipped,
            (true, Overlap::Queue) if busy.queued >= QUEUE_LIMIT => RunStatus::Skipped,
            (true, Overlap::Queue) => RunStatus::Queued,
        }
    }

    /// Fire times from `from` to `to`, both included (at most [`MISSED_COUNT_LIMIT`]).
    fn count_between(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> u32 {
        let mut count = 1;
        let mut t = from;
        while count < MISSED_COUNT_LIMIT {
            match self.spec.next_after(t) {
                Some(next) if next <= to => {
                    count += 1;
                    t = next;
                }
                _ => break,
            }
        }
        count
    }
}

/// What is still going on from a schedule's earlier runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Busy {
    /// The latest started run's task is still active.
    pub active: bool,
    /// Runs waiting in the queue.
    pub queued: i64,
}

/// What one due fire does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fire {
    /// The fire time the run is recorded under.
    pub fire_time: DateTime<Utc>,
    pub status: RunStatus,
    /// Fire times before it that passed while no scheduler ran, and were not run.
    pub missed: u32,
    /// The schedule's next due time (`None`: its window is over).
    pub next: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_list_items_are_refused_at_once() {
        for expr in [
            "* , * * 4 *",
            "* ,\r*  \r*   4  * ",
            "* * , * * *",
            "1,,2 * * * *",
            "0 0 1, * *",
        ] {
            let started = std::time::Instant::now();
            assert!(CronSpec::parse(expr, "UTC").is_err(), "{expr:?}");
            assert!(
                started.elapsed() < std::time::Duration::from_millis(100),
                "{expr:?}"
            );
        }
    }

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("test time")
            .with_timezone(&Utc)
    }

    fn timing(expr: &str, tz: &str) -> Timing {
        Timing {
            spec: CronSpec::parse(expr, tz).expect("valid"),
            overlap: Overlap::Skip,
            missed: Missed::Skip,
            starts_at: None,
            ends_at: None,
        }
    }

    #[test]
    fn five_and_six_fields_parse_and_bad_input_is_refused() {
        let every_minute = CronSpec::parse("* * * * *", "UTC").expect("5 fields");
        assert_eq!(
            every_minute.next_after(utc("2026-12-01T10:00:30Z")),
            Some(utc("2026-12-01T10:01:00Z"))
        );
        assert_eq!(
            every_minute.next_after(utc("2026-12-01T10:00:30.381Z")),
            Some(utc("2026-12-01T10:01:00Z")),
            "fire times are whole seconds, whatever the time they are found from"
        );
        assert_eq!(
            every_minute.at_or_after(utc("2026-12-01T10:00:00.5Z")),
            Some(utc("2026-12-01T10:01:00Z"))
        );
        assert_eq!(
            every_minute.at_or_before(utc("2026-12-01T10:00:00.5Z")),
            Some(utc("2026-12-01T10:00:00Z"))
        );
        let every_second = CronSpec::parse("* * * * * *", "UTC").expect("6 fields");
        assert_eq!(
            every_second.next_after(utc("2026-12-01T10:00:30Z")),
            Some(utc("2026-12-01T10:00:31Z"))
        );
        assert!(CronSpec::parse("@hourly", "UTC").is_ok());
        assert!(matches!(
            CronSpec::parse("* * * *", "UTC"),
            Err(InvalidSchedule::Cron(..))
        ));
        assert!(matches!(
            CronSpec::parse("0 0 0 1 1 * 2030", "UTC"),
            Err(InvalidSchedule::Cron(..))
        ));
        assert!(matches!(
            CronSpec::parse("61 * * * *", "UTC"),
            Err(InvalidSchedule::Cron(..))
        ));
        assert_eq!(
            CronSpec::parse("* * * * *", "Mars/Olympus").err(),
            Some(InvalidSchedule::Timezone("Mars/Olympus".to_owned()))
        );
    }

    #[test]
    fn times_are_read_in_the_schedules_zone() {
        let nine = CronSpec::parse("0 9 * * *", "Asia/Tokyo").expect("valid");
        // 09:00 in Tokyo is 00:00 UTC.
        assert_eq!(
            nine.next_after(utc("2026-12-01T01:00:00Z")),
            Some(utc("2026-12-02T00:00:00Z"))
        );
    }

    #[test]
    fn a_fixed_time_in_the_spring_gap_runs_once_right_after_it() {
        // Berlin skips 02:00–03:00 on 2026-03-29: 02:30 does not exist that day.
        let spec = CronSpec::parse("30 2 * * *", "Europe/Berlin").expect("valid");
        let fire = spec.next_after(utc("2026-03-28T12:00:00Z")).expect("fires");
        assert_eq!(
            fire,
            utc("2026-03-29T01:00:00Z"),
            "03:00 CEST, the end of the gap"
        );
        let after = spec.next_after(fire).expect("fires");
        assert_eq!(
            after,
            utc("2026-03-30T00:30:00Z"),
            "02:30 CEST the next day"
        );
    }

    #[test]
    fn a_fixed_time_in_the_autumn_overlap_runs_once() {
        // Berlin repeats 02:00–03:00 on 2026-10-25 (CEST, then CET).
        let spec = CronSpec::parse("30 2 * * *", "Europe/Berlin").expect("valid");
        let first = spec.next_after(utc("2026-10-24T12:00:00Z")).expect("fires");
        assert_eq!(
            first,
            utc("2026-10-25T00:30:00Z"),
            "02:30 CEST, the first one"
        );
        let next = spec.next_after(first).expect("fires");
        assert_eq!(next, utc("2026-10-26T01:30:00Z"), "not 02:30 CET again");
    }

    #[test]
    fn an_interval_runs_once_per_wall_clock_time_through_the_overlap_and_the_gap() {
        let spec = CronSpec::parse("0 * * * *", "Europe/Berlin").expect("valid");
        let mut t = utc("2026-10-24T23:30:00Z");
        let mut fires = Vec::new();
        for _ in 0..4 {
            t = spec.next_after(t).expect("fires");
            fires.push(t);
        }
        assert_eq!(
            fires,
            [
                utc("2026-10-25T00:00:00Z"),
                utc("2026-10-25T02:00:00Z"),
                utc("2026-10-25T03:00:00Z"),
                utc("2026-10-25T04:00:00Z"),
            ],
            "02:00 CEST, then 03:00 CET: the repeated 02:00 (CET) does not fire again"
        );
        let gap = spec.next_after(utc("2026-03-29T00:30:00Z")).expect("fires");
        assert_eq!(
            gap,
            utc("2026-03-29T01:00:00Z"),
            "03:00 CEST follows 01:00 CET"
        );
    }

    #[test]
    fn the_window_bounds_the_fire_times() {
        let mut t = timing("0 * * * *", "UTC");
        t.starts_at = Some(utc("2026-12-05T10:30:00Z"));
        t.ends_at = Some(utc("2026-12-05T12:00:00Z"));
        let now = utc("2026-12-01T00:00:00Z");
        assert_eq!(t.next_after(now), Some(utc("2026-12-05T11:00:00Z")));
        assert_eq!(
            t.next_after(utc("2026-12-05T11:00:00Z")),
            Some(utc("2026-12-05T12:00:00Z")),
            "the end is included"
        );
        assert_eq!(t.next_after(utc("2026-12-05T12:00:00Z")), None);
    }

    #[test]
    fn an_on_time_fire_follows_the_overlap_policy() {
        let mut t = timing("* * * * *", "UTC");
        let due = utc("2026-12-01T10:00:00Z");
        let now = due + TimeDelta::seconds(2);
        let grace = TimeDelta::seconds(60);
        let idle = Busy::default();
        let active = Busy {
            active: true,
            queued: 0,
        };
        let fire = t.fire(due, now, grace, idle);
        assert_eq!(
            (fire.fire_time, fire.status, fire.missed, fire.next),
            (
                due,
                RunStatus::Started,
                0,
                Some(utc("2026-12-01T10:01:00Z"))
            )
        );
        assert_eq!(t.fire(due, now, grace, active).status, RunStatus::Skipped);
        t.overlap = Overlap::Allow;
        assert_eq!(t.fire(due, now, grace, active).status, RunStatus::Started);
        t.overlap = Overlap::Queue;
        assert_eq!(t.fire(due, now, grace, active).status, RunStatus::Queued);
        let waiting = Busy {
            active: false,
            queued: 1,
        };
        assert_eq!(
            t.fire(due, now, grace, waiting).status,
            RunStatus::Queued,
            "runs keep their order behind the queue"
        );
        let full = Busy {
            active: true,
            queued: QUEUE_LIMIT,
        };
        assert_eq!(t.fire(due, now, grace, full).status, RunStatus::Skipped);
    }

    #[test]
    fn missed_fires_follow_the_missed_run_policy() {
        let mut t = timing("*/10 * * * *", "UTC");
        let due = utc("2026-12-01T10:00:00Z");
        // Down from 09:55 to 10:35: 10:00, 10:10, 10:20 and 10:30 passed.
        let now = utc("2026-12-01T10:35:00Z");
        let grace = TimeDelta::seconds(60);
        let fire = t.fire(due, now, grace, Busy::default());
        assert_eq!(
            (fire.fire_time, fire.status, fire.missed, fire.next),
            (
                utc("2026-12-01T10:30:00Z"),
                RunStatus::Missed,
                4,
                Some(utc("2026-12-01T10:40:00Z"))
            )
        );
        t.missed = Missed::RunOnce;
        let fire = t.fire(due, now, grace, Busy::default());
        assert_eq!(
            (fire.fire_time, fire.status, fire.missed),
            (utc("2026-12-01T10:30:00Z"), RunStatus::Started, 3),
            "the latest runs, the three before it do not"
        );
        let every_second = timing("* * * * * *", "UTC");
        let long = every_second.fire(due, due + TimeDelta::hours(5), grace, Busy::default());
        assert_eq!(long.missed, MISSED_COUNT_LIMIT, "counted up to the limit");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// Whatever a person types as a cron expression and a zone, parsing answers (a
        /// schedule or a reason) and never panics; an accepted one fires after now, in order.
        #[test]
        fn any_cron_text_is_parsed_or_refused_without_panicking(
            fields in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => "\\*|[0-9]|1[0-2]|\\*/[1-9]|[0-5]-[6-9]|[1-9],[0-9]",
                    1 => "[0-9*/,LW#?A-Z-]{1,6}|[0-9]{1,12}|\\PC{0,4}",
                ],
                4..8,
            ),
            zone in "UTC|Europe/Berlin|Asia/Tokyo|America/New_York|\\PC{0,8}",
        ) {
            let expr = fields.join(" ");
            let now = utc("2026-12-01T10:00:00.25Z");
            if let Ok(spec) = CronSpec::parse_firing(&expr, &zone, now) {
                let next = spec.next_after(now).expect("it fires");
                proptest::prop_assert!(next > now);
                proptest::prop_assert_eq!(next.timestamp_subsec_nanos(), 0);
                if let Some(after) = spec.next_after(next) {
                    proptest::prop_assert!(after > next);
                }
            }
        }
    }
}
