//! Telling from a latency-mode thread's own yields that the machine's cores are busy with other work
//! ([`YieldWatch`]), so that the thread waits as the default mode's threads do while they are.
//!
//! The latency mode keeps the device's idle threads yielding instead of parking: on a machine with cores to
//! spare, work that arrives is found within a yield. Beside threads that never yield (another process's busy
//! loops), Linux's EEVDF scheduler charges each yield as a used slice, so a thread that keeps yielding falls
//! behind them: a call then took 23-26 µs instead of 1.1 µs, for seconds at a time, where a parked thread, woken,
//! preempts a busy one at once (the device's threads ask for short slices). One yield that takes long says
//! little (an interrupt, a tick, another of the device's own threads finishing its round); most of the recent
//! ones taking long says that the core went to someone who kept it.

use std::time::{Duration, Instant};

/// A yield that took longer than this gave the core to a thread that did not give it back at once.
const SLOW_YIELD: Duration = Duration::from_micros(20);
/// Of the last 32 yields, this many slow ones say that the cores are busy.
const BUSY_WHEN_SLOW: u32 = 16;
/// How long a thread that found the cores busy waits as the default mode's do, before it yields again.
const BUSY_FOR: Duration = Duration::from_millis(10);

/// One thread's record of its recent yields (see the module's doc).
#[derive(Debug, Default)]
pub(crate) struct YieldWatch {
    /// One bit per recent yield, the newest lowest: set for a slow one.
    slow: u32,
    /// Until when the cores count as busy.
    busy_until: Option<Instant>,
}

impl YieldWatch {
    /// Whether the cores count as busy now (the thread should wait as the default mode's do). Reads the clock
    /// only while they do.
    pub(crate) fn cores_busy(&mut self) -> bool {
        self.busy_until.is_some() && self.cores_busy_at(Instant::now())
    }

    /// Whether the cores were found busy and the wait that follows has not been seen to end (no clock read: it
    /// may have ended since).
    pub(crate) fn found_busy(&self) -> bool {
        self.busy_until.is_some()
    }

    fn cores_busy_at(&mut self, now: Instant) -> bool {
        match self.busy_until {
            Some(until) if now < until => true,
            Some(_) => {
                self.busy_until = None;
                false
            }
            None => false,
        }
    }

    /// Gives the core away once, and records how long that took.
    pub(crate) fn timed_yield(&mut self) {
        let before = Instant::now();
        std::thread::yield_now();
        let after = Instant::now();
        self.record(after.duration_since(before), after);
    }

    /// Records a yield that took `took` and ended at `now`.
    fn record(&mut self, took: Duration, now: Instant) {
        self.slow = (self.slow << 1) | u32::from(took > SLOW_YIELD);
        if self.slow.count_ones() >= BUSY_WHEN_SLOW {
            self.slow = 0;
            self.busy_until = Some(now + BUSY_FOR);
            tracing::trace!(for_ = ?BUSY_FOR, "most recent yields were slow: the cores are busy; waiting as the default mode");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: Duration = Duration::from_micros(2);
    const SLOW: Duration = Duration::from_micros(500);

    #[test]
    fn a_slow_yield_now_and_then_does_not_make_the_cores_busy() {
        let mut watch = YieldWatch::default();
        let start = Instant::now();
        // one yield in four slow, for a long while: 8 of every 32
        for i in 0..10_000u32 {
            let now = start + Duration::from_micros(u64::from(i) * 10);
            watch.record(if i % 4 == 0 { SLOW } else { FAST }, now);
            assert!(!watch.cores_busy_at(now), "yield {i}");
        }
    }

    #[test]
    fn mostly_slow_yields_make_the_cores_busy_for_a_while_then_the_watch_starts_over() {
        let mut watch = YieldWatch::default();
        let start = Instant::now();
        let mut now = start;
        let mut yields = 0;
        loop {
            // three of every four slow
            watch.record(if yields % 4 == 3 { FAST } else { SLOW }, now);
            yields += 1;
            if watch.cores_busy_at(now) {
                break;
            }
            now += SLOW;
            assert!(yields < 32, "still not busy after {yields} mostly slow yields");
        }
        assert!(yields >= BUSY_WHEN_SLOW, "busy after {yields} yields");
        let tripped = now;
        assert!(watch.cores_busy_at(tripped + BUSY_FOR - Duration::from_micros(1)));
        assert!(!watch.cores_busy_at(tripped + BUSY_FOR + Duration::from_micros(1)));
        // the record starts over: the slow yields before the busy spell do not count again
        watch.record(SLOW, tripped + BUSY_FOR * 2);
        assert!(!watch.cores_busy_at(tripped + BUSY_FOR * 2));
    }
}
