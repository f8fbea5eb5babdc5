//! A token bucket like the kubelet's (`golang.org/x/time/rate`, `Allow`): `burst` tokens, refilled
//! at `qps` per second; a call without a token is refused, never queued.

use std::sync::Mutex;
use std::time::Instant;

/// One token in bucket units: tokens are counted in billionths so that refilling by elapsed
/// nanoseconds × qps is exact.
const TOKEN: u128 = 1_000_000_000;

/// The bucket.
#[derive(Debug)]
pub struct RateLimiter {
    qps: u128,
    capacity: u128,
    /// Tokens left (in billionths) and when they were counted.
    state: Mutex<(u128, Instant)>,
}

impl RateLimiter {
    /// A full bucket.
    pub fn new(qps: u32, burst: u32) -> Self {
        Self::starting_at(qps, burst, Instant::now())
    }

    /// A full bucket as of `now` (tests drive the clock).
    pub fn starting_at(qps: u32, burst: u32, now: Instant) -> Self {
        let capacity = u128::from(burst) * TOKEN;
        Self {
            qps: u128::from(qps),
            capacity,
            state: Mutex::new((capacity, now)),
        }
    }

    /// Takes a token now, if there is one.
    pub fn allow(&self) -> bool {
        self.allow_at(Instant::now())
    }

    /// Takes a token at `now`, if there is one.
    pub fn allow_at(&self, now: Instant) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, since) = *state;
        let elapsed = now.saturating_duration_since(since).as_nanos();
        let tokens = tokens
            .saturating_add(elapsed.saturating_mul(self.qps))
            .min(self.capacity);
        let at = now.max(since);
        let granted = tokens >= TOKEN;
        *state = (if granted { tokens - TOKEN } else { tokens }, at);
        granted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_refill_at_qps() {
        let t0 = Instant::now();
        let limiter = RateLimiter::starting_at(100, 10, t0);
        let granted = (0..25).filter(|_| limiter.allow_at(t0)).count();
        assert_eq!(granted, 10, "the burst");
        assert!(
            !limiter.allow_at(t0 + Duration::from_millis(5)),
            "half a token"
        );
        assert!(
            limiter.allow_at(t0 + Duration::from_millis(10)),
            "one token per 10ms"
        );
        assert!(!limiter.allow_at(t0 + Duration::from_millis(10)));
        // A long pause refills only up to the burst.
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..25).filter(|_| limiter.allow_at(later)).count(), 10);
    }

    #[test]
    fn one_second_grants_qps_after_the_burst() {
        let t0 = Instant::now();
        let limiter = RateLimiter::starting_at(100, 10, t0);
        let granted = (0..=1000)
            .filter(|ms| limiter.allow_at(t0 + Duration::from_millis(*ms)))
            .count();
        // 10 of burst plus one per 10 ms over one second.
        assert_eq!(granted, 110);
    }
}
