//! Restart intensity: a sliding window of restart times, as OTP's `add_restart`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// At most `max` restarts within any `period`; the restart that makes it `max + 1` is refused.
#[derive(Debug)]
pub(crate) struct Intensity {
    max: u32,
    period: Duration,
    restarts: VecDeque<Instant>,
}

impl Intensity {
    pub(crate) fn new(max: u32, period: Duration) -> Self {
        Self { max, period, restarts: VecDeque::new() }
    }

    /// Records a restart at `now`; false when it exceeds the intensity (the supervisor must shut down).
    pub(crate) fn add_restart(&mut self, now: Instant) -> bool {
        self.forget_before(now);
        self.restarts.push_back(now);
        self.restarts.len() as u64 <= u64::from(self.max)
    }

    /// How many more restarts at `now` would still be allowed.
    pub(crate) fn remaining(&mut self, now: Instant) -> u32 {
        self.forget_before(now);
        self.max.saturating_sub(u32::try_from(self.restarts.len()).unwrap_or(u32::MAX))
    }

    /// Drops the restarts that have left the window ending at `now`.
    fn forget_before(&mut self, now: Instant) {
        while let Some(&oldest) = self.restarts.front() {
            if now.saturating_duration_since(oldest) > self.period {
                self.restarts.pop_front();
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_the_restart_past_intensity() {
        let t0 = Instant::now();
        let mut i = Intensity::new(2, Duration::from_secs(5));
        assert!(i.add_restart(t0));
        assert!(i.add_restart(t0 + Duration::from_secs(1)));
        assert!(!i.add_restart(t0 + Duration::from_secs(2)));
    }

    #[test]
    fn restarts_spaced_wider_than_the_period_never_trip() {
        let t0 = Instant::now();
        let mut i = Intensity::new(1, Duration::from_secs(1));
        for n in 0..100 {
            assert!(i.add_restart(t0 + Duration::from_millis(1001 * n)));
        }
    }

    #[test]
    fn remaining_counts_down_to_the_refused_restart_and_recovers_as_the_window_slides() {
        let t0 = Instant::now();
        let mut i = Intensity::new(2, Duration::from_secs(5));
        assert_eq!(i.remaining(t0), 2);
        assert!(i.add_restart(t0));
        assert_eq!(i.remaining(t0), 1);
        assert!(i.add_restart(t0));
        assert_eq!(i.remaining(t0), 0);
        assert_eq!(i.remaining(t0 + Duration::from_secs(6)), 2);
    }

    #[test]
    fn zero_intensity_refuses_every_restart() {
        assert!(!Intensity::new(0, Duration::from_secs(5)).add_restart(Instant::now()));
    }
}
