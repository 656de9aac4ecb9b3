//! Positions in a task's stream (the SSE `id:` of every item).
//!
//! A persisted event has id `"<seq>"`, its task-wide sequence number. A live delta has id
//! `"<seq>.<n>"`: the `n`-th delta the worker emitted after event `<seq>`, the last event it
//! had committed. Ids compare as the pair `(seq, n)` (an event is `(seq, 0)`), so they are
//! strictly increasing within a task's stream. A new worker attempt never reuses a delta id:
//! every claim commits a `job_state` event first, so its deltas follow a later `seq`.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// A position in a task's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StreamId {
    pub seq: i64,
    pub delta: u64,
}

impl StreamId {
    pub fn event(seq: i64) -> Self {
        Self { seq, delta: 0 }
    }

    pub fn delta(after_seq: i64, n: u64) -> Self {
        Self {
            seq: after_seq,
            delta: n,
        }
    }

    pub fn is_delta(&self) -> bool {
        self.delta > 0
    }
}

impl Ord for StreamId {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.seq, self.delta).cmp(&(other.seq, other.delta))
    }
}

impl PartialOrd for StreamId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.delta == 0 {
            write!(f, "{}", self.seq)
        } else {
            write!(f, "{}.{}", self.seq, self.delta)
        }
    }
}

/// A string that is not a stream position.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a stream position is \"<seq>\" or \"<seq>.<n>\" with non-negative integers")]
pub struct InvalidStreamId;

impl FromStr for StreamId {
    type Err = InvalidStreamId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (seq, delta) = match s.split_once('.') {
            Some((seq, delta)) => (seq, Some(delta)),
            None => (s, None),
        };
        let seq: i64 = seq.parse().map_err(|_| InvalidStreamId)?;
        let delta: u64 = match delta {
            Some(d) => d.parse().map_err(|_| InvalidStreamId)?,
            None => 0,
        };
        if seq < 0 {
            return Err(InvalidStreamId);
        }
        Ok(Self { seq, delta })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_order_deltas_between_their_events() {
        let ids: Vec<StreamId> = ["3", "3.1", "3.2", "3.10", "4"]
            .iter()
            .map(|s| s.parse().expect("parse"))
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted, "deltas after event 3 come before event 4");
        assert_eq!(StreamId::delta(3, 10).to_string(), "3.10");
        assert_eq!(StreamId::event(4).to_string(), "4");
    }

    #[test]
    fn malformed_ids_are_rejected() {
        for bad in ["", "x", "-1", "1.", "1.x", "1.2.3"] {
            assert_eq!(bad.parse::<StreamId>(), Err(InvalidStreamId), "{bad:?}");
        }
    }
}
