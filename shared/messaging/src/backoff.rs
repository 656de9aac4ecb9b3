//! Retry delays for `nak` and job retries: exponential backoff with jitter (`backon`), capped,
//! and never shorter than what the server asked for with `Retry-After`.

use std::time::Duration;

use backon::BackoffBuilder as _;

/// The delay before attempt `attempt + 1`, after `attempt` failed (1-based): within
/// `[c/2, c)` for `c = min(base · 2^(attempt-1), max)`, so retries spread without becoming
/// too eager.
pub fn backoff(
    attempt: i32,
    base: Duration,
    max: Duration,
    server_hint: Option<Duration>,
) -> Duration {
    // backon's jitter adds up to the delay itself: from half the ceiling, that spans
    // [ceiling/2, ceiling).
    let jittered = backon::ExponentialBuilder::new()
        .with_min_delay(base / 2)
        .with_max_delay(max / 2)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
        .nth(attempt.clamp(1, 20) as usize - 1)
        .unwrap_or(max);
    match server_hint {
        Some(hint) => jittered.max(hint),
        None => jittered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_are_capped_and_honour_retry_after() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        for _ in 0..50 {
            let first = backoff(1, base, max, None);
            assert!(
                first >= Duration::from_millis(50) && first <= base,
                "{first:?}"
            );
            let late = backoff(12, base, max, None);
            assert!(late >= max / 2 && late <= max, "{late:?}");
            let hinted = backoff(1, base, max, Some(Duration::from_secs(5)));
            assert_eq!(
                hinted,
                Duration::from_secs(5),
                "Retry-After wins when longer"
            );
        }
    }
}
