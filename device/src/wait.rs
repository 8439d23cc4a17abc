//! How host threads wait on the device: a [`Parker`] that never loses a wake-up, the adaptive
//! [`IdleBackoff`] of the executor's workers and the poller (spin, then yield, then park; never park in the
//! latency mode), and [`Retry`], the
//! bounded spin/yield/sleep loop of a producer waiting for room in a ring.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sync::lock;

/// Wakes parked threads without losing a wake-up that races with parking.
pub(crate) struct Parker {
    epoch: AtomicU64,
    sleepers: AtomicU32,
    lock: Mutex<()>,
    cond: Condvar,
}

impl Parker {
    pub(crate) fn new() -> Self {
        Self { epoch: AtomicU64::new(0), sleepers: AtomicU32::new(0), lock: Mutex::new(()), cond: Condvar::new() }
    }

    /// The current epoch; pass it to [`Parker::park`].
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Sleeps up to `timeout` unless [`Parker::wake`] was called since `seen` was read.
    pub(crate) fn park(&self, seen: u64, timeout: Duration) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let guard = lock(&self.lock);
        if self.epoch.load(Ordering::SeqCst) == seen {
            let _ = self.cond.wait_timeout(guard, timeout);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes every parked thread, and makes the next `park` with an older epoch return at once.
    pub(crate) fn wake(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = lock(&self.lock);
            self.cond.notify_all();
        }
    }
}

/// Adaptive backoff of a thread with nothing to do: spin, then yield, then park with a growing timeout (up to
/// `park_max`). Reset it whenever the thread finds work.
pub(crate) struct IdleBackoff {
    idle: u32,
    spin: u32,
    park_max: Duration,
    /// Past the spinning rounds, yield forever instead of parking (the latency mode).
    never_park: bool,
}

impl IdleBackoff {
    pub(crate) fn new(spin: u32, park_max: Duration) -> Self {
        Self { idle: 0, spin, park_max, never_park: false }
    }

    /// With `latency_mode`, the thread never parks: after spinning it yields, so work that arrives while it
    /// is idle costs no wake-up (and the thread keeps a core busy).
    pub(crate) fn latency_mode(mut self, latency_mode: bool) -> Self {
        self.never_park = latency_mode;
        self
    }

    pub(crate) fn reset(&mut self) {
        self.idle = 0;
    }

    /// One idle round; `seen` is the parker epoch read before the round's work.
    pub(crate) fn idle(&mut self, parker: &Parker, seen: u64) {
        self.idle = self.idle.saturating_add(1);
        if self.idle <= self.spin {
            for _ in 0..32 {
                std::hint::spin_loop();
            }
        } else if self.never_park || self.idle <= self.spin.saturating_mul(2) {
            std::thread::yield_now();
        } else {
            let shift = (self.idle - self.spin * 2).min(16);
            let timeout = Duration::from_micros(50u64 << shift).min(self.park_max);
            parker.park(seen, timeout);
        }
    }
}

/// A producer waiting for room in a ring the device drains: yields for the first rounds, then sleeps `nap`
/// between checks, until a deadline.
pub(crate) struct Retry {
    rounds: u32,
    nap: Duration,
}

impl Retry {
    /// Rounds that yield before the waits start sleeping.
    const YIELD_ROUNDS: u32 = 64;

    pub(crate) fn new(nap: Duration) -> Self {
        Self { rounds: 0, nap }
    }

    /// Waits one round; false (without waiting) once `deadline` has passed.
    pub(crate) fn again(&mut self, deadline: Instant) -> bool {
        if Instant::now() >= deadline {
            return false;
        }
        self.rounds += 1;
        if self.rounds > Self::YIELD_ROUNDS {
            std::thread::sleep(self.nap);
        } else {
            std::thread::yield_now();
        }
        true
    }
}
