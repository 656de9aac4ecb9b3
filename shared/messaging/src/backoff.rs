//! Retry delays for `nak` and job retries: exponential backoff with full jitter, capped, and never shorter than what the
//! server asked for with `Retry-After`.

use std::time::Duration;

/// The delay before attempt `attempt + 1`, after `attempt` failed (1-based).
pub fn backoff(
    attempt: i32,
    base: Duration,
    max: Duration,
    server_hint: Option<Duration>,
) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.clamp(1, 20).saturating_sub(1) as u32);
    let ceiling = exp.min(max);
    // Full jitter in [ceiling/2, ceiling]: spreads retries without making them too eager.
    let jittered = ceiling / 2 + ceiling.mul_f64(random_unit() / 2.0);
    match server_hint {
        Some(hint) => jittered.max(hint),
        None => jittered,
    }
}

fn random_unit() -> f64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default());
    (n >> 11) as f64 / (1u64 << 53) as f64
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
