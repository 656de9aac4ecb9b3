//! What a claimed job starts from: its own committed events and, when a Continue started it,
//! the replay of the task's earlier jobs (SPEC §5). The replay is recomputed from those jobs'
//! events on every claim — they are over, so they never change — and checked against the
//! digest the first claim recorded in the job's `replay` event.

use std::cell::Cell;

use maestro_db::claims::Claimed;
use maestro_domain::event::ReplayEvent;
use maestro_domain::piece::Piece;
use maestro_domain::replay::{self, Replay};
use maestro_domain::{Event, EventBody, JobId, transcript};

use super::context::{JobError, Shared};

/// A Continue's view of the task before it.
#[derive(Debug, Clone)]
pub(super) struct Continuation {
    /// The job it carries on from.
    pub from: JobId,
    pub replay: Replay,
    /// Whether the last thread ran the piece this job runs (its transitions were kept).
    pub same_piece: bool,
}

impl Continuation {
    /// The `replay` event that stands for the replayed messages in this job's events.
    pub fn event(&self) -> ReplayEvent {
        ReplayEvent {
            from_job_id: self.from,
            threads: self.replay.threads,
            messages: self.replay.messages.len(),
            renamed: self.replay.renamed,
            same_piece: self.same_piece,
            digest: replay::digest(&self.replay.messages),
        }
    }
}

/// The job's committed events (none on a first claim of a job that is not a Continue) and,
/// for a Continue, the replay of the task's earlier jobs as the job's piece sees it.
pub(super) async fn load(
    shared: &Shared,
    claim: &Claimed,
    piece: &Piece,
) -> Result<(Vec<Event>, Option<Continuation>), JobError> {
    let resumed = claim.attempt > 1;
    let Some(from) = claim.continued_from else {
        let history = if resumed {
            maestro_db::events::of_job(&shared.pool, claim.job_id).await?
        } else {
            Vec::new()
        };
        return Ok((history, None));
    };
    let all = maestro_db::events::list(&shared.pool, claim.task_id, 0, i64::MAX).await?;
    let (own, earlier): (Vec<Event>, Vec<Event>) =
        all.into_iter().partition(|e| e.job_id == claim.job_id);
    let lines = transcript::transcript(&earlier)?;
    let pieces = transcript::job_pieces(&earlier)?;
    let same_piece = Cell::new(false);
    let replay = replay::replay(&lines, |job| {
        let same = pieces.get(&job).is_some_and(|p| *p == piece.name);
        same_piece.set(same);
        same
    });
    let continuation = Continuation {
        from,
        replay,
        same_piece: same_piece.get(),
    };
    check(&own, &continuation);
    Ok((own, Some(continuation)))
}

/// A resumed Continue's recomputed replay should be the one its first claim sent: say so when
/// it is not (a different version replayed differently); the job goes on with the new one.
fn check(own: &[Event], continuation: &Continuation) {
    let recorded = own.iter().find_map(|e| match e.body() {
        Ok(EventBody::Replay(r)) => Some(r),
        _ => None,
    });
    if let Some(recorded) = recorded {
        let now = continuation.event();
        if recorded.digest != now.digest {
            tracing::warn!(
                recorded = recorded.messages,
                now = now.messages,
                "the replay recomputed for a resumed Continue differs from the one first sent"
            );
        }
    }
}
